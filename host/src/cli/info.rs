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
    println!("drmas {}", drmas::VERSION);
    println!("plugin API {}", drmas_plugin_api::API_VERSION);
    print!("libtorch {}", rt.libtorch_version);
    match &rt.libtorch_dir {
        Some(dir) => println!(" ({})", dir.display()),
        None => println!(),
    }
    println!("threads {}", rt.threads);
    println!(
        "cuda available: {} ({} device{}), cudnn: {}",
        if rt.cuda_available { "yes" } else { "no" },
        rt.cuda_device_count,
        if rt.cuda_device_count == 1 { "" } else { "s" },
        if rt.cudnn_available { "yes" } else { "no" },
    );
    for gpu in driver_gpus() {
        println!(
            "  gpu {}: {} ({} MiB)",
            gpu.index, gpu.name, gpu.memory_total_mib
        );
    }
    for i in 0..rt.cuda_device_count.max(0) as usize {
        match smoke_test(tch::Device::Cuda(i)) {
            Ok(8.0) => println!("  cuda:{i}: matmul ok"),
            Ok(v) => println!("  cuda:{i}: matmul gave {v}, expected 8"),
            Err(e) => println!("  cuda:{i}: matmul failed: {e}"),
        }
    }

    let dirs = args.plugin_dirs.all(&[])?;
    let registry = Registry::discover(&dirs, &args.plugin_dirs.trust(&Default::default())?);
    if dirs.is_empty() {
        println!("plugin dirs: none (set DRMAS_PLUGIN_PATH or pass --plugin-dir)");
    } else {
        println!("plugin dirs:");
        for d in &dirs {
            println!("  {}", d.display());
        }
    }
    println!("plugins:");
    for p in registry.plugins() {
        println!(
            "  {} {} ({}): {} components",
            p.name,
            p.version,
            p.source,
            p.components.len()
        );
    }
    for f in registry.failures() {
        println!("  skipped: {f}");
    }
    Ok(ExitCode::SUCCESS)
}
