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
        Blame, EpisodeOutcome, EpisodeSpec, FailureLimit, FailureTally, FailureWatch, RolloutError,
        Team, episodes_floor, over_failure_limit, run_episodes_until,
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
    #[error("evaluation stopped: {0}")]
    TooManyFailures(#[from] crate::rollout::FailureLimit),
    /// Every episode failed: there is nothing to report.
    #[error(
        "evaluation stopped: all {episodes} episodes failed, so there is nothing to report; \
         the first, task {task}: {first}"
    )]
    AllFailed {
        episodes: usize,
        task: String,
        #[source]
        first: RolloutError,
    },
    /// As [`EvalError::AllFailed`], in a data-parallel job (the first error is another
    /// rank's text).
    #[error(
        "evaluation stopped: all {episodes} episodes failed, so there is nothing to report; \
         the first, task {task}: {first}"
    )]
    AllFailedOnRanks {
        episodes: usize,
        task: String,
        first: String,
    },
    #[error("evaluation shared by the ranks of a data-parallel job: {0}")]
    Dist(#[from] crate::pool::ExchangeError),
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

/// An episode that failed: its task, what it is blamed on, and the error.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FailedEpisode {
    /// `source/id`.
    pub uid: String,
    /// The task's id.
    pub task: String,
    pub traj: u32,
    pub blame: Blame,
    pub error: String,
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
        .transpose()
        .map_err(crate::pool::ExchangeError::from)?;
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

/// What one rank of a shared evaluation hands the others: its episodes with their index
/// among all the evaluation's episodes, and its failure count.
#[derive(serde::Serialize, serde::Deserialize)]
struct RankEvaluation {
    outcomes: Vec<(usize, EpisodeOutcome)>,
    failed: Vec<(usize, FailedEpisode)>,
    tally: FailureTally,
}

/// The evaluation's episodes: k per task. In a data-parallel job (`shards`) task `p`
/// runs on rank `p mod N` (its k episodes there, as training deals its groups), the ranks
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
    let (rank, world) = shards
        .as_deref()
        .map_or((0, 1), |g| (g.rank(), g.world_size()));
    let mut specs = Vec::new();
    let mut indices = Vec::new();
    let mut total = 0;
    for (p, task) in tasks.into_iter().enumerate() {
        let uid = format!("{}/{}", task.source, task.id);
        for traj in 0..opts.k as u32 {
            if p % world == rank {
                indices.push(total);
                specs.push(EpisodeSpec {
                    task: task.clone(),
                    uid: uid.clone(),
                    traj,
                    sampling_override: (!opts.agent_sampling)
                        .then_some((opts.temperature, opts.top_p)),
                });
            }
            total += 1;
        }
    }
    let labels: Vec<(String, u32, String)> = specs
        .iter()
        .map(|s| (s.uid.clone(), s.traj, s.task.id.clone()))
        .collect();
    let watch = FailureWatch::new(&specs, team.options.max_failed_episodes);
    let mine = specs.len();
    let bar = progress_bar(mine as u64, opts.progress);
    let started = Instant::now();
    let mut done = 0usize;
    let on_done = |i: usize, r: &Result<EpisodeOutcome, RolloutError>| {
        done += 1;
        bar.inc(1);
        if let Some(line) = watch.record(i, r) {
            if bar.is_hidden() {
                tracing::warn!("{line}");
            } else {
                bar.println(line);
            }
        }
        if bar.is_hidden()
            && opts.progress
            && (done * 10 / mine.max(1)) != ((done - 1) * 10 / mine.max(1))
        {
            let secs = started.elapsed().as_secs_f64();
            let eta = secs / done as f64 * (mine - done) as f64;
            crate::output::console::err_line(format_args!(
                "eval: {done}/{mine} episodes, {secs:.0}s elapsed, ETA {eta:.0}s"
            ));
        }
    };
    // Stop as soon as the failures can no longer stay within the limit (a rank's own
    // failures count against the whole evaluation's episodes).
    let stop = || watch.over_limit_of(total);
    let results = runtime.block_on(run_episodes_until(team.clone(), specs, on_done, stop));
    bar.finish_and_clear();

    let mut mine = RankEvaluation {
        outcomes: Vec::new(),
        failed: Vec::new(),
        tally: FailureTally::default(),
    };
    let mut first_error: Option<(String, RolloutError)> = None;
    for (((uid, traj, task), r), &index) in labels.into_iter().zip(results).zip(&indices) {
        match r {
            Ok(o) => mine.outcomes.push((index, o)),
            Err(e) => {
                let failed = FailedEpisode {
                    uid: uid.clone(),
                    task,
                    traj,
                    blame: e.blame().unwrap_or(Blame {
                        kind: "host".into(),
                        name: "run".into(),
                    }),
                    error: e.to_string(),
                };
                mine.failed.push((index, failed));
                first_error.get_or_insert((uid, e));
            }
        }
    }
    let limit = team.options.max_failed_episodes;
    let merged = match shards {
        None => {
            mine.tally = watch.finish()?;
            // A run where every episode failed is an error, not a report of zeros.
            if mine.outcomes.is_empty()
                && let Some((task, first)) = first_error
            {
                return Err(EvalError::AllFailed {
                    episodes: total,
                    task,
                    first,
                });
            }
            mine
        }
        Some(group) => {
            mine.tally = watch.into_tally();
            let merged = exchange(group, &mine)?;
            if over_failure_limit(merged.tally.total(), total, limit) {
                return Err(EvalError::TooManyFailures(FailureLimit {
                    tally: merged.tally,
                    total,
                    limit,
                }));
            }
            if merged.outcomes.is_empty()
                && let Some((_, first)) = merged.failed.first()
            {
                return Err(EvalError::AllFailedOnRanks {
                    episodes: total,
                    task: first.uid.clone(),
                    first: first.error.clone(),
                });
            }
            merged
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let outcomes: Vec<EpisodeOutcome> = merged.outcomes.into_iter().map(|(_, o)| o).collect();
    let failed: Vec<FailedEpisode> = merged.failed.into_iter().map(|(_, f)| f).collect();
    let report = report_of(
        team,
        experiment,
        opts,
        &outcomes,
        total,
        &failed,
        merged.tally,
        seconds,
    );
    Ok(Evaluation {
        report,
        outcomes,
        failed,
    })
}

/// Every rank's episodes, in the order of the evaluation's episodes, and the summed
/// failure count.
fn exchange(group: &mut Group, mine: &RankEvaluation) -> Result<RankEvaluation, EvalError> {
    let mut merged = RankEvaluation {
        outcomes: Vec::new(),
        failed: Vec::new(),
        tally: FailureTally::default(),
    };
    for part in crate::pool::all_gather_json(group, mine)? {
        merged.outcomes.extend(part.outcomes);
        merged.failed.extend(part.failed);
        merged.tally.merge(part.tally);
    }
    merged.outcomes.sort_by_key(|(i, _)| *i);
    merged.failed.sort_by_key(|(i, _)| *i);
    Ok(merged)
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

fn progress_bar(len: u64, show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} episodes  {elapsed_precise} ETA {eta}",
        )
        .expect("a valid template"),
    );
    bar
}
