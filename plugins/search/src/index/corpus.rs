//! The corpus: JSONL, one passage a line, `{"id", "title", "text"}`. Search-R1's corpus
//! rows, `{"id", "contents"}` with the title on the first line of `contents`, are read
//! too. Blank lines are skipped; any other line that is not a passage is an error naming
//! `FILE:LINE` and the field.

use super::IndexError;
use serde::Deserialize;
use std::{
    fs::File,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
};

/// One passage as the corpus gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusPassage {
    /// The 1-based line it was read from.
    pub line: u64,
    pub id: String,
    pub title: String,
    pub text: String,
}

#[derive(Deserialize)]
struct Row {
    #[serde(default, deserialize_with = "optional_id")]
    id: Option<String>,
    title: Option<String>,
    text: Option<String>,
    contents: Option<String>,
}

fn optional_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    crate::protocol::id_text(d).map(Some)
}

/// The passages of a corpus file, in order; an iterator of results, so a bad line stops
/// the reader where it is.
pub struct CorpusReader {
    file: PathBuf,
    reader: BufReader<File>,
    line: u64,
    buf: String,
}

impl CorpusReader {
    pub fn open(file: &Path) -> Result<Self, IndexError> {
        let f = File::open(file).map_err(|source| IndexError::Io {
            path: file.to_path_buf(),
            source,
        })?;
        Ok(Self {
            file: file.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, f),
            line: 0,
            buf: String::new(),
        })
    }

    fn error(&self, message: String) -> IndexError {
        IndexError::Corpus {
            file: self.file.clone(),
            line: self.line,
            message,
        }
    }

    fn parse(&self, text: &str) -> Result<CorpusPassage, IndexError> {
        // serde would read `["a", "T", "x"]` as the fields in order; a passage is an object.
        if !text.starts_with('{') {
            return Err(self.error(format!(
                "not a JSON object {{\"id\", \"title\", \"text\"}}: {}",
                crate::passage::truncate_chars(text, 40)
            )));
        }
        let de = &mut serde_json::Deserializer::from_str(text);
        let row: Row = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // serde's "at line 1 column N": the line is ours, the column is in it.
            let text = inner.to_string();
            let suffix = format!(" at line {} column {}", inner.line(), inner.column());
            let what = format!(
                "{} (column {})",
                text.strip_suffix(&suffix).unwrap_or(&text),
                inner.column()
            );
            if inner.is_syntax() || inner.is_eof() {
                self.error(format!("not valid JSON: {what}"))
            } else if path == "." {
                self.error(what)
            } else {
                self.error(format!("field `{path}`: {what}"))
            }
        })?;
        let id = row
            .id
            .ok_or_else(|| self.error("missing field `id`".into()))?;
        let (title, text) = match (row.title, row.text, row.contents) {
            (Some(title), Some(text), _) => (title, text),
            (None, None, Some(contents)) => crate::protocol::split_contents(&contents),
            (None, _, _) => return Err(self.error("missing field `title`".into())),
            (_, None, _) => return Err(self.error("missing field `text`".into())),
        };
        Ok(CorpusPassage {
            line: self.line,
            id,
            title,
            text,
        })
    }
}

impl Iterator for CorpusReader {
    type Item = Result<CorpusPassage, IndexError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.buf.clear();
            self.line += 1;
            match self.reader.read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    return Some(Err(self.error(format!("cannot read the line: {e}"))));
                }
            }
            let text = self.buf.trim();
            if text.is_empty() {
                continue;
            }
            return Some(self.parse(text));
        }
    }
}
