//! `tokenizer.json` and `tokenizer_config.json` from the vocabulary a GGUF file carries
//! (`tokenizer.ggml.*`). Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) is built the
//! way transformers' GGUF loader builds it (`integrations/gguf/gguf_tokenizer_mapping.py`
//! in transformers 5): GPT-2's byte-level BPE over the file's vocabulary and merges,
//! the pre-tokenizer split chosen by `tokenizer.ggml.pre`, control tokens added as
//! special tokens and user-defined ones as plain added tokens.

use super::super::error::{ModelError, Result};
use super::reader::{GgufFile, Value};
use serde_json::{Map, Value as Json, json};
use std::collections::{BTreeMap, HashMap};

const LLAMA3_SPLIT: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_SPLIT: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}",
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const TEKKEN_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const GPT4O_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// The split regex for a `tokenizer.ggml.pre`, as transformers maps it; `None` keeps
/// GPT-2's own byte-level regex (as for `smollm`, `gpt2`, `starcoder`, ...).
pub fn split_regex(pre: &str) -> Option<&'static str> {
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3_SPLIT,
        "tekken" => TEKKEN_SPLIT,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2_SPLIT,
        "qwen35" => QWEN35_SPLIT,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O_SPLIT,
        _ => return None,
    })
}

/// GPT-2's `bytes_to_unicode`: the printable character standing for each byte.
fn byte_alphabet() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        *slot = if printable {
            char::from(b as u8)
        } else {
            extra += 1;
            char::from_u32(255 + extra).expect("valid char")
        };
    }
    table
}

/// What the tokenizer files hold, for the summary.
#[derive(Debug, Clone, Default)]
pub struct TokenizerStats {
    pub vocab: usize,
    pub merges: usize,
    pub special_tokens: usize,
    pub pre: String,
}

pub struct TokenizerFiles {
    pub tokenizer: Json,
    pub config: Json,
    pub stats: TokenizerStats,
}

fn config_err(file: &GgufFile, field: &str, message: impl Into<String>) -> ModelError {
    ModelError::Config {
        path: file.path.clone(),
        field: field.into(),
        message: message.into(),
    }
}

fn strings<'a>(file: &'a GgufFile, key: &str) -> Result<Option<Vec<&'a str>>> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    v.as_array()
        .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
        .map(Some)
        .ok_or_else(|| {
            config_err(
                file,
                key,
                format!("expected an array of strings, got {}", v.describe()),
            )
        })
}

/// Builds the tokenizer files; `model_vocab` is the number of embedding rows and
/// `max_length` the context length.
pub fn build(file: &GgufFile, model_vocab: usize, max_length: usize) -> Result<TokenizerFiles> {
    let model_key = "tokenizer.ggml.model";
    let model = file.get(model_key).and_then(Value::as_str).ok_or_else(|| {
        config_err(
            file,
            model_key,
            "missing: the GGUF file carries no tokenizer",
        )
    })?;
    if model != "gpt2" {
        return Err(ModelError::Unsupported {
            path: file.path.clone(),
            field: model_key.into(),
            value: format!("{model:?}"),
            why: "only byte-level BPE vocabularies (\"gpt2\") are converted".into(),
        });
    }
    let tokens = strings(file, "tokenizer.ggml.tokens")?
        .ok_or_else(|| config_err(file, "tokenizer.ggml.tokens", "missing"))?;
    if tokens.len() > model_vocab {
        return Err(config_err(
            file,
            "tokenizer.ggml.tokens",
            format!(
                "{} tokens, but the embedding has only {model_vocab} rows",
                tokens.len()
            ),
        ));
    }
    let merges = strings(file, "tokenizer.ggml.merges")?.ok_or_else(|| {
        config_err(
            file,
            "tokenizer.ggml.merges",
            "missing (a byte-level BPE needs its merges)",
        )
    })?;
    let token_types: Vec<i64> = match file.get("tokenizer.ggml.token_type") {
        None => Vec::new(),
        Some(v) => v
            .as_array()
            .and_then(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                config_err(
                    file,
                    "tokenizer.ggml.token_type",
                    format!("expected integers, got {}", v.describe()),
                )
            })?,
    };
    let pre = file
        .get("tokenizer.ggml.pre")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();

    // The vocabulary, each token spelled in the byte alphabet (llama.cpp stores a few,
    // like added tokens, as plain text). A repeated spelling keeps its last id.
    let alphabet = byte_alphabet();
    let in_alphabet = |t: &str| t.chars().all(|c| alphabet.contains(&c));
    let mut vocab: HashMap<String, usize> = HashMap::with_capacity(tokens.len());
    for (id, token) in tokens.iter().enumerate() {
        let spelled = if in_alphabet(token) {
            (*token).to_string()
        } else {
            token.bytes().map(|b| alphabet[b as usize]).collect()
        };
        vocab.insert(spelled, id);
    }
    let mut vocab_json = Map::with_capacity(vocab.len());
    let mut by_id: Vec<(&String, &usize)> = vocab.iter().collect();
    by_id.sort_by_key(|(_, id)| **id);
    for (token, id) in by_id {
        vocab_json.insert(token.clone(), json!(id));
    }
    let mut merge_pairs = Vec::with_capacity(merges.len());
    for (i, m) in merges.iter().enumerate() {
        let (a, b) = m.split_once(' ').ok_or_else(|| {
            config_err(
                file,
                "tokenizer.ggml.merges",
                format!("merge {i} {m:?} is not two tokens separated by a space"),
            )
        })?;
        merge_pairs.push(json!([a, b]));
    }

    // Added tokens: CONTROL (3) as special, USER_DEFINED (4) as plain; byte-level
    // tokens only (a control token outside the alphabet is a llama.cpp mislabel).
    let token_id = |key: &str| {
        file.get(key)
            .and_then(Value::as_i64)
            .filter(|&i| i >= 0 && (i as usize) < tokens.len())
    };
    let named = |key: &str| token_id(key).map(|i| tokens[i as usize].to_string());
    let (bos, eos, unk, pad) = (
        named("tokenizer.ggml.bos_token_id"),
        named("tokenizer.ggml.eos_token_id"),
        named("tokenizer.ggml.unknown_token_id"),
        named("tokenizer.ggml.padding_token_id"),
    );
    let mut added: BTreeMap<usize, (String, bool)> = BTreeMap::new();
    for (token, &ty) in tokens.iter().zip(&token_types) {
        if (ty == 3 || ty == 4) && in_alphabet(token) {
            let id = vocab[*token];
            added.entry(id).or_insert(((*token).to_string(), ty == 3));
        }
    }
    // The named special tokens are special whatever their type says.
    for token in [&bos, &eos, &unk, &pad].into_iter().flatten() {
        if in_alphabet(token) {
            added.insert(vocab[token.as_str()], (token.clone(), true));
        }
    }
    let added_tokens: Vec<Json> = added
        .iter()
        .map(|(id, (content, special))| {
            json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": special,
            })
        })
        .collect();
    let special_tokens = added.values().filter(|(_, s)| *s).count();

    let pre_tokenizer = match split_regex(&pre) {
        Some(regex) => json!({
            "type": "Sequence",
            "pretokenizers": [
                { "type": "Split", "pattern": { "Regex": regex }, "behavior": "Isolated", "invert": false },
                { "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false },
            ],
        }),
        None => {
            json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true })
        }
    };

    let flag = |key: &str| file.get(key).and_then(Value::as_bool);
    let add_bos = flag("tokenizer.ggml.add_bos_token").unwrap_or(false) && bos.is_some();
    let add_eos = flag("tokenizer.ggml.add_eos_token").unwrap_or(false) && eos.is_some();
    let post_processor = template_processing(
        &vocab,
        bos.as_deref().filter(|_| add_bos),
        eos.as_deref().filter(|_| add_eos),
    );

    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": { "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true },
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab_json,
            "merges": merge_pairs,
        },
    });

    let mut config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": unk,
        "pad_token": pad,
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": false,
    });
    if let Some(template) = file.get("tokenizer.chat_template") {
        let text = template.as_str().ok_or_else(|| {
            config_err(
                file,
                "tokenizer.chat_template",
                format!("expected a string, got {}", template.describe()),
            )
        })?;
        config["chat_template"] = json!(text);
    }
    let stats = TokenizerStats {
        vocab: tokens.len(),
        merges: merges.len(),
        special_tokens,
        pre,
    };
    Ok(TokenizerFiles {
        tokenizer,
        config,
        stats,
    })
}

/// transformers' `update_post_processor`: `[bos] $A [eos]` and `[bos] $A [eos] [bos] $B [eos]`.
fn template_processing(
    vocab: &HashMap<String, usize>,
    bos: Option<&str>,
    eos: Option<&str>,
) -> Json {
    let special =
        |t: &str, type_id: u32| json!({ "SpecialToken": { "id": t, "type_id": type_id } });
    let seq = |id: &str, type_id: u32| json!({ "Sequence": { "id": id, "type_id": type_id } });
    let mut single = Vec::new();
    let mut pair = Vec::new();
    for (part, type_id, out) in [("A", 0, &mut single), ("B", 1, &mut pair)] {
        if let Some(b) = bos {
            out.push(special(b, type_id));
        }
        out.push(seq(part, type_id));
        if let Some(e) = eos {
            out.push(special(e, type_id));
        }
    }
    let pair: Vec<Json> = single.iter().cloned().chain(pair).collect();
    let mut specials = Map::new();
    for t in [bos, eos].into_iter().flatten() {
        specials.insert(
            t.into(),
            json!({ "id": t, "ids": [vocab.get(t)], "tokens": [t] }),
        );
    }
    json!({ "type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_is_gpt2s() {
        let a = byte_alphabet();
        assert_eq!(a[b' ' as usize], 'Ġ');
        assert_eq!(a[b'\n' as usize], 'Ċ');
        assert_eq!(a[b'A' as usize], 'A');
        assert_eq!(a[0], 'Ā');
        assert_eq!(a[173], '\u{143}'); // the 68th and last non-printable byte
        let distinct: std::collections::HashSet<char> = a.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }
}
