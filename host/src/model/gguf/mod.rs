//! GGUF import: a llama.cpp GGUF file (Llama, Qwen2, Qwen3) becomes an HF checkpoint
//! folder drmas and transformers load: `config.json`, `generation_config.json`, F32
//! safetensors (dequantized, llama.cpp's Q/K row permutation undone), `tokenizer.json`
//! and `tokenizer_config.json` (with the chat template).
//!
//! One job per file: [`reader`] parses the container, [`quant`] dequantizes ggml
//! blocks, [`convert`] maps the architecture, names and layout, [`tokenizer`] builds the
//! tokenizer files, [`writer`] streams the safetensors. The file is memory-mapped and
//! dequantized one tensor at a time, so memory stays at about one tensor.

pub mod convert;
pub mod export;
pub mod quant;
pub mod reader;
pub mod tokenizer;
pub mod writer;

pub use convert::Arch;
pub use export::{ExportType, export_gguf, export_lora_gguf};
pub use quant::GgmlType;
pub use reader::GgufFile;

use super::{
    config::ModelConfig,
    error::{ModelError, Result},
};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

/// What an import wrote.
#[derive(Debug, Clone)]
pub struct ImportSummary {
    pub out: PathBuf,
    pub architecture: Arch,
    pub layers: usize,
    pub hidden_size: usize,
    pub tensors: usize,
    pub parameters: u64,
    /// Tensors per ggml type name in the GGUF file.
    pub types: BTreeMap<String, usize>,
    pub tied_embeddings: bool,
    pub vocab_size: usize,
    pub merges: usize,
    pub special_tokens: usize,
    /// `tokenizer.ggml.pre`.
    pub pre_tokenizer: String,
    pub chat_template: bool,
    /// Bytes of safetensors written.
    pub weight_bytes: u64,
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("json");
    std::fs::write(path, text + "\n").map_err(|e| ModelError::io(path, e))
}

/// Imports `gguf` into the HF checkpoint folder `out`, calling `progress(i, n, name)`
/// before each of the `n` tensors (i from 1) with its GGUF name.
///
/// Everything is checked before anything is written (architecture, every tensor's name
/// and type, the tokenizer); the folder is written next to `out` under a temporary name
/// and swapped in at the end, replacing `out` if it exists (the CLI refuses a non-empty
/// `out` unless forced, and refuses to replace a folder drmas did not import), so a
/// failed or killed import leaves the old folder or the new one, never a part.
pub fn import_gguf(
    gguf: &Path,
    out: &Path,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<ImportSummary> {
    let file = GgufFile::open(gguf)?;
    let plan = convert::plan(&file)?;
    let hp = &plan.hparams;
    let tok = tokenizer::build(&file, hp.vocab, hp.context_length)?;
    let config_text = serde_json::to_string_pretty(&plan.config).expect("json");
    // What drmas will read back must be a config it accepts.
    ModelConfig::from_json(&out.join("config.json"), &config_text)?;
    // And the tokenizer must load in the `tokenizers` crate.
    let tokenizer_text = serde_json::to_string(&tok.tokenizer).expect("json");
    tokenizers::Tokenizer::from_bytes(tokenizer_text.as_bytes()).map_err(|e| {
        ModelError::Other {
            what: format!(
                "{}: tokenizer built from the GGUF vocabulary",
                gguf.display()
            ),
            message: e.to_string(),
        }
    })?;

    let staged = crate::output::StagedDir::new(out).map_err(|e| ModelError::io(out, e))?;
    let weight_bytes = write_folder(
        &file,
        &plan,
        &tok,
        &tokenizer_text,
        staged.path(),
        &mut progress,
    )?;
    super::checkpoint::mark_as_made(staged.path())?;
    staged.commit().map_err(|e| ModelError::io(out, e))?;
    let mut types = BTreeMap::new();
    for t in &plan.tensors {
        *types.entry(t.kind.name()).or_insert(0) += 1;
    }
    Ok(ImportSummary {
        out: out.into(),
        architecture: hp.arch,
        layers: hp.layers,
        hidden_size: hp.hidden,
        tensors: plan.tensors.len(),
        parameters: plan.tensors.iter().map(|t| t.info.elements()).sum(),
        types,
        tied_embeddings: plan.tied_embeddings,
        vocab_size: tok.stats.vocab,
        merges: tok.stats.merges,
        special_tokens: tok.stats.special_tokens,
        pre_tokenizer: tok.stats.pre.clone(),
        chat_template: tok.config.get("chat_template").is_some(),
        weight_bytes,
    })
}

fn write_folder(
    file: &GgufFile,
    plan: &convert::Plan,
    tok: &tokenizer::TokenizerFiles,
    tokenizer_text: &str,
    dir: &Path,
    progress: &mut impl FnMut(usize, usize, &str),
) -> Result<u64> {
    write_json(&dir.join("config.json"), &plan.config)?;
    write_json(&dir.join("generation_config.json"), &plan.generation_config)?;
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tokenizer_text).map_err(|e| ModelError::io(&path, e))?;
    write_json(&dir.join("tokenizer_config.json"), &tok.config)?;

    let entries: Vec<writer::Entry> = plan
        .tensors
        .iter()
        .map(|t| writer::Entry {
            name: t.hf_name.clone(),
            shape: t.shape.clone(),
        })
        .collect();
    let n = plan.tensors.len();
    writer::write_safetensors(dir, &entries, |i, buffer| {
        let t = &plan.tensors[i];
        progress(i + 1, n, &t.info.name);
        let data = file.tensor_data(&t.info, t.kind)?;
        buffer.resize(t.info.elements() as usize, 0.0);
        quant::dequantize(t.kind, data, buffer);
        if let Some(heads) = t.unpermute_heads {
            *buffer = convert::unpermute_rows(buffer, t.shape[0], heads);
        }
        if let Some(bad) = buffer.iter().position(|v| !v.is_finite()) {
            return Err(file.tensor_err(
                &t.info.name,
                format!("value {} at index {bad} is not finite", buffer[bad]),
            ));
        }
        Ok(())
    })
}
