//! Experiment files: the TOML schema, parsing with file:line:col errors, and semantic
//! checks (names that must exist, numbers in range, plugins that must resolve).

mod error;
mod load;
mod schema;
mod source;
mod validate;

pub use error::{ConfigError, ConfigErrors};
pub use load::{Experiment, config_text, load_experiment, parse_experiment};
pub use schema::*;
pub use source::{KeyPath, SourceMap};
pub use validate::{CheckedComponent, check_components, check_pins};
