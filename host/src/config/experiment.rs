//! A parsed and validated experiment: its file's schema, its text (for error
//! positions), and what the rest of drmas asks of it. Loading lives in `load`, checks
//! in `validate`; both use this type, neither defines it.

use super::{
    error::ConfigError,
    overrides::{Override, is_under},
    schema::{DataSource, ExperimentFile},
    source::{KeyPath, SourceMap},
};
use crate::plugin::ResolvePolicy;
use std::path::PathBuf;
use toml::de::DeTable;

/// A parsed and validated experiment, with its text kept for error positions.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub path: PathBuf,
    pub text: String,
    pub file: ExperimentFile,
    /// The overrides set on top of the file (`--set`, a sweep arm), in order.
    pub overrides: Vec<AppliedOverride>,
}

/// An override as applied: what the user set, and the key path it resolved to
/// (`agents[1].sampling.temperature` for `agents.verifier.sampling.temperature`).
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedOverride {
    pub set: Override,
    pub path: String,
    /// The keys below `path` the file had and the override's table value lacks: a table
    /// value replaces the whole table, so they are no longer set (their defaults apply).
    pub dropped: Vec<String>,
}

impl AppliedOverride {
    /// What replacing the table dropped, for a note; `None` when nothing was.
    pub fn dropped_note(&self) -> Option<String> {
        if self.dropped.is_empty() {
            return None;
        }
        let keys: Vec<String> = self.dropped.iter().map(|k| format!("`{k}`")).collect();
        Some(format!(
            "{} replaces the whole table `{}`: {} {} no longer set (defaults apply); set one key alone (`--set {}.KEY=VALUE`) to keep the others",
            self.set.origin,
            self.path,
            keys.join(", "),
            if keys.len() == 1 { "is" } else { "are" },
            self.set.key()
        ))
    }
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
        let key = path.to_string();
        // A value an override set is not where the file's position would point.
        if let Some(o) = self
            .overrides
            .iter()
            .rev()
            .find(|o| is_under(&key, &o.path))
        {
            return ConfigError {
                file: self.path.clone(),
                line: 0,
                col: 0,
                key,
                message: format!("{}: {message}", o.set.origin),
            };
        }
        ConfigError {
            file: self.path.clone(),
            line,
            col,
            key: path.to_string(),
            message,
        }
    }

    /// The experiment as run: the file's text when nothing overrides it, else its
    /// table with the overrides set, as TOML under a comment naming the file and them.
    /// It loads as this same experiment.
    pub fn resolved_text(&self) -> String {
        if self.overrides.is_empty() {
            return self.text.clone();
        }
        let mut table: toml::Table = toml::from_str(&self.text).expect("parsed at load");
        for o in &self.overrides {
            o.set.apply(&mut table).expect("applied at load");
        }
        let mut text = format!(
            "# {} with overrides, as drmas resolved them:\n",
            self.path.display()
        );
        for o in &self.overrides {
            text.push_str(&format!("#   {}\n", o.set.origin));
            if let Some(note) = o.dropped_note() {
                text.push_str(&format!("#     note: {note}\n"));
            }
        }
        text.push('\n');
        text.push_str(&toml::to_string(&table).expect("a TOML table serializes"));
        text
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

    /// What running the experiment reads, each with the key that names it: the
    /// experiment file, every model folder, every data file, every plugin folder. No
    /// output may be, hold or lie inside one of them
    /// ([`crate::output::check_not_an_input`]).
    pub fn inputs(&self) -> Vec<(String, PathBuf)> {
        let f = &self.file;
        let mut inputs = vec![("the experiment".to_string(), self.path.clone())];
        for (i, m) in f.models.iter().enumerate() {
            let key = if m.base.is_some() { "base" } else { "path" };
            inputs.push((
                format!("model `{}`'s folder (models[{i}].{key})", m.id),
                m.weights_dir().to_path_buf(),
            ));
        }
        for (here, source) in self.data_sources() {
            inputs.push((format!("the data file {here}"), source.path.clone()));
        }
        if let Some(w) = &f.trainer.warm_start {
            inputs.push((
                "the warm start trainer.warm_start.checkpoint".to_string(),
                w.checkpoint.clone(),
            ));
        }
        for (i, d) in f.plugins.dirs.iter().enumerate() {
            inputs.push((format!("the plugin folder plugins.dirs[{i}]"), d.clone()));
        }
        inputs
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
