//! Aggregating episode outcomes into the evaluation report, and the report's one writer
//! and one reader (`eval-*.json`: `drmas eval` writes it, `drmas sweep` reads it). Keys a
//! report of an older drmas lacks are `#[serde(default)]`, so its file still reads.

use super::metrics::{avg_at_k, pass_at_k_unbiased};
use crate::rollout::{EpisodeOutcome, FailureTally};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AgentStats {
    pub calls: usize,
    pub mean_response_tokens: f64,
    pub invalid_rate: f64,
}

/// One reward's numbers over a set of tasks, whatever its weight in the team reward.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RewardStats {
    /// Mean score over all episodes.
    pub avg_at_k: f64,
    /// Mean over tasks of the best score among the task's k episodes.
    pub pass_at_k: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SourceReport {
    pub tasks: usize,
    pub k: usize,
    /// Mean over tasks of the fraction of the k samples that succeeded.
    pub avg_at_k: f64,
    /// Fraction of tasks with at least one success among k.
    pub pass_at_k: f64,
    /// The unbiased estimator for j = 1, 2, 4, ... up to k (from the k samples).
    pub pass_at_unbiased: BTreeMap<usize, f64>,
    pub mean_turns: f64,
    pub mean_tool_calls: f64,
    pub truncated_rate: f64,
    pub agents: BTreeMap<String, AgentStats>,
    /// Every reward of the experiment by its name (`search/em`), the ones with weight 0
    /// included: they are how a metric like F1 is reported beside the success reward.
    #[serde(default)]
    pub rewards: BTreeMap<String, RewardStats>,
    /// The environment's episode metrics (`searches`, `answer_recall`), each the mean
    /// over the episodes that reported it.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Each task's completed episodes and successes, by its uid: what a comparison
    /// needs to pair tasks and to estimate the evaluation's own noise (per-task
    /// binomial variance; `drmas sweep`).
    #[serde(default)]
    pub per_task: BTreeMap<String, TaskCount>,
}

/// One task's completed episodes and how many of them succeeded.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TaskCount {
    pub episodes: usize,
    pub successes: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EvalReport {
    pub experiment: String,
    pub k: usize,
    /// Every agent's temperature and top-p, unless `agent_sampling`.
    pub temperature: f64,
    pub top_p: f64,
    /// Each agent sampled with its own `[agents] sampling` (`--agent-sampling`).
    #[serde(default)]
    pub agent_sampling: bool,
    /// `val` (the validation sets) or `train` (the train set, `--train`).
    #[serde(default = "val")]
    pub split: String,
    pub success_threshold: f64,
    pub overall: SourceReport,
    pub sources: BTreeMap<String, SourceReport>,
    /// Episodes run; the metrics above are over the completed ones (`episodes −
    /// failed_episodes`): a failed episode has no score.
    pub episodes: usize,
    pub failed_episodes: usize,
    /// Failed episodes by what they are blamed on (`agent math/solver`), each with its
    /// count, first task and first error.
    #[serde(default)]
    pub failures: FailureTally,
    pub generated_tokens: usize,
    pub seconds: f64,
    pub tokens_per_second: f64,
}

fn val() -> String {
    "val".into()
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not an evaluation report: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Writes `report` to `path`, whole or not at all (scripts check for a report's
/// existence).
pub fn write_report(path: &Path, report: &EvalReport) -> Result<(), ReportError> {
    let text = serde_json::to_string_pretty(report).expect("a report is plain data");
    crate::output::write_atomic(path, text.as_bytes()).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a report [`write_report`] wrote (or an older drmas did).
pub fn read_report(path: &Path) -> Result<EvalReport, ReportError> {
    let bytes = std::fs::read(path).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| ReportError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Each reward's [`RewardStats`] over `by_task`; `names[i]` is the name of the outcomes'
/// `rewards[i]`.
fn reward_stats(
    by_task: &BTreeMap<&str, Vec<&EpisodeOutcome>>,
    names: &[String],
) -> BTreeMap<String, RewardStats> {
    let episodes: usize = by_task.values().map(Vec::len).sum();
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let score = |o: &EpisodeOutcome| f64::from(o.rewards.get(i).copied().unwrap_or(0.0));
            let total: f64 = by_task.values().flatten().map(|o| score(o)).sum();
            let best: f64 = by_task
                .values()
                .map(|g| g.iter().map(|o| score(o)).fold(f64::NEG_INFINITY, f64::max))
                .sum();
            let stats = RewardStats {
                avg_at_k: total / episodes.max(1) as f64,
                pass_at_k: best / by_task.len().max(1) as f64,
            };
            (name.clone(), stats)
        })
        .collect()
}

/// The mean of each environment metric over the outcomes that reported it.
pub fn metric_means(outcomes: &[&EpisodeOutcome]) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for (name, &value) in outcomes.iter().flat_map(|o| &o.metrics) {
        let e = sums.entry(name).or_default();
        e.0 += value;
        e.1 += 1;
    }
    sums.into_iter()
        .map(|(name, (sum, n))| (name.to_string(), sum / n as f64))
        .collect()
}

/// Aggregates the outcomes of `k` episodes per task (grouped by uid); `rewards` names
/// the experiment's rewards in the order of each outcome's `rewards`.
pub fn summarize(
    outcomes: &[&EpisodeOutcome],
    k: usize,
    success_threshold: f64,
    rewards: &[String],
) -> SourceReport {
    let mut by_task: BTreeMap<&str, Vec<&EpisodeOutcome>> = BTreeMap::new();
    for o in outcomes {
        by_task.entry(o.uid.as_str()).or_default().push(o);
    }
    let tasks = by_task.len();
    let reward_stats = reward_stats(&by_task, rewards);
    let mut avg = 0.0;
    let mut any = 0.0;
    let mut unbiased: BTreeMap<usize, f64> = BTreeMap::new();
    let ks: Vec<usize> = std::iter::successors(Some(1usize), |j| Some(j * 2))
        .take_while(|&j| j <= k.max(1))
        .collect();
    let mut per_task = BTreeMap::new();
    for (uid, group) in &by_task {
        let n = group.len();
        let c = group
            .iter()
            .filter(|o| f64::from(o.team_reward) >= success_threshold)
            .count();
        per_task.insert(
            uid.to_string(),
            TaskCount {
                episodes: n,
                successes: c,
            },
        );
        avg += avg_at_k(c, n);
        any += if c > 0 { 1.0 } else { 0.0 };
        for &j in &ks {
            *unbiased.entry(j).or_default() += pass_at_k_unbiased(n, c, j.min(n));
        }
    }
    let t = tasks.max(1) as f64;
    unbiased.values_mut().for_each(|v| *v /= t);
    let e = outcomes.len().max(1) as f64;
    let mut agents: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for o in outcomes {
        for s in &o.samples {
            let a = agents.entry(s.agent.clone()).or_default();
            a.0 += 1;
            a.1 += s.response_ids.len();
            a.2 += usize::from(!s.valid);
        }
    }
    SourceReport {
        tasks,
        k,
        avg_at_k: avg / t,
        pass_at_k: any / t,
        pass_at_unbiased: unbiased,
        mean_turns: outcomes
            .iter()
            .map(|o| o.transcript.len() as f64)
            .sum::<f64>()
            / e,
        mean_tool_calls: outcomes
            .iter()
            .map(|o| f64::from(o.tool_calls))
            .sum::<f64>()
            / e,
        truncated_rate: outcomes.iter().filter(|o| o.truncated).count() as f64 / e,
        agents: agents
            .into_iter()
            .map(|(name, (calls, tokens, invalid))| {
                (
                    name,
                    AgentStats {
                        calls,
                        mean_response_tokens: tokens as f64 / calls.max(1) as f64,
                        invalid_rate: invalid as f64 / calls.max(1) as f64,
                    },
                )
            })
            .collect(),
        rewards: reward_stats,
        metrics: metric_means(outcomes),
        per_task,
    }
}

impl EvalReport {
    /// `overall` or a source by name.
    pub fn source(&self, name: &str) -> Option<&SourceReport> {
        if name == "overall" {
            Some(&self.overall)
        } else {
            self.sources.get(name)
        }
    }

    /// The report as a table for the terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let k = self.k;
        let mut header = format!(
            "{:<16} {:>6} {:>8} {:>8}",
            "source",
            "tasks",
            format!("avg@{k}"),
            format!("pass@{k}")
        );
        for j in self.overall.pass_at_unbiased.keys() {
            header.push_str(&format!(" {:>9}", format!("pass@{j}~")));
        }
        header.push_str(&format!(" {:>6} {:>6}", "turns", "tools"));
        out.push_str(&header);
        out.push('\n');
        let mut row = |name: &str, r: &SourceReport| {
            let mut line = format!(
                "{:<16} {:>6} {:>8.3} {:>8.3}",
                name, r.tasks, r.avg_at_k, r.pass_at_k
            );
            for v in r.pass_at_unbiased.values() {
                line.push_str(&format!(" {v:>9.3}"));
            }
            line.push_str(&format!(
                " {:>6.2} {:>6.2}",
                r.mean_turns, r.mean_tool_calls
            ));
            out.push_str(&line);
            out.push('\n');
        };
        for (name, r) in &self.sources {
            row(name, r);
        }
        row("overall", &self.overall);
        out.push('\n');
        let mut rows: Vec<(&str, &SourceReport)> =
            self.sources.iter().map(|(n, r)| (n.as_str(), r)).collect();
        if self.sources.len() > 1 {
            rows.push(("overall", &self.overall));
        }
        for (name, r) in rows {
            for (reward, st) in &r.rewards {
                out.push_str(&format!(
                    "{name}: {reward} avg@{k} {:.3} pass@{k} {:.3}\n",
                    st.avg_at_k, st.pass_at_k
                ));
            }
            for (metric, v) in &r.metrics {
                out.push_str(&format!("{name}: {metric} {v:.3} (episode mean)\n"));
            }
        }
        for (agent, a) in &self.overall.agents {
            out.push_str(&format!(
                "agent {agent}: {} calls, {:.1} tokens per response, {:.1}% invalid\n",
                a.calls,
                a.mean_response_tokens,
                100.0 * a.invalid_rate
            ));
        }
        out.push_str(&format!(
            "{} episodes ({} failed), {} tokens generated in {:.1}s ({:.1} tok/s)\n",
            self.episodes,
            self.failed_episodes,
            self.generated_tokens,
            self.seconds,
            self.tokens_per_second
        ));
        for (who, f) in &self.failures.by_component {
            out.push_str(&format!(
                "failed: {who}: {} episodes (first, task {}: {})\n",
                f.episodes, f.first_task, f.first_error
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/eval/eval-final.json")
    }

    #[test]
    fn a_report_of_the_last_drmas_reads_and_writes_back_the_same() {
        let report = read_report(&fixture()).unwrap();
        assert_eq!(
            (report.k, report.episodes, report.split.as_str()),
            (2, 12, "val")
        );
        assert_eq!(report.overall.per_task.len(), 6);
        assert_eq!(report.source("overall"), Some(&report.overall));
        assert_eq!(report.source("tiny"), report.sources.get("tiny"));
        let dir = tempfile::tempdir().unwrap();
        let again = dir.path().join("eval.json");
        write_report(&again, &report).unwrap();
        assert_eq!(read_report(&again).unwrap(), report);
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
        assert_eq!(serde_json::to_value(&report).unwrap(), written);
    }

    #[test]
    fn a_report_of_the_first_layout_reads_and_a_bad_one_is_named() {
        // The first report had no rewards, metrics or tasks per source, no split, no
        // agent sampling and no failures.
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
        for key in ["agent_sampling", "split", "failures"] {
            v.as_object_mut().unwrap().remove(key);
        }
        for key in ["rewards", "metrics", "per_task"] {
            v["overall"].as_object_mut().unwrap().remove(key);
            v["sources"]["tiny"].as_object_mut().unwrap().remove(key);
        }
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("eval-final.json");
        std::fs::write(&old, v.to_string()).unwrap();
        let report = read_report(&old).unwrap();
        assert_eq!(
            (report.split.as_str(), report.agent_sampling),
            ("val", false)
        );
        assert!(report.overall.per_task.is_empty() && report.failures.is_empty());
        v["k"] = serde_json::json!("two");
        std::fs::write(&old, v.to_string()).unwrap();
        let e = read_report(&old).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: not an evaluation report: invalid type: string \"two\", expected usize",
                old.display()
            )),
            "{e}"
        );
    }
}
