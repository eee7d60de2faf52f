//! A retrieved passage and the observation an agent reads.

use serde::{Deserialize, Serialize};

/// One passage of the corpus, as a retriever returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    pub id: String,
    pub title: String,
    pub text: String,
    /// The retriever's score (BM25 for the local index); 0 when the server sent none.
    pub score: f32,
}

/// What an agent reads when a search finds nothing: said in words, so the model learns
/// to rephrase instead of answering from an empty block.
pub const NO_RESULTS: &str = "<information>No results.</information>";

/// The `search` tool's observation, in Search-R1's format: `<information>`, then one
/// `Doc i(Title: …) text` line per passage (i from 1), then `</information>`, each on its
/// own line. Each passage's text is cut to `max_chars` characters (never inside a
/// character) and marked with `…` when cut. Line breaks inside a title or a text become
/// spaces, so a passage stays one line. No passages: [`NO_RESULTS`].
pub fn format_information(passages: &[Passage], max_chars: usize) -> String {
    if passages.is_empty() {
        return NO_RESULTS.to_string();
    }
    let mut out = String::from("<information>\n");
    for (i, p) in passages.iter().enumerate() {
        out.push_str(&format!(
            "Doc {}(Title: {}) {}\n",
            i + 1,
            one_line(&p.title),
            one_line(&truncate_chars(&p.text, max_chars)),
        ));
    }
    out.push_str("</information>");
    out
}

/// The first `max_chars` characters of `text`, with `…` added when some were cut.
pub fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

fn one_line(text: &str) -> String {
    text.replace("\r\n", " ").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(title: &str, text: &str) -> Passage {
        Passage {
            id: "1".into(),
            title: title.into(),
            text: text.into(),
            score: 1.0,
        }
    }

    #[test]
    fn two_passages_in_search_r1_format() {
        let p = [
            passage("Paris", "Paris is the capital of France."),
            passage("Lyon", "Lyon is a city."),
        ];
        assert_eq!(
            format_information(&p, 100),
            "<information>\nDoc 1(Title: Paris) Paris is the capital of France.\nDoc 2(Title: Lyon) Lyon is a city.\n</information>"
        );
    }

    #[test]
    fn text_is_cut_at_a_character_not_a_byte() {
        // Each of these is more than one byte in UTF-8.
        let p = [passage("Café", "éèêë日本語🙂x")];
        assert_eq!(
            format_information(&p, 6),
            "<information>\nDoc 1(Title: Café) éèêë日本…\n</information>"
        );
        // Exactly max_chars characters: nothing cut, no mark.
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcd", 3), "abc…");
        assert_eq!(truncate_chars("", 0), "");
        assert_eq!(truncate_chars("a", 0), "…");
    }

    #[test]
    fn a_passage_stays_on_one_line_and_none_says_so() {
        let p = [passage("A\nB", "one\r\ntwo\nthree")];
        assert_eq!(
            format_information(&p, 100),
            "<information>\nDoc 1(Title: A B) one two three\n</information>"
        );
        assert_eq!(
            format_information(&[], 100),
            "<information>No results.</information>"
        );
    }
}
