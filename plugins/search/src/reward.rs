//! `search/em` and `search/f1`. STUB: the agents helper replaces this file.

use drmas_plugin_api::{ConfigKey, EpisodeRecord, PluginError, PluginResult, Reward};

pub struct ExactMatch;
pub struct TokenF1;

macro_rules! stub_reward {
    ($t:ident) => {
        impl $t {
            pub fn from_config(_text: &str) -> PluginResult<Self> {
                Err(PluginError::other("not yet"))
            }
        }
        impl Reward for $t {
            fn score(&self, _episode: &EpisodeRecord) -> PluginResult<f32> {
                Err(PluginError::other("not yet"))
            }
        }
    };
}
stub_reward!(ExactMatch);
stub_reward!(TokenF1);

pub fn em_keys() -> Vec<ConfigKey> {
    Vec::new()
}
pub fn f1_keys() -> Vec<ConfigKey> {
    Vec::new()
}
