//! Dynamic components behind the ordinary component traits, so the rest of the host
//! cannot tell a `.so` component from a built-in one.

use abi_stable::std_types::{RSlice, RStr};
use drmas_plugin_api::{
    Agent, Environment, EpisodeRecord, EpisodeView, Message, Normalizer, Parsed, PluginResult,
    Reward, SampleRow, Task, ToolCall, ToolResult,
    ffi::{FfiAgentBox, FfiEnvironmentBox, FfiNormalizerBox, FfiRewardBox},
};

pub struct ForeignAgent(pub FfiAgentBox);
pub struct ForeignEnvironment(pub FfiEnvironmentBox);
pub struct ForeignReward(pub FfiRewardBox);
pub struct ForeignNormalizer(pub FfiNormalizerBox);

impl Agent for ForeignAgent {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        self.0.render(view).into_result().map(Vec::from)
    }
    fn parse(&self, view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        self.0.parse(view, RStr::from(completion)).into_result()
    }
}

impl Environment for ForeignEnvironment {
    fn prepare(&self, task: &Task) -> PluginResult<Task> {
        self.0.prepare(task).into_result()
    }
    fn call_tool(&self, task: &Task, call: &ToolCall) -> PluginResult<ToolResult> {
        self.0.call_tool(task, call).into_result()
    }
    fn is_slow(&self) -> bool {
        self.0.is_slow()
    }
}

impl Reward for ForeignReward {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        self.0.score(episode).into_result()
    }
}

impl Normalizer for ForeignNormalizer {
    fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>> {
        self.0
            .advantages(RSlice::from_slice(samples))
            .into_result()
            .map(Vec::from)
    }
}
