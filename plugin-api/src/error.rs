//! The one error type that crosses the boundary.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What went wrong inside a plugin, as a category the host can act on. Match it with a
/// `_` arm: later 1.x versions may add kinds, which older code reads as `Other`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PluginErrorKind {
    /// The component's configuration was rejected.
    Config,
    /// The component was asked for something it does not have (unknown name or kind).
    NotFound,
    /// The input handed to the component was malformed.
    Input,
    /// The component panicked; the panic was caught at the boundary.
    Panic,
    /// The plugin was built against an API version without this call; the host then
    /// uses the call's documented default.
    Unsupported,
    /// Anything else.
    #[serde(other)]
    Other,
}

/// An error returned by a plugin: a kind and a human-readable message.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    pub kind: PluginErrorKind,
    pub message: String,
}

/// Result type of every fallible call a plugin author implements.
pub type PluginResult<T> = Result<T, PluginError>;

impl PluginError {
    pub fn new(kind: PluginErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::Config, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::NotFound, message)
    }
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::Input, message)
    }
    pub fn other(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::Other, message)
    }
    pub(crate) fn from_panic(payload: Box<dyn std::any::Any + Send>, at: Option<String>) -> Self {
        let text = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "non-string panic payload".to_string()
        };
        let at = at.map(|a| format!(" (at {a})")).unwrap_or_default();
        Self::new(PluginErrorKind::Panic, format!("panicked: {text}{at}"))
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PluginError {}

/// Runs `f`, turning a panic into a [`PluginError`] of kind [`PluginErrorKind::Panic`]
/// whose message gives the panic's text and place. Every call that crosses the
/// boundary goes through this. The panic is not also printed as Rust's panic block: the
/// host reports the error once, in its own words.
pub fn guard<T>(f: impl FnOnce() -> PluginResult<T>) -> PluginResult<T> {
    match crate::quiet_panic::catch_quietly(f) {
        Ok(result) => result,
        Err((payload, at)) => Err(PluginError::from_panic(payload, at)),
    }
}
