//! Data sets: reading task files ([`load_tasks`]), the synthetic arithmetic generator
//! ([`arith`]) and `drmas data prepare` ([`prepare`]), which writes the real math sets of
//! docs/experiments.md ("Data"), the arithmetic levels, and the QA sets and corpus of the search
//! workflow as JSONL.
//!
//! Every file drmas writes has one JSON object a line:
//! `{"id", "source", "question", "answer", "meta"}` ([`Record`]); the loader also reads
//! other people's JSONL and Parquet files through a field mapping.

pub mod arith;
mod error;
pub mod loader;
pub mod prepare;
mod source;

pub use error::DataError;
pub use loader::load_tasks;
pub use source::DataSource;

use drmas_plugin_api::Task;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
};

/// One row of a data file as drmas writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    /// The data source (`gsm8k`, `math500`, `arith-l1`), used to split metrics.
    pub source: String,
    pub question: String,
    /// The short gold answer, as text.
    pub answer: String,
    /// Everything else (the full solution, the level, ...).
    #[serde(default)]
    pub meta: Map<String, Value>,
}

impl Record {
    /// The task the rest of drmas sees.
    pub fn into_task(self) -> Task {
        Task {
            id: self.id,
            source: self.source,
            question: self.question,
            answer: self.answer,
            meta: self.meta,
        }
    }
}

/// The JSONL text of `records`: one object a line, keys in the order of [`Record`],
/// `meta` keys sorted. The same records always give the same bytes.
pub fn to_jsonl(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        serde_json::to_writer(&mut out, r).expect("a Record always serializes");
        out.push(b'\n');
    }
    out
}

/// Writes `bytes` to `path` whole or not at all (see [`crate::output::write_atomic`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    crate::output::write_atomic(path, bytes).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The number of non-blank lines of `path`, or `None` when it does not exist.
pub fn count_rows(path: &Path) -> Result<Option<usize>, DataError> {
    let f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DataError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut n = 0;
    for line in BufReader::new(f).lines() {
        let line = line.map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if !line.trim().is_empty() {
            n += 1;
        }
    }
    Ok(Some(n))
}
