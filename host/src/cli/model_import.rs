//! `drmas model import GGUF_FILE OUT_DIR`: a llama.cpp GGUF file (Llama, Qwen2, Qwen3;
//! F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 and Q2_K..Q6_K) dequantized into an HF
//! checkpoint folder drmas and transformers load.

use anyhow::Context;
use drmas::model::gguf::import_gguf;
use std::{io::IsTerminal, path::PathBuf, process::ExitCode, time::Instant};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file to import.
    #[arg(value_name = "GGUF_FILE")]
    gguf: PathBuf,
    /// The checkpoint folder to write (config.json, model.safetensors, tokenizer files).
    #[arg(value_name = "OUT_DIR")]
    out: PathBuf,
    /// Replace OUT_DIR if it is a model folder drmas wrote (an import or a checkpoint).
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::check_replaceable(&args.out, args.force, &super::replace::MODEL_FOLDER)?;
    drmas::output::check_not_an_input(
        &args.out,
        &[drmas::output::Input::new("the GGUF file", &args.gguf)],
    )?;
    let start = Instant::now();
    let interactive = std::io::stderr().is_terminal();
    let summary = import_gguf(&args.gguf, &args.out, |i, n, name| {
        if interactive {
            err!("\r\x1b[2Kdequantizing tensor {i}/{n}: {name}");
            if i == n {
                errln!();
            }
        } else if i == n || i * 10 / n != (i - 1) * 10 / n {
            // Logs get a line every tenth of the way, not one per tensor.
            errln!("dequantizing tensor {i}/{n}: {name}");
        }
    })
    .with_context(|| format!("importing {}", args.gguf.display()))?;
    let s = &summary;
    let types: Vec<String> = s.types.iter().map(|(t, n)| format!("{n} {t}")).collect();
    outln!("imported {} -> {}", args.gguf.display(), s.out.display());
    outln!(
        "  {}: {} layers, hidden {}, {:.1}M parameters, {} tensors ({}), {} embeddings",
        s.architecture.gguf_name(),
        s.layers,
        s.hidden_size,
        s.parameters as f64 / 1e6,
        s.tensors,
        types.join(", "),
        if s.tied_embeddings { "tied" } else { "untied" },
    );
    outln!(
        "  tokenizer: {} tokens, {} merges, {} special, pre-tokenizer {:?}, chat template: {}",
        s.vocab_size,
        s.merges,
        s.special_tokens,
        s.pre_tokenizer,
        if s.chat_template { "yes" } else { "no" },
    );
    outln!(
        "  wrote {:.1} MiB of F32 safetensors in {:.1}s",
        s.weight_bytes as f64 / (1024.0 * 1024.0),
        start.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
