//! A scripted model for orchestra tests: the codec maps text to bytes and back, the
//! backend answers from a script that sees the prompt text.
#![allow(dead_code)]

use drmas::model::{FinishReason, Generation, ModelError};
use drmas::pool::{Backend, BackendError, BackendRequest};
use drmas::rollout::Codec;
use drmas_plugin_api::Message;

/// Prompt = "role: content\n" per message, as bytes.
pub struct ByteCodec;

impl Codec for ByteCodec {
    fn prompt_ids(&self, messages: &[Message]) -> Result<Vec<i64>, ModelError> {
        Ok(self.prompt_text(messages)?.bytes().map(i64::from).collect())
    }
    fn prompt_text(&self, messages: &[Message]) -> Result<String, ModelError> {
        Ok(messages
            .iter()
            .map(|m| format!("{}: {}\n", m.role, m.content))
            .collect())
    }
    fn decode(&self, ids: &[i64]) -> Result<String, ModelError> {
        String::from_utf8(ids.iter().map(|&i| i as u8).collect()).map_err(|e| ModelError::Other {
            what: "byte codec".into(),
            message: e.to_string(),
        })
    }
    fn stop_token_ids(&self) -> Vec<i64> {
        Vec::new()
    }
}

impl ByteCodec {
    pub fn decode_ids(&self, ids: &[i64]) -> String {
        self.decode(ids).unwrap()
    }
}

/// Answers each prompt with `script(prompt_text)`; every token gets log-prob −0.5.
pub struct ScriptedBackend<F: FnMut(&str) -> String + Send> {
    pub script: F,
    pub calls: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl<F: FnMut(&str) -> String + Send> Backend for ScriptedBackend<F> {
    fn generate_slots(
        &mut self,
        requests: &[BackendRequest],
        _slots: &[usize],
    ) -> Result<Vec<Generation>, BackendError> {
        Ok(requests
            .iter()
            .map(|r| {
                let prompt = ByteCodec.decode(&r.prompt).unwrap();
                self.calls.lock().unwrap().push(prompt.clone());
                let tokens: Vec<i64> = (self.script)(&prompt).bytes().map(i64::from).collect();
                Generation {
                    logprobs: vec![-0.5; tokens.len()],
                    tokens,
                    finish: FinishReason::StopToken,
                    policy_version: 0,
                }
            })
            .collect())
    }
}
