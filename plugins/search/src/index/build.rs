//! Builds an index folder from a corpus: every passage indexed, the segments merged
//! into one (one posting list per term makes queries fastest), the marker written last.

use super::{
    IndexError,
    corpus::CorpusReader,
    schema::{register_analyzer, schema, write_marker},
};
use std::{
    collections::HashSet,
    hash::{DefaultHasher, Hash, Hasher},
    path::Path,
    time::Instant,
};
use tantivy::{Index, IndexWriter, TantivyDocument, indexer::NoMergePolicy};

/// What a build produced.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStats {
    pub passages: u64,
    /// The size of the index folder.
    pub bytes_on_disk: u64,
    pub seconds: f64,
}

/// `progress` is called with the number of passages indexed so far, every this many.
const PROGRESS_EVERY: usize = 10_000;

/// The indexing memory of the one writer thread. tantivy flushes a segment when it is full;
/// bigger segments mean fewer merges.
const WRITER_BYTES: usize = 256 << 20;

/// Builds an index of the passages of `corpus` (JSONL, `{"id", "title", "text"}` a line)
/// in `out_dir`, a fresh folder the caller stages and swaps in. `progress` gets the
/// number of passages indexed so far, now and then and at the end. A bad line or a
/// duplicate id stops the build with an error naming `FILE:LINE`.
pub fn build_index(
    corpus: &Path,
    out_dir: &Path,
    progress: &mut dyn FnMut(usize),
) -> Result<IndexStats, IndexError> {
    let started = Instant::now();
    let tantivy_err = |source| IndexError::Tantivy {
        path: out_dir.to_path_buf(),
        source,
    };
    let reader = CorpusReader::open(corpus)?;
    let (schema, fields) = schema();
    let index = Index::create_in_dir(out_dir, schema).map_err(tantivy_err)?;
    register_analyzer(&index);
    // One indexing thread: documents keep the corpus's order, so passages with equal
    // scores come back in the same order from every build of the same corpus (with
    // several threads the order, and so the top k of a tie, changed from build to build).
    let mut writer: IndexWriter<TantivyDocument> = index
        .writer_with_num_threads(1, WRITER_BYTES)
        .map_err(tantivy_err)?;
    // No merges while indexing: the one merge at the end replaces them all, and a
    // background merge would hold segments the final merge needs.
    writer.set_merge_policy(Box::new(NoMergePolicy));

    let mut ids = IdSet::default();
    let mut passages = 0usize;
    for passage in reader {
        let passage = passage?;
        if let Some(first) = ids.insert(corpus, &passage.id, passage.line)? {
            return Err(IndexError::DuplicateId {
                file: corpus.to_path_buf(),
                line: passage.line,
                first,
                id: passage.id,
            });
        }
        let mut doc = TantivyDocument::new();
        doc.add_text(fields.id, &passage.id);
        doc.add_text(fields.title, &passage.title);
        doc.add_text(fields.text, &passage.text);
        writer.add_document(doc).map_err(tantivy_err)?;
        passages += 1;
        if passages.is_multiple_of(PROGRESS_EVERY) {
            progress(passages);
        }
    }
    if passages == 0 {
        return Err(IndexError::EmptyCorpus {
            file: corpus.to_path_buf(),
        });
    }
    writer.commit().map_err(tantivy_err)?;
    let segments = index.searchable_segment_ids().map_err(tantivy_err)?;
    if segments.len() > 1 {
        writer.merge(&segments).wait().map_err(tantivy_err)?;
    }
    // The merged-away segments' files go now, not at some later writer's start.
    writer.garbage_collect_files().wait().map_err(tantivy_err)?;
    writer.wait_merging_threads().map_err(tantivy_err)?;
    progress(passages);

    write_marker(out_dir, passages as u64)?;
    Ok(IndexStats {
        passages: passages as u64,
        bytes_on_disk: folder_size(out_dir).map_err(|source| IndexError::Io {
            path: out_dir.to_path_buf(),
            source,
        })?,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The ids seen so far, as 64-bit hashes: 9 bytes an id instead of the id itself, so a
/// corpus of 21M passages checks its ids in ~300 MB. Two different ids with one hash
/// (about one chance in 10^5 for 21M ids) are told apart by reading the earlier line
/// back from the corpus, so the check is exact.
#[derive(Default)]
struct IdSet {
    hashes: HashSet<u64>,
}

impl IdSet {
    /// Adds `id` (read at `line`); returns the line of an earlier passage with the same
    /// id, if there is one.
    fn insert(&mut self, corpus: &Path, id: &str, line: u64) -> Result<Option<u64>, IndexError> {
        let hash = id_hash(id);
        if self.hashes.insert(hash) {
            return Ok(None);
        }
        // Rare: find the earlier line with this hash and compare the ids themselves.
        for earlier in CorpusReader::open(corpus)? {
            let earlier = earlier?;
            if earlier.line >= line {
                break;
            }
            if earlier.id == id {
                return Ok(Some(earlier.line));
            }
        }
        Ok(None)
    }
}

fn id_hash(id: &str) -> u64 {
    let mut h = DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

fn folder_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            folder_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
