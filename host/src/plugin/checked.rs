//! Host-side handles around components. The host never trusts a plugin's numbers:
//! every call is guarded against panics (built-ins included), NaN and infinite values
//! are errors naming the component, and shapes are checked.

use super::error::ComponentError;
use drmas_plugin_api::{
    Agent, Environment, EpisodeEnd, EpisodeId, EpisodeRecord, EpisodeStart, EpisodeView, Message,
    Metrics, Normalizer, Parsed, PluginError, PluginResult, Reward, SampleRow, Task, ToolCall,
    ToolContext, ToolResult, ToolSpec, error::guard,
};
use std::fmt;

/// Which component this is and where it came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentId {
    pub kind: drmas_plugin_api::ComponentKind,
    /// `plugin/component`.
    pub name: String,
    pub version: String,
    /// `built-in` or the file path.
    pub source: String,
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` ({} {}, {})",
            self.kind,
            self.name,
            self.plugin(),
            self.version,
            self.source
        )
    }
}

impl ComponentId {
    pub fn plugin(&self) -> &str {
        self.name.split('/').next().unwrap_or_default()
    }

    fn fail(&self, err: PluginError) -> ComponentError {
        ComponentError::Failed {
            component: self.to_string(),
            message: err.to_string(),
        }
    }

    fn call<T>(&self, f: impl FnOnce() -> PluginResult<T>) -> Result<T, ComponentError> {
        guard(f).map_err(|e| self.fail(e))
    }
}

macro_rules! handle {
    ($name:ident, $trait:ident) => {
        pub struct $name {
            pub id: ComponentId,
            inner: Box<dyn $trait>,
        }

        impl $name {
            pub fn new(id: ComponentId, inner: Box<dyn $trait>) -> Self {
                Self { id, inner }
            }
        }
    };
}

handle!(AgentHandle, Agent);
handle!(EnvironmentHandle, Environment);
handle!(RewardHandle, Reward);
handle!(NormalizerHandle, Normalizer);

impl AgentHandle {
    pub fn render(&self, view: &EpisodeView) -> Result<Vec<Message>, ComponentError> {
        self.id.call(|| self.inner.render(view))
    }
    pub fn parse(&self, view: &EpisodeView, completion: &str) -> Result<Parsed, ComponentError> {
        self.id.call(|| self.inner.parse(view, completion))
    }
    /// The agents its config names; none when the call panics (the check is advisory).
    pub fn linked_agents(&self) -> Vec<String> {
        self.id
            .call(|| Ok(self.inner.linked_agents()))
            .unwrap_or_default()
    }
    /// The tools its config names; none when the call panics (the check is advisory).
    pub fn tools_used(&self) -> Vec<String> {
        self.id
            .call(|| Ok(self.inner.tools_used()))
            .unwrap_or_default()
    }
}

impl EnvironmentHandle {
    pub fn prepare(&self, task: &Task) -> Result<Task, ComponentError> {
        self.id.call(|| self.inner.prepare(task))
    }
    pub fn tools(&self) -> Result<Vec<ToolSpec>, ComponentError> {
        self.id.call(|| Ok(self.inner.tools()))
    }
    pub fn start_episode(&self, start: &EpisodeStart) -> Result<(), ComponentError> {
        self.id.call(|| self.inner.start_episode(start))
    }
    pub fn call_tool(
        &self,
        context: &ToolContext,
        call: &ToolCall,
    ) -> Result<ToolResult, ComponentError> {
        let result = self.id.call(|| self.inner.call_tool(context, call))?;
        match result.reward {
            Some(value) if !value.0.is_finite() => Err(ComponentError::NonFiniteToolReward {
                component: self.id.to_string(),
                tool: call.name.clone(),
                value: value.0,
            }),
            _ => Ok(result),
        }
    }
    pub fn end_episode(&self, end: &EpisodeEnd) -> Result<(), ComponentError> {
        self.id.call(|| self.inner.end_episode(end))
    }
    /// The environment's numbers about a completed episode; a non-finite one is refused.
    pub fn episode_metrics(&self, episode: EpisodeId) -> Result<Metrics, ComponentError> {
        let metrics = self.id.call(|| self.inner.episode_metrics(episode))?;
        self.finite(metrics)
    }
    /// The environment's numbers about a completed episode, from its record (API 1.3;
    /// older plugins answer by episode id); a non-finite one is refused.
    pub fn record_metrics(&self, record: &EpisodeRecord) -> Result<Metrics, ComponentError> {
        let metrics = self.id.call(|| self.inner.record_metrics(record))?;
        self.finite(metrics)
    }
    fn finite(&self, metrics: Metrics) -> Result<Metrics, ComponentError> {
        match metrics.iter().find(|(_, v)| !v.is_finite()) {
            Some((name, &value)) => Err(ComponentError::NonFiniteMetric {
                component: self.id.to_string(),
                name: name.clone(),
                value,
            }),
            None => Ok(metrics),
        }
    }
    pub fn is_slow(&self) -> bool {
        self.id.call(|| Ok(self.inner.is_slow())).unwrap_or(true)
    }
    /// How many episodes may run at once with the environment (API 1.4; `None`: no
    /// limit). A limit of 0 reads as 1: an environment that could never start an
    /// episode would hang its rollout.
    pub fn max_episodes(&self) -> Option<usize> {
        self.id
            .call(|| Ok(self.inner.max_episodes()))
            .ok()
            .flatten()
            .map(|n| n.max(1))
    }
    /// What the environment reports about the services it reaches (`drmas check
    /// --online`; API 1.4, older plugins report nothing).
    pub fn probe(&self) -> Result<Vec<String>, ComponentError> {
        self.id.call(|| self.inner.probe())
    }
}

impl RewardHandle {
    pub fn score(&self, episode: &EpisodeRecord) -> Result<f32, ComponentError> {
        let score = self.id.call(|| self.inner.score(episode))?;
        self.finite(score, episode, None)?;
        Ok(score)
    }

    /// A finite score per turn of the transcript, or `None` when the reward gives every
    /// turn its episode score ([`Reward::turn_scores`]).
    pub fn turn_scores(&self, episode: &EpisodeRecord) -> Result<Option<Vec<f32>>, ComponentError> {
        let Some(scores) = self.id.call(|| self.inner.turn_scores(episode))? else {
            return Ok(None);
        };
        if scores.len() != episode.transcript.len() {
            return Err(ComponentError::TurnScores {
                component: self.id.to_string(),
                turns: episode.transcript.len(),
                got: scores.len(),
            });
        }
        for (turn, &score) in scores.iter().enumerate() {
            self.finite(score, episode, Some(turn))?;
        }
        Ok(Some(scores))
    }

    fn finite(
        &self,
        score: f32,
        episode: &EpisodeRecord,
        turn: Option<usize>,
    ) -> Result<(), ComponentError> {
        if score.is_finite() {
            return Ok(());
        }
        let of = turn.map(|t| format!("turn {t} of ")).unwrap_or_default();
        Err(ComponentError::NonFinite {
            component: self.id.to_string(),
            value: score,
            what: format!(
                "the score of {of}episode {} (task {}/{})",
                episode.episode, episode.task.source, episode.task.id
            ),
            consequence: "a score must be finite, so the episode failed".into(),
        })
    }
}

impl NormalizerHandle {
    /// One finite advantage per sample, or an error naming the normalizer.
    pub fn advantages(&self, samples: &[SampleRow]) -> Result<Vec<f32>, ComponentError> {
        let out = self.id.call(|| self.inner.advantages(samples))?;
        if out.len() != samples.len() {
            return Err(ComponentError::Length {
                component: self.id.to_string(),
                expected: samples.len(),
                got: out.len(),
            });
        }
        match out.iter().position(|v| !v.is_finite()) {
            None => Ok(out),
            Some(i) => {
                let s = &samples[i];
                Err(ComponentError::NonFinite {
                    component: self.id.to_string(),
                    value: out[i],
                    what: format!(
                        "the advantage of sample {i} of {} (task group {}, trajectory {}, \
                         agent {}, turn {})",
                        samples.len(),
                        s.uid,
                        s.traj,
                        s.agent,
                        s.turn
                    ),
                    consequence: "advantages must be finite".into(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::ComponentKind;

    /// Reports the metrics it was built with for every episode.
    struct Reports(Metrics);

    impl Environment for Reports {
        fn call_tool(&self, _: &ToolContext, _: &ToolCall) -> PluginResult<ToolResult> {
            Ok(ToolResult::default())
        }
        fn episode_metrics(&self, _: EpisodeId) -> PluginResult<Metrics> {
            Ok(self.0.clone())
        }
    }

    fn handle(metrics: &[(&str, f64)]) -> EnvironmentHandle {
        let id = ComponentId {
            kind: ComponentKind::Environment,
            name: "test/env".into(),
            version: "0.1.0".into(),
            source: "built-in".into(),
        };
        let metrics = metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        EnvironmentHandle::new(id, Box::new(Reports(metrics)))
    }

    #[test]
    fn finite_episode_metrics_pass_and_a_nan_is_refused_by_name() {
        let ok = handle(&[("searches", 2.0), ("answer_recall", 0.5)]);
        assert_eq!(ok.episode_metrics(1).unwrap()["answer_recall"], 0.5);
        let bad = handle(&[("searches", 2.0), ("retrieval_ms", f64::NAN)]);
        assert_eq!(
            bad.episode_metrics(1).unwrap_err().to_string(),
            "environment `test/env` (test 0.1.0, built-in) reported the episode metric \
             `retrieval_ms` = NaN; metrics must be finite"
        );
    }

    struct Constant(f32);

    impl Reward for Constant {
        fn score(&self, _: &EpisodeRecord) -> PluginResult<f32> {
            Ok(self.0)
        }
    }

    impl Normalizer for Constant {
        fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>> {
            // Finite for the first sample, the constant for the others.
            Ok((0..samples.len())
                .map(|i| if i == 0 { 0.5 } else { self.0 })
                .collect())
        }
    }

    fn id(kind: ComponentKind, name: &str) -> ComponentId {
        ComponentId {
            kind,
            name: name.into(),
            version: "0.1.0".into(),
            source: "built-in".into(),
        }
    }

    #[test]
    fn a_non_finite_score_names_the_reward_the_episode_and_its_task() {
        let reward = RewardHandle::new(
            id(ComponentKind::Reward, "test/r"),
            Box::new(Constant(f32::NAN)),
        );
        let episode = EpisodeRecord {
            episode: 17,
            task: Task {
                id: "q3".into(),
                source: "gsm8k".into(),
                ..Task::default()
            },
            ..EpisodeRecord::default()
        };
        assert_eq!(
            reward.score(&episode).unwrap_err().to_string(),
            "reward `test/r` (test 0.1.0, built-in) returned NaN as the score of episode 17 \
             (task gsm8k/q3); a score must be finite, so the episode failed"
        );
        let fine = RewardHandle::new(id(ComponentKind::Reward, "test/r"), Box::new(Constant(0.5)));
        assert_eq!(fine.score(&episode).unwrap(), 0.5);
    }

    #[test]
    fn a_non_finite_advantage_names_the_normalizer_and_the_sample() {
        let norm = NormalizerHandle::new(
            id(ComponentKind::Normalizer, "test/n"),
            Box::new(Constant(f32::NEG_INFINITY)),
        );
        let rows = [
            SampleRow::new("u1", 0, "solver", 0, 1.0),
            SampleRow::new("u1", 3, "verifier", 1, 0.0),
        ];
        assert_eq!(
            norm.advantages(&rows).unwrap_err().to_string(),
            "normalizer `test/n` (test 0.1.0, built-in) returned -inf as the advantage of \
             sample 1 of 2 (task group u1, trajectory 3, agent verifier, turn 1); advantages \
             must be finite"
        );
        assert_eq!(norm.advantages(&rows[..1]).unwrap(), vec![0.5]);
    }
}
