//! `drmas plot`: one figure (PNG and SVG) of the training metrics of one or more runs.
//!
//! [`series`] reads each run's `metrics.jsonl` through [`crate::record`] (the last line
//! of a step wins, a cut-off last line is ignored); [`chart`] draws ten panels: reward, success rate (with eval
//! avg@k), per-agent gradient norm, per-agent entropy, per-agent share of groups without
//! signal, the share of optimizer steps `grad_clip` bound (each agent's model), the
//! verifier's approve rate on correct and on wrong answers, and per agent the Lemma's
//! inflation factor and the gradient norm over the shadow normalizer's, runs overlaid. Both files are
//! drawn in memory first and each is written atomically.

pub mod chart;
pub mod series;

pub use chart::{HEIGHT, WIDTH};
pub use series::{AgentSeries, RunMetrics, Series, of_records, read_metrics};

use std::path::{Component, Path, PathBuf};

/// The file a run folder holds its metrics in, one JSON object per training step.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// The names of the figure's files in the output folder.
pub const PNG_FILE: &str = "training.png";
pub const SVG_FILE: &str = "training.svg";

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("no run folder given")]
    NoRuns,
    #[error("{}: no such run folder", path.display())]
    NoRunDir { path: PathBuf },
    #[error("{}: no such file (a run folder holds the trainer's {METRICS_FILE})", path.display())]
    NoMetrics { path: PathBuf },
    #[error("{}: no complete metrics line", path.display())]
    Empty { path: PathBuf },
    /// A line that is not a step record, or the file unreadable.
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
    #[error("drawing {}: {message}", path.display())]
    Draw { path: PathBuf, message: String },
    #[error(transparent)]
    Write(#[from] crate::data::DataError),
}

/// One run as plotted.
#[derive(Debug, Clone)]
pub struct Run {
    /// The run folder's final name, made unique among the runs plotted together.
    pub label: String,
    /// The `metrics.jsonl` read.
    pub metrics_path: PathBuf,
    pub metrics: RunMetrics,
}

/// What [`plot_runs`] read and wrote.
#[derive(Debug, Clone)]
pub struct PlotReport {
    pub runs: Vec<Run>,
    pub png: PathBuf,
    pub svg: PathBuf,
}

/// Reads `RUN_DIR/metrics.jsonl` of every run (a path to the file itself works too),
/// draws the figure and writes `training.png` and `training.svg` into `out_dir`
/// (created if needed). Nothing is written unless every run reads and both files draw;
/// each file is written whole or not at all.
pub fn plot_runs(run_dirs: &[PathBuf], out_dir: &Path) -> Result<PlotReport, PlotError> {
    if run_dirs.is_empty() {
        return Err(PlotError::NoRuns);
    }
    let mut folders = Vec::with_capacity(run_dirs.len());
    let mut runs = Vec::with_capacity(run_dirs.len());
    for given in run_dirs {
        let (folder, metrics_path) = if given.is_file() {
            let folder = match given.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            (folder, given.clone())
        } else if given.is_dir() {
            (given.clone(), given.join(METRICS_FILE))
        } else {
            return Err(PlotError::NoRunDir {
                path: given.clone(),
            });
        };
        let metrics = read_metrics(&metrics_path)?;
        folders.push(folder);
        runs.push(Run {
            label: String::new(),
            metrics_path,
            metrics,
        });
    }
    for (run, label) in runs.iter_mut().zip(run_labels(&folders)) {
        run.label = label;
    }

    let png = out_dir.join(PNG_FILE);
    let svg = out_dir.join(SVG_FILE);
    let svg_text = chart::render_svg(&runs).map_err(|message| PlotError::Draw {
        path: svg.clone(),
        message,
    })?;
    let png_bytes = chart::render_png(&runs).map_err(|message| PlotError::Draw {
        path: png.clone(),
        message,
    })?;
    crate::data::write_atomic(&png, &png_bytes)?;
    crate::data::write_atomic(&svg, svg_text.as_bytes())?;
    Ok(PlotReport { runs, png, svg })
}

/// The legend labels of run folders: each folder's final name; where names collide,
/// as many parent folders as tell them apart (`a/run`, `b/run`), and a ` (2)`, ` (3)`
/// for the same folder given twice.
pub fn run_labels(folders: &[PathBuf]) -> Vec<String> {
    let parts: Vec<Vec<String>> = folders.iter().map(|f| name_parts(f)).collect();
    let mut depth = vec![1usize; folders.len()];
    let label = |i: usize, depth: &[usize]| {
        let p = &parts[i];
        p[p.len().saturating_sub(depth[i])..].join("/")
    };
    loop {
        let labels: Vec<String> = (0..folders.len()).map(|i| label(i, &depth)).collect();
        let mut longer = false;
        for i in 0..folders.len() {
            // Only a different folder of the same name is told apart by its parents.
            let clash = (0..folders.len()).any(|j| labels[j] == labels[i] && parts[j] != parts[i]);
            if clash && depth[i] < parts[i].len() {
                depth[i] += 1;
                longer = true;
            }
        }
        if !longer {
            break;
        }
    }
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut labels = Vec::with_capacity(folders.len());
    for i in 0..folders.len() {
        let base = label(i, &depth);
        let count = seen.entry(base.clone()).or_insert(0);
        *count += 1;
        labels.push(if *count == 1 {
            base
        } else {
            format!("{base} ({count})")
        });
    }
    labels
}

/// The folder names of `folder` made absolute (lexically: `.` and `..` resolved, links
/// kept as named), root first; `["/"]` for the root.
fn name_parts(folder: &Path) -> Vec<String> {
    let absolute = std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf());
    let mut parts: Vec<String> = Vec::new();
    for component in absolute.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        parts.push("/".to_string());
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(dirs: &[&str]) -> Vec<String> {
        run_labels(&dirs.iter().map(PathBuf::from).collect::<Vec<_>>())
    }

    #[test]
    fn labels_are_final_folder_names_made_unique() {
        assert_eq!(labels(&["/r/grpo", "/r/drmas/"]), ["grpo", "drmas"]);
        assert_eq!(
            labels(&["/x/a/seed1", "/x/b/seed1", "/x/c"]),
            ["a/seed1", "b/seed1", "c"]
        );
        assert_eq!(labels(&["/x/a", "/x/a", "/x/a"]), ["a", "a (2)", "a (3)"]);
        assert_eq!(labels(&["/x/a/b/..", "/"]), ["a", "/"]);
    }
}
