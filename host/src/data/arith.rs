//! Synthetic arithmetic with difficulty levels, so that small models get a learning
//! signal (SmolLM2-135M solves 0/64 GSM8K problems, about 11 % of one-digit sums).
//!
//! A level fixes the digits, the operations and the style (a bare expression, "What is
//! 3 + 4?", or a word problem from templates). Answers are non-negative integers, as
//! text. Generation is deterministic: its own PRNG (SplitMix64), so the same seed gives
//! the same file on every platform and every version of `rand`.
//!
//! Train and test never share a question: each question belongs to one split by a hash
//! of its text and the seed (a fifth of all questions are test questions), and each
//! split samples with its own stream. Within a split questions are distinct while the
//! level has enough of them. When a small level runs out (100 one-digit sums, a fifth of
//! them test questions), the training split repeats questions to reach the count asked
//! for and the test split stops: it then holds every test question of the level once.

use super::{DataError, Record};
use serde_json::{Map, json};
use std::collections::HashSet;

/// One difficulty level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    pub level: u32,
    pub summary: &'static str,
}

/// All levels, easiest first.
pub const LEVELS: [Level; 8] = [
    Level {
        level: 1,
        summary: "one-digit a + b",
    },
    Level {
        level: 2,
        summary: "two-digit a + b",
    },
    Level {
        level: 3,
        summary: "one-digit a × b",
    },
    Level {
        level: 4,
        summary: "two-digit a + b - c",
    },
    Level {
        level: 5,
        summary: "two-digit a × b",
    },
    Level {
        level: 6,
        summary: "word problems, 1-2 steps (+, -, ×)",
    },
    Level {
        level: 7,
        summary: "one-digit a + b × c (precedence)",
    },
    Level {
        level: 8,
        summary: "three-digit a + b - c",
    },
];

/// The level numbered `n`.
pub fn level(n: u32) -> Result<Level, DataError> {
    LEVELS
        .iter()
        .copied()
        .find(|l| l.level == n)
        .ok_or_else(|| {
            DataError::Arith(format!(
                "unknown arithmetic level {n} (levels are 1..={})",
                LEVELS.len()
            ))
        })
}

/// Train or test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    Test,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }
}

/// The data source name of a level: `arith-l3`.
pub fn source_name(level: u32) -> String {
    format!("arith-l{level}")
}

/// `count` problems of `level` for `split` (fewer for a test split of a small level:
/// all its test questions). Ids are `arith-l<level>-<split>-<i>`; meta
/// has `level`, `expression` (the arithmetic the answer comes from, `×` for times) and
/// `steps`, and for word problems `template`.
pub fn generate(
    level_no: u32,
    split: Split,
    count: usize,
    seed: u64,
) -> Result<Vec<Record>, DataError> {
    let lvl = level(level_no)?;
    let split_tag = match split {
        Split::Train => 1,
        Split::Test => 2,
    };
    let mut rng = Rng::new(mix(&[seed, u64::from(lvl.level), split_tag]));
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(count);
    // In-split draws that repeated a question, in a row, before the level counts as
    // exhausted: train then repeats questions, test stops.
    let max_repeats: u32 = match split {
        Split::Train => 64,
        Split::Test => 4096,
    };
    const MAX_DRAWS: u64 = 10_000_000;
    let mut draws = 0u64;
    'rows: while out.len() < count {
        let mut repeats = 0;
        let p = loop {
            draws += 1;
            if draws > MAX_DRAWS {
                return Err(DataError::Arith(format!(
                    "level {}: found no new {} question in {MAX_DRAWS} draws",
                    lvl.level,
                    split.as_str()
                )));
            }
            let p = draw(lvl.level, &mut rng);
            if split_of(&p.question, seed) != split {
                continue;
            }
            if !seen.contains(&p.question) {
                break p;
            }
            repeats += 1;
            if repeats >= max_repeats {
                match split {
                    Split::Train => break p,
                    Split::Test => break 'rows,
                }
            }
        };
        seen.insert(p.question.clone());
        let mut meta = Map::new();
        meta.insert("level".into(), json!(lvl.level));
        meta.insert("expression".into(), json!(p.expression));
        meta.insert("steps".into(), json!(p.steps));
        if let Some(t) = p.template {
            meta.insert("template".into(), json!(t));
        }
        out.push(Record {
            id: format!(
                "{}-{}-{}",
                source_name(lvl.level),
                split.as_str(),
                out.len()
            ),
            source: source_name(lvl.level),
            question: p.question,
            answer: p.answer.to_string(),
            meta,
        });
    }
    Ok(out)
}

/// Which split a question belongs to, for a seed.
pub fn split_of(question: &str, seed: u64) -> Split {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in question.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    if splitmix(h).is_multiple_of(5) {
        Split::Test
    } else {
        Split::Train
    }
}

/// One generated problem.
struct Problem {
    question: String,
    expression: String,
    answer: i64,
    steps: u32,
    template: Option<u32>,
}

fn expr_problem(expression: String, answer: i64, steps: u32) -> Problem {
    Problem {
        question: format!("What is {expression}?"),
        expression,
        answer,
        steps,
        template: None,
    }
}

fn draw(level: u32, r: &mut Rng) -> Problem {
    match level {
        1 => {
            let (a, b) = (r.range(0, 9), r.range(0, 9));
            expr_problem(format!("{a} + {b}"), a + b, 1)
        }
        2 => {
            let (a, b) = (r.range(10, 99), r.range(10, 99));
            expr_problem(format!("{a} + {b}"), a + b, 1)
        }
        3 => {
            let (a, b) = (r.range(1, 9), r.range(1, 9));
            expr_problem(format!("{a} × {b}"), a * b, 1)
        }
        4 => {
            let (a, b) = (r.range(10, 99), r.range(10, 99));
            let c = r.range(10, 99.min(a + b));
            expr_problem(format!("{a} + {b} - {c}"), a + b - c, 2)
        }
        5 => {
            let (a, b) = (r.range(10, 99), r.range(10, 99));
            expr_problem(format!("{a} × {b}"), a * b, 1)
        }
        6 => word_problem(r),
        7 => {
            let (a, b, c) = (r.range(1, 9), r.range(1, 9), r.range(1, 9));
            expr_problem(format!("{a} + {b} × {c}"), a + b * c, 2)
        }
        8 => {
            let (a, b) = (r.range(100, 999), r.range(100, 999));
            let c = r.range(100, 999.min(a + b));
            expr_problem(format!("{a} + {b} - {c}"), a + b - c, 2)
        }
        _ => unreachable!("levels are checked before drawing"),
    }
}

const NAMES: [&str; 12] = [
    "Tom", "Anna", "Maria", "Sam", "Lily", "Ben", "Mia", "Leo", "Zoe", "Omar", "Priya", "Ken",
];
const ITEMS: [&str; 10] = [
    "apples", "pencils", "marbles", "stickers", "cookies", "books", "cards", "shells", "balloons",
    "coins",
];
/// The number of word-problem templates.
pub const TEMPLATES: u32 = 8;

fn word_problem(r: &mut Rng) -> Problem {
    let n = NAMES[r.index(NAMES.len())];
    let m = loop {
        let m = NAMES[r.index(NAMES.len())];
        if m != n {
            break m;
        }
    };
    let it = ITEMS[r.index(ITEMS.len())];
    let t = r.index(TEMPLATES as usize) as u32;
    let (question, expression, answer, steps) = match t {
        0 => {
            let (a, b) = (r.range(2, 20), r.range(2, 20));
            (
                format!("{n} has {a} {it}. {n} buys {b} more. How many {it} does {n} have now?"),
                format!("{a} + {b}"),
                a + b,
                1,
            )
        }
        1 => {
            let a = r.range(5, 30);
            let b = r.range(1, a - 1);
            (
                format!(
                    "{n} has {a} {it} and gives {b} of them to {m}. How many {it} does {n} have left?"
                ),
                format!("{a} - {b}"),
                a - b,
                1,
            )
        }
        2 => {
            let (a, b) = (r.range(2, 9), r.range(2, 9));
            (
                format!(
                    "{n} buys {a} bags of {it}. Each bag holds {b} {it}. How many {it} does {n} buy?"
                ),
                format!("{a} × {b}"),
                a * b,
                1,
            )
        }
        3 => {
            let (a, b) = (r.range(2, 20), r.range(2, 20));
            let c = r.range(1, a + b);
            (
                format!(
                    "{n} has {a} {it}, buys {b} more, and then gives {c} to {m}. How many {it} does {n} have now?"
                ),
                format!("{a} + {b} - {c}"),
                a + b - c,
                2,
            )
        }
        4 => {
            let (a, b, c) = (r.range(2, 9), r.range(2, 9), r.range(1, 20));
            (
                format!(
                    "{n} has {a} boxes with {b} {it} in each box, and {c} more {it} on the table. How many {it} does {n} have in all?"
                ),
                format!("{a} × {b} + {c}"),
                a * b + c,
                2,
            )
        }
        5 => {
            let (a, b) = (r.range(2, 9), r.range(2, 9));
            let c = r.range(1, a * b - 1);
            (
                format!(
                    "A room has {a} rows of {b} chairs. {c} of the chairs are taken. How many chairs are free?"
                ),
                format!("{a} × {b} - {c}"),
                a * b - c,
                2,
            )
        }
        6 => {
            let (a, b) = (r.range(2, 20), r.range(1, 10));
            (
                format!(
                    "{n} has {a} {it}. {m} has {b} more {it} than {n}. How many {it} do they have together?"
                ),
                format!("{a} + ({a} + {b})"),
                a + (a + b),
                2,
            )
        }
        _ => {
            let a = r.range(2, 20);
            let b = r.range(a + 1, a + 15);
            (
                format!(
                    "{n} had {a} {it}. After {m} gave {n} some more, {n} has {b} {it}. How many {it} did {m} give {n}?"
                ),
                format!("{b} - {a}"),
                b - a,
                1,
            )
        }
    };
    Problem {
        question,
        expression,
        answer,
        steps,
        template: Some(t),
    }
}

/// SplitMix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.0)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        debug_assert!(lo <= hi);
        let span = (hi - lo + 1) as u64;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as i64
    }

    fn index(&mut self, n: usize) -> usize {
        self.range(0, n as i64 - 1) as usize
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn mix(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x243f_6a88_85a3_08d3, |h, &p| splitmix(h ^ splitmix(p)))
}
