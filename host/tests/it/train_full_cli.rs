//! `[[models]] shard = "full"` (ZeRO-3) through the real binary on the tiny math team:
//! jobs of 2 and 3 ranks take the steps one process takes on the same global batch
//! (with `"optimizer"` at 3 ranks beside them), each rank holding only its shard of the
//! weights during the update and gathering one layer at a time (bytes reported by the
//! worker, checked against the flat layout); the tiny model's units are not divisible
//! by 3 (padding). A LoRA team with a sharded base trains as one process does; LoRA
//! dropout is refused with `"full"`, as is `"full"` without a job; a killed rank stops
//! the others with the collective named. A model shared by two agents trains sharded as
//! one process trains it, and `drmas check --ranks N` plans one rank's share.

use crate::common;
use crate::common::process::Group;
use crate::train_data_parallel::trainer::{assert_close, worst};
use crate::train_dist_cli::{drmas, experiment, free_port, lines, text};
use crate::train_shard_cli::saved_state_shapes;
use drmas::model::{Decoder, ModelConfig};
use drmas::update::FlatLayout;
use std::{
    path::Path,
    process::{Output, Stdio},
    time::{Duration, Instant},
};

const MODELS: [&str; 2] = ["solver-lm", "verifier-lm"];

/// Sets `shard = MODE` in every `[[models]]` table, and an entropy bonus so that every
/// step has a gradient to compare (the tiny model earns no reward).
pub(crate) fn with_mode(config: &Path, mode: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    assert_eq!(text.matches("lr = 1e-3\n").count(), 2);
    let text = text
        .replace("lr = 1e-3\n", &format!("lr = 1e-3\nshard = \"{mode}\"\n"))
        .replace("[trainer]\n", "[trainer]\nentropy_coef = 0.01\n");
    std::fs::write(config, text).unwrap();
}

/// Every `[[models]]` a LoRA adapter of rank 4 on the tiny model, which stays frozen.
fn with_lora(config: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    let model = common::tiny_models().join("tiny-chat");
    let path = format!("path = {model:?}");
    assert_eq!(text.matches(&path).count(), 2);
    let text = text.replace(&path, &format!("base = {model:?}\nlora = {{ rank = 4 }}"));
    std::fs::write(config, text).unwrap();
}

pub(crate) fn one_process(config: &Path, extra: &[&str]) -> Output {
    let o = drmas()
        .arg("train")
        .arg(config)
        .args(extra)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    o
}

/// The `n` ranks of a job, spawned (logging at info: the workers say what they hold).
fn spawn_ranks(config: &Path, n: usize, extra: &[&str]) -> Vec<Group> {
    let port = free_port();
    (0..n)
        .rev()
        .map(|rank| {
            Group::spawn(
                drmas()
                    .arg("train")
                    .arg(config)
                    .args(extra)
                    .arg("--quiet")
                    .env("DRMAS_LOG", "info")
                    .env("RANK", rank.to_string())
                    .env("WORLD_SIZE", n.to_string())
                    .env("MASTER_ADDR", "127.0.0.1")
                    .env("MASTER_PORT", port.to_string())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped()),
            )
        })
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// The `n` ranks of a job, run to success; their outputs in rank order.
pub(crate) fn ranks(config: &Path, n: usize, extra: &[&str]) -> Vec<Output> {
    let out: Vec<Output> = spawn_ranks(config, n, extra)
        .into_iter()
        .map(Group::wait_with_output)
        .collect();
    for (rank, o) in out.iter().enumerate() {
        assert!(o.status.success(), "rank {rank}: {}", text(o));
    }
    out
}

/// The last `key=value` of `model`'s worker on `rank` in the line saying `what`.
pub(crate) fn logged(o: &Output, what: &str, model: &str, rank: usize, key: &str) -> u64 {
    let t = text(o);
    let line = t
        .lines()
        .rfind(|l| l.contains(what) && l.contains(&format!("model={model} ")))
        .unwrap_or_else(|| panic!("no `{what}` line of {model} on rank {rank}:\n{t}"));
    let value = line.split(&format!("{key}=")).nth(1).unwrap_or_default();
    let value = value.split_whitespace().next().unwrap_or_default();
    value.parse().unwrap_or_else(|e| panic!("`{line}`: {e}"))
}

/// The tiny chat model's parameters as the worker holds them (f32 on the CPU).
pub(crate) fn tiny_chat_params() -> Vec<(String, tch::Tensor)> {
    let dir = common::tiny_models().join("tiny-chat");
    let config = ModelConfig::from_file(&dir.join("config.json")).unwrap();
    let model = Decoder::new(config, tch::Device::Cpu, tch::Kind::Float);
    model.vs.variables().into_iter().collect()
}

#[test]
fn two_and_three_ranks_with_the_weights_sharded_train_as_one_process() {
    let one = tempfile::tempdir().unwrap();
    let reordered = tempfile::tempdir().unwrap();
    let c1 = experiment(one.path(), 3, 60);
    with_mode(&c1, "none");
    one_process(&c1, &[]);
    // The yardstick of the data-parallel tests: one process whose only change is the
    // order of its gradient sums (rows in other micro-batches).
    let c3 = experiment(reordered.path(), 3, 60);
    with_mode(&c3, "none");
    one_process(&c3, &["--set", "trainer.micro_batch_tokens=8"]);
    let run1 = one.path().join("run");
    let order: Vec<f32> = MODELS
        .iter()
        .map(|m| worst(&run1, &reordered.path().join("run"), m))
        .collect();
    let a = lines(&run1);
    let params = tiny_chat_params();

    for (mode, n) in [("full", 2), ("full", 3), ("optimizer", 3)] {
        let dir = tempfile::tempdir().unwrap();
        let config = experiment(dir.path(), 3, 60);
        with_mode(&config, mode);
        let outs = ranks(&config, n, &[]);
        let run = dir.path().join("run");
        let what = format!("{mode} on {n} ranks");

        // The metrics: f32 sums in another order (the data-parallel tests' 1e-3).
        let b = lines(&run);
        assert_eq!(b.len(), 3, "{what}");
        assert_eq!(b[2]["dist"]["world_size"], n, "{what}");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_close(x, y, 1e-3, &format!("{what}, step {}", i + 1));
        }
        // The weights after 3 steps: within 2·lr per optimizer step, and no more than
        // 4 × what reordered sums move one process.
        for (model, order) in MODELS.iter().zip(&order) {
            let d = worst(&run1, &run, model);
            eprintln!("{what}, {model}: {d:e} from one process (micro-batch order {order:e})");
            assert!(f64::from(d) <= 2e-3 * 3.0, "{what}, {model}: {d}");
            assert!(
                d <= 4.0 * order.max(1e-6),
                "{what}, {model}: {d} vs {order}"
            );
        }

        // What each rank held, from the flat layout of N ranks: the optimizer's two f32
        // moments of its shard (the weights are f32, their own masters), and with
        // "full" its shard of the weights, the most it gathered at once being the outer
        // unit and one layer.
        let layout = FlatLayout::new(&params, n).unwrap();
        let shard: u64 = layout.units.iter().map(|u| u.shard_numel() as u64).sum();
        let padded: u64 = layout.units.iter().map(|u| u.padded as u64).sum();
        let outer = layout
            .units
            .iter()
            .find(|u| u.kind == drmas::update::UnitKind::Outer)
            .unwrap()
            .padded as u64;
        let layer = layout
            .units
            .iter()
            .filter(|u| u.kind != drmas::update::UnitKind::Outer)
            .map(|u| u.padded as u64)
            .max()
            .unwrap();
        if n == 3 {
            // Padding is exercised: some unit is not a multiple of 3.
            assert!(layout.units.iter().any(|u| u.numel % 3 != 0));
        }
        for model in MODELS {
            for (rank, o) in outs.iter().enumerate() {
                let at = format!("{what}, {model}, rank {rank}");
                let state = "optimizer state sharded";
                assert_eq!(
                    logged(o, state, model, rank, "state_bytes"),
                    2 * 4 * shard,
                    "{at}"
                );
                let held = "weights sharded during the update";
                if mode == "full" {
                    assert_eq!(
                        logged(o, held, model, rank, "shard_bytes"),
                        4 * shard,
                        "{at}"
                    );
                    assert_eq!(
                        logged(o, held, model, rank, "whole_bytes"),
                        4 * padded,
                        "{at}"
                    );
                    // The outer unit, the layer computing and the next one arriving
                    // (for the tiny model's two layers, all of it at that moment).
                    let most = logged(o, held, model, rank, "most_gathered_bytes");
                    assert_eq!(most, 4 * (outer + 2 * layer), "{at}");
                    assert!(most <= 4 * padded, "{at}");
                } else {
                    assert!(!text(o).contains(held), "{at}");
                }
            }
        }
        // The checkpoint holds whole weights and the whole optimizer state, as one
        // process's: the same tensors (read by `worst` above, and here by name).
        for model in MODELS {
            assert_eq!(
                saved_state_shapes(&run, model),
                saved_state_shapes(&run1, model),
                "{what}, {model}"
            );
        }
    }
}

#[test]
fn a_lora_team_with_its_base_sharded_trains_as_one_process() {
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    let c1 = experiment(one.path(), 3, 60);
    with_mode(&c1, "none");
    with_lora(&c1);
    one_process(&c1, &[]);
    let c2 = experiment(two.path(), 3, 60);
    with_mode(&c2, "full");
    with_lora(&c2);
    let outs = ranks(&c2, 2, &[]);
    let (a, b) = (
        lines(&one.path().join("run")),
        lines(&two.path().join("run")),
    );
    assert_eq!((a.len(), b.len()), (3, 3));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_close(x, y, 1e-3, &format!("LoRA, step {}", i + 1));
        for model in MODELS {
            assert!(y["models"][model]["grad_norm"].as_f64().unwrap() > 0.0);
        }
    }
    // The frozen base was sharded: half of it (padded) on each rank.
    let params = tiny_chat_params();
    let layout = FlatLayout::new(&params, 2).unwrap();
    let shard: u64 = layout.units.iter().map(|u| u.shard_numel() as u64).sum();
    for model in MODELS {
        for (rank, o) in outs.iter().enumerate() {
            let held = "weights sharded during the update";
            assert_eq!(logged(o, held, model, rank, "shard_bytes"), 4 * shard);
        }
    }
    // The adapters after 3 steps, as one process's to f32 summation order.
    for model in MODELS {
        let adapter = |run: &Path| -> Vec<(String, Vec<f32>)> {
            let path = run
                .join("checkpoints/step-000003")
                .join(model)
                .join("adapter_model.safetensors");
            let mut t: Vec<(String, Vec<f32>)> = tch::Tensor::read_safetensors(&path)
                .unwrap()
                .into_iter()
                .map(|(n, t)| (n, Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()))
                .collect();
            t.sort_by(|a, b| a.0.cmp(&b.0));
            t
        };
        let (x, y) = (
            adapter(&one.path().join("run")),
            adapter(&two.path().join("run")),
        );
        assert_eq!(x.len(), y.len());
        let d = x
            .iter()
            .zip(&y)
            .flat_map(|((_, p), (_, q))| p.iter().zip(q).map(|(a, b)| (a - b).abs()))
            .fold(0f32, f32::max);
        eprintln!("LoRA, {model}: adapters {d:e} from one process");
        assert!(f64::from(d) <= 2e-3 * 3.0, "{model}: {d}");
    }
}

#[test]
fn bad_combinations_with_full_sharding_are_refused_naming_the_key() {
    // No job to shard across.
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 1, 60);
    with_mode(&config, "full");
    let o = drmas().arg("train").arg(&config).output().unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains(
            "error: models[0].shard = \"full\" (model `solver-lm`) shards the weights and the \
             optimizer state across the ranks of a data-parallel job, and this is one process: \
             start it as a job (torchrun, or RANK, WORLD_SIZE and MASTER_ADDR; \
             docs/distributed.md) or set shard = \"none\""
        ),
        "{}",
        text(&o)
    );
    assert!(!dir.path().join("run/metrics.jsonl").exists());

    // LoRA dropout: the recomputed backward would draw other masks.
    let text_of = std::fs::read_to_string(&config).unwrap();
    let model = common::tiny_models().join("tiny-chat");
    std::fs::write(
        &config,
        text_of.replacen(
            &format!("path = {model:?}"),
            &format!("base = {model:?}\nlora = {{ rank = 4, dropout = 0.1 }}"),
            1,
        ),
    )
    .unwrap();
    let o = drmas().arg("check").arg(&config).output().unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains(
            "models[0].shard: \"full\" recomputes each layer's forward in the backward, where \
             LoRA dropout (0.1) would draw other masks than the forward: set lora.dropout = 0, \
             or shard = \"optimizer\""
        ),
        "{}",
        text(&o)
    );
}

#[test]
fn a_killed_rank_stops_a_sharded_job_naming_the_collective() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 200, 10);
    with_mode(&config, "full");
    let mut group = spawn_ranks(&config, 2, &[]);
    let metrics = dir.path().join("run/metrics.jsonl");
    // A condition, not a clock: the first step is written.
    common::process::wait_until("a first step", Duration::from_millis(50), || {
        std::fs::read_to_string(&metrics).is_ok_and(|t| !t.is_empty())
    });
    let mut r1 = group.pop().unwrap();
    r1.kill_leader();
    let killed = Instant::now();
    let o = group.pop().unwrap().wait_with_output();
    let took = killed.elapsed();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        took < Duration::from_secs(60),
        "rank 0 took {took:?} to stop"
    );
    assert!(t.contains("data parallelism: "), "{}: {t}", o.status);
    let _ = r1.wait_with_output();
}

#[test]
fn check_plans_one_rank_of_a_sharded_job() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 3, 60);
    with_mode(&config, "full");
    let check = |extra: &[&str]| {
        let o = drmas()
            .arg("check")
            .arg(&config)
            .args(extra)
            .output()
            .unwrap();
        (o.status.success(), text(&o))
    };
    let (ok, t) = check(&["--ranks", "3"]);
    assert!(ok, "{t}");
    assert!(t.contains(", per rank of a job of 3):"), "{t}");
    for model in MODELS {
        let line = t
            .lines()
            .find(|l| l.trim_start().starts_with(model))
            .unwrap_or_else(|| panic!("no line for {model}:\n{t}"));
        assert!(line.contains("in the update)"), "{line}");
        assert!(
            line.ends_with("shard = \"full\", this rank's of 3"),
            "{line}"
        );
    }
    // Without a job's size, the plan is one process's, and says how to ask for a rank's.
    let (ok, t) = check(&[]);
    assert!(ok, "{t}");
    assert!(
        t.contains("model `solver-lm`: shard = \"full\" divides its state among a job's ranks: --ranks N plans one rank of N"),
        "{t}"
    );
    assert!(!t.contains("this rank's of"), "{t}");
    let (ok, t) = check(&["--ranks", "0"]);
    assert!(!ok);
    assert!(t.contains("invalid value '0' for '--ranks <RANKS>'"), "{t}");
}

/// The tiny team with both agents on one model, `solver-lm` (the verifier's removed).
fn shared_model(config: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    let start = text.find("[[models]]\nid = \"verifier-lm\"").unwrap();
    let end = start + text[start..].find("\n\n").unwrap() + 2;
    let text = format!("{}{}", &text[..start], &text[end..])
        .replace("model = \"verifier-lm\"", "model = \"solver-lm\"");
    assert!(!text.contains("verifier-lm"), "{text}");
    std::fs::write(config, text).unwrap();
}

#[test]
fn a_model_shared_by_two_agents_trains_sharded_as_one_process() {
    // Two agents' gradient sums on one sharded model (each agent's micro-batches
    // reduce-scattered into its own shard accumulator, then joined), as one process.
    let one = tempfile::tempdir().unwrap();
    let c1 = experiment(one.path(), 3, 60);
    with_mode(&c1, "none");
    shared_model(&c1);
    one_process(&c1, &[]);
    let run1 = one.path().join("run");
    let a = lines(&run1);
    for mode in ["full", "optimizer"] {
        let dir = tempfile::tempdir().unwrap();
        let config = experiment(dir.path(), 3, 60);
        with_mode(&config, mode);
        shared_model(&config);
        ranks(&config, 2, &[]);
        let run = dir.path().join("run");
        let b = lines(&run);
        assert_eq!(b.len(), 3, "{mode}");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_close(x, y, 1e-3, &format!("shared, {mode}, step {}", i + 1));
            assert!(y["models"]["solver-lm"]["grad_norm"].as_f64().unwrap() > 0.0);
        }
        let d = worst(&run1, &run, "solver-lm");
        eprintln!("shared, {mode}: {d:e} from one process");
        assert!(f64::from(d) <= 1e-4, "shared, {mode}: {d}");
    }
}
