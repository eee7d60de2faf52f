//! What a resumed run's MLflow run lacks. The server, not the run folder's record and
//! not the checkpoint, says what it holds: a process killed between the server's answer
//! and the record's write leaves the server ahead of the record, and one killed while
//! its sender lagged behind training leaves the checkpoint ahead of the server. So a
//! resume asks the server for each metric's newest step, its params and its artifacts,
//! and sends again from the metrics log and the sample tables what it lacks.

use crate::record::{RecordError, read_records};
use serde_json::Value;
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

/// What the server holds of a run, from a `runs/get` answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Held {
    /// Each metric's newest step.
    pub steps: BTreeMap<String, u64>,
    /// The params' keys.
    pub params: BTreeSet<String>,
    /// Where the run's artifacts go.
    pub artifact_uri: Option<String>,
}

impl Held {
    pub fn of(answer: &Value) -> Held {
        let run = &answer["run"];
        let steps = run["data"]["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                // int64: a number or a string in MLflow's JSON.
                let step = m["step"]
                    .as_u64()
                    .or_else(|| m["step"].as_str()?.parse().ok())?;
                Some((m["key"].as_str()?.to_string(), step))
            })
            .collect();
        let params = run["data"]["params"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["key"].as_str().map(str::to_string))
            .collect();
        Held {
            steps,
            params,
            artifact_uri: run["info"]["artifact_uri"].as_str().map(str::to_string),
        }
    }

    /// The newest step of any metric: the server has every step before it (a step is
    /// sent whole, in order, after the one before), and of this one at least a part.
    pub fn newest(&self) -> Option<u64> {
        self.steps.values().max().copied()
    }

    /// The values of `step` the server lacks: those of metrics whose newest step is
    /// before it (each metric's steps reach the server in order).
    pub fn lacking(&self, step: u64, values: Vec<(String, f64)>) -> Vec<(String, f64)> {
        values
            .into_iter()
            .filter(|(k, _)| self.steps.get(k).is_none_or(|&s| s < step))
            .collect()
    }

    /// The server has these values of `step` now.
    pub fn add(&mut self, step: u64, values: &[(String, f64)]) {
        for (k, _) in values {
            let s = self.steps.entry(k.clone()).or_insert(step);
            *s = (*s).max(step);
        }
    }
}

/// A step and its scalars (`/`-joined paths).
pub(super) type Logged = (u64, Vec<(String, f64)>);

/// The scalars of each step of the metrics log `path` in `from..=to`, in step order, as
/// the trackers take a step's record (its one reader, `record`; a cut last line is no
/// step's). A log that is not there has none.
pub(super) fn logged_steps(path: &Path, from: u64, to: u64) -> Result<Vec<Logged>, RecordError> {
    let records = match read_records(path) {
        Ok(r) => r,
        Err(RecordError::Missing { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(records
        .latest()
        .into_iter()
        .filter(|r| (from..=to).contains(&u64::from(r.step)))
        .map(|r| (u64::from(r.step), crate::tracking::scalars(&r.to_value())))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_last_step_held_is_the_newest_of_the_metrics_latest_steps() {
        // As MLflow's runs/get answers: int64 steps as numbers or as strings.
        let run = json!({"run": {"data": {"metrics": [
            {"key": "reward_mean", "value": 0.5, "timestamp": 1, "step": 3},
            {"key": "loss", "value": 0.1, "timestamp": 1, "step": "4"},
            {"key": "entropy", "value": 2.0, "timestamp": 1, "step": 2}
        ]}}});
        assert_eq!(Held::of(&run).newest(), Some(4));
        assert_eq!(Held::of(&json!({"run": {"data": {}}})).newest(), None);
        assert_eq!(
            Held::of(&json!({"run": {"data": {"metrics": []}}})).newest(),
            None
        );
    }

    #[test]
    fn a_run_answer_gives_the_params_and_the_artifact_folder() {
        let run = json!({"run": {
            "info": {"run_id": "r", "artifact_uri": "mlflow-artifacts:/1/r/artifacts"},
            "data": {"params": [
                {"key": "trainer.steps", "value": "4"},
                {"key": "models.lm.lr", "value": "0.001"}
            ]}
        }});
        let held = Held::of(&run);
        assert_eq!(
            held.params,
            BTreeSet::from(["models.lm.lr".to_string(), "trainer.steps".to_string()])
        );
        assert_eq!(
            held.artifact_uri.as_deref(),
            Some("mlflow-artifacts:/1/r/artifacts")
        );
        assert!(held.steps.is_empty());
    }

    #[test]
    fn a_step_sends_only_the_metrics_the_server_lacks_at_it() {
        let mut held = Held {
            steps: BTreeMap::from([("loss".to_string(), 3), ("reward".to_string(), 2)]),
            ..Held::default()
        };
        let step3 = vec![
            ("loss".to_string(), 0.1),
            ("reward".to_string(), 0.5),
            ("eval/k".to_string(), 4.0),
        ];
        // Step 3 cut between two calls: `loss` is there, the rest is not.
        assert_eq!(
            held.lacking(3, step3.clone()),
            [("reward".to_string(), 0.5), ("eval/k".to_string(), 4.0)]
        );
        // At step 2 the server has both of its metrics; one it never had is lacking.
        assert_eq!(
            held.lacking(2, step3.clone()),
            [("eval/k".to_string(), 4.0)]
        );
        held.add(3, &step3);
        assert_eq!(held.lacking(3, step3.clone()), []);
        assert_eq!(held.lacking(4, step3.clone()), step3);
        assert_eq!(held.newest(), Some(3));
    }

    #[test]
    fn the_log_gives_the_steps_asked_for_as_the_trackers_take_them() {
        use crate::record::StepRecord;
        let record = |step, reward| StepRecord {
            step,
            reward_mean: Some(reward),
            ..StepRecord::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("metrics.jsonl");
        let text: String = [record(1, 0.25), record(2, 0.5), record(3, 0.75)]
            .iter()
            .map(|r| r.to_line() + "\n")
            .collect();
        // A cut last line is no step's.
        std::fs::write(&log, text + "{\"step\":4,\"rew").unwrap();
        let got = logged_steps(&log, 2, 4).unwrap();
        // Each step's values are those `Trackers::log_line` sends for its record.
        let want: Vec<(u64, Vec<(String, f64)>)> = [(2, record(2, 0.5)), (3, record(3, 0.75))]
            .into_iter()
            .map(|(s, r)| (s, crate::tracking::scalars(&r.to_value())))
            .collect();
        assert_eq!(got, want);
        assert!(
            got[0].1.contains(&("reward_mean".to_string(), 0.5)),
            "{:?}",
            got[0].1
        );
        assert_eq!(logged_steps(&log, 0, 1).unwrap()[0].0, 1);
        assert!(
            logged_steps(&dir.path().join("none.jsonl"), 0, 9)
                .unwrap()
                .is_empty()
        );
        // A broken line is the reader's error, naming it.
        std::fs::write(&log, "[1]\n{}\n").unwrap();
        assert_eq!(
            logged_steps(&log, 0, 9).unwrap_err().to_string(),
            format!(
                "{}:1: expected a JSON object, found an array",
                log.display()
            )
        );
    }
}
