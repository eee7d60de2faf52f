//! The sweep's report: per arm means with intervals over seeds, paired differences
//! against the baseline arm with the evaluation's own noise beside them, stability per
//! model, the shadow normalizer's mean(A²) per agent, and the verdicts of the rules the
//! sweep file stated before the runs.

use super::file::{Metric, Rule, Sweep};
use super::stats::{self, Interval};
use crate::eval::EvalReport;
use crate::record::{AgentRecord, StepRecord};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One finished run's data.
#[derive(Debug, Clone)]
pub struct RunData {
    pub arm: String,
    pub seed: u64,
    /// Each step's record, sorted by step.
    pub steps: Vec<StepRecord>,
    pub eval: EvalReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub sweep: String,
    pub base: String,
    /// Every run of the sweep is trained and evaluated; a report of a sweep that is not
    /// is partial, and says so in its title.
    pub complete: bool,
    pub runs_done: usize,
    pub runs_total: usize,
    pub baseline: String,
    pub eval: EvalSettings,
    pub arms: Vec<ArmSummary>,
    pub paired: Vec<PairedSummary>,
    pub stability: Vec<ArmStability>,
    pub mechanism: Vec<ArmMechanism>,
    pub noise: NoiseSummary,
    pub verdicts: Vec<Verdict>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalSettings {
    pub k: u32,
    pub temperature: f64,
    pub top_p: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ArmSummary {
    pub arm: String,
    pub seeds: Vec<u64>,
    /// By source, `overall` first.
    pub avg_at_k: BTreeMap<String, Interval>,
    pub pass_at_k: BTreeMap<String, Interval>,
    /// Mean of the last `final_window` steps' train reward and success rate.
    pub final_reward: Interval,
    pub final_success: Interval,
}

#[derive(Debug, Clone, Serialize)]
pub struct PairedEval {
    /// arm − baseline, over the seeds both finished.
    pub difference: Interval,
    /// The standard deviation of the mean difference that per-task binomial sampling
    /// alone would give (avg@k only), and its variance as a share of the observed
    /// variance of the mean difference.
    pub noise_sd: Option<f64>,
    pub noise_share: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PairedSummary {
    pub arm: String,
    pub seeds: Vec<u64>,
    pub avg_at_k: BTreeMap<String, PairedEval>,
    pub pass_at_k: BTreeMap<String, PairedEval>,
    pub final_reward: Interval,
    pub final_success: Interval,
    /// By model: the difference of each run's mean log pre-clip gradient norm.
    pub mean_log_grad_norm: BTreeMap<String, Interval>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelStability {
    pub model: String,
    /// Mean over seeds of: the detector's spikes, steps above the fixed threshold.
    pub spikes: Interval,
    pub over_threshold: Interval,
    /// The threshold: `multiple` × the baseline arm's median norm over its early steps.
    pub threshold: f64,
    pub max_grad_norm: Interval,
    pub p95_grad_norm: Interval,
    pub clip_bound_fraction: Interval,
    pub mean_log_grad_norm: Interval,
    /// Optimizer steps skipped (non-finite), all seeds together.
    pub skipped: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ArmStability {
    pub arm: String,
    pub models: Vec<ModelStability>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentMechanism {
    pub agent: String,
    /// mean(A²) of the agent's samples under the arm's normalizer and under the run's
    /// shadow normalizer: each run's mean over its steps, then over seeds.
    pub adv_sq_mean: Interval,
    pub shadow_adv_sq_mean: Interval,
    /// The Lemma's inflation factor under a baseline shared by the team
    /// (`lemma.inflation_global`): each run's mean over its steps, then over seeds.
    pub inflation_global: Interval,
    /// With `shadow_gradients`: ln(grad_norm / shadow_grad_norm) of the agent's share,
    /// the two normalizers on the same batch and weights: each run's mean over its
    /// steps, then over seeds; and over every step of every seed, the ratio's 5th,
    /// 50th and 95th percentiles.
    pub log_grad_ratio: Interval,
    pub grad_ratio_p5_p50_p95: Option<[f64; 3]>,
}

/// ln(grad_norm / shadow_grad_norm) of an agent's share in one step, where both are
/// positive.
fn log_grad_ratio(a: &AgentRecord) -> Option<f64> {
    let u = a.update?;
    let (run, shadow) = (u.grad_norm?, u.shadow_grad_norm?);
    (run > 0.0 && shadow > 0.0).then(|| (run / shadow).ln())
}

/// The nearest-rank `q`-quantiles of `v`.
fn quantiles(mut v: Vec<f64>, qs: [f64; 3]) -> Option<[f64; 3]> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(qs.map(at))
}

#[derive(Debug, Clone, Serialize)]
pub struct ArmMechanism {
    pub arm: String,
    pub agents: Vec<AgentMechanism>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NoiseSummary {
    /// As the sweep file stated it before the runs (one seed pair's avg@k difference).
    pub expected: Option<f64>,
    /// Measured: √(Var_a + Var_b) of one seed pair from per-task binomial variance,
    /// averaged over the pairs (overall avg@k).
    pub measured: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub claim: String,
    pub arm: String,
    pub metric: Metric,
    pub source: Option<String>,
    pub model: Option<String>,
    pub holds_if: Rule,
    pub difference: Interval,
    /// `holds`, `does not hold` (the interval lies on the other side of 0), `not
    /// shown` (it holds 0), or `unknown` (fewer than two seed pairs).
    pub outcome: String,
    pub line: String,
}

/// The mean of the last `window` values of a per-step series.
fn final_mean(steps: &[StepRecord], window: usize, f: impl Fn(&StepRecord) -> Option<f64>) -> f64 {
    let values: Vec<f64> = steps.iter().filter_map(f).collect();
    let tail = &values[values.len().saturating_sub(window)..];
    stats::mean(tail)
}

fn grad_norms(steps: &[StepRecord], model: &str) -> Vec<f64> {
    steps
        .iter()
        .filter_map(|s| s.models.get(model)?.grad_norm)
        .filter(|g| g.is_finite())
        .collect()
}

fn mean_log(xs: &[f64]) -> f64 {
    let logs: Vec<f64> = xs.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect();
    stats::mean(&logs)
}

/// One run's value of a verdict's metric.
fn run_metric(
    run: &RunData,
    metric: Metric,
    source: &str,
    model: Option<&str>,
    window: usize,
    thresholds: &BTreeMap<String, f64>,
) -> Option<f64> {
    let model = model.unwrap_or_default();
    let v = match metric {
        Metric::AvgAtK => run.eval.source(source)?.avg_at_k,
        Metric::PassAtK => run.eval.source(source)?.pass_at_k,
        Metric::FinalReward => final_mean(&run.steps, window, |s| s.reward_mean),
        Metric::FinalSuccess => final_mean(&run.steps, window, |s| s.success_rate),
        Metric::MeanLogGradNorm => mean_log(&grad_norms(&run.steps, model)),
        Metric::MaxGradNorm => grad_norms(&run.steps, model)
            .into_iter()
            .fold(f64::NAN, f64::max),
        Metric::OverThreshold => {
            let t = *thresholds.get(model)?;
            grad_norms(&run.steps, model)
                .iter()
                .filter(|g| **g > t)
                .count() as f64
        }
        Metric::Spikes => run
            .steps
            .iter()
            .filter(|s| s.models.get(model).is_some_and(|m| m.grad_spike))
            .count() as f64,
    };
    v.is_finite().then_some(v)
}

/// Every source of the runs' evaluations, `overall` first.
fn sources(runs: &[RunData]) -> Vec<String> {
    let mut names = vec!["overall".to_string()];
    let rest: BTreeSet<&String> = runs.iter().flat_map(|r| r.eval.sources.keys()).collect();
    names.extend(rest.into_iter().cloned());
    names
}

/// The report of the finished runs `runs` of a sweep of `runs_total` runs.
pub fn build(sweep: &Sweep, runs: &[RunData], runs_total: usize) -> Report {
    let f = &sweep.file;
    let window = f.sweep.final_window as usize;
    let arms: Vec<&str> = f.arms.iter().map(|a| a.name.as_str()).collect();
    let of_arm = |arm: &str| -> Vec<&RunData> {
        // Seeds in the sweep file's order.
        f.sweep
            .seeds
            .iter()
            .filter_map(|s| runs.iter().find(|r| r.arm == arm && r.seed == *s))
            .collect()
    };
    let sources = sources(runs);
    let models: BTreeSet<String> = runs
        .iter()
        .flat_map(|r| r.steps.iter().flat_map(|s| s.models.keys().cloned()))
        .collect();
    let agents: BTreeSet<String> = runs
        .iter()
        .flat_map(|r| r.steps.iter().flat_map(|s| s.agents.keys().cloned()))
        .collect();

    // The arm-independent threshold: from the baseline arm's early steps, all seeds.
    let early = f.stability.early_steps as u64;
    let thresholds: BTreeMap<String, f64> = models
        .iter()
        .map(|m| {
            let early_norms: Vec<f64> = of_arm(&f.sweep.baseline)
                .iter()
                .flat_map(|r| {
                    r.steps
                        .iter()
                        .filter(|s| u64::from(s.step) <= early)
                        .filter_map(|s| s.models.get(m)?.grad_norm)
                })
                .filter(|g| g.is_finite())
                .collect();
            (
                m.clone(),
                f.stability.multiple * stats::median(&early_norms),
            )
        })
        .collect();
    let metric = |run: &RunData, metric: Metric, source: &str, model: Option<&str>| {
        run_metric(run, metric, source, model, window, &thresholds)
    };
    let interval_of = |rs: &[&RunData], m: Metric, source: &str, model: Option<&str>| {
        let xs: Vec<f64> = rs
            .iter()
            .filter_map(|r| metric(r, m, source, model))
            .collect();
        stats::t_interval(&xs)
    };

    let arm_summaries: Vec<ArmSummary> = arms
        .iter()
        .map(|&arm| {
            let rs = of_arm(arm);
            ArmSummary {
                arm: arm.to_string(),
                seeds: rs.iter().map(|r| r.seed).collect(),
                avg_at_k: sources
                    .iter()
                    .map(|s| (s.clone(), interval_of(&rs, Metric::AvgAtK, s, None)))
                    .collect(),
                pass_at_k: sources
                    .iter()
                    .map(|s| (s.clone(), interval_of(&rs, Metric::PassAtK, s, None)))
                    .collect(),
                final_reward: interval_of(&rs, Metric::FinalReward, "", None),
                final_success: interval_of(&rs, Metric::FinalSuccess, "", None),
            }
        })
        .collect();

    // Pairs: the seeds both the arm and the baseline finished.
    let pairs = |arm: &str| -> Vec<(&RunData, &RunData)> {
        of_arm(arm)
            .into_iter()
            .filter_map(|r| {
                let b = of_arm(&f.sweep.baseline)
                    .into_iter()
                    .find(|b| b.seed == r.seed)?;
                Some((r, b))
            })
            .collect()
    };
    let paired_metric = |ps: &[(&RunData, &RunData)],
                         m: Metric,
                         source: &str,
                         model: Option<&str>| {
        let (a, b): (Vec<f64>, Vec<f64>) = ps
            .iter()
            .filter_map(|(r, b)| Some((metric(r, m, source, model)?, metric(b, m, source, model)?)))
            .unzip();
        stats::paired(&a, &b)
    };
    let noise_var = |r: &RunData, source: &str| {
        r.eval
            .source(source)
            .map(|s| stats::avg_at_k_noise_var(&s.per_task))
            .unwrap_or(f64::NAN)
    };
    let mut measured_noise = Vec::new();
    let paired: Vec<PairedSummary> = arms
        .iter()
        .filter(|a| **a != f.sweep.baseline)
        .map(|&arm| {
            let ps = pairs(arm);
            let n = ps.len() as f64;
            for (r, b) in &ps {
                let v = noise_var(r, "overall") + noise_var(b, "overall");
                if v.is_finite() {
                    measured_noise.push(v.sqrt());
                }
            }
            let eval_pair = |m: Metric, source: &str| {
                let difference = paired_metric(&ps, m, source, None);
                let (noise_sd, noise_share) = if m == Metric::AvgAtK && !ps.is_empty() {
                    let var: f64 = ps
                        .iter()
                        .map(|(r, b)| noise_var(r, source) + noise_var(b, source))
                        .sum::<f64>()
                        / (n * n);
                    let observed = difference.sd * difference.sd / n;
                    let share = (observed > 0.0).then(|| var / observed);
                    (
                        var.is_finite().then(|| var.sqrt()),
                        share.filter(|s| s.is_finite()),
                    )
                } else {
                    (None, None)
                };
                PairedEval {
                    difference,
                    noise_sd,
                    noise_share,
                }
            };
            PairedSummary {
                arm: arm.to_string(),
                seeds: ps.iter().map(|(r, _)| r.seed).collect(),
                avg_at_k: sources
                    .iter()
                    .map(|s| (s.clone(), eval_pair(Metric::AvgAtK, s)))
                    .collect(),
                pass_at_k: sources
                    .iter()
                    .map(|s| (s.clone(), eval_pair(Metric::PassAtK, s)))
                    .collect(),
                final_reward: paired_metric(&ps, Metric::FinalReward, "", None),
                final_success: paired_metric(&ps, Metric::FinalSuccess, "", None),
                mean_log_grad_norm: models
                    .iter()
                    .map(|m| {
                        (
                            m.clone(),
                            paired_metric(&ps, Metric::MeanLogGradNorm, "", Some(m)),
                        )
                    })
                    .collect(),
            }
        })
        .collect();

    let stability: Vec<ArmStability> = arms
        .iter()
        .map(|&arm| {
            let rs = of_arm(arm);
            let per_run = |g: &dyn Fn(&RunData) -> f64| -> Interval {
                let xs: Vec<f64> = rs.iter().map(|r| g(r)).filter(|x| x.is_finite()).collect();
                stats::t_interval(&xs)
            };
            ArmStability {
                arm: arm.to_string(),
                models: models
                    .iter()
                    .map(|m| ModelStability {
                        model: m.clone(),
                        spikes: interval_of(&rs, Metric::Spikes, "", Some(m)),
                        over_threshold: interval_of(&rs, Metric::OverThreshold, "", Some(m)),
                        threshold: thresholds[m],
                        max_grad_norm: interval_of(&rs, Metric::MaxGradNorm, "", Some(m)),
                        p95_grad_norm: per_run(&|r| {
                            stats::quantile(&grad_norms(&r.steps, m), 0.95)
                        }),
                        clip_bound_fraction: per_run(&|r| {
                            let xs: Vec<f64> = r
                                .steps
                                .iter()
                                .filter_map(|s| s.models.get(m)?.grad_clip_bound)
                                .collect();
                            stats::mean(&xs)
                        }),
                        mean_log_grad_norm: interval_of(&rs, Metric::MeanLogGradNorm, "", Some(m)),
                        skipped: rs
                            .iter()
                            .flat_map(|r| &r.steps)
                            .filter(|s| s.models.get(m).is_some_and(|x| x.skipped))
                            .count(),
                    })
                    .collect(),
            }
        })
        .collect();

    let mechanism: Vec<ArmMechanism> = arms
        .iter()
        .map(|&arm| {
            let rs = of_arm(arm);
            let of = |agent: &str, pick: fn(&AgentRecord) -> Option<f64>| {
                let xs: Vec<f64> = rs
                    .iter()
                    .map(|r| {
                        let v: Vec<f64> = r
                            .steps
                            .iter()
                            .filter_map(|s| pick(s.agents.get(agent)?))
                            .collect();
                        stats::mean(&v)
                    })
                    .filter(|x| x.is_finite())
                    .collect();
                stats::t_interval(&xs)
            };
            ArmMechanism {
                arm: arm.to_string(),
                agents: agents
                    .iter()
                    .map(|a| AgentMechanism {
                        agent: a.clone(),
                        adv_sq_mean: of(a, |s| s.shadow?.adv_sq_mean),
                        shadow_adv_sq_mean: of(a, |s| s.shadow?.shadow_adv_sq_mean),
                        inflation_global: of(a, |s| s.lemma.as_ref()?.inflation_global),
                        log_grad_ratio: of(a, log_grad_ratio),
                        grad_ratio_p5_p50_p95: quantiles(
                            rs.iter()
                                .flat_map(|r| &r.steps)
                                .filter_map(|s| log_grad_ratio(s.agents.get(a.as_str())?))
                                .map(f64::exp)
                                .collect(),
                            [0.05, 0.5, 0.95],
                        ),
                    })
                    .collect(),
            }
        })
        .collect();

    let verdicts: Vec<Verdict> = f
        .verdicts
        .iter()
        .map(|rule| {
            let source = rule.source.clone().unwrap_or_else(|| "overall".into());
            let ps = pairs(&rule.arm);
            let d = paired_metric(&ps, rule.metric, &source, rule.model.as_deref());
            let outcome = match (d.sign(), rule.holds_if) {
                (None, _) => "unknown",
                (Some(std::cmp::Ordering::Greater), Rule::Above | Rule::ExcludesZero)
                | (Some(std::cmp::Ordering::Less), Rule::Below | Rule::ExcludesZero) => "holds",
                (Some(std::cmp::Ordering::Equal), _) => "not shown",
                _ => "does not hold",
            };
            let what = match (&rule.model, rule.metric.is_eval()) {
                (Some(m), _) => format!("{} of {m}", rule.metric.name()),
                (None, true) => format!("{} on {source}", rule.metric.name()),
                (None, false) => rule.metric.name().to_string(),
            };
            let rule_text = match rule.holds_if {
                Rule::Above => "the interval lies above 0",
                Rule::Below => "the interval lies below 0",
                Rule::ExcludesZero => "the interval excludes 0",
            };
            let line = format!(
                "{}: {outcome} — {what}, {} − {}: {} over {} seed pairs (holds if {rule_text})",
                rule.claim,
                rule.arm,
                f.sweep.baseline,
                fmt_interval(&d, 3),
                d.n
            );
            Verdict {
                claim: rule.claim.clone(),
                arm: rule.arm.clone(),
                metric: rule.metric,
                source: rule.metric.is_eval().then_some(source),
                model: rule.model.clone(),
                holds_if: rule.holds_if,
                difference: d,
                outcome: outcome.into(),
                line,
            }
        })
        .collect();

    Report {
        sweep: f.sweep.name.clone(),
        base: f.sweep.base.display().to_string(),
        complete: runs.len() == runs_total,
        runs_done: runs.len(),
        runs_total,
        baseline: f.sweep.baseline.clone(),
        eval: EvalSettings {
            k: f.eval.k,
            temperature: f.eval.temperature,
            top_p: f.eval.top_p,
        },
        arms: arm_summaries,
        paired,
        stability,
        mechanism,
        noise: NoiseSummary {
            expected: f.sweep.expected_noise,
            measured: (!measured_noise.is_empty()).then(|| stats::mean(&measured_noise)),
        },
        verdicts,
    }
}

/// `0.512 [0.401, 0.623]`, `+0.031 [−0.012, +0.074]` with `signed`; `0.512 (1 seed)`
/// without an interval.
fn fmt(x: f64, digits: usize, signed: bool) -> String {
    if !x.is_finite() {
        return "—".into();
    }
    if signed {
        format!("{x:+.digits$}")
    } else {
        format!("{x:.digits$}")
    }
}

fn fmt_interval(i: &Interval, digits: usize) -> String {
    fmt_interval_with(i, digits, true)
}

fn fmt_interval_with(i: &Interval, digits: usize, signed: bool) -> String {
    if i.n == 0 {
        return "—".into();
    }
    if !i.low.is_finite() {
        return format!("{} (n = {})", fmt(i.mean, digits, signed), i.n);
    }
    format!(
        "{} [{}, {}]",
        fmt(i.mean, digits, signed),
        fmt(i.low, digits, signed),
        fmt(i.high, digits, signed)
    )
}

impl Report {
    /// The report as Markdown: the tables a README can take as they are.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let partial = if self.complete {
            String::new()
        } else {
            format!(
                " — PARTIAL: {} of {} runs finished",
                self.runs_done, self.runs_total
            )
        };
        md.push_str(&format!("# Sweep `{}`{partial}\n\n", self.sweep));
        md.push_str(&format!(
            "Base experiment `{}`; baseline arm `{}`; each run's final checkpoint evaluated at k = {} (T {}, top-p {}). Intervals are two-sided 95 % Student-t intervals over seeds.\n\n",
            self.base, self.baseline, self.eval.k, self.eval.temperature, self.eval.top_p
        ));

        md.push_str("## Verdicts (rules stated in the sweep file before the runs)\n\n");
        if self.verdicts.is_empty() {
            md.push_str("No rules stated.\n");
        }
        for v in &self.verdicts {
            md.push_str(&format!("- {}\n", v.line));
        }

        let sources: Vec<&String> = self
            .arms
            .first()
            .map(|a| a.avg_at_k.keys().collect())
            .unwrap_or_default();
        let mut ordered: Vec<&String> = sources
            .iter()
            .copied()
            .filter(|s| *s == "overall")
            .collect();
        ordered.extend(sources.iter().copied().filter(|s| *s != "overall"));
        md.push_str("\n## Per arm (mean [95 % interval] over seeds)\n\n| arm | seeds |");
        for s in &ordered {
            md.push_str(&format!(" avg@{k} {s} | pass@{k} {s} |", k = self.eval.k));
        }
        md.push_str(" final train reward | final success |\n|---|---|");
        for _ in &ordered {
            md.push_str("---|---|");
        }
        md.push_str("---|---|\n");
        for a in &self.arms {
            md.push_str(&format!("| {} | {} |", a.arm, a.seeds.len()));
            for s in &ordered {
                md.push_str(&format!(
                    " {} | {} |",
                    fmt_interval_with(&a.avg_at_k[*s], 3, false),
                    fmt_interval_with(&a.pass_at_k[*s], 3, false)
                ));
            }
            md.push_str(&format!(
                " {} | {} |\n",
                fmt_interval_with(&a.final_reward, 3, false),
                fmt_interval_with(&a.final_success, 3, false)
            ));
        }

        md.push_str(&format!(
            "\n## Paired by seed against `{}` (arm − baseline)\n\n| arm | pairs | metric | source | difference [95 % interval] | eval-noise sd of the mean difference | noise share of its variance |\n|---|---|---|---|---|---|---|\n",
            self.baseline
        ));
        for p in &self.paired {
            for s in &ordered {
                for (name, e) in [("avg@k", &p.avg_at_k[*s]), ("pass@k", &p.pass_at_k[*s])] {
                    md.push_str(&format!(
                        "| {} | {} | {name} | {s} | {} | {} | {} |\n",
                        p.arm,
                        p.seeds.len(),
                        fmt_interval(&e.difference, 3),
                        e.noise_sd.map(|x| fmt(x, 3, false)).unwrap_or("—".into()),
                        e.noise_share
                            .map(|x| format!("{:.0} %", 100.0 * x))
                            .unwrap_or("—".into()),
                    ));
                }
            }
            md.push_str(&format!(
                "| {} | {} | final train reward | | {} | | |\n| {} | {} | final success | | {} | | |\n",
                p.arm,
                p.seeds.len(),
                fmt_interval(&p.final_reward, 3),
                p.arm,
                p.seeds.len(),
                fmt_interval(&p.final_success, 3)
            ));
            for (m, d) in &p.mean_log_grad_norm {
                md.push_str(&format!(
                    "| {} | {} | mean log grad norm | {m} | {} | | |\n",
                    p.arm,
                    p.seeds.len(),
                    fmt_interval(d, 3)
                ));
            }
        }
        md.push_str(&format!(
            "\nEvaluation noise of one seed pair's overall avg@k difference: expected {}, measured {} (per-task binomial variance).\n",
            self.noise.expected.map(|x| fmt(x, 3, false)).unwrap_or("— (not stated)".into()),
            self.noise.measured.map(|x| fmt(x, 3, false)).unwrap_or("—".into())
        ));

        md.push_str("\n## Stability per model (pre-clip gradient norms; mean [95 % interval] over seeds)\n\n| arm | model | spikes (detector) | steps above threshold | threshold | max norm | p95 norm | clip-bound fraction | mean log norm | skipped |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for a in &self.stability {
            for m in &a.models {
                md.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    a.arm,
                    m.model,
                    fmt_interval_with(&m.spikes, 2, false),
                    fmt_interval_with(&m.over_threshold, 2, false),
                    fmt(m.threshold, 3, false),
                    fmt_interval_with(&m.max_grad_norm, 2, false),
                    fmt_interval_with(&m.p95_grad_norm, 2, false),
                    fmt_interval_with(&m.clip_bound_fraction, 2, false),
                    fmt_interval_with(&m.mean_log_grad_norm, 2, false),
                    m.skipped
                ));
            }
        }

        md.push_str("\n## Mechanism: mean(A²) per agent under the arm's normalizer and its shadow\n\nThe inflation factor is the Lemma's (σ_k² + (μ_k − μ)²) / σ² under a baseline shared by the team (docs/mechanism.md). The gradient ratio is the agent's pre-clip norm under the arm's normalizer over the norm the shadow normalizer gave on the same batch and weights (`shadow_gradients`): its log's mean per run then over seeds, and the ratio's percentiles over every step.\n\n| arm | agent | mean(A²), the arm's normalizer | mean(A²), the shadow normalizer | inflation factor, shared baseline | ln(grad norm / shadow's) | ratio p5 / p50 / p95 |\n|---|---|---|---|---|---|---|\n");
        for a in &self.mechanism {
            for g in &a.agents {
                let ratio = g
                    .grad_ratio_p5_p50_p95
                    .map_or("–".to_string(), |[a, b, c]| {
                        format!("{a:.3} / {b:.3} / {c:.3}")
                    });
                md.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    a.arm,
                    g.agent,
                    fmt_interval_with(&g.adv_sq_mean, 3, false),
                    fmt_interval_with(&g.shadow_adv_sq_mean, 3, false),
                    fmt_interval_with(&g.inflation_global, 3, false),
                    fmt_interval_with(&g.log_grad_ratio, 3, false),
                    ratio
                ));
            }
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::AgentUpdate;

    fn agent(run: Option<f64>, shadow: Option<f64>) -> AgentRecord {
        AgentRecord {
            update: Some(AgentUpdate {
                grad_norm: run,
                shadow_grad_norm: shadow,
                ..AgentUpdate::default()
            }),
            ..AgentRecord::default()
        }
    }

    #[test]
    fn the_paired_gradient_ratio_of_a_step_and_its_percentiles() {
        let r = log_grad_ratio(&agent(Some(2.0), Some(0.5))).unwrap();
        assert!((r - 4f64.ln()).abs() < 1e-12);
        // No ratio without both norms, or with a zero one.
        assert_eq!(log_grad_ratio(&agent(Some(2.0), None)), None);
        assert_eq!(log_grad_ratio(&agent(Some(0.0), Some(1.0))), None);
        assert_eq!(log_grad_ratio(&AgentRecord::default()), None);
        // Nearest rank over 1..=20: p5 is the 1st, p50 the 10th, p95 the 19th.
        let v: Vec<f64> = (1..=20).map(f64::from).rev().collect();
        assert_eq!(quantiles(v, [0.05, 0.5, 0.95]), Some([1.0, 10.0, 19.0]));
        assert_eq!(quantiles(Vec::new(), [0.05, 0.5, 0.95]), None);
    }
}
