//! What a sweep's report is computed from: each run's step records (the last line of a
//! step wins, a cut-off last line is ignored: the rules of [`crate::record`]) and the
//! evaluation report of its final checkpoint.

use crate::eval::{EvalReport, ReportError};
use crate::record::{RecordError, StepRecord, read_records};
use std::path::Path;

/// Reads an evaluation report.
pub fn read_eval(path: &Path) -> Result<EvalReport, ReportError> {
    crate::eval::read_report(path)
}

/// Reads a run's metrics: each step's record, sorted by step.
pub fn read_steps(path: &Path) -> Result<Vec<StepRecord>, RecordError> {
    let records = read_records(path)?;
    Ok(records.latest().into_iter().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{AgentRecord, ModelRecord, ShadowRecord};

    #[test]
    fn the_last_line_of_a_step_wins_and_a_cut_off_last_line_is_ignored() {
        let mut one = StepRecord {
            step: 1,
            reward_mean: Some(0.1),
            ..StepRecord::default()
        };
        let model = ModelRecord {
            grad_norm: Some(2.0),
            grad_clip_bound: Some(1.0),
            ..ModelRecord::default()
        };
        one.models.insert("m".into(), model);
        let shadow = ShadowRecord {
            adv_sq_mean: Some(0.4),
            shadow_adv_sq_mean: Some(0.8),
            correlation: None,
        };
        let agent = AgentRecord {
            shadow: Some(shadow),
            ..AgentRecord::default()
        };
        one.agents.insert("a".into(), agent);
        let two = StepRecord {
            step: 2,
            reward_mean: Some(0.2),
            success_rate: Some(0.5),
            ..StepRecord::default()
        };
        let mut two_again = StepRecord {
            step: 2,
            reward_mean: Some(0.3),
            ..StepRecord::default()
        };
        let spiked = ModelRecord {
            grad_norm: Some(9.0),
            grad_spike: true,
            ..ModelRecord::default()
        };
        two_again.models.insert("m".into(), spiked);
        let text = [one, two, two_again]
            .iter()
            .map(|r| r.to_line() + "\n")
            .collect::<String>()
            + r#"{"step": 3, "rew"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        std::fs::write(&path, text).unwrap();
        let rows = read_steps(&path).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].agents["a"].shadow.unwrap().shadow_adv_sq_mean,
            Some(0.8)
        );
        assert_eq!(rows[0].models["m"].grad_clip_bound, Some(1.0));
        assert_eq!(rows[1].reward_mean, Some(0.3));
        assert_eq!(rows[1].success_rate, None);
        assert!(rows[1].models["m"].grad_spike);
        std::fs::write(&path, "{\"step\": 1\n{\"step\": 2}\n").unwrap();
        assert_eq!(
            read_steps(&path).unwrap_err().to_string(),
            format!(
                "{}:1: invalid JSON: EOF while parsing an object (column 10)",
                path.display()
            )
        );
    }
}
