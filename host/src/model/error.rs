//! Errors of the model layer.

use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{path}: `{field}`: {message}")]
    Config {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{path}: unsupported model: `{field}` = {value}: {why}")]
    Unsupported {
        path: PathBuf,
        field: String,
        value: String,
        why: String,
    },
    #[error("{path}: tensor `{name}`: {message}")]
    Tensor {
        path: PathBuf,
        name: String,
        message: String,
    },
    #[error("checkpoint {dir} has no tensor `{name}` (expected by the {family} decoder)")]
    MissingTensor {
        dir: PathBuf,
        name: String,
        family: String,
    },
    /// A size in `config.json` that the checkpoint's tensors contradict.
    #[error("{config}: {key} is {value} but {found}")]
    SizeMismatch {
        config: PathBuf,
        key: String,
        value: String,
        /// What the tensors say (`model.safetensors holds 30 layers (0..=29)`).
        found: String,
    },
    /// More tokens than the model has positions for.
    #[error(
        "{what} = {tokens} tokens, more than the model's context of {context} tokens (max_position_embeddings)"
    )]
    Context {
        what: String,
        tokens: u64,
        context: i64,
    },
    /// A text too long for the context whatever it tokenizes to, refused unread.
    #[error(
        "{what} is {bytes} bytes, more than {context} tokens of at most {per_token} bytes each can hold (the model's context, max_position_embeddings): refused before tokenizing"
    )]
    TextTooLong {
        what: String,
        bytes: usize,
        per_token: usize,
        context: u64,
    },
    /// An allocation refused before it was made: the estimate does not fit.
    #[error(
        "{what} needs ~{} ({parts}), more than the {} available ({limit})",
        super::units::gib(*.needed),
        super::units::gib(*.available)
    )]
    Memory {
        what: String,
        needed: u64,
        parts: String,
        available: u64,
        /// Where the limit comes from (`MemAvailable`, `free on cuda:0`).
        limit: String,
    },
    /// NaN or infinite values where finite numbers are required.
    #[error("{what}: {message}")]
    NonFinite { what: String, message: String },
    #[error("{}", torch_text(.0))]
    Torch(#[from] tch::TchError),
    #[error("{what}: {message}")]
    Other { what: String, message: String },
}

impl ModelError {
    pub fn io(path: impl Into<PathBuf>, err: impl std::fmt::Display) -> Self {
        ModelError::Io {
            path: path.into(),
            message: err.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, ModelError>;

/// libtorch's message without the C++ stack trace it appends.
pub fn torch_text(e: &tch::TchError) -> String {
    let text = e.to_string();
    match text.find("\nException raised from") {
        Some(i) => text[..i].trim_end().to_string(),
        None => text,
    }
}
