//! The `mean` and `std` keys of `[normalizer.config]`: which pool each statistic is
//! taken over, or the component's own (`"preset"`).

use crate::pool::Pool;
use drmas_plugin_api::kit::ConfigType;
use serde::{Deserialize, Serialize};

/// The `mean` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(try_from = "String", into = "&'static str")]
pub enum MeanSource {
    /// The component's own pool.
    #[default]
    Preset,
    Pool(Pool),
}

/// The `std` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(try_from = "String", into = "&'static str")]
pub enum StdSource {
    /// The component's own pool (or no division, for those that never divide).
    #[default]
    Preset,
    Pool(Pool),
    /// Centre only: no division.
    None,
}

/// `"preset", "agent", ...`: the names a key accepts, for its error message.
fn names(extra: &[&str]) -> String {
    ["preset"]
        .iter()
        .copied()
        .chain(Pool::ALL.iter().map(|p| p.name()))
        .chain(extra.iter().copied())
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

impl TryFrom<String> for MeanSource {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "preset" => Ok(Self::Preset),
            _ => Pool::parse(&name).map(Self::Pool).ok_or_else(|| {
                format!(
                    "mean = \"{name}\" is not a pool; `mean` takes one of {}",
                    names(&[])
                )
            }),
        }
    }
}

impl TryFrom<String> for StdSource {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "preset" => Ok(Self::Preset),
            "none" => Ok(Self::None),
            _ => Pool::parse(&name).map(Self::Pool).ok_or_else(|| {
                format!(
                    "std = \"{name}\" is not a pool; `std` takes one of {}",
                    names(&["none"])
                )
            }),
        }
    }
}

impl From<MeanSource> for &'static str {
    fn from(source: MeanSource) -> Self {
        match source {
            MeanSource::Preset => "preset",
            MeanSource::Pool(pool) => pool.name(),
        }
    }
}

impl From<StdSource> for &'static str {
    fn from(source: StdSource) -> Self {
        match source {
            StdSource::Preset => "preset",
            StdSource::Pool(pool) => pool.name(),
            StdSource::None => "none",
        }
    }
}

impl ConfigType for MeanSource {
    fn config_type() -> String {
        "string".to_string()
    }
}

impl ConfigType for StdSource {
    fn config_type() -> String {
        "string".to_string()
    }
}
