//! The plugin boundary of drmas.
//!
//! A plugin is a crate that implements one or more of the four component traits
//! ([`Agent`], [`Environment`], [`Reward`], [`Normalizer`]) as ordinary Rust, lists them
//! in a [`PluginSpec`], and exports that spec with one line:
//!
//! ```standalone_crate
//! use drmas_plugin_api::{export_plugin, Normalizer, PluginResult, PluginSpec, SampleRow};
//! use drmas_plugin_api::{config_table, kit::ConfigTable};
//!
//! config_table! {
//!     /// The `[normalizer.config]` table of `acme/centered`.
//!     pub struct CenteredConfig {
//!         /// multiplies every advantage
//!         pub scale: f32 = 1.0,
//!     }
//! }
//!
//! /// Advantage = scale × (score − the mean score of the batch).
//! struct Centered {
//!     scale: f32,
//! }
//!
//! impl Normalizer for Centered {
//!     fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>> {
//!         let mean = samples.iter().map(|s| s.score).sum::<f32>() / samples.len().max(1) as f32;
//!         Ok(samples.iter().map(|s| self.scale * (s.score - mean)).collect())
//!     }
//! }
//!
//! fn plugin() -> PluginSpec {
//!     PluginSpec::new("acme", env!("CARGO_PKG_VERSION")).normalizer_with(
//!         "centered",
//!         "subtract the batch mean",
//!         |c: CenteredConfig| Ok(Centered { scale: c.scale }),
//!     )
//! }
//! export_plugin!(plugin);
//! # fn main() {
//! #     let manifest = plugin().manifest();
//! #     assert_eq!(manifest.components[0].config, Some(CenteredConfig::config_keys()));
//! # }
//! ```
//!
//! Built as a `cdylib`, the crate is a `.so` that the host loads from a plugin folder.
//! Nothing an author writes touches `abi_stable`: the macro generates the exported
//! root module and wraps every call in `catch_unwind`, so a panic becomes a
//! [`PluginError`] instead of aborting the host.
//!
//! What crosses the boundary is the plain data of [`data`], as JSON behind a frozen
//! binary interface ([`ffi`]), so the API can grow within 1.x without breaking built
//! plugins; a component's configuration crosses as the TOML text of its table (see
//! [`parse_config`]).
//!
//! [`kit`] holds what most plugins need besides the traits: checked prompt templates,
//! few-shot prompts, tag scanning, and config tables ([`config_table!`]) whose
//! described keys are derived from the struct that parses them.
//!
//! # Compatibility promise
//!
//! A plugin built against API 1.x loads and runs in every host 1.y with y ≥ x. A host
//! refuses, with both versions in the message, a plugin built against another major
//! version or against a newer minor than its own. Within 1.x, additions are
//! non-breaking: new fields have defaults, new enum variants are read by older code as
//! `Unknown`, and new trait methods have defaults.

pub mod data;
pub mod error;
pub mod ffi;
pub mod kit;
mod quiet_panic;
pub mod spec;
pub mod traits;

pub use data::*;
pub use error::{PluginError, PluginErrorKind, PluginResult};
// Authors name `serde_json::Value` in `Task::meta`; re-exported so the versions agree.
pub use serde_json;
pub use spec::{
    BuiltinPlugin, ComponentFactory, PluginSpec, SpecEntry, check_config_key,
    check_manifest_config_keys, config_value_fits,
};
pub use traits::{Agent, Environment, Normalizer, Reward};

// Re-exported so the export macro can name them from the plugin crate without the
// author adding these crates to their own manifest.
#[doc(hidden)]
pub use abi_stable;
// `config_table!` expands to serde impls in the author's crate.
#[doc(hidden)]
pub use inventory;
#[doc(hidden)]
pub use serde;

/// The version of this API crate. A host 1.y accepts a plugin built against 1.x when
/// x ≤ y, and refuses others (see the crate docs).
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

// The README's example is the first code an author reads on crates.io: compile it.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
