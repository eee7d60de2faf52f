//! What a batcher serves: a backend that generates for a batch of token prompts, and a
//! codec that turns chat messages into prompt ids and ids back into text. The real ones
//! wrap the decoder and its tokenizer; tests script fakes.

use crate::model::{
    Decoder, Generation, GenerationRequest, SamplingParams, StopStrings, TextTokenizer, generate,
};
use drmas_plugin_api::Message;
use std::sync::Arc;

/// One generation request as the batcher receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendRequest {
    pub prompt: Vec<i64>,
    pub params: SamplingParams,
    /// Stop strings (the codec's text), besides `params.stop_token_ids`.
    pub stop: Vec<String>,
}

/// Generates for a batch; owned by one batcher thread.
pub trait Backend: Send {
    fn generate(&mut self, requests: &[BackendRequest]) -> Result<Vec<Generation>, String>;
}

/// Prompt rendering and decoding for one model; shared by episode tasks.
pub trait Codec: Send + Sync {
    /// Prompt ids for `messages` through the chat template, with the generation prompt.
    fn prompt_ids(&self, messages: &[Message]) -> Result<Vec<i64>, String>;
    /// Text of generated ids, special tokens dropped.
    fn decode(&self, ids: &[i64]) -> Result<String, String>;
    /// Tokens that end a completion.
    fn stop_token_ids(&self) -> Vec<i64>;
}

impl Codec for TextTokenizer {
    fn prompt_ids(&self, messages: &[Message]) -> Result<Vec<i64>, String> {
        self.chat_ids(messages).map_err(|e| e.to_string())
    }
    fn decode(&self, ids: &[i64]) -> Result<String, String> {
        TextTokenizer::decode(self, ids, true).map_err(|e| e.to_string())
    }
    fn stop_token_ids(&self) -> Vec<i64> {
        TextTokenizer::stop_token_ids(self).to_vec()
    }
}

/// The real backend: the decoder, and its tokenizer for stop strings (without one,
/// stop strings are not checked).
pub struct ModelBackend {
    pub model: Decoder,
    pub tokenizer: Option<Arc<TextTokenizer>>,
}

impl Backend for ModelBackend {
    fn generate(&mut self, requests: &[BackendRequest]) -> Result<Vec<Generation>, String> {
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
        generate(&self.model, &reqs, check).map_err(|e| e.to_string())
    }
}
