//! Experiment files: the TOML schema, parsing with file:line:col errors, and semantic
//! checks (names that must exist, numbers in range, plugins that must resolve).

mod advice;
mod count;
mod declared;
mod error;
mod experiment;
mod files;
mod flat;
mod load;
mod overrides;
mod schema;
mod source;
mod validate;

pub use crate::tracking::{MlflowSection, TrackingSection};
pub use advice::warnings;
pub use error::{ConfigError, ConfigErrors};
pub use experiment::{AppliedOverride, Experiment, config_text};
pub use files::check_paths;
pub use flat::{Flat, flatten, flatten_spelled, list_labels, mlflow_params, spelled};
pub use load::{
    load_experiment, load_experiment_with, parse_experiment, parse_experiment_with, parse_toml,
};
pub use overrides::Override;
pub use schema::*;
pub use source::{KeyPath, SourceMap};
pub use validate::{CheckedComponent, MAX_TURNS, check_components, check_pins};
