//! `drmas bench offload`: a training model (weights, AdamW moments, f32 master weights
//! for bf16) offloaded to host memory and brought back through its worker, beside a
//! plain copy of the same number of bytes to pinned host memory and back, measured in
//! the same run. Prints one JSON line.

use drmas::model::load_pretrained;
use drmas::pool::{Backend, ModelBackend, OffloadParts, WorkerConfig, spawn_worker};
use std::{path::PathBuf, process::ExitCode, time::Instant};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    model: PathBuf,
    /// `cpu`, `cuda:N` or `auto` (offload on the CPU copies within host memory).
    #[arg(long, default_value = "cpu", value_parser = super::values::device)]
    device: drmas::pool::DeviceSpec,
    /// f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    dtype: drmas::model::Dtype,
    /// Round trips measured (after one warm-up).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.rounds >= 1, "--rounds must be at least 1");
    let device = args.device.single()?;
    let kind = args.dtype.kind();
    let dir = args.model.clone();
    let handle = spawn_worker("policy", WorkerConfig::default(), move || {
        let model = load_pretrained(&dir, device, Some(kind))?;
        let mut b = ModelBackend::new(model, None, dir)
            .with_training(super::bench_train::bench_settings(1.0), None);
        b.offload_on_cpu = true;
        Ok(Box::new(b) as Box<dyn Backend>)
    })?;
    let resident = handle.residency()?.on_device;
    let mut out_s = Vec::new();
    let mut in_s = Vec::new();
    for round in 0..=args.rounds {
        let started = Instant::now();
        handle.offload(OffloadParts::All)?;
        let offload = started.elapsed().as_secs_f64();
        let started = Instant::now();
        handle.call("onload", |b, _| b.onload())?;
        let onload = started.elapsed().as_secs_f64();
        if round > 0 {
            out_s.push(offload);
            in_s.push(onload);
        }
    }
    let best = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    // The same bytes as one tensor, to pinned host memory and back.
    let (copy_out, copy_in) = {
        let _guard = tch::no_grad_guard();
        let n = (resident / 4) as i64;
        let on_device = tch::Tensor::ones([n], (tch::Kind::Float, device));
        let mut host = tch::Tensor::empty([n], (tch::Kind::Float, tch::Device::Cpu));
        if device.is_cuda() {
            host = host.pin_memory(device);
        }
        let mut back = tch::Tensor::empty([n], (tch::Kind::Float, device));
        let (mut o, mut i) = (f64::MAX, f64::MAX);
        for _ in 0..=args.rounds {
            drmas::pool::synchronize(device);
            let started = Instant::now();
            host.copy_(&on_device);
            drmas::pool::synchronize(device);
            o = o.min(started.elapsed().as_secs_f64());
            let started = Instant::now();
            back.copy_(&host);
            drmas::pool::synchronize(device);
            i = i.min(started.elapsed().as_secs_f64());
        }
        (o, i)
    };
    let gb = resident as f64 / 1e9;
    let json = serde_json::json!({
        "impl": "drmas",
        "device": args.device.to_string(),
        "dtype": args.dtype.name(),
        "bytes": resident,
        "offload_gb_s": gb / best(&out_s),
        "onload_gb_s": gb / best(&in_s),
        "pinned_copy_d2h_gb_s": gb / copy_out,
        "pinned_copy_h2d_gb_s": gb / copy_in,
        "offload_seconds": best(&out_s),
        "onload_seconds": best(&in_s),
    });
    outln!("{json}");
    Ok(ExitCode::SUCCESS)
}
