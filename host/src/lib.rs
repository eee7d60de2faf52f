//! drmas: a trainer for cooperative multi-agent LLM systems with per-agent advantage
//! normalization (Dr. MAS).
//!
//! The library is organised by concern: [`config`] reads experiment files, [`plugin`]
//! loads and registers components, [`pool`] resolves devices and runs one worker per
//! model, [`rollout`] runs episodes, [`train`] updates the models, [`launch`] builds the
//! running parts of an experiment.

// Errors carry their sources (paths, component names, the model error underneath) so a
// caller can tell them apart; they are built once per failure, off every hot path, so
// their size does not matter.
#![allow(clippy::result_large_err)]

pub mod config;
pub mod data;
pub mod engine;
pub mod eval;
pub mod launch;
pub mod model;
pub mod output;
pub mod plot;
pub mod plugin;
pub mod pool;
pub mod record;
pub mod rollout;
pub mod sweep;
pub mod tracking;
pub mod train;
pub mod update;

// First-party plugins are linked in and register themselves through `inventory`;
// naming the crate here keeps the linker from dropping it.
use drmas_math as _;
use drmas_norms as _;
use drmas_remote as _;
use drmas_search as _;

/// The version of this drmas build.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
