//! Running an evaluation: the experiment's team on its validation sets, k episodes per
//! task at the evaluation sampling settings.

use super::report::{EvalReport, summarize};
use crate::{
    config::{DataSource, Experiment},
    launch::{LaunchError, LaunchOptions, launch},
    model::memory::{available_memory, gib},
    plugin::Registry,
    pool::{DistJob, WorkerConfig},
    rollout::{
        EpisodeOutcome, EpisodeSetError, EpisodeSetPlan, EpisodeSpec, FailedEpisode, FailureTally,
        Progress, RolloutError, Team, episodes_floor, run_episode_set,
    },
};
use drmas_dist::Group;
use drmas_plugin_api::Task;
use std::{collections::BTreeMap, path::PathBuf, sync::Arc, time::Instant};

/// Samples per task when neither the command line nor the experiment says.
pub const DEFAULT_K: usize = 16;

#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Samples per task.
    pub k: usize,
    /// At most this many tasks from each validation set.
    pub limit: Option<usize>,
    pub temperature: f64,
    pub top_p: f64,
    /// Model folders to evaluate instead of the experiment's (see [`crate::launch`]).
    pub checkpoint: Option<PathBuf>,
    /// An episode succeeds when its team reward is at least this.
    pub success_threshold: f64,
    pub worker: WorkerConfig,
    /// Show a progress bar (on a terminal) or progress lines (elsewhere).
    pub progress: bool,
    /// Keep every turn's prompt text (for sample dumps).
    pub keep_prompts: bool,
    /// Run on the experiment's train set instead of its validation sets (the gate
    /// before training: how the untrained team does on what it will train on).
    pub on_train: bool,
    /// Sample with each agent's own `[agents] sampling`, as training does, instead of
    /// `temperature` and `top_p` for every agent.
    pub agent_sampling: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            k: DEFAULT_K,
            limit: None,
            temperature: 0.6,
            top_p: 0.95,
            checkpoint: None,
            success_threshold: 1.0,
            worker: WorkerConfig::default(),
            progress: true,
            keep_prompts: false,
            on_train: false,
            agent_sampling: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}: the experiment has no [data] train set to evaluate on")]
    NoTrainData(PathBuf),
    #[error("{0}: the experiment has no [data] val sets to evaluate on")]
    NoValidationData(PathBuf),
    /// The loader's message names the file already.
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    #[error(transparent)]
    Launch(#[from] Box<LaunchError>),
    /// The evaluation's episodes stopped it: past the failure limit, every one failed
    /// (there is nothing to report), or the ranks could not exchange them. The same
    /// error in one process and on every rank of a data-parallel job.
    #[error("evaluation stopped: {0}")]
    Episodes(#[from] EpisodeSetError),
    #[error("evaluation shared by the ranks of a data-parallel job: {0}")]
    Dist(#[from] drmas_dist::DistError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(
        "k {k} × {tasks} tasks = {episodes} episodes need at least ~{} for their tasks and samples, more than the {} available ({limit})",
        gib(*.needed),
        gib(*.available)
    )]
    Memory {
        k: usize,
        tasks: usize,
        episodes: u64,
        needed: u64,
        available: u64,
        limit: String,
    },
}

/// Refuses `k` episodes of each of `tasks` when the records they hold whatever the
/// models generate ([`episodes_floor`]) exceed the host's available memory.
fn check_episodes_fit(tasks: &[Task], k: usize) -> Result<(), EvalError> {
    let needed = episodes_floor(tasks, k as u64);
    match available_memory(tch::Device::Cpu) {
        Some(a) if needed > a.bytes => Err(EvalError::Memory {
            k,
            tasks: tasks.len(),
            episodes: (tasks.len() as u64).saturating_mul(k as u64),
            needed,
            available: a.bytes,
            limit: a.source,
        }),
        _ => Ok(()),
    }
}

/// What an evaluation produced: the report, the completed episodes and the failed ones
/// (in the order they were specified).
#[derive(Debug)]
pub struct Evaluation {
    pub report: EvalReport,
    pub outcomes: Vec<EpisodeOutcome>,
    pub failed: Vec<FailedEpisode>,
}

/// Evaluates the experiment: starts its models (or a checkpoint's) and runs
/// [`evaluate`]. In a data-parallel job (`dist`) each rank starts its own copy of the
/// models (on `cuda:LOCAL_RANK` where devices are `auto`), the ranks share the tasks, and
/// each returns the whole evaluation.
pub fn run_eval(
    exp: &Experiment,
    registry: &Registry,
    opts: &EvalOptions,
    dist: Option<Arc<DistJob>>,
) -> Result<Evaluation, EvalError> {
    let sets = if opts.on_train {
        let train = exp.file.data.train.clone();
        train
            .map(|t| vec![t])
            .ok_or_else(|| EvalError::NoTrainData(exp.path.clone()))?
    } else {
        exp.file.data.val.clone()
    };
    if sets.is_empty() {
        return Err(EvalError::NoValidationData(exp.path.clone()));
    }
    // The tasks are read and the episodes' size checked before any model is loaded.
    let tasks = load_tasks(&sets, opts)?;
    let team = launch(
        exp,
        registry,
        &LaunchOptions {
            checkpoint: opts.checkpoint.clone(),
            worker: opts.worker.clone(),
            train: false,
            dist: dist.clone(),
        },
    )
    .map_err(Box::new)?;
    let mut group = dist
        .map(|job| job.group("eval", tch::Device::Cpu))
        .transpose()?;
    let mut team = team;
    team.options.keep_prompts = opts.keep_prompts;
    let runtime = crate::rollout::EpisodeRuntime::new().map_err(EvalError::Runtime)?;
    let evaluation = evaluate_tasks(
        &Arc::new(team),
        &exp.file.experiment.name,
        tasks,
        opts,
        &runtime,
        group.as_mut(),
    );
    // Dropping `runtime` does not wait for a tool call that timed out (EpisodeRuntime).
    evaluation
}

/// The tasks of the validation sets `sets` (at most `opts.limit` of each), refused when
/// `opts.k` episodes of each would not fit in memory.
fn load_tasks(sets: &[DataSource], opts: &EvalOptions) -> Result<Vec<Task>, EvalError> {
    let mut all = Vec::new();
    for source in sets {
        let mut tasks = crate::data::load_tasks(source)?;
        if let Some(limit) = opts.limit {
            tasks.truncate(limit);
        }
        all.extend(tasks);
    }
    check_episodes_fit(&all, opts.k)?;
    Ok(all)
}

/// Runs `team` on the validation sets `sets`, k episodes per task at the evaluation
/// sampling settings; also used by the trainer between steps. With `shards` (a
/// data-parallel job's group) the ranks share the tasks and every rank returns the
/// whole evaluation (see [`evaluate_tasks`]).
pub fn evaluate(
    team: &Arc<Team>,
    experiment: &str,
    sets: &[DataSource],
    opts: &EvalOptions,
    runtime: &tokio::runtime::Runtime,
    shards: Option<&mut Group>,
) -> Result<Evaluation, EvalError> {
    let tasks = load_tasks(sets, opts)?;
    evaluate_tasks(team, experiment, tasks, opts, runtime, shards)
}

/// The evaluation's episodes: k per task, run as one set
/// ([`crate::rollout::run_episode_set`]). In a data-parallel job (`shards`) the ranks
/// share the tasks (a task's k episodes on one rank, as training deals its groups),
/// exchange their episodes and judge the failure limit on the whole count, and each
/// builds the report one process would (the same episodes: each samples with its own
/// seed, whatever its batch).
fn evaluate_tasks(
    team: &Arc<Team>,
    experiment: &str,
    tasks: Vec<Task>,
    opts: &EvalOptions,
    runtime: &tokio::runtime::Runtime,
    shards: Option<&mut Group>,
) -> Result<Evaluation, EvalError> {
    let mut specs = Vec::new();
    for task in tasks {
        let uid = format!("{}/{}", task.source, task.id);
        for traj in 0..opts.k as u32 {
            specs.push(EpisodeSpec {
                task: task.clone(),
                uid: uid.clone(),
                traj,
                sampling_override: (!opts.agent_sampling).then_some((opts.temperature, opts.top_p)),
            });
        }
    }
    let plan = EpisodeSetPlan {
        specs,
        group_size: opts.k,
        progress: Progress {
            label: "eval".into(),
            show: opts.progress,
            lines: true,
        },
    };
    let started = Instant::now();
    // An evaluation is not stopped by a stop request: it is short, and a step's
    // evaluation ends before the step's stop is looked at.
    let set = run_episode_set(runtime, team, plan, || false, shards)?;
    let seconds = started.elapsed().as_secs_f64();
    let report = report_of(
        team,
        experiment,
        opts,
        &set.outcomes,
        set.episodes,
        &set.failed,
        set.tally,
        seconds,
    );
    Ok(Evaluation {
        report,
        outcomes: set.outcomes,
        failed: set.failed,
    })
}

/// The report of an evaluation's completed `outcomes` (of `total` episodes).
#[allow(clippy::too_many_arguments)]
fn report_of(
    team: &Team,
    experiment: &str,
    opts: &EvalOptions,
    outcomes: &[EpisodeOutcome],
    total: usize,
    failed: &[FailedEpisode],
    tally: FailureTally,
    seconds: f64,
) -> EvalReport {
    let generated: usize = outcomes
        .iter()
        .flat_map(|o| &o.samples)
        .map(|s| s.response_ids.len())
        .sum();
    let mut by_source: BTreeMap<String, Vec<&EpisodeOutcome>> = BTreeMap::new();
    for o in outcomes {
        by_source
            .entry(o.task.source.to_string())
            .or_default()
            .push(o);
    }
    let all: Vec<&EpisodeOutcome> = outcomes.iter().collect();
    let rewards = team.reward_names();
    EvalReport {
        experiment: experiment.to_string(),
        k: opts.k,
        temperature: opts.temperature,
        top_p: opts.top_p,
        agent_sampling: opts.agent_sampling,
        split: if opts.on_train { "train" } else { "val" }.into(),
        success_threshold: opts.success_threshold,
        overall: summarize(&all, opts.k, opts.success_threshold, &rewards),
        sources: by_source
            .iter()
            .map(|(s, os)| {
                let report = summarize(os, opts.k, opts.success_threshold, &rewards);
                (s.clone(), report)
            })
            .collect(),
        episodes: total,
        failed_episodes: failed.len(),
        failures: tally,
        generated_tokens: generated,
        seconds,
        tokens_per_second: generated as f64 / seconds.max(1e-9),
    }
}
