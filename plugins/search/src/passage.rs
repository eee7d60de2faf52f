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

/// The `search` tool's observation: `Doc i(Title: …) text` lines inside
/// `<information>…</information>`, each passage's text cut to `max_chars` characters.
pub fn format_information(passages: &[Passage], max_chars: usize) -> String {
    let _ = (passages, max_chars);
    todo!("index helper")
}
