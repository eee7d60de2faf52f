//! SGLang's native HTTP server: `POST /generate` with `input_ids`, and the weight-update
//! calls `/pause_generation`, `/update_weights_from_disk`, `/continue_generation`,
//! `/load_lora_adapter`.
//!
//! Log-probs: SGLang logs log softmax(logits / T) before top-k / top-p truncation
//! (raw log softmax(logits) for greedy batches), drmas's generator's quantity. Seeds:
//! `sampling_seed` is honoured only by a server started with
//! `--enable-deterministic-inference`; otherwise sampling is not reproducible.
//!
//! Shapes from SGLang 0.5.23 (`python/sglang/srt/managers/io_struct.py`,
//! `tokenizer_manager.py`, `schedule_batch.py`, `entrypoints/http_server.py`); golden
//! examples in `tests/fixtures/engines/sglang/`. Contract-tested only: no SGLang build
//! runs on the machines drmas is tested on.

use super::{EngineClient, EngineError, EngineFinish, EngineOutput, EngineRequest, Protocol};
use serde_json::{Value, json};

pub struct Sglang;

const NAME: &str = "SGLang";
const FIELDS: super::AnswerFields = super::AnswerFields {
    ids: "output_ids",
    logprobs: "meta_info.output_token_logprobs",
};

fn answer(why: impl Into<String>) -> EngineError {
    EngineError::Answer {
        engine: NAME,
        what: "generate",
        why: why.into(),
    }
}

/// `success: false` in an answer as an error.
fn check_success(client: &EngineClient, what: &'static str, v: &Value) -> Result<(), EngineError> {
    if v["success"].as_bool() == Some(false) {
        let message = v["message"]
            .as_str()
            .or(v["error_message"].as_str())
            .unwrap_or("no message")
            .to_string();
        return Err(EngineError::Refused {
            engine: NAME,
            url: client.url().to_string(),
            what,
            message,
        });
    }
    Ok(())
}

impl Protocol for Sglang {
    fn name(&self) -> &'static str {
        NAME
    }

    fn health_path(&self) -> &'static str {
        "/health"
    }

    fn generate_path(&self) -> &'static str {
        "/generate"
    }

    fn answer_fields(&self) -> super::AnswerFields {
        FIELDS
    }

    fn generate_body(&self, r: &EngineRequest) -> Value {
        json!({
            "input_ids": r.prompt,
            "sampling_params": {
                "temperature": r.temperature,
                "top_p": r.top_p,
                // SGLang's "off" is -1.
                "top_k": if r.top_k > 0 { r.top_k } else { -1 },
                "min_p": 0.0,
                "max_new_tokens": r.max_new_tokens,
                "stop_token_ids": r.stop_token_ids,
                "stop": r.stop,
                "ignore_eos": false,
                "skip_special_tokens": false,
                "no_stop_trim": true,
                "sampling_seed": r.seed,
            },
            "return_logprob": true,
            "logprob_start_len": -1,
            "top_logprobs_num": 0,
            "return_text_in_logprobs": false,
            "stream": false,
            "lora_path": r.adapter.as_ref().map(|a| a.name.as_str()),
        })
    }

    fn parse_generate(&self, v: &Value) -> Result<EngineOutput, EngineError> {
        let meta = &v["meta_info"];
        let (tokens, lps) = super::ids_and_entries(
            &v["output_ids"],
            &meta["output_token_logprobs"],
            FIELDS,
            "no `output_ids` array",
        )
        .map_err(answer)?;
        let mut logprobs = Vec::with_capacity(tokens.len());
        for (i, (entry, &t)) in lps.iter().zip(&tokens).enumerate() {
            // [logprob, token id, text or null]
            let (Some(lp), Some(id)) = (entry[0].as_f64(), entry[1].as_i64()) else {
                return Err(answer(format!(
                    "{}[{i}] = {entry} is not [logprob, token id, text]",
                    FIELDS.logprobs
                )));
            };
            if id != t {
                return Err(answer(format!(
                    "log-prob {i} is of token {id} but token {i} is {t}"
                )));
            }
            logprobs.push(lp as f32);
        }
        let reason = &meta["finish_reason"];
        let finish = match reason["type"].as_str() {
            Some("stop") => match &reason["matched"] {
                Value::String(s) => EngineFinish::StopString(s.clone()),
                _ => EngineFinish::StopToken,
            },
            Some("length") => EngineFinish::Length,
            Some("abort") => {
                EngineFinish::Abort(reason["message"].as_str().unwrap_or("aborted").to_string())
            }
            _ => return Err(answer(format!("finish_reason {reason}"))),
        };
        Ok(EngineOutput {
            tokens,
            logprobs,
            finish,
        })
    }

    fn reload_from_disk(
        &self,
        client: &EngineClient,
        dir: &str,
        version: &str,
    ) -> Result<(), EngineError> {
        // Nothing of drmas's is in flight: abort is the cheapest pause, and it lets the
        // flush after the load succeed.
        client.post("/pause_generation", &json!({"mode": "abort"}), "pause")?;
        let loaded = client
            .post(
                "/update_weights_from_disk",
                &json!({
                    "model_path": dir,
                    "weight_version": version,
                    "flush_cache": true,
                    "abort_all_requests": false,
                }),
                "update weights from disk",
            )
            .and_then(|v| check_success(client, "update weights from disk", &v));
        // Resumed whatever the load did, so that a failed sync does not leave the engine
        // paused for whoever else uses it.
        let resumed = client.post("/continue_generation", &json!({}), "continue");
        loaded?;
        resumed.map(|_| ())
    }

    fn load_adapter(
        &self,
        client: &EngineClient,
        name: &str,
        dir: &str,
    ) -> Result<(), EngineError> {
        // A name is loaded once: the old adapter of that name goes first (an unload of
        // a name that is not loaded fails, which is fine here).
        let _ = client.post(
            "/unload_lora_adapter",
            &json!({"lora_name": name}),
            "unload LoRA adapter",
        );
        let v = client.post(
            "/load_lora_adapter",
            &json!({"lora_name": name, "lora_path": dir}),
            "load LoRA adapter",
        )?;
        check_success(client, "load LoRA adapter", &v)
    }
}
