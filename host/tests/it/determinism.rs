//! The reproducibility contract (docs/training.md, "Reproducibility"): a generated row
//! is a function of its own request, bit for bit — alone or in a batch of any size,
//! next to prompts of any length and any sampling settings, on one thread or two — and
//! `drmas train` gives the same metrics, checkpoints and samples for one seed whatever
//! the batch limits, gather window and episode threads, and other samples for another
//! seed.

use crate::common;

use drmas::model::{Decoder, Generation, GenerationRequest, SamplingParams, generate};

/// A request with its own prompt length, sampling rule and seed.
fn request(prompt_len: usize, rule: usize, seed: u64, vocab: i64) -> GenerationRequest {
    let prompt = (0..prompt_len)
        .map(|j| 3 + ((j as u64 * 7919 + seed * 104_729) % (vocab as u64 - 3)) as i64)
        .collect();
    let (temperature, top_p, top_k) = match rule % 4 {
        0 => (1.0, 1.0, 0),
        1 => (0.7, 0.9, 0),
        2 => (0.8, 1.0, 20),
        _ => (0.0, 1.0, 0),
    };
    GenerationRequest {
        prompt,
        params: SamplingParams {
            temperature,
            top_p,
            top_k,
            max_new_tokens: 6 + (seed as usize % 9),
            stop_token_ids: Vec::new(),
            seed,
        },
        shared_prefix: 0,
    }
}

fn bits(g: &Generation) -> (Vec<i64>, Vec<u32>) {
    (
        g.tokens.clone(),
        g.logprobs.iter().map(|l| l.to_bits()).collect(),
    )
}

/// Every request of `probe` generated alone equals it generated inside batches of 2 to
/// 40 rows with other prompts (shorter, longer, other buckets, identical ones, other
/// sampling rules), at any place in the batch.
fn assert_rows_independent_of_batch(model: &Decoder, name: &str, long: usize, sizes: &[usize]) {
    let vocab = model.config.vocab_size;
    let long = long.min(model.context() as usize - 20);
    let probe = [
        request(5, 0, 1, vocab),
        request(23, 1, 2, vocab),
        request(40, 2, 3, vocab),
        request(long, 3, 4, vocab),
    ];
    let alone: Vec<_> = probe
        .iter()
        .map(|r| bits(&generate(model, std::slice::from_ref(r), None).unwrap()[0]))
        .collect();
    for (k, &size) in sizes.iter().enumerate() {
        let salt = 10 * (k as u64 + 1);
        for (p, want) in probe.iter().zip(&alone) {
            let mut batch: Vec<GenerationRequest> = (0..size as u64 - 1)
                .map(|i| {
                    let len = 1 + ((salt + i) * 37 % long as u64) as usize;
                    request(len, (salt + i) as usize, salt * 100 + i, vocab)
                })
                .collect();
            // The same prompt with another seed: prefilled once, forked.
            let mut twin = p.clone();
            twin.params.seed += 1000;
            batch.push(twin);
            let at = (salt as usize) % batch.len();
            batch.insert(at, p.clone());
            let got = generate(model, &batch, None).unwrap();
            assert_eq!(
                &bits(&got[at]),
                want,
                "{name}: a prompt of {} tokens at row {at} of a batch of {} rows",
                p.prompt.len(),
                batch.len()
            );
        }
    }
}

#[test]
fn a_generated_row_is_the_same_alone_and_in_any_batch() {
    for name in ["tiny-chat", "qwen3", "qwen2"] {
        let model = common::load_tiny(name);
        assert_rows_independent_of_batch(&model, name, 230, &[2, 3, 5, 17, 40]);
    }
}

/// A request whose prompt is `prefix` then its own tokens, hinted to split there.
fn split_request(
    prefix: &[i64],
    own: usize,
    rule: usize,
    seed: u64,
    vocab: i64,
) -> GenerationRequest {
    let mut r = request(own, rule, seed, vocab);
    let mut prompt = prefix.to_vec();
    prompt.extend(&r.prompt);
    r.prompt = prompt;
    r.shared_prefix = prefix.len();
    r
}

#[test]
fn a_row_split_after_a_shared_prefix_is_the_same_alone_and_in_any_batch() {
    for name in ["tiny-chat", "qwen3"] {
        let model = common::load_tiny(name);
        let vocab = model.config.vocab_size;
        let prefix: Vec<i64> = request(40, 0, 77, vocab).prompt;
        let other: Vec<i64> = request(70, 0, 78, vocab).prompt;
        let probe = [
            split_request(&prefix, 3, 0, 1, vocab),
            split_request(&prefix, 30, 1, 2, vocab),
            split_request(&other, 12, 3, 3, vocab),
        ];
        let alone: Vec<_> = probe
            .iter()
            .map(|r| bits(&generate(&model, std::slice::from_ref(r), None).unwrap()[0]))
            .collect();
        for size in [2u64, 6, 19] {
            for (p, want) in probe.iter().zip(&alone) {
                // Rows that share its prefix (one bucket of rest or another), rows of
                // the other prefix, whole prompts, and its own twin.
                let mut batch: Vec<GenerationRequest> = (0..size)
                    .map(|i| match i % 3 {
                        0 => split_request(
                            &prefix,
                            1 + (i as usize * 7) % 40,
                            i as usize,
                            500 + i,
                            vocab,
                        ),
                        1 => split_request(
                            &other,
                            1 + (i as usize * 5) % 20,
                            i as usize,
                            600 + i,
                            vocab,
                        ),
                        _ => request(1 + (i as usize * 11) % 90, i as usize, 700 + i, vocab),
                    })
                    .collect();
                let mut twin = p.clone();
                twin.params.seed += 1000;
                batch.push(twin);
                let at = size as usize / 2;
                batch.insert(at, p.clone());
                let got = generate(&model, &batch, None).unwrap();
                assert_eq!(
                    &bits(&got[at]),
                    want,
                    "{name}: a split prompt of {} tokens in a batch of {} rows",
                    p.prompt.len(),
                    batch.len()
                );
            }
        }
    }
}

#[test]
fn a_split_prompt_generates_what_the_whole_prompt_generates() {
    for name in ["tiny-chat", "qwen3", "qwen2"] {
        let model = common::load_tiny(name);
        let vocab = model.config.vocab_size;
        let prefix: Vec<i64> = request(45, 0, 91, vocab).prompt;
        // Greedy rows (rule 3): the same tokens, log-probs equal up to summation order.
        let split: Vec<GenerationRequest> = (0..4)
            .map(|i| split_request(&prefix, 2 + 9 * i, 3, 40 + i as u64, vocab))
            .collect();
        let whole: Vec<GenerationRequest> = split
            .iter()
            .map(|r| GenerationRequest {
                shared_prefix: 0,
                ..r.clone()
            })
            .collect();
        let a = generate(&model, &split, None).unwrap();
        let b = generate(&model, &whole, None).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.tokens, y.tokens, "{name}");
            let worst = x
                .logprobs
                .iter()
                .zip(&y.logprobs)
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "{name}: log-probs differ by {worst}");
        }
    }
}

#[test]
fn a_generated_row_is_the_same_on_smollm2_when_present() {
    let dir = common::root().join("models/smollm2-135m-instruct");
    if !dir.join("model.safetensors").exists() {
        eprintln!("skipped: no {}", dir.display());
        return;
    }
    let model = common::load_dir(&dir);
    assert_rows_independent_of_batch(&model, "smollm2-135m", 150, &[3, 18]);
}

mod train_runs {
    //! `drmas train` on the tiny chat model with the math plugins, 3 steps.

    use super::common;
    use serde_json::Value;
    use std::{
        collections::BTreeMap,
        path::{Path, PathBuf},
        process::Command,
    };

    pub struct Run {
        pub dir: tempfile::TempDir,
    }

    impl Run {
        pub fn config(&self) -> PathBuf {
            self.dir.path().join("exp.toml")
        }
        pub fn run(&self) -> PathBuf {
            self.dir.path().join("run")
        }
    }

    /// Which team a run trains.
    #[derive(Clone, Copy, Debug)]
    pub enum Team {
        /// The math solver and verifier, one tiny model each (two workers). The tiny
        /// random model never writes a valid answer: every advantage is 0, so the
        /// samples show in the metrics (entropy, log-prob mismatch, lengths) and the
        /// evaluation dump, not in the weights.
        Math,
        /// The acme-bench template's agent and reward, with a one-letter gold answer that
        /// about half the random completions contain: the advantages are not 0, so every
        /// sample moves the weights.
        Acme,
    }

    const MATH: &str = r#"
[[models]]
id = "solver-lm"
path = MODEL
lr = 1e-3

[[models]]
id = "verifier-lm"
path = MODEL
lr = 1e-3

[[agents]]
name = "solver"
component = "math/solver"
model = "solver-lm"
sampling = { max_new_tokens = 12, temperature = 1.0, top_p = 0.95 }

[[agents]]
name = "verifier"
component = "math/verifier"
model = "verifier-lm"
sampling = { max_new_tokens = 6, temperature = 1.0 }

[workflow]
entry = "solver"
max_turns = 4
max_loops = 1

[environment]
component = "math/env"

[[rewards]]
component = "math/boxed"

[normalizer]
component = "norms/drmas"
"#;

    const ACME: &str = r#"
[plugins]
dirs = ["plugins.d"]

[[models]]
id = "policy"
path = MODEL
lr = 1e-2

[[agents]]
name = "answerer"
component = "acme-bench/direct"
model = "policy"
sampling = { temperature = 1.0, top_k = 40, max_new_tokens = 10 }

[workflow]
entry = "answerer"
max_turns = 1

[[rewards]]
component = "acme-bench/contains"

[normalizer]
component = "acme-bench/centered"
"#;

    /// A fresh experiment folder with `seed` and these `[pool]` lines.
    pub fn experiment(team: Team, seed: u64, pool: &str) -> Run {
        let model = common::tiny_models().join("tiny-chat");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("tasks.jsonl");
        let rows: String = (0..9)
            .map(|i| {
                let answer = match team {
                    Team::Math => (i + i % 4).to_string(),
                    // About half of the tiny model's completions contain an `x`.
                    Team::Acme => "x".to_string(),
                };
                format!(
                    "{{\"id\": \"t{i}\", \"source\": \"tiny\", \"question\": \"What is {i} + {}?\", \"answer\": \"{answer}\"}}\n",
                    i % 4,
                )
            })
            .collect();
        std::fs::write(&data, rows).unwrap();
        let team_text = match team {
            Team::Math => MATH,
            Team::Acme => {
                let plugins = dir.path().join("plugins.d");
                std::fs::create_dir(&plugins).unwrap();
                let built = common::root().join("target/test-plugins/acme-bench.so");
                std::fs::copy(&built, plugins.join("libacme_bench.so"))
                    .unwrap_or_else(|e| panic!("{}: {e}", built.display()));
                ACME
            }
        }
        .replace("MODEL", &format!("{:?}", model.display().to_string()));
        let run = Run { dir };
        std::fs::write(
            run.config(),
            format!(
                r#"
[experiment]
name = "tiny-determinism"
seed = {seed}
output_dir = "run"
{team_text}
[data]
train = {{ path = "tasks.jsonl" }}
val = [{{ path = "tasks.jsonl" }}]

[trainer]
steps = 3
prompts_per_step = 3
group_size = 3
save_every = 3

[pool]
devices = ["cpu"]
{pool}
"#,
            ),
        )
        .unwrap();
        run
    }

    fn drmas() -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
        c.env_remove("DRMAS_PLUGIN_PATH");
        c
    }

    /// `drmas train --quiet` in the experiment's folder (its output_dir is relative).
    pub fn train(run: &Run) {
        let out = drmas()
            .current_dir(run.dir.path())
            .args(["train", "--quiet"])
            .arg(run.config())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The samples of `drmas eval` of the run's step-3 checkpoint, with ids and log-probs.
    pub fn eval_dump(run: &Run) -> String {
        let dump = run.dir.path().join("samples.jsonl");
        let out = drmas()
            .current_dir(run.dir.path())
            .arg("eval")
            .arg(run.config())
            .arg("--checkpoint")
            .arg(run.run().join("checkpoints/step-000003"))
            .args(["--k", "3", "--out"])
            .arg(run.dir.path().join("eval.json"))
            .arg("--dump-samples")
            .arg(&dump)
            .arg("--dump-ids")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(dump).unwrap()
    }

    /// Timing and memory keys (they measure the machine, not the run), and the
    /// `[pool]` settings in a checkpoint's fingerprint (the runs compared differ there
    /// on purpose).
    fn is_timing(key: &str) -> bool {
        matches!(
            key,
            "time" | "tracking" | "tokens_per_s" | "pool" | "update_gflops" | "update_phases"
        ) || key.starts_with("pool.")
            || key.ends_with("_seconds")
            || key.ends_with("_bytes")
            || key.ends_with("_per_s")
    }

    pub fn without_timing(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| !is_timing(k))
                    .map(|(k, v)| (k.clone(), without_timing(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(without_timing).collect()),
            other => other.clone(),
        }
    }

    /// `metrics.jsonl`, line by line, without timing and memory keys.
    pub fn metrics(run: &Run) -> Vec<Value> {
        std::fs::read_to_string(run.run().join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| without_timing(&serde_json::from_str(l).unwrap()))
            .collect()
    }

    /// Every file of the run's last checkpoint by its path in it: bytes, except
    /// `trainer_state.json` (its metrics lines without timing) and the manifest (which
    /// hashes that file).
    pub fn checkpoint(run: &Run) -> BTreeMap<String, Vec<u8>> {
        let dir = run.run().join("checkpoints/step-000003");
        let mut out = BTreeMap::new();
        collect(&dir, &dir, &mut out);
        out.remove("MANIFEST.sha256");
        let state: Value = serde_json::from_slice(&out["trainer_state.json"]).unwrap();
        out.insert(
            "trainer_state.json".into(),
            serde_json::to_vec(&without_timing(&state)).unwrap(),
        );
        out
    }

    fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                collect(root, &path, out);
            } else {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
}

use train_runs::{Team, checkpoint, eval_dump, experiment, metrics, train};

/// The first differing file of two checkpoints, for the failure message.
fn first_difference(
    a: &std::collections::BTreeMap<String, Vec<u8>>,
    b: &std::collections::BTreeMap<String, Vec<u8>>,
) -> Option<String> {
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names.into_iter().find(|n| a.get(*n) != b.get(*n)).cloned()
}

#[test]
fn two_fresh_train_runs_with_one_seed_are_identical_and_another_seed_differs() {
    let a = experiment(Team::Acme, 11, "");
    let b = experiment(Team::Acme, 11, "");
    let c = experiment(Team::Acme, 12, "");
    for r in [&a, &b, &c] {
        train(r);
    }
    let (ma, mb, mc) = (metrics(&a), metrics(&b), metrics(&c));
    assert_eq!(ma.len(), 3);
    // The samples moved the weights: the test compares something.
    let norms: Vec<f64> = ma
        .iter()
        .map(|l| l["models"]["policy"]["grad_norm"].as_f64().unwrap())
        .collect();
    assert!(norms.iter().all(|&n| n > 0.0), "{norms:?}");
    assert_eq!(ma, mb, "metrics.jsonl of two runs with seed 11");
    let (ca, cb, cc) = (checkpoint(&a), checkpoint(&b), checkpoint(&c));
    assert!(
        ca.contains_key("policy/model.safetensors"),
        "{:?}",
        ca.keys()
    );
    assert_eq!(first_difference(&ca, &cb), None, "checkpoints of seed 11");
    assert_ne!(ma, mc, "seeds 11 and 12 gave the same metrics");
    assert_ne!(
        ca["policy/model.safetensors"], cc["policy/model.safetensors"],
        "seeds 11 and 12 trained the same weights"
    );
    assert_ne!(
        eval_dump(&a),
        eval_dump(&c),
        "seeds 11 and 12 sampled the same"
    );
}

/// The [pool] settings the same 3 steps are run with: the default deterministic rounds,
/// rounds cut into batches of 2 on one episode thread, and timed batches (whose
/// composition depends on timing) of 3 rows with no gather window on 3 threads and of
/// 64 rows with a 50 ms window.
const SETTINGS: [&str; 4] = [
    "",
    "max_batch_rows = 2\nepisode_threads = 1",
    "batching = \"timed\"\ngather_window_ms = 0\nmax_batch_rows = 3\nepisode_threads = 3",
    "batching = \"timed\"\ngather_window_ms = 50\nmax_batch_rows = 64\nepisode_threads = 2",
];

fn assert_settings_change_no_sample(team: Team) {
    let runs: Vec<_> = SETTINGS.iter().map(|p| experiment(team, 11, p)).collect();
    for r in &runs {
        train(r);
    }
    let first = (metrics(&runs[0]), checkpoint(&runs[0]), eval_dump(&runs[0]));
    assert!(first.2.contains("\"logprobs\""), "{}", first.2);
    for (r, pool) in runs.iter().zip(SETTINGS).skip(1) {
        assert_eq!(
            metrics(r),
            first.0,
            "{team:?}: metrics with [pool] {pool:?}"
        );
        assert_eq!(
            first_difference(&checkpoint(r), &first.1),
            None,
            "{team:?}: checkpoint with [pool] {pool:?}"
        );
        assert_eq!(
            eval_dump(r),
            first.2,
            "{team:?}: eval samples with [pool] {pool:?}"
        );
    }
}

#[test]
fn batch_limits_gather_settings_and_episode_threads_change_no_sample_of_two_models() {
    assert_settings_change_no_sample(Team::Math);
}

#[test]
fn batch_limits_gather_settings_and_episode_threads_change_no_sample_of_a_learning_run() {
    assert_settings_change_no_sample(Team::Acme);
}

const POOL_BASE: &str = r#"[experiment]
name = "pool-keys"

[[models]]
id = "small"
path = "models/qwen-0.5b"

[[agents]]
name = "solver"
component = "math/solver"
model = "small"

[workflow]
entry = "solver"

[[rewards]]
component = "math/boxed"

[normalizer]
component = "norms/drmas"

[pool]
devices = ["cpu"]
"#;

fn pool_errors(lines: &str) -> Vec<String> {
    let text = format!("{POOL_BASE}{lines}\n");
    match drmas::config::parse_experiment(std::path::Path::new("exp.toml"), text) {
        Ok(_) => panic!("[pool] {lines:?} was accepted"),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

#[test]
fn batching_keys_are_checked_at_their_place() {
    // Line 24 is the first line after `devices`.
    assert_eq!(
        pool_errors("batching = \"fast\""),
        [
            "exp.toml:24:12: pool.batching: unknown variant `fast`, expected `deterministic` or `timed`"
        ]
    );
    assert_eq!(
        pool_errors("max_batch_rows = 0\ngather_window_ms = 60000\nepisode_threads = 0"),
        [
            "exp.toml:24:18: pool.max_batch_rows: must be 1 to 4096 rows, got 0",
            "exp.toml:25:20: pool.gather_window_ms: must be 0 to 10000 ms, got 60000",
            "exp.toml:26:19: pool.episode_threads: must be 1 to 64 threads, got 0",
        ]
    );
    let text = format!("{POOL_BASE}batching = \"timed\"\nmax_batch_rows = 8\n");
    let exp = drmas::config::parse_experiment(std::path::Path::new("exp.toml"), text).unwrap();
    assert_eq!(exp.file.pool.batching, drmas::config::Batching::Timed);
    assert_eq!(exp.file.pool.max_batch_rows, Some(8));
    // The default: deterministic rounds.
    let exp =
        drmas::config::parse_experiment(std::path::Path::new("exp.toml"), POOL_BASE.to_string())
            .unwrap();
    assert_eq!(
        exp.file.pool.batching,
        drmas::config::Batching::Deterministic
    );
}
