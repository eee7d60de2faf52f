//! `drmas eval CONFIG`: avg@k and pass@k of the experiment's team on its validation sets.

use super::PluginDirs;
use drmas::eval::{EvalOptions, run_eval};
use drmas::output::write_atomic;
use std::{path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// The experiment file.
    config: PathBuf,
    /// Evaluate these model folders instead (DIR/<model id>, or DIR for every model).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Samples per task.
    #[arg(long, default_value_t = 16)]
    k: usize,
    /// At most N tasks from each validation set.
    #[arg(long)]
    limit: Option<usize>,
    #[arg(long, default_value_t = 0.6)]
    temperature: f64,
    #[arg(long, default_value_t = 0.95)]
    top_p: f64,
    /// An episode succeeds when its team reward is at least this.
    #[arg(long, default_value_t = 1.0)]
    success_threshold: f64,
    /// Write every sample (prompt and response ids, log-probs, scores) as JSONL here.
    #[arg(long)]
    dump_samples: Option<PathBuf>,
    /// Where to write the JSON report (default: <output_dir>/eval.json).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.k == 0 {
        anyhow::bail!("--k must be at least 1");
    }
    let Some(super::CheckedExperiment { exp, registry, .. }) =
        super::load_checked(&args.config, &args.plugin_dirs)
    else {
        return Ok(ExitCode::FAILURE);
    };
    let options = EvalOptions {
        k: args.k,
        limit: args.limit,
        temperature: args.temperature,
        top_p: args.top_p,
        checkpoint: args.checkpoint.clone(),
        success_threshold: args.success_threshold,
        ..EvalOptions::default()
    };
    let (report, outcomes) = run_eval(&exp, &registry, &options)?;
    print!("{}", report.table());

    let out = args
        .out
        .unwrap_or_else(|| exp.output_dir().join("eval.json"));
    // Whole or absent: scripts check for a report's existence.
    write_atomic(&out, serde_json::to_string_pretty(&report)?.as_bytes())
        .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    eprintln!("report: {}", out.display());
    if let Some(path) = args.dump_samples {
        let mut bytes = Vec::new();
        for s in outcomes.iter().flat_map(|o| &o.samples) {
            serde_json::to_writer(&mut bytes, s)?;
            bytes.push(b'\n');
        }
        write_atomic(&path, &bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        eprintln!("samples: {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
