//! `drmas bench step CONFIG`: N training steps of any experiment (its own seed, models,
//! team and data) in a scratch run folder, each step's time split by phase beside the
//! bounds of the work the step had to do, with the machine's GEMM rate and memory
//! bandwidth measured in the same run.
//!
//! The bounds count only necessary work (docs/performance.md):
//! - generation: each distinct prompt prefix of a model computed once (the nodes of the
//!   step's prompt trie: what an ideal prefix cache computes), every response token
//!   decoded with its logits, and per decode step the model's weights read once — the
//!   decode steps being, per set of weights, the longest chain of response tokens one
//!   episode asked of it in turn;
//! - update: the same distinct prefixes and the responses, forward and backward (3× the
//!   forward for a full model, 2× for LoRA, whose frozen weights get no gradient),
//!   logits only at response positions.

use super::PluginDirs;
use super::bench::{copy_bandwidth, peak_rss_mib};
use super::bench_train::gemm_gflops;
use drmas::model::{
    ModelConfig,
    flops::{distinct_prefix_flops, response_flops},
    memory::parameter_count,
};
use drmas::record::{ModelRecord, StepRecord, UpdatePhases};
use drmas::rollout::Sample;
use drmas::train::{TrainOptions, Trainer};
use serde_json::{Value, json};
use std::{collections::BTreeMap, path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// The experiment file.
    config: PathBuf,
    /// Steps to run; the first is a warm-up and is left out of the medians.
    #[arg(long, default_value_t = 3)]
    steps: u32,
    /// The run folder (must not exist); a temporary folder, removed at the end, when
    /// absent.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    overrides: super::Overrides,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

/// A scratch folder under the system's temporary folder, removed when dropped (also
/// when the benchmark fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("drmas-bench-step-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("scratch folder {}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One model of the experiment as the bounds see it.
struct ModelInfo {
    config: ModelConfig,
    /// The update's FLOPs per forward FLOP: 3 for full training, 2 for LoRA.
    update_factor: f64,
    /// The worker (set of weights) it generates with: LoRA models on one base share it.
    weights: usize,
}

/// The work of one step and its bounds, in seconds at the measured rates.
#[derive(Default, Clone)]
struct Work {
    generated: usize,
    prompt_tokens: usize,
    prefill_flops: f64,
    decode_flops: f64,
    decode_weight_seconds: f64,
    rollout_bound: f64,
    update_flops: f64,
    update_bound: f64,
}

fn step_work(
    samples: &[Sample],
    models: &BTreeMap<String, ModelInfo>,
    weight_bytes: &[f64],
    gflops: f64,
    bandwidth: f64,
) -> Work {
    let rate = gflops * 1e9;
    let mut w = Work::default();
    let mut by_model: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_model.entry(s.model.as_str()).or_default().push(s);
    }
    let mut decode_flops_per_weights = vec![0.0; weight_bytes.len()];
    // Per set of weights, each episode's chain of response tokens (its turns on those
    // weights come one after another).
    let mut chains: Vec<BTreeMap<(&str, u32), usize>> = vec![BTreeMap::new(); weight_bytes.len()];
    for (id, rows) in &by_model {
        let Some(m) = models.get(*id) else { continue };
        let prompts: Vec<&[i64]> = rows.iter().map(|s| s.prompt_ids.as_slice()).collect();
        let prefix = distinct_prefix_flops(&m.config, &prompts);
        let responses: f64 = rows
            .iter()
            .map(|s| response_flops(&m.config, s.prompt_ids.len(), s.response_ids.len()))
            .sum();
        w.prefill_flops += prefix;
        w.decode_flops += responses;
        decode_flops_per_weights[m.weights] += responses;
        w.update_flops += m.update_factor * (prefix + responses);
        for s in rows {
            w.generated += s.response_ids.len();
            w.prompt_tokens += s.prompt_ids.len();
            *chains[m.weights]
                .entry((s.uid.as_str(), s.traj))
                .or_default() += s.response_ids.len();
        }
    }
    let mut decode_seconds = 0.0;
    for (g, bytes) in weight_bytes.iter().enumerate() {
        let steps = chains[g].values().copied().max().unwrap_or(0) as f64;
        let weight_seconds = steps * bytes / bandwidth;
        w.decode_weight_seconds += weight_seconds;
        decode_seconds += weight_seconds.max(decode_flops_per_weights[g] / rate);
    }
    w.rollout_bound = w.prefill_flops / rate + decode_seconds;
    w.update_bound = w.update_flops / rate;
    w
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.steps >= 2,
        "--steps must be at least 2 (the first step is a warm-up)"
    );
    let Some(super::CheckedExperiment {
        mut exp, registry, ..
    }) = super::load_checked(&args.config, &args.overrides, &args.plugin_dirs)
    else {
        return Ok(ExitCode::FAILURE);
    };
    let scratch = match &args.out {
        Some(out) => {
            anyhow::ensure!(
                !out.exists(),
                "--out {}: already exists; the benchmark needs a fresh run folder",
                out.display()
            );
            None
        }
        None => Some(Scratch::new()?),
    };
    let run_dir = match (&args.out, &scratch) {
        (Some(out), _) => out.clone(),
        (None, Some(dir)) => dir.0.join("run"),
        (None, None) => unreachable!("a scratch folder when --out is absent"),
    };
    let f = &mut exp.file;
    f.experiment.output_dir = Some(run_dir.clone());
    f.trainer.steps = args.steps;
    // Evaluation is not part of a training step's bound; `drmas eval` measures it.
    f.trainer.eval_every = 0;

    let device = if tch::Cuda::is_available() {
        tch::Device::Cuda(0)
    } else {
        tch::Device::Cpu
    };
    let groups = drmas::launch::worker_groups(&exp);
    let mut models = BTreeMap::new();
    let mut weight_bytes = Vec::new();
    let mut kinds = Vec::new();
    for (g, members) in groups.iter().enumerate() {
        let first = &exp.file.models[members[0]];
        let config = ModelConfig::from_file(&first.weights_dir().join("config.json"))?;
        let kind = first
            .dtype
            .map_or_else(|| drmas::model::default_kind(device), |d| d.kind());
        kinds.push(kind);
        weight_bytes.push((parameter_count(&config) as usize * kind.elt_size_in_bytes()) as f64);
        for &i in members {
            let m = &exp.file.models[i];
            models.insert(
                m.id.clone(),
                ModelInfo {
                    config: config.clone(),
                    update_factor: if m.lora.is_some() { 2.0 } else { 3.0 },
                    weights: g,
                },
            );
        }
    }
    let kind = kinds.first().copied().unwrap_or(tch::Kind::Float);
    errln!("measuring the GEMM rate and memory bandwidth ({device:?}, {kind:?}) …");
    let rates_before = (gemm_gflops(device, kind), copy_bandwidth(device));

    let mut trainer = Trainer::from_experiment(
        &exp,
        &registry,
        TrainOptions {
            quiet: true,
            ..TrainOptions::default()
        },
    )?;
    let mut lines = Vec::new();
    let mut works = Vec::new();
    for step in 1..=args.steps {
        let Some(line) = trainer.step()? else {
            anyhow::bail!("stopped by a signal at step {step}");
        };
        works.push(trainer.last_step_samples().to_vec());
        let t = &line.time;
        errln!(
            "step {step}/{}: {:.1} s (rollout {:.1}, update {:.1})",
            args.steps,
            t.total,
            t.rollout,
            t.update
        );
        lines.push(line);
    }
    // A step's line is written before its checkpoint: the last one's time is read here.
    let last_save = trainer.last_save_seconds();
    let save_every = exp.file.trainer.save_every;
    drop(trainer);
    let rates_after = (gemm_gflops(device, kind), copy_bandwidth(device));
    // The faster reading of each rate: the smaller, stricter bound.
    let gflops = rates_before.0.max(rates_after.0);
    let bandwidth = rates_before.1.max(rates_after.1);

    let steps: Vec<Value> = lines
        .iter()
        .zip(&works)
        .map(|(line, samples)| {
            step_json(
                line,
                &step_work(samples, &models, &weight_bytes, gflops, bandwidth),
            )
        })
        .collect();
    let timed = &steps[1..];
    let med = |key: &str| median(timed.iter().filter_map(|s| s[key].as_f64()).collect());
    let mut summary = serde_json::Map::new();
    for key in [
        "total",
        "rollout",
        "advantages",
        "update",
        "save",
        "other",
        "tokens_generated",
        "prompt_tokens",
        "rollout_bound",
        "update_bound",
        "decode_weight_seconds",
        "rollout_ratio",
        "update_ratio",
        "step_ratio",
    ] {
        summary.insert(key.into(), json!(round(med(key), 3)));
    }
    let per_model: BTreeMap<String, Value> = models
        .keys()
        .map(|id| {
            let m = |pick: &dyn Fn(&ModelRecord) -> Option<f64>| {
                median(
                    lines[1..]
                        .iter()
                        .filter_map(|l| pick(l.models.get(id)?))
                        .collect(),
                )
            };
            let phase = |pick: fn(&UpdatePhases) -> Option<f64>| {
                round(m(&|v| v.update_phases.as_ref().and_then(pick)), 3)
            };
            (
                id.clone(),
                json!({
                    "update_seconds": round(m(&|v| v.update_seconds), 3),
                    "update_gflops": round(m(&|v| v.update_gflops), 1),
                    "phases": {
                        "forward": phase(|p| p.forward),
                        "loss": phase(|p| p.loss),
                        "backward": phase(|p| p.backward),
                        "optimizer": phase(|p| p.optimizer),
                    },
                }),
            )
        })
        .collect();
    let report = json!({
        "experiment": exp.file.experiment.name,
        "config": args.config.display().to_string(),
        "steps": steps,
        "median": summary,
        "models": per_model,
        "device": format!("{device:?}"),
        "gemm_gflops": [round(rates_before.0, 1), round(rates_after.0, 1)],
        "bandwidth_gb_s": [round(rates_before.1 / 1e9, 2), round(rates_after.1 / 1e9, 2)],
        "peak_rss_mib": peak_rss_mib(),
        "threads": tch::get_num_threads(),
        "last_checkpoint_seconds": round(last_save, 3),
        "save_every": save_every,
    });
    print_table(&report);
    if let Some(path) = &args.json {
        drmas::output::write_atomic(path, format!("{report:#}\n").as_bytes())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    drop(scratch);
    Ok(ExitCode::SUCCESS)
}

fn step_json(line: &StepRecord, w: &Work) -> Value {
    let t = &line.time;
    let (total, rollout, update) = (t.total, t.rollout, t.update);
    let (advantages, save) = (t.advantages, t.save);
    json!({
        "step": line.step,
        "total": total,
        "rollout": rollout,
        "advantages": advantages,
        "update": update,
        "save": save,
        "other": total - rollout - advantages - update - save - t.eval,
        "tokens_generated": w.generated,
        "prompt_tokens": w.prompt_tokens,
        "prefill_gflop": w.prefill_flops / 1e9,
        "decode_gflop": w.decode_flops / 1e9,
        "decode_weight_seconds": w.decode_weight_seconds,
        "rollout_bound": w.rollout_bound,
        "update_gflop": w.update_flops / 1e9,
        "update_bound": w.update_bound,
        "rollout_ratio": rollout / w.rollout_bound,
        "update_ratio": update / w.update_bound,
        "step_ratio": total / (w.rollout_bound + w.update_bound),
    })
}

fn print_table(r: &Value) {
    let m = &r["median"];
    let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
    outln!(
        "{} — median of steps 2..{} on {} (GEMM {} GFLOP/s, copy {} GB/s, before/after)",
        r["experiment"].as_str().unwrap_or("?"),
        r["steps"].as_array().map_or(0, Vec::len),
        r["device"].as_str().unwrap_or("?"),
        r["gemm_gflops"],
        r["bandwidth_gb_s"]
    );
    outln!(
        "  step {:.1} s = rollout {:.1} + advantages {:.2} + update {:.1} + save {:.1} + other {:.2}",
        f("total"),
        f("rollout"),
        f("advantages"),
        f("update"),
        f("save"),
        f("other")
    );
    outln!(
        "  rollout {:.1} s vs bound {:.1} s ({:.2}×; decode weight reads {:.1} s), {} tokens generated",
        f("rollout"),
        f("rollout_bound"),
        f("rollout_ratio"),
        f("decode_weight_seconds"),
        f("tokens_generated")
    );
    outln!(
        "  tokens trained: {} response tokens after {} prompt tokens (before prefix sharing)",
        f("tokens_generated"),
        f("prompt_tokens")
    );
    outln!(
        "  update {:.1} s vs bound {:.1} s ({:.2}×); step {:.2}× its bound",
        f("update"),
        f("update_bound"),
        f("update_ratio"),
        f("step_ratio")
    );
    outln!(
        "  the last checkpoint took {} s (one every {} steps)",
        r["last_checkpoint_seconds"],
        r["save_every"]
    );
    if let Some(models) = r["models"].as_object() {
        for (id, m) in models {
            let p = &m["phases"];
            outln!(
                "  model {id}: update {} s at {} GFLOP/s (drmas's count): forward {}, loss {}, backward {}, optimizer {}",
                m["update_seconds"],
                m["update_gflops"],
                p["forward"],
                p["loss"],
                p["backward"],
                p["optimizer"]
            );
        }
    }
}
