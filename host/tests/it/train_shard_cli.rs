//! `[[models]] shard = "optimizer"` (ZeRO-2) through the real binary on the tiny math
//! team: two ranks take the steps one process takes on the same global batch while each
//! holds only its shard of the optimizer state (its bytes checked on both ranks), their
//! checkpoints hold the whole state and resume in either mode, and the key is refused
//! where there is no job to shard across.

use crate::train_data_parallel::trainer::{assert_close, worst};
use crate::train_dist_cli::{drmas, experiment, lines, text};
use crate::train_full_cli::{one_process, ranks, tiny_chat_params};
use drmas::update::FlatLayout;
use std::{
    path::{Path, PathBuf},
    process::Output,
};

const MODELS: [&str; 2] = ["solver-lm", "verifier-lm"];

/// The tiny math team of `steps` steps with both models' optimizer state sharded.
fn sharded_experiment(dir: &Path, steps: u32) -> PathBuf {
    let config = experiment(dir, steps, 60);
    set_shard(&config, true);
    config
}

/// Adds or removes `shard = "optimizer"` in every `[[models]]` table.
fn set_shard(config: &Path, on: bool) {
    let text = std::fs::read_to_string(config).unwrap();
    let key = "lr = 1e-3\nshard = \"optimizer\"";
    let text = if on {
        assert_eq!(text.matches("lr = 1e-3\n").count(), 2);
        text.replace("lr = 1e-3\n", &format!("{key}\n"))
    } else {
        text.replace(key, "lr = 1e-3")
    };
    std::fs::write(config, text).unwrap();
}

/// Both ranks of a job, logging at info (the worker says how much state it holds).
fn two_ranks(config: &Path, extra: &[&str]) -> [Output; 2] {
    ranks(config, 2, extra).try_into().expect("two outputs")
}

/// The optimizer state bytes rank `rank`'s worker of `model` said it holds.
fn logged_state_bytes(o: &Output, model: &str, rank: usize) -> u64 {
    let t = text(o);
    let line = t
        .lines()
        .find(|l| {
            l.contains("optimizer state sharded")
                && l.contains(&format!("model={model} "))
                && l.contains(&format!("rank={rank} "))
        })
        .unwrap_or_else(|| panic!("no state line of {model} on rank {rank}:\n{t}"));
    let bytes = line.split("state_bytes=").nth(1).unwrap_or_default();
    let bytes = bytes.split_whitespace().next().unwrap_or_default();
    bytes.parse().unwrap_or_else(|e| panic!("`{line}`: {e}"))
}

/// The tiny model earns no reward on the math team: an entropy bonus gives every step
/// a gradient, so that there is an update to compare.
fn with_signal(config: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    std::fs::write(
        config,
        text.replace("[trainer]\n", "[trainer]\nentropy_coef = 0.01\n"),
    )
    .unwrap();
}

#[test]
fn two_ranks_with_a_sharded_optimizer_train_as_one_process() {
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    let plain = tempfile::tempdir().unwrap();
    let reordered = tempfile::tempdir().unwrap();
    let c1 = experiment(one.path(), 3, 60);
    with_signal(&c1);
    one_process(&c1, &[]);
    // The yardstick of the data-parallel tests: one process whose only change is the
    // order of its gradient sums (rows in other micro-batches).
    let c3 = experiment(reordered.path(), 3, 60);
    with_signal(&c3);
    one_process(&c3, &["--set", "trainer.micro_batch_tokens=8"]);
    // The same job with every rank holding the whole optimizer.
    let c4 = experiment(plain.path(), 3, 60);
    with_signal(&c4);
    two_ranks(&c4, &[]);
    let c2 = sharded_experiment(two.path(), 3);
    with_signal(&c2);
    let ranks = two_ranks(&c2, &[]);
    let [run1, run2, run3, run4] = [&one, &two, &reordered, &plain].map(|d| d.path().join("run"));

    // The metrics: f32 sums in another order (the data-parallel tests' 1e-3).
    let (a, b) = (lines(&run1), lines(&run2));
    assert_eq!((a.len(), b.len()), (3, 3));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_close(x, y, 1e-3, &format!("step {}", i + 1));
        for model in MODELS {
            assert!(x["models"][model]["grad_norm"].as_f64().unwrap() > 0.0);
        }
    }
    assert_eq!(b[2]["dist"]["world_size"], 2);
    // The weights after 3 steps, within the data-parallel tests' bounds: 2·lr per
    // optimizer step, and no more than 4 × what reordered sums move one process. Two
    // ranks sum a gradient in the same order either way, so the sharded job takes the
    // whole optimizer's steps to the clip's rounding (measured: bit for bit).
    for model in MODELS {
        let sharded = worst(&run1, &run2, model);
        let order = worst(&run1, &run3, model);
        let whole = worst(&run4, &run2, model);
        eprintln!(
            "{model}: sharded two ranks {sharded:e} from one process (micro-batch order \
             {order:e}), {whole:e} from two ranks with the whole optimizer"
        );
        assert!(f64::from(sharded) <= 2e-3 * 3.0, "{model}: {sharded}");
        assert!(
            sharded <= 4.0 * order.max(1e-6),
            "{model}: {sharded} vs {order}"
        );
        assert!(whole <= 1e-6, "{model}: {whole}");
    }

    // Each rank holds its shard of each model's state: two f32 moments (the weights are
    // f32, their own masters) of each unit's padded half, where one process holds two
    // of every parameter.
    let params = tiny_chat_params();
    let layout = FlatLayout::new(&params, 2).unwrap();
    let shard: u64 = layout.units.iter().map(|u| u.shard_numel() as u64).sum();
    let numel: u64 = params.iter().map(|(_, t)| t.numel() as u64).sum();
    let (whole, mine) = (2 * 4 * numel, 2 * 4 * shard);
    assert!(2 * mine >= whole && 2 * mine < whole + 2 * 4 * 2 * layout.units.len() as u64);
    for model in MODELS {
        for (rank, o) in ranks.iter().enumerate() {
            assert_eq!(
                logged_state_bytes(o, model, rank),
                mine,
                "{model}, rank {rank}"
            );
        }
        // Rank 0's metrics count the same: its worker's resident bytes are one
        // process's less the state it does not hold.
        for (x, y) in a.iter().zip(&b) {
            let resident = |l: &serde_json::Value| {
                l["pool"]["workers"][model]["on_device_bytes"]
                    .as_u64()
                    .unwrap()
            };
            assert_eq!(resident(y), resident(x) - (whole - mine), "{model}");
        }
    }

    // The checkpoint holds the whole state, as one process's: the same tensors.
    for model in MODELS {
        let (whole_state, gathered) = (
            saved_state_shapes(&run1, model),
            saved_state_shapes(&run2, model),
        );
        assert_eq!(gathered, whole_state, "{model}");
        assert_eq!(gathered.len(), 2 * params.len());
    }
}

#[test]
fn checkpoints_of_a_sharded_optimizer_resume_in_either_mode() {
    // Two ranks sharded, then one process with the whole optimizer: the state was
    // written whole, and `shard` may change on resume.
    let dir = tempfile::tempdir().unwrap();
    let config = sharded_experiment(dir.path(), 3);
    two_ranks(&config, &["--steps", "2"]);
    set_shard(&config, false);
    let o = one_process(&config, &["--resume"]);
    let run = dir.path().join("run");
    let steps: Vec<u64> = lines(&run)
        .iter()
        .map(|l| l["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3], "{}", text(&o));

    // One process, then two ranks sharded: each keeps its shard of the whole state.
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 3, 60);
    one_process(&config, &["--steps", "2"]);
    set_shard(&config, true);
    let ranks = two_ranks(&config, &["--resume"]);
    let run = dir.path().join("run");
    let l = lines(&run);
    let steps: Vec<u64> = l.iter().map(|l| l["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [1, 2, 3], "{}", text(&ranks[0]));
    assert_eq!(l[2]["dist"]["world_size"], 2);
    // The step count came back from the whole state: 2, then this step's.
    for model in MODELS {
        let worker = run
            .join("checkpoints/step-000003")
            .join(model)
            .join("worker.json");
        let worker: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(worker).unwrap()).unwrap();
        assert_eq!(worker["optimizer_steps"], 3, "{model}");
    }
}

#[test]
fn a_sharded_optimizer_without_a_job_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = sharded_experiment(dir.path(), 1);
    let o = drmas().arg("train").arg(&config).output().unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains(
            "error: models[0].shard = \"optimizer\" (model `solver-lm`) shards the optimizer \
             state across the ranks of a data-parallel job, and this is one process: start it \
             as a job (torchrun, or RANK, WORLD_SIZE and MASTER_ADDR; docs/distributed.md) or \
             set shard = \"none\""
        ),
        "{}",
        text(&o)
    );
    // Refused before any step.
    assert!(!dir.path().join("run/metrics.jsonl").exists());
}

/// The names and shapes of `model`'s optimizer state in `run`'s step-3 checkpoint.
pub(crate) fn saved_state_shapes(run: &Path, model: &str) -> Vec<(String, Vec<i64>)> {
    let path = run
        .join("checkpoints/step-000003")
        .join(model)
        .join("optimizer.safetensors");
    let mut t: Vec<(String, Vec<i64>)> = tch::Tensor::read_safetensors(&path)
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, t.size()))
        .collect();
    t.sort();
    t
}
