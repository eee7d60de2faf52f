//! Normalizing an answer string so that equal answers written differently compare
//! equal as strings (after the MATH benchmark's `strip_string` and Minerva's
//! `normalize_final_answer`, extended).

use super::boxed::{last_boxed, matching_brace};

/// Unit words dropped from the end of an answer that follows a number (`5 cm`,
/// `12 dollars`, `3 square units`). Single letters are dropped only after a space.
#[rustfmt::skip]
const UNITS: &[&str] = &[
    "mm", "cm", "m", "km", "meter", "meters", "metre", "metres", "centimeter",
    "centimeters", "kilometer", "kilometers", "inch", "inches", "ft", "foot", "feet",
    "yard", "yards", "mile", "miles", "mph", "unit", "units", "square", "sq", "cubic",
    "degree", "degrees", "dollar", "dollars", "cent", "cents", "percent", "g", "gram",
    "grams", "kg", "pound", "pounds", "lb", "lbs", "ounce", "ounces", "oz", "liter",
    "liters", "ml", "gallon", "gallons", "second", "seconds", "sec", "minute", "minutes",
    "min", "mins", "hour", "hours", "hr", "hrs", "day", "days", "week", "weeks", "month",
    "months", "year", "years",
];

/// Commands whose argument is kept and the command dropped (`\text{yes}` → `yes`).
const TEXT_COMMANDS: &[&str] = &[
    "\\text",
    "\\textbf",
    "\\textit",
    "\\textrm",
    "\\mbox",
    "\\mathrm",
    "\\mathbf",
    "\\mathit",
    "\\operatorname",
];

/// Spacing and sizing commands removed outright.
const SPACING: &[&str] = &[
    "\\displaystyle",
    "\\qquad",
    "\\quad",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
];

/// Unicode look-alikes written as LaTeX. A vulgar fraction gets a leading space so a
/// mixed number `2½` reads as `2 \frac{1}{2}`.
#[rustfmt::skip]
const UNICODE: &[(&str, &str)] = &[
    ("−", "-"), ("–", "-"), ("π", "\\pi"), ("∞", "\\infty"), ("√", "\\sqrt"),
    ("×", "\\times"), ("·", "\\cdot"), ("≤", "\\le"), ("≥", "\\ge"), ("∪", "\\cup"),
    ("½", " \\frac{1}{2}"), ("⅓", " \\frac{1}{3}"), ("⅔", " \\frac{2}{3}"),
    ("¼", " \\frac{1}{4}"), ("¾", " \\frac{3}{4}"), ("⅕", " \\frac{1}{5}"),
    ("⅖", " \\frac{2}{5}"), ("⅗", " \\frac{3}{5}"), ("⅘", " \\frac{4}{5}"),
    ("⅙", " \\frac{1}{6}"), ("⅚", " \\frac{5}{6}"), ("⅛", " \\frac{1}{8}"),
    ("⅜", " \\frac{3}{8}"), ("⅝", " \\frac{5}{8}"), ("⅞", " \\frac{7}{8}"),
];

/// Words that make a trailing text part of the answer rather than a unit or a noun:
/// `5\text{ or 7}` and `5\text{ and -5}` are hedges, not `5`.
#[rustfmt::skip]
const CONNECTIVES: &[&str] = &[
    "or", "and", "nor", "not", "but", "except", "either", "neither", "plus", "minus",
    "times", "over", "to", "than", "between", "less", "more", "least", "most", "about",
    "approximately", "roughly", "around", "maybe", "if", "when", "or equal", "is", "are",
    "with", "without", "from", "of", "by", "per", "no", "none", "all", "any", "only",
    "at", "under", "above", "below", "each", "every", "divided", "multiplied", "squared",
    "cubed", "root", "modulo", "mod",
];

/// How deep `\frac` arguments are rewritten before the rest is copied as is.
const MAX_DEPTH: usize = 32;

/// The normalized form of an answer.
///
/// In order: unicode look-alikes (`−`, `π`, `∞`, `°`) to LaTeX; `$` and `\$` dropped; a
/// whole-string `\boxed{..}` unwrapped; `\left`/`\right` dropped; thousands
/// separators `1,\!000` joined; spacing commands (`\!`, `\,`, `\;`, `\quad`, ...)
/// dropped; `\dfrac`/`\tfrac` → `\frac`; degrees (`^\circ`, `^{\circ}`) and percent
/// signs dropped; a trailing unit in `\text{ cm}` dropped; `\text{..}`, `\mbox{..}`,
/// `\mathrm{..}`, ... unwrapped; trailing `.` and unit words (`5 cm`) dropped; a
/// leading assignment (`x = 5`) dropped; `1,000` → `1000` (only when the whole answer
/// is one such number, so `1, 2` stays a list); whitespace removed; `\frac12` →
/// `\frac{1}{2}`, `\frac{a}b` → `\frac{a}{b}`, `\sqrt2` → `\sqrt{2}`.
pub fn normalize(answer: &str) -> String {
    let mut s = root_sign(&answer.trim().replace('\n', " "));
    for (from, to) in UNICODE {
        if s.contains(from) {
            s = s.replace(from, to);
        }
    }
    s = s.replace("\\$", "").replace('$', "");
    let head = s.trim_start();
    if (head.starts_with("\\boxed") || head.starts_with("\\fbox"))
        && let Some(inner) = last_boxed(head)
    {
        s = inner;
    }
    s = drop_left_right(&s);
    s = join_thousands_thin_space(&s);
    s = join_braced_commas(&s);
    s = remove_spacing(&s);
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac");
    for degree in ["^{\\circ}", "^\\circ", "\\circ", "\\degree", "°"] {
        s = s.replace(degree, "");
    }
    s = s.replace("\\%", "").replace('%', "");
    s = drop_trailing_text_unit(&s);
    for command in TEXT_COMMANDS {
        s = unwrap_command(&s, command);
    }
    s = drop_trailing_units(&s);
    s = strip_assignment(&s).to_string();
    if is_grouped_number(s.trim()) {
        s = s.replace(',', "");
    }
    s.retain(|c| !c.is_whitespace());
    s = fix_fracs(&s, 0);
    s = fix_sqrt(&s);
    s = brace_subscripts(&s);
    strip_outer_braces(s.trim_end_matches('.')).to_string()
}

/// `√51` → `\sqrt{51}`: the radical sign covers the number after it.
fn root_sign(s: &str) -> String {
    if !s.contains('√') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut rest = s;
    while let Some(at) = rest.find('√') {
        out.push_str(&rest[..at]);
        let after = &rest[at + '√'.len_utf8()..];
        let digits = after
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if digits > 0 {
            out.push_str("\\sqrt{");
            out.push_str(&after[..digits]);
            out.push('}');
        } else {
            out.push_str("\\sqrt");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// Removes spacing commands (`\!`, `\,`, `\ `, `\quad`, ...) but keeps `\\` (a matrix
/// row break), whose second backslash a plain `\ ` replacement would take.
fn remove_spacing(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("\\\\") {
            out.push_str("\\\\");
            rest = after;
            continue;
        }
        match SPACING.iter().find(|c| {
            tail.starts_with(**c)
                // `\quad` must not match `\quadrilateral`-like commands.
                && !(c.ends_with(|ch: char| ch.is_ascii_alphabetic())
                    && tail[c.len()..].starts_with(|ch: char| ch.is_ascii_alphabetic()))
        }) {
            Some(c) => {
                out.push(' ');
                rest = &tail[c.len()..];
            }
            None => {
                out.push('\\');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `1{,}030` (a LaTeX thousands separator) → `1030`.
fn join_braced_commas(s: &str) -> String {
    if !s.contains("{,}") {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("{,}") {
        let before_digit = rest[..at].ends_with(|c: char| c.is_ascii_digit());
        let after = &rest[at + 3..];
        let after_digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&rest[..at]);
        if !(before_digit && after_digits == 3) {
            out.push_str("{,}");
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `4210_5` → `4210_{5}`: a one-character subscript gets the braces a longer one needs,
/// so both spellings of a base compare equal.
fn brace_subscripts(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '_'
            && let Some(&next) = chars.peek()
            && next.is_ascii_alphanumeric()
        {
            out.push('{');
            out.push(next);
            out.push('}');
            chars.next();
        }
    }
    out
}

/// `{5}` and `{{5}}` → `5`: braces around the whole answer group nothing.
fn strip_outer_braces(mut s: &str) -> &str {
    while s.starts_with('{') && matching_brace(s, 0) == Some(s.len() - 1) {
        s = &s[1..s.len() - 1];
    }
    s
}

/// Drops `\left` and `\right` (and the null delimiters `\left.` / `\right.`), but not
/// `\leftarrow` or `\rightarrow`.
fn drop_left_right(s: &str) -> String {
    let s = s.replace("\\left.", "").replace("\\right.", "");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let skip = ["\\left", "\\right"].into_iter().find(|c| {
            tail.starts_with(c)
                && !tail[c.len()..]
                    .chars()
                    .next()
                    .is_some_and(|n| n.is_ascii_alphabetic())
        });
        match skip {
            Some(c) => rest = &tail[c.len()..],
            None => {
                out.push('\\');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `1,\!000` (the MATH data set's thousands separator) → `1000`.
fn join_thousands_thin_space(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(",\\!") {
        let before_digit = rest[..at].ends_with(|c: char| c.is_ascii_digit());
        // `1,\! 000` (a space after the separator) is the same number.
        let after = rest[at + 3..].trim_start();
        let after_digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&rest[..at]);
        if before_digit && after_digits == 3 {
            rest = after;
        } else {
            out.push_str(",\\!");
            rest = &rest[at + 3..];
        }
    }
    out.push_str(rest);
    out
}

/// Replaces every `\command{X}` with `X`.
fn unwrap_command(s: &str, command: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(command) {
        let after = &rest[at + command.len()..];
        out.push_str(&rest[..at]);
        // `\text` must not match the start of `\textbf`.
        let arg = after.trim_start();
        match arg
            .starts_with('{')
            .then(|| matching_brace(arg, 0))
            .flatten()
        {
            Some(close) => {
                out.push_str(&arg[1..close]);
                rest = &arg[close + 1..];
            }
            None => {
                out.push_str(command);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Drops a `\text{..}` (or `\mbox`, `\mathrm`, `\textrm`) at the very end when it
/// follows a number and is a unit: it starts with a space (`5\text{ apples}`) or is a
/// known unit word (`5\mathrm{cm}`). An exponent after it (`\text{ cm}^2`) goes too.
fn drop_trailing_text_unit(s: &str) -> String {
    let trimmed = s.trim_end();
    let body = strip_exponent(trimmed);
    for command in ["\\text", "\\mbox", "\\mathrm", "\\textrm"] {
        let Some(at) = body.rfind(&format!("{command}{{")) else {
            continue;
        };
        let open = at + command.len();
        if matching_brace(body, open) != Some(body.len() - 1) {
            continue;
        }
        let content = &body[open + 1..body.len() - 1];
        let prefix = body[..at].trim_end();
        let known_units = !content.trim().is_empty()
            && content
                .split_whitespace()
                .all(|w| UNITS.contains(&w.to_ascii_lowercase().as_str()));
        // A spaced text after a number is a unit or a noun (`5\text{ apples}`) only
        // when it is plain words: `5\text{ or 7}` is a hedge and stays.
        let is_unit =
            known_units || (content.starts_with(char::is_whitespace) && is_noun_phrase(content));
        if is_unit && ends_like_number(prefix) {
            return prefix.to_string();
        }
    }
    s.to_string()
}

/// Whether `text` is a unit or a noun phrase that can follow a number (`apples`,
/// `square feet`, `classes`): one to three plain words, none a connective that would
/// make it part of the answer (`or 7`, `and -5`, `to 9`).
fn is_noun_phrase(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    !words.is_empty()
        && words.len() <= 3
        && words.iter().all(|w| {
            let w = w.trim_end_matches(['.', ',']);
            w.len() >= 2
                && w.bytes().all(|b| b.is_ascii_alphabetic() || b == b'\'')
                && !CONNECTIVES.contains(&w.to_ascii_lowercase().as_str())
        })
}

/// `s` without a trailing `^2`, `^3`, `^{2}` or `^{3}`.
fn strip_exponent(s: &str) -> &str {
    ["^{2}", "^{3}", "^2", "^3"]
        .into_iter()
        .find_map(|e| s.strip_suffix(e))
        .unwrap_or(s)
}

/// Whether `s` ends the way a number or numeric expression does.
fn ends_like_number(s: &str) -> bool {
    s.ends_with(|c: char| c.is_ascii_digit() || c == '}' || c == ')') || s.ends_with("\\pi")
}

/// Drops trailing `.` and unit words after a number (`5 square feet.` → `5`).
fn drop_trailing_units(s: &str) -> String {
    let s = s.trim().trim_end_matches('.').trim_end();
    // Peel unit words off the end; keep the cut only once a number is reached.
    let mut body = strip_exponent(s);
    loop {
        let word_len = body
            .bytes()
            .rev()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let word = &body[body.len() - word_len..];
        let head = &body[..body.len() - word_len];
        let spaced = head.ends_with(char::is_whitespace);
        let prefix = head.trim_end();
        let lower = word.to_ascii_lowercase();
        // A known unit, or after a space any plain word that is not a connective
        // (`247 classes`); a connective anywhere keeps the whole answer (`5 or 7`).
        let is_unit = word_len > 0
            && !head.ends_with('\\')
            && (spaced || word_len > 1)
            && (UNITS.contains(&lower.as_str())
                || (spaced && word_len > 1 && !CONNECTIVES.contains(&lower.as_str())));
        if !is_unit {
            return s.to_string();
        }
        if ends_like_number(prefix) {
            return prefix.to_string();
        }
        body = prefix;
    }
}

/// The right-hand side of `x = 5`, `y=2x+1`, `\theta = 30`, `a_1 = 2`: a single `=`
/// with a short name on its left. Anything else is returned unchanged.
pub fn strip_assignment(s: &str) -> &str {
    match split_assignment(s) {
        Some((_, rhs)) => rhs,
        None => s,
    }
}

/// `x = 5` → `(x, 5)`; `x \in [0, 1]` → `(x, [0, 1])`: a single `=` or `\in` with a
/// short name on its left.
pub fn split_assignment(s: &str) -> Option<(&str, &str)> {
    let (lhs, rhs) = match s.split_once('=') {
        Some((lhs, rhs)) if !rhs.contains('=') => (lhs, rhs),
        Some(_) => return None,
        None => {
            let at = s
                .match_indices("\\in")
                .find(|(at, _)| !s[at + 3..].starts_with(|c: char| c.is_ascii_alphabetic()))?
                .0;
            (&s[..at], &s[at + 3..])
        }
    };
    let (lhs, rhs) = (lhs.trim(), rhs.trim());
    (is_short_name(lhs) && !rhs.is_empty()).then_some((lhs, rhs))
}

fn is_short_name(name: &str) -> bool {
    let (base, subscript) = name.split_once('_').unwrap_or((name, ""));
    let base_ok = match base.strip_prefix('\\') {
        Some(command) => {
            (1..=8).contains(&command.len()) && command.bytes().all(|b| b.is_ascii_alphabetic())
        }
        None => {
            (1..=2).contains(&base.len())
                && base.starts_with(|c: char| c.is_ascii_alphabetic())
                && base.bytes().all(|b| b.is_ascii_alphanumeric())
        }
    };
    let subscript = subscript.trim_start_matches('{').trim_end_matches('}');
    base_ok && subscript.len() <= 3 && subscript.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `s` is one number with comma thousands separators: `1,000`, `-12,345.6`.
fn is_grouped_number(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut groups = int.split(',');
    let first = groups.next().unwrap_or("");
    let mut count = 0;
    let groups_ok = groups.all(|g| {
        count += 1;
        g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit())
    });
    count > 0
        && groups_ok
        && (1..=3).contains(&first.len())
        && first.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// `\frac12` → `\frac{1}{2}`, `\frac{a}b` → `\frac{a}{b}`, `\frac1{b}` → `\frac{1}{b}`.
fn fix_fracs(s: &str, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut rest = s;
    while let Some(at) = rest.find("\\frac") {
        out.push_str(&rest[..at + 5]);
        rest = &rest[at + 5..];
        for _ in 0..2 {
            let Some((arg, after)) = take_argument(rest) else {
                break;
            };
            out.push('{');
            out.push_str(&fix_fracs(arg, depth + 1));
            out.push('}');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `\sqrt2` → `\sqrt{2}`; `\sqrt{2}` and `\sqrt[3]{2}` are left alone.
fn fix_sqrt(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let mut rest = s;
    while let Some(at) = rest.find("\\sqrt") {
        out.push_str(&rest[..at + 5]);
        rest = &rest[at + 5..];
        if let Some(c) = rest.chars().next()
            && c.is_ascii_alphanumeric()
        {
            out.push('{');
            out.push(c);
            out.push('}');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// A LaTeX argument: `{..}` (brace-matched) or a single letter or digit.
fn take_argument(s: &str) -> Option<(&str, &str)> {
    if s.starts_with('{') {
        let close = matching_brace(s, 0)?;
        return Some((&s[1..close], &s[close + 1..]));
    }
    let c = s.chars().next().filter(char::is_ascii_alphanumeric)?;
    Some((&s[..c.len_utf8()], &s[c.len_utf8()..]))
}
