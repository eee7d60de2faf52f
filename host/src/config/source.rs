//! Positions of keys in the experiment file, for semantic errors found after parsing.

use std::{fmt, ops::Range};
use toml::{
    Spanned,
    de::{DeTable, DeValue},
};

/// A path into the document: `agents[1].sampling.temperature`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyPath(Vec<Segment>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

impl KeyPath {
    pub fn root() -> Self {
        Self::default()
    }
    pub fn key(&self, key: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Segment::Key(key.to_string()));
        p
    }
    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Segment::Index(i));
        p
    }
    /// The path without its last segment; `None` at the root.
    pub fn parent(&self) -> Option<Self> {
        let (_, rest) = self.0.split_last()?;
        Some(Self(rest.to_vec()))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    if is_bare_key(k) {
                        f.write_str(k)?;
                    } else {
                        // Quoted as TOML quotes it, so `require."my.plugin"` stays one key.
                        write!(f, "{}", toml::Value::from(k.as_str()))?;
                    }
                }
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A key TOML writes without quotes.
fn is_bare_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl From<&serde_path_to_error::Path> for KeyPath {
    fn from(path: &serde_path_to_error::Path) -> Self {
        use serde_path_to_error::Segment as S;
        path.iter().fold(Self::root(), |p, seg| match seg {
            S::Seq { index } => p.index(*index),
            S::Map { key } => p.key(key),
            S::Enum { variant } => p.key(variant),
            S::Unknown => p,
        })
    }
}

/// The parsed document with spans, plus the text to turn byte offsets into line:col.
pub struct SourceMap<'a> {
    text: &'a str,
    root: Spanned<DeTable<'a>>,
}

impl<'a> SourceMap<'a> {
    pub fn new(text: &'a str, root: Spanned<DeTable<'a>>) -> Self {
        Self { text, root }
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        line_col(self.text, offset)
    }

    /// The span of the value at `path`, or of the deepest ancestor that exists (so a
    /// missing key points at the table that should hold it).
    pub fn span(&self, path: &KeyPath) -> Range<usize> {
        let mut span = self.root.span();
        let mut table: Option<&DeTable<'a>> = Some(self.root.get_ref());
        let mut value: Option<&DeValue<'a>> = None;
        for seg in &path.0 {
            let next: Option<&Spanned<DeValue<'a>>> = match (seg, table, value) {
                (Segment::Key(k), Some(t), _) => t.get(k.as_str()),
                (Segment::Index(i), _, Some(DeValue::Array(a))) => a.get(*i),
                _ => None,
            };
            let Some(next) = next else { break };
            span = next.span();
            value = Some(next.get_ref());
            table = match next.get_ref() {
                DeValue::Table(t) => Some(t),
                _ => None,
            };
        }
        span
    }

    /// 1-based line and column where the value at `path` (or its nearest ancestor) starts.
    pub fn position(&self, path: &KeyPath) -> (usize, usize) {
        self.line_col(self.span(path).start)
    }

    /// 1-based line and column of the key that ends `path` (`epsilom` in
    /// `config = { epsilom = 1 }`), where an unknown key is reported; the value's
    /// position when the last segment is not a key of a table.
    pub fn key_position(&self, path: &KeyPath) -> (usize, usize) {
        let (Some(Segment::Key(last)), Some(parent)) = (path.0.last(), path.parent()) else {
            return self.position(path);
        };
        let mut table: Option<&DeTable<'a>> = Some(self.root.get_ref());
        let mut value: Option<&DeValue<'a>> = None;
        for seg in &parent.0 {
            let next = match (seg, table, value) {
                (Segment::Key(k), Some(t), _) => t.get(k.as_str()),
                (Segment::Index(i), _, Some(DeValue::Array(a))) => a.get(*i),
                _ => None,
            };
            value = next.map(Spanned::get_ref);
            table = match value {
                Some(DeValue::Table(t)) => Some(t),
                _ => None,
            };
        }
        match table.and_then(|t| t.get_key_value(last.as_str())) {
            Some((key, _)) => self.line_col(key.span().start),
            None => self.position(path),
        }
    }
}

pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_print_as_dotted_text() {
        let p = KeyPath::root()
            .key("agents")
            .index(1)
            .key("sampling")
            .key("top_p");
        assert_eq!(p.to_string(), "agents[1].sampling.top_p");
    }

    #[test]
    fn keys_that_are_not_bare_are_quoted() {
        let p = KeyPath::root()
            .key("plugins")
            .key("require")
            .key("my.plugin");
        assert_eq!(p.to_string(), "plugins.require.\"my.plugin\"");
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("a = 1\nbb = 2\n", 6), (2, 1));
        assert_eq!(line_col("a = 1\nbb = 2\n", 11), (2, 6));
    }
}
