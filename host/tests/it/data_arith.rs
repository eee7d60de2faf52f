//! The synthetic arithmetic generator and the arithmetic part of `drmas data prepare`.

use drmas::data::{
    Record,
    arith::{self, LEVELS, Split, generate},
    load_tasks,
    prepare::{ArithOptions, Outcome, PrepareOptions, arith_files, prepare},
    to_jsonl,
};
use std::{collections::HashSet, fs, path::Path};

/// Evaluates `+`, `-`, `×` (and `*`) with the usual precedence, and parentheses.
fn eval(expr: &str) -> i64 {
    fn tokens(s: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut num = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() {
                num.push(c);
                continue;
            }
            if !num.is_empty() {
                out.push(std::mem::take(&mut num));
            }
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
        }
        if !num.is_empty() {
            out.push(num);
        }
        out
    }
    fn sum(t: &[String], i: &mut usize) -> i64 {
        let mut v = product(t, i);
        while *i < t.len() && (t[*i] == "+" || t[*i] == "-") {
            let op = t[*i].clone();
            *i += 1;
            let r = product(t, i);
            v = if op == "+" { v + r } else { v - r };
        }
        v
    }
    fn product(t: &[String], i: &mut usize) -> i64 {
        let mut v = atom(t, i);
        while *i < t.len() && (t[*i] == "×" || t[*i] == "*") {
            *i += 1;
            v *= atom(t, i);
        }
        v
    }
    fn atom(t: &[String], i: &mut usize) -> i64 {
        if t[*i] == "(" {
            *i += 1;
            let v = sum(t, i);
            assert_eq!(t[*i], ")");
            *i += 1;
            v
        } else {
            let v = t[*i]
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {}", t[*i]));
            *i += 1;
            v
        }
    }
    let t = tokens(expr);
    let mut i = 0;
    let v = sum(&t, &mut i);
    assert_eq!(i, t.len(), "trailing tokens in {expr}");
    v
}

fn numbers(s: &str) -> Vec<i64> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect()
}

fn all_levels(split: Split, count: usize, seed: u64) -> Vec<(u32, Vec<Record>)> {
    LEVELS
        .iter()
        .map(|l| (l.level, generate(l.level, split, count, seed).unwrap()))
        .collect()
}

#[test]
fn same_seed_same_rows_other_seed_other_rows() {
    for l in LEVELS {
        let a = generate(l.level, Split::Train, 300, 7).unwrap();
        let b = generate(l.level, Split::Train, 300, 7).unwrap();
        assert_eq!(to_jsonl(&a), to_jsonl(&b), "level {}", l.level);
        let c = generate(l.level, Split::Train, 300, 8).unwrap();
        assert_ne!(to_jsonl(&a), to_jsonl(&c), "level {}", l.level);
        // A shorter run is a prefix of a longer one.
        let short = generate(l.level, Split::Train, 100, 7).unwrap();
        assert_eq!(short[..], a[..100]);
    }
}

#[test]
fn the_generator_is_pinned() {
    // Golden rows: a change here changes every prepared arithmetic file.
    let r = &generate(2, Split::Test, 1, 0).unwrap()[0];
    assert_eq!(
        (r.id.as_str(), r.question.as_str(), r.answer.as_str()),
        GOLDEN_L2
    );
    let r = &generate(6, Split::Train, 1, 0).unwrap()[0];
    assert_eq!(
        (r.id.as_str(), r.question.as_str(), r.answer.as_str()),
        GOLDEN_L6
    );
}

const GOLDEN_L2: (&str, &str, &str) = ("arith-l2-test-0", "What is 42 + 33?", "75");
const GOLDEN_L6: (&str, &str, &str) = (
    "arith-l6-train-0",
    "Sam has 4 shells. Priya has 6 more shells than Sam. How many shells do they have together?",
    "14",
);

#[test]
fn answers_are_right() {
    for split in [Split::Train, Split::Test] {
        for (level, rows) in all_levels(split, 500, 3) {
            for r in &rows {
                let expr = r.meta["expression"].as_str().unwrap();
                let want = eval(expr);
                assert!(want >= 0, "{}: negative answer", r.question);
                assert_eq!(r.answer, want.to_string(), "{}", r.question);
                assert_eq!(r.meta["level"], level);
                assert_eq!(r.source, format!("arith-l{level}"));
                if level == 6 {
                    // Word problems: every number of the arithmetic is in the text.
                    let in_text: HashSet<i64> = numbers(&r.question).into_iter().collect();
                    for n in numbers(expr) {
                        assert!(in_text.contains(&n), "{n} of {expr} not in {}", r.question);
                    }
                    let steps = r.meta["steps"].as_u64().unwrap();
                    assert!((1..=2).contains(&steps));
                } else {
                    // Expression levels: the question is the expression.
                    assert_eq!(r.question, format!("What is {expr}?"));
                    assert_eq!(
                        eval(
                            r.question
                                .trim_start_matches("What is ")
                                .trim_end_matches('?')
                        ),
                        want
                    );
                }
            }
        }
    }
}

#[test]
fn levels_differ() {
    let rows = all_levels(Split::Train, 300, 1);
    let spec = |level: u32| -> (usize, &'static [&'static str]) {
        match level {
            1 => (1, &["+"]),
            2 => (2, &["+"]),
            3 => (1, &["×"]),
            4 => (2, &["+", "-"]),
            5 => (2, &["×"]),
            7 => (1, &["+", "×"]),
            8 => (3, &["+", "-"]),
            _ => unreachable!(),
        }
    };
    for (level, rs) in &rows {
        if *level == 6 {
            assert!(rs.iter().all(|r| !r.question.starts_with("What is")));
            let templates: HashSet<u64> = rs
                .iter()
                .map(|r| r.meta["template"].as_u64().unwrap())
                .collect();
            assert_eq!(templates.len(), arith::TEMPLATES as usize);
            continue;
        }
        let (digits, ops) = spec(*level);
        for r in rs {
            let expr = r.meta["expression"].as_str().unwrap();
            let parts: Vec<&str> = expr.split(' ').collect();
            let found_ops: Vec<&str> = parts.iter().skip(1).step_by(2).copied().collect();
            assert_eq!(found_ops, ops, "level {level}: {expr}");
            for n in parts.iter().step_by(2) {
                assert!(n.len() <= digits, "level {level}: {expr}");
            }
            // Each level uses its widest operands somewhere.
        }
        assert!(
            rs.iter().any(|r| numbers(&r.question)
                .iter()
                .any(|n| n.to_string().len() == digits)),
            "level {level}"
        );
    }
    // No question is shared between two levels.
    let mut seen = HashSet::new();
    for (level, rs) in &rows {
        let qs: HashSet<&str> = rs.iter().map(|r| r.question.as_str()).collect();
        for q in qs {
            assert!(seen.insert(q.to_string()), "level {level} repeats {q}");
        }
    }
}

#[test]
fn train_and_test_never_share_a_question() {
    for l in LEVELS {
        let train = generate(l.level, Split::Train, 2000, 0).unwrap();
        let test = generate(l.level, Split::Test, 200, 0).unwrap();
        let train_q: HashSet<&str> = train.iter().map(|r| r.question.as_str()).collect();
        let test_q: HashSet<&str> = test.iter().map(|r| r.question.as_str()).collect();
        assert!(train_q.is_disjoint(&test_q), "level {}", l.level);
        // Test questions never repeat; ids are unique.
        assert_eq!(test_q.len(), test.len(), "level {}", l.level);
        let ids: HashSet<&str> = train.iter().chain(&test).map(|r| r.id.as_str()).collect();
        assert_eq!(ids.len(), train.len() + test.len());
        assert_eq!(train.len(), 2000);
        assert_eq!(train[0].id, format!("arith-l{}-train-0", l.level));
    }
}

#[test]
fn small_levels_are_covered_whole() {
    // One-digit sums: 100 questions. Train repeats to reach its count, test holds every
    // remaining question once, and together they are all 100.
    let train = generate(1, Split::Train, 2000, 0).unwrap();
    let test = generate(1, Split::Test, 200, 0).unwrap();
    let train_q: HashSet<&str> = train.iter().map(|r| r.question.as_str()).collect();
    let test_q: HashSet<&str> = test.iter().map(|r| r.question.as_str()).collect();
    assert_eq!(train.len(), 2000);
    assert!(test.len() < 200 && test.len() == test_q.len());
    assert_eq!(train_q.len() + test_q.len(), 100);
    // The big levels have enough distinct questions for both counts.
    let train = generate(5, Split::Train, 2000, 0).unwrap();
    let distinct: HashSet<&str> = train.iter().map(|r| r.question.as_str()).collect();
    assert_eq!(distinct.len(), 2000);
}

#[test]
fn unknown_level() {
    let err = generate(9, Split::Train, 1, 0).unwrap_err().to_string();
    assert_eq!(err, "unknown arithmetic level 9 (levels are 1..=8)");
    let err = generate(0, Split::Train, 1, 0).unwrap_err().to_string();
    assert_eq!(err, "unknown arithmetic level 0 (levels are 1..=8)");
}

fn arith_opts(out: &Path, seed: u64, force: bool) -> PrepareOptions {
    PrepareOptions {
        out_dir: out.to_path_buf(),
        cache_dir: out.join("no-cache"),
        wheel: None,
        download: false,
        force,
        math: false,
        arith: Some(ArithOptions {
            levels: vec![1, 2, 6],
            train: 300,
            test: 40,
            seed,
        }),
    }
}

#[test]
fn prepare_writes_levels_deterministically_and_idempotently() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let reports = prepare(&arith_opts(a.path(), 5, false), &mut |l| {
        log.push(l.to_string())
    })
    .unwrap();
    assert_eq!(reports.len(), 6);
    assert!(reports.iter().all(|r| r.outcome == Outcome::Wrote));
    assert_eq!(log.len(), 3);
    assert!(
        log[1].starts_with("arith level 2 (two-digit a + b): wrote "),
        "{}",
        log[1]
    );
    prepare(&arith_opts(b.path(), 5, false), &mut |_| {}).unwrap();
    for level in [1, 2, 6] {
        for (pa, pb) in arith_files(a.path(), level)
            .iter()
            .zip(arith_files(b.path(), level))
        {
            assert_eq!(
                fs::read(pa).unwrap(),
                fs::read(&pb).unwrap(),
                "{}",
                pa.display()
            );
        }
    }
    // The files load as tasks.
    let [train, test] = arith_files(a.path(), 2);
    let src: drmas::config::DataSource =
        toml::from_str(&format!("path = {:?}", train.display().to_string())).unwrap();
    let tasks = load_tasks(&src).unwrap();
    assert_eq!(tasks.len(), 300);
    assert_eq!(tasks[0].source.as_str(), "arith-l2");
    let m = serde_json::Value::Object(tasks[0].meta.clone());
    assert_eq!(m["level"], 2);
    let test_rows = fs::read_to_string(&test).unwrap().lines().count();
    assert_eq!(test_rows, 40);

    // Again: nothing changes.
    let reports = prepare(&arith_opts(a.path(), 5, false), &mut |_| {}).unwrap();
    assert!(reports.iter().all(|r| r.outcome == Outcome::Kept));
    // --force rewrites the same bytes; another seed rewrites other bytes.
    let before = fs::read(&train).unwrap();
    let reports = prepare(&arith_opts(a.path(), 5, true), &mut |_| {}).unwrap();
    assert!(reports.iter().all(|r| r.outcome == Outcome::Wrote));
    assert_eq!(fs::read(&train).unwrap(), before);
    let reports = prepare(&arith_opts(a.path(), 6, false), &mut |_| {}).unwrap();
    assert!(reports.iter().all(|r| r.outcome == Outcome::Wrote));
    assert_ne!(fs::read(&train).unwrap(), before);
    // No temporary files are left behind.
    let names: Vec<String> = fs::read_dir(train.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn prepare_refuses_an_unknown_level() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = arith_opts(dir.path(), 0, false);
    opts.arith.as_mut().unwrap().levels = vec![2, 12];
    let err = prepare(&opts, &mut |_| {}).unwrap_err().to_string();
    assert_eq!(err, "unknown arithmetic level 12 (levels are 1..=8)");
}
