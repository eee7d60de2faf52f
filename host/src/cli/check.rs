//! `drmas check CONFIG`: everything that can be validated without loading models.

use super::PluginDirs;
use std::{path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// The experiment file.
    config: PathBuf,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(super::CheckedExperiment {
        exp, components, ..
    }) = super::load_checked(&args.config, &args.plugin_dirs)
    else {
        return Ok(ExitCode::FAILURE);
    };
    let f = &exp.file;
    if f.data.val.is_empty() {
        // `drmas eval` and the trainer's evaluations refuse such an experiment; the
        // check says so now rather than after a training run.
        eprintln!(
            "{}: [data] val: no validation sets: `drmas eval` has nothing to evaluate (add `val = [{{ path = \"...\" }}]`)",
            args.config.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    println!("{}: ok", args.config.display());
    println!(
        "  experiment {} (seed {}), output {}",
        f.experiment.name,
        f.experiment.seed,
        exp.output_dir().display()
    );
    for m in &f.models {
        let users: Vec<&str> = f
            .agents
            .iter()
            .filter(|a| a.model == m.id)
            .map(|a| a.name.as_str())
            .collect();
        println!(
            "  model {} <- {} (agents: {})",
            m.id,
            m.path.display(),
            users.join(", ")
        );
    }
    for c in &components {
        println!(
            "  {} {}: {} {} ({})",
            c.role, c.kind, c.name, c.version, c.source
        );
    }
    Ok(ExitCode::SUCCESS)
}
