//! Whether two answers are the same: normalized string equality, numeric equality, or
//! element-wise equality of tuples, sets and intervals.

use super::normalize::{normalize, split_assignment, strip_assignment};
use super::value::numeric_value;

/// Non-integers are equal when they agree once rounded to this many decimals, as
/// math-verify compares them (`0.333333` ≡ `\frac{1}{3}`, `12345.68` ≢ `12345.67`).
pub const DECIMALS: i32 = 6;

/// The absolute tolerance that [`DECIMALS`] amounts to, for callers that want one
/// number.
pub const TOLERANCE: f64 = 1e-6;

/// Coordinate names in their conventional order.
#[rustfmt::skip]
const CONVENTIONAL: &[&[&str]] = &[
    &["x", "y", "z", "w"], &["a", "b", "c", "d"], &["m", "n"], &["p", "q"], &["s", "t"],
    &["u", "v"], &["r", "\\theta", "z"], &["\\rho", "\\theta", "\\phi"],
];

/// Sets with more elements than this are matched by sorting, not pairwise: pairwise
/// matching is quadratic, and a 3,000-element gold took seconds.
const PAIRWISE_LIMIT: usize = 32;

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
    if a == b || same_words(a, b) {
        return true;
    }
    let (a, b) = (atom(a), atom(b));
    if a == b || same_words(a, b) {
        return true;
    }
    if let (Some(x), Some(y)) = (numeric_value(a), numeric_value(b)) {
        return numbers_close(x, y);
    }
    if depth >= MAX_DEPTH {
        return false;
    }
    if let (Some(x), Some(y)) = (structure(a), structure(b))
        && structures_equiv(&x, &y, depth)
    {
        return true;
    }
    // `1 \pm \sqrt{5}` stands for two answers: compare the lists it expands to.
    match (expand_pm(a), expand_pm(b)) {
        (None, None) => false,
        (x, y) => {
            let (x, y) = (x.as_deref().unwrap_or(a), y.as_deref().unwrap_or(b));
            matches!(
                (structure(x), structure(y)),
                (Some(p), Some(q)) if structures_equiv(&p, &q, depth + 1)
            )
        }
    }
}

/// A list or set whose elements hold one `\pm` each, with each such element written
/// out as its two values: `\{1\pm\sqrt{5},-2\}` → `\{1+\sqrt{5},1-\sqrt{5},-2\}`. `None`
/// when there is no `\pm`.
fn expand_pm(s: &str) -> Option<String> {
    if !s.contains("\\pm") {
        return None;
    }
    let (open, inner, close) = match s.strip_prefix("\\{").and_then(|t| t.strip_suffix("\\}")) {
        Some(inner) if is_one_group(s) => ("\\{", inner, "\\}"),
        _ => ("", s, ""),
    };
    let mut items = Vec::new();
    for item in split_top_level(inner) {
        match item.split_once("\\pm") {
            Some((head, tail)) if !tail.contains("\\pm") => {
                items.push(format!("{head}+{tail}"));
                items.push(format!("{head}-{tail}"));
            }
            Some(_) => return None,
            None => items.push(item.to_string()),
        }
    }
    Some(format!("{open}{}{close}", items.join(",")))
}

/// Text answers compare without case (`Yes` ≡ `yes`, `\text{Monday}` ≡ `monday`), but
/// only words of two or more letters: in math, `X+1` and `x+1` are different.
fn same_words(a: &str, b: &str) -> bool {
    // Every word two letters or more: `P - Q` is math, `Yes` is text.
    let wordy = |s: &str| {
        s.bytes()
            .all(|c| c.is_ascii_alphabetic() || c == b' ' || c == b'-')
            && s.split([' ', '-']).all(|w| w.len() >= 2)
    };
    wordy(a) && wordy(b) && a.eq_ignore_ascii_case(b)
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
/// 1000001), else when they agree rounded to [`DECIMALS`] decimals (or differ only
/// by floating-point noise, which rounding at a boundary could split); infinities
/// only equal themselves.
pub fn numbers_close(a: f64, b: f64) -> bool {
    if a.is_infinite() || b.is_infinite() || (a.fract() == 0.0 && b.fract() == 0.0) {
        return a == b;
    }
    let scale = 10f64.powi(DECIMALS);
    let largest = a.abs().max(b.abs());
    // Rounding alone would equate `.0000672` and `.0000673`: small numbers must also
    // agree in their leading digits.
    ((a * scale).round() == (b * scale).round() && (a - b).abs() <= RELATIVE * largest)
        || (a - b).abs() <= 1e-12 * largest.max(1.0)
}

/// The relative difference beyond which two numbers differ even when they round alike.
const RELATIVE: f64 = 1e-5;

#[derive(Debug)]
enum Structure<'a> {
    /// `\{a, b\}` or `a, b`: order does not matter.
    Set(Vec<&'a str>),
    /// `(a, b)`, `[a, b)`: brackets and order matter.
    Sequence(u8, u8, Vec<&'a str>),
    /// `(-\infty, 2) \cup (3, \infty)`: intervals in any order.
    Union(Vec<&'a str>),
    /// `\begin{pmatrix} a & b \\ c & d \end{pmatrix}` (or `bmatrix`): entries in place.
    Matrix(Vec<Vec<&'a str>>),
}

/// The rows of a matrix environment (`pmatrix`, `bmatrix`, `matrix`), each split into
/// its entries.
fn matrix_rows(s: &str) -> Option<Vec<Vec<&str>>> {
    let body = ["pmatrix", "bmatrix", "matrix"].iter().find_map(|env| {
        s.strip_prefix(&format!("\\begin{{{env}}}"))?
            .strip_suffix(&format!("\\end{{{env}}}"))
    })?;
    let rows: Vec<Vec<&str>> = body
        .split("\\\\")
        .filter(|r| !r.is_empty())
        .map(|r| r.split('&').collect())
        .collect();
    (!rows.is_empty()).then_some(rows)
}

fn structure(s: &str) -> Option<Structure<'_>> {
    if let Some(rows) = matrix_rows(s) {
        return Some(Structure::Matrix(rows));
    }
    let parts = split_top_level_on(s, "\\cup");
    if parts.len() > 1 {
        return parts
            .iter()
            .all(|p| !p.is_empty())
            .then_some(Structure::Union(parts));
    }
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
                && names_agree(x, y)
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| equiv_normalized(p, q, depth + 1))
        }
        (Structure::Set(x), Structure::Set(y)) | (Structure::Union(x), Structure::Union(y)) => {
            unordered_equiv(x, y, depth)
        }
        (Structure::Matrix(x), Structure::Matrix(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|(r, q)| {
                    r.len() == q.len()
                        && r.iter()
                            .zip(q)
                            .all(|(p, q)| equiv_normalized(p, q, depth + 1))
                })
        }
        _ => false,
    }
}

/// The names of a tuple's elements written as assignments (`(x = 1, y = 2)`) must not
/// contradict the other tuple: the same names in the same places where both have them,
/// and where only one has them, in alphabetical order (`(y = 1, x = 2)` is not
/// `(1, 2)`: it puts 2 first).
fn names_agree(x: &[&str], y: &[&str]) -> bool {
    let names = |t: &[&str]| -> Vec<Option<String>> {
        t.iter()
            .map(|e| split_assignment(e).map(|(name, _)| name.to_string()))
            .collect()
    };
    let (nx, ny) = (names(x), names(y));
    // Where the other side gives no names, only the conventional order of a known
    // coordinate system says which value is which: `(x = 1, y = 2)` is `(1, 2)`, but
    // `(\theta = 3, r = 1)` and `(y = 1, x = 2)` are not.
    let sorted = |n: &[Option<String>]| {
        let named: Vec<&str> = n.iter().flatten().map(String::as_str).collect();
        named.len() == n.len()
            && CONVENTIONAL.iter().any(|order| {
                named.len() <= order.len() && order.iter().zip(&named).all(|(a, b)| a == b)
            })
    };
    match (
        nx.iter().any(Option::is_some),
        ny.iter().any(Option::is_some),
    ) {
        (true, true) => nx
            .iter()
            .zip(&ny)
            .all(|(a, b)| a.is_none() || b.is_none() || a == b),
        (true, false) => sorted(&nx),
        (false, true) => sorted(&ny),
        (false, false) => true,
    }
}

/// Whether `x` and `y` hold equivalent elements in some order. Small collections are
/// matched pairwise; large ones by sorting their normalized strings, then their
/// values, so the cost stays near-linear whatever the gold answer's size.
fn unordered_equiv(x: &[&str], y: &[&str], depth: usize) -> bool {
    if x.len() != y.len() {
        return false;
    }
    if x.len() > PAIRWISE_LIMIT {
        let mut xs: Vec<&str> = x.iter().map(|e| atom(e)).collect();
        let mut ys: Vec<&str> = y.iter().map(|e| atom(e)).collect();
        xs.sort_unstable();
        ys.sort_unstable();
        if xs == ys {
            return true;
        }
        let values = |v: &[&str]| -> Option<Vec<f64>> {
            let mut out: Vec<f64> = v.iter().map(|e| numeric_value(e)).collect::<Option<_>>()?;
            out.sort_by(f64::total_cmp);
            Some(out)
        };
        return match (values(&xs), values(&ys)) {
            (Some(a), Some(b)) => a.iter().zip(&b).all(|(p, q)| numbers_close(*p, *q)),
            _ => false,
        };
    }
    let mut used = vec![false; y.len()];
    x.iter().all(|p| {
        let found = (0..y.len()).find(|&j| !used[j] && equiv_normalized(p, y[j], depth + 1));
        found.map(|j| used[j] = true).is_some()
    })
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

/// `s` split at `token` (a command such as `\cup`) outside any brackets.
fn split_top_level_on<'a>(s: &'a str, token: &str) -> Vec<&'a str> {
    let bytes = s.as_bytes();
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if depth == 0
            && bytes[i..].starts_with(token.as_bytes())
            && !bytes
                .get(i + token.len())
                .is_some_and(u8::is_ascii_alphabetic)
        {
            items.push(&s[start..i]);
            i += token.len();
            start = i;
            continue;
        }
        let (change, len) = bracket(bytes, i);
        depth += change;
        i += len;
    }
    items.push(&s[start..]);
    items
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
