//! Reading an experiment file: syntax and schema errors with their position and key.

use super::{
    error::{ConfigError, ConfigErrors},
    experiment::Experiment,
    schema::ExperimentFile,
    source::{KeyPath, line_col},
    validate::validate,
};
use std::path::Path;
use toml::de::DeTable;

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
