//! `drmas sweep`: arms × seeds of one base experiment, each an ordinary run folder
//! trained and its final checkpoint evaluated, then a report with intervals over seeds
//! and paired differences against a baseline arm (docs/sweeps.md). Running the runs is
//! the binary's job (each is a `drmas train` and a `drmas eval` process); this module
//! is the file, the plan, what a run's files say, the statistics, the report, and a
//! run's output copied to its log with its first error line kept (`child_log`).

pub mod chart;
pub mod child_log;
pub mod collect;
pub mod file;
pub mod plan;
pub mod report;
pub mod stats;

pub use file::{Sweep, load_sweep};
pub use plan::{EVAL_FILE, RunPlan, RunState, plan};
pub use report::{Report, RunData};

use std::path::{Path, PathBuf};

pub const REPORT_MD: &str = "report.md";
pub const REPORT_JSON: &str = "report.json";
pub const FIGURE_PNG: &str = "sweep.png";
pub const FIGURE_SVG: &str = "sweep.svg";

/// The data of every evaluated run (the others are left out: a report of them is
/// partial); an evaluated run whose files do not read is an error naming the file.
pub fn collect_done(runs: &[RunPlan]) -> Result<Vec<RunData>, String> {
    runs.iter()
        .filter(|r| r.state() == RunState::Evaluated)
        .map(|r| {
            Ok(RunData {
                arm: r.arm.clone(),
                seed: r.seed,
                // The sweep's messages are text (its report names the file in them).
                steps: collect::read_steps(&r.metrics_file()).map_err(|e| e.to_string())?,
                eval: collect::read_eval(&r.eval_file()).map_err(|e| e.to_string())?,
            })
        })
        .collect()
}

/// Builds the report of what is done and writes `report.md`, `report.json` and the
/// figure into `dir`, each whole or not at all; returns the report and the paths.
pub fn write_report(
    sweep: &Sweep,
    runs: &[RunPlan],
    dir: &Path,
) -> Result<(Report, Vec<PathBuf>), String> {
    let data = collect_done(runs)?;
    let report = report::build(sweep, &data, runs.len());
    let arms: Vec<String> = sweep.file.arms.iter().map(|a| a.name.clone()).collect();
    let title = if report.complete {
        format!("sweep {}", sweep.file.sweep.name)
    } else {
        format!(
            "sweep {} (PARTIAL: {} of {} runs)",
            sweep.file.sweep.name, report.runs_done, report.runs_total
        )
    };
    let (svg, png) = chart::render(&title, &arms, &data)?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    let outputs = [
        (dir.join(REPORT_MD), report.markdown().into_bytes()),
        (dir.join(REPORT_JSON), json.into_bytes()),
        (dir.join(FIGURE_SVG), svg.into_bytes()),
        (dir.join(FIGURE_PNG), png),
    ];
    let mut written = Vec::new();
    for (path, bytes) in outputs {
        crate::output::write_atomic(&path, &bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok((report, written))
}
