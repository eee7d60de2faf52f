//! Non-finite numbers are found where they start: a NaN or an infinity in a checkpoint
//! fails loading with the file and tensor; non-finite logits fail the generation batch
//! with the model's name; a generation never hands a NaN log-prob on to a sample.

use crate::common;

use common::copy_fixture;
use drmas::model::{
    Decoder, FinishReason, Generation, GenerationRequest, SamplingParams, generate, load_pretrained,
};
use drmas::pool::{
    Backend, BackendError, BackendRequest, ModelBackend, WorkerConfig, spawn_worker,
};
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

/// Rewrites `model.safetensors` of `dir` with element `index` of tensor `name` set to
/// `value`.
fn poke_weight(dir: &Path, name: &str, index: i64, value: f64) {
    let file = dir.join("model.safetensors");
    let tensors = Tensor::read_safetensors(&file).unwrap();
    for (n, t) in &tensors {
        if n == name {
            let _ = t.view([-1]).get(index).fill_(value);
        }
    }
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    Tensor::write_safetensors(&named, &file).unwrap();
}

fn load_error(dir: &Path, kind: Option<Kind>) -> String {
    match load_pretrained(dir, Device::Cpu, kind) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_nan_or_an_infinity_in_a_checkpoint_fails_loading_with_file_and_tensor() {
    let dir = copy_fixture("llama");
    let file = dir.path().join("model.safetensors");
    poke_weight(
        dir.path(),
        "model.layers.1.mlp.up_proj.weight",
        17,
        f64::NAN,
    );
    assert_eq!(
        load_error(dir.path(), None),
        format!(
            "{}: tensor `model.layers.1.mlp.up_proj.weight`: holds 1 NaN and 0 infinite value(s) of 6144",
            file.display()
        )
    );

    let dir = copy_fixture("llama");
    let file = dir.path().join("model.safetensors");
    poke_weight(
        dir.path(),
        "model.embed_tokens.weight",
        3,
        f64::NEG_INFINITY,
    );
    poke_weight(dir.path(), "model.embed_tokens.weight", 4, f64::INFINITY);
    assert_eq!(
        load_error(dir.path(), None),
        format!(
            "{}: tensor `model.embed_tokens.weight`: holds 0 NaN and 2 infinite value(s) of 8192",
            file.display()
        )
    );

    // Finite in float32, infinite in float16: the check runs on the converted weights.
    let dir = copy_fixture("llama");
    let file = dir.path().join("model.safetensors");
    poke_weight(dir.path(), "model.norm.weight", 0, 1e6);
    assert!(load_pretrained(dir.path(), Device::Cpu, None).is_ok());
    assert_eq!(
        load_error(dir.path(), Some(Kind::Half)),
        format!(
            "{}: tensor `model.norm.weight`: holds 0 NaN and 1 infinite value(s) of 64 after conversion from Float to Half",
            file.display()
        )
    );
}

/// Sets element `index` of weight `name` of a loaded model to `value`.
fn poke_loaded(model: &Decoder, name: &str, index: i64, value: f64) {
    let _guard = tch::no_grad_guard();
    let vars = model.vs.variables();
    let _ = vars[name].view([-1]).get(index).fill_(value);
}

fn greedy(prompt: Vec<i64>, max_new_tokens: usize) -> GenerationRequest {
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

#[test]
fn non_finite_logits_fail_the_batch_instead_of_sampling_garbage() {
    // Untied embeddings: a NaN in token 7's embedding reaches only rows that read it.
    let model = common::load_tiny("llama");
    let clean = generate(&model, &[greedy(vec![1, 2, 3], 4)], None).unwrap();
    let second = clean[0].tokens[0];
    poke_loaded(&model, "model.embed_tokens.weight", 7 * 64, f64::NAN);
    let err = generate(
        &model,
        &[
            greedy(vec![1, 2, 3], 4),
            greedy(vec![1, 7, 3], 4),
            greedy(vec![7, 5], 4),
        ],
        None,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "new token 1 of request(s) 1, 2: the logits are not finite (NaN or infinite)"
    );

    // A NaN that appears mid-generation: the first token is fine, the step that reads
    // it fails.
    let model = common::load_tiny("llama");
    poke_loaded(&model, "model.embed_tokens.weight", second * 64, f64::NAN);
    let err = generate(&model, &[greedy(vec![1, 2, 3], 4)], None)
        .unwrap_err()
        .to_string();
    if [1, 2, 3].contains(&second) {
        assert_eq!(
            err,
            "new token 1 of request(s) 0: the logits are not finite (NaN or infinite)"
        );
    } else {
        assert_eq!(
            err,
            "new token 2 of request(s) 0: the logits are not finite (NaN or infinite)"
        );
    }
}

#[test]
fn the_worker_names_the_model_whose_logits_are_not_finite_and_keeps_serving() {
    let handle = spawn_worker("solver-lm", WorkerConfig::default(), || {
        let model = common::load_tiny("llama");
        poke_loaded(&model, "model.embed_tokens.weight", 7 * 64, f64::NAN);
        Ok(Box::new(ModelBackend::new(model, None, PathBuf::new())) as Box<dyn Backend>)
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ask = |prompt: Vec<i64>| BackendRequest {
        prompt,
        params: SamplingParams {
            temperature: 0.0,
            max_new_tokens: 3,
            ..Default::default()
        },
        stop: Vec::new(),
        shared_prefix: 0,
    };
    let bad = runtime.block_on(handle.generate(ask(vec![1, 7, 3])));
    let err = bad.unwrap_err();
    assert_eq!(
        err.to_string(),
        "model `solver-lm`: generation: new token 1 of request(s) 0: the logits are not finite (NaN or infinite)"
    );
    assert!(!err.is_out_of_memory());
    let good = runtime.block_on(handle.generate(ask(vec![1, 2, 3])));
    assert_eq!(good.unwrap().tokens.len(), 3);
}

/// Returns `tokens` tokens with the given log-probs for every request.
struct Scripted {
    logprobs: Vec<f32>,
    tokens: usize,
}

impl Backend for Scripted {
    fn generate_slots(
        &mut self,
        requests: &[BackendRequest],
        _slots: &[usize],
    ) -> Result<Vec<Generation>, BackendError> {
        Ok(requests
            .iter()
            .map(|_| Generation {
                tokens: vec![65; self.tokens],
                logprobs: self.logprobs.clone(),
                finish: FinishReason::Length,
                policy_version: 0,
            })
            .collect())
    }
}

/// What a worker over [`Scripted`] answers to one request.
fn scripted(logprobs: Vec<f32>, tokens: usize) -> Result<Generation, String> {
    let handle = spawn_worker("verifier-lm", WorkerConfig::default(), move || {
        Ok(Box::new(Scripted { logprobs, tokens }) as Box<dyn Backend>)
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime
        .block_on(handle.generate(BackendRequest {
            prompt: vec![1],
            params: SamplingParams::default(),
            stop: Vec::new(),
            shared_prefix: 0,
        }))
        .map_err(|e| e.to_string())
}

#[test]
fn a_generation_never_hands_a_nan_log_prob_on_to_a_sample() {
    assert_eq!(
        scripted(vec![-0.5, f32::NAN, -0.1], 3).unwrap_err(),
        "model `verifier-lm`: generation: request 0: the log-prob of new token 2 is NaN, not a finite number"
    );
    assert_eq!(
        scripted(vec![f32::NEG_INFINITY], 1).unwrap_err(),
        "model `verifier-lm`: generation: request 0: the log-prob of new token 1 is -inf, not a finite number"
    );
    assert_eq!(
        scripted(vec![-0.5], 2).unwrap_err(),
        "model `verifier-lm`: generation: request 0: 2 tokens but 1 log-probs"
    );
    // Finite log-probs pass untouched.
    assert_eq!(
        scripted(vec![-0.5, -1.5], 2).unwrap().logprobs,
        vec![-0.5, -1.5]
    );
}
