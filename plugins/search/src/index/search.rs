//! [`LocalIndex`]: an opened index, searched from many threads at once.
//!
//! A query is whatever a model wrote between `<search>` tags, so it is never parsed as
//! query syntax (`title:`, quotes, `AND`, `+`, brackets mean nothing here): its text goes
//! through the index's own analyzer and each distinct term becomes an optional (SHOULD)
//! term query on the title and on the text, scored by BM25. Any text is a query; one
//! without a searchable word finds nothing.

use super::{
    IndexError,
    schema::{
        Fields, MAX_QUERY_TERMS, TITLE_BOOST, analyzer, fields_of, read_marker, register_analyzer,
    },
};
use crate::{
    passage::Passage,
    retriever::{RetrieveError, Retriever},
};
use std::path::{Path, PathBuf};
use tantivy::{
    Index, ReloadPolicy, Searcher, TantivyDocument, Term,
    collector::TopDocs,
    query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery},
    schema::{IndexRecordOption, Value},
    tokenizer::TextAnalyzer,
};

/// A built index, open for searching. One searcher (memory-mapped segments) is shared
/// by every thread; the index never changes while open.
pub struct LocalIndex {
    dir: PathBuf,
    searcher: Searcher,
    fields: Fields,
    analyzer: TextAnalyzer,
    passages: u64,
}

impl LocalIndex {
    /// Opens the index in `dir`. A folder that is not an index drmas built is an error
    /// that says how to build one.
    pub fn open(dir: &Path) -> Result<Self, IndexError> {
        read_marker(dir)?;
        let tantivy_err = |source| IndexError::Tantivy {
            path: dir.to_path_buf(),
            source,
        };
        let index = Index::open_in_dir(dir).map_err(tantivy_err)?;
        register_analyzer(&index);
        let fields = fields_of(&index, dir)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(tantivy_err)?;
        let searcher = reader.searcher();
        Ok(Self {
            dir: dir.to_path_buf(),
            passages: searcher.num_docs(),
            searcher,
            fields,
            analyzer: analyzer(),
        })
    }

    /// How many passages the index holds.
    pub fn passages(&self) -> u64 {
        self.passages
    }

    /// The folder it was opened from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The distinct terms of a query, in order, at most [`MAX_QUERY_TERMS`].
    pub fn query_terms(&self, query: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.clone();
        let mut stream = analyzer.token_stream(query);
        let mut terms: Vec<String> = Vec::new();
        while terms.len() < MAX_QUERY_TERMS && stream.advance() {
            let text = &stream.token().text;
            if !terms.iter().any(|t| t == text) {
                terms.push(text.clone());
            }
        }
        terms
    }

    /// The top `k` passages for one query, best first; empty when the query has no
    /// searchable word or `k` is 0. An error is the index's (a file gone, a disk error),
    /// never the query's.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Passage>, RetrieveError> {
        let terms = self.query_terms(query);
        // A k beyond the corpus size would only make the collector allocate for nothing.
        let k = k.min(usize::try_from(self.passages).unwrap_or(usize::MAX));
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(2 * terms.len());
        for term in &terms {
            let title = TermQuery::new(
                Term::from_field_text(self.fields.title, term),
                IndexRecordOption::WithFreqs,
            );
            let text = TermQuery::new(
                Term::from_field_text(self.fields.text, term),
                IndexRecordOption::WithFreqs,
            );
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(Box::new(title), TITLE_BOOST)),
            ));
            clauses.push((Occur::Should, Box::new(text)));
        }
        let query = BooleanQuery::new(clauses);
        let top = self
            .searcher
            .search(&query, &TopDocs::with_limit(k).order_by_score())
            .map_err(|e| self.error(e))?;
        top.into_iter()
            .map(|(score, address)| {
                let doc: TantivyDocument = self.searcher.doc(address).map_err(|e| self.error(e))?;
                let text_of = |field| {
                    doc.get_first(field)
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                };
                Ok(Passage {
                    id: text_of(self.fields.id),
                    title: text_of(self.fields.title),
                    text: text_of(self.fields.text),
                    score,
                })
            })
            .collect()
    }

    fn error(&self, e: tantivy::TantivyError) -> RetrieveError {
        RetrieveError::Index {
            path: self.dir.display().to_string(),
            message: e.to_string(),
        }
    }
}

impl Retriever for LocalIndex {
    fn search_batch(
        &self,
        queries: &[String],
        k: usize,
    ) -> Result<Vec<Vec<Passage>>, RetrieveError> {
        queries.iter().map(|q| self.search(q, k)).collect()
    }
}
