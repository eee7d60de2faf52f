//! Whether two answers are the same: normalized string equality, numeric equality, or
//! element-wise equality of tuples, sets and intervals.

use super::normalize::{normalize, strip_assignment};
use super::value::numeric_value;

/// Relative (and, below 1, absolute) tolerance of numeric equality.
pub const TOLERANCE: f64 = 1e-6;

/// Nesting depth of tuples within tuples beyond which elements compare as strings.
const MAX_DEPTH: usize = 8;

/// Whether `answer` is equivalent to the `gold` answer. Both are normalized with
/// [`normalize`] first; an empty answer is never equivalent to anything.
///
/// After normalization, two answers are equivalent when they are
/// - the same string, or the same ignoring case (text answers: `Yes` ≡ `yes`);
/// - both numeric values (see [`numeric_value`]) within [`TOLERANCE`]:
///   `0.5` ≡ `\frac{1}{2}` ≡ `1/2`, `2\sqrt{3}` ≡ `\sqrt{12}`;
/// - both tuples or intervals with the same brackets and pairwise equivalent
///   elements in order: `(1, 2)`, `[0, \frac{1}{2})`;
/// - both sets, in braces (`\{1, 2\}`) or bare (`1, 2`), with elements equivalent in
///   some order.
///
/// A single value in parentheses is that value (`(A)` ≡ `A`), and elements may be
/// written as assignments (`x = 1`). It never panics, whatever the input.
pub fn is_equiv(answer: &str, gold: &str) -> bool {
    equiv_normalized(&normalize(answer), &normalize(gold), 0)
}

fn equiv_normalized(a: &str, b: &str, depth: usize) -> bool {
    if a.is_empty() || b.is_empty() {
        return false;
    }
    if a == b || a.to_lowercase() == b.to_lowercase() {
        return true;
    }
    let (a, b) = (atom(a), atom(b));
    if a == b || a.to_lowercase() == b.to_lowercase() {
        return true;
    }
    if let (Some(x), Some(y)) = (numeric_value(a), numeric_value(b)) {
        return numbers_close(x, y);
    }
    if depth >= MAX_DEPTH {
        return false;
    }
    match (structure(a), structure(b)) {
        (Some(x), Some(y)) => structures_equiv(&x, &y, depth),
        _ => false,
    }
}

/// `x`'s value when it is a single element: without an assignment or one pair of
/// parentheses around it.
fn atom(s: &str) -> &str {
    let s = strip_assignment(s);
    match s.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
        Some(inner) if is_one_group(s) && split_top_level(inner).len() == 1 => inner,
        _ => s,
    }
}

/// Whether two numbers are equal: exactly when both are integers (so 1000000 ≠
/// 1000001), else within [`TOLERANCE`], relative above 1 and absolute below;
/// infinities only equal themselves.
pub fn numbers_close(a: f64, b: f64) -> bool {
    if a.is_infinite() || b.is_infinite() || (a.fract() == 0.0 && b.fract() == 0.0) {
        return a == b;
    }
    (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(1.0)
}

#[derive(Debug)]
enum Structure<'a> {
    /// `\{a, b\}` or `a, b`: order does not matter.
    Set(Vec<&'a str>),
    /// `(a, b)`, `[a, b)`: brackets and order matter.
    Sequence(u8, u8, Vec<&'a str>),
}

fn structure(s: &str) -> Option<Structure<'_>> {
    if let Some(inner) = s.strip_prefix("\\{").and_then(|t| t.strip_suffix("\\}"))
        && is_one_group(s)
    {
        return elements(inner).map(Structure::Set);
    }
    let bytes = s.as_bytes();
    if let (Some(&open @ (b'(' | b'[')), Some(&close @ (b')' | b']'))) =
        (bytes.first(), bytes.last())
        && s.len() >= 2
        && is_one_group(s)
    {
        return elements(&s[1..s.len() - 1]).map(|e| Structure::Sequence(open, close, e));
    }
    let items = elements(s)?;
    (items.len() > 1).then_some(Structure::Set(items))
}

/// The comma-separated elements of `s`; `None` if one is empty.
fn elements(s: &str) -> Option<Vec<&str>> {
    let items = split_top_level(s);
    items.iter().all(|e| !e.is_empty()).then_some(items)
}

fn structures_equiv(a: &Structure, b: &Structure, depth: usize) -> bool {
    match (a, b) {
        (Structure::Sequence(o1, c1, x), Structure::Sequence(o2, c2, y)) => {
            o1 == o2
                && c1 == c2
                && x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| equiv_normalized(p, q, depth + 1))
        }
        (Structure::Set(x), Structure::Set(y)) => {
            if x.len() != y.len() {
                return false;
            }
            let mut used = vec![false; y.len()];
            x.iter().all(|p| {
                let found =
                    (0..y.len()).find(|&j| !used[j] && equiv_normalized(p, y[j], depth + 1));
                found.map(|j| used[j] = true).is_some()
            })
        }
        _ => false,
    }
}

/// How one bracket token changes the nesting depth: `(`, `[`, `{`, `\{` open;
/// `)`, `]`, `}`, `\}` close. Returns the change and the token's length.
fn bracket(bytes: &[u8], i: usize) -> (i32, usize) {
    match bytes[i] {
        b'\\' => match bytes.get(i + 1) {
            Some(b'{') => (1, 2),
            Some(b'}') => (-1, 2),
            Some(_) => (0, 2),
            None => (0, 1),
        },
        b'(' | b'[' | b'{' => (1, 1),
        b')' | b']' | b'}' => (-1, 1),
        _ => (0, 1),
    }
}

/// Whether `s` is one bracketed group: the bracket opened by its first token closes
/// at its last token, and not before.
fn is_one_group(s: &str) -> bool {
    let bytes = s.as_bytes();
    let mut depth = 0;
    let mut i = 0;
    while i < bytes.len() {
        let (change, len) = bracket(bytes, i);
        depth += change;
        i += len;
        if depth <= 0 {
            return i == bytes.len() && depth == 0 && change != 0;
        }
    }
    false
}

/// `s` split at commas outside any brackets.
fn split_top_level(s: &str) -> Vec<&str> {
    let bytes = s.as_bytes();
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let (change, len) = bracket(bytes, i);
        depth += change;
        if depth == 0 && bytes[i] == b',' {
            items.push(&s[start..i]);
            start = i + 1;
        }
        i += len;
    }
    items.push(&s[start..]);
    items
}
