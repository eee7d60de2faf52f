//! Search-R1's retrieval protocol: the JSON of `POST /retrieve`.
//!
//! Request: `{"queries": ["…", …], "topk": 3, "return_scores": true}`.
//! Response: `{"result": [[doc, …], …]}`, one list per query in the order of the queries,
//! or with `return_scores`, `{"result": [[{"document": doc, "score": 1.5}, …], …]}`.
//! A `doc` is a corpus row: `{"id": "17", "contents": "\"Title\"\ntext"}` — the title on
//! the first line of `contents` (in double quotes in Search-R1's wiki corpus), the text
//! after it. Search-R1's BM25 server sends `title` and `text` beside `contents` and no
//! `id`; both shapes are read.

use crate::passage::Passage;
use serde::{Deserialize, Deserializer, Serialize};

/// The body of `POST /retrieve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrieveRequest {
    pub queries: Vec<String>,
    /// Passages per query; the server's default when absent or null.
    #[serde(default)]
    pub topk: Option<usize>,
    #[serde(default)]
    pub return_scores: bool,
}

/// One retrieved document on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    /// Search-R1's corpus ids are strings (`"17"`); numbers are read as their text.
    #[serde(
        default,
        deserialize_with = "optional_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<String>,
    /// `"Title"` on the first line, the text after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    /// Sent by Search-R1's BM25 server beside `contents`; used when `contents` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A document and its score (`return_scores: true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredDoc {
    pub document: Doc,
    pub score: f32,
}

/// One element of a result list: scored or plain, as the request asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Hit {
    Scored(ScoredDoc),
    Plain(Doc),
}

/// The answer to `POST /retrieve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrieveResponse {
    pub result: Vec<Vec<Hit>>,
}

/// Search-R1's `contents`: the title in double quotes on the first line, then the text.
pub fn contents_of(title: &str, text: &str) -> String {
    format!("\"{title}\"\n{text}")
}

/// Title and text of a `contents` string: the first line (without the surrounding
/// double quotes, if it has them) and the rest.
pub fn split_contents(contents: &str) -> (String, String) {
    let (first, rest) = contents.split_once('\n').unwrap_or((contents, ""));
    let first = first.trim();
    let title = first
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(first);
    (title.to_string(), rest.to_string())
}

impl From<&Passage> for Doc {
    /// A corpus row as Search-R1's dense server sends it: `id` and `contents`.
    fn from(p: &Passage) -> Self {
        Doc {
            id: Some(p.id.clone()),
            contents: Some(contents_of(&p.title, &p.text)),
            title: None,
            text: None,
        }
    }
}

impl Doc {
    /// The passage this document holds; `score` is the server's (0 when it sent none).
    /// An error says which field is missing.
    pub fn into_passage(self, score: f32) -> Result<Passage, String> {
        let (title, text) = match (self.contents, self.title, self.text) {
            (Some(contents), _, _) => split_contents(&contents),
            (None, Some(title), Some(text)) => (title, text),
            (None, _, _) => {
                return Err("a document has no `contents` (nor `title` and `text`)".into());
            }
        };
        Ok(Passage {
            id: self.id.unwrap_or_default(),
            title,
            text,
            score,
        })
    }
}

impl RetrieveResponse {
    /// The response to a request, from one list of passages per query.
    pub fn from_passages(results: &[Vec<Passage>], with_scores: bool) -> Self {
        let result = results
            .iter()
            .map(|passages| {
                passages
                    .iter()
                    .map(|p| {
                        let document = Doc::from(p);
                        if with_scores {
                            Hit::Scored(ScoredDoc {
                                document,
                                score: p.score,
                            })
                        } else {
                            Hit::Plain(document)
                        }
                    })
                    .collect()
            })
            .collect();
        RetrieveResponse { result }
    }

    /// One list of passages per query, in order.
    pub fn into_passages(self) -> Result<Vec<Vec<Passage>>, String> {
        self.result
            .into_iter()
            .enumerate()
            .map(|(q, hits)| {
                hits.into_iter()
                    .enumerate()
                    .map(|(i, hit)| {
                        let (doc, score) = match hit {
                            Hit::Scored(s) => (s.document, s.score),
                            Hit::Plain(d) => (d, 0.0),
                        };
                        doc.into_passage(score)
                            .map_err(|e| format!("result {q}, document {i}: {e}"))
                    })
                    .collect()
            })
            .collect()
    }
}

/// A response written list by list into one buffer, for a server: each passage goes
/// straight from the searcher's [`Passage`] to JSON (no [`Doc`] copies, no tree of the
/// whole answer), so the memory of an answer is its bytes, and a server can stop as soon
/// as it grows past a limit. The bytes are those of [`RetrieveResponse`] serialized.
pub struct ResponseWriter {
    buf: Vec<u8>,
    lists: usize,
    with_scores: bool,
}

/// A passage as Search-R1's dense server sends it, borrowed from the [`Passage`].
#[derive(Serialize)]
struct DocOut<'a> {
    id: &'a str,
    contents: String,
}

#[derive(Serialize)]
struct ScoredOut<'a> {
    document: DocOut<'a>,
    score: f32,
}

impl ResponseWriter {
    pub fn new(with_scores: bool) -> Self {
        Self {
            buf: b"{\"result\":[".to_vec(),
            lists: 0,
            with_scores,
        }
    }

    /// Starts the next query's list.
    pub fn begin_list(&mut self) {
        if self.lists > 0 {
            self.buf.push(b',');
        }
        self.lists += 1;
        self.buf.push(b'[');
    }

    /// Adds a passage to the current list; `first` for the list's first.
    pub fn push(&mut self, passage: &Passage, first: bool) {
        if !first {
            self.buf.push(b',');
        }
        let document = DocOut {
            id: &passage.id,
            contents: contents_of(&passage.title, &passage.text),
        };
        // Writing into a Vec cannot fail, and these types always serialize.
        let written = if self.with_scores {
            serde_json::to_writer(
                &mut self.buf,
                &ScoredOut {
                    document,
                    score: passage.score,
                },
            )
        } else {
            serde_json::to_writer(&mut self.buf, &document)
        };
        written.expect("a passage serializes into memory");
    }

    /// Ends the current list.
    pub fn end_list(&mut self) {
        self.buf.push(b']');
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The whole body.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(b"]}");
        self.buf
    }
}

/// Parses a response body to a request of `queries` queries: one list per query, or an
/// error saying what is wrong (not JSON, the wrong shape, the wrong number of lists).
pub fn parse_response(body: &str, queries: usize) -> Result<Vec<Vec<Passage>>, String> {
    let response: RetrieveResponse = serde_json::from_str(body).map_err(|e| {
        format!(
            "{e} (expected {{\"result\": [[{{\"contents\": …}}, …], …]}}; the body starts {:?})",
            crate::passage::truncate_chars(body, 120)
        )
    })?;
    if response.result.len() != queries {
        return Err(format!(
            "{} result lists for {queries} queries",
            response.result.len()
        ));
    }
    response.into_passages()
}

/// An id that is a string or an integer, as its text. Corpora written by pandas or by
/// hand number their rows; Search-R1's quote them.
pub fn id_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct IdVisitor;
    impl serde::de::Visitor<'_> for IdVisitor {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or an integer")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
            Ok(v)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    deserializer.deserialize_any(IdVisitor)
}

fn optional_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Id(#[serde(deserialize_with = "id_text")] String);
    Ok(Option::<Id>::deserialize(deserializer)?.map(|id| id.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_split_with_and_without_quotes() {
        assert_eq!(
            split_contents("\"Paris\"\nParis is the capital.\nSecond line."),
            ("Paris".into(), "Paris is the capital.\nSecond line.".into())
        );
        assert_eq!(
            split_contents("Paris\nParis is the capital."),
            ("Paris".into(), "Paris is the capital.".into())
        );
        assert_eq!(
            split_contents("\"Only a title\""),
            ("Only a title".into(), "".into())
        );
        // A quote inside the title stays.
        assert_eq!(
            split_contents("\"The \"Boss\"\"\nx"),
            ("The \"Boss\"".into(), "x".into())
        );
        assert_eq!(
            split_contents(&contents_of("T", "x\ny")),
            ("T".into(), "x\ny".into())
        );
    }

    #[test]
    fn numeric_ids_are_read_as_text() {
        let doc: Doc = serde_json::from_str(r#"{"id": 17, "contents": "\"A\"\nb"}"#).unwrap();
        assert_eq!(doc.id.as_deref(), Some("17"));
        let doc: Doc = serde_json::from_str(r#"{"contents": "\"A\"\nb"}"#).unwrap();
        assert_eq!(doc.id, None);
        let err = serde_json::from_str::<Doc>(r#"{"id": [1], "contents": ""}"#).unwrap_err();
        assert!(
            err.to_string().contains("expected a string or an integer"),
            "{err}"
        );
    }

    #[test]
    fn the_writer_writes_the_response_serde_writes() {
        let passage = |id: &str, title: &str, text: &str, score: f32| Passage {
            id: id.into(),
            title: title.into(),
            text: text.into(),
            score,
        };
        let results = vec![
            vec![
                passage("1", "Paris", "Paris is \"the\" capital.\nÉ 🙂", 1.25),
                passage("2", "Lyon", "", 0.1),
            ],
            vec![],
            vec![passage("", "", "x", f32::MIN_POSITIVE)],
        ];
        for with_scores in [false, true] {
            let mut w = ResponseWriter::new(with_scores);
            for list in &results {
                w.begin_list();
                for (i, p) in list.iter().enumerate() {
                    w.push(p, i == 0);
                }
                w.end_list();
            }
            let expected =
                serde_json::to_string(&RetrieveResponse::from_passages(&results, with_scores))
                    .unwrap();
            assert_eq!(String::from_utf8(w.finish()).unwrap(), expected);
        }
        assert_eq!(ResponseWriter::new(true).finish(), b"{\"result\":[]}");
    }
}
