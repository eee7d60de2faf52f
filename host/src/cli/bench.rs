//! `drmas bench generate`: fixed generation work for side-by-side comparison with the
//! transformers peer (scripts/bench-generate.sh runs both).

use drmas::model::{GenerationRequest, SamplingParams, TextTokenizer, generate, load_pretrained};
use drmas_plugin_api::Message;
use std::{io::BufRead, path::PathBuf, process::ExitCode, time::Instant};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Exactly N new tokens per prompt (no stop tokens), one batch; prints a JSON line.
    Generate(GenerateArgs),
    /// GRPO optimizer steps on fixed work (scripts/bench-train.sh runs TRL beside it).
    Train(super::bench_train::Args),
    /// N training steps of an experiment, by phase, beside the bounds of their work.
    Step(super::bench_step::Args),
    /// Offload and onload of a training model beside a plain pinned host↔device copy.
    Offload(super::bench_offload::Args),
    /// Each tracking sink's cost per step, on a real run's lines replayed, beside the
    /// run's own step time (scripts/bench-tracking.sh).
    Tracking(super::bench_tracking::Args),
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[arg(long)]
    model: PathBuf,
    /// JSONL with a `prompt` field per line, each sent as one user message.
    #[arg(long)]
    prompts: PathBuf,
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    /// Intra-op threads (libtorch).
    #[arg(long, default_value_t = 2)]
    threads: i32,
    /// Greedy instead of sampling at temperature 1.
    #[arg(long)]
    greedy: bool,
    /// `cpu`, `cuda:N` or `auto`.
    #[arg(long, default_value = "cpu", value_parser = super::values::device)]
    device: drmas::pool::DeviceSpec,
    /// f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    dtype: drmas::model::Dtype,
    /// Rows in the batch: the prompts repeated (each row its own seed) up to this many;
    /// all the prompts once when absent.
    #[arg(long)]
    batch: Option<usize>,
    /// After the timed run, count the ATen operators of one decode step (two short
    /// untimed generations of the same batch, differenced: the prefill cancels).
    #[arg(long)]
    count_ops: bool,
    /// On a GPU, the eager formulas instead of the fused kernels (what the CPU runs).
    #[arg(long)]
    eager: bool,
    /// Write each row's generated tokens here (JSON lines), to compare decode paths.
    #[arg(long)]
    tokens_out: Option<PathBuf>,
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let args = match cmd {
        Command::Generate(args) => args,
        Command::Train(args) => return super::bench_train::run(args),
        Command::Offload(args) => return super::bench_offload::run(args),
        Command::Step(args) => return super::bench_step::run(args),
        Command::Tracking(args) => return super::bench_tracking::run(args),
    };
    tch::set_num_threads(args.threads);
    drmas::model::set_fused_kernels(!args.eager);
    let tokenizer = TextTokenizer::from_dir(&args.model)?;
    let device = args.device.single()?;
    let model = load_pretrained(&args.model, device, Some(args.dtype.kind()))?;
    let mut prompts = read_prompts(&args.prompts)?;
    anyhow::ensure!(
        !prompts.is_empty(),
        "{}: no prompts",
        args.prompts.display()
    );
    if let Some(batch) = args.batch {
        anyhow::ensure!(batch >= 1, "--batch must be at least 1");
        prompts = prompts.iter().cycle().take(batch).cloned().collect();
    }
    let mut requests = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        requests.push(GenerationRequest {
            prompt: tokenizer.chat_ids(&[Message::user(prompt)])?,
            params: SamplingParams {
                temperature: if args.greedy { 0.0 } else { 1.0 },
                max_new_tokens: args.max_new_tokens,
                seed: i as u64,
                ..Default::default()
            },
            shared_prefix: 0,
        });
    }
    let started = Instant::now();
    let generations = generate(&model, &requests, None)?;
    drmas::pool::synchronize(device);
    let seconds = started.elapsed().as_secs_f64();
    if let Some(path) = &args.tokens_out {
        let text: String = generations
            .iter()
            .map(|g| format!("{}\n", serde_json::json!(g.tokens)))
            .collect();
        drmas::output::write_atomic(path, text.as_bytes())?;
    }
    let new_tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
    // Each decode step reads every weight once: at the device's copy bandwidth,
    // measured here, that bounds the tokens a batch of this size can make per second.
    let weight_bytes: u64 = model
        .vs
        .variables()
        .values()
        .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
        .sum();
    let bandwidth = copy_bandwidth(device);
    let rows = requests.len() as f64;
    let bound = rows * bandwidth / weight_bytes as f64;
    // A step also reads every row's keys and values so far: on average over the
    // decode, the prompt and half the new tokens.
    let c = &model.config;
    let kv_per_token = 2
        * c.num_layers
        * c.num_kv_heads
        * c.head_dim
        * args.dtype.kind().elt_size_in_bytes() as i64;
    let mean_prompt = requests.iter().map(|r| r.prompt.len()).sum::<usize>() as f64 / rows.max(1.0);
    let kv_bytes = rows * kv_per_token as f64 * (mean_prompt + args.max_new_tokens as f64 / 2.0);
    let step_bound = rows * bandwidth / (weight_bytes as f64 + kv_bytes);
    let ops = if args.count_ops {
        Some(ops_per_decode_step(&model, &requests)?)
    } else {
        None
    };
    let json = serde_json::json!({
        "impl": "drmas",
        "mode": if args.greedy { "greedy" } else { "sample" },
        "kernels": if args.eager || !device.is_cuda() { "eager" } else { "fused" },
        "device": args.device.to_string(),
        "dtype": args.dtype.name(),
        "prompts": requests.len(),
        "new_tokens": new_tokens,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "tokens_per_s": (new_tokens as f64 / seconds * 10.0).round() / 10.0,
        "peak_rss_mib": peak_rss_mib(),
        "weight_bytes": weight_bytes,
        "device_copy_gb_s": (bandwidth / 1e8).round() / 10.0,
        "weight_bandwidth_bound_tokens_per_s": bound.round(),
        "kv_cache_bytes_per_step_mean": kv_bytes.round(),
        "bandwidth_bound_tokens_per_s": step_bound.round(),
        "ms_per_decode_step": (seconds * 1000.0 / args.max_new_tokens.max(1) as f64 * 100.0).round() / 100.0,
        "aten_ops_per_decode_step": ops.map(|o: drmas_kernels::OpCount| o.all),
        "outermost_ops_per_decode_step": ops.map(|o| o.outermost),
    });
    outln!("{json}");
    Ok(ExitCode::SUCCESS)
}

/// The ATen operators one decode step of `requests` dispatches: generations of 4 and
/// of 12 new tokens (no stop tokens), differenced and divided by the 8 steps between.
fn ops_per_decode_step(
    model: &drmas::model::Decoder,
    requests: &[GenerationRequest],
) -> anyhow::Result<drmas_kernels::OpCount> {
    let with = |n: usize| -> anyhow::Result<drmas_kernels::OpCount> {
        let short: Vec<GenerationRequest> = requests
            .iter()
            .map(|r| GenerationRequest {
                params: SamplingParams {
                    max_new_tokens: n,
                    ..r.params.clone()
                },
                ..r.clone()
            })
            .collect();
        let counter = drmas_kernels::OpCounter::start()?;
        generate(model, &short, None)?;
        Ok(counter.read())
    };
    let (a, b) = (with(4)?, with(12)?);
    let d = b - a;
    Ok(drmas_kernels::OpCount {
        all: d.all / 8,
        outermost: d.outermost / 8,
    })
}

/// Bytes per second one device-to-device copy of 512 MiB reads and writes (read + write
/// counted), the best of five.
pub fn copy_bandwidth(device: tch::Device) -> f64 {
    let _guard = tch::no_grad_guard();
    let n = 128 << 20; // float32 elements: 512 MiB
    let src = tch::Tensor::ones([n], (tch::Kind::Float, device));
    let mut dst = tch::Tensor::empty([n], (tch::Kind::Float, device));
    let sync = || drmas::pool::synchronize(device);
    dst.copy_(&src);
    sync();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        dst.copy_(&src);
        sync();
        best = best.min(started.elapsed().as_secs_f64());
    }
    2.0 * (n * 4) as f64 / best
}

/// The `prompt` field of each line of a JSONL file.
pub fn read_prompts(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut prompts = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        let row: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))?;
        let prompt = row["prompt"].as_str().ok_or_else(|| {
            anyhow::anyhow!("{}:{}: no string field `prompt`", path.display(), i + 1)
        })?;
        prompts.push(prompt.to_string());
    }
    Ok(prompts)
}

/// Peak resident memory of this process (VmHWM), in MiB.
pub fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
}
