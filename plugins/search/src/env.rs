//! `search/env`. STUB: replaced by the environment work.

use drmas_plugin_api::{
    ConfigKey, Environment, PluginError, PluginResult, ToolCall, ToolContext, ToolResult,
};

pub struct SearchEnv;

impl SearchEnv {
    pub fn from_config(_text: &str) -> PluginResult<Self> {
        Err(PluginError::other("not yet"))
    }
}

impl Environment for SearchEnv {
    fn call_tool(&self, _context: &ToolContext, _call: &ToolCall) -> PluginResult<ToolResult> {
        Err(PluginError::other("not yet"))
    }
}

pub fn config_keys() -> Vec<ConfigKey> {
    Vec::new()
}
