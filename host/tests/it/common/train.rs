//! Training on the tiny random checkpoints: agents that say one token, a reward that pays
//! each agent for its own target, and trainers of an experiment that names them, built
//! the way `drmas train` builds one with these components handed in.
#![allow(dead_code, clippy::result_large_err)]

use super::fake::ByteCodec;
use drmas::config::{Experiment, LossAgg, Sampling, TrainerSection};
use drmas::plugin::{
    AgentHandle, ComponentId, NormalizerHandle, Registry, ResolvePolicy, RewardHandle,
};
use drmas::pool::{Backend, DistJob, ModelBackend, ModelHandle, WorkerConfig, spawn_worker};
use drmas::rollout::{AgentSlot, ModelSlot, Team, TeamOptions};
use drmas::train::{Components, TrainOptions, Trainer};
use drmas::update::{AdamWConfig, LogpOld, LossSettings, TrainSample, UpdateBatch, UpdateSettings};
use drmas_plugin_api::{
    Action, Agent, ComponentKind, EpisodeRecord, EpisodeView, Message, Parsed, PluginResult, Reward,
};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

/// Says one token; hands off to `next`, or finishes with what it said.
pub struct SayOne {
    pub next: Option<String>,
}

impl Agent for SayOne {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        Ok(vec![Message::user(format!(
            "{}:{}",
            view.agent, view.task.question
        ))])
    }
    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        Ok(Parsed::valid(match &self.next {
            Some(to) => Action::Handoff {
                to: to.as_str().into(),
            },
            None => Action::Finish {
                answer: completion.into(),
            },
        }))
    }
}

/// The fraction of `targets` (agent, text) that the agent's last completion equals;
/// `scale` multiplies it (huge rewards for the non-finite guard).
pub struct Targets {
    pub targets: Vec<(String, String)>,
    pub scale: f32,
    /// Questions whose episodes get `scale`; others get 1 (None = every question).
    pub scaled_question: Option<String>,
    /// Pay the first agent's token id / 127 instead of hits (a reward that always varies).
    pub graded: bool,
}

impl Reward for Targets {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let hits = self
            .targets
            .iter()
            .filter(|(agent, target)| {
                episode
                    .transcript
                    .iter()
                    .rev()
                    .find(|t| t.agent.as_str() == agent)
                    .is_some_and(|t| t.completion.as_str() == target)
            })
            .count();
        let scale = match &self.scaled_question {
            Some(q) if episode.task.question.as_str() != q => 1.0,
            _ => self.scale,
        };
        if self.graded {
            let byte = episode
                .transcript
                .first()
                .and_then(|t| t.completion.as_str().bytes().next())
                .unwrap_or(0);
            return Ok(scale * (f32::from(byte) / 127.0));
        }
        Ok(scale * hits as f32 / self.targets.len() as f32)
    }
}

/// Returns NaN for every sample: advantages that cannot be used.
pub struct NanNormalizer;

impl drmas_plugin_api::Normalizer for NanNormalizer {
    fn advantages(&self, samples: &[drmas_plugin_api::SampleRow]) -> PluginResult<Vec<f32>> {
        Ok(vec![f32::NAN; samples.len()])
    }
}

fn id(kind: ComponentKind, name: &str) -> ComponentId {
    ComponentId {
        kind,
        name: name.into(),
        version: "0".into(),
        source: "test".into(),
    }
}

/// Update settings for tiny models: a learning rate big enough to learn in few steps.
pub fn update_settings(agg: LossAgg) -> UpdateSettings {
    UpdateSettings {
        loss: LossSettings {
            clip_low: 0.2,
            clip_high: 0.2,
            dual_clip: 3.0,
            agg,
            kl: None,
            entropy_coef: 0.0,
            gspo: false,
            tis_cap: None,
            norm_len: 1.0,
        },
        optimizer: AdamWConfig {
            weight_decay: 0.0,
            ..AdamWConfig::default()
        },
        grad_clip: 1.0,
        micro_batch_tokens: 256,
        logits_budget_bytes: 1 << 20,
        ppo_epochs: 1,
        mini_batches: 1,
        logp_old: LogpOld::Recompute,
        share_prompts: true,
        shadow_gradients: false,
    }
}

/// A worker whose batches are deterministic: it waits for `batch` requests (or 5 s).
pub fn worker_config(batch: usize) -> WorkerConfig {
    WorkerConfig {
        max_sequences: batch,
        gather_window: Duration::from_secs(5),
        ..WorkerConfig::default()
    }
}

/// A training worker on the tiny checkpoint `tiny`.
pub fn training_worker(
    name: &str,
    tiny: &str,
    settings: UpdateSettings,
    with_reference: bool,
    config: WorkerConfig,
) -> ModelHandle {
    training_worker_in(name, tiny, settings, with_reference, config, None)
}

/// [`training_worker`], joining its model's process group of a data-parallel job.
pub fn training_worker_in(
    name: &str,
    tiny: &str,
    settings: UpdateSettings,
    with_reference: bool,
    config: WorkerConfig,
    dist: Option<Arc<DistJob>>,
) -> ModelHandle {
    let dir = super::tiny_models().join(tiny);
    let group = format!("model/{name}");
    spawn_worker(name, config, move || {
        let reference = with_reference.then(|| super::load_dir(&dir));
        let mut backend = ModelBackend::new(super::load_dir(&dir), None, dir.clone())
            .with_training(settings, reference);
        if let Some(job) = &dist {
            backend.collective = Some(job.model_group(&group, tch::Device::Cpu)?);
        }
        Ok(Box::new(backend) as Box<dyn Backend>)
    })
    .unwrap()
}

/// A target token for `agent` on the tiny llama whose first-token probability, averaged
/// over `questions`, is closest to `p` (so a test starts near a known chance rate).
pub fn pick_target(agent: &str, questions: &[String], p: f64) -> String {
    use drmas::model::{SequencePair, response_logprobs};
    use drmas::rollout::Codec;
    let model = super::load_tiny("llama");
    let vocab = model.config.vocab_size as usize;
    let mut mean = vec![0f64; vocab];
    let _guard = tch::no_grad_guard();
    for q in questions {
        let prompt = ByteCodec
            .prompt_ids(&[Message::user(format!("{agent}:{q}"))])
            .unwrap();
        let tokens: Vec<[i64; 1]> = (0..vocab as i64).map(|t| [t]).collect();
        let pairs: Vec<SequencePair> = tokens
            .iter()
            .map(|t| SequencePair {
                prompt: &prompt,
                response: t,
            })
            .collect();
        let lp = response_logprobs(&model, &pairs, 1.0, false).unwrap();
        for (t, m) in mean.iter_mut().enumerate() {
            *m += f64::from(lp.row(t as i64, 1)[0]).exp() / questions.len() as f64;
        }
    }
    // Printable ASCII only, so the target reads well in messages.
    let best = (32..127usize)
        .min_by(|&a, &b| (mean[a] - p).abs().total_cmp(&(mean[b] - p).abs()))
        .unwrap();
    String::from(best as u8 as char)
}

/// What a test trainer is made of.
pub struct Setup {
    /// (agent, model, target) in workflow order: each agent hands off to the next.
    pub agents: Vec<(&'static str, &'static str, String)>,
    /// Model ids to start (each on the tiny llama), with their learning rate.
    pub models: Vec<(&'static str, f64)>,
    pub normalizer: &'static str,
    pub trainer: TrainerSection,
    pub questions: Vec<String>,
    pub reward_scale: f32,
    pub scaled_question: Option<String>,
    pub graded: bool,
    /// Tokens each agent says (the target counts when it is the whole completion).
    pub max_new_tokens: u32,
    pub seed: u64,
    pub settings: UpdateSettings,
    /// A data-parallel job the models' workers join (the trainer joins it through its
    /// options).
    pub dist: Option<Arc<DistJob>>,
}

impl Setup {
    pub fn new(normalizer: &'static str) -> Self {
        let questions: Vec<String> = (0..8).map(|i| format!("q{i}")).collect();
        Self {
            agents: vec![("solo", "lm", pick_target("solo", &questions, 0.03))],
            models: vec![("lm", 0.02)],
            normalizer,
            trainer: TrainerSection {
                steps: 20,
                prompts_per_step: 4,
                group_size: 8,
                save_every: 0,
                ..TrainerSection::default()
            },
            questions,
            reward_scale: 1.0,
            scaled_question: None,
            graded: false,
            max_new_tokens: 1,
            seed: 3,
            settings: update_settings(LossAgg::TokenMean),
            dist: None,
        }
    }

    /// The team: an agent of [`SayOne`] for each of `agents`, each model a worker on the
    /// tiny llama, and the reward of [`Targets`].
    pub fn team(&self) -> Team {
        let batch = (self.trainer.prompts_per_step * self.trainer.group_size) as usize;
        let mut models = HashMap::new();
        for (id, _) in &self.models {
            let handle = training_worker_in(
                id,
                "llama",
                self.settings.clone(),
                false,
                worker_config(batch),
                self.dist.clone(),
            );
            models.insert(
                id.to_string(),
                ModelSlot {
                    id: id.to_string(),
                    codec: Arc::new(ByteCodec),
                    handle,
                },
            );
        }
        let agents = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, (name, model, _))| AgentSlot {
                name: name.to_string(),
                handle: AgentHandle::new(
                    id(ComponentKind::Agent, "test/say-one"),
                    Box::new(SayOne {
                        next: self.agents.get(i + 1).map(|a| a.0.to_string()),
                    }),
                ),
                model: model.to_string(),
                sampling: Sampling {
                    temperature: 1.0,
                    max_new_tokens: std::num::NonZeroU32::new(self.max_new_tokens).unwrap(),
                    ..Sampling::default()
                },
            })
            .collect();
        let reward = RewardHandle::new(
            id(ComponentKind::Reward, "test/targets"),
            Box::new(Targets {
                targets: self
                    .agents
                    .iter()
                    .map(|(a, _, t)| (a.to_string(), t.to_string()))
                    .collect(),
                scale: self.reward_scale,
                scaled_question: self.scaled_question.clone(),
                graded: self.graded,
            }),
        );
        Team {
            agents,
            models,
            environment: None,
            tools: Vec::new(),
            rewards: vec![drmas::rollout::RewardSlot::team(reward, 1.0)],
            options: TeamOptions {
                entry: self.agents[0].0.to_string(),
                max_turns: self.agents.len() as u32,
                final_agent: None,
                max_loops: None,
                invalid_penalty: 0.0,
                seed: self.seed,
                tool_timeout: Duration::from_secs(5),
                max_failed_episodes: 0.05,
                keep_prompts: false,
            },
        }
    }

    pub fn normalizer(&self) -> NormalizerHandle {
        if self.normalizer == "test/nan" {
            return NormalizerHandle::new(
                id(ComponentKind::Normalizer, "test/nan"),
                Box::new(NanNormalizer),
            );
        }
        Registry::builtin()
            .create_normalizer(self.normalizer, "", &ResolvePolicy::default())
            .unwrap()
    }

    /// The experiment these components make, its output in `run_dir`: the setup's
    /// models (the tiny llama), agents, reward, normalizer, `[trainer]` and seed, and
    /// its questions as the train set, written beside `run_dir` as
    /// `<run_dir>.tasks.jsonl`. Loaded as `drmas train` loads a file.
    pub fn experiment(&self, run_dir: &Path) -> Experiment {
        let tasks = run_dir.with_extension("tasks.jsonl");
        let rows: String = self
            .questions
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let row = serde_json::json!({"id": format!("t{i}"), "question": q, "answer": "0"});
                format!("{row}\n")
            })
            .collect();
        // Each writer renames its own copy into place: the ranks of a data-parallel
        // test write the same file at once.
        let own = tasks.with_extension(format!("{:?}.part", std::thread::current().id()));
        std::fs::write(&own, rows).unwrap();
        std::fs::rename(&own, &tasks).unwrap();
        let llama = super::tiny_models().join("llama");
        let mut text = format!(
            "[experiment]\nname = \"tiny\"\nseed = {}\noutput_dir = {:?}\n\n",
            self.seed,
            run_dir.display().to_string()
        );
        for (id, lr) in &self.models {
            text.push_str(&format!(
                "[[models]]\nid = \"{id}\"\npath = {:?}\nlr = {lr:?}\n\n",
                llama.display().to_string()
            ));
        }
        for (name, model, _) in &self.agents {
            text.push_str(&format!(
                "[[agents]]\nname = \"{name}\"\ncomponent = \"test/say-one\"\nmodel = \"{model}\"\nsampling = {{ temperature = 1.0, max_new_tokens = {} }}\n\n",
                self.max_new_tokens
            ));
        }
        text.push_str(&format!(
            "[workflow]\nentry = \"{}\"\nmax_turns = {}\n\n[[rewards]]\ncomponent = \"test/targets\"\n\n[normalizer]\ncomponent = \"{}\"\n\n[data]\ntrain = {{ path = {:?}, source = \"tiny\" }}\n",
            self.agents[0].0,
            self.agents.len(),
            self.normalizer,
            tasks.display().to_string()
        ));
        // `[trainer]` as the test set it, written as the file would hold it.
        let mut table: toml::Table = toml::from_str(&text).unwrap();
        table.insert(
            "trainer".into(),
            toml::Value::try_from(&self.trainer).unwrap(),
        );
        let path = run_dir.with_extension("toml");
        drmas::config::parse_experiment(&path, toml::to_string(&table).unwrap())
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    /// The trainer of [`Self::experiment`] with [`Self::team`] and [`Self::normalizer`]
    /// handed in.
    pub fn trainer(
        &self,
        run_dir: &Path,
        opts: TrainOptions,
    ) -> Result<Trainer, drmas::train::RunError> {
        self.trainer_with(run_dir, self.team(), opts)
    }

    /// [`Self::trainer`] with another team (a reward or an option of the test's own).
    pub fn trainer_with(
        &self,
        run_dir: &Path,
        team: Team,
        opts: TrainOptions,
    ) -> Result<Trainer, drmas::train::RunError> {
        Trainer::with_components(
            &self.experiment(run_dir),
            &Registry::builtin(),
            Components {
                team,
                normalizer: self.normalizer(),
                shadow: None,
            },
            opts,
        )
    }
}

pub fn quiet() -> TrainOptions {
    TrainOptions {
        quiet: true,
        ..TrainOptions::default()
    }
}

/// The metrics lines of a run.
pub fn metrics(run_dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every weight of a model, by name, as raw f32 values.
pub fn weights(handle: &ModelHandle) -> Vec<(String, Vec<f32>)> {
    handle
        .call("weights", |b, _| {
            let m = b
                .model_backend()
                .ok_or(drmas::pool::BackendError::Unsupported)?;
            Ok(decoder_weights(&m.model))
        })
        .unwrap()
}

/// Every weight of a decoder, by name, as raw f32 values.
pub fn decoder_weights(model: &drmas::model::Decoder) -> Vec<(String, Vec<f32>)> {
    let mut vars: Vec<(String, Vec<f32>)> = model
        .vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()))
        .collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

/// The optimizer's moments and step count.
pub fn moments(handle: &ModelHandle) -> (Vec<(String, Vec<f32>)>, i64) {
    handle
        .call("moments", |b, slot| {
            let m = b
                .model_backend()
                .ok_or(drmas::pool::BackendError::Unsupported)?;
            let t = m
                .training(slot)
                .ok_or(drmas::pool::BackendError::Unsupported)?;
            let (tensors, steps) = t.optimizer.state();
            Ok((
                tensors
                    .into_iter()
                    .map(|(n, t)| (n, Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()))
                    .collect(),
                steps,
            ))
        })
        .unwrap()
}

pub fn temp_run() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    (dir, run)
}

/// A sample of `agent` after the prompt [5, 17, 33, 2] the update tests share: its
/// `response`, each token sampled at log-prob −4 at `temperature`, advantage `adv`.
pub fn train_sample(agent: &str, response: Vec<i64>, temperature: f64, adv: f32) -> TrainSample {
    TrainSample {
        agent: agent.into(),
        prompt: vec![5, 17, 33, 2],
        sample_logprobs: vec![-4.0; response.len()],
        response,
        temperature,
        advantage: adv,
    }
}

/// One process's update batch of `samples` at step 0.
pub fn update_batch(samples: Vec<TrainSample>, lr: f64) -> UpdateBatch {
    UpdateBatch {
        step: 0,
        lr,
        samples,
        share: None,
        progress: Arc::default(),
        shadow_advantages: None,
    }
}
