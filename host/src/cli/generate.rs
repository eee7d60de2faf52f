//! `drmas generate`: chat with a checkpoint from the command line.

use drmas::{
    model::{
        GenerationRequest, SamplingParams, StopStrings, TextTokenizer, checked_config,
        default_kind, generate, load_pretrained, memory,
    },
    pool::DeviceSpec,
};
use drmas_plugin_api::Message;
use std::{path::PathBuf, process::ExitCode, time::Instant};

#[derive(clap::Args)]
pub struct Args {
    /// An HF checkpoint folder (config.json, safetensors, tokenizer files).
    #[arg(long)]
    model: PathBuf,
    /// The user message.
    #[arg(long)]
    prompt: String,
    /// A system message (the chat template's default when absent).
    #[arg(long)]
    system: Option<String>,
    /// Completions to sample.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    n: u64,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, value_parser = super::values::temperature, allow_negative_numbers = true)]
    temperature: f64,
    /// Nucleus mass, in (0, 1].
    #[arg(long, default_value_t = 1.0, value_parser = super::values::top_p, allow_negative_numbers = true)]
    top_p: f64,
    /// Keep the K most likely tokens (0 = all).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32), allow_negative_numbers = true)]
    top_k: u32,
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..))]
    max_new_tokens: u64,
    /// Stop when the completion contains this text (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `cpu`, `cuda:N` or `auto`.
    #[arg(long, default_value = "auto", value_parser = super::values::device)]
    device: DeviceSpec,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let device = args.device.single()?;
    let started = Instant::now();
    let tokenizer = TextTokenizer::from_dir(&args.model)?;
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::system(system.clone()));
    }
    messages.push(Message::user(args.prompt.clone()));
    let prompt = tokenizer.chat_ids(&messages)?;

    // The request is checked against the model's context and the machine's memory
    // before the weights are loaded or a request is built.
    let config = checked_config(&args.model)?;
    config.check_context(
        || {
            format!(
                "{}: the prompt of {} tokens + --max-new-tokens {}",
                args.model.display(),
                prompt.len(),
                args.max_new_tokens
            )
        },
        (prompt.len() as u64).saturating_add(args.max_new_tokens),
    )?;
    memory::check_generation(
        &config,
        default_kind(device),
        device,
        args.n,
        prompt.len() as u64,
        args.max_new_tokens,
    )
    .map_err(|e| anyhow::anyhow!("--n {}: {e}", args.n))?;

    let model = load_pretrained(&args.model, device, None)?;
    errln!(
        "loaded {} on {device:?} in {:.1}s",
        args.model.display(),
        started.elapsed().as_secs_f64()
    );
    if args.n > 1 && args.temperature == 0.0 {
        errln!(
            "note: --temperature 0 is greedy; the {} completions will be identical",
            args.n
        );
    }
    let requests: Vec<GenerationRequest> = (0..args.n)
        .map(|i| GenerationRequest {
            prompt: prompt.clone(),
            params: SamplingParams {
                temperature: args.temperature,
                top_p: args.top_p,
                top_k: i64::from(args.top_k),
                max_new_tokens: args.max_new_tokens as usize,
                stop_token_ids: tokenizer.stop_token_ids().to_vec(),
                seed: args.seed.wrapping_add(i),
            },
            shared_prefix: 0,
        })
        .collect();
    let stops = StopStrings {
        tokenizer: &tokenizer,
        stops: vec![args.stop.clone(); requests.len()],
    };
    let started = Instant::now();
    let generations = generate(&model, &requests, Some(&stops))
        .map_err(|e| anyhow::anyhow!("{}: generation: {e}", args.model.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    let tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
    for (i, g) in generations.iter().enumerate() {
        if args.n > 1 {
            outln!("--- {} ({} tokens, {:?})", i + 1, g.tokens.len(), g.finish);
        }
        outln!("{}", tokenizer.decode(&g.tokens, true)?.trim_end());
    }
    errln!(
        "{} prompt tokens, {tokens} new tokens in {seconds:.2}s ({:.1} tok/s)",
        prompt.len(),
        tokens as f64 / seconds
    );
    Ok(ExitCode::SUCCESS)
}
