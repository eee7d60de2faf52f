//! The synthetic arithmetic levels as files: `arith/level-N/{train,test}.jsonl`,
//! regenerated in memory (cheap) and rewritten only when their bytes differ.

use super::{ArithOptions, FileReport, Outcome, manifest::Manifest};
use crate::data::{DataError, arith, to_jsonl, write_atomic};
use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

/// The two files of one arithmetic level under `out_dir`.
pub fn arith_files(out_dir: &Path, level: u32) -> [PathBuf; 2] {
    let dir = out_dir.join(format!("arith/level-{level}"));
    [dir.join("train.jsonl"), dir.join("test.jsonl")]
}

/// Writes the levels `a` asks for; `force` rewrites files with the same bytes.
pub(super) fn write_arith(
    out_dir: &Path,
    a: &ArithOptions,
    force: bool,
    manifest: &mut Manifest,
    log: &mut dyn FnMut(&str),
    reports: &mut Vec<FileReport>,
) -> Result<(), DataError> {
    for &n in &a.levels {
        let lvl = arith::level(n)?;
        let [train_path, test_path] = arith_files(out_dir, n);
        let train = arith::generate(n, arith::Split::Train, a.train, a.seed)?;
        let test = arith::generate(n, arith::Split::Test, a.test, a.seed)?;
        let mut notes = Vec::new();
        for (path, records, asked) in [(train_path, &train, a.train), (test_path, &test, a.test)] {
            let bytes = to_jsonl(records);
            let same = !force && std::fs::read(&path).is_ok_and(|old| old == bytes);
            let outcome = if same {
                Outcome::Kept
            } else {
                write_atomic(&path, &bytes)?;
                Outcome::Wrote
            };
            manifest.record(&path, &bytes);
            let distinct = records
                .iter()
                .map(|r| r.question.as_str())
                .collect::<HashSet<_>>()
                .len();
            let all = if records.len() < asked {
                ": all the level has"
            } else {
                ""
            };
            notes.push(format!(
                "{} {} ({} rows, {distinct} distinct{all})",
                if same { "kept" } else { "wrote" },
                path.display(),
                records.len()
            ));
            reports.push(FileReport {
                path,
                rows: records.len(),
                outcome,
            });
        }
        manifest.save()?;
        log(&format!(
            "arith level {n} ({}): {}",
            lvl.summary,
            notes.join(", ")
        ));
    }
    Ok(())
}
