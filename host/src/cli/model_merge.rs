//! `drmas model merge`: a base model and a PEFT LoRA adapter merged into one full HF
//! checkpoint (W + scale · B A in float32, rounded once to the saved dtype), which
//! transformers loads without PEFT.

use anyhow::Context;
use drmas::output::Input;
use drmas::{
    model::{Decoder, Dtype, load_pretrained, lora},
    pool::load_adapter_dir,
};
use std::{path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// The base model's HF folder.
    #[arg(long)]
    base: PathBuf,
    /// A PEFT adapter folder (adapter_config.json, adapter_model.safetensors), e.g. a
    /// LoRA model's folder in a drmas checkpoint.
    #[arg(long)]
    adapter: PathBuf,
    /// The merged checkpoint's folder (new, empty, or one drmas wrote with --force).
    #[arg(long)]
    out: PathBuf,
    /// Replace `out` when it is a model folder drmas wrote.
    #[arg(long)]
    force: bool,
    /// dtype of the saved weights: f32 (default) or bf16.
    #[arg(long, default_value = "f32", value_parser = super::values::merge_dtype)]
    dtype: Dtype,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::check_replaceable(&args.out, args.force, &super::replace::MODEL_FOLDER)?;
    drmas::output::check_not_an_input(
        &args.out,
        &[
            Input::new("the base", &args.base),
            Input::new("the adapter", &args.adapter),
        ],
    )?;
    let config = lora::read_peft_config(&args.adapter)?;
    // Merged in float32; rounded once at the end when bf16 is asked for.
    let mut model: Decoder = load_pretrained(&args.base, tch::Device::Cpu, Some(tch::Kind::Float))
        .with_context(|| format!("loading the base {}", args.base.display()))?;
    let slot = model.add_adapter(&config, 0);
    load_adapter_dir(&mut model, slot, &args.adapter)
        .with_context(|| format!("loading the adapter {}", args.adapter.display()))?;
    model.merge_adapter(slot);
    if args.dtype != Dtype::F32 {
        model.vs.set_kind(args.dtype.kind());
    }
    drmas::model::save_checkpoint(&model, &args.base, &args.out)?;
    errln!(
        "merged {} (rank {}, alpha {}, {}) into {} -> {}",
        args.adapter.display(),
        config.rank,
        config.alpha,
        config.targets.join(", "),
        args.base.display(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
