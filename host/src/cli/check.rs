//! `drmas check CONFIG`: everything that can be validated without loading models.

use super::PluginDirs;
use std::{path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// The experiment file.
    config: PathBuf,
    /// Also require what this command needs: `eval` (val sets) or `train` (a train set).
    #[arg(long = "for", value_enum)]
    r#for: Option<Use>,
    /// Plan one rank of a data-parallel job of this many ranks (what `[[models]] shard`
    /// divides); default: $WORLD_SIZE, else 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    ranks: Option<u32>,
    /// Also reach what the environment depends on (a remote environment's server: its
    /// health, its action schema against the agents' actions, its session limit). A
    /// server the environment starts itself is started, checked and stopped.
    #[arg(long)]
    online: bool,
    #[command(flatten)]
    overrides: super::Overrides,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Use {
    Eval,
    Train,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(super::CheckedExperiment {
        exp,
        components,
        registry,
    }) = super::load_checked(&args.config, &args.overrides, &args.plugin_dirs)
    else {
        return Ok(ExitCode::FAILURE);
    };
    let f = &exp.file;
    // What the commands that will use the experiment need from [data].
    let needs_val = matches!(args.r#for, Some(Use::Eval)) || f.trainer.eval_every > 0;
    let needs_train = matches!(args.r#for, Some(Use::Train));
    let mut missing = Vec::new();
    if needs_val && f.data.val.is_empty() {
        missing.push(if f.trainer.eval_every > 0 && args.r#for != Some(Use::Eval) {
            "[data] val: no validation sets, but [trainer] eval_every evaluates on them (add `val = [{ path = \"...\" }]`)"
        } else {
            "[data] val: no validation sets: `drmas eval` has nothing to evaluate (add `val = [{ path = \"...\" }]`)"
        });
    }
    if needs_train && f.data.train.is_none() {
        missing.push("[data] train: no training set: `drmas train` has nothing to train on (add `train = { path = \"...\" }`)");
    }
    if !missing.is_empty() {
        for m in missing {
            errln!("{}: {m}", args.config.display());
        }
        return Ok(ExitCode::FAILURE);
    }
    outln!("{}: ok", args.config.display());
    outln!(
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
        let source = match &m.lora {
            Some(l) => format!(
                "LoRA rank {} alpha {} on {} ({})",
                l.rank,
                l.alpha,
                m.weights_dir().display(),
                l.targets.join(", ")
            ),
            None => m.path.display().to_string(),
        };
        outln!(
            "  model {} <- {source} (agents: {})",
            m.id,
            users.join(", ")
        );
    }
    for c in &components {
        outln!(
            "  {} {}: {} {} ({})",
            c.role,
            c.kind,
            c.name,
            c.version,
            c.source
        );
    }
    let train = match &f.data.train {
        Some(t) => t.path.display().to_string(),
        None => "none (`drmas train` would refuse it)".into(),
    };
    let val = match f.data.val.len() {
        0 => "none (`drmas eval` would refuse it)".to_string(),
        n => format!("{n} set(s)"),
    };
    outln!("  data: train {train}; val {val}");
    if args.online
        && let Some(env) = &f.environment
    {
        let probed = registry
            .create_environment(
                &env.component,
                &drmas::config::config_text(&env.config),
                &exp.resolve_policy(),
            )
            .map_err(|e| e.to_string())
            .and_then(|handle| handle.probe().map_err(|e| e.to_string()));
        match probed {
            Ok(lines) if lines.is_empty() => {
                outln!(
                    "  online: environment `{}` has nothing to reach",
                    env.component
                )
            }
            Ok(lines) => {
                for line in lines {
                    outln!("  online: {line}");
                }
            }
            Err(e) => {
                errln!("{}: {e}", args.config.display());
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    // The placement `train` would make (it budgets the most memory); a plan that does
    // not fit fails the check with its table.
    let ranks = match args.ranks {
        Some(n) => n as usize,
        None => std::env::var("WORLD_SIZE")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .unwrap_or(1),
    };
    let train = needs_train || args.r#for.is_none();
    match drmas::launch::plan_experiment(&exp, train, ranks) {
        Ok(drmas::launch::Planned { plan, sizes, .. }) => {
            let on_cpu = plan.devices.iter().all(|d| !d.is_cuda());
            let per_rank = match ranks {
                1 => String::new(),
                n => format!(", per rank of a job of {n}"),
            };
            outln!(
                "  placement for training (offload = \"{}\"{}{per_rank}):",
                plan.offload.name(),
                if on_cpu && plan.offload != drmas::config::Offload::None {
                    "; skipped on the CPU"
                } else {
                    ""
                }
            );
            if ranks == 1
                && let Some(m) = f.models.iter().find(|m| !m.shard.is_none())
            {
                outln!(
                    "  (model `{}`: shard = \"{}\" divides its state among a job's ranks: --ranks N plans one rank of N)",
                    m.id,
                    m.shard.name()
                );
            }
            for line in plan.table().lines() {
                outln!("  {line}");
            }
            for (u, sizes) in plan.units.iter().zip(&sizes) {
                outln!(
                    "  batch sizes of {}: {}",
                    u.models.join(" + "),
                    sizes.describe()
                );
            }
        }
        Err(e) => {
            errln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
