//! `drmas model logits`: logits of given token ids, for comparing a checkpoint with
//! another implementation (the parity scripts use it on GPUs).

use drmas::model::{Dtype, load_pretrained, memory, positions_from_mask, prefill_mask};
use std::{path::PathBuf, process::ExitCode};
use tch::{Kind, Tensor};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    model: PathBuf,
    /// safetensors with `input_ids` and `attention_mask` [B, T] (int64, left padded).
    #[arg(long)]
    input: PathBuf,
    /// Where to write `logits` [B, T, V] as float32 safetensors.
    #[arg(long)]
    output: PathBuf,
    #[arg(long, default_value = "cpu", value_parser = super::values::device)]
    device: drmas::pool::DeviceSpec,
    /// f32, bf16 or f16 (default: f32 on CPU, bf16 on CUDA).
    #[arg(long)]
    dtype: Option<Dtype>,
    /// A PEFT LoRA adapter folder to apply on top of `--model`.
    #[arg(long)]
    adapter: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut inputs = vec![
        drmas::output::Input::new("--model", &args.model),
        drmas::output::Input::new("--input", &args.input),
    ];
    if let Some(a) = &args.adapter {
        inputs.push(drmas::output::Input::new("--adapter", a));
    }
    drmas::output::check_not_an_input(&args.output, &inputs)?;
    drmas::output::check_file_target(&args.output)?;
    let device = args.device.single()?;
    let kind = args.dtype.map(Dtype::kind);
    let mut model = load_pretrained(&args.model, device, kind)?;
    let adapter = match &args.adapter {
        Some(dir) => {
            let config = drmas::model::lora::read_peft_config(dir)?;
            let slot = model.add_adapter(&config, 0);
            drmas::pool::load_adapter_dir(&mut model, slot, dir)?;
            Some(slot)
        }
        None => None,
    };
    let mode = model.mode();
    mode.route_all(adapter);
    let inputs: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(&args.input)?.into_iter().collect();
    let get = |name: &str| {
        inputs
            .get(name)
            .map(|t| t.to_device(device))
            .ok_or_else(|| anyhow::anyhow!("{}: no tensor `{name}`", args.input.display()))
    };
    let ids = get("input_ids")?;
    let mask = get("attention_mask")?;
    let (rows, width) = ids.size2()?;
    model.check_context(
        || format!("{}: input_ids of {width} positions", args.input.display()),
        width as u64,
    )?;
    memory::check_fits(
        &format!("logits of {rows} × {width} positions"),
        &memory::estimate_forward(&model.config, rows as u64, width as u64, model.kind()),
        device,
    )?;
    let logits = tch::no_grad(|| {
        let hidden = model.forward(
            &ids,
            &positions_from_mask(&mask),
            &prefill_mask(&mask),
            None,
        );
        model
            .logits(&hidden)
            .to_kind(Kind::Float)
            .to_device(tch::Device::Cpu)
    });
    drmas::output::write_atomic_with(&args.output, |tmp| {
        Tensor::write_safetensors(&[("logits", &logits)], tmp).map_err(std::io::Error::other)
    })
    .map_err(|e| anyhow::anyhow!("{}: {e}", args.output.display()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use drmas::model::Dtype;

    #[test]
    fn dtype_names_are_checked() {
        let parse_dtype = |text: &str| text.parse::<Dtype>().map(Dtype::kind);
        assert_eq!(parse_dtype("bf16").unwrap(), tch::Kind::BFloat16);
        assert_eq!(parse_dtype("float32").unwrap(), tch::Kind::Float);
        assert_eq!(
            parse_dtype("fp8").unwrap_err().to_string(),
            "unknown dtype `fp8`: expected f32, bf16 or f16"
        );
    }
}
