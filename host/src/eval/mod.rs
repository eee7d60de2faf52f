//! Evaluation: k episodes per task, avg@k and pass@k per data source and overall.

mod dump;
mod metrics;
mod report;
mod runner;
mod stale;

/// A failed episode of an evaluation, as every run of a set of episodes reports it.
pub use crate::rollout::FailedEpisode;
pub use dump::dump_lines;
pub use metrics::{avg_at_k, pass_at_k_unbiased};
pub use report::{
    AgentStats, EvalReport, ReportError, RewardStats, SourceReport, TaskCount, metric_means,
    read_report, summarize, write_report,
};
pub use runner::{DEFAULT_K, EvalError, EvalOptions, Evaluation, evaluate, run_eval};
pub use stale::{STALE_SUFFIX, SetAside, set_aside, stale_path};
