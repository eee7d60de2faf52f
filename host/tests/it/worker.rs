//! The model worker: concurrent episodes of two models are batched per model, and
//! what a batch generates equals what each request generates alone.

use crate::common;

use common::fake::ByteCodec;
use drmas::model::{GenerationRequest, generate};
use drmas::plugin::{AgentHandle, ComponentId};
use drmas::pool::{Backend, ModelBackend, WorkerConfig, spawn_worker};
use drmas::rollout::{
    AgentSlot, EpisodeSpec, ModelSlot, Team, TeamOptions, call_seed, run_episodes,
};
use drmas_plugin_api::{
    Action, Agent, ComponentKind, EpisodeView, Message, Parsed, PluginResult, Task,
};
use std::{collections::HashMap, sync::Arc, time::Duration};

/// Asks the question; whatever comes back finishes the episode.
struct Once;

impl Agent for Once {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        Ok(vec![Message::user(format!(
            "{} {}",
            view.agent, view.task.question
        ))])
    }
    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        Ok(Parsed::valid(Action::Finish {
            answer: completion.into(),
        }))
    }
}

fn agent(name: &str, model: &str) -> AgentSlot {
    let id = ComponentId {
        kind: ComponentKind::Agent,
        name: "test/once".into(),
        version: "0".into(),
        source: "test".into(),
    };
    AgentSlot {
        name: name.into(),
        handle: AgentHandle::new(id, Box::new(Once)),
        model: model.into(),
        sampling: drmas::config::Sampling {
            temperature: 0.8,
            max_new_tokens: std::num::NonZeroU32::new(6).unwrap(),
            ..Default::default()
        },
    }
}

#[test]
fn episodes_of_two_models_are_batched_per_model_and_match_unbatched_generation() {
    // Six requests reach each worker, and a batch of six is full: it starts the moment
    // the sixth arrives. The window is only an upper bound on the wait, far longer than
    // any machine needs to deliver them, so the count below does not depend on timing.
    let config = WorkerConfig {
        max_sequences: 6,
        gather_window: Duration::from_secs(600),
        ..Default::default()
    };
    let mut models = HashMap::new();
    for (id, tiny) in [("lm-a", "llama"), ("lm-b", "qwen3")] {
        let handle = spawn_worker(id, config.clone(), move || {
            Ok(Box::new(ModelBackend::new(
                common::load_tiny(tiny),
                None,
                common::tiny_models().join(tiny),
            )) as Box<dyn Backend>)
        })
        .unwrap();
        models.insert(
            id.to_string(),
            ModelSlot {
                id: id.into(),
                codec: Arc::new(ByteCodec),
                handle,
            },
        );
    }
    let options = |entry: &str| TeamOptions {
        entry: entry.into(),
        max_turns: 1,
        final_agent: None,
        max_loops: None,
        invalid_penalty: 0.1,
        seed: 5,
        tool_timeout: Duration::from_secs(5),
        max_failed_episodes: 0.05,
        keep_prompts: false,
    };
    // Two teams share the two workers (tiny random models have 128 tokens: the byte
    // codec's ids fit): one acts with lm-a, the other with lm-b.
    let team = |name: &str, model: &str| {
        Arc::new(Team {
            agents: vec![agent(name, model)],
            models: models
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        ModelSlot {
                            id: v.id.clone(),
                            codec: v.codec.clone(),
                            handle: v.handle.clone(),
                        },
                    )
                })
                .collect(),
            environment: None,
            tools: Vec::new(),
            rewards: vec![],
            options: options(name),
        })
    };
    let (team_a, team_b) = (team("a", "lm-a"), team("b", "lm-b"));
    let specs: Vec<EpisodeSpec> = (0..6)
        .map(|i| EpisodeSpec {
            task: Task {
                question: format!("q{}", i % 3),
                ..Task::default()
            },
            uid: format!("u{}", i % 3),
            traj: i / 3,
            sampling_override: None,
        })
        .collect();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (a, b) = runtime.block_on(async {
        tokio::join!(
            run_episodes(team_a.clone(), specs.clone(), |_, _| {}),
            run_episodes(team_b.clone(), specs.clone(), |_, _| {})
        )
    });
    let stats_a = models["lm-a"].handle.stats();
    let stats_b = models["lm-b"].handle.stats();
    assert_eq!((stats_a.requests, stats_b.requests), (6, 6));
    assert_eq!(
        (stats_a.batches, stats_b.batches),
        (1, 1),
        "{stats_a:?} {stats_b:?}"
    );
    assert_eq!((stats_a.largest_batch, stats_b.largest_batch), (6, 6));

    // The same requests one by one, on fresh copies of the models.
    for (outcomes, tiny) in [(a, "llama"), (b, "qwen3")] {
        let model = common::load_tiny(tiny);
        for o in outcomes {
            let o = o.unwrap();
            let s = &o.samples[0];
            let alone = generate(
                &model,
                &[GenerationRequest {
                    prompt: s.prompt_ids.clone(),
                    params: drmas::model::SamplingParams {
                        temperature: 0.8,
                        max_new_tokens: 6,
                        seed: call_seed(5, &o.uid, o.traj, 0),
                        ..Default::default()
                    },
                    shared_prefix: 0,
                }],
                None,
            )
            .unwrap()
            .remove(0);
            assert_eq!(
                s.response_ids, alone.tokens,
                "{tiny} {} traj {}",
                o.uid, o.traj
            );
        }
    }
}
