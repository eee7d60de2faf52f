//! The generator of `data/val.jsonl` (tests only): solvable puzzles from a fixed seed.
//! The test below checks the committed file is exactly what it makes, and that every
//! puzzle's solution solves it; `COUNTDOWN_WRITE_DATA=1 cargo test` rewrites the file.

use crate::puzzle::Puzzle;
use serde::Serialize;

#[derive(Serialize)]
struct Row {
    id: String,
    source: &'static str,
    question: String,
    answer: String,
    meta: Meta,
}

#[derive(Serialize)]
struct Meta {
    numbers: Vec<u64>,
    target: u64,
    /// One expression that reaches the target (others may exist).
    solution: String,
}

/// splitmix64: a few lines, the same numbers on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One puzzle: four numbers (one large one half the time) folded left to right with
/// random operations that keep every intermediate value a positive whole number.
fn puzzle(rng: &mut Rng) -> Option<(Puzzle, String)> {
    let mut numbers: Vec<u64> = (0..4).map(|_| 1 + rng.below(10)).collect();
    if rng.below(2) == 0 {
        numbers[0] = [25, 50, 75, 100][rng.below(4) as usize];
    }
    let (mut value, mut solution) = (numbers[0], numbers[0].to_string());
    let mut additive = false;
    for &n in &numbers[1..] {
        let (v, op) = match rng.below(4) {
            0 => (value + n, '+'),
            1 if value > n => (value - n, '-'),
            2 if n > 1 => (value * n, '*'),
            3 if n > 1 && value % n == 0 => (value / n, '/'),
            _ => (value + n, '+'),
        };
        // Operators group to the left, so only a sum times or over something needs
        // parentheses.
        let multiplicative = matches!(op, '*' | '/');
        if multiplicative && additive {
            solution = format!("({solution})");
        }
        solution = format!("{solution} {op} {n}");
        value = v;
        additive = !multiplicative;
    }
    let fits = (10..=999).contains(&value) && !numbers.contains(&value);
    fits.then_some((
        Puzzle {
            numbers,
            target: value,
        },
        solution,
    ))
}

fn jsonl(count: usize, seed: u64) -> String {
    let mut rng = Rng(seed);
    let mut out = String::new();
    let mut made = 0;
    while made < count {
        let Some((p, solution)) = puzzle(&mut rng) else {
            continue;
        };
        let numbers = p.numbers_text();
        let row = Row {
            id: format!("countdown-{made:02}"),
            source: "countdown",
            question: format!("Use {numbers} to reach the target {}.", p.target),
            answer: p.target.to_string(),
            meta: Meta {
                numbers: p.numbers,
                target: p.target,
                solution,
            },
        };
        out.push_str(&drmas_plugin_api::serde_json::to_string(&row).unwrap());
        out.push('\n');
        made += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::{serde_json, Task};

    const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/val.jsonl");

    #[test]
    fn committed_tasks_are_the_generated_ones_and_each_solution_solves_its_task() {
        let made = jsonl(20, 2024);
        if std::env::var_os("COUNTDOWN_WRITE_DATA").is_some() {
            // Whole or not at all: a temporary beside the file, synced, renamed over it.
            let tmp = format!("{FILE}.tmp");
            let mut f = std::fs::File::create(&tmp).unwrap();
            std::io::Write::write_all(&mut f, made.as_bytes()).unwrap();
            f.sync_all().unwrap();
            std::fs::rename(&tmp, FILE).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(FILE).unwrap(),
            made,
            "rerun with COUNTDOWN_WRITE_DATA=1"
        );
        for line in made.lines() {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let task = Task {
                question: row["question"].as_str().unwrap().into(),
                ..Task::default()
            };
            // The question alone names the puzzle, as `meta` does.
            let p = Puzzle::from_task(&task).unwrap();
            assert_eq!(serde_json::json!(p.numbers), row["meta"]["numbers"]);
            assert_eq!(p.target, row["meta"]["target"]);
            assert!(
                p.solves(row["meta"]["solution"].as_str().unwrap()),
                "{line}"
            );
        }
    }
}
