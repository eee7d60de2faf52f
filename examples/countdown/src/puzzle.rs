//! One Countdown task: the numbers, the target, and the rule that an expression uses
//! each number at most once.
//!
//! A task names its puzzle in `meta` (`{"numbers": [3, 5, 8, 25], "target": 48}`, as the
//! data file does) or, failing that, in its question: the whole numbers before the word
//! `target` are the numbers, the first one after it is the target
//! (`Use 3, 5, 8 and 25 to reach the target 48.`).

use crate::{
    expr::{self, ExprError},
    rational::Rational,
};
use drmas_plugin_api::{serde_json::Value, Task};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Puzzle {
    pub numbers: Vec<u64>,
    pub target: u64,
}

/// What is wrong with an expression offered as a solution (or a calculation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mistake {
    Expr(ExprError),
    NotAllowed {
        number: u64,
        numbers: String,
    },
    TooOften {
        number: u64,
        used: usize,
        given: usize,
    },
}

impl fmt::Display for Mistake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mistake::Expr(e) => write!(f, "{e}"),
            Mistake::NotAllowed { number, numbers } => {
                write!(f, "{number} is not one of the numbers ({numbers})")
            }
            Mistake::TooOften {
                number,
                used,
                given,
            } => write!(f, "{number} is used {used} times but given {given}"),
        }
    }
}

impl Puzzle {
    /// The puzzle of `task`, from its `meta` or else its question.
    pub fn from_task(task: &Task) -> Result<Self, String> {
        let has_meta = task.meta.contains_key("numbers") || task.meta.contains_key("target");
        if has_meta {
            return Self::from_meta(task).map_err(|e| format!("task `{}`: {e}", task.id));
        }
        Self::from_question(&task.question).ok_or_else(|| {
            format!(
                "task `{}` has no `numbers` and `target` in its meta, and its question names no \
                 numbers before a `target` and none after it: {:?}",
                task.id, task.question
            )
        })
    }

    fn from_meta(task: &Task) -> Result<Self, String> {
        let whole = |v: &Value| v.as_u64();
        let numbers = match task.meta.get("numbers") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    whole(v).ok_or_else(|| format!("meta.numbers holds {v}, not a whole number"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(format!(
                    "meta.numbers is {other}, not a list of whole numbers"
                ))
            }
            None => return Err("meta has `target` but no `numbers`".into()),
        };
        let target = match task.meta.get("target") {
            Some(v) => whole(v).ok_or_else(|| format!("meta.target is {v}, not a whole number"))?,
            None => return Err("meta has `numbers` but no `target`".into()),
        };
        if numbers.is_empty() {
            return Err("meta.numbers is empty".into());
        }
        Ok(Self { numbers, target })
    }

    fn from_question(question: &str) -> Option<Self> {
        let lower = question.to_lowercase();
        let (before, after) = lower.split_once("target")?;
        let numbers = whole_numbers(before);
        let target = *whole_numbers(after).first()?;
        (!numbers.is_empty()).then_some(Self { numbers, target })
    }

    /// Writes the puzzle into the task's `meta`, so later components read it from there.
    pub fn write_meta(&self, task: &mut Task) {
        task.meta
            .insert("numbers".into(), self.numbers.clone().into());
        task.meta.insert("target".into(), self.target.into());
    }

    /// `3, 5, 8, 25`.
    pub fn numbers_text(&self) -> String {
        let text: Vec<String> = self.numbers.iter().map(u64::to_string).collect();
        text.join(", ")
    }

    /// Parses `text`, checks that it only uses the puzzle's numbers, each at most as
    /// often as given, and computes its value.
    pub fn evaluate(&self, text: &str) -> Result<Rational, Mistake> {
        let expr = expr::parse(text).map_err(Mistake::Expr)?;
        self.check_numbers(&expr.numbers())?;
        expr.value().map_err(Mistake::Expr)
    }

    pub fn is_target(&self, value: Rational) -> bool {
        value == Rational::integer(i128::from(self.target))
    }

    /// Whether `text` is a valid expression that reaches the target (for tests: the
    /// reward needs the value too).
    #[cfg(test)]
    pub fn solves(&self, text: &str) -> bool {
        matches!(self.evaluate(text), Ok(v) if self.is_target(v))
    }

    fn check_numbers(&self, used: &[u64]) -> Result<(), Mistake> {
        let count = |list: &[u64], n: u64| list.iter().filter(|&&x| x == n).count();
        // Reported in the order written, so the message names the first offender.
        for &n in used {
            let given = count(&self.numbers, n);
            if given == 0 {
                return Err(Mistake::NotAllowed {
                    number: n,
                    numbers: self.numbers_text(),
                });
            }
            let used_n = count(used, n);
            if used_n > given {
                return Err(Mistake::TooOften {
                    number: n,
                    used: used_n,
                    given,
                });
            }
        }
        Ok(())
    }
}

/// The whole numbers written in `text`, in order.
fn whole_numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn puzzle() -> Puzzle {
        Puzzle {
            numbers: vec![3, 5, 8, 25, 3],
            target: 48,
        }
    }

    #[test]
    fn each_number_is_used_at_most_as_often_as_given() {
        let p = puzzle();
        assert!(p.solves("(25 - 8) * 3 - 3"));
        assert!(!p.solves("5 * 8 + 3 + 3"));
        assert_eq!(
            p.evaluate("7 * 7").unwrap_err().to_string(),
            "7 is not one of the numbers (3, 5, 8, 25, 3)"
        );
        assert_eq!(
            p.evaluate("8 * 5 + 8").unwrap_err().to_string(),
            "8 is used 2 times but given 1"
        );
        // Not every number has to be used.
        assert_eq!(p.evaluate("25 + 3").unwrap().to_string(), "28");
        assert!(!p.solves("25 + 3"));
        assert!(!p.solves("25 +"));
    }

    #[test]
    fn the_puzzle_comes_from_meta_or_else_from_the_question() {
        let mut task = Task {
            id: "t1".into(),
            question: "Use 1 and 2 to reach the target 3.".into(),
            ..Task::default()
        };
        assert_eq!(
            Puzzle::from_task(&task).unwrap(),
            Puzzle {
                numbers: vec![1, 2],
                target: 3
            }
        );
        puzzle().write_meta(&mut task);
        assert_eq!(Puzzle::from_task(&task).unwrap(), puzzle());

        task.meta.insert("numbers".into(), "3 5".into());
        assert_eq!(
            Puzzle::from_task(&task).unwrap_err(),
            "task `t1`: meta.numbers is \"3 5\", not a list of whole numbers"
        );
        task.meta.insert("numbers".into(), vec![3, 5].into());
        task.meta.insert("target".into(), "many".into());
        assert_eq!(
            Puzzle::from_task(&task).unwrap_err(),
            "task `t1`: meta.target is \"many\", not a whole number"
        );
        let none = Task {
            id: "t2".into(),
            question: "What is 2 + 2?".into(),
            ..Task::default()
        };
        assert_eq!(
            Puzzle::from_task(&none).unwrap_err(),
            "task `t2` has no `numbers` and `target` in its meta, and its question names no \
             numbers before a `target` and none after it: \"What is 2 + 2?\""
        );
    }
}
