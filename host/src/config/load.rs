//! Reading an experiment file: syntax and schema errors with their position and key.

use super::{
    error::{ConfigError, ConfigErrors},
    schema::{DataSource, ExperimentFile},
    source::{KeyPath, SourceMap, line_col},
    validate::validate,
};
use crate::plugin::ResolvePolicy;
use std::path::{Path, PathBuf};
use toml::de::DeTable;

/// A parsed and validated experiment, with its text kept for error positions.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub path: PathBuf,
    pub text: String,
    pub file: ExperimentFile,
}

/// Reads, parses and validates an experiment file (everything but plugins: see
/// [`super::check_components`]).
pub fn load_experiment(path: &Path) -> Result<Experiment, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        line: 0,
        col: 0,
        key: String::new(),
        message: format!("cannot read experiment file: {e}"),
    })?;
    parse_experiment(path, text)
}

/// Parses and validates experiment `text`; `path` is used in messages.
pub fn parse_experiment(path: &Path, text: String) -> Result<Experiment, ConfigErrors> {
    let file = deserialize(path, &text)?;
    let experiment = Experiment {
        path: path.to_path_buf(),
        text,
        file,
    };
    let errors = validate(&experiment);
    if errors.is_empty() {
        Ok(experiment)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn deserialize(path: &Path, text: &str) -> Result<ExperimentFile, ConfigError> {
    let at = |span: Option<std::ops::Range<usize>>, key: String, message: String| {
        let (line, col) = span.map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        ConfigError {
            file: path.to_path_buf(),
            line,
            col,
            key,
            message,
        }
    };
    let root = DeTable::parse(text).map_err(|e| {
        let mut message = e.message().trim_end().to_string();
        // The parser says only "duplicate key"; its span is the second definition, so
        // name the key (or table) it covers.
        if message == "duplicate key"
            && let Some(key) = e
                .span()
                .and_then(|s| text.get(s))
                .map(str::trim)
                .filter(|k| !k.is_empty())
        {
            message = format!("duplicate key `{key}`");
        }
        at(e.span(), String::new(), format!("TOML syntax: {message}"))
    })?;
    let deserializer = toml::de::Deserializer::from(root);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = KeyPath::from(e.path()).to_string();
        let inner = e.into_inner();
        at(inner.span(), key, inner.message().trim_end().to_string())
    })
}

impl Experiment {
    /// Positions of keys in this file.
    pub fn source_map(&self) -> SourceMap<'_> {
        SourceMap::new(
            &self.text,
            DeTable::parse(&self.text).expect("parsed at load"),
        )
    }

    /// An error about the value at `path`.
    pub fn error_at(&self, path: &KeyPath, message: impl Into<String>) -> ConfigError {
        self.error(self.source_map().position(path), path, message.into())
    }

    /// An error about the key that ends `path` itself (an unknown key), at the key's
    /// name rather than its value.
    pub fn error_at_key(&self, path: &KeyPath, message: impl Into<String>) -> ConfigError {
        self.error(self.source_map().key_position(path), path, message.into())
    }

    fn error(&self, (line, col): (usize, usize), path: &KeyPath, message: String) -> ConfigError {
        ConfigError {
            file: self.path.clone(),
            line,
            col,
            key: path.to_string(),
            message,
        }
    }

    /// The `[data]` sources, `train` first, each with its key path.
    pub fn data_sources(&self) -> impl Iterator<Item = (KeyPath, &DataSource)> {
        let val = KeyPath::root().key("data").key("val");
        let data = &self.file.data;
        data.train
            .iter()
            .map(|t| (KeyPath::root().key("data").key("train"), t))
            .chain(
                data.val
                    .iter()
                    .enumerate()
                    .map(move |(i, v)| (val.index(i), v)),
            )
    }

    /// The experiment's plugin requirements and overrides. Validation has already
    /// checked that every requirement parses.
    pub fn resolve_policy(&self) -> ResolvePolicy {
        let plugins = &self.file.plugins;
        ResolvePolicy {
            require: plugins
                .require
                .iter()
                .filter_map(|(name, req)| {
                    Some((name.clone(), semver::VersionReq::parse(req).ok()?))
                })
                .collect(),
            overrides: plugins.overrides.iter().cloned().collect(),
        }
    }

    /// Where outputs go: `output_dir`, or `runs/<name>`.
    pub fn output_dir(&self) -> PathBuf {
        self.file
            .experiment
            .output_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(&self.file.experiment.name))
    }
}

/// A component's config table as the TOML text its plugin receives.
pub fn config_text(table: &Option<toml::Table>) -> String {
    table
        .as_ref()
        .map(|t| toml::to_string(t).expect("a TOML table serializes"))
        .unwrap_or_default()
}
