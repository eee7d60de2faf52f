//! Reads a data set named in an experiment file (`[data] train`/`val`) into tasks.
//!
//! Formats, by extension: `.jsonl`, `.ndjson` or `.json` (one JSON object a line, blank
//! lines skipped), any of those with `.gz`, and `.parquet` (read with the row API; the
//! layout verl users have). Columns map to our fields as `fields` says:
//!
//! | field      | default columns, first present wins                | missing            |
//! |------------|----------------------------------------------------|--------------------|
//! | `id`       | `id`                                               | `<file stem>-<row>`|
//! | `question` | `question`, `problem`, `prompt`                    | error              |
//! | `answer`   | `answer`, `reward_model.ground_truth`              | error              |
//! | `source`   | `source`, `data_source`                            | the file stem      |
//!
//! A mapping (`fields = { question = "problem" }`) replaces the defaults of that field. A
//! column name with dots reaches into nested objects (`reward_model.ground_truth`) unless
//! a column of that exact name exists. A question that is a list of chat messages
//! (`[{role, content}]`, verl's `prompt`) gives the content of its last `user` message.
//! Answers and ids may be strings or numbers; a null counts as absent for `id` and
//! `source` and is an error for the others. `[data] source = ".."` overrides every row's
//! source (the row's own source column then stays in meta). Every other column goes to
//! `Task::meta`; a column `meta` holding an object is merged into it (that is how drmas's
//! own files keep their extras). `skip` leaves out the first rows and `limit` keeps the
//! first of the rest. Ids must be unique in a file.

use super::DataError;
use super::DataSource;
use drmas_plugin_api::Task;
use flate2::read::GzDecoder;
use serde_json::{Map, Value};
use std::{
    collections::{BTreeMap, HashMap},
    fs::File,
    io::{BufRead, BufReader, Read},
    path::Path,
};

/// Our field names, as the `fields` mapping spells them.
pub const FIELDS: [&str; 4] = ["id", "question", "answer", "source"];

const DEFAULT_ID: &[&str] = &["id"];
const DEFAULT_QUESTION: &[&str] = &["question", "problem", "prompt"];
const DEFAULT_ANSWER: &[&str] = &["answer", "reward_model.ground_truth"];
const DEFAULT_SOURCE: &[&str] = &["source", "data_source"];

/// Reads the tasks of `source` (see the module docs for formats and the mapping).
pub fn load_tasks(source: &DataSource) -> Result<Vec<Task>, DataError> {
    let spec = Spec::new(source)?;
    let path = source.path.as_path();
    let limit = source.limit.unwrap_or(usize::MAX);
    let skip = source.skip;
    let mut rows = Rows::new(&spec, limit, skip);
    let mut seen = 0usize;
    each_row(path, |value, at| {
        if rows.full() {
            return Ok(false);
        }
        seen += 1;
        if seen <= skip {
            return Ok(true);
        }
        rows.push(value, at)?;
        Ok(!rows.full())
    })?;
    if rows.tasks.is_empty() && limit > 0 {
        if skip > 0 && seen > 0 {
            return Err(DataError::SkippedAll {
                path: path.to_path_buf(),
                skip,
                rows: seen,
            });
        }
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(rows.tasks)
}

/// The first row of the data file at `path` as the loader reads it (`None` for a file
/// without rows), so `drmas check` can compare a `fields` mapping with the columns the
/// file has.
pub fn first_row(path: &Path) -> Result<Option<Map<String, Value>>, DataError> {
    let mut first = None;
    each_row(path, |value, at| match value {
        Value::Object(row) => {
            first = Some(row);
            Ok(false)
        }
        other => Err(DataError::NotObject {
            at,
            found: kind(&other),
        }),
    })?;
    Ok(first)
}

/// Whether `row` has the column `name` as a mapping reaches it (dots reach into objects).
pub fn has_column(row: &Map<String, Value>, name: &str) -> bool {
    get_path(row, name).is_some()
}

/// A row sink: takes each row and its place (`path:LINE`, `path: row N`); `false` stops.
type RowSink<'a> = dyn FnMut(Value, String) -> Result<bool, DataError> + 'a;

/// Feeds the rows of the file at `path`, in order, to `sink` until it says stop.
fn each_row(
    path: &Path,
    mut sink: impl FnMut(Value, String) -> Result<bool, DataError>,
) -> Result<(), DataError> {
    match Format::of(path)? {
        Format::Jsonl { gz } => read_jsonl(path, gz, &mut sink),
        Format::Parquet => read_parquet(path, &mut sink),
    }
}

enum Format {
    Jsonl { gz: bool },
    Parquet,
}

impl Format {
    fn of(path: &Path) -> Result<Format, DataError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        let (name, gz) = match name.strip_suffix(".gz") {
            Some(inner) => (inner.to_string(), true),
            None => (name, false),
        };
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        match ext {
            "jsonl" | "ndjson" | "json" => Ok(Format::Jsonl { gz }),
            "parquet" | "pq" if !gz => Ok(Format::Parquet),
            _ => Err(DataError::UnknownFormat {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// The file stem without data extensions: `test` for `data/gsm8k/test.jsonl.gz`.
fn stem(path: &Path) -> String {
    let mut name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for ext in [".gz", ".jsonl", ".ndjson", ".json", ".parquet", ".pq"] {
        if name.to_lowercase().ends_with(ext) && name.len() > ext.len() {
            name.truncate(name.len() - ext.len());
        }
    }
    name
}

/// Where to look for one of our fields.
struct Lookup {
    field: &'static str,
    columns: Vec<String>,
    mapped: bool,
}

impl Lookup {
    fn new(field: &'static str, defaults: &[&str], fields: &BTreeMap<String, String>) -> Self {
        match fields.get(field) {
            Some(col) => Lookup {
                field,
                columns: vec![col.clone()],
                mapped: true,
            },
            None => Lookup {
                field,
                columns: defaults.iter().map(|c| c.to_string()).collect(),
                mapped: false,
            },
        }
    }

    /// The first column present (not null), with its value.
    fn find<'a>(&'a self, row: &'a Map<String, Value>) -> Option<(&'a str, &'a Value)> {
        self.columns.iter().find_map(|c| {
            get_path(row, c)
                .filter(|v| !v.is_null())
                .map(|v| (c.as_str(), v))
        })
    }

    /// For the error message: the mapping, or the columns tried.
    fn looked(&self, fields: &BTreeMap<String, String>) -> String {
        if self.mapped {
            let mapping: Vec<String> = fields.iter().map(|(k, v)| format!("{k} -> {v}")).collect();
            format!("fields mapping: {}", mapping.join(", "))
        } else {
            let tried: Vec<String> = self.columns.iter().map(|c| format!("`{c}`")).collect();
            format!(
                "looked for {}; map another column with fields = {{ {} = \"...\" }}",
                tried.join(", "),
                self.field
            )
        }
    }
}

/// `row[name]`, or, when no column has that exact name, the dotted path into objects.
fn get_path<'a>(row: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(v) = row.get(name) {
        return Some(v);
    }
    let mut parts = name.split('.');
    let mut cur = row.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_object()?.get(p)?;
    }
    Some(cur)
}

struct Spec {
    fields: BTreeMap<String, String>,
    id: Lookup,
    question: Lookup,
    answer: Lookup,
    source: Lookup,
    source_override: Option<String>,
    stem: String,
}

impl Spec {
    fn new(src: &DataSource) -> Result<Spec, DataError> {
        if let Some(key) = src.fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(DataError::UnknownMapping { key: key.clone() });
        }
        let f = &src.fields;
        Ok(Spec {
            fields: f.clone(),
            id: Lookup::new("id", DEFAULT_ID, f),
            question: Lookup::new("question", DEFAULT_QUESTION, f),
            answer: Lookup::new("answer", DEFAULT_ANSWER, f),
            source: Lookup::new("source", DEFAULT_SOURCE, f),
            source_override: src.source.clone(),
            stem: stem(&src.path),
        })
    }
}

/// Collects tasks row by row.
struct Rows<'a> {
    spec: &'a Spec,
    limit: usize,
    /// Rows skipped before the first kept one: a default id is the row's place in the
    /// file, not in the kept list.
    offset: usize,
    tasks: Vec<Task>,
    /// id -> where it was first seen.
    seen: HashMap<String, String>,
}

impl<'a> Rows<'a> {
    fn new(spec: &'a Spec, limit: usize, offset: usize) -> Self {
        Rows {
            spec,
            limit,
            offset,
            tasks: Vec::new(),
            seen: HashMap::new(),
        }
    }

    fn full(&self) -> bool {
        self.tasks.len() >= self.limit
    }

    fn push(&mut self, row: Value, at: String) -> Result<(), DataError> {
        let Value::Object(row) = row else {
            return Err(DataError::NotObject {
                at,
                found: kind(&row),
            });
        };
        let index = self.offset + self.tasks.len();
        let task = to_task(self.spec, row, &at, index)?;
        if let Some(first) = self.seen.get(task.id.as_str()) {
            return Err(DataError::DuplicateId {
                at,
                id: task.id.to_string(),
                first: first.clone(),
            });
        }
        self.seen.insert(task.id.to_string(), at);
        self.tasks.push(task);
        Ok(())
    }
}

fn read_jsonl(path: &Path, gz: bool, sink: &mut RowSink) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let reader: Box<dyn Read> = if gz {
        Box::new(GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut reader = BufReader::new(reader);
    let mut bytes = Vec::new();
    for number in 1.. {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes).map_err(io)? == 0 {
            break;
        }
        let at = format!("{}:{number}", path.display());
        // A byte-order mark some editors put first is not part of the data.
        let line = match (number, bytes.strip_prefix(UTF8_BOM)) {
            (1, Some(rest)) => rest,
            _ => &bytes[..],
        };
        let line = std::str::from_utf8(line).map_err(|e| DataError::NotUtf8 {
            at: at.clone(),
            column: e.valid_up_to() + 1,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| DataError::Json {
            at: at.clone(),
            message: e.to_string(),
        })?;
        if !sink(value, at)? {
            break;
        }
    }
    Ok(())
}

/// The UTF-8 byte-order mark (U+FEFF), skipped at the start of a JSONL file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

fn read_parquet(path: &Path, sink: &mut RowSink) -> Result<(), DataError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let pq_err = |e: parquet::errors::ParquetError| DataError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = SerializedFileReader::new(file).map_err(pq_err)?;
    let iter = reader.get_row_iter(None).map_err(pq_err)?;
    for (i, row) in iter.enumerate() {
        let row = row.map_err(pq_err)?;
        if !sink(row.to_json_value(), format!("{}: row {i}", path.display()))? {
            break;
        }
    }
    Ok(())
}

/// A short description of a JSON value's type for messages.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(_) => "a string".into(),
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

fn to_task(
    spec: &Spec,
    mut row: Map<String, Value>,
    at: &str,
    index: usize,
) -> Result<Task, DataError> {
    // Absent, or only present as null (then the message says so).
    let missing = |l: &Lookup| match l.columns.iter().find(|c| get_path(&row, c).is_some()) {
        Some(col) => DataError::WrongType {
            at: at.to_string(),
            field: l.field,
            column: col.clone(),
            expected: expected(l.field),
            found: "null".into(),
        },
        None => DataError::MissingField {
            at: at.to_string(),
            field: l.field,
            looked: l.looked(&spec.fields),
        },
    };
    let wrong = |l: &Lookup, column: &str, v: &Value| DataError::WrongType {
        at: at.to_string(),
        field: l.field,
        column: column.to_string(),
        expected: expected(l.field),
        found: kind(v),
    };
    // Which top-level columns became fields (they stay out of meta).
    let mut used: Vec<String> = Vec::new();

    let question = {
        let l = &spec.question;
        let (col, v) = l.find(&row).ok_or_else(|| missing(l))?;
        used.push(col.to_string());
        question_text(v).ok_or_else(|| wrong(l, col, v))?
    };
    let answer = {
        let l = &spec.answer;
        let (col, v) = l.find(&row).ok_or_else(|| missing(l))?;
        used.push(col.to_string());
        let answer = scalar_text(v).ok_or_else(|| wrong(l, col, v))?;
        if answer.trim().is_empty() {
            // Nothing to grade against: every score of this task would be noise.
            return Err(DataError::EmptyAnswer {
                at: at.to_string(),
                column: col.to_string(),
            });
        }
        answer
    };
    let id = match spec.id.find(&row) {
        Some((col, v)) => {
            used.push(col.to_string());
            scalar_text(v).ok_or_else(|| wrong(&spec.id, col, v))?
        }
        None if spec.id.mapped => return Err(missing(&spec.id)),
        None => format!("{}-{index}", spec.stem),
    };
    // An override wins; the row's own source column then stays in meta.
    let source = match &spec.source_override {
        Some(s) => s.clone(),
        None => match spec.source.find(&row) {
            Some((col, v)) => {
                used.push(col.to_string());
                match v {
                    Value::String(s) => s.clone(),
                    _ => return Err(wrong(&spec.source, col, v)),
                }
            }
            None if spec.source.mapped => return Err(missing(&spec.source)),
            None => spec.stem.clone(),
        },
    };

    for col in &used {
        row.remove(col);
    }
    let mut meta = match row.remove("meta") {
        Some(Value::Object(m)) => m,
        Some(other) => Map::from_iter([("meta".to_string(), other)]),
        None => Map::new(),
    };
    for (k, v) in row {
        meta.entry(k).or_insert(v);
    }
    Ok(Task {
        id,
        source,
        question,
        answer,
        meta,
    })
}

/// What a field's value must be, for messages.
fn expected(field: &str) -> &'static str {
    match field {
        "question" => "a string (or a list of chat messages with a user message)",
        "source" => "a string",
        _ => "a string or a number",
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn question_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(msgs) => msgs.iter().rev().find_map(|m| {
            let m = m.as_object()?;
            (m.get("role")?.as_str()? == "user")
                .then(|| m.get("content")?.as_str().map(str::to_string))
                .flatten()
        }),
        _ => None,
    }
}
