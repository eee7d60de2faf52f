//! `math/env`: math tasks need no tools; the task is used as given. Each completed
//! episode is summarised from its record: how the verifier judged the solver's
//! attempts, the approve rate given the attempt's correctness above all (docs/math.md).

use crate::judged::{Roles, attempts, judgements, solution_correct};
use crate::reward::gold_answer;
use drmas_plugin_api::{
    Environment, EpisodeRecord, Metrics, PluginError, PluginResult, Task, ToolCall, ToolContext,
    ToolResult, parse_config,
};

/// Episode metrics of `math/env` (each the mean over the episodes that report it).
pub mod metric {
    /// Share of the verifier's verdicts that are `approve` (an unreadable verdict is
    /// not an approval here, though the workflow lets it pass).
    pub const APPROVE_RATE: &str = "approve_rate";
    /// Share of verdicts on a correct attempt that approve; only episodes where the
    /// verifier judged a correct attempt report it.
    pub const APPROVE_GIVEN_CORRECT: &str = "approve_given_correct";
    /// Share of verdicts on a wrong attempt that approve; only episodes where the
    /// verifier judged a wrong attempt report it.
    pub const APPROVE_GIVEN_WRONG: &str = "approve_given_wrong";
    /// Share of verdicts that are neither approve nor reject.
    pub const VERDICT_INVALID: &str = "verdict_invalid";
    /// Share of readable verdicts that agree with the attempt's correctness.
    pub const VERDICT_ACCURACY: &str = "verdict_accuracy";
    /// The solver's attempts in the episode.
    pub const ATTEMPTS: &str = "solver_attempts";
    /// Whether the solver's first attempt had the gold answer (0 or 1).
    pub const FIRST_CORRECT: &str = "first_attempt_correct";
    /// Whether the solver's last attempt had the gold answer (0 or 1).
    pub const LAST_CORRECT: &str = "last_attempt_correct";
}

#[derive(Debug, Clone, Default)]
pub struct MathEnv {
    roles: Roles,
}

impl MathEnv {
    pub fn new(roles: Roles) -> Self {
        Self { roles }
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Ok(Self::new(parse_config(text)?))
    }
}

/// `part / whole`, for shares of a count that is not zero.
fn share(part: usize, whole: usize) -> f64 {
    part as f64 / whole as f64
}

impl Environment for MathEnv {
    fn prepare(&self, task: &Task) -> PluginResult<Task> {
        Ok(task.clone())
    }

    fn call_tool(&self, _context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        Err(PluginError::not_found(format!(
            "math/env has no tools (asked for `{}`)",
            call.name
        )))
    }

    fn record_metrics(&self, record: &EpisodeRecord) -> PluginResult<Metrics> {
        use metric::*;
        let mut m = Metrics::new();
        let tries = attempts(record, &self.roles);
        if !tries.is_empty() {
            let gold = gold_answer(&record.task.answer);
            let correct = |s: &str| f64::from(u8::from(solution_correct(s, &gold)));
            m.insert(ATTEMPTS.into(), tries.len() as f64);
            m.insert(FIRST_CORRECT.into(), correct(tries[0]));
            m.insert(LAST_CORRECT.into(), correct(tries[tries.len() - 1]));
        }
        let js = judgements(record, &self.roles);
        if js.is_empty() {
            return Ok(m);
        }
        let approves = js.iter().filter(|j| j.approves()).count();
        let unreadable = js.iter().filter(|j| j.unreadable()).count();
        m.insert(APPROVE_RATE.into(), share(approves, js.len()));
        m.insert(VERDICT_INVALID.into(), share(unreadable, js.len()));
        if unreadable < js.len() {
            let agree = js.iter().filter(|j| j.agrees()).count();
            m.insert(VERDICT_ACCURACY.into(), share(agree, js.len() - unreadable));
        }
        for (key, want) in [(APPROVE_GIVEN_CORRECT, true), (APPROVE_GIVEN_WRONG, false)] {
            let on: Vec<_> = js
                .iter()
                .filter(|j| j.judged_correct == Some(want))
                .collect();
            if !on.is_empty() {
                let yes = on.iter().filter(|j| j.approves()).count();
                m.insert(key.into(), share(yes, on.len()));
            }
        }
        Ok(m)
    }
}
