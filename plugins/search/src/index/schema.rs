//! What an index folder holds: its fields, the analyzer that turns text (passages and
//! queries alike) into terms, and the marker file that says drmas built it.

use super::IndexError;
use serde::{Deserialize, Serialize};
use std::path::Path;
use tantivy::{
    Index,
    schema::{Field, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions},
    tokenizer::{
        AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
        StopWordFilter, TextAnalyzer,
    },
};

/// The file drmas writes into every index folder it builds. Its absence tells a folder
/// that is not an index (a typo, someone's data) from one that is.
pub const MARKER_FILE: &str = "drmas-index.json";

/// Bumped when the fields or the analyzer change: an older index would answer queries
/// with different terms than it was built with.
pub const FORMAT: u32 = 1;

/// The analyzer's name in the index's schema (tantivy looks it up by name).
pub(crate) const ANALYZER: &str = "drmas_en";

/// Lucene's English stop words, the ones Search-R1's BM25 index (pyserini) drops.
/// Dropping them keeps a query's posting lists short: "the" is in most passages.
const STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// The analyzer of titles, texts and queries: words split at anything not a letter or a
/// digit, words over 40 bytes dropped, lowercased, accents folded (`Beyoncé` matches
/// `beyonce`), Lucene's English stop words dropped, then the English Snowball stemmer
/// (`capitals` matches `capital`), as pyserini's BM25 does with Porter's.
pub(crate) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(StopWordFilter::remove(
            STOP_WORDS.iter().map(|w| w.to_string()),
        ))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The fields of an index.
#[derive(Clone, Copy)]
pub(crate) struct Fields {
    pub id: Field,
    pub title: Field,
    pub text: Field,
}

/// Title and text are searched (term frequencies and lengths, no positions: queries are
/// bags of words, and positions would double the index) and stored; the id only stored.
pub(crate) fn schema() -> (Schema, Fields) {
    let searched = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(ANALYZER)
                .set_index_option(IndexRecordOption::WithFreqs),
        )
        .set_stored();
    let mut builder = Schema::builder();
    let id = builder.add_text_field("id", STORED);
    let title = builder.add_text_field("title", searched.clone());
    let text = builder.add_text_field("text", searched);
    (builder.build(), Fields { id, title, text })
}

/// The fields of an opened index, by name; an index without them was not built here.
pub(crate) fn fields_of(index: &Index, dir: &Path) -> Result<Fields, IndexError> {
    let schema = index.schema();
    let field = |name| {
        schema.get_field(name).map_err(|_| IndexError::NotAnIndex {
            path: dir.to_path_buf(),
        })
    };
    Ok(Fields {
        id: field("id")?,
        title: field("title")?,
        text: field("text")?,
    })
}

/// Registers the analyzer with an index (created or opened): tantivy keeps only its name.
pub(crate) fn register_analyzer(index: &Index) {
    index.tokenizers().register(ANALYZER, analyzer());
}

/// The content of [`MARKER_FILE`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Marker {
    pub format: u32,
    pub passages: u64,
    pub analyzer: String,
}

/// Writes the marker into a freshly built index folder (the caller syncs and swaps the
/// folder in whole).
pub(crate) fn write_marker(dir: &Path, passages: u64) -> Result<(), IndexError> {
    let marker = Marker {
        format: FORMAT,
        passages,
        analyzer: ANALYZER.to_string(),
    };
    let path = dir.join(MARKER_FILE);
    let text = serde_json::to_string_pretty(&marker).expect("a marker serializes");
    std::fs::write(&path, text + "\n").map_err(|source| IndexError::Io { path, source })
}

/// Reads the marker of `dir`; a folder without one is not an index.
pub(crate) fn read_marker(dir: &Path) -> Result<Marker, IndexError> {
    if !dir.exists() {
        return Err(IndexError::Missing {
            path: dir.to_path_buf(),
        });
    }
    let path = dir.join(MARKER_FILE);
    let text = std::fs::read_to_string(&path).map_err(|_| IndexError::NotAnIndex {
        path: dir.to_path_buf(),
    })?;
    let marker: Marker = serde_json::from_str(&text).map_err(|_| IndexError::NotAnIndex {
        path: dir.to_path_buf(),
    })?;
    if marker.format != FORMAT {
        return Err(IndexError::Format {
            path: dir.to_path_buf(),
            found: marker.format,
            expected: FORMAT,
        });
    }
    Ok(marker)
}

/// Whether `dir` is an index folder drmas built (it holds the marker). The host replaces
/// only such folders.
pub fn is_index(dir: &Path) -> bool {
    dir.join(MARKER_FILE).is_file()
}
