//! Reading an experiment file: syntax and schema errors with their position and key.

use super::{
    error::{ConfigError, ConfigErrors},
    experiment::{AppliedOverride, Experiment},
    overrides::{Override, is_under},
    schema::ExperimentFile,
    source::{KeyPath, SourceMap, line_col},
    validate::validate,
};
use std::path::Path;
use toml::de::DeTable;

/// Reads, parses and validates an experiment file (everything but plugins: see
/// [`super::check_components`]).
pub fn load_experiment(path: &Path) -> Result<Experiment, ConfigErrors> {
    load_experiment_with(path, &[])
}

/// Reads an experiment file with `overrides` applied on top (`--set`), in order: each
/// is typed and checked like the file, and an error about a value an override set
/// names the override.
pub fn load_experiment_with(
    path: &Path,
    overrides: &[Override],
) -> Result<Experiment, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        line: 0,
        col: 0,
        key: String::new(),
        message: format!("cannot read experiment file: {e}"),
    })?;
    parse_experiment_with(path, text, overrides)
}

/// Parses and validates experiment `text`; `path` is used in messages.
pub fn parse_experiment(path: &Path, text: String) -> Result<Experiment, ConfigErrors> {
    parse_experiment_with(path, text, &[])
}

/// Parses experiment `text` with `overrides` on top, and validates the result.
pub fn parse_experiment_with(
    path: &Path,
    text: String,
    overrides: &[Override],
) -> Result<Experiment, ConfigErrors> {
    let (file, overrides) = if overrides.is_empty() {
        (deserialize(path, &text)?, Vec::new())
    } else {
        deserialize_with(path, &text, overrides)?
    };
    let experiment = Experiment {
        path: path.to_path_buf(),
        text,
        file,
        overrides,
    };
    let errors = validate(&experiment);
    if errors.is_empty() {
        Ok(experiment)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The file's table with the overrides set on it, deserialized. The file's own
/// problems keep their positions; a problem in what an override set names it.
fn deserialize_with(
    path: &Path,
    text: &str,
    overrides: &[Override],
) -> Result<(ExperimentFile, Vec<AppliedOverride>), ConfigErrors> {
    // Syntax first, with the same messages as without overrides.
    let root = parse_syntax(path, text)?;
    let map = SourceMap::new(text, root);
    let mut table: toml::Table = toml::from_str(text).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        line: 1,
        col: 1,
        key: String::new(),
        message: format!("TOML syntax: {}", e.message().trim_end()),
    })?;
    let mut applied = Vec::new();
    let mut errors = Vec::new();
    for o in overrides {
        match o.apply_noting(&mut table) {
            Ok((at, dropped)) => applied.push(AppliedOverride {
                set: o.clone(),
                path: at.to_string(),
                dropped,
            }),
            Err(message) => errors.push(ConfigError {
                file: path.to_path_buf(),
                line: 0,
                col: 0,
                key: o.key(),
                message: format!("{}: {message}", o.origin),
            }),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let file = serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let at = KeyPath::from(e.path());
        let key = at.to_string();
        let message = e.into_inner().message().trim_end().to_string();
        match applied.iter().rev().find(|o| is_under(&key, &o.path)) {
            Some(o) => ConfigError {
                file: path.to_path_buf(),
                line: 0,
                col: 0,
                key,
                message: format!("{}: {message}", o.set.origin),
            },
            None => {
                let (line, col) = map.key_position(&at);
                ConfigError {
                    file: path.to_path_buf(),
                    line,
                    col,
                    key,
                    message,
                }
            }
        }
    })?;
    Ok((file, applied))
}

/// The file's syntax tree, or the syntax error at its position.
fn parse_syntax<'a>(path: &Path, text: &'a str) -> Result<toml::Spanned<DeTable<'a>>, ConfigError> {
    DeTable::parse(text).map_err(|e| {
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
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        ConfigError {
            file: path.to_path_buf(),
            line,
            col,
            key: String::new(),
            message: format!("TOML syntax: {message}"),
        }
    })
}

fn deserialize(path: &Path, text: &str) -> Result<ExperimentFile, ConfigError> {
    parse_toml(path, text)
}

/// Deserializes a TOML file's `text` into `T`; a syntax or schema error names
/// `path:line:col` and the key path. Other drmas files (a sweep) use it too.
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<T, ConfigError> {
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
    let root = parse_syntax(path, text)?;
    let deserializer = toml::de::Deserializer::from(root);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = KeyPath::from(e.path()).to_string();
        let inner = e.into_inner();
        at(inner.span(), key, inner.message().trim_end().to_string())
    })
}
