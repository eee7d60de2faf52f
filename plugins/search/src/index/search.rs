//! [`LocalIndex`]: an opened index, searched from many threads at once.
//!
//! A query is whatever a model wrote between `<search>` tags, so it is never parsed as
//! query syntax (`title:`, quotes, `AND`, `+`, brackets mean nothing here): its text goes
//! through the index's own analyzer and each kept term becomes an optional (SHOULD) term
//! query on the title and on the text, scored by BM25. Any text is a query; one without a
//! searchable word finds nothing.
//!
//! Which terms are kept bounds the work of a query, whatever its length: a short query
//! keeps all its terms (exact BM25); a long one keeps its rarest terms, as many as fit a
//! budget of postings. The time of a disjunction grows with the postings it walks, and
//! the common terms a long text is full of walk the most while telling passages apart
//! the least (their BM25 weight, the IDF, is small).

use super::{
    IndexError,
    schema::{Fields, analyzer, fields_of, read_marker, register_analyzer},
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

/// A title match counts this much more than a match in the text. Wikipedia passages are
/// ~100-word chunks of an article, each carrying the article's title: a query naming the
/// subject should prefer the subject's passages over ones that mention it in passing,
/// but not so much that the title outweighs what the passage says (every chunk of the
/// article has the same title; the text decides between them).
pub const TITLE_BOOST: f32 = 1.5;

/// At most this many distinct terms of a query are searched.
pub const MAX_QUERY_TERMS: usize = 64;

/// The rarest terms of a query up to this many are always searched, however common:
/// a question's words are all kept.
pub const ALWAYS_KEPT_TERMS: usize = 8;

/// Beyond [`ALWAYS_KEPT_TERMS`], a rarer-first term is added only while the passages
/// containing the kept terms (their document frequencies, summed) stay within this: the
/// postings walked, so the bound holds on any corpus size. On a 200k-passage corpus of
/// Zipf-distributed words, a query of 64 common terms took 200 ms with all of them and
/// 60 ms within this budget; a 5,000-character one 185 ms and 8 ms; 8 terms take 1-2 ms.
pub const QUERY_POSTINGS_BUDGET: u64 = 500_000;

/// Tokens read from one query: a model that writes a megabyte between `<search>` tags
/// costs no more than one that writes a page.
const MAX_QUERY_TOKENS: usize = 4096;

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

    /// The terms a query searches, in the query's order: its distinct terms that occur in
    /// the index, the [`ALWAYS_KEPT_TERMS`] rarest always, then rarer-first more while the
    /// [`QUERY_POSTINGS_BUDGET`] allows, at most [`MAX_QUERY_TERMS`].
    pub fn query_terms(&self, query: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.clone();
        let mut stream = analyzer.token_stream(query);
        let mut distinct: Vec<String> = Vec::new();
        let mut read = 0;
        while read < MAX_QUERY_TOKENS && stream.advance() {
            read += 1;
            let text = &stream.token().text;
            if !distinct.iter().any(|t| t == text) {
                distinct.push(text.clone());
            }
        }
        if distinct.len() <= ALWAYS_KEPT_TERMS {
            // All kept: no need to look their frequencies up (a term no passage holds
            // costs nothing in the query).
            return distinct;
        }
        // (document frequency, position): a term no passage holds cannot match.
        let mut by_rarity: Vec<(u64, usize)> = distinct
            .iter()
            .enumerate()
            .map(|(i, t)| (self.document_frequency(t), i))
            .filter(|&(df, _)| df > 0)
            .collect();
        by_rarity.sort_unstable();
        let mut kept = Vec::new();
        let mut postings = 0u64;
        for (df, i) in by_rarity {
            if kept.len() == MAX_QUERY_TERMS
                || (kept.len() >= ALWAYS_KEPT_TERMS && postings + df > QUERY_POSTINGS_BUDGET)
            {
                break;
            }
            postings += df;
            kept.push(i);
        }
        kept.sort_unstable();
        kept.into_iter().map(|i| distinct[i].clone()).collect()
    }

    /// Passages holding `term` in their title or text (an upper bound: one in both counts
    /// twice). An unreadable term dictionary counts as none; the search itself then
    /// reports the error.
    fn document_frequency(&self, term: &str) -> u64 {
        [self.fields.title, self.fields.text]
            .into_iter()
            .map(|field| {
                self.searcher
                    .doc_freq(&Term::from_field_text(field, term))
                    .unwrap_or(0)
            })
            .sum()
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
