//! `MANIFEST.sha256` in the data folder: the sha256 of every file `prepare` wrote,
//! recorded when it wrote it, so a kept file is checked by content, not only by its
//! row count.

use super::wheel::hex;
use crate::data::{DataError, count_rows, write_atomic};
use sha2::{Digest, Sha256};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

/// The name of the file in the data folder that records each written file's sha256.
pub const MANIFEST: &str = "MANIFEST.sha256";

/// One `HASH  PATH` line per file, as `sha256sum -c` reads it.
pub(super) struct Manifest {
    dir: PathBuf,
    entries: BTreeMap<String, String>,
}

impl Manifest {
    pub(super) fn load(dir: &Path) -> Result<Self, DataError> {
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(DataError::Io { path, source }),
        };
        let entries = text
            .lines()
            .filter_map(|l| l.split_once("  "))
            .map(|(hash, name)| (name.to_string(), hash.to_string()))
            .collect();
        Ok(Self {
            dir: dir.to_path_buf(),
            entries,
        })
    }

    fn key(&self, path: &Path) -> String {
        path.strip_prefix(&self.dir)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    /// `Some(true)` when the file's content is what was recorded, `Some(false)` when it
    /// differs, `None` when nothing was recorded or the file is missing.
    pub(super) fn verify(&self, path: &Path) -> Result<Option<bool>, DataError> {
        let Some(want) = self.entries.get(&self.key(path)) else {
            return Ok(None);
        };
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(hex(&Sha256::digest(&bytes)) == *want)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(DataError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Whether `path` can be kept: not forced, its content what was recorded, and
    /// `rows` rows when a count is known in advance. `Some(rows)` when it is kept, and
    /// `log` says so, or that a damaged file will be rewritten.
    pub(super) fn keeps(
        &self,
        path: &Path,
        rows: Option<usize>,
        force: bool,
        log: &mut dyn FnMut(&str),
    ) -> Result<Option<usize>, DataError> {
        let intact = self.verify(path)?;
        if !force && intact == Some(true) {
            let found = count_rows(path)?;
            if let Some(n) = found.filter(|n| rows.is_none_or(|want| want == *n)) {
                log(&format!(
                    "{}: present ({n} rows, content verified), kept",
                    path.display()
                ));
                return Ok(Some(n));
            }
        }
        if intact == Some(false) && !force {
            log(&format!(
                "{}: damaged (its content differs from what was written), rewriting",
                path.display()
            ));
        }
        Ok(None)
    }

    pub(super) fn record(&mut self, path: &Path, bytes: &[u8]) {
        self.entries
            .insert(self.key(path), hex(&Sha256::digest(bytes)));
    }

    pub(super) fn save(&self) -> Result<(), DataError> {
        let text: String = self
            .entries
            .iter()
            .map(|(name, hash)| format!("{hash}  {name}\n"))
            .collect();
        write_atomic(&self.dir.join(MANIFEST), text.as_bytes())
    }
}
