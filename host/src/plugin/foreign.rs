//! Dynamic components behind the ordinary component traits, so the rest of the host
//! cannot tell a `.so` component from a built-in one. Every call crosses as a method
//! name and JSON ([`drmas_plugin_api::ffi`]); a method the plugin's API version does not
//! have answers `Unsupported`, and the trait's default stands in for it.

use abi_stable::std_types::RStr;
use drmas_plugin_api::{
    Agent, Environment, EpisodeEnd, EpisodeId, EpisodeRecord, EpisodeStart, EpisodeView, Message,
    Metrics, Normalizer, Parsed, PluginErrorKind, PluginResult, Reward, SampleRow, Task, ToolCall,
    ToolContext, ToolResult, ToolSpec,
    ffi::{
        CallToolInput, FfiComponentBox, ParseInput, WireNumber, decode, decode_error, encode,
        method,
    },
};
use serde::{Serialize, de::DeserializeOwned};
use std::collections::BTreeMap;

/// One component of a loaded plugin.
pub struct Foreign(pub FfiComponentBox);

impl Foreign {
    fn call<I: Serialize, O: DeserializeOwned>(&self, name: &str, input: &I) -> PluginResult<O> {
        let input = encode(input)?;
        match self
            .0
            .call(RStr::from(name), RStr::from(input.as_str()))
            .into_result()
        {
            Ok(output) => decode(&format!("answer to `{name}`"), output.as_str()),
            Err(e) => Err(decode_error(e.as_str())),
        }
    }

    /// A call added after API 1.0: a plugin built before it gets `default`.
    fn call_or<I: Serialize, O: DeserializeOwned>(
        &self,
        name: &str,
        input: &I,
        default: impl FnOnce() -> O,
    ) -> PluginResult<O> {
        match self.call(name, input) {
            Err(e) if e.kind == PluginErrorKind::Unsupported => Ok(default()),
            other => other,
        }
    }
}

impl Agent for Foreign {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        self.call(method::AGENT_RENDER, view)
    }
    fn parse(&self, view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        self.call(method::AGENT_PARSE, &ParseInput { view, completion })
    }
    fn linked_agents(&self) -> Vec<String> {
        self.call_or(method::AGENT_LINKED_AGENTS, &(), Vec::new)
            .unwrap_or_default()
    }
    fn tools_used(&self) -> Vec<String> {
        self.call_or(method::AGENT_TOOLS_USED, &(), Vec::new)
            .unwrap_or_default()
    }
}

impl Environment for Foreign {
    fn prepare(&self, task: &Task) -> PluginResult<Task> {
        self.call_or(method::ENV_PREPARE, task, || task.clone())
    }
    fn tools(&self) -> Vec<ToolSpec> {
        self.call_or(method::ENV_TOOLS, &(), Vec::new)
            .unwrap_or_default()
    }
    fn start_episode(&self, start: &EpisodeStart) -> PluginResult<()> {
        self.call_or(method::ENV_START_EPISODE, start, || ())
    }
    fn call_tool(&self, context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        self.call(method::ENV_CALL_TOOL, &CallToolInput { context, call })
    }
    fn end_episode(&self, end: &EpisodeEnd) -> PluginResult<()> {
        self.call_or(method::ENV_END_EPISODE, end, || ())
    }
    fn episode_metrics(&self, episode: EpisodeId) -> PluginResult<Metrics> {
        let wire: BTreeMap<String, WireNumber> =
            self.call_or(method::ENV_EPISODE_METRICS, &episode, BTreeMap::new)?;
        Ok(from_wire(wire))
    }
    fn record_metrics(&self, record: &EpisodeRecord) -> PluginResult<Metrics> {
        // A plugin built before 1.3 answers by episode id alone.
        match self.call::<_, BTreeMap<String, WireNumber>>(method::ENV_RECORD_METRICS, record) {
            Ok(wire) => Ok(from_wire(wire)),
            Err(e) if e.kind == PluginErrorKind::Unsupported => {
                self.episode_metrics(record.episode)
            }
            Err(e) => Err(e),
        }
    }
    fn max_episodes(&self) -> Option<usize> {
        // A plugin built before 1.4 sets no limit; one that cannot answer sets none.
        self.call_or(method::ENV_MAX_EPISODES, &(), || None)
            .ok()
            .flatten()
    }
    fn probe(&self) -> PluginResult<Vec<String>> {
        // A plugin built before 1.4 has nothing to reach.
        self.call_or(method::ENV_PROBE, &(), Vec::new)
    }
    fn is_slow(&self) -> bool {
        // A plugin that cannot say is treated as slow: a timeout is the safe side.
        self.call_or(method::ENV_IS_SLOW, &(), || false)
            .unwrap_or(true)
    }
}

impl Reward for Foreign {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let score: WireNumber = self.call(method::REWARD_SCORE, episode)?;
        Ok(score.0)
    }
    fn turn_scores(&self, episode: &EpisodeRecord) -> PluginResult<Option<Vec<f32>>> {
        let scores: Option<Vec<WireNumber>> =
            self.call_or(method::REWARD_TURN_SCORES, episode, || None)?;
        Ok(scores.map(|v| v.into_iter().map(|s| s.0).collect()))
    }
}

/// Metrics that crossed the boundary, in double precision again.
fn from_wire(wire: BTreeMap<String, WireNumber>) -> Metrics {
    wire.into_iter().map(|(k, v)| (k, f64::from(v.0))).collect()
}

impl Normalizer for Foreign {
    fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>> {
        let out: Vec<WireNumber> = self.call(method::NORMALIZER_ADVANTAGES, &samples)?;
        Ok(out.into_iter().map(|v| v.0).collect())
    }
}
