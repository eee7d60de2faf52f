//! Inference engines as generation servers (docs/engines.md): the wire protocols of
//! llama.cpp's `llama-server`, SGLang and vLLM, and a blocking HTTP client with
//! timeouts, bounded retries and a health check. What crosses is token ids in, and token
//! ids, one log-prob per token and a finish reason out: the engine never sees text the
//! trainer would have to tokenize again, so the ids the trainer trains on are the ids the
//! engine sampled.
//!
//! This module knows nothing of models, workers or training; it sits beside `data` and
//! `plugin` in the layers (ARCHITECTURE.md).

mod client;
mod error;
pub mod llama_cpp;
mod server;
pub mod sglang;
pub mod vllm;

pub use client::{EngineClient, Retry};
pub use error::EngineError;
pub use llama_cpp::LlamaCpp;
pub use server::{ManagedServer, free_port, start as start_server};
pub use sglang::Sglang;
pub use vllm::Vllm;

/// One generation as an engine is asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineRequest {
    pub prompt: Vec<i64>,
    pub max_new_tokens: usize,
    /// 0 = greedy.
    pub temperature: f64,
    /// 1 = off.
    pub top_p: f64,
    /// 0 = off.
    pub top_k: i64,
    pub seed: u64,
    /// Generation ends after any of these (kept in the output), besides the engine's own
    /// end-of-generation tokens.
    pub stop_token_ids: Vec<i64>,
    /// Stop strings; the caller cuts the tokens after a match with its own tokenizer, as
    /// the in-process generator does (engines differ in where they cut).
    pub stop: Vec<String>,
    /// The LoRA adapter that generates, or the base.
    pub adapter: Option<AdapterRef>,
}

/// A LoRA adapter an engine holds, as requests address it: SGLang and vLLM by the name
/// it was loaded under, llama.cpp by its place among the server's `--lora` files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterRef {
    pub name: String,
    pub index: usize,
}

/// Why an engine stopped generating, as it says.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineFinish {
    /// An end-of-generation token or one of the request's stop ids (the last token).
    StopToken,
    /// One of the request's stop strings.
    StopString(String),
    /// `max_new_tokens` reached.
    Length,
    /// The engine gave up on the request (aborted, cancelled, out of context).
    Abort(String),
}

/// What an engine generated for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineOutput {
    pub tokens: Vec<i64>,
    /// One per token: the engine's log-probability of the token it sampled (see each
    /// protocol for which distribution that is).
    pub logprobs: Vec<f32>,
    pub finish: EngineFinish,
}

/// One engine's wire protocol for generation.
pub trait Protocol: Send + Sync {
    /// The engine's name in messages (`llama.cpp`, `SGLang`, `vLLM`).
    fn name(&self) -> &'static str;
    /// The path of a GET that answers 200 once the engine can serve.
    fn health_path(&self) -> &'static str;
    /// The path generation requests are POSTed to.
    fn generate_path(&self) -> &'static str;
    /// The body of a generation request.
    fn generate_body(&self, request: &EngineRequest) -> serde_json::Value;
    /// The generation in the engine's answer.
    fn parse_generate(&self, answer: &serde_json::Value) -> Result<EngineOutput, EngineError>;
    /// Where the answer keeps the token ids and their log-probs, as messages name them.
    fn answer_fields(&self) -> AnswerFields {
        AnswerFields {
            ids: "tokens",
            logprobs: "logprobs",
        }
    }

    /// Has the engine take the weights of the HF model folder `dir` (a path the engine
    /// can read), tagged `version`, while nothing of drmas's is in flight: the engine's
    /// pause → load → flush → resume. Engines without such calls (llama.cpp) say so.
    fn reload_from_disk(
        &self,
        _client: &EngineClient,
        _dir: &str,
        _version: &str,
    ) -> Result<(), EngineError> {
        Err(EngineError::Unsupported {
            engine: self.name(),
            what: "loading new weights from disk at run time",
        })
    }

    /// Loads the PEFT adapter folder `dir` under `name` (replacing one of that name).
    fn load_adapter(
        &self,
        _client: &EngineClient,
        _name: &str,
        _dir: &str,
    ) -> Result<(), EngineError> {
        Err(EngineError::Unsupported {
            engine: self.name(),
            what: "loading LoRA adapters at run time",
        })
    }
}

/// The names of the fields of a generation answer that hold the token ids and their
/// log-probs (`output_ids`, `meta_info.output_token_logprobs`), for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerFields {
    pub ids: &'static str,
    pub logprobs: &'static str,
}

/// A log-prob above 0 by no more than this is the rounding of a certain token's
/// probability (the logarithm of a probability a hair above 1), read as 0; anything
/// higher is refused.
pub const LOGPROB_ROUNDING: f32 = 1e-4;

/// Checks a parsed generation before anything of it reaches a model: at most
/// `max_new_tokens` ids, each within the vocabulary of `vocab` ids (`None`: only ≥ 0),
/// one log-prob per id, each finite and ≤ 0 (a rounding above 0 is made 0). `Err` names
/// the field, the place and the value.
pub fn check_output(
    out: &mut EngineOutput,
    fields: AnswerFields,
    max_new_tokens: usize,
    vocab: Option<usize>,
) -> Result<(), String> {
    let AnswerFields { ids, logprobs } = fields;
    if out.tokens.len() > max_new_tokens {
        return Err(format!(
            "{ids} has {} ids, more than the {max_new_tokens} asked for (max_new_tokens)",
            out.tokens.len()
        ));
    }
    for (i, &t) in out.tokens.iter().enumerate() {
        match vocab {
            Some(n) if t < 0 || t as u64 >= n as u64 => {
                return Err(format!("{ids}[{i}] = {t} is outside the vocabulary of {n}"));
            }
            None if t < 0 => return Err(format!("{ids}[{i}] = {t} is not a token id")),
            _ => {}
        }
    }
    if out.logprobs.len() != out.tokens.len() {
        return Err(format!(
            "{ids} has {} ids but {logprobs} has {} log-probs (one per id)",
            out.tokens.len(),
            out.logprobs.len()
        ));
    }
    for (i, lp) in out.logprobs.iter_mut().enumerate() {
        if !lp.is_finite() {
            return Err(format!("{logprobs}[{i}] = {lp} is not a finite log-prob"));
        }
        if *lp > LOGPROB_ROUNDING {
            return Err(format!(
                "{logprobs}[{i}] = {lp} is not a log-prob (a log-prob is at most 0)"
            ));
        }
        *lp = lp.min(0.0);
    }
    Ok(())
}

/// What every protocol's generation answer holds: the token ids at `ids` (absent:
/// `missing`), and one log-prob entry per token in the array `entries`; `fields` name
/// them in messages. `Err` is the reason, for the protocol's own error.
fn ids_and_entries<'v>(
    ids: &'v serde_json::Value,
    entries: &'v serde_json::Value,
    fields: AnswerFields,
    missing: &str,
) -> Result<(Vec<i64>, &'v [serde_json::Value]), String> {
    let tokens: Vec<i64> = ids
        .as_array()
        .ok_or_else(|| missing.to_string())?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_i64()
                .ok_or_else(|| format!("{}[{i}] = {t} is not a token id", fields.ids))
        })
        .collect::<Result<_, _>>()?;
    let entries: &[serde_json::Value] = entries.as_array().map_or(&[], Vec::as_slice);
    if entries.len() != tokens.len() {
        return Err(format!(
            "{} has {} ids but {} has {} log-probs (one per id)",
            fields.ids,
            tokens.len(),
            fields.logprobs,
            entries.len()
        ));
    }
    Ok((tokens, entries))
}
