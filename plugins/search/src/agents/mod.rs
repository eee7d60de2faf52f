//! The three agents of the search team. STUB: the agents helper replaces this file.

use drmas_plugin_api::{
    Agent, ConfigKey, EpisodeView, Message, Parsed, PluginError, PluginResult,
};

pub struct Verifier;
pub struct Searcher;
pub struct Answerer;

macro_rules! stub_agent {
    ($t:ident) => {
        impl $t {
            pub fn from_config(_text: &str) -> PluginResult<Self> {
                Err(PluginError::other("not yet"))
            }
        }
        impl Agent for $t {
            fn render(&self, _view: &EpisodeView) -> PluginResult<Vec<Message>> {
                Err(PluginError::other("not yet"))
            }
            fn parse(&self, _view: &EpisodeView, _completion: &str) -> PluginResult<Parsed> {
                Err(PluginError::other("not yet"))
            }
        }
    };
}
stub_agent!(Verifier);
stub_agent!(Searcher);
stub_agent!(Answerer);

pub fn verifier_keys() -> Vec<ConfigKey> {
    Vec::new()
}
pub fn searcher_keys() -> Vec<ConfigKey> {
    Vec::new()
}
pub fn answerer_keys() -> Vec<ConfigKey> {
    Vec::new()
}
