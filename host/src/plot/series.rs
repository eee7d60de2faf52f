//! A run's step records as one series per plotted metric.

use super::PlotError;
use crate::record::{RecordError, Records, read_records};
use std::{collections::BTreeMap, path::Path};

/// `(step, value)` points, sorted by step, one per step.
pub type Series = Vec<(u64, f64)>;

/// What one agent's lines show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSeries {
    pub grad_norm: Series,
    pub entropy: Series,
    /// The share of the agent's groups whose scores are all equal (no signal).
    pub zero_variance: Series,
    /// The share of its model's optimizer steps so far that `grad_clip` bound.
    pub clip_bound: Series,
    /// The Lemma's inflation factor under a baseline shared by the team
    /// (`lemma.inflation_global`).
    pub inflation: Series,
    /// With `shadow_gradients`: its gradient norm over the shadow normalizer's on the
    /// same batch.
    pub grad_ratio: Series,
}

/// One run's metrics: for each step, the values of its last line (a resumed run
/// writes a step again; the later line wins). Missing or null values are no point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunMetrics {
    /// Every step that had a line, sorted.
    pub steps: Vec<u64>,
    pub reward_mean: Series,
    pub success_rate: Series,
    /// `eval.avg_at_k`, on the steps where an evaluation ran.
    pub eval_avg_at_k: Series,
    /// The verifier's approve rate on correct and on wrong answers (`metrics.
    /// approve_given_correct`, `metrics.approve_given_wrong`: `math/env`'s episode
    /// metrics over the step's episodes); empty for teams without them.
    pub approve_given_correct: Series,
    pub approve_given_wrong: Series,
    /// By agent name (`agents.<name>`), sorted.
    pub agents: BTreeMap<String, AgentSeries>,
    /// The 1-based line number of a cut-off last line that was ignored (a killed run).
    pub ignored_last_line: Option<usize>,
    /// Steps written on more than one line (a resumed run redoes the steps after its
    /// checkpoint), each with its 1-based line numbers in order; the last one is drawn.
    pub duplicate_steps: BTreeMap<u64, Vec<usize>>,
}

/// Reads `path` (a `metrics.jsonl`) by the record's rules ([`crate::record`]). A
/// missing file, a file with no metrics line, and a line that is not a step record
/// anywhere but last are errors naming the file (and line).
pub fn read_metrics(path: &Path) -> Result<RunMetrics, PlotError> {
    let records = read_records(path).map_err(|e| match e {
        RecordError::Missing { path } => PlotError::NoMetrics { path },
        other => other.into(),
    })?;
    of_records(&records)
}

/// The series of a run's records.
pub fn of_records(records: &Records) -> Result<RunMetrics, PlotError> {
    let latest = records.latest();
    if latest.is_empty() {
        return Err(PlotError::Empty {
            path: records.path.clone(),
        });
    }
    let mut metrics = RunMetrics {
        ignored_last_line: records.cut_off,
        duplicate_steps: (records.repeated().into_iter())
            .map(|(step, lines)| (u64::from(step), lines))
            .collect(),
        ..RunMetrics::default()
    };
    for record in latest {
        let step = u64::from(record.step);
        metrics.steps.push(step);
        let push = |series: &mut Series, value: Option<f64>| {
            if let Some(v) = value.filter(|v| v.is_finite()) {
                series.push((step, v));
            }
        };
        push(&mut metrics.reward_mean, record.reward_mean);
        push(&mut metrics.success_rate, record.success_rate);
        push(
            &mut metrics.eval_avg_at_k,
            record.eval.as_ref().map(|e| e.avg_at_k),
        );
        // The step's environment metrics; a line written before they were summed over
        // the step has them per source, which is the same when there is one source.
        let env = if record.metrics.is_empty() && record.sources.len() == 1 {
            record.sources.values().next().map(|s| &s.metrics)
        } else {
            Some(&record.metrics)
        };
        let env_metric = |name: &str| env.and_then(|m| m.get(name).copied().flatten());
        push(
            &mut metrics.approve_given_correct,
            env_metric("approve_given_correct"),
        );
        push(
            &mut metrics.approve_given_wrong,
            env_metric("approve_given_wrong"),
        );
        for (name, agent) in &record.agents {
            let series = metrics.agents.entry(name.clone()).or_default();
            push(
                &mut series.grad_norm,
                agent.update.and_then(|u| u.grad_norm),
            );
            push(&mut series.entropy, agent.update.and_then(|u| u.entropy));
            push(&mut series.zero_variance, agent.zero_variance_fraction);
            push(
                &mut series.inflation,
                agent.lemma.as_ref().and_then(|l| l.inflation_global),
            );
            push(
                &mut series.grad_ratio,
                agent
                    .update
                    .and_then(|u| match (u.grad_norm, u.shadow_grad_norm) {
                        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => Some(a / b),
                        _ => None,
                    }),
            );
            let model = record.models.get(&agent.model);
            push(
                &mut series.clip_bound,
                model.and_then(|m| m.grad_clip_bound_run),
            );
        }
    }
    Ok(metrics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        AgentRecord, AgentUpdate, LemmaRecord, ModelRecord, SourceRecord, StepRecord,
    };

    fn parse(records: &[StepRecord]) -> Result<RunMetrics, PlotError> {
        let text: String = records.iter().map(|r| r.to_line() + "\n").collect();
        let path = Path::new("run/metrics.jsonl");
        of_records(&crate::record::parse_records(path, text.as_bytes())?)
    }

    fn step(step: u32) -> StepRecord {
        StepRecord {
            step,
            ..StepRecord::default()
        }
    }

    fn agent(model: &str) -> AgentRecord {
        AgentRecord {
            model: model.into(),
            ..AgentRecord::default()
        }
    }

    fn env(pairs: &[(&str, f64)]) -> BTreeMap<String, Option<f64>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Some(*v)))
            .collect()
    }

    #[test]
    fn the_mechanism_series_come_from_the_agent_and_its_model() {
        let mut line = step(1);
        let model = ModelRecord {
            grad_clip_bound_run: Some(0.5),
            ..ModelRecord::default()
        };
        line.models.insert("m".into(), model);
        let a = AgentRecord {
            zero_variance_fraction: Some(0.25),
            lemma: Some(LemmaRecord {
                inflation_global: Some(1.5),
                ..LemmaRecord::default()
            }),
            update: Some(AgentUpdate {
                grad_norm: Some(3.0),
                shadow_grad_norm: Some(2.0),
                ..AgentUpdate::default()
            }),
            ..agent("m")
        };
        line.agents.insert("a".into(), a);
        line.agents.insert("b".into(), agent("gone"));
        let m = parse(&[line]).unwrap();
        assert_eq!(m.agents["a"].zero_variance, vec![(1, 0.25)]);
        assert_eq!(m.agents["a"].clip_bound, vec![(1, 0.5)]);
        assert_eq!(m.agents["a"].inflation, vec![(1, 1.5)]);
        assert_eq!(m.agents["a"].grad_ratio, vec![(1, 1.5)]);
        assert!(m.agents["b"].grad_ratio.is_empty());
        // A model the line does not have is no point.
        assert!(m.agents["b"].clip_bound.is_empty());
    }

    #[test]
    fn the_verifier_approve_rates_come_from_the_step_metrics() {
        let mut lines = [step(1), step(2), step(3)];
        lines[0].metrics = env(&[
            ("approve_given_correct", 0.75),
            ("approve_given_wrong", 0.25),
        ]);
        lines[1].metrics = env(&[("approve_given_correct", 1.0)]);
        let m = parse(&lines).unwrap();
        assert_eq!(m.approve_given_correct, vec![(1, 0.75), (2, 1.0)]);
        assert_eq!(m.approve_given_wrong, vec![(1, 0.25)]);
        // Without the step's own, the one source's metrics stand in; of two, neither.
        let source = |pairs: &[(&str, f64)]| SourceRecord {
            metrics: env(pairs),
            ..SourceRecord::default()
        };
        let mut lines = [step(1), step(2)];
        lines[0]
            .sources
            .insert("a".into(), source(&[("approve_given_wrong", 0.5)]));
        lines[1]
            .sources
            .insert("a".into(), source(&[("approve_given_wrong", 0.5)]));
        lines[1].sources.insert("b".into(), source(&[]));
        let m = parse(&lines).unwrap();
        assert_eq!(m.approve_given_wrong, vec![(1, 0.5)]);
    }

    #[test]
    fn null_and_missing_values_are_no_point() {
        let mut lines = [step(1), step(2)];
        lines[0].success_rate = Some(0.5);
        lines[1].reward_mean = Some(0.25);
        let update = AgentUpdate {
            entropy: Some(1.5),
            grad_norm: None,
            ..AgentUpdate::default()
        };
        let a = AgentRecord {
            update: Some(update),
            ..agent("m")
        };
        lines[1].agents.insert("a".into(), a);
        let m = parse(&lines).unwrap();
        assert_eq!(m.steps, vec![1, 2]);
        assert_eq!(m.reward_mean, vec![(2, 0.25)]);
        assert_eq!(m.success_rate, vec![(1, 0.5)]);
        assert_eq!(m.agents["a"].entropy, vec![(2, 1.5)]);
        assert!(m.agents["a"].grad_norm.is_empty());
        assert_eq!(m.ignored_last_line, None);
    }

    #[test]
    fn a_line_that_is_not_an_object_is_an_error() {
        let text = step(1).to_line() + "\n[1, 2]\n";
        let e = crate::record::parse_records(Path::new("run/metrics.jsonl"), text.as_bytes())
            .map_err(PlotError::from)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "run/metrics.jsonl:2: expected a JSON object, found an array"
        );
    }

    #[test]
    fn a_cut_off_multibyte_last_line_is_ignored() {
        let mut one = step(1);
        one.reward_mean = Some(1.0);
        let mut bytes = (one.to_line() + "\n").into_bytes();
        bytes.extend_from_slice(b"{\"step\": 2, \"note\": \"\xc3");
        let records = crate::record::parse_records(Path::new("m.jsonl"), &bytes).unwrap();
        let m = of_records(&records).unwrap();
        assert_eq!(m.ignored_last_line, Some(2));
        assert_eq!(m.reward_mean, vec![(1, 1.0)]);
        let records =
            crate::record::parse_records(Path::new("m.jsonl"), b"\n  \n{\"step\": 1").unwrap();
        let e = of_records(&records).unwrap_err();
        assert_eq!(e.to_string(), "m.jsonl: no complete metrics line");
    }
}
