//! Where one data set comes from (`[data] train` / `[data] val` of an experiment).

use serde::{Deserialize, Serialize};
use std::{collections::BTreeMap, path::PathBuf};

/// One data file, the rows of it to take, and how its columns map to our fields.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataSource {
    pub path: PathBuf,
    #[serde(default)]
    pub limit: Option<usize>,
    /// Rows left out at the start of the file (before `limit` counts): a training set
    /// that skips the rows a validation set takes with `limit`.
    #[serde(default)]
    pub skip: usize,
    /// Overrides the `source` field of the rows (used to split metrics).
    #[serde(default)]
    pub source: Option<String>,
    /// Maps our field names (`question`, `answer`, ...) to the file's column names.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}
