//! The plugin boundary of drmas.
//!
//! A plugin is a crate that implements one or more of the four component traits
//! ([`Agent`], [`Environment`], [`Reward`], [`Normalizer`]) as ordinary Rust, lists them
//! in a [`PluginSpec`], and exports that spec with one line:
//!
//! ```ignore
//! use drmas_plugin_api::{export_plugin, PluginSpec};
//!
//! fn plugin() -> PluginSpec {
//!     PluginSpec::new("acme", env!("CARGO_PKG_VERSION"))
//!         .normalizer("centered", "subtract the group mean", |cfg| Centered::from_config(cfg))
//! }
//! export_plugin!(plugin);
//! ```
//!
//! Built as a `cdylib`, the crate is a `.so` that the host loads from a plugin folder.
//! Nothing an author writes touches `abi_stable`: the macro generates the exported
//! root module and wraps every call in `catch_unwind`, so a panic becomes a
//! [`PluginError`] instead of aborting the host.
//!
//! What crosses the boundary is plain `#[repr(C)]` data ([`data`]); a component's
//! configuration crosses as the TOML text of its table (see [`parse_config`]).

pub mod data;
pub mod error;
pub mod ffi;
pub mod spec;
pub mod traits;

pub use data::*;
pub use error::{PluginError, PluginErrorKind, PluginResult};
pub use spec::{BuiltinPlugin, ComponentFactory, PluginSpec, SpecEntry};
pub use traits::{Agent, Environment, Normalizer, Reward};

// Re-exported so the export macro can name them from the plugin crate without the
// author adding these crates to their own manifest.
#[doc(hidden)]
pub use abi_stable;
#[doc(hidden)]
pub use inventory;

/// The version of this API crate. It is the ABI version: a host accepts a plugin built
/// against a compatible version (same major; for 0.x, same minor) and refuses others.
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Deserializes a component's configuration (the TOML text of its table in the
/// experiment file) into the component's own config struct.
///
/// Errors are one line: what is wrong and the text it is wrong at, so the host can show
/// them under the component's name and the position of its table.
pub fn parse_config<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, PluginError> {
    toml::from_str(text).map_err(|e| {
        let message = e.message().trim_end().replace('\n', " ");
        let at = e
            .span()
            .and_then(|s| text.get(s))
            .and_then(|t| t.lines().next())
            .unwrap_or("");
        if at.trim().is_empty() {
            PluginError::config(message)
        } else {
            PluginError::config(format!("{message} (at `{}`)", at.trim()))
        }
    })
}
