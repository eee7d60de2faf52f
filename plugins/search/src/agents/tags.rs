//! The tag format the search agents write (`<verify>`, `<search>`, `<answer>`, `<think>`)
//! and the validity rules the three agents share: exactly one block of the agent's tag,
//! and `<think>` blocks as the `think` setting allows.
//!
//! Tags are found case-insensitively and with whitespace allowed inside the angle
//! brackets (`< Answer >`, `</ answer>`), as small models write them.

use drmas_plugin_api::{Action, Parsed};
use serde::Deserialize;

/// One complete `<name>…</name>` block of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// Byte offset of the opening tag's `<`.
    pub start: usize,
    /// Byte offset just past the closing tag's `>`.
    pub end: usize,
    /// What lies between the tags, untrimmed.
    pub content: &'a str,
}

/// The blocks of one tag name in a text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Blocks<'a> {
    /// Each opening tag paired with the next closing tag, in order.
    pub complete: Vec<Block<'a>>,
    /// Opening tags never closed (an opening tag followed by another opening tag, or
    /// at the end) and closing tags without an opening tag.
    pub unpaired: usize,
}

impl<'a> Blocks<'a> {
    pub fn last(&self) -> Option<Block<'a>> {
        self.complete.last().copied()
    }
}

/// A tag found in a text: `<name>` or `</name>`.
struct Tag {
    start: usize,
    end: usize,
    closing: bool,
}

/// Every block of the tag `name` (lower-case ASCII) in `text`.
pub fn blocks<'a>(text: &'a str, name: &str) -> Blocks<'a> {
    let mut found = Blocks::default();
    let mut open: Option<Tag> = None;
    for tag in tags(text, |n| n == name) {
        match (tag.closing, open.take()) {
            (false, earlier) => {
                found.unpaired += usize::from(earlier.is_some());
                open = Some(tag);
            }
            (true, Some(opening)) => found.complete.push(Block {
                start: opening.start,
                end: tag.end,
                content: &text[opening.end..tag.start],
            }),
            (true, None) => found.unpaired += 1,
        }
    }
    found.unpaired += usize::from(open.is_some());
    found
}

/// The content of the last complete `<name>…</name>` block of `text`, untrimmed.
pub fn last_content<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    blocks(text, name).last().map(|b| b.content)
}

/// Every `<name>` and `</name>` in `text` whose (lower-cased) name `accept` takes, in
/// order. A name is ASCII letters, digits, `_` and `-`, starting with a letter.
fn tags(text: &str, accept: impl Fn(&str) -> bool) -> Vec<Tag> {
    // ASCII lower-casing keeps byte offsets, so positions index `text` too.
    let lower = text.to_ascii_lowercase();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find('<') {
        let start = from + at;
        from = start + 1;
        let mut rest = lower[start + 1..].trim_start();
        let closing = rest.starts_with('/');
        if closing {
            rest = rest[1..].trim_start();
        }
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(rest.len());
        let name = &rest[..name_len];
        if !name.starts_with(|c: char| c.is_ascii_alphabetic()) || !accept(name) {
            continue;
        }
        let after = rest[name_len..].trim_start();
        if after.starts_with('>') {
            let end = lower.len() - after.len() + 1;
            found.push(Tag {
                start,
                end,
                closing,
            });
            from = end;
        }
    }
    found
}

/// `text` without its complete `<think>` blocks and without any tag (`<search>`,
/// `</answer>`, a stray `<think>`), whitespace runs collapsed to one space, trimmed.
pub fn strip_markup(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut at = 0;
    for block in blocks(text, "think").complete {
        kept.push_str(&text[at..block.start]);
        kept.push(' ');
        at = block.end;
    }
    kept.push_str(&text[at..]);
    let mut plain = String::with_capacity(kept.len());
    let mut at = 0;
    for tag in tags(&kept, |_| true) {
        plain.push_str(&kept[at..tag.start]);
        plain.push(' ');
        at = tag.end;
    }
    plain.push_str(&kept[at..]);
    plain.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a completion may, must or must not reason in a `<think>…</think>` block
/// before its tag (the `think` key of every search agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Think {
    /// At most one `<think>` block, and if there is one it comes before the tag.
    #[default]
    Optional,
    /// Exactly one `<think>` block, before the tag.
    Required,
    /// No `<think>` block.
    Forbidden,
}

impl Think {
    pub const ALL: [Think; 3] = [Think::Optional, Think::Required, Think::Forbidden];

    /// The name the config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Think::Optional => "optional",
            Think::Required => "required",
            Think::Forbidden => "forbidden",
        }
    }
}

// By hand rather than derived: serde's "unknown variant" message would not say which
// key is wrong, and this type is the value of every agent's `think` key.
impl<'de> Deserialize<'de> for Think {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Think::ALL
            .into_iter()
            .find(|t| t.as_str() == name)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`think` must be \"optional\", \"required\" or \"forbidden\" (got {name:?})"
                ))
            })
    }
}

/// A completion read for one agent tag: its blocks and the format rules it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading<'a> {
    /// The last complete block of the agent's tag: the one that decides the action.
    pub last: Option<Block<'a>>,
    /// Why the completion is invalid, one entry per broken rule (empty when valid as
    /// far as the format goes; the agent adds its own rules about the content).
    pub issues: Vec<String>,
}

/// Reads `completion` for the tag `tag` under the `think` rule: more than one
/// `<tag>` block, an unpaired `<tag>` (next to a complete block) and each broken
/// `think` rule are issues. A missing block is left to the agent, which says what it
/// does instead.
pub fn read<'a>(completion: &'a str, tag: &str, think: Think) -> Reading<'a> {
    let found = blocks(completion, tag);
    let mut issues = Vec::new();
    let n = found.complete.len();
    if n > 1 {
        issues.push(format!(
            "{n} <{tag}> blocks; exactly one is allowed (the last one was used)"
        ));
    }
    if found.unpaired > 0 && !found.complete.is_empty() {
        issues.push(format!("a <{tag}> or </{tag}> without its partner"));
    }
    let first = found.complete.first().map(|b| b.start);
    issues.extend(think_issues(completion, think, tag, first));
    Reading {
        last: found.last(),
        issues,
    }
}

/// The `think` rules `completion` breaks; `first_tag` is where the agent's first
/// block starts, which every `<think>` block must end before.
fn think_issues(
    completion: &str,
    think: Think,
    tag: &str,
    first_tag: Option<usize>,
) -> Vec<String> {
    let thoughts = blocks(completion, "think");
    let n = thoughts.complete.len();
    let mut issues = Vec::new();
    match think {
        Think::Forbidden => {
            if n > 0 || thoughts.unpaired > 0 {
                issues.push("a <think> block, but think = \"forbidden\"".to_string());
            }
            return issues;
        }
        Think::Optional if n > 1 => {
            issues.push(format!(
                "{n} <think> blocks; at most one is allowed (think = \"optional\")"
            ));
        }
        Think::Required if n == 0 => {
            issues.push("no <think>…</think> block, but think = \"required\"".to_string());
        }
        Think::Required if n > 1 => {
            issues.push(format!(
                "{n} <think> blocks; exactly one is required (think = \"required\")"
            ));
        }
        Think::Optional | Think::Required => {}
    }
    if thoughts.unpaired > 0 {
        issues.push("a <think> or </think> without its partner".to_string());
    }
    if let Some(first_tag) = first_tag
        && thoughts.complete.iter().any(|t| t.end > first_tag)
    {
        issues.push(format!(
            "the <think> block must come before the <{tag}> block"
        ));
    }
    issues
}

/// A [`Parsed`] for `action`: valid when there are no issues, else invalid with the
/// issues joined into its note.
pub fn parsed(action: Action, issues: Vec<String>) -> Parsed {
    if issues.is_empty() {
        Parsed::valid(action)
    } else {
        Parsed::invalid(action, issues.join("; "))
    }
}

/// At most `max` characters of `s`, with `…` when cut (for quoting a completion in a
/// note).
pub fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_pair_each_opening_tag_with_the_next_closing_tag() {
        let text = "<Search >a</search> x < search>b</ SEARCH>";
        let found = blocks(text, "search");
        let contents: Vec<_> = found.complete.iter().map(|b| b.content).collect();
        assert_eq!(contents, ["a", "b"]);
        assert_eq!(found.unpaired, 0);
        assert_eq!(found.complete[1].start, 22);
        assert_eq!(found.complete[1].end, text.len());
    }

    #[test]
    fn unpaired_tags_are_counted_and_a_reopened_tag_restarts_the_block() {
        let found = blocks("<answer>a<answer>b</answer></answer><answer>c", "answer");
        assert_eq!(found.last().map(|b| b.content), Some("b"));
        assert_eq!(found.complete.len(), 1);
        assert_eq!(found.unpaired, 3);
    }

    #[test]
    fn a_longer_name_is_another_tag() {
        assert_eq!(
            blocks("<searcher>x</searcher>", "search"),
            Blocks::default()
        );
        assert_eq!(last_content("<search-x>y</search-x>", "search"), None);
    }

    #[test]
    fn markup_is_stripped_with_whole_think_blocks() {
        let text = "<think>plan\nsteps</think>\n<search>  capital of\tFrance </search> <b>";
        assert_eq!(strip_markup(text), "capital of France");
        assert_eq!(strip_markup("a < 3 and b>2"), "a < 3 and b>2");
        assert_eq!(strip_markup("<think>only thoughts</think>"), "");
    }

    #[test]
    fn shorten_cuts_on_characters() {
        assert_eq!(shorten("ééé", 2), "éé…");
        assert_eq!(shorten("ab", 2), "ab");
    }
}
