//! Prompt rendering and decoding for one model: chat messages to prompt ids through the
//! chat template, generated ids back to text. The real codec is the model's tokenizer;
//! tests use a byte codec.

use crate::model::{ModelError, TextTokenizer};
use drmas_plugin_api::Message;

/// Shared by the episode tasks of one model.
pub trait Codec: Send + Sync {
    /// Prompt ids for `messages` through the chat template, with the generation prompt.
    fn prompt_ids(&self, messages: &[Message]) -> Result<Vec<i64>, ModelError>;
    /// The prompt text `prompt_ids` tokenizes: the chat template's output.
    fn prompt_text(&self, messages: &[Message]) -> Result<String, ModelError>;
    /// Text of generated ids, special tokens dropped.
    fn decode(&self, ids: &[i64]) -> Result<String, ModelError>;
    /// Tokens that end a completion.
    fn stop_token_ids(&self) -> Vec<i64>;
    /// How many first tokens of `prompt` (the ids of `messages`) other prompts likely
    /// share (every message but the last); a hint for the sampler's prefill, 0 = none.
    fn shared_prefix(&self, _messages: &[Message], _prompt: &[i64]) -> usize {
        0
    }
}

impl Codec for TextTokenizer {
    fn prompt_ids(&self, messages: &[Message]) -> Result<Vec<i64>, ModelError> {
        self.chat_ids(messages)
    }
    fn prompt_text(&self, messages: &[Message]) -> Result<String, ModelError> {
        self.chat_prompt(messages, true)
    }
    fn decode(&self, ids: &[i64]) -> Result<String, ModelError> {
        TextTokenizer::decode(self, ids, true)
    }
    fn stop_token_ids(&self) -> Vec<i64> {
        TextTokenizer::stop_token_ids(self).to_vec()
    }
    fn shared_prefix(&self, messages: &[Message], prompt: &[i64]) -> usize {
        self.shared_prefix_len(messages, prompt)
    }
}
