//! Arithmetic expressions over whole numbers: `(25 - 8) * 3`, with `+ - * /`,
//! parentheses, and `×`, `÷` accepted for `*`, `/`. A small recursive-descent parser
//! (no eval crates: the input is a model's output, and only arithmetic is allowed).
//!
//! ```text
//! expr   := term (("+" | "-") term)*
//! term   := factor (("*" | "/") factor)*
//! factor := number | "(" expr ")"
//! ```
//!
//! There is no unary minus: in Countdown every number is used as given.

use crate::rational::{ArithError, Rational};
use std::fmt;

/// Parentheses nested deeper than this are refused, so that a completion of a
/// thousand `(` cannot exhaust the stack.
const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Number(u64),
    Binary(Op, Box<Expr>, Box<Expr>),
}

/// Why an expression could not be read or computed. Positions are character offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprError {
    Empty,
    Unexpected {
        found: char,
        at: usize,
    },
    /// The expression stopped where a number or `(` was needed.
    UnexpectedEnd,
    Unclosed {
        at: usize,
    },
    NotWhole {
        at: usize,
    },
    TooLarge {
        at: usize,
    },
    TooDeep,
    Arith(ArithError),
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExprError::Empty => f.write_str("the expression is empty"),
            ExprError::Unexpected { found, at } => {
                write!(f, "unexpected `{found}` at character {}", at + 1)
            }
            ExprError::UnexpectedEnd => f.write_str("the expression ends too early"),
            ExprError::Unclosed { at } => {
                write!(f, "the `(` at character {} is never closed", at + 1)
            }
            ExprError::NotWhole { at } => {
                write!(f, "only whole numbers are allowed (character {})", at + 1)
            }
            ExprError::TooLarge { at } => {
                write!(f, "the number at character {} is too large", at + 1)
            }
            ExprError::TooDeep => write!(f, "parentheses nested deeper than {MAX_DEPTH}"),
            ExprError::Arith(e) => write!(f, "{e}"),
        }
    }
}

impl From<ArithError> for ExprError {
    fn from(e: ArithError) -> Self {
        ExprError::Arith(e)
    }
}

impl Expr {
    /// The exact value.
    pub fn value(&self) -> Result<Rational, ExprError> {
        Ok(match self {
            Expr::Number(n) => Rational::integer(i128::from(*n)),
            Expr::Binary(op, a, b) => {
                let (a, b) = (a.value()?, b.value()?);
                match op {
                    Op::Add => a.add(b),
                    Op::Sub => a.sub(b),
                    Op::Mul => a.mul(b),
                    Op::Div => a.div(b),
                }?
            }
        })
    }

    /// Every number written in the expression, left to right, repeats included.
    pub fn numbers(&self) -> Vec<u64> {
        let mut out = Vec::new();
        self.collect_numbers(&mut out);
        out
    }

    fn collect_numbers(&self, out: &mut Vec<u64>) {
        match self {
            Expr::Number(n) => out.push(*n),
            Expr::Binary(_, a, b) => {
                a.collect_numbers(out);
                b.collect_numbers(out);
            }
        }
    }
}

/// Reads `text` as one whole expression.
pub fn parse(text: &str) -> Result<Expr, ExprError> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth: 0,
    };
    p.skip_space();
    if p.peek().is_none() {
        return Err(ExprError::Empty);
    }
    let expr = p.expr()?;
    p.skip_space();
    match p.peek() {
        None => Ok(expr),
        Some(found) => Err(ExprError::Unexpected { found, at: p.pos }),
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// The operator at the cursor among `ops`, consumed.
    fn operator(&mut self, ops: &[(char, Op)]) -> Option<Op> {
        self.skip_space();
        let c = self.peek()?;
        let op = ops.iter().find(|(sym, _)| *sym == c)?.1;
        self.pos += 1;
        Some(op)
    }

    fn expr(&mut self) -> Result<Expr, ExprError> {
        let ops = [('+', Op::Add), ('-', Op::Sub)];
        let mut left = self.term()?;
        while let Some(op) = self.operator(&ops) {
            left = Expr::Binary(op, Box::new(left), Box::new(self.term()?));
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<Expr, ExprError> {
        let ops = [
            ('*', Op::Mul),
            ('×', Op::Mul),
            ('/', Op::Div),
            ('÷', Op::Div),
        ];
        let mut left = self.factor()?;
        while let Some(op) = self.operator(&ops) {
            left = Expr::Binary(op, Box::new(left), Box::new(self.factor()?));
        }
        Ok(left)
    }

    fn factor(&mut self) -> Result<Expr, ExprError> {
        self.skip_space();
        match self.peek() {
            None => Err(ExprError::UnexpectedEnd),
            Some('(') => {
                let open = self.pos;
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(ExprError::TooDeep);
                }
                self.pos += 1;
                let inner = self.expr()?;
                self.skip_space();
                if self.peek() != Some(')') {
                    return Err(ExprError::Unclosed { at: open });
                }
                self.pos += 1;
                self.depth -= 1;
                Ok(inner)
            }
            Some(c) if c.is_ascii_digit() => self.number(),
            Some(found) => Err(ExprError::Unexpected {
                found,
                at: self.pos,
            }),
        }
    }

    fn number(&mut self) -> Result<Expr, ExprError> {
        let start = self.pos;
        let mut value: u64 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d)))
                .ok_or(ExprError::TooLarge { at: start })?;
            self.pos += 1;
        }
        // `2.5` is a number a model might write; say why it is refused.
        if self.peek() == Some('.') {
            return Err(ExprError::NotWhole { at: start });
        }
        Ok(Expr::Number(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> String {
        parse(text).unwrap().value().unwrap().to_string()
    }

    #[test]
    fn precedence_associativity_and_parentheses() {
        assert_eq!(value("2 + 3 * 4"), "14");
        assert_eq!(value("(2 + 3) * 4"), "20");
        assert_eq!(value("10 - 4 - 3"), "3");
        assert_eq!(value("100 / 5 / 2"), "10");
        assert_eq!(value("7 / 2"), "7/2");
        assert_eq!(value("6 ÷ 4 × 2"), "3");
        assert_eq!(value(" ( ( 9 ) ) "), "9");
        assert_eq!(value("3 - 5"), "-2");
    }

    #[test]
    fn numbers_are_listed_left_to_right_with_repeats() {
        assert_eq!(parse("(25 - 8) * 3 + 8").unwrap().numbers(), [25, 8, 3, 8]);
    }

    #[test]
    fn malformed_expressions_say_what_and_where() {
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(err(""), "the expression is empty");
        assert_eq!(err("2 +"), "the expression ends too early");
        assert_eq!(err("2 + x"), "unexpected `x` at character 5");
        assert_eq!(err("-3 + 5"), "unexpected `-` at character 1");
        assert_eq!(err("(2 + 3"), "the `(` at character 1 is never closed");
        assert_eq!(err("2 3"), "unexpected `3` at character 3");
        assert_eq!(
            err("2.5 * 2"),
            "only whole numbers are allowed (character 1)"
        );
        assert_eq!(
            err("99999999999999999999"),
            "the number at character 1 is too large"
        );
        assert_eq!(err(&"(".repeat(1000)), "parentheses nested deeper than 32");
        let zero = parse("5 / (3 - 3)").unwrap().value().unwrap_err();
        assert_eq!(zero.to_string(), "division by zero");
    }
}
