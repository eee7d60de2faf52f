//! `drmas plot RUN_DIR [RUN_DIR...] [--out DIR]`: reward, success rate, per-agent gradient
//! norm and entropy of one or more runs, overlaid, as `training.png` and `training.svg`.

use drmas::plot::plot_runs;
use std::{path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// Run folders, each holding the trainer's metrics.jsonl (overlaid, one colour each).
    #[arg(required = true, value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// Where to write training.png and training.svg (default: the first RUN_DIR).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let explicit_out = args.out.is_some();
    let out = match args.out {
        Some(out) => out,
        // A metrics.jsonl given instead of its folder writes beside it.
        None if args.runs[0].is_file() => match args.runs[0].parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
        None => args.runs[0].clone(),
    };
    // A given --out is made and checked now; the default (a run folder) must exist,
    // which plot_runs reports with the run's name.
    if explicit_out || out.exists() {
        drmas::output::check_dir_target(&out)?;
    }
    // The charts go beside the logs they read, never over one.
    let logs: Vec<PathBuf> = args
        .runs
        .iter()
        .map(|r| match r.is_file() {
            true => r.clone(),
            false => r.join("metrics.jsonl"),
        })
        .collect();
    let inputs: Vec<drmas::output::Input> = logs
        .iter()
        .map(|l| drmas::output::Input::new("the metrics log", l))
        .collect();
    for chart in ["training.png", "training.svg"] {
        drmas::output::check_not_an_input(&out.join(chart), &inputs)?;
    }
    let report = plot_runs(&args.runs, &out)?;
    for run in &report.runs {
        let m = &run.metrics;
        let (first, last) = (m.steps[0], m.steps[m.steps.len() - 1]);
        let agents: Vec<&str> = m.agents.keys().map(String::as_str).collect();
        let agents = if agents.is_empty() {
            "no agent metrics".to_string()
        } else {
            format!("agents {}", agents.join(", "))
        };
        let steps = match m.steps.len() {
            1 => "1 step".to_string(),
            n => format!("{n} steps"),
        };
        outln!("{}: {steps} ({first}..{last}), {agents}", run.label);
        if let Some(line) = m.ignored_last_line {
            outln!(
                "  ignored the cut-off last line {} of {}",
                line,
                run.metrics_path.display()
            );
        }
        if !m.duplicate_steps.is_empty() {
            let steps: Vec<String> = m
                .duplicate_steps
                .iter()
                .map(|(step, lines)| {
                    let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
                    format!("step {step} (lines {})", lines.join(", "))
                })
                .collect();
            errln!(
                "warning: {}: {} written more than once (a resumed run redoes the steps after its checkpoint): {}; each is drawn with its last line's values",
                run.metrics_path.display(),
                if steps.len() == 1 {
                    "a step is"
                } else {
                    "steps are"
                },
                steps.join(", ")
            );
        }
    }
    outln!("wrote {}", report.png.display());
    outln!("wrote {}", report.svg.display());
    Ok(ExitCode::SUCCESS)
}
