//! `drmas bench tracking`: what each tracking sink costs the training thread per step,
//! on a real run's metrics lines and sample tables replayed as N steps, beside that
//! run's own step time read from the same lines. Prints one JSON line per sink.

use drmas::record::StepRecord;
use drmas::tracking::{MlflowSection, SampleRow, Trackers, TrackingSection, write_samples};
use std::{path::PathBuf, process::ExitCode, time::Instant};

#[derive(clap::Args)]
pub struct Args {
    /// A finished run folder: its `metrics.jsonl` lines (cycled) and its latest
    /// `samples/step-*.jsonl` table are what is replayed.
    run: PathBuf,
    /// Steps replayed.
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// A sample table every N replayed steps (the run's own table each time; 0: none).
    #[arg(long, default_value_t = 10)]
    samples_every: u64,
    /// An MLflow server (`http://host:port`) to measure beside TensorBoard.
    #[arg(long)]
    mlflow: Option<String>,
    /// A scratch folder for the replayed sinks' files (made; must not exist).
    #[arg(long)]
    out: PathBuf,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.steps >= 1, "--steps must be at least 1");
    anyhow::ensure!(
        !args.out.exists(),
        "--out {} exists; give a new folder",
        args.out.display()
    );
    let metrics = args.run.join(drmas::train::METRICS_FILE);
    let lines: Vec<StepRecord> = drmas::record::read_records(&metrics)?
        .lines
        .into_iter()
        .map(|(_, record)| record)
        .collect();
    anyhow::ensure!(!lines.is_empty(), "{} has no lines", metrics.display());
    // The run's own step time: the mean of `time.total` past the first (warm-up) step.
    let totals: Vec<f64> = lines
        .iter()
        .skip(usize::from(lines.len() > 1))
        .map(|l| l.time.total)
        .collect();
    let step_seconds = totals.iter().sum::<f64>() / totals.len() as f64;
    let table: Vec<SampleRow> = latest_table(&args.run)?;

    let mut sinks = vec![(
        "tensorboard",
        TrackingSection {
            tensorboard: true,
            mlflow: None,
            ..TrackingSection::default()
        },
    )];
    if let Some(uri) = &args.mlflow {
        sinks.push((
            "mlflow",
            TrackingSection {
                tensorboard: false,
                mlflow: Some(MlflowSection {
                    uri: uri.clone(),
                    experiment: "drmas-bench-tracking".into(),
                    grace_s: 120.0,
                }),
                ..TrackingSection::default()
            },
        ));
    }
    for (name, settings) in sinks {
        let dir = args.out.join(name);
        std::fs::create_dir_all(&dir)?;
        let params = [("bench".to_string(), "tracking".to_string())];
        let mut trackers = Trackers::open(&dir, &settings, None, &params, &[]);
        let mut per_step = Vec::with_capacity(args.steps as usize);
        let mut scalars = 0usize;
        for step in 1..=args.steps {
            let line = &lines[(step as usize - 1) % lines.len()];
            scalars += drmas::tracking::scalars(&line.to_value()).len();
            let started = Instant::now();
            trackers.log_line(step, line);
            if args.samples_every > 0 && step % args.samples_every == 0 && !table.is_empty() {
                // As the trainer does: the table's file, then the sinks.
                let file = write_samples(&dir, step, &table)?;
                trackers.log_samples(step, &table, &file);
            }
            per_step.push(started.elapsed().as_secs_f64());
        }
        let started = Instant::now();
        trackers.finish("FINISHED");
        let drain = started.elapsed().as_secs_f64();
        let warnings = trackers.take_warnings();
        let mut sorted = per_step.clone();
        sorted.sort_by(f64::total_cmp);
        let mean = per_step.iter().sum::<f64>() / per_step.len() as f64;
        let mut json = serde_json::json!({
            "sink": name,
            "run": args.run.display().to_string(),
            "steps": args.steps,
            "scalars_per_step": scalars as f64 / args.steps as f64,
            "sample_rows": table.len(),
            "step_seconds_of_run": step_seconds,
            "seconds_per_step_mean": mean,
            "seconds_per_step_p95": percentile(&sorted, 0.95),
            "seconds_per_step_max": sorted[sorted.len() - 1],
            "percent_of_step": 100.0 * mean / step_seconds,
            "finish_seconds": drain,
            "warnings": warnings,
        });
        if name == "tensorboard" {
            let events = drmas::tracking::tensorboard_dir(&dir);
            let bytes: u64 = std::fs::read_dir(&events)?
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum();
            json["event_file_bytes"] = bytes.into();
        } else if let Some(record) = drmas::tracking::mlflow::read_record(&dir) {
            json["delivered_step"] = record.delivered_step.into();
            json["gaps"] = record.gaps.len().into();
            json["lost_artifacts"] = record.lost_artifacts.len().into();
        }
        outln!("{json}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The rows of the run's latest sample table (none when it wrote none).
fn latest_table(run: &std::path::Path) -> anyhow::Result<Vec<SampleRow>> {
    let dir = run.join("samples");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let latest = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .max();
    let Some(path) = latest else {
        return Ok(Vec::new());
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}
