//! What a run shows a person: progress bars, warnings, one summary line per step.

use super::Trainer;
use crate::pool::ModelHandle;
use crate::record::StepRecord;
use crate::train::RunError;
use crate::update::{ProgressCounts, UpdateBatch, UpdateProgress, UpdateReport};

/// A warning for the log, and for the terminal unless quiet.
pub(super) fn warn(quiet: bool, msg: &str) {
    tracing::warn!("{msg}");
    if !quiet {
        crate::output::console::err_line(format_args!("{msg}"));
    }
}

impl Trainer {
    /// A warning for the log, and for the terminal unless quiet.
    pub(super) fn warn(&self, msg: &str) {
        warn(self.opts.quiet, msg);
    }

    pub(super) fn update_with_progress(
        &self,
        id: &str,
        handle: &ModelHandle,
        batch: UpdateBatch,
    ) -> Result<UpdateReport, RunError> {
        let progress = batch.progress.clone();
        let bar = self.bar(0, "micro-batches");
        bar.set_prefix(format!("update {id}"));
        let report = std::thread::scope(|scope| {
            let job = scope.spawn(|| {
                // Ends the bar's wait however the update ends, a panic included.
                let _end = EndOnDrop(&progress);
                handle.update(batch)
            });
            let mut seen = ProgressCounts::default();
            while !seen.ended {
                seen = progress.wait_change(seen);
                bar.set_length(seen.total as u64);
                bar.set_position(seen.done as u64);
            }
            job.join()
        });
        bar.finish_and_clear();
        let report = report.map_err(|p| {
            RunError::Worker(crate::pool::WorkerError::backend(
                id,
                "update",
                crate::pool::BackendError::Panicked(crate::pool::panic_message(p.as_ref())),
            ))
        })??;
        Ok(report)
    }

    pub(super) fn bar(&self, len: u64, what: &str) -> indicatif::ProgressBar {
        if self.opts.quiet {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::new(len);
        let template =
            format!("{{prefix}} {{bar:30}} {{pos}}/{{len}} {what}  {{elapsed}} ETA {{eta}}");
        bar.set_style(
            indicatif::ProgressStyle::with_template(&template).expect("a valid template"),
        );
        bar.set_prefix(format!(
            "step {}/{}",
            self.state.step + 1,
            self.policy.steps.total
        ));
        bar
    }
}

/// One line per step for people: rewards, per-agent gradient norm and entropy, times.
pub(super) fn summary_line(record: &StepRecord, total: u32) -> String {
    let f = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or("-".into());
    let mut out = format!(
        "step {}/{total}  reward {}  success {}",
        record.step,
        f(record.reward_mean),
        f(record.success_rate)
    );
    for (name, a) in &record.agents {
        out.push_str(&format!(
            "  {name}: gn {} ent {} valid {}",
            f(a.update.and_then(|u| u.grad_norm)),
            f(a.update.and_then(|u| u.entropy)),
            f(a.valid_ratio)
        ));
    }
    for (id, m) in &record.models {
        if m.grad_spike {
            out.push_str(&format!("  SPIKE({id})"));
        }
        if m.skipped {
            out.push_str(&format!("  SKIPPED({id})"));
        }
    }
    out.push_str(&format!(
        "  rollout {:.0}s update {:.0}s  {} tok/s",
        record.time.rollout,
        record.time.update,
        (record.tokens_per_s)
            .map(|x| format!("{x:.0}"))
            .unwrap_or("-".into())
    ));
    if let Some(e) = &record.eval {
        out.push_str(&format!("  eval avg@{} {}", e.k, f(Some(e.avg_at_k))));
    }
    out
}

/// Marks an update's progress ended when dropped.
struct EndOnDrop<'a>(&'a UpdateProgress);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}
