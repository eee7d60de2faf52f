//! `drmas train CONFIG`: per-agent normalized GRPO (or any normalizer plugin) on the
//! experiment's train set, with metrics, checkpoints and resume.

use super::PluginDirs;
use drmas::train::{TrainOptions, Trainer, signal};
use std::{path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// The experiment file.
    config: PathBuf,
    /// Continue from the run folder's latest complete checkpoint.
    #[arg(long)]
    resume: bool,
    /// With --resume: go on although the experiment differs from the checkpoint's (the
    /// differences are listed and recorded in the run's changes.jsonl).
    #[arg(long, requires = "resume")]
    accept_changes: bool,
    /// Train this many steps in all instead of `[trainer] steps`.
    #[arg(long)]
    steps: Option<u32>,
    /// No progress bars or per-step lines.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    overrides: super::Overrides,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(super::CheckedExperiment {
        mut exp, registry, ..
    }) = super::load_checked(&args.config, &args.overrides, &args.plugin_dirs)
    else {
        return Ok(ExitCode::FAILURE);
    };
    if let Some(steps) = args.steps {
        anyhow::ensure!(steps > 0, "--steps must be at least 1");
        exp.file.trainer.steps = steps;
    }
    signal::install();
    let joined = super::dist::join(
        &exp,
        &[
            ("command", "train".into()),
            ("--resume", args.resume.to_string()),
            ("--accept-changes", args.accept_changes.to_string()),
        ],
    )?;
    let (dist, fingerprint) = match joined {
        Some(j) => (Some(j.job), Some(j.fingerprint)),
        None => (None, None),
    };
    let root = dist.as_ref().is_none_or(|d| d.rank == 0);
    let mut trainer = Trainer::from_experiment(
        &exp,
        &registry,
        TrainOptions {
            resume: args.resume,
            accept_changes: args.accept_changes,
            // Rank 0 speaks for a data-parallel job.
            quiet: args.quiet || !root,
            dist,
            fingerprint,
            ..TrainOptions::default()
        },
    )?;
    let summary = trainer.run()?;
    let metrics = trainer.run_dir().join(drmas::train::METRICS_FILE);
    if !args.quiet && root {
        errln!(
            "{} steps done; metrics: {}{}",
            summary.steps_done,
            metrics.display(),
            summary
                .last_checkpoint
                .as_ref()
                .map(|c| format!("; checkpoint: {}", c.display()))
                .unwrap_or_default()
        );
    }
    Ok(if summary.stopped_early {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}
