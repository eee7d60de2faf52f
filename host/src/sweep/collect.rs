//! What a sweep's report is computed from: each run's `metrics.jsonl` (the last line of
//! a step wins, a cut-off last line is ignored) and the evaluation of its final
//! checkpoint.

use crate::eval::TaskCount;
use serde::Deserialize;
use serde_json::Value;
use std::{collections::BTreeMap, path::Path};

/// One model's numbers at one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelStep {
    /// The pre-clip gradient norm (absent when no optimizer step ran).
    pub grad_norm: Option<f64>,
    /// The spike detector fired.
    pub spike: bool,
    /// The share of the step's optimizer steps that `grad_clip` bound.
    pub clip_bound: Option<f64>,
    pub skipped: bool,
}

/// One agent's numbers at one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStep {
    pub grad_norm: Option<f64>,
    pub entropy: Option<f64>,
    /// mean(A²) under the run's normalizer and under its shadow (with a
    /// `shadow_normalizer`).
    pub adv_sq_mean: Option<f64>,
    pub shadow_adv_sq_mean: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepRow {
    pub step: u64,
    pub reward_mean: Option<f64>,
    pub success_rate: Option<f64>,
    pub models: BTreeMap<String, ModelStep>,
    pub agents: BTreeMap<String, AgentStep>,
}

/// One source's evaluation (or the whole evaluation's: `overall`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SourceEval {
    pub avg_at_k: f64,
    pub pass_at_k: f64,
    #[serde(default)]
    pub per_task: BTreeMap<String, TaskCount>,
}

/// The parts of `drmas eval`'s report a sweep reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EvalResult {
    pub k: usize,
    pub overall: SourceEval,
    pub sources: BTreeMap<String, SourceEval>,
    pub failed_episodes: usize,
}

impl EvalResult {
    /// `overall` or a source by name.
    pub fn source(&self, name: &str) -> Option<&SourceEval> {
        if name == "overall" {
            Some(&self.overall)
        } else {
            self.sources.get(name)
        }
    }
}

/// Reads an evaluation report.
pub fn read_eval(path: &Path) -> Result<EvalResult, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a run's metrics, one row per step.
pub fn read_steps(path: &Path) -> Result<Vec<StepRow>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_steps(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses the contents of a `metrics.jsonl`.
pub fn parse_steps(bytes: &[u8]) -> Result<Vec<StepRow>, String> {
    let lines: Vec<(usize, &[u8])> = bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_ascii()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let last = lines.last().map(|&(n, _)| n);
    let mut by_step: BTreeMap<u64, StepRow> = BTreeMap::new();
    for (number, line) in lines {
        let value: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            // A killed run's cut-off last line.
            Err(_) if Some(number) == last => continue,
            Err(e) => return Err(format!("line {number}: {e}")),
        };
        let Some(step) = value.get("step").and_then(Value::as_u64) else {
            continue;
        };
        by_step.insert(step, row(step, &value));
    }
    Ok(by_step.into_values().collect())
}

fn row(step: u64, v: &Value) -> StepRow {
    let num = |v: &Value, key: &str| v.get(key).and_then(Value::as_f64);
    let models = v
        .get("models")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(id, m)| {
                    let step = ModelStep {
                        grad_norm: num(m, "grad_norm"),
                        spike: m.get("grad_spike").and_then(Value::as_bool) == Some(true),
                        clip_bound: num(m, "grad_clip_bound"),
                        skipped: m.get("skipped").and_then(Value::as_bool) == Some(true),
                    };
                    (id.clone(), step)
                })
                .collect()
        })
        .unwrap_or_default();
    let agents = v
        .get("agents")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .map(|(name, a)| {
                    let shadow = a.get("shadow").unwrap_or(&Value::Null);
                    let step = AgentStep {
                        grad_norm: num(a, "grad_norm"),
                        entropy: num(a, "entropy"),
                        adv_sq_mean: num(shadow, "adv_sq_mean"),
                        shadow_adv_sq_mean: num(shadow, "shadow_adv_sq_mean"),
                    };
                    (name.clone(), step)
                })
                .collect()
        })
        .unwrap_or_default();
    StepRow {
        step,
        reward_mean: num(v, "reward_mean"),
        success_rate: num(v, "success_rate"),
        models,
        agents,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_of_a_step_wins_and_a_cut_off_last_line_is_ignored() {
        let text = concat!(
            r#"{"step": 1, "reward_mean": 0.1, "models": {"m": {"grad_norm": 2.0, "grad_spike": false, "grad_clip_bound": 1.0, "skipped": false}}, "agents": {"a": {"grad_norm": 1.5, "entropy": 0.7, "shadow": {"adv_sq_mean": 0.4, "shadow_adv_sq_mean": 0.8}}}}"#,
            "\n",
            r#"{"step": 2, "reward_mean": 0.2, "success_rate": 0.5}"#,
            "\n",
            r#"{"step": 2, "reward_mean": 0.3, "models": {"m": {"grad_norm": 9.0, "grad_spike": true}}}"#,
            "\n",
            r#"{"step": 3, "rew"#,
        );
        let rows = parse_steps(text.as_bytes()).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].agents["a"].shadow_adv_sq_mean, Some(0.8));
        assert_eq!(rows[0].models["m"].clip_bound, Some(1.0));
        assert_eq!(rows[1].reward_mean, Some(0.3));
        assert_eq!(rows[1].success_rate, None);
        assert!(rows[1].models["m"].spike);
        let broken = "{\"step\": 1\n{\"step\": 2}\n";
        assert!(
            parse_steps(broken.as_bytes())
                .unwrap_err()
                .starts_with("line 1: ")
        );
    }
}
