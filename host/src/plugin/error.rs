//! Everything that can go wrong with a plugin, each as one clear line.

use super::trust::{ALLOW_UNTRUSTED_FLAG, Distrust, Untrusted};
use std::path::PathBuf;
use thiserror::Error;

/// Why a `.so` file (or a whole plugin folder) was not loaded. The host skips it and
/// reports it once; it is a hard error only when an experiment needs a component it
/// would have provided.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum LoadError {
    #[error("{path}: cannot read file: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{path}: empty file, not a shared library")]
    Empty { path: PathBuf },
    #[error("{path}: not a shared library (no ELF header)")]
    NotSharedLibrary { path: PathBuf },
    #[error("{path}: cannot be opened as a shared library: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("{path}: not a drmas plugin (it exports no drmas plugin header)")]
    NotAPlugin { path: PathBuf },
    #[error(
        "{path}: built against drmas-plugin-api {found}, but this host has API {host} and \
         loads plugins built against {} (rebuild the plugin against drmas-plugin-api {host}, \
         or use a newer drmas)",
        compatible_range(.host)
    )]
    ApiVersion {
        path: PathBuf,
        found: String,
        host: String,
    },
    #[error(
        "{path}: layout mismatch in {detail}; the plugin was built against a different \
         drmas-plugin-api of the same version number (rebuild it)"
    )]
    Layout { path: PathBuf, detail: String },
    #[error("{path}: built with an incompatible abi_stable: {reason}")]
    AbiHeader { path: PathBuf, reason: String },
    #[error("{path}: panicked or failed while initialising: {reason}")]
    Init { path: PathBuf, reason: String },
    #[error("{path}: bad manifest: {reason}")]
    Manifest { path: PathBuf, reason: String },
    /// Refused before loading: see [`super::trust`].
    #[error("{path}: {}", untrusted_text(.what, .reason))]
    Untrusted {
        path: PathBuf,
        what: Untrusted,
        reason: Distrust,
    },
    #[error(
        "{path}: cannot make the private copy it is loaded from in {dir}: {reason} (set \
         TMPDIR to a folder you can write)"
    )]
    PrivateCopy {
        path: PathBuf,
        dir: PathBuf,
        reason: String,
    },
    #[error(
        "{path}: sha256 is {actual}, but [plugins] sha256 pins {expected}; refusing to load it"
    )]
    Sha256 {
        path: PathBuf,
        expected: String,
        actual: String,
    },
}

/// The plugin API versions a host of API `host` loads: 1.0 up to its own minor.
fn compatible_range(host: &str) -> String {
    match semver::Version::parse(host) {
        Ok(v) if v.minor == 0 => format!("{}.0.x", v.major),
        Ok(v) => format!("{}.0 to {}.{}", v.major, v.major, v.minor),
        Err(_) => host.to_string(),
    }
}

fn untrusted_text(what: &Untrusted, reason: &Distrust) -> String {
    let from = match what {
        Untrusted::Folder | Untrusted::Parent(_) => "plugins from it",
        _ => "it",
    };
    format!(
        "{}; refusing to load {from} (pass {ALLOW_UNTRUSTED_FLAG} to load anyway)",
        what.describe(reason)
    )
}

impl LoadError {
    pub fn path(&self) -> &PathBuf {
        match self {
            LoadError::Unreadable { path, .. }
            | LoadError::Empty { path }
            | LoadError::NotSharedLibrary { path }
            | LoadError::Open { path, .. }
            | LoadError::NotAPlugin { path }
            | LoadError::ApiVersion { path, .. }
            | LoadError::Layout { path, .. }
            | LoadError::AbiHeader { path, .. }
            | LoadError::Init { path, .. }
            | LoadError::Manifest { path, .. }
            | LoadError::Untrusted { path, .. }
            | LoadError::PrivateCopy { path, .. }
            | LoadError::Sha256 { path, .. } => path,
        }
    }
}

/// Why a component named in an experiment could not be resolved or created.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ResolveError {
    #[error("`{name}` is not a component name: expected `plugin/component`")]
    BadName { name: String },
    #[error("no plugin `{plugin}` is loaded (loaded: {loaded}){failures}")]
    UnknownPlugin {
        plugin: String,
        loaded: String,
        failures: String,
    },
    #[error("plugin `{plugin}` {version} has no {kind} `{component}` (its {kind}s: {available})")]
    UnknownComponent {
        plugin: String,
        version: String,
        kind: String,
        component: String,
        available: String,
    },
    #[error(
        "plugin `{plugin}` is provided by more than one source ({sources}); remove all but \
         one{hint}"
    )]
    Duplicate {
        plugin: String,
        sources: String,
        hint: String,
    },
    #[error("plugin `{plugin}` is version {found}, but the experiment requires `{required}`")]
    Version {
        plugin: String,
        found: String,
        required: String,
    },
    #[error("{kind} `{component}` refused its config: {message}")]
    Create {
        kind: String,
        component: String,
        message: String,
    },
}

/// A component misbehaved while being called.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ComponentError {
    #[error("{component}: {message}")]
    Failed { component: String, message: String },
    /// A number that must be finite was not: `what` says which (the score of which
    /// episode, the advantage of which sample), `consequence` what the rule is and what
    /// it stopped.
    #[error("{component} returned {value} as {what}; {consequence}")]
    NonFinite {
        component: String,
        value: f32,
        what: String,
        consequence: String,
    },
    #[error("{component} reported the episode metric `{name}` = {value}; metrics must be finite")]
    NonFiniteMetric {
        component: String,
        name: String,
        value: f64,
    },
    #[error(
        "{component} returned the reward {value} with the result of its tool `{tool}`; a reward must be finite"
    )]
    NonFiniteToolReward {
        component: String,
        tool: String,
        value: f64,
    },
    #[error("{component} returned {got} values for {expected} samples")]
    Length {
        component: String,
        expected: usize,
        got: usize,
    },
    #[error(
        "{component} returned {got} turn scores for an episode of {turns} turns (one per turn of the transcript, or none)"
    )]
    TurnScores {
        component: String,
        turns: usize,
        got: usize,
    },
}
