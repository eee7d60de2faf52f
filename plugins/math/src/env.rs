//! `math/env`: math tasks need no tools; the task is used as given.

use drmas_plugin_api::kit::NoConfig;
use drmas_plugin_api::{
    Environment, PluginError, PluginResult, Task, ToolCall, ToolContext, ToolResult, parse_config,
};

#[derive(Debug, Clone, Default)]
pub struct MathEnv;

impl MathEnv {
    /// Takes no options: any key in its config table is an error.
    pub fn from_config(text: &str) -> PluginResult<Self> {
        let NoConfig {} = parse_config(text)?;
        Ok(Self)
    }
}

impl Environment for MathEnv {
    fn prepare(&self, task: &Task) -> PluginResult<Task> {
        Ok(task.clone())
    }

    fn call_tool(&self, _context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        Err(PluginError::not_found(format!(
            "math/env has no tools (asked for `{}`)",
            call.name
        )))
    }
}
