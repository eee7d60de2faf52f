//! The data loader: JSONL and Parquet, field mappings, limits, source overrides, and the
//! error for every kind of bad input.

use drmas::{
    config::DataSource,
    data::{DataError, load_tasks},
};
use drmas_plugin_api::Task;
use parquet::{
    basic::Compression,
    data_type::{ByteArray, ByteArrayType, Int64Type},
    file::{properties::WriterProperties, writer::SerializedFileWriter},
    schema::parser::parse_message_type,
};
use serde_json::{Value, json};
use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
};

/// A `[data]` entry as an experiment file spells it: `path = ".."` plus `extra`.
fn source(path: &Path, extra: &str) -> DataSource {
    let text = format!("path = {:?}\n{extra}", path.display().to_string());
    toml::from_str(&text).unwrap_or_else(|e| panic!("bad test TOML {text}: {e}"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

fn jsonl(rows: &[Value]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

fn meta(t: &Task) -> Value {
    Value::Object(t.meta.clone())
}

fn load_err(src: &DataSource) -> String {
    match load_tasks(src) {
        Ok(tasks) => panic!("expected an error, loaded {} tasks", tasks.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn jsonl_with_our_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "gsm.jsonl",
        &jsonl(&[
            json!({"id": "gsm8k-0", "source": "gsm8k", "question": "Janet has 16 eggs?", "answer": "18",
                   "meta": {"solution": "16 - 3 - 4 = 9; 9 * 2 = 18"}, "split": "test"}),
            json!({"id": "gsm8k-1", "source": "gsm8k", "question": "A robe takes 2 bolts?", "answer": "3"}),
        ]),
    );
    let tasks = load_tasks(&source(&path, "")).unwrap();
    assert_eq!(tasks.len(), 2);
    let t = &tasks[0];
    assert_eq!(t.id.as_str(), "gsm8k-0");
    assert_eq!(t.source.as_str(), "gsm8k");
    assert_eq!(t.question.as_str(), "Janet has 16 eggs?");
    assert_eq!(t.answer.as_str(), "18");
    // `meta` is merged with the other columns.
    assert_eq!(
        meta(t),
        json!({"solution": "16 - 3 - 4 = 9; 9 * 2 = 18", "split": "test"})
    );
    assert!(tasks[1].meta.is_empty());
}

#[test]
fn jsonl_with_a_field_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "math.jsonl",
        &jsonl(&[
            json!({"uid": "a1", "problem": "What is 2 + 2?", "gold": "4", "subject": "Algebra", "level": 1}),
            json!({"uid": "a2", "problem": "What is 3 × 3?", "gold": 9, "subject": "Prealgebra", "level": 2}),
        ]),
    );
    let src = source(
        &path,
        "[fields]\nid = \"uid\"\nquestion = \"problem\"\nanswer = \"gold\"\nsource = \"subject\"\n",
    );
    let tasks = load_tasks(&src).unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[0].id.as_str(), "a1");
    assert_eq!(tasks[0].question.as_str(), "What is 2 + 2?");
    assert_eq!(tasks[0].answer.as_str(), "4");
    assert_eq!(tasks[0].source.as_str(), "Algebra");
    assert_eq!(meta(&tasks[0]), json!({"level": 1}));
    // A numeric answer becomes its text.
    assert_eq!(tasks[1].answer.as_str(), "9");
    assert_eq!(tasks[1].source.as_str(), "Prealgebra");
}

#[test]
fn jsonl_defaults_fallbacks_and_missing_ids() {
    let dir = tempfile::tempdir().unwrap();
    // `problem` is a fallback for `question`; no id, no source; a blank line is skipped.
    let path = write(
        dir.path(),
        "train.jsonl",
        "{\"problem\": \"What is 1 + 1?\", \"answer\": 2}\n\n{\"problem\": \"What is 2 + 5?\", \"answer\": \"7\"}\n",
    );
    let tasks = load_tasks(&source(&path, "")).unwrap();
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["train-0", "train-1"]);
    assert!(tasks.iter().all(|t| t.source.as_str() == "train"));
    assert_eq!(tasks[0].answer.as_str(), "2");
    assert_eq!(tasks[1].question.as_str(), "What is 2 + 5?");
}

#[test]
fn jsonl_limit_and_source_override() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = jsonl(
        &(0..5)
            .map(|i| json!({"id": i, "question": format!("q{i}"), "answer": format!("{i}"), "source": "mixed"}))
            .collect::<Vec<_>>(),
    );
    // Past the limit nothing is read, not even a broken line.
    text.push_str("{broken\n");
    let path = write(dir.path(), "five.jsonl", &text);
    let tasks = load_tasks(&source(&path, "limit = 3\nsource = \"arith-l1\"")).unwrap();
    assert_eq!(tasks.len(), 3);
    assert_eq!(tasks[2].id.as_str(), "2");
    assert!(tasks.iter().all(|t| t.source.as_str() == "arith-l1"));
    // The row's own source stays in meta.
    assert_eq!(meta(&tasks[0]), json!({"source": "mixed"}));
    // Without the override, the row's source.
    let tasks = load_tasks(&source(&path, "limit = 1")).unwrap();
    assert_eq!(tasks[0].source.as_str(), "mixed");
}

#[test]
fn skip_leaves_out_the_first_rows_and_limit_counts_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<Value> = (0..5)
        .map(|i| json!({"question": format!("q{i}"), "answer": format!("{i}")}))
        .collect();
    let path = write(dir.path(), "five.jsonl", &jsonl(&rows));
    let tasks = load_tasks(&source(&path, "skip = 2\nlimit = 2")).unwrap();
    let got: Vec<(&str, &str)> = tasks
        .iter()
        .map(|t| (t.id.as_str(), t.question.as_str()))
        .collect();
    // A default id is the row's place in the file: the kept rows of a held-out split do
    // not reuse the ids of the rows before them.
    assert_eq!(got, [("five-2", "q2"), ("five-3", "q3")]);
    let tasks = load_tasks(&source(&path, "skip = 4")).unwrap();
    assert_eq!(tasks.len(), 1);
    let err = load_tasks(&source(&path, "skip = 5")).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: `skip = 5` leaves no rows (the file has 5)",
            path.display()
        )
    );
}

#[test]
fn gzipped_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        fs::File::create(&path).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(jsonl(&[json!({"question": "What is 4 + 4?", "answer": "8"})]).as_bytes())
        .unwrap();
    gz.finish().unwrap();
    let tasks = load_tasks(&source(&path, "")).unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].id.as_str(), "test-0");
    assert_eq!(tasks[0].answer.as_str(), "8");
}

#[test]
fn verl_layout_loads_without_a_mapping() {
    // verl's preprocessed rows: data_source, prompt as chat messages, nested ground truth.
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "gsm8k-verl.jsonl",
        &jsonl(&[json!({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Natalia sold 48 clips. How many?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "72"},
            "extra_info": {"index": 0, "split": "train"}
        })]),
    );
    let tasks = load_tasks(&source(&path, "")).unwrap();
    let t = &tasks[0];
    assert_eq!(t.question.as_str(), "Natalia sold 48 clips. How many?");
    assert_eq!(t.answer.as_str(), "72");
    assert_eq!(t.source.as_str(), "openai/gsm8k");
    assert_eq!(t.id.as_str(), "gsm8k-verl-0");
    let m = meta(t);
    assert_eq!(m["ability"], "math");
    assert_eq!(m["reward_model"]["ground_truth"], "72");
    assert_eq!(m["extra_info"]["split"], "train");
    assert!(m.get("prompt").is_none() && m.get("data_source").is_none());
    // A dotted mapping reaches into nested objects too.
    let tasks = load_tasks(&source(&path, "fields = { id = \"extra_info.index\" }")).unwrap();
    assert_eq!(tasks[0].id.as_str(), "0");
}

/// Writes a Parquet file: `id` INT64, then the UTF-8 string columns given, and an
/// optional group `reward_model { ground_truth }`, all in one snappy row group.
fn write_parquet(
    path: &Path,
    ids: &[i64],
    strings: &[(&str, Vec<&str>)],
    ground_truth: Option<&[&str]>,
) {
    let mut schema = String::from("message row { REQUIRED INT64 id;");
    for (name, _) in strings {
        schema.push_str(&format!(" REQUIRED BYTE_ARRAY {name} (UTF8);"));
    }
    if ground_truth.is_some() {
        schema
            .push_str(" OPTIONAL group reward_model { OPTIONAL BYTE_ARRAY ground_truth (UTF8); }");
    }
    schema.push_str(" }");
    let schema = Arc::new(parse_message_type(&schema).unwrap());
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let mut writer =
        SerializedFileWriter::new(fs::File::create(path).unwrap(), schema, props).unwrap();
    let mut rg = writer.next_row_group().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    col.typed::<Int64Type>()
        .write_batch(ids, None, None)
        .unwrap();
    col.close().unwrap();
    for (_, values) in strings {
        let mut col = rg.next_column().unwrap().unwrap();
        let values: Vec<ByteArray> = values.iter().map(|s| ByteArray::from(*s)).collect();
        col.typed::<ByteArrayType>()
            .write_batch(&values, None, None)
            .unwrap();
        col.close().unwrap();
    }
    if let Some(gt) = ground_truth {
        let mut col = rg.next_column().unwrap().unwrap();
        let values: Vec<ByteArray> = gt.iter().map(|s| ByteArray::from(*s)).collect();
        // Both the group and the leaf are present: definition level 2.
        let def = vec![2i16; values.len()];
        col.typed::<ByteArrayType>()
            .write_batch(&values, Some(&def), None)
            .unwrap();
        col.close().unwrap();
    }
    rg.close().unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_with_our_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("math500.parquet");
    write_parquet(
        &path,
        &[7, 8, 9],
        &[
            (
                "question",
                vec!["What is 6 × 7?", "What is 10 - 3?", "What is 5 + 5?"],
            ),
            ("answer", vec!["42", "7", "10"]),
            ("source", vec!["arith", "arith", "arith"]),
            ("subject", vec!["mul", "sub", "add"]),
        ],
        None,
    );
    let tasks = load_tasks(&source(&path, "")).unwrap();
    assert_eq!(tasks.len(), 3);
    let t = &tasks[0];
    assert_eq!(t.id.as_str(), "7");
    assert_eq!(t.question.as_str(), "What is 6 × 7?");
    assert_eq!(t.answer.as_str(), "42");
    assert_eq!(t.source.as_str(), "arith");
    assert_eq!(meta(t), json!({"subject": "mul"}));
    assert_eq!(tasks[2].answer.as_str(), "10");
}

#[test]
fn parquet_with_a_field_mapping_limit_and_source_override() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("verl.parquet");
    write_parquet(
        &path,
        &[0, 1, 2],
        &[
            (
                "problem",
                vec!["What is 1 + 2?", "What is 2 + 3?", "What is 3 + 4?"],
            ),
            (
                "data_source",
                vec!["openai/gsm8k", "openai/gsm8k", "openai/gsm8k"],
            ),
        ],
        Some(&["3", "5", "7"]),
    );
    // Without a mapping the fallbacks find problem, reward_model.ground_truth, data_source.
    let tasks = load_tasks(&source(&path, "")).unwrap();
    assert_eq!(tasks.len(), 3);
    assert_eq!(tasks[1].question.as_str(), "What is 2 + 3?");
    assert_eq!(tasks[1].answer.as_str(), "5");
    assert_eq!(tasks[1].source.as_str(), "openai/gsm8k");
    // With one, a limit and a source override.
    let src = source(
        &path,
        "limit = 2\nsource = \"gsm8k-verl\"\n[fields]\nquestion = \"problem\"\nanswer = \"reward_model.ground_truth\"\n",
    );
    let tasks = load_tasks(&src).unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[1].id.as_str(), "1");
    assert_eq!(tasks[1].answer.as_str(), "5");
    assert_eq!(tasks[0].source.as_str(), "gsm8k-verl");
    let m = meta(&tasks[0]);
    assert_eq!(m["reward_model"]["ground_truth"], "3");
    assert_eq!(m["data_source"], "openai/gsm8k");
}

#[test]
fn parquet_missing_field_names_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.parquet");
    write_parquet(
        &path,
        &[0, 1],
        &[("text", vec!["a", "b"]), ("answer", vec!["1", "2"])],
        None,
    );
    let err = load_err(&source(&path, "fields = { question = \"problem\" }"));
    assert_eq!(
        err,
        format!(
            "{}: row 0: no field `question` (fields mapping: question -> problem)",
            path.display()
        )
    );
}

#[test]
fn not_a_parquet_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "x.parquet", "{\"question\": \"q\"}\n");
    let err = load_err(&source(&path, ""));
    assert!(
        err.starts_with(&format!("{}: cannot read Parquet: ", path.display())),
        "{err}"
    );
}

#[test]
fn bad_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        "{\"question\": \"q1\", \"answer\": \"1\"}\n{\"question\": \"q2\", \"answer\": \"2\"}\n{\"question\": \"q3\", \"answer\": }\n",
    );
    let err = load_err(&source(&path, ""));
    assert!(
        err.starts_with(&format!(
            "{}:3: not valid JSON: expected value",
            path.display()
        )),
        "{err}"
    );
}

#[test]
fn a_line_that_is_not_an_object() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        "{\"question\": \"q\", \"answer\": \"1\"}\n[1, 2]\n",
    );
    assert_eq!(
        load_err(&source(&path, "")),
        format!(
            "{}:2: expected a JSON object, found a list of 2 items",
            path.display()
        )
    );
}

#[test]
fn missing_field_with_a_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        &jsonl(&[
            json!({"problem": "q1", "answer": "1"}),
            json!({"problem": "q2", "answer": "2"}),
            json!({"question": "q3", "answer": "3"}),
        ]),
    );
    assert_eq!(
        load_err(&source(&path, "fields = { question = \"problem\" }")),
        format!(
            "{}:3: no field `question` (fields mapping: question -> problem)",
            path.display()
        )
    );
}

#[test]
fn missing_field_without_a_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        &jsonl(&[json!({"question": "q1", "gold": "1"})]),
    );
    assert_eq!(
        load_err(&source(&path, "")),
        format!(
            "{}:1: no field `answer` (looked for `answer`, `reward_model.ground_truth`; \
             map another column with fields = {{ answer = \"...\" }})",
            path.display()
        )
    );
    // A null is named as such.
    let path = write(
        dir.path(),
        "y.jsonl",
        &jsonl(&[json!({"question": "q", "answer": null})]),
    );
    assert_eq!(
        load_err(&source(&path, "")),
        format!(
            "{}:1: field `answer` (column `answer`) must be a string or a number, found null",
            path.display()
        )
    );
}

#[test]
fn mapped_id_or_source_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        &jsonl(&[json!({"question": "q", "answer": "1"})]),
    );
    assert_eq!(
        load_err(&source(&path, "fields = { id = \"uid\" }")),
        format!(
            "{}:1: no field `id` (fields mapping: id -> uid)",
            path.display()
        )
    );
    assert_eq!(
        load_err(&source(&path, "fields = { source = \"ds\" }")),
        format!(
            "{}:1: no field `source` (fields mapping: source -> ds)",
            path.display()
        )
    );
    // An override makes a mapped source column optional.
    let tasks = load_tasks(&source(
        &path,
        "source = \"s\"\nfields = { source = \"ds\" }",
    ))
    .unwrap();
    assert_eq!(tasks[0].source.as_str(), "s");
}

#[test]
fn wrong_types() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            json!({"question": 5, "answer": "1"}),
            "",
            "field `question` (column `question`) must be a string (or a list of chat messages with a user message), found a number (5)",
        ),
        (
            json!({"question": [{"role": "system", "content": "hi"}], "answer": "1"}),
            "",
            "field `question` (column `question`) must be a string (or a list of chat messages with a user message), found a list of 1 items",
        ),
        (
            json!({"question": "q", "answer": ["1", "2"]}),
            "",
            "field `answer` (column `answer`) must be a string or a number, found a list of 2 items",
        ),
        (
            json!({"question": "q", "gold": {"x": 1}}),
            "fields = { answer = \"gold\" }",
            "field `answer` (column `gold`) must be a string or a number, found an object",
        ),
        (
            json!({"id": true, "question": "q", "answer": "1"}),
            "",
            "field `id` (column `id`) must be a string or a number, found a boolean (true)",
        ),
        (
            json!({"question": "q", "answer": "1", "source": 3}),
            "",
            "field `source` (column `source`) must be a string, found a number (3)",
        ),
    ];
    for (i, (row, extra, want)) in cases.into_iter().enumerate() {
        let path = write(dir.path(), &format!("case{i}.jsonl"), &jsonl(&[row]));
        assert_eq!(
            load_err(&source(&path, extra)),
            format!("{}:1: {want}", path.display())
        );
    }
}

#[test]
fn duplicate_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        &jsonl(&[
            json!({"id": "a", "question": "q1", "answer": "1"}),
            json!({"id": "b", "question": "q2", "answer": "2"}),
            json!({"id": "a", "question": "q3", "answer": "3"}),
        ]),
    );
    let p = path.display();
    assert_eq!(
        load_err(&source(&path, "")),
        format!("{p}:3: duplicate id `a` (first seen at {p}:1)")
    );
}

#[test]
fn unknown_mapping_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        &jsonl(&[json!({"question": "q", "answer": "1"})]),
    );
    assert_eq!(
        load_err(&source(&path, "fields = { solution = \"sol\" }")),
        "fields mapping: unknown field `solution` (known: id, question, answer, source; other columns go to meta)"
    );
}

#[test]
fn unknown_extension_missing_file_and_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write(dir.path(), "x.csv", "question,answer\nq,1\n");
    assert_eq!(
        load_err(&source(&csv, "")),
        format!(
            "{}: unknown data format (expected .jsonl, .ndjson, .json (JSON lines), one of those with .gz, or .parquet)",
            csv.display()
        )
    );
    let missing = dir.path().join("nope.jsonl");
    let err = load_err(&source(&missing, ""));
    assert!(
        err.starts_with(&format!("{}: No such file or directory", missing.display())),
        "{err}"
    );
    let empty = write(dir.path(), "empty.jsonl", "\n\n");
    assert_eq!(
        load_err(&source(&empty, "")),
        format!("{}: no rows", empty.display())
    );
    // With limit = 0 an empty result is what was asked for.
    assert!(load_tasks(&source(&empty, "limit = 0")).unwrap().is_empty());
}

#[test]
fn errors_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "x.jsonl",
        "{\"question\": 1, \"answer\": \"1\"}\n",
    );
    assert!(matches!(
        load_tasks(&source(&path, "")),
        Err(DataError::WrongType {
            field: "question",
            ..
        })
    ));
}

#[test]
fn a_byte_order_mark_is_skipped_and_bad_utf8_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bom.jsonl");
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(br#"{"id": "a", "question": "1+1?", "answer": "2"}"#);
    bytes.extend_from_slice(b"\n\n");
    bytes.extend_from_slice(br#"{"id": "b", "question": "caf"#);
    bytes.extend_from_slice(b"\xE9\"");
    bytes.extend_from_slice(br#", "answer": "3"}"#);
    bytes.push(b'\n');
    fs::write(&path, &bytes).unwrap();
    // Only the first row: the mark is not part of the data.
    let first = load_tasks(&source(&path, "limit = 1")).unwrap();
    assert_eq!(first[0].id, "a");
    assert_eq!(
        load_err(&source(&path, "")),
        format!(
            "{}:3: not valid UTF-8 (from byte 29 of the line): save the file as UTF-8",
            path.display()
        )
    );
}

#[test]
fn an_empty_gold_answer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "empty.jsonl",
        &jsonl(&[
            json!({"id": "a", "question": "q", "answer": "1"}),
            json!({"id": "b", "question": "q", "answer": "  "}),
        ]),
    );
    assert_eq!(
        load_err(&source(&path, "")),
        format!(
            "{}:2: field `answer` (column `answer`) is empty: a task needs a gold answer to be scored against",
            path.display()
        )
    );
}
