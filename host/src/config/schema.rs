//! The experiment file (docs/experiments.md). Every table refuses unknown keys, so a typo is an
//! error with its position rather than a silently ignored setting.

use serde::{Deserialize, Serialize};
// The settings enums live with the code that uses them; the experiment file names them here.
use super::count;
pub use crate::data::DataSource;
pub use crate::model::Dtype;
use crate::model::SamplingParams;
pub use crate::pool::{Batching, Offload};
use crate::pool::{DeviceError, DeviceSpec};
pub use crate::update::{KlEstimator, LogpOld, LossAgg, ScheduleKind, Shard};
use std::{
    collections::BTreeMap,
    num::{NonZeroU32, NonZeroUsize},
    path::PathBuf,
};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    pub experiment: ExperimentSection,
    #[serde(default)]
    pub plugins: PluginsSection,
    #[serde(default)]
    pub models: Vec<ModelSection>,
    #[serde(default)]
    pub agents: Vec<AgentSection>,
    pub workflow: WorkflowSection,
    #[serde(default)]
    pub environment: Option<EnvironmentSection>,
    #[serde(default)]
    pub rewards: Vec<RewardSection>,
    pub normalizer: ComponentSection,
    #[serde(default)]
    pub data: DataSection,
    #[serde(default)]
    pub trainer: TrainerSection,
    #[serde(default)]
    pub pool: PoolSection,
    #[serde(default)]
    pub tracking: crate::tracking::TrackingSection,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSection {
    pub name: String,
    #[serde(default)]
    pub seed: u64,
    /// Where metrics, samples and checkpoints go; `runs/<name>` when absent.
    #[serde(default)]
    pub output_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsSection {
    /// Extra folders scanned for `*.so` plugins (relative to the working directory).
    #[serde(default)]
    pub dirs: Vec<PathBuf>,
    /// Plugin name → semver requirement (`"^1.2"`).
    #[serde(default)]
    pub require: BTreeMap<String, String>,
    /// Plugins whose dynamic file may replace the built-in of the same name.
    #[serde(default, rename = "override")]
    pub overrides: Vec<String>,
    /// Load plugins from folders and files that every user can write or that another
    /// user owns (refused otherwise; see docs/plugins.md).
    #[serde(default)]
    pub allow_untrusted: bool,
    /// Plugin file name (`libacme_bench.so`) → its sha256 in hex; a file of that name
    /// in any plugin folder whose contents differ is refused before it is loaded.
    #[serde(default)]
    pub sha256: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    pub id: String,
    /// An HF checkpoint folder (absent for a LoRA model, which names its `base`).
    #[serde(default)]
    pub path: PathBuf,
    /// A LoRA model: the frozen base's HF folder. LoRA models with the same base,
    /// dtype and device share one copy of it.
    #[serde(default)]
    pub base: Option<PathBuf>,
    /// The adapter's rank, alpha, dropout and target projections (with `base`).
    #[serde(default)]
    pub lora: Option<crate::model::lora::LoraConfig>,
    /// `"auto"` (placed by memory on the pool's devices), `"cpu"` or `"cuda:N"`.
    #[serde(default = "auto_device")]
    pub device: DeviceName,
    /// f32 on CPU and bf16 on CUDA when absent.
    #[serde(default)]
    pub dtype: Option<Dtype>,
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// AdamW's decoupled weight decay.
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f64,
    /// This model's gradient-norm clip, in place of `[trainer] grad_clip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_clip: Option<f64>,
    /// Generate this model's rollouts on an inference engine (docs/engines.md).
    #[serde(default)]
    pub engine: Option<EngineSection>,
    /// In a data-parallel job, what of the model's training state each rank keeps only
    /// its share of: `"none"` (everything whole on every rank), `"optimizer"` (ZeRO-2:
    /// the AdamW state and the reduced gradient; docs/distributed.md). Left out of the
    /// resolved settings when `"none"`, so runs from before the key resume unchanged.
    #[serde(default, skip_serializing_if = "Shard::is_none")]
    pub shard: Shard,
}

/// Which engine's protocol a model's engine speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum EngineKind {
    #[serde(rename = "llama-cpp")]
    LlamaCpp,
    #[serde(rename = "sglang")]
    Sglang,
    #[serde(rename = "vllm")]
    Vllm,
}

/// The element type of the weights exported to a GGUF engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportDtype {
    #[default]
    F32,
    F16,
}

/// `[models.engine]`: where a model's rollouts are generated and how the engine takes
/// the weights of each update.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    pub kind: EngineKind,
    /// An engine that runs elsewhere (`http://host:port`): SGLang, vLLM.
    #[serde(default)]
    pub url: Option<String>,
    /// The engine drmas starts and stops itself: program and arguments, with `{port}`
    /// (a free port of 127.0.0.1) and `{model}` filled in: for llama.cpp the exported
    /// GGUF (restarted on each update's), for SGLang and vLLM the model's folder (the
    /// base's for LoRA; started once, synced through their own calls).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// llama.cpp: the GGUF whose layout, metadata and tokenizer the exports follow (the
    /// file the model was imported from).
    #[serde(default)]
    pub gguf: Option<PathBuf>,
    /// llama.cpp: the exported weights' element type.
    #[serde(default)]
    pub export: ExportDtype,
    /// Where each version of the weights is written for the engine (a folder the engine
    /// can read); `<output_dir>/engine/<model id>` when absent.
    #[serde(default)]
    pub sync_dir: Option<PathBuf>,
    /// Requests in flight at once (the engine batches them; match its parallel slots).
    #[serde(default = "default_engine_parallel")]
    pub parallel: usize,
    /// The longest a request may take, in seconds.
    #[serde(default = "default_engine_timeout")]
    pub timeout_s: f64,
    /// Attempts per request (no connection, a timeout, 429 and 5xx are tried again).
    #[serde(
        default = "default_engine_attempts",
        deserialize_with = "count::at_least_one"
    )]
    pub attempts: NonZeroU32,
    /// vLLM: the served model name (`--served-model-name`), when it serves several.
    #[serde(default)]
    pub served_model: Option<String>,
}

fn default_engine_parallel() -> usize {
    8
}
fn default_engine_timeout() -> f64 {
    600.0
}
fn default_engine_attempts() -> NonZeroU32 {
    count::nz(3)
}

fn auto_device() -> DeviceName {
    DeviceName::new("auto")
}

/// A device as the file names it (`auto`, `cpu`, `cuda:N`), parsed once when the file
/// is read. A name that does not parse keeps its error, so the file's checks report it
/// with the file's other problems; whoever uses the device takes the parsed
/// [`DeviceSpec`] and never parses the text again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceName {
    text: String,
    parsed: Result<DeviceSpec, DeviceError>,
}

impl DeviceName {
    pub fn new(text: &str) -> Self {
        Self {
            text: text.to_string(),
            parsed: crate::pool::parse_device(text),
        }
    }

    /// The device, or why its name does not parse.
    pub fn spec(&self) -> Result<DeviceSpec, DeviceError> {
        self.parsed.clone()
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl<'de> Deserialize<'de> for DeviceName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(DeviceName::new(&String::deserialize(d)?))
    }
}

impl serde::Serialize for DeviceName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl ModelSection {
    /// The folder whose weights this model loads: its checkpoint, or its LoRA base.
    pub fn weights_dir(&self) -> &std::path::Path {
        self.base.as_deref().unwrap_or(&self.path)
    }
}

fn default_lr() -> f64 {
    1e-6
}
fn default_weight_decay() -> f64 {
    0.01
}

/// An agent's sampling settings; a key left out takes [`Sampling::default`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sampling {
    pub temperature: f64,
    pub top_p: f64,
    /// 0 = off.
    pub top_k: u32,
    #[serde(deserialize_with = "count::at_least_one")]
    pub max_new_tokens: NonZeroU32,
    pub stop: Vec<String>,
}

fn one() -> f64 {
    1.0
}

/// The sampler's own defaults ([`SamplingParams::default`]), so the file and a request
/// built without one agree by construction.
impl Default for Sampling {
    fn default() -> Self {
        let p = SamplingParams::default();
        Self {
            temperature: p.temperature,
            top_p: p.top_p,
            top_k: u32::try_from(p.top_k).expect("the default top_k is a small count"),
            max_new_tokens: u32::try_from(p.max_new_tokens)
                .ok()
                .and_then(NonZeroU32::new)
                .expect("the default max_new_tokens is a small count"),
            stop: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// The role's name in this experiment (`solver`).
    pub name: String,
    /// `plugin/component`.
    pub component: String,
    /// The `id` of a `[[models]]` entry; two agents naming one model share it.
    pub model: String,
    #[serde(default)]
    pub sampling: Sampling,
    /// Handed to the plugin as TOML text.
    #[serde(default)]
    pub config: Option<toml::Table>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSection {
    /// The agent that takes the first turn.
    pub entry: String,
    #[serde(
        default = "default_max_turns",
        deserialize_with = "count::at_least_one"
    )]
    pub max_turns: NonZeroU32,
    /// The agent that takes the episode's last turn, whatever the previous action named
    /// (the search team's answerer: an episode out of turns still answers).
    #[serde(default)]
    pub final_agent: Option<String>,
    /// How often control may return to the entry agent (solver ↔ verifier loops).
    #[serde(default, deserialize_with = "count::at_least_one_when_set")]
    pub max_loops: Option<NonZeroU32>,
    /// The fraction of a run's episodes (an evaluation's, a training step's) that may
    /// fail (a plugin panicked, returned an error or a non-finite number) before the run
    /// stops.
    #[serde(default = "default_max_failed_episodes")]
    pub max_failed_episodes: f64,
}

fn default_max_turns() -> NonZeroU32 {
    count::nz(4)
}

/// `[workflow] max_failed_episodes` when the experiment does not say.
pub const DEFAULT_MAX_FAILED_EPISODES: f64 = 0.05;

fn default_max_failed_episodes() -> f64 {
    DEFAULT_MAX_FAILED_EPISODES
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentSection {
    pub component: String,
    #[serde(default)]
    pub config: Option<toml::Table>,
}

/// Seconds one tool call may take when the experiment does not say.
pub const DEFAULT_TOOL_TIMEOUT_S: f64 = 60.0;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentSection {
    pub component: String,
    /// Seconds one tool call may take before the episode fails (every call, whether or
    /// not the environment declares itself slow).
    #[serde(default = "default_tool_timeout")]
    pub tool_timeout_s: f64,
    #[serde(default)]
    pub config: Option<toml::Table>,
}

fn default_tool_timeout() -> f64 {
    DEFAULT_TOOL_TIMEOUT_S
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RewardSection {
    pub component: String,
    #[serde(default = "one")]
    pub weight: f64,
    /// The agents whose samples this reward scores; absent: the whole team (the team
    /// reward, which success and evaluation report).
    #[serde(default)]
    pub agents: Option<Vec<String>>,
    /// Whether this reward is part of the team reward (success and evaluation); absent:
    /// when it has no `agents`. `team = true` with `agents` makes a team outcome that
    /// trains only those agents (a verifier then learns from its own reward alone).
    #[serde(default)]
    pub team: Option<bool>,
    #[serde(default)]
    pub config: Option<toml::Table>,
}

impl RewardSection {
    /// Whether this reward counts in the team reward.
    pub fn in_team(&self) -> bool {
        self.team.unwrap_or(self.agents.is_none())
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// One table: `[data.train]` or `train = { path = "…" }`.
    #[serde(default, deserialize_with = "one_source")]
    pub train: Option<DataSource>,
    /// A list of tables: `[[data.val]]` or `val = [{ path = "…" }, …]`.
    #[serde(default, deserialize_with = "source_list")]
    pub val: Vec<DataSource>,
}

/// `train` takes one table; a list or a bare path gets a message that says so instead
/// of serde's "expected struct DataSource".
fn one_source<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DataSource>, D::Error> {
    struct One;
    impl<'de> serde::de::Visitor<'de> for One {
        type Value = Option<DataSource>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("one table `{ path = \"…\" }`")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            DataSource::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(serde::de::Error::custom(
                "`train` takes one table (`[data.train]` or `train = { path = \"…\" }`), not a list: only `val` takes a list",
            ))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(E::custom(format!(
                "`train` takes a table, not a bare path: write `train = {{ path = \"{v}\" }}`"
            )))
        }
    }
    d.deserialize_any(One)
}

/// `val` takes a list of tables; one table or a bare path gets a message that says so.
fn source_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<DataSource>, D::Error> {
    struct List;
    impl<'de> serde::de::Visitor<'de> for List {
        type Value = Vec<DataSource>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of tables `[{ path = \"…\" }]`")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            Vec::<DataSource>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(serde::de::Error::custom(
                "`val` takes a list of tables (`[[data.val]]` or `val = [{ path = \"…\" }]`), not one table",
            ))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(E::custom(format!(
                "`val` takes a list of tables, not a bare path: write `val = [{{ path = \"{v}\" }}]`"
            )))
        }
    }
    d.deserialize_any(List)
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Clip {
    #[serde(default = "default_clip")]
    pub low: f64,
    #[serde(default = "default_clip")]
    pub high: f64,
    /// Dual-clip constant c for negative advantages.
    #[serde(default = "default_dual")]
    pub dual: f64,
}

fn default_clip() -> f64 {
    0.2
}
fn default_dual() -> f64 {
    3.0
}

impl Default for Clip {
    fn default() -> Self {
        Self {
            low: 0.2,
            high: 0.2,
            dual: 3.0,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Kl {
    pub coef: f64,
    #[serde(default = "default_kl_estimator")]
    pub estimator: KlEstimator,
}

fn default_kl_estimator() -> KlEstimator {
    KlEstimator::K3
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainerSection {
    pub steps: u32,
    pub prompts_per_step: u32,
    pub group_size: u32,
    pub invalid_penalty: f64,
    pub clip: Clip,
    pub loss_agg: LossAgg,
    pub grad_clip: f64,
    pub kl: Option<Kl>,
    pub entropy_coef: f64,
    /// Sequence-level (GSPO) importance ratio instead of per-token.
    pub gspo: bool,
    /// Truncated importance weight cap C for the behaviour mismatch (TIS); off when absent.
    pub tis_cap: Option<f64>,
    /// Passes over each step's samples.
    #[serde(deserialize_with = "count::at_least_one")]
    pub ppo_epochs: NonZeroU32,
    /// Optimizer steps per pass (the samples are split into this many mini-batches).
    #[serde(deserialize_with = "count::at_least_one")]
    pub mini_batches: NonZeroU32,
    /// Where the ratio's `logp_old` comes from with several optimizer steps per batch.
    pub logp_old: LogpOld,
    /// Token budget of one micro-batch in the update; unset: 4096 on the CPU, sized
    /// from the free memory on a GPU (`pool::sizing`).
    pub micro_batch_tokens: Option<u32>,
    /// Samples with the same prompt run it once in the update (forward and backward).
    pub share_prompts: bool,
    /// MiB of float32 logits one log-softmax chunk of the update may hold; unset: 256
    /// on the CPU, sized from the free memory on a GPU (`pool::sizing`).
    #[serde(deserialize_with = "count::at_least_one_when_set")]
    pub logits_budget_mb: Option<NonZeroU32>,
    pub lr_schedule: ScheduleKind,
    pub warmup_steps: u32,
    /// The learning rate a linear or cosine schedule decays to, as a fraction of `lr`.
    pub min_lr_ratio: f64,
    /// A step whose gradient norm exceeds this many times the model's running median is
    /// flagged as a spike.
    pub spike_factor: f64,
    /// Steps in the running median of the spike detector.
    #[serde(deserialize_with = "count::at_least_one")]
    pub spike_window: NonZeroU32,
    /// This many skipped updates in a row (non-finite loss or gradient) stop the run.
    #[serde(deserialize_with = "count::at_least_one")]
    pub max_consecutive_skips: NonZeroU32,
    /// Policy versions a sample may lag its model's weights at the update (a sample
    /// generated by version v, trained while the weights are at w, is w − v stale);
    /// staler samples are left out of the update and counted. 0: only samples of the
    /// current weights are trained on.
    pub max_staleness: u32,
    /// Checkpoint every N steps (0 = only at the end).
    pub save_every: u32,
    /// Complete checkpoints kept (older ones are deleted once a newer one is complete).
    #[serde(deserialize_with = "count::at_least_one")]
    pub keep_checkpoints: NonZeroU32,
    /// Evaluate on the [data] val sets every N steps (0 = never during training).
    pub eval_every: u32,
    /// Samples per task in those evaluations.
    #[serde(deserialize_with = "count::at_least_one")]
    pub eval_k: NonZeroU32,
    /// At most this many tasks of each val set in those evaluations.
    #[serde(deserialize_with = "count::at_least_one_when_set")]
    pub eval_limit: Option<NonZeroUsize>,
    /// An episode succeeds when its team reward is at least this.
    pub success_threshold: f64,
    /// A second normalizer whose advantages are computed on every step's samples and
    /// compared with the run's (metrics only; the update never sees them):
    /// `"norms/grpo"`, or `{ component = "...", config = { ... } }`.
    #[serde(deserialize_with = "shadow_normalizer")]
    pub shadow_normalizer: Option<ComponentSection>,
    /// How each sample's policy-gradient term is weighted: `"none"`, or
    /// `"agent-frequency"` (1 / the samples its agent has in its task, renormalized to a
    /// batch mean of 1), the reviewers' loss balance for plain GRPO. Left out of the
    /// resolved settings when `"none"`, so runs from before the key resume unchanged.
    #[serde(skip_serializing_if = "LossBalance::is_none")]
    pub loss_balance: LossBalance,
    /// DAPO-style dynamic sampling (`[trainer.dynamic_sampling]`): an agent's group of
    /// a task whose binary outcomes are all equal is left out of the update, and the
    /// batch optionally refilled with further tasks. Off when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_sampling: Option<DynamicSampling>,
    /// With a `shadow_normalizer`: before each update, a second backward on the same
    /// samples and weights with the shadow's advantages, recording the pre-clip gradient
    /// norm it would have had per agent and model, without stepping (docs/mechanism.md).
    /// Left out of the resolved settings when off (runs from before it resume as they were).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow_gradients: bool,
    /// Start from another run's checkpoint: its weights (and, if asked, its optimizer
    /// state), with this run's own step counter, data order and metrics.
    pub warm_start: Option<WarmStart>,
}

/// `[trainer] warm_start = { checkpoint = "runs/x/checkpoints/step-000020" }`.
#[derive(Debug, Clone, Deserialize, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WarmStart {
    /// A checkpoint folder (`DIR/<model id>` for each model) or, for a one-model
    /// experiment, a model folder a checkpoint holds.
    pub checkpoint: PathBuf,
    /// Also take each model's AdamW moments and step count from it.
    #[serde(default)]
    pub optimizer: bool,
}

/// `shadow_normalizer` as a component name, or as a table like `[normalizer]`.
fn shadow_normalizer<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ComponentSection>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Spec {
        Name(String),
        Table(ComponentSection),
    }
    Ok(Some(match Spec::deserialize(d).map_err(|_| {
        serde::de::Error::custom(
            "expected a normalizer's name (\"norms/grpo\") or a table { component = \"...\", config = { ... } }",
        )
    })? {
        Spec::Name(component) => ComponentSection {
            component,
            config: None,
        },
        Spec::Table(t) => t,
    }))
}

impl Default for TrainerSection {
    fn default() -> Self {
        Self {
            steps: 100,
            prompts_per_step: 4,
            group_size: 8,
            invalid_penalty: 0.1,
            clip: Clip::default(),
            loss_agg: LossAgg::default(),
            grad_clip: 1.0,
            kl: None,
            entropy_coef: 0.0,
            gspo: false,
            tis_cap: None,
            ppo_epochs: count::nz(1),
            mini_batches: count::nz(1),
            logp_old: LogpOld::default(),
            micro_batch_tokens: None,
            share_prompts: true,
            logits_budget_mb: None,
            lr_schedule: ScheduleKind::default(),
            warmup_steps: 0,
            min_lr_ratio: 0.0,
            spike_factor: 5.0,
            spike_window: count::nz(20),
            max_consecutive_skips: count::nz(3),
            max_staleness: 0,
            save_every: 0,
            keep_checkpoints: count::nz(2),
            eval_every: 0,
            eval_k: count::nz(4),
            eval_limit: None,
            success_threshold: 1.0,
            shadow_normalizer: None,
            shadow_gradients: false,
            loss_balance: LossBalance::None,
            dynamic_sampling: None,
            warm_start: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    /// `"cpu"`, `"cuda:N"`, or `"auto"` (every visible GPU, else the CPU).
    #[serde(default = "default_devices")]
    pub devices: Vec<DeviceName>,
    #[serde(default)]
    pub offload: Offload,
    /// At most this many GiB of each device for placement (the rest is left to other
    /// processes); the device's free memory when absent.
    #[serde(default)]
    pub memory_limit_gib: Option<f64>,
    /// How a model worker forms generation batches: `"deterministic"` (in rounds, so
    /// which requests share a batch does not depend on timing) or `"timed"`.
    #[serde(default)]
    pub batching: Batching,
    /// At most this many rows in one generation batch; unset: 64 on the CPU, sized from
    /// the free memory on a GPU (`pool::sizing`).
    #[serde(default)]
    pub max_batch_rows: Option<usize>,
    /// With `batching = "timed"`: how long a batch waits for more requests.
    #[serde(default = "default_gather_window_ms")]
    pub gather_window_ms: u64,
    /// Threads that drive the episodes.
    #[serde(default = "default_episode_threads")]
    pub episode_threads: usize,
    /// In a data-parallel job (docs/distributed.md): how long one collective may wait
    /// for the other ranks before the run fails naming the one that did not answer.
    #[serde(default = "default_collective_timeout_s")]
    pub collective_timeout_s: f64,
}

fn default_collective_timeout_s() -> f64 {
    1800.0
}

fn default_devices() -> Vec<DeviceName> {
    vec![auto_device()]
}

fn default_gather_window_ms() -> u64 {
    5
}

/// `rollout::EPISODE_THREADS`, which sits above the config (a test keeps them equal).
fn default_episode_threads() -> usize {
    2
}

impl Default for PoolSection {
    fn default() -> Self {
        Self {
            devices: default_devices(),
            offload: Offload::None,
            memory_limit_gib: None,
            batching: Batching::default(),
            max_batch_rows: None,
            gather_window_ms: default_gather_window_ms(),
            episode_threads: default_episode_threads(),
            collective_timeout_s: default_collective_timeout_s(),
        }
    }
}

/// `[trainer] loss_balance`: a weight on each sample's advantage (its policy-gradient
/// term; the KL and entropy terms are not weighted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossBalance {
    #[default]
    None,
    /// 1 / n of the samples of its (task, agent), renormalized to a batch mean of 1: an
    /// agent acting twice in a trajectory counts as much as one acting once.
    AgentFrequency,
}

impl LossBalance {
    pub fn is_none(&self) -> bool {
        *self == LossBalance::None
    }
}

/// `[trainer.dynamic_sampling]`. A sample's outcome is binary: its score with the
/// invalid penalty taken back reaches `success_threshold` (so a shaped score does not
/// make a group look informative). A group is one agent's samples of one task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DynamicSampling {
    /// At most this many further tasks per step, rolled out (G trajectories each) in
    /// rounds while the kept samples are fewer than the step's; absent: no refill.
    #[serde(
        default,
        deserialize_with = "count::at_least_one_when_set",
        skip_serializing_if = "Option::is_none"
    )]
    pub refill_tasks: Option<NonZeroU32>,
}
