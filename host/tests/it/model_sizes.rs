//! Sizes are checked against the checkpoint and the machine before anything is
//! allocated: config.json against the safetensors headers, prompt + new tokens against
//! the context, a batch's and an evaluation's memory against what is available.
//!
//! "Before allocating" is shown by the sizes used: each refused value would make the
//! allocation itself take hundreds of TiB (torch would fail with its own message) or
//! loop for hours, so the exact message, returned at once, can only come from the check.

use crate::common;

use common::{copy_fixture, tiny_models};
use drmas::model::{
    Decoder, GenerationRequest, SamplingParams, SequencePair, generate, load_pretrained, memory,
    response_hidden,
};
use drmas::pool::{
    Backend, BackendError, BackendRequest, ModelBackend, WorkerConfig, spawn_worker,
};
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};
use tch::{Device, Kind, Tensor};

/// Writes `config.json` of `dir` with `edits` applied to the fixture's.
fn edit_config(dir: &Path, edits: &[(&str, serde_json::Value)]) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (key, value) in edits {
        json[*key] = value.clone();
    }
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
}

fn load_error(dir: &Path) -> String {
    match load_pretrained(dir, Device::Cpu, None) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn config_sizes_the_weights_contradict_are_refused_before_allocating() {
    let original = std::fs::read_to_string(tiny_models().join("llama/config.json")).unwrap();
    let dir = copy_fixture("llama");
    let config = format!("{}/config.json", dir.path().display());
    let cases: Vec<(Vec<(&str, serde_json::Value)>, String)> = vec![
        (
            vec![("num_hidden_layers", 100000.into())],
            "num_hidden_layers is 100000 but model.safetensors holds 2 layers (0..=1)".into(),
        ),
        (
            vec![("num_hidden_layers", (1i64 << 40).into())],
            "num_hidden_layers is 1099511627776 but model.safetensors holds 2 layers (0..=1)"
                .into(),
        ),
        (
            vec![("num_hidden_layers", 1.into())],
            "num_hidden_layers is 1 but model.safetensors holds 2 layers (0..=1)".into(),
        ),
        (
            vec![("vocab_size", (1i64 << 40).into())],
            "vocab_size is 1099511627776 but model.safetensors has model.embed_tokens.weight of shape [128, 64]".into(),
        ),
        (
            vec![("hidden_size", (1i64 << 30).into()), ("head_dim", 16.into())],
            "hidden_size is 1073741824 but model.safetensors has model.embed_tokens.weight of shape [128, 64]".into(),
        ),
        (
            vec![("intermediate_size", (1i64 << 40).into())],
            "intermediate_size is 1099511627776 but model.safetensors has model.layers.0.mlp.gate_proj.weight of shape [96, 64]".into(),
        ),
        (
            vec![("num_attention_heads", 8.into()), ("head_dim", 16.into())],
            "num_attention_heads × head_dim is 8 × 16 = 128 but model.safetensors has model.layers.0.self_attn.q_proj.weight of shape [64, 64]".into(),
        ),
        (
            vec![("num_key_value_heads", 4.into()), ("head_dim", 16.into())],
            "num_key_value_heads × head_dim is 4 × 16 = 64 but model.safetensors has model.layers.0.self_attn.k_proj.weight of shape [32, 64]".into(),
        ),
    ];
    for (edits, message) in cases {
        std::fs::write(dir.path().join("config.json"), &original).unwrap();
        edit_config(dir.path(), &edits);
        assert_eq!(load_error(dir.path()), format!("{config}: {message}"));
    }

    // Qwen3's explicit head_dim is checked against its q norm too.
    let qwen = copy_fixture("qwen3");
    edit_config(
        qwen.path(),
        &[
            ("head_dim", 16.into()),
            ("num_attention_heads", 8.into()),
            ("num_key_value_heads", 4.into()),
        ],
    );
    assert_eq!(
        load_error(qwen.path()),
        format!(
            "{}/config.json: head_dim is 16 but model.safetensors has model.layers.0.self_attn.q_norm.weight of shape [32]",
            qwen.path().display()
        )
    );

    // A context of 2^40 positions: the RoPE tables alone would take 2^40 · 16 · 4 bytes.
    std::fs::write(dir.path().join("config.json"), &original).unwrap();
    edit_config(
        dir.path(),
        &[("max_position_embeddings", (1i64 << 40).into())],
    );
    let err = load_error(dir.path());
    let prefix = format!("loading {} in Float on Cpu needs ~", dir.path().display());
    assert!(err.starts_with(&prefix), "{err}");
    assert!(
        err.contains(" GiB (weights 0.3 MiB, RoPE tables ")
            && err.ends_with(" available (MemAvailable)"),
        "{err}"
    );
    edit_config(dir.path(), &[("max_position_embeddings", 0.into())]);
    assert_eq!(
        load_error(dir.path()),
        format!("{config}: `max_position_embeddings`: must be positive, got 0")
    );
}

#[test]
fn sharded_checkpoints_are_checked_across_their_shards() {
    let model = common::load_tiny("llama");
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("sharded");
    drmas::model::save_checkpoint_sharded(&model, &tiny_models().join("llama"), &dir, 16 * 1024)
        .unwrap();
    edit_config(&dir, &[("num_hidden_layers", 100000.into())]);
    assert_eq!(
        load_error(&dir),
        format!(
            "{}/config.json: num_hidden_layers is 100000 but the shards of model.safetensors.index.json hold 2 layers (0..=1)",
            dir.display()
        )
    );
}

fn request(prompt: Vec<i64>, max_new_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        prompt,
        params: SamplingParams {
            temperature: 0.0,
            max_new_tokens,
            ..Default::default()
        },
        shared_prefix: 0,
    }
}

fn generate_error(model: &Decoder, requests: &[GenerationRequest]) -> String {
    match generate(model, requests, None) {
        Ok(_) => panic!("generated"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn generation_past_the_context_is_refused_before_allocating() {
    let model = common::load_tiny("llama");
    assert_eq!(model.context(), 256);
    // A KV cache of 2^32 positions would take 2 TiB even for this tiny model.
    assert_eq!(
        generate_error(
            &model,
            &[
                request(vec![1, 2, 3], 4),
                request(vec![1, 2, 3, 4, 5], 4294967295)
            ]
        ),
        "request 1: prompt of 5 tokens + max_new_tokens 4294967295 = 4294967300 tokens, more than the model's context of 256 tokens (max_position_embeddings)"
    );
    assert_eq!(
        generate_error(&model, &[request(vec![1, 2, 3, 4, 5], usize::MAX)]),
        "request 0: prompt of 5 tokens + max_new_tokens 18446744073709551615 = 18446744073709551615 tokens, more than the model's context of 256 tokens (max_position_embeddings)"
    );
    assert_eq!(
        generate_error(&model, &[request(vec![1; 250], 7)]),
        "request 0: prompt of 250 tokens + max_new_tokens 7 = 257 tokens, more than the model's context of 256 tokens (max_position_embeddings)"
    );
    // Exactly the context is fine: every new token gets a real position.
    let out = generate(&model, &[request(vec![1; 250], 6)], None).unwrap();
    assert_eq!(out[0].tokens.len(), 6);
}

#[test]
fn a_forward_past_the_context_is_an_error_not_a_clamped_position() {
    let model = common::load_tiny("llama");
    let prompt = vec![1i64; 200];
    let response = vec![2i64; 100];
    let err = response_hidden(
        &model,
        &[SequencePair {
            prompt: &prompt,
            response: &response,
        }],
    )
    .err()
    .expect("refused")
    .to_string();
    assert_eq!(
        err,
        "training forward: the longest prompt + response = 300 tokens, more than the model's context of 256 tokens (max_position_embeddings)"
    );
    let shared = drmas::model::shared_prompt_hidden(&model, &prompt, &[&response])
        .err()
        .expect("refused")
        .to_string();
    assert_eq!(
        shared,
        "training forward: a prompt of 200 + the longest response of 100 = 300 tokens, more than the model's context of 256 tokens (max_position_embeddings)"
    );
    // A caller that skips the check gets a panic that says why, not clamped logits.
    let ids = Tensor::from_slice(&[1i64, 2]).view([1, 2]);
    let positions = Tensor::from_slice(&[255i64, 256]).view([1, 2]);
    let mask = Tensor::ones([1, 1, 2, 2], (Kind::Bool, Device::Cpu));
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _guard = tch::no_grad_guard();
        model.forward(&ids, &positions, &mask, None)
    }))
    .expect_err("panicked");
    assert_eq!(
        drmas::pool::panic_message(panic.as_ref()),
        "position 256 is past the model's context of 256 tokens (max_position_embeddings)"
    );
}

/// Rows enough that the batch's estimate is twice what this machine has available.
fn rows_past_memory(model: &Decoder, prompt: u64, new: u64) -> u64 {
    let available = memory::available_memory(Device::Cpu)
        .expect("MemAvailable")
        .bytes;
    let per_row = memory::estimate_generation(&model.config, 1, prompt, new, Kind::Float).total();
    2 * available / per_row + 1
}

#[test]
fn a_batch_that_cannot_fit_is_refused_with_the_estimate_and_the_limit() {
    let model = common::load_tiny("llama");
    let rows = rows_past_memory(&model, 5, 251);
    let requests = vec![request(vec![1, 2, 3, 4, 5], 251); rows as usize];
    let err = generate_error(&model, &requests);
    // The estimate is of the prompt as it runs: padded to its bucket.
    let padded = drmas::model::bucket(5);
    let prefix =
        format!("a generation batch of {rows} row(s) × ({padded} prompt + 251 new tokens) needs ~");
    assert!(err.starts_with(&prefix), "{err}");
    assert!(
        err.contains(" GiB (KV cache ") && err.ends_with(" available (MemAvailable)"),
        "{err}"
    );
    // Refusals are structured: a caller can tell them from other failures.
    let source = BackendError::Model(
        memory::check_generation(&model.config, Kind::Float, Device::Cpu, 100_000_000, 5, 251)
            .unwrap_err(),
    );
    assert!(source.is_out_of_memory());
}

#[test]
fn the_worker_refuses_a_request_past_the_context_and_serves_the_others() {
    let handle = spawn_worker("tiny", WorkerConfig::default(), || {
        let model = common::load_tiny("llama");
        Ok(Box::new(ModelBackend::new(model, None, PathBuf::new())) as Box<dyn Backend>)
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ask = |max_new_tokens: usize| BackendRequest {
        prompt: vec![1, 2, 3, 4, 5],
        params: SamplingParams {
            temperature: 0.0,
            max_new_tokens,
            ..Default::default()
        },
        stop: Vec::new(),
        shared_prefix: 0,
    };
    let (refused, served) = runtime.block_on(async {
        tokio::join!(handle.generate(ask(4294967295)), handle.generate(ask(3)))
    });
    assert_eq!(
        refused.unwrap_err().to_string(),
        "model `tiny`: generation: prompt of 5 tokens + max_new_tokens 4294967295 = 4294967300 tokens, more than the model's context of 256 tokens (max_position_embeddings)"
    );
    assert_eq!(served.unwrap().tokens.len(), 3);
}

/// Generates `n` bytes per request; fits at most `rows` requests in a batch; records
/// the size of every batch it ran.
struct SmallMemory {
    rows: usize,
    batches: Arc<Mutex<Vec<usize>>>,
}

impl Backend for SmallMemory {
    fn generate_slots(
        &mut self,
        requests: &[BackendRequest],
        _slots: &[usize],
    ) -> Result<Vec<drmas::model::Generation>, BackendError> {
        self.batches.lock().unwrap().push(requests.len());
        Ok(requests
            .iter()
            .map(|r| drmas::model::Generation {
                tokens: vec![b'x' as i64; r.params.max_new_tokens],
                logprobs: vec![-0.5; r.params.max_new_tokens],
                finish: drmas::model::FinishReason::Length,
                policy_version: 0,
            })
            .collect())
    }

    fn fits(&self, rows: usize, _prompt_len: usize, _new_tokens: usize) -> bool {
        rows <= self.rows
    }
}

#[test]
fn the_batcher_never_gathers_more_than_fits_in_memory() {
    let batches = Arc::new(Mutex::new(Vec::new()));
    let recorded = batches.clone();
    let config = WorkerConfig {
        gather_window: Duration::from_millis(500),
        ..Default::default()
    };
    let handle = spawn_worker("small", config, move || {
        Ok(Box::new(SmallMemory {
            rows: 2,
            batches: recorded,
        }) as Box<dyn Backend>)
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let results = runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..5 {
            let handle = handle.clone();
            set.spawn(async move {
                handle
                    .generate(BackendRequest {
                        prompt: vec![1, 2, i],
                        params: SamplingParams {
                            max_new_tokens: 2,
                            ..Default::default()
                        },
                        stop: Vec::new(),
                        shared_prefix: 0,
                    })
                    .await
            });
        }
        set.join_all().await
    });
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().unwrap().tokens.len() == 2)
    );
    let batches = batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), 5, "{batches:?}");
    assert!(batches.iter().all(|&b| b <= 2), "{batches:?}");
}

fn drmas() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.env_remove("DRMAS_PLUGIN_PATH");
    c
}

fn stderr_of(out: std::process::Output) -> String {
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).trim_end().to_string()
}

#[test]
fn drmas_generate_refuses_past_the_context_and_past_memory_before_loading() {
    let bad = copy_fixture("tiny-chat");
    edit_config(bad.path(), &[("num_hidden_layers", 100000.into())]);
    let err = stderr_of(
        drmas()
            .args(["generate", "--model"])
            .arg(bad.path())
            .args(["--prompt", "hi", "--device", "cpu"])
            .output()
            .unwrap(),
    );
    assert_eq!(
        err,
        format!(
            "error: {}/config.json: num_hidden_layers is 100000 but model.safetensors holds 2 layers (0..=1)",
            bad.path().display()
        )
    );
    let model = tiny_models().join("tiny-chat");
    let err = stderr_of(
        drmas()
            .args(["generate", "--model"])
            .arg(&model)
            .args(["--prompt", "hi", "--device", "cpu"])
            .args(["--max-new-tokens", "4294967295"])
            .output()
            .unwrap(),
    );
    let prefix = format!("error: {}: the prompt of ", model.display());
    assert!(err.starts_with(&prefix), "{err}");
    assert!(
        err.contains(" tokens + --max-new-tokens 4294967295 = ")
            && err.ends_with(
                " tokens, more than the model's context of 4096 tokens (max_position_embeddings)"
            ),
        "{err}"
    );
    let err = stderr_of(
        drmas()
            .args(["generate", "--model"])
            .arg(&model)
            .args(["--prompt", "hi", "--device", "cpu"])
            .args(["--n", "100000000", "--max-new-tokens", "16"])
            .output()
            .unwrap(),
    );
    assert!(
        err.starts_with("error: --n 100000000: a generation batch of 100000000 row(s) × ("),
        "{err}"
    );
    assert!(
        err.contains(" prompt + 16 new tokens) needs ~")
            && err.ends_with(" available (MemAvailable)"),
        "{err}"
    );
}

#[test]
fn drmas_model_logits_refuses_inputs_past_the_context() {
    let model = tiny_models().join("llama");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    let ids = Tensor::ones([1, 300], (Kind::Int64, Device::Cpu));
    Tensor::write_safetensors(&[("input_ids", &ids), ("attention_mask", &ids)], &input).unwrap();
    let err = stderr_of(
        drmas()
            .args(["model", "logits", "--model"])
            .arg(&model)
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(dir.path().join("out.safetensors"))
            .output()
            .unwrap(),
    );
    assert_eq!(
        err,
        format!(
            "error: {}: input_ids of 300 positions = 300 tokens, more than the model's context of 256 tokens (max_position_embeddings)",
            input.display()
        )
    );
    assert!(!dir.path().join("out.safetensors").exists());
}

#[test]
fn drmas_eval_refuses_a_k_whose_episodes_cannot_fit_before_loading_models() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tasks.jsonl");
    let rows: String = (0..15)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"question\": \"What is {i} + 1?\", \"answer\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    std::fs::write(&data, rows).unwrap();
    let config = dir.path().join("exp.toml");
    // The refusal comes before any model is loaded (and before any output is written).
    std::fs::write(
        &config,
        format!(
            r#"
[experiment]
name = "huge-k"
output_dir = {:?}
[[models]]
id = "lm"
path = {:?}
[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
[agents.config]
verifier = ""
[workflow]
entry = "solver"
[[rewards]]
component = "math/boxed"
[normalizer]
component = "norms/grpo"
[data]
val = [{{ path = {:?} }}]
"#,
            dir.path().join("run").display().to_string(),
            common::tiny_models()
                .join("tiny-chat")
                .display()
                .to_string(),
            data.display().to_string()
        ),
    )
    .unwrap();
    let err = stderr_of(
        drmas()
            .arg("eval")
            .arg(&config)
            .args(["--k", "100000000"])
            .output()
            .unwrap(),
    );
    assert!(
        err.starts_with("error: k 100000000 × 15 tasks = 1500000000 episodes need at least ~"),
        "{err}"
    );
    assert!(
        err.contains(" GiB for their tasks and samples, more than the ")
            && err.ends_with(" available (MemAvailable)"),
        "{err}"
    );
}
