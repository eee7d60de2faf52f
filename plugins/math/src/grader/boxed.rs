//! Finding answers in text: the last `\boxed{..}` and the last number.

/// The commands that box a final answer.
const BOX_COMMANDS: [&str; 2] = ["\\boxed", "\\fbox"];

/// The content of the last complete `\boxed{..}` in `text`, trimmed.
///
/// Also accepts `\fbox{..}` and the brace-less `\boxed X` (up to the next `$` or line
/// end). Braces nest; escaped braces (`\{`, `\}`) are literal and do not count. A box
/// that is never closed (a truncated completion) is skipped in favour of the last
/// earlier one that is. `\boxed{}` gives `Some("")`.
pub fn last_boxed(text: &str) -> Option<String> {
    let commands: Vec<(usize, &str)> = text
        .match_indices('\\')
        .filter_map(|(at, _)| {
            BOX_COMMANDS
                .iter()
                .find(|c| text[at..].starts_with(*c))
                .map(|c| (at, *c))
        })
        .collect();
    let mut end = text.len();
    for (at, command) in commands.into_iter().rev() {
        let rest = &text[at + command.len()..end];
        if let Some(content) = box_content(rest) {
            return Some(content.trim().to_string());
        }
        // A box that opens before an unclosed one must close before it, so earlier
        // candidates are searched only up to here: linear in the text overall.
        if rest.trim_start().starts_with('{') {
            end = at;
        }
    }
    None
}

/// What a box command is applied to: `{..}` (brace-matched) or ` X` without braces.
fn box_content(rest: &str) -> Option<&str> {
    let trimmed = rest.trim_start();
    if trimmed.starts_with('{') {
        let close = matching_brace(trimmed, 0)?;
        return Some(&trimmed[1..close]);
    }
    // `\boxed 5`: the command must be followed by whitespace (not `\boxedfoo`).
    if rest.len() == trimmed.len() {
        return None;
    }
    let content = trimmed.split(['$', '\n']).next().unwrap_or("").trim();
    (!content.is_empty()).then_some(content)
}

/// The byte index of the `}` that closes the `{` at `open`, skipping escaped
/// characters (`\{`, `\}`, `\\`). `None` when it is never closed.
pub(crate) fn matching_brace(text: &str, open: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.get(open) != Some(&b'{') {
        return None;
    }
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The last number written in `text` (`-12`, `1,234.5`, `.5`), commas dropped.
///
/// A `-` counts as a sign only when it does not follow a letter, digit or closing
/// bracket (`3-4` ends with the number 4, `x = -4` with −4).
pub fn last_number(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut last = None;
    let mut i = 0;
    while i < bytes.len() {
        let starts_number = bytes[i].is_ascii_digit()
            || (bytes[i] == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit));
        if !starts_number {
            i += 1;
            continue;
        }
        let start = i;
        let mut seen_point = false;
        while i < bytes.len() {
            let b = bytes[i];
            let next_digit = bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
            if b.is_ascii_digit() || (b == b',' && next_digit && !seen_point) {
                i += 1;
            } else if b == b'.' && next_digit && !seen_point {
                seen_point = true;
                i += 1;
            } else {
                break;
            }
        }
        let digits: String = text[start..i].chars().filter(|c| *c != ',').collect();
        let negative = start > 0
            && bytes[start - 1] == b'-'
            && (start < 2
                || !matches!(bytes[start - 2], b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b')' | b']' | b'}'));
        if let Ok(value) = digits.parse::<f64>() {
            last = Some(if negative { -value } else { value });
        }
    }
    last
}
