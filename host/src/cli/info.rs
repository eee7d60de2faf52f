//! `drmas info`.

use super::PluginDirs;
use drmas::{
    plugin::Registry,
    pool::{driver_gpus, runtime_info, smoke_test},
};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = runtime_info();
    outln!("drmas {}", drmas::VERSION);
    outln!("plugin API {}", drmas_plugin_api::API_VERSION);
    out!("libtorch {}", rt.libtorch_version);
    match &rt.libtorch_dir {
        Some(dir) => outln!(" ({})", dir.display()),
        None => outln!(),
    }
    outln!("threads {}", rt.threads);
    outln!(
        "cuda available: {} ({} device{}), cudnn: {}",
        if rt.cuda_available { "yes" } else { "no" },
        rt.cuda_device_count,
        if rt.cuda_device_count == 1 { "" } else { "s" },
        if rt.cudnn_available { "yes" } else { "no" },
    );
    for gpu in driver_gpus() {
        outln!(
            "  gpu {}: {} ({} MiB)",
            gpu.index,
            gpu.name,
            gpu.memory_total_mib
        );
    }
    for i in 0..rt.cuda_device_count.max(0) as usize {
        match smoke_test(tch::Device::Cuda(i)) {
            Ok(8.0) => outln!("  cuda:{i}: matmul ok"),
            Ok(v) => outln!("  cuda:{i}: matmul gave {v}, expected 8"),
            Err(e) => outln!("  cuda:{i}: matmul failed: {e}"),
        }
    }

    let dirs = args.plugin_dirs.all(&[])?;
    let registry = Registry::discover(&dirs, &args.plugin_dirs.trust(&Default::default())?);
    if dirs.is_empty() {
        outln!("plugin dirs: none (set DRMAS_PLUGIN_PATH or pass --plugin-dir)");
    } else {
        outln!("plugin dirs:");
        for d in &dirs {
            outln!("  {}", d.display());
        }
    }
    outln!("plugins:");
    for p in registry.plugins() {
        outln!(
            "  {} {} ({}): {} components",
            p.name,
            p.version,
            p.source,
            p.components.len()
        );
    }
    for f in registry.failures() {
        outln!("  skipped: {f}");
    }
    Ok(ExitCode::SUCCESS)
}
