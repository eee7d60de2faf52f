//! Tokenizer of a checkpoint folder: `tokenizer.json` through the `tokenizers` crate,
//! the chat template, and the stop tokens from the config files.

use super::{
    chat::ChatTemplate,
    error::{ModelError, Result},
};
use drmas_plugin_api::Message;
use serde_json::Value;
use std::path::Path;

pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    chat: Option<ChatTemplate>,
    stop_ids: Vec<i64>,
    add_bos: Option<i64>,
    /// The model's context in tokens (`max_position_embeddings`), when config.json says.
    context: Option<u64>,
    /// More bytes of text than any one token stands for: the longest vocabulary entry
    /// (byte-level and metaspace alphabets spell a byte with at least one byte), doubled
    /// for normalizers that shorten text (NFC composes a letter and its accent).
    bytes_per_token: usize,
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ModelError::io(path, e))
}

/// A special token in tokenizer_config.json: a string or `{ "content": ... }`.
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o
            .get("content")
            .and_then(|c| c.as_str())
            .map(str::to_string),
        _ => None,
    }
}

fn ids_of(v: Option<&Value>) -> Vec<i64> {
    match v {
        Some(Value::Number(n)) => n.as_i64().into_iter().collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_i64).collect(),
        _ => Vec::new(),
    }
}

impl TextTokenizer {
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let inner =
            tokenizers::Tokenizer::from_file(&path).map_err(|e| ModelError::io(&path, e))?;
        let config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
        let bos = token_text(config.get("bos_token"));
        let eos = token_text(config.get("eos_token"));
        let template = match std::fs::read_to_string(dir.join("chat_template.jinja")) {
            Ok(t) => Some(t),
            Err(_) => match config.get("chat_template") {
                Some(Value::String(s)) => Some(s.clone()),
                // A list of named templates: take "default".
                Some(Value::Array(list)) => list
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
                _ => None,
            },
        };
        let chat = template
            .map(|t| {
                ChatTemplate::new(
                    t,
                    bos.clone().unwrap_or_default(),
                    eos.clone().unwrap_or_default(),
                )
            })
            .transpose()?;

        // Stop tokens: the generation config's eos ids, the model config's, and the
        // tokenizer's eos token.
        let mut stop_ids = Vec::new();
        if let Some(g) = read_json(&dir.join("generation_config.json"))? {
            stop_ids.extend(ids_of(g.get("eos_token_id")));
        }
        let mut context = None;
        if let Some(c) = read_json(&dir.join("config.json"))? {
            stop_ids.extend(ids_of(c.get("eos_token_id")));
            context = c.get("max_position_embeddings").and_then(Value::as_u64);
        }
        let longest = inner
            .get_vocab(true)
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(1);
        if let Some(id) = eos.as_deref().and_then(|t| inner.token_to_id(t)) {
            stop_ids.push(i64::from(id));
        }
        stop_ids.sort();
        stop_ids.dedup();
        let add_bos = match config.get("add_bos_token") {
            Some(Value::Bool(true)) => bos
                .as_deref()
                .and_then(|t| inner.token_to_id(t))
                .map(i64::from),
            _ => None,
        };
        Ok(Self {
            inner,
            chat,
            stop_ids,
            add_bos,
            context,
            bytes_per_token: 2 * longest.max(1),
        })
    }

    /// Token ids of `text`, without special tokens added (chat templates carry their own).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| ModelError::Other {
                what: "tokenizer".into(),
                message: e.to_string(),
            })?;
        Ok(enc.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    pub fn decode(&self, ids: &[i64], skip_special: bool) -> Result<String> {
        let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        self.inner
            .decode(&ids, skip_special)
            .map_err(|e| ModelError::Other {
                what: "tokenizer".into(),
                message: e.to_string(),
            })
    }

    /// The rendered prompt for `messages`.
    pub fn chat_prompt(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let chat = self.chat.as_ref().ok_or_else(|| ModelError::Other {
            what: "chat template".into(),
            message:
                "the tokenizer has no chat_template (tokenizer_config.json or chat_template.jinja)"
                    .into(),
        })?;
        chat.render(messages, add_generation_prompt)
    }

    /// Prompt ids for `messages`: the rendered template, tokenized (a BOS is prepended
    /// only where the tokenizer config asks for one and the template did not write it).
    pub fn chat_ids(&self, messages: &[Message]) -> Result<Vec<i64>> {
        self.chat_ids_with(messages, true)
    }

    /// How many first tokens of `prompt` (the [`TextTokenizer::chat_ids`] of
    /// `messages`) come before the last message's text — the system prompt, worked
    /// examples and earlier turns that other prompts of a run likely share: the tokens
    /// `prompt` has in common with the same chat whose last message is empty (rendering
    /// the chat without its last message would not do: a template may render the last
    /// assistant message of a chat otherwise). 0 with one message, or when the template
    /// cannot render it (it is a hint only).
    pub fn shared_prefix_len(&self, messages: &[Message], prompt: &[i64]) -> usize {
        let Some((last, earlier)) = messages.split_last() else {
            return 0;
        };
        if earlier.is_empty() {
            return 0;
        }
        let mut blank = messages.to_vec();
        blank[earlier.len()] = Message {
            content: String::new(),
            ..last.clone()
        };
        match self.chat_ids_with(&blank, true) {
            Ok(ids) => ids.iter().zip(prompt).take_while(|(a, b)| a == b).count(),
            Err(_) => 0,
        }
    }

    fn chat_ids_with(&self, messages: &[Message], add_generation_prompt: bool) -> Result<Vec<i64>> {
        let text = self.chat_prompt(messages, add_generation_prompt)?;
        self.check_length("the rendered prompt", &text)?;
        let mut ids = self.encode(&text)?;
        if let Some(bos) = self.add_bos
            && ids.first() != Some(&bos)
        {
            ids.insert(0, bos);
        }
        Ok(ids)
    }

    /// Refuses, without tokenizing it, a text that must be longer than the context: a
    /// 10 MB question would take a minute and gigabytes to tokenize before the context
    /// check refused its ids.
    pub fn check_length(&self, what: &str, text: &str) -> Result<()> {
        let Some(context) = self.context else {
            return Ok(());
        };
        let limit = (context as usize).saturating_mul(self.bytes_per_token);
        if text.len() > limit {
            return Err(ModelError::TextTooLong {
                what: what.to_string(),
                bytes: text.len(),
                per_token: self.bytes_per_token,
                context,
            });
        }
        Ok(())
    }

    pub fn stop_token_ids(&self) -> &[i64] {
        &self.stop_ids
    }
}

/// Stop strings for the sampler: decodes the tail of each row and cuts after the first
/// stop string.
pub struct StopStrings<'a> {
    pub tokenizer: &'a TextTokenizer,
    /// Per request.
    pub stops: Vec<Vec<String>>,
}

impl super::sampler::StopCheck for StopStrings<'_> {
    fn check(&self, request: usize, tokens: &[i64]) -> Option<usize> {
        let stops = self.stops.get(request).filter(|s| !s.is_empty())?;
        // Checked after every token, so a new match ends in the newest token and lies in
        // the last few tokens: a string of L characters spans at most 4·L byte tokens.
        let longest = stops.iter().map(|s| s.chars().count()).max().unwrap_or(0);
        let start = tokens.len().saturating_sub(4 * longest + 2);
        let hit = |n: usize| {
            self.tokenizer
                .decode(&tokens[start..n], false)
                .is_ok_and(|t| stops.iter().any(|s| t.contains(s.as_str())))
        };
        if !hit(tokens.len()) {
            return None;
        }
        (start + 1..=tokens.len()).find(|&n| hit(n))
    }
}
