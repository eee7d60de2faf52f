//! One line of `metrics.jsonl` per step, with stable key names (docs/training.md lists
//! them): the step's rewards and time split, per model the update's figures, per agent
//! its samples' advantages, lengths, validity and finish reasons and its share of the
//! gradient.

use super::mechanism::{ShadowComparison, group_signal};
use crate::rollout::{EpisodeOutcome, FailureTally, Finish, Sample};
use crate::update::UpdateReport;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Seconds of each phase of a step.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepTimes {
    pub rollout: f64,
    pub advantages: f64,
    pub update: f64,
    pub eval: f64,
    pub save: f64,
    pub total: f64,
}

/// What the trainer decided about one model this step.
#[derive(Debug, Clone, Default)]
pub struct ModelStep {
    pub lr: f64,
    pub report: UpdateReport,
    pub spike: bool,
    pub spikes_total: u64,
    pub skipped_in_a_row: u32,
}

/// How often `grad_clip` bound a model's optimizer steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClipCount {
    pub steps: u64,
    pub bound: u64,
}

impl ClipCount {
    /// This update's optimizer steps added (skipped ones, with no finite norm, excluded).
    pub fn add(&mut self, report: &UpdateReport, grad_clip: f64) {
        for &n in report.grad_norms.iter().filter(|n| n.is_finite()) {
            self.steps += 1;
            self.bound += u64::from(n > grad_clip);
        }
    }
}

pub struct StepInput<'a> {
    pub step: u32,
    pub epoch: u64,
    pub outcomes: &'a [EpisodeOutcome],
    pub failed_episodes: usize,
    /// The step's failed episodes by what they are blamed on.
    pub failures: &'a FailureTally,
    pub samples: &'a [Sample],
    pub models: &'a BTreeMap<String, ModelStep>,
    pub times: StepTimes,
    pub success_threshold: f64,
    /// The experiment's rewards by name, in the order of each outcome's `rewards`.
    pub reward_names: &'a [String],
    pub eval: Option<Value>,
    /// `[trainer] grad_clip`, and per model its clip counts so far (this step included).
    pub grad_clip: f64,
    pub clip_totals: &'a BTreeMap<String, ClipCount>,
    /// The shadow normalizer's comparison per agent, when the run has one.
    pub shadow: Option<&'a BTreeMap<String, ShadowComparison>>,
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

/// Unbiased (n − 1) standard deviation; 0 for a single value.
fn std(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// A number, or null when it is not finite (JSON has no NaN).
fn num(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

fn ratio(a: f64, b: f64) -> Value {
    if b > 0.0 { num(a / b) } else { Value::Null }
}

fn finish_counts<'a>(samples: impl Iterator<Item = &'a Sample>) -> Value {
    let mut counts: BTreeMap<&str, u64> = Finish::ALL.iter().map(|f| (f.as_str(), 0)).collect();
    for s in samples {
        *counts.entry(s.finish.as_str()).or_default() += 1;
    }
    json!(counts)
}

/// Per data source: its episodes, the team reward's mean, every named reward's mean
/// (weight 0 included) and the environment's episode metrics' means.
fn by_source(outcomes: &[EpisodeOutcome], reward_names: &[String]) -> Value {
    let mut groups: BTreeMap<&str, Vec<&EpisodeOutcome>> = BTreeMap::new();
    for o in outcomes {
        groups.entry(o.task.source.as_str()).or_default().push(o);
    }
    let mut out = Map::new();
    for (source, group) in groups {
        let rewards: Map<String, Value> = reward_names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let m = mean(
                    group
                        .iter()
                        .map(|o| f64::from(o.rewards.get(i).copied().unwrap_or(0.0))),
                );
                (name.clone(), num(m.unwrap_or(f64::NAN)))
            })
            .collect();
        let metrics: Map<String, Value> = crate::eval::metric_means(&group)
            .into_iter()
            .map(|(name, mean)| (name, num(mean)))
            .collect();
        out.insert(
            source.to_string(),
            json!({
                "episodes": group.len(),
                "reward_mean": num(mean(group.iter().map(|o| f64::from(o.team_reward))).unwrap_or(f64::NAN)),
                "rewards": rewards,
                "metrics": metrics,
            }),
        );
    }
    Value::Object(out)
}

/// The normalizer's view of samples.
pub fn sample_rows(samples: &[Sample]) -> Vec<drmas_plugin_api::SampleRow> {
    samples
        .iter()
        .map(|s| drmas_plugin_api::SampleRow {
            uid: s.uid.as_str().into(),
            traj: s.traj,
            agent: s.agent.as_str().into(),
            turn: s.turn,
            score: s.score,
        })
        .collect()
}

/// The metrics line of a step.
pub fn step_line(input: &StepInput) -> Value {
    let outcomes = input.outcomes;
    let rewards: Vec<f64> = outcomes.iter().map(|o| f64::from(o.team_reward)).collect();
    let generated: usize = input.samples.iter().map(|s| s.response_ids.len()).sum();
    let mut agents = Map::new();
    let mut by_agent: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in input.samples {
        by_agent.entry(s.agent.as_str()).or_default().push(s);
    }
    let signal = group_signal(&sample_rows(input.samples));
    for (agent, samples) in &by_agent {
        let adv: Vec<f64> = samples.iter().map(|s| f64::from(s.advantage)).collect();
        let lens: Vec<f64> = samples
            .iter()
            .map(|s| s.response_ids.len() as f64)
            .collect();
        let model = &samples[0].model;
        let update = input
            .models
            .get(model)
            .and_then(|m| m.report.agents.get(*agent));
        let mut line = json!({
            "model": model,
            "samples": samples.len(),
            "adv_mean": num(mean(adv.iter().copied()).unwrap_or(f64::NAN)),
            "adv_std": num(std(&adv)),
            "adv_min": num(adv.iter().copied().fold(f64::INFINITY, f64::min)),
            "adv_max": num(adv.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            "score_mean": num(mean(samples.iter().map(|s| f64::from(s.score))).unwrap_or(f64::NAN)),
            "response_len_mean": num(mean(lens.iter().copied()).unwrap_or(f64::NAN)),
            "response_len_max": num(lens.iter().copied().fold(0.0, f64::max)),
            "valid_ratio": num(mean(samples.iter().map(|s| if s.valid { 1.0 } else { 0.0 })).unwrap_or(f64::NAN)),
            "finish": finish_counts(samples.iter().copied()),
        });
        if let (Some(g), Value::Object(l)) = (signal.get(*agent), &mut line) {
            l.insert("groups".into(), json!(g.groups));
            l.insert("groups_with_signal".into(), json!(g.with_signal));
            l.insert(
                "zero_variance_fraction".into(),
                num(g.zero_variance_fraction),
            );
        }
        if let (Some(c), Value::Object(l)) = (input.shadow.and_then(|s| s.get(*agent)), &mut line) {
            l.insert(
                "shadow".into(),
                json!({
                    "adv_sq_mean": num(c.mean_sq),
                    "shadow_adv_sq_mean": num(c.shadow_mean_sq),
                    "correlation": c.correlation.map_or(Value::Null, num),
                }),
            );
        }
        if let Some(u) = update {
            let st = &u.stats;
            let extra = json!({
                "grad_norm": num(u.grad_norm),
                "pg_loss": num(st.pg_loss),
                "entropy": ratio(st.entropy_sum, st.tokens),
                "approx_kl": ratio(st.approx_kl_sum, st.tokens),
                "clip_frac_upper": ratio(st.clip_upper, st.tokens),
                "clip_frac_lower": ratio(st.clip_lower, st.tokens),
                "clip_frac_dual": ratio(st.clip_dual, st.tokens),
            });
            if let (Value::Object(l), Value::Object(e)) = (&mut line, extra) {
                l.extend(e);
            }
        }
        agents.insert(agent.to_string(), line);
    }
    let mut models = Map::new();
    for (id, m) in input.models {
        let r = &m.report;
        let st = &r.stats;
        let mut this = ClipCount::default();
        this.add(r, input.grad_clip);
        let total = input.clip_totals.get(id).copied().unwrap_or_default();
        models.insert(
            id.clone(),
            json!({
                "lr": m.lr,
                "grad_norm": num(r.grad_norm().as_f64()),
                "grad_spike": m.spike,
                // Optimizer steps whose pre-clip norm exceeded grad_clip: this step's
                // share, and the run's so far.
                "grad_clip_bound": ratio(this.bound as f64, this.steps as f64),
                "grad_clip_bound_run": ratio(total.bound as f64, total.steps as f64),
                "spikes": m.spikes_total,
                "skipped": r.skipped > 0,
                "skipped_in_a_row": m.skipped_in_a_row,
                "optimizer_steps": r.applied,
                "pg_loss": num(st.pg_loss),
                "kl_loss": num(st.kl_loss),
                "entropy": ratio(st.entropy_sum, st.tokens),
                "approx_kl": ratio(st.approx_kl_sum, st.tokens),
                "clip_frac_upper": ratio(st.clip_upper, st.tokens),
                "clip_frac_lower": ratio(st.clip_lower, st.tokens),
                "clip_frac_dual": ratio(st.clip_dual, st.tokens),
                "mismatch_mean_abs": ratio(st.mismatch_abs_sum, st.tokens),
                "mismatch_max_ratio": num(st.mismatch_max_ratio),
                // Importance weights are positive: a zero sum means TIS is off.
                "tis_weight_mean": if st.tis_weight_sum > 0.0 { ratio(st.tis_weight_sum, st.tokens) } else { Value::Null },
                "tokens": r.tokens,
                "update_seconds": num(r.seconds),
                "update_gflops": ratio(r.flops / 1e9, r.seconds),
                "update_phases": {
                    "forward": num(r.phases.forward), "loss": num(r.phases.loss),
                    "backward": num(r.phases.backward), "optimizer": num(r.phases.optimizer),
                },
            }),
        );
    }
    let t = input.times;
    let mut line = json!({
        "step": input.step,
        "epoch": input.epoch,
        "episodes": outcomes.len(),
        "failed_episodes": input.failed_episodes,
        "failures": input.failures,
        "reward_mean": num(mean(rewards.iter().copied()).unwrap_or(f64::NAN)),
        "success_rate": num(mean(rewards.iter().map(|&r| if r >= input.success_threshold { 1.0 } else { 0.0 })).unwrap_or(f64::NAN)),
        "turns_mean": num(mean(outcomes.iter().map(|o| o.transcript.len() as f64)).unwrap_or(f64::NAN)),
        "tool_calls_mean": num(mean(outcomes.iter().map(|o| f64::from(o.tool_calls))).unwrap_or(f64::NAN)),
        "truncated_ratio": num(mean(outcomes.iter().map(|o| if o.truncated { 1.0 } else { 0.0 })).unwrap_or(f64::NAN)),
        "tokens_generated": generated,
        "tokens_per_s": ratio(generated as f64, t.rollout),
        "time": {
            "rollout": t.rollout, "advantages": t.advantages, "update": t.update,
            "eval": t.eval, "save": t.save, "total": t.total,
        },
        "models": models,
        "agents": agents,
        "sources": by_source(outcomes, input.reward_names),
        // The environment's episode metrics over all of the step's episodes (each the
        // mean over the episodes that reported it), as `sources` has them per source.
        "metrics": crate::eval::metric_means(&outcomes.iter().collect::<Vec<_>>())
            .into_iter()
            .map(|(name, mean)| (name, num(mean)))
            .collect::<Map<String, Value>>(),
    });
    if let (Some(eval), Value::Object(l)) = (&input.eval, &mut line) {
        l.insert("eval".into(), eval.clone());
    }
    line
}

/// A metrics line without its wall-clock fields, for comparing runs.
pub fn without_timing(line: &Value) -> Value {
    let mut v = line.clone();
    if let Value::Object(o) = &mut v {
        o.remove("time");
        o.remove("tokens_per_s");
        if let Some(Value::Object(models)) = o.get_mut("models") {
            for m in models.values_mut() {
                if let Value::Object(m) = m {
                    m.remove("update_seconds");
                    m.remove("update_gflops");
                    m.remove("update_phases");
                }
            }
        }
        if let Some(Value::Object(eval)) = o.get_mut("eval") {
            eval.remove("seconds");
            eval.remove("tokens_per_second");
        }
        // The memory in use and the time spent moving are measurements of the machine.
        if let Some(Value::Object(workers)) = o.get_mut("pool").and_then(|p| p.get_mut("workers")) {
            for w in workers.values_mut() {
                if let Value::Object(w) = w {
                    w.remove("device_used_bytes");
                    w.remove("move_seconds");
                }
            }
        }
    }
    v
}

/// The `step` of a metrics line, if it is one.
pub fn line_step(line: &str) -> Option<u32> {
    let v: Value = serde_json::from_str(line).ok()?;
    v.get("step")?.as_u64().map(|s| s as u32)
}

/// Checks that a metrics log holds one line for each of steps 1 to `step`, in order,
/// before a resume from the checkpoint of `step` goes on appending to it. Lines past
/// `step`, a cut-off last line and lines that are not metrics lines do not count (the
/// resume drops them). The error names the line at fault.
pub fn check_steps(text: &str, step: u32) -> Result<(), String> {
    let mut first_line: BTreeMap<u32, usize> = BTreeMap::new();
    let mut next = 1;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let Some(s) = line
            .strip_suffix('\n')
            .and_then(line_step)
            .filter(|&s| s <= step)
        else {
            continue;
        };
        let n = i + 1;
        if let Some(first) = first_line.get(&s) {
            return Err(format!(
                "line {n} is step {s} again (its first line is line {first}): one of them must go"
            ));
        }
        if s != next {
            return Err(format!(
                "line {n} is step {s}, but step {next} has no line before it (a line was lost)"
            ));
        }
        first_line.insert(s, n);
        next += 1;
    }
    if next <= step {
        return Err(match next {
            1 => "it holds no step's line".into(),
            _ => format!(
                "its last line is step {} (line {}): the lines of steps {next} to {step} were lost",
                next - 1,
                first_line[&(next - 1)]
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_steps;

    #[test]
    fn a_metrics_log_must_hold_each_step_once() {
        let line = |s: u32| format!("{{\"step\":{s}}}\n");
        let log = |steps: &[u32]| steps.iter().map(|&s| line(s)).collect::<String>();
        assert_eq!(check_steps(&log(&[1, 2, 3]), 3), Ok(()));
        // Lines past the checkpoint and a cut last line are a resume's to drop.
        assert_eq!(check_steps(&(log(&[1, 2, 3, 4]) + "{\"st"), 3), Ok(()));
        assert_eq!(
            check_steps(&log(&[1, 3]), 3).unwrap_err(),
            "line 2 is step 3, but step 2 has no line before it (a line was lost)"
        );
        assert_eq!(
            check_steps(&log(&[1, 2, 2, 3]), 3).unwrap_err(),
            "line 3 is step 2 again (its first line is line 2): one of them must go"
        );
        assert_eq!(
            check_steps(&log(&[1, 2]), 3).unwrap_err(),
            "its last line is step 2 (line 2): the lines of steps 3 to 3 were lost"
        );
        assert_eq!(check_steps("", 2).unwrap_err(), "it holds no step's line");
    }

    #[test]
    fn clip_counts_add_the_finite_optimizer_steps_above_the_clip() {
        let report = crate::update::UpdateReport {
            grad_norms: vec![0.5, 2.0, f64::NAN, 1.0, 3.0],
            ..Default::default()
        };
        let mut c = super::ClipCount::default();
        c.add(&report, 1.0);
        // NaN was a skipped step; 1.0 is at the clip, not above it.
        assert_eq!(c, super::ClipCount { steps: 4, bound: 2 });
        c.add(&Default::default(), 1.0);
        assert_eq!(c, super::ClipCount { steps: 4, bound: 2 });
    }
}
