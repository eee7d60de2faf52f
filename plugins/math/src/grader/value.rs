//! The numeric value of a normalized answer, for a restricted grammar of *values*.
//!
//! ```text
//! value   := sign* product
//! product := factor (factor | '/' factor)*
//! factor  := number | \frac{value}{value} | \sqrt{value} | \sqrt[value]{value}
//!          | \pi | \infty
//! ```
//!
//! Implicit products cover `2\sqrt{3}`, `3\pi` and `\frac{\sqrt{2}}{2}`; an integer
//! directly followed by a fraction of integers is a mixed number (`3\frac{1}{2}` = 3.5).
//! There is deliberately no `+`, `-` between terms, `\times`, `^` or bare parentheses:
//! an unevaluated `3+4` or `3\times4` is not the answer `7` or `12` (a policy could
//! otherwise be rewarded for copying the question into the box).

/// Nesting depth beyond which an expression is not evaluated (garbage guard).
const MAX_DEPTH: usize = 32;

/// The value of `s` (already normalized, no whitespace), or `None` when it is not a
/// value of the grammar above or not finite (apart from an explicit `\infty`).
pub fn numeric_value(s: &str) -> Option<f64> {
    let mut parser = Parser {
        s: s.as_bytes(),
        at: 0,
    };
    let value = parser.value(0)?;
    (parser.at == parser.s.len() && !value.is_nan()).then_some(value)
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn value(&mut self, depth: usize) -> Option<f64> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut sign = 1.0;
        while let Some(&c @ (b'-' | b'+')) = self.s.get(self.at) {
            if c == b'-' {
                sign = -sign;
            }
            self.at += 1;
        }
        Some(sign * self.product(depth)?)
    }

    fn product(&mut self, depth: usize) -> Option<f64> {
        let first_at = self.at;
        let (mut value, first_is_integer) = self.factor(depth)?;
        let mut factors = 1;
        loop {
            match self.s.get(self.at) {
                None | Some(b'}' | b']') => return Some(value),
                Some(b'/') => {
                    self.at += 1;
                    let (divisor, _) = self.factor(depth)?;
                    if divisor == 0.0 {
                        return None;
                    }
                    value /= divisor;
                }
                // `12.5.3` is not 12.5 × 0.3: numbers only start a product.
                Some(b) if b.is_ascii_digit() || *b == b'.' => return None,
                Some(_) => {
                    let next_at = self.at;
                    let (next, _) = self.factor(depth)?;
                    let mixed = factors == 1
                        && first_is_integer
                        && self.is_integer_fraction(next_at)
                        && !self.s[first_at..next_at].contains(&b'.');
                    value = if mixed { value + next } else { value * next };
                }
            }
            factors += 1;
        }
    }

    /// Whether the text from `from` to the cursor is `\frac{int}{int}`.
    fn is_integer_fraction(&self, from: usize) -> bool {
        let text = &self.s[from..self.at];
        let Some(args) = text.strip_prefix(b"\\frac{") else {
            return false;
        };
        let Some(args) = args.strip_suffix(b"}") else {
            return false;
        };
        let mut parts = args.split(|b| *b == b'}');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(num), Some(den), None) => {
                let den = den.strip_prefix(b"{").unwrap_or(b"");
                !num.is_empty()
                    && !den.is_empty()
                    && num.iter().all(u8::is_ascii_digit)
                    && den.iter().all(u8::is_ascii_digit)
            }
            _ => false,
        }
    }

    /// One factor and whether it is an integer literal.
    fn factor(&mut self, depth: usize) -> Option<(f64, bool)> {
        let rest = &self.s[self.at..];
        if rest
            .first()
            .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
        {
            return self.number();
        }
        if self.eat(b"\\frac{") {
            let numerator = self.group(depth)?;
            if !self.eat(b"{") {
                return None;
            }
            let denominator = self.group(depth)?;
            return (denominator != 0.0).then(|| (numerator / denominator, false));
        }
        if self.eat(b"\\sqrt") {
            let index = if self.eat(b"[") {
                let index = self.value(depth + 1)?;
                if !self.eat(b"]") || index == 0.0 {
                    return None;
                }
                index
            } else {
                2.0
            };
            if !self.eat(b"{") {
                return None;
            }
            let radicand = self.group(depth)?;
            let root = if index == 3.0 {
                radicand.cbrt()
            } else {
                radicand.powf(1.0 / index)
            };
            return (!root.is_nan()).then_some((root, false));
        }
        if self.eat(b"\\pi") {
            return Some((std::f64::consts::PI, false));
        }
        if self.eat(b"\\infty") {
            return Some((f64::INFINITY, false));
        }
        None
    }

    /// A value followed by `}` (the opening `{` already eaten).
    fn group(&mut self, depth: usize) -> Option<f64> {
        let value = self.value(depth + 1)?;
        self.eat(b"}").then_some(value)
    }

    /// Digits with at most one `.`: `12`, `0.5`, `.5`.
    fn number(&mut self) -> Option<(f64, bool)> {
        let start = self.at;
        let mut point = false;
        while let Some(&b) = self.s.get(self.at) {
            if b.is_ascii_digit() {
                self.at += 1;
            } else if b == b'.' && !point {
                point = true;
                self.at += 1;
            } else {
                break;
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.at]).ok()?;
        let value = text.parse::<f64>().ok()?;
        Some((value, !point))
    }

    fn eat(&mut self, token: &[u8]) -> bool {
        if self.s[self.at..].starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }
}
