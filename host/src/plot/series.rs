//! Reading a run's `metrics.jsonl` into one series per plotted metric.

use super::PlotError;
use serde_json::{Map, Value};
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
    /// Lines that parsed but carry no usable `step`, which were skipped.
    pub lines_without_step: usize,
    /// Steps written on more than one line (a resumed run redoes the steps after its
    /// checkpoint), each with its 1-based line numbers in order; the last one is drawn.
    pub duplicate_steps: BTreeMap<u64, Vec<usize>>,
}

/// Reads `path` (a `metrics.jsonl`). A missing file, a file with no metrics line, and a
/// broken line anywhere but last are errors naming the file (and line).
pub fn read_metrics(path: &Path) -> Result<RunMetrics, PlotError> {
    let bytes = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            PlotError::NoMetrics {
                path: path.to_path_buf(),
            }
        } else {
            PlotError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    parse_metrics(path, &bytes)
}

/// Parses the contents of a `metrics.jsonl`; `path` only names the file in errors.
pub fn parse_metrics(path: &Path, bytes: &[u8]) -> Result<RunMetrics, PlotError> {
    // Bytes, not a string: a cut-off line may end inside a multi-byte character.
    let lines: Vec<(usize, &[u8])> = bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim_ascii()))
        .filter(|(_, line)| !line.is_empty())
        .collect();
    let last = lines.last().map(|&(n, _)| n);

    let mut by_step: BTreeMap<u64, Map<String, Value>> = BTreeMap::new();
    let mut lines_of: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut metrics = RunMetrics::default();
    for (number, line) in lines {
        let object = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(object)) => object,
            Ok(other) => {
                return Err(PlotError::BadLine {
                    path: path.to_path_buf(),
                    line: number,
                    message: format!("expected a JSON object, found {}", kind(&other)),
                });
            }
            Err(_) if Some(number) == last => {
                metrics.ignored_last_line = Some(number);
                continue;
            }
            Err(e) => {
                return Err(PlotError::BadLine {
                    path: path.to_path_buf(),
                    line: number,
                    message: format!("invalid JSON: {e}"),
                });
            }
        };
        match object.get("step").and_then(as_step) {
            Some(step) => {
                by_step.insert(step, object);
                lines_of.entry(step).or_default().push(number);
            }
            None => metrics.lines_without_step += 1,
        }
    }
    if by_step.is_empty() {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
        });
    }
    metrics.duplicate_steps = lines_of.into_iter().filter(|(_, l)| l.len() > 1).collect();

    for (&step, line) in &by_step {
        metrics.steps.push(step);
        let push = |series: &mut Series, value: Option<&Value>| {
            if let Some(v) = value.and_then(Value::as_f64).filter(|v| v.is_finite()) {
                series.push((step, v));
            }
        };
        push(&mut metrics.reward_mean, line.get("reward_mean"));
        push(&mut metrics.success_rate, line.get("success_rate"));
        push(
            &mut metrics.eval_avg_at_k,
            line.get("eval").and_then(|e| e.get("avg_at_k")),
        );
        // The step's environment metrics; a line written before they were summed over
        // the step has them per source, which is the same when there is one source.
        let env = line.get("metrics").or_else(|| {
            let sources = line.get("sources")?.as_object()?;
            let mut one = sources.values();
            match (one.next(), one.next()) {
                (Some(only), None) => only.get("metrics"),
                _ => None,
            }
        });
        push(
            &mut metrics.approve_given_correct,
            env.and_then(|m| m.get("approve_given_correct")),
        );
        push(
            &mut metrics.approve_given_wrong,
            env.and_then(|m| m.get("approve_given_wrong")),
        );
        if let Some(agents) = line.get("agents").and_then(Value::as_object) {
            for (name, agent) in agents {
                let Some(agent) = agent.as_object() else {
                    continue;
                };
                let series = metrics.agents.entry(name.clone()).or_default();
                push(&mut series.grad_norm, agent.get("grad_norm"));
                push(&mut series.entropy, agent.get("entropy"));
                push(
                    &mut series.zero_variance,
                    agent.get("zero_variance_fraction"),
                );
                let model = agent
                    .get("model")
                    .and_then(Value::as_str)
                    .and_then(|id| line.get("models")?.get(id)?.get("grad_clip_bound_run"));
                push(&mut series.clip_bound, model);
            }
        }
    }
    Ok(metrics)
}

/// A non-negative integer step (`3` or `3.0`).
fn as_step(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < u64::MAX as f64)
            .map(|f| f as u64)
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RunMetrics, PlotError> {
        parse_metrics(Path::new("run/metrics.jsonl"), text.as_bytes())
    }

    #[test]
    fn the_mechanism_series_come_from_the_agent_and_its_model() {
        let m = parse(
            "{\"step\": 1, \"models\": {\"m\": {\"grad_clip_bound_run\": 0.5}}, \"agents\": {\"a\": {\"model\": \"m\", \"zero_variance_fraction\": 0.25}, \"b\": {\"model\": \"gone\"}}}\n",
        )
        .unwrap();
        assert_eq!(m.agents["a"].zero_variance, vec![(1, 0.25)]);
        assert_eq!(m.agents["a"].clip_bound, vec![(1, 0.5)]);
        // A model the line does not have is no point.
        assert!(m.agents["b"].clip_bound.is_empty());
    }

    #[test]
    fn the_verifier_approve_rates_come_from_the_step_metrics() {
        let m = parse(
            "{\"step\": 1, \"metrics\": {\"approve_given_correct\": 0.75, \"approve_given_wrong\": 0.25}}\n\
             {\"step\": 2, \"metrics\": {\"approve_given_correct\": 1}}\n\
             {\"step\": 3}\n",
        )
        .unwrap();
        assert_eq!(m.approve_given_correct, vec![(1, 0.75), (2, 1.0)]);
        assert_eq!(m.approve_given_wrong, vec![(1, 0.25)]);
        // Without the step's own, the one source's metrics stand in; of two, neither.
        let m = parse(
            "{\"step\": 1, \"sources\": {\"a\": {\"metrics\": {\"approve_given_wrong\": 0.5}}}}\n\
             {\"step\": 2, \"sources\": {\"a\": {\"metrics\": {\"approve_given_wrong\": 0.5}}, \"b\": {}}}\n",
        )
        .unwrap();
        assert_eq!(m.approve_given_wrong, vec![(1, 0.5)]);
    }

    #[test]
    fn null_and_missing_values_are_no_point() {
        let m = parse(
            "{\"step\": 1, \"reward_mean\": null, \"success_rate\": 0.5}\n\
             {\"step\": 2.0, \"reward_mean\": 0.25, \"agents\": {\"a\": {\"entropy\": 1.5, \"grad_norm\": null}}}\n\
             {\"reward_mean\": 9}\n",
        )
        .unwrap();
        assert_eq!(m.steps, vec![1, 2]);
        assert_eq!(m.reward_mean, vec![(2, 0.25)]);
        assert_eq!(m.success_rate, vec![(1, 0.5)]);
        assert_eq!(m.agents["a"].entropy, vec![(2, 1.5)]);
        assert!(m.agents["a"].grad_norm.is_empty());
        assert_eq!(m.lines_without_step, 1);
        assert_eq!(m.ignored_last_line, None);
    }

    #[test]
    fn a_line_that_is_not_an_object_is_an_error() {
        let e = parse("{\"step\": 1}\n[1, 2]\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "run/metrics.jsonl:2: expected a JSON object, found an array"
        );
    }

    #[test]
    fn a_cut_off_multibyte_last_line_is_ignored() {
        let bytes = b"{\"step\": 1, \"reward_mean\": 1}\n{\"step\": 2, \"note\": \"\xc3";
        let m = parse_metrics(Path::new("m.jsonl"), bytes).unwrap();
        assert_eq!(m.ignored_last_line, Some(2));
        assert_eq!(m.reward_mean, vec![(1, 1.0)]);
        let e = parse_metrics(Path::new("m.jsonl"), b"\n  \n{\"step\": 1").unwrap_err();
        assert_eq!(e.to_string(), "m.jsonl: no complete metrics line");
    }
}
