//! Reading `<name>…</name>` blocks out of a completion, as agents that answer in tags
//! (`<answer>`, `<verify>`, `<search>`, `<think>`) do.
//!
//! Tags are found case-insensitively and with whitespace inside the angle brackets
//! (`< Answer >`, `</ answer>`), as small models write them. A tag name is ASCII
//! letters, digits, `_` and `-`, starting with a letter, so `<searcher>` is not a
//! `<search>` tag and `a < 3` is not a tag at all.

/// One `<name>…</name>` block of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// Byte offset of the opening tag's `<`.
    pub start: usize,
    /// Byte offset just past the closing tag's `>` (the end of the text for a block
    /// cut off there).
    pub end: usize,
    /// What lies between the tags, untrimmed.
    pub content: &'a str,
}

/// The blocks of one tag name in a text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Blocks<'a> {
    /// Each opening tag paired with the next closing tag, in order. An opening tag
    /// followed by another opening tag is dropped: the second one starts the block.
    pub complete: Vec<Block<'a>>,
    /// Opening tags never closed and closing tags without an opening tag.
    pub unpaired: usize,
    /// The last opening tag when nothing closes it, with the rest of the text as its
    /// content: a block cut off by a stop string or the token limit. (It is counted in
    /// `unpaired` too.)
    pub cut: Option<Block<'a>>,
}

impl<'a> Blocks<'a> {
    /// The last complete block: the one an agent's format usually says decides.
    pub fn last(&self) -> Option<Block<'a>> {
        self.complete.last().copied()
    }

    /// The first block, complete or cut off at the end.
    pub fn first(&self) -> Option<Block<'a>> {
        match (self.complete.first(), self.cut) {
            (Some(b), Some(cut)) if cut.start < b.start => Some(cut),
            (Some(b), _) => Some(*b),
            (None, cut) => cut,
        }
    }
}

/// A tag found in a text: `<name>` or `</name>`.
struct Tag {
    start: usize,
    end: usize,
    closing: bool,
}

/// Every block of the tag `name` in `text`.
///
/// ```
/// use drmas_plugin_api::kit::blocks;
///
/// let found = blocks("<Answer> Paris </answer> or <answer>Lyon", "answer");
/// assert_eq!(found.complete.len(), 1);
/// assert_eq!(found.last().map(|b| b.content), Some(" Paris "));
/// assert_eq!(found.cut.map(|b| b.content), Some("Lyon"));
/// assert_eq!(found.unpaired, 1);
/// ```
pub fn blocks<'a>(text: &'a str, name: &str) -> Blocks<'a> {
    let name = name.to_ascii_lowercase();
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
    if let Some(opening) = open {
        found.unpaired += 1;
        found.cut = Some(Block {
            start: opening.start,
            end: text.len(),
            content: &text[opening.end..],
        });
    }
    found
}

/// The content of the last complete `<name>…</name>` block of `text`, untrimmed.
///
/// ```
/// use drmas_plugin_api::kit::last_content;
///
/// let completion = "<verify>no</verify> on second thought <verify> Yes </verify>";
/// assert_eq!(last_content(completion, "verify"), Some(" Yes "));
/// assert_eq!(last_content("<verify>yes", "verify"), None);
/// ```
pub fn last_content<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    blocks(text, name).last().map(|b| b.content)
}

/// The first block of any of `names` in `text`, counting one cut off at the end (a
/// completion stopped at `</calc>` may lose the stop string), with the name it has.
///
/// ```
/// use drmas_plugin_api::kit::first_block;
///
/// let (name, block) = first_block("try <calc>3 + 5</calc> then <answer>8</answer>", &["calc", "answer"]).unwrap();
/// assert_eq!((name, block.content), ("calc", "3 + 5"));
/// let (name, block) = first_block("<answer> 8", &["calc", "answer"]).unwrap();
/// assert_eq!((name, block.content), ("answer", " 8"));
/// assert!(first_block("no tags", &["calc"]).is_none());
/// ```
pub fn first_block<'a, 'n>(text: &'a str, names: &[&'n str]) -> Option<(&'n str, Block<'a>)> {
    names
        .iter()
        .filter_map(|&name| Some((name, blocks(text, name).first()?)))
        .min_by_key(|(_, block)| block.start)
}

/// Every `<name>` and `</name>` in `text` whose (lower-cased) name `accept` takes, in
/// order.
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
/// `</answer>`, a stray `<think>`), whitespace runs collapsed to one space, trimmed:
/// what a completion says once its markup is gone.
///
/// ```
/// use drmas_plugin_api::kit::strip_markup;
///
/// let text = "<think>plan</think>\n<search>  capital of\tFrance </search>";
/// assert_eq!(strip_markup(text), "capital of France");
/// ```
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

/// At most `max` characters of `s`, with `…` when cut: for quoting a completion in a
/// [`Parsed`](crate::Parsed) note.
///
/// ```
/// use drmas_plugin_api::kit::shorten;
///
/// assert_eq!(shorten("approve, I think", 7), "approve…");
/// assert_eq!(shorten("yes", 7), "yes");
/// ```
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
        assert_eq!(found.cut, None);
        assert_eq!(found.complete[1].start, 22);
        assert_eq!(found.complete[1].end, text.len());
        // The name asked for is matched case-insensitively too.
        assert_eq!(blocks(text, "SEARCH").complete.len(), 2);
    }

    #[test]
    fn unpaired_tags_are_counted_and_a_reopened_tag_restarts_the_block() {
        let found = blocks("<answer>a<answer>b</answer></answer><answer>c", "answer");
        assert_eq!(found.last().map(|b| b.content), Some("b"));
        assert_eq!(found.complete.len(), 1);
        assert_eq!(found.unpaired, 3);
        assert_eq!(found.cut.map(|b| b.content), Some("c"));
        assert_eq!(found.first().map(|b| b.content), Some("b"));
    }

    #[test]
    fn the_first_block_may_be_the_cut_one() {
        let found = blocks("<calc>1 + 2", "calc");
        assert_eq!(
            found.first().map(|b| (b.start, b.end, b.content)),
            Some((0, 11, "1 + 2"))
        );
        assert_eq!(found.last(), None);
        assert_eq!(blocks("", "calc"), Blocks::default());
    }

    #[test]
    fn a_longer_name_is_another_tag() {
        assert_eq!(
            blocks("<searcher>x</searcher>", "search"),
            Blocks::default()
        );
        assert_eq!(last_content("<search-x>y</search-x>", "search"), None);
        assert_eq!(last_content("<verify-x>y</verify>", "verify"), None);
    }

    #[test]
    fn the_first_of_several_names_decides_by_position() {
        let text = "<answer>8</answer> <calc>3 + 5</calc>";
        assert_eq!(
            first_block(text, &["calc", "answer"]).map(|(n, b)| (n, b.content)),
            Some(("answer", "8"))
        );
        // A cut-off block later than a complete one of another name does not win.
        let text = "<calc>3</calc> <answer>8";
        assert_eq!(
            first_block(text, &["answer", "calc"]).map(|(n, b)| (n, b.content)),
            Some(("calc", "3"))
        );
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
        assert_eq!(shorten("", 0), "");
    }
}
