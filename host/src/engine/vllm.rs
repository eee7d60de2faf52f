//! vLLM's OpenAI-compatible server: `POST /v1/completions` with a token-id prompt and
//! `return_token_ids`, and, with `VLLM_SERVER_DEV_MODE=1`, the weight-update calls
//! `/pause`, `/collective_rpc` (`reload_weights`), `/reset_prefix_cache`, `/resume`;
//! runtime LoRA with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1` (`/v1/load_lora_adapter`).
//!
//! Log-probs: vLLM logs raw log softmax(logits) by default; a server started with
//! `--logprobs-mode processed_logprobs` logs them after temperature, top-k and top-p
//! (renormalized over what they keep). With top-p = 1 and top-k off, that is drmas's
//! generator's quantity; docs/engines.md says which to start.
//!
//! Shapes from vLLM 0.34.0 (`vllm/entrypoints/openai/completion/protocol.py`,
//! `serving.py`, `serve/rpc/api_router.py`, `serve/lora/api_router.py`); golden examples
//! in `tests/fixtures/engines/vllm/`. Contract-tested only: no vLLM build runs on the
//! machines drmas is tested on.

use super::{EngineClient, EngineError, EngineFinish, EngineOutput, EngineRequest, Protocol};
use serde_json::{Value, json};

/// vLLM, serving `model` (its `--served-model-name`; `None`: the server's only model).
pub struct Vllm {
    pub model: Option<String>,
}

const NAME: &str = "vLLM";
const FIELDS: super::AnswerFields = super::AnswerFields {
    ids: "choices[0].token_ids",
    logprobs: "choices[0].logprobs.token_logprobs",
};

fn answer(why: impl Into<String>) -> EngineError {
    EngineError::Answer {
        engine: NAME,
        what: "generate",
        why: why.into(),
    }
}

impl Protocol for Vllm {
    fn name(&self) -> &'static str {
        NAME
    }

    fn health_path(&self) -> &'static str {
        "/health"
    }

    fn generate_path(&self) -> &'static str {
        "/v1/completions"
    }

    fn answer_fields(&self) -> super::AnswerFields {
        FIELDS
    }

    fn generate_body(&self, r: &EngineRequest) -> Value {
        let mut body = json!({
            "prompt": r.prompt,
            "max_tokens": r.max_new_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            // vLLM's "off" is 0 or -1; every sampling parameter is sent, since unset ones
            // come from the model's generation_config.
            "top_k": if r.top_k > 0 { r.top_k } else { -1 },
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "seed": r.seed,
            "n": 1,
            "logprobs": 0,
            "return_token_ids": true,
            "stop_token_ids": r.stop_token_ids,
            "stop": r.stop,
            "include_stop_str_in_output": true,
            "skip_special_tokens": false,
            "ignore_eos": false,
            "stream": false,
        });
        // An adapter is addressed as a model of its own.
        if let Some(model) = r.adapter.as_ref().map(|a| &a.name).or(self.model.as_ref()) {
            body["model"] = json!(model);
        }
        body
    }

    fn parse_generate(&self, v: &Value) -> Result<EngineOutput, EngineError> {
        let choice = &v["choices"][0];
        if choice.is_null() {
            return Err(answer("no `choices`"));
        }
        let (tokens, lps) = super::ids_and_entries(
            &choice["token_ids"],
            &choice["logprobs"]["token_logprobs"],
            FIELDS,
            "no `token_ids` (is `return_token_ids` supported?)",
        )
        .map_err(answer)?;
        let logprobs = lps
            .iter()
            .enumerate()
            .map(|(i, lp)| {
                lp.as_f64().map(|x| x as f32).ok_or_else(|| {
                    answer(format!("{}[{i}] = {lp} is not a number", FIELDS.logprobs))
                })
            })
            .collect::<Result<_, _>>()?;
        let finish = match choice["finish_reason"].as_str() {
            Some("stop") => match &choice["stop_reason"] {
                Value::String(s) => EngineFinish::StopString(s.clone()),
                _ => EngineFinish::StopToken,
            },
            Some("length") => EngineFinish::Length,
            Some(other) => EngineFinish::Abort(other.to_string()),
            None => return Err(answer(format!("finish_reason {}", choice["finish_reason"]))),
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
        _version: &str,
    ) -> Result<(), EngineError> {
        client.post("/pause?mode=abort", &json!({}), "pause")?;
        let loaded = client
            .post(
                "/collective_rpc",
                &json!({"method": "reload_weights", "kwargs": {"weights_path": dir}}),
                "reload weights",
            )
            .and_then(|_| client.post("/reset_prefix_cache", &json!({}), "reset prefix cache"));
        let resumed = client.post("/resume", &json!({}), "resume");
        loaded?;
        resumed.map(|_| ())
    }

    fn load_adapter(
        &self,
        client: &EngineClient,
        name: &str,
        dir: &str,
    ) -> Result<(), EngineError> {
        // In place: the name stays what requests address; each sync writes a new folder,
        // so no prefix-cache block of the old weights is reused.
        client
            .post(
                "/v1/load_lora_adapter",
                &json!({"lora_name": name, "lora_path": dir, "load_inplace": true}),
                "load LoRA adapter",
            )
            .map(|_| ())
    }
}
