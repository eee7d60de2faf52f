//! The local BM25 passage index (tantivy): built once from a JSONL corpus
//! ([`build_index`]), opened read-only and searched from many threads ([`LocalIndex`]).
//!
//! | file         | job                                                                  |
//! |--------------|----------------------------------------------------------------------|
//! | `corpus.rs`  | reads the corpus, a passage a line; bad lines named `FILE:LINE`      |
//! | `schema.rs`  | fields, the analyzer shared by indexing and queries, the marker file |
//! | `build.rs`   | writes an index folder from a corpus                                 |
//! | `search.rs`  | [`LocalIndex`]: query text to passages, never a query error          |

mod build;
mod corpus;
mod schema;
mod search;

pub use build::{IndexStats, build_index};
pub use corpus::{CorpusPassage, CorpusReader};
pub use schema::{MARKER_FILE, is_index};
pub use search::{
    ALWAYS_KEPT_TERMS, LocalIndex, MAX_QUERY_TERMS, QUERY_POSTINGS_BUDGET, TITLE_BOOST,
};

use std::path::PathBuf;

/// Why an index could not be built or opened.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A corpus line that is not a passage: `FILE:LINE: what is wrong`.
    #[error("{}:{line}: {message}", file.display())]
    Corpus {
        file: PathBuf,
        line: u64,
        message: String,
    },
    #[error("{}:{line}: duplicate id `{id}` (first at line {first}); ids must be unique", file.display())]
    DuplicateId {
        file: PathBuf,
        line: u64,
        first: u64,
        id: String,
    },
    #[error("{}: no passages (one JSON object a line: {{\"id\", \"title\", \"text\"}})", file.display())]
    EmptyCorpus { file: PathBuf },
    #[error("{} does not exist (build an index with `drmas index build CORPUS OUT`)", path.display())]
    Missing { path: PathBuf },
    #[error("{} is not a drmas search index (build one with `drmas index build CORPUS OUT`)", path.display())]
    NotAnIndex { path: PathBuf },
    #[error("{}: an index of format {found}, this drmas reads format {expected}; rebuild it with `drmas index build CORPUS OUT --force`", path.display())]
    Format {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("index {}: {source}", path.display())]
    Tantivy {
        path: PathBuf,
        #[source]
        source: tantivy::TantivyError,
    },
}
