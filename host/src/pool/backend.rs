//! What a model worker owns and serves: a [`Backend`]. The real one, [`ModelBackend`],
//! holds the decoder, its tokenizer (for stop strings) and, when the model trains, its
//! optimizer moments and frozen reference copy; tests script fakes that only generate.

use super::error::BackendError;
use crate::model::{
    DEFAULT_LOGITS_BUDGET, Decoder, Generation, GenerationRequest, SamplingParams, SequencePair,
    StopStrings, TextTokenizer, load_weights, memory, response_logprobs_per_row, save_checkpoint,
};
use crate::train::{AdamW, UpdateBatch, UpdateReport, UpdateSettings, run_update};
use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

/// One generation request as the worker receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendRequest {
    pub prompt: Vec<i64>,
    pub params: SamplingParams,
    /// Stop strings (the codec's text), besides `params.stop_token_ids`.
    pub stop: Vec<String>,
}

/// A (prompt, response) pair to score, with the temperature its logits are divided by.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRequest {
    pub prompt: Vec<i64>,
    pub response: Vec<i64>,
    pub temperature: f64,
}

/// Everything a worker can be asked to do. Only generation is required; a backend that
/// cannot train says so with [`BackendError::Unsupported`].
pub trait Backend: Send {
    fn generate(&mut self, requests: &[BackendRequest]) -> Result<Vec<Generation>, BackendError>;

    /// Refuses, before it joins a batch, a request this backend can never serve: longer
    /// than the model's context, or too large for memory even alone.
    fn admit(&self, _request: &BackendRequest) -> Result<(), BackendError> {
        Ok(())
    }

    /// Whether `rows` requests whose longest prompt has `prompt_len` tokens and which
    /// generate up to `new_tokens` each fit in memory as one batch. The worker starts a
    /// new batch rather than grow one past this.
    fn fits(&self, _rows: usize, _prompt_len: usize, _new_tokens: usize) -> bool {
        true
    }

    /// Updates applied so far (the policy version of what it generates).
    fn version(&self) -> u64 {
        0
    }

    /// One training update on a batch of samples.
    fn update(&mut self, _batch: &UpdateBatch) -> Result<UpdateReport, BackendError> {
        Err(BackendError::Unsupported)
    }

    /// Writes weights (HF layout) and optimizer state into the folder `dir`.
    fn save(&mut self, _dir: &Path) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    /// Loads what [`Backend::save`] wrote.
    fn restore(&mut self, _dir: &Path) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    /// log p of each response token given its prompt under the current weights, at the
    /// given temperature (no grad).
    fn logprobs(&mut self, _pairs: &[ScoreRequest]) -> Result<Vec<Vec<f32>>, BackendError> {
        Err(BackendError::Unsupported)
    }

    /// Moves the weights, the optimizer moments and the reference copy to `device`.
    fn to_device(&mut self, _device: tch::Device) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    /// The real model, for inspection (tests, `drmas` internals).
    fn model_backend(&mut self) -> Option<&mut ModelBackend> {
        None
    }
}

/// What a training model owns besides its weights.
pub struct Training {
    pub settings: UpdateSettings,
    pub optimizer: AdamW,
    /// The frozen initial weights, when the loss has a KL term.
    pub reference: Option<Decoder>,
}

/// The real backend.
pub struct ModelBackend {
    pub model: Decoder,
    /// For stop strings; without one they are not checked.
    pub tokenizer: Option<Arc<TextTokenizer>>,
    /// The folder the model was loaded from: its config and tokenizer files go into
    /// every checkpoint.
    pub source: PathBuf,
    pub training: Option<Training>,
    version: u64,
}

const OPTIMIZER_FILE: &str = "optimizer.safetensors";
const WORKER_STATE_FILE: &str = "worker.json";

impl ModelBackend {
    pub fn new(model: Decoder, tokenizer: Option<Arc<TextTokenizer>>, source: PathBuf) -> Self {
        Self {
            model,
            tokenizer,
            source,
            training: None,
            version: 0,
        }
    }

    /// Makes the model trainable: AdamW over every weight, and `reference` kept frozen
    /// (it is only ever run under `no_grad`, so nothing accumulates on it).
    pub fn with_training(mut self, settings: UpdateSettings, reference: Option<Decoder>) -> Self {
        let mut params: Vec<(String, tch::Tensor)> =
            self.model.vs.variables().into_iter().collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let optimizer = AdamW::new(params, settings.optimizer);

        self.training = Some(Training {
            settings,
            optimizer,
            reference,
        });
        self
    }

    fn training(&mut self) -> Result<&mut Training, BackendError> {
        self.training.as_mut().ok_or(BackendError::Unsupported)
    }
}

impl Backend for ModelBackend {
    fn generate(&mut self, requests: &[BackendRequest]) -> Result<Vec<Generation>, BackendError> {
        let reqs: Vec<GenerationRequest> = requests
            .iter()
            .map(|r| GenerationRequest {
                prompt: r.prompt.clone(),
                params: r.params.clone(),
            })
            .collect();
        let stops = self
            .tokenizer
            .as_deref()
            .filter(|_| requests.iter().any(|r| !r.stop.is_empty()))
            .map(|tokenizer| StopStrings {
                tokenizer,
                stops: requests.iter().map(|r| r.stop.clone()).collect(),
            });
        let check = stops.as_ref().map(|s| s as &dyn crate::model::StopCheck);
        let mut gens = crate::model::generate(&self.model, &reqs, check)?;
        for g in &mut gens {
            g.policy_version = self.version;
        }
        Ok(gens)
    }

    fn admit(&self, request: &BackendRequest) -> Result<(), BackendError> {
        let (prompt, new) = (
            request.prompt.len() as u64,
            request.params.max_new_tokens as u64,
        );
        self.model.check_context(
            || format!("prompt of {prompt} tokens + max_new_tokens {new}"),
            prompt.saturating_add(new),
        )?;
        memory::check_generation(
            &self.model.config,
            self.model.kind(),
            self.model.device(),
            1,
            prompt,
            new,
        )?;
        Ok(())
    }

    fn fits(&self, rows: usize, prompt_len: usize, new_tokens: usize) -> bool {
        memory::generation_fits(
            &self.model.config,
            self.model.kind(),
            self.model.device(),
            rows as u64,
            prompt_len as u64,
            new_tokens as u64,
        )
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn update(&mut self, batch: &UpdateBatch) -> Result<UpdateReport, BackendError> {
        let Self {
            model, training, ..
        } = self;
        let t = training.as_mut().ok_or(BackendError::Unsupported)?;
        let report = run_update(
            model,
            &mut t.optimizer,
            t.reference.as_ref(),
            batch,
            &t.settings,
        )?;
        if report.applied > 0 {
            self.version += 1;
        }
        Ok(report)
    }

    fn save(&mut self, dir: &Path) -> Result<(), BackendError> {
        save_checkpoint(&self.model, &self.source, dir)?;
        let version = self.version;
        let t = self.training()?;
        let (tensors, steps) = t.optimizer.state();
        let path = dir.join(OPTIMIZER_FILE);
        tch::Tensor::write_safetensors(&tensors, &path).map_err(crate::model::ModelError::from)?;
        let state = serde_json::json!({ "optimizer_steps": steps, "policy_version": version });
        crate::output::write_atomic(
            &dir.join(WORKER_STATE_FILE),
            serde_json::to_string_pretty(&state)
                .expect("json")
                .as_bytes(),
        )
        .map_err(|e| crate::model::ModelError::io(dir.join(WORKER_STATE_FILE), e))?;
        Ok(())
    }

    fn restore(&mut self, dir: &Path) -> Result<(), BackendError> {
        load_weights(&mut self.model, dir)?;
        let state_path = dir.join(WORKER_STATE_FILE);
        let text = std::fs::read_to_string(&state_path)
            .map_err(|e| crate::model::ModelError::io(&state_path, e))?;
        let state: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| crate::model::ModelError::io(&state_path, e))?;
        let steps = state["optimizer_steps"].as_i64().unwrap_or(0);
        self.version = state["policy_version"].as_u64().unwrap_or(0);
        let path = dir.join(OPTIMIZER_FILE);
        let tensors = tch::Tensor::read_safetensors(&path)
            .map_err(|e| crate::model::ModelError::io(&path, e))?;
        let device = self.model.device();
        let tensors: Vec<(String, tch::Tensor)> = tensors
            .into_iter()
            .map(|(n, t)| (n, t.to_device(device)))
            .collect();
        self.training()?.optimizer.load_state(&tensors, steps)?;
        Ok(())
    }

    fn logprobs(&mut self, pairs: &[ScoreRequest]) -> Result<Vec<Vec<f32>>, BackendError> {
        let _guard = tch::no_grad_guard();
        let mut out = Vec::with_capacity(pairs.len());
        // One pair at a time keeps memory to one sequence; scoring is not the hot path.
        for p in pairs {
            let pair = [SequencePair {
                prompt: &p.prompt,
                response: &p.response,
            }];
            let lp = response_logprobs_per_row(
                &self.model,
                &pair,
                &[p.temperature],
                false,
                DEFAULT_LOGITS_BUDGET,
            )?;
            out.push(lp.row(0, p.response.len()));
        }
        Ok(out)
    }

    fn to_device(&mut self, device: tch::Device) -> Result<(), BackendError> {
        self.model.to_device(device);
        if let Some(t) = &mut self.training {
            t.optimizer.to_device(device);
            if let Some(r) = &mut t.reference {
                r.to_device(device);
            }
        }
        Ok(())
    }

    fn model_backend(&mut self) -> Option<&mut ModelBackend> {
        Some(self)
    }
}
