//! The episode loop. No workflow is written here: the entry agent acts first, and each
//! agent's parsed action says what happens next — hand off, call a tool (control then
//! returns to the entry agent), finish, or give up. The turn limit and the loop limit
//! end an episode cleanly; rewards score whatever exists.

use super::{
    error::RolloutError,
    sample::{Finish, Sample},
    team::{AgentSlot, Team},
};
use crate::{model::SamplingParams, pool::BackendRequest};
use drmas_plugin_api::{
    Action, EpisodeEnd, EpisodeId, EpisodeRecord, EpisodeStart, EpisodeStatus, EpisodeView,
    Metrics, Task, ToolCall, ToolContext, TurnRecord,
};
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// Episode ids, unique within the process (see [`EpisodeId`]).
static NEXT_EPISODE: AtomicU64 = AtomicU64::new(1);

/// One episode to run: a task, its group id, and which trajectory of the group.
#[derive(Debug, Clone)]
pub struct EpisodeSpec {
    pub task: Task,
    pub uid: String,
    pub traj: u32,
    /// Replaces every agent's temperature and top-p (evaluation settings).
    pub sampling_override: Option<(f64, f64)>,
}

/// A finished episode. It serializes whole: data-parallel ranks exchange their
/// episodes so that each sees the step's every sample.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EpisodeOutcome {
    pub episode: EpisodeId,
    pub uid: String,
    pub traj: u32,
    pub task: Task,
    pub final_answer: Option<String>,
    pub transcript: Vec<TurnRecord>,
    pub tool_calls: u32,
    /// No agent finished: the turn or loop limit (or an `Invalid` action) ended it.
    pub truncated: bool,
    /// Σ weight · reward.
    pub team_reward: f32,
    /// Each reward's own score, in the experiment's order.
    pub rewards: Vec<f32>,
    pub samples: Vec<Sample>,
    /// The environment's numbers about the episode (`Environment::episode_metrics`).
    pub metrics: Metrics,
    /// The prompt text (the chat template's output) of each turn, by turn; empty
    /// unless [`super::TeamOptions::keep_prompts`] is set.
    pub prompts: Vec<String>,
}

/// A seed per (experiment seed, uid, traj, turn): reproducible, and different for every
/// call (splitmix64 over the fields).
pub fn call_seed(seed: u64, uid: &str, traj: u32, turn: u32) -> u64 {
    let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut mix = |v: u64| {
        h = h.wrapping_add(v).wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h = z ^ (z >> 31);
    };
    for b in uid.bytes() {
        mix(u64::from(b));
    }
    mix(u64::from(traj));
    mix(u64::from(turn));
    h
}

/// Tells the environment that an episode ended, exactly once: explicitly with the
/// outcome, or, when the episode's future is dropped before that (the run was stopped),
/// as cancelled from `drop`.
struct EpisodeGuard {
    team: Arc<Team>,
    episode: EpisodeId,
    ended: bool,
}

impl EpisodeGuard {
    /// Starts the episode with the environment. A failed start still gets its end.
    fn start(
        team: &Arc<Team>,
        episode: EpisodeId,
        task: &Task,
        traj: u32,
    ) -> Result<Self, RolloutError> {
        let mut guard = Self {
            team: team.clone(),
            episode,
            ended: false,
        };
        if let Some(env) = &team.environment {
            let start = EpisodeStart {
                episode,
                task: task.clone(),
                traj,
            };
            if let Err(e) = env.start_episode(&start) {
                let e = RolloutError::plugin(&env.id, e);
                guard.end(&Err(&e));
                return Err(e);
            }
        }
        Ok(guard)
    }

    fn end(&mut self, result: &Result<&EpisodeOutcome, &RolloutError>) {
        self.ended = true;
        let Some(env) = &self.team.environment else {
            return;
        };
        let end = match result {
            Ok(o) => EpisodeEnd {
                episode: self.episode,
                status: if o.truncated {
                    EpisodeStatus::Truncated
                } else {
                    EpisodeStatus::Finished
                },
                final_answer: o.final_answer.clone(),
                error: None,
            },
            Err(RolloutError::Cancelled) => EpisodeEnd {
                episode: self.episode,
                status: EpisodeStatus::Cancelled,
                ..EpisodeEnd::default()
            },
            Err(e) => EpisodeEnd {
                episode: self.episode,
                status: EpisodeStatus::Failed,
                final_answer: None,
                error: Some(e.to_string()),
            },
        };
        if let Err(e) = env.end_episode(&end) {
            tracing::warn!("episode {}: {e}", self.episode);
        }
    }
}

impl Drop for EpisodeGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.end(&Err(&RolloutError::Cancelled));
        }
    }
}

/// Runs one episode to the end. With an environment, the episode is started with it
/// after `prepare` and ended exactly once, whatever happens (see [`EpisodeGuard`]).
pub async fn run_episode(
    team: Arc<Team>,
    spec: EpisodeSpec,
) -> Result<EpisodeOutcome, RolloutError> {
    let episode = NEXT_EPISODE.fetch_add(1, Ordering::Relaxed);
    run_episode_as(team, spec, episode).await
}

/// [`run_episode`] under the id `episode`.
async fn run_episode_as(
    team: Arc<Team>,
    spec: EpisodeSpec,
    episode: EpisodeId,
) -> Result<EpisodeOutcome, RolloutError> {
    let slow = team.environment.as_ref().is_some_and(|env| env.is_slow());
    let (task, mut guard) = if slow {
        // A slow environment's start may wait on the network (a remote environment
        // opens its session and resets there): off the async threads, as its tool
        // calls are. The guard, made there too, ends the episode wherever it is dropped.
        let (team, task, traj) = (team.clone(), spec.task.clone(), spec.traj);
        tokio::task::spawn_blocking(move || begin(&team, episode, &task, traj))
            .await
            .map_err(|join| RolloutError::Panicked(join.to_string()))??
    } else {
        begin(&team, episode, &spec.task, spec.traj)?
    };
    let result = play(&team, spec, episode, task).await;
    guard.end(&result.as_ref());
    result
}

/// The environment's `prepare` and `start_episode`: the task the agents will see, and
/// the guard that ends the episode.
fn begin(
    team: &Arc<Team>,
    episode: EpisodeId,
    task: &Task,
    traj: u32,
) -> Result<(Task, EpisodeGuard), RolloutError> {
    let task = match &team.environment {
        Some(env) => env
            .prepare(task)
            .map_err(|e| RolloutError::plugin(&env.id, e))?,
        None => task.clone(),
    };
    let guard = EpisodeGuard::start(team, episode, &task, traj)?;
    Ok((task, guard))
}

async fn play(
    team: &Arc<Team>,
    spec: EpisodeSpec,
    episode: EpisodeId,
    task: Task,
) -> Result<EpisodeOutcome, RolloutError> {
    let opts = &team.options;
    let mut transcript: Vec<TurnRecord> = Vec::new();
    let mut prompts: Vec<String> = Vec::new();
    let mut pending: Vec<(Sample, bool)> = Vec::new();
    let mut current = opts.entry.clone();
    let mut final_answer = None;
    let mut tool_calls = 0;
    let mut loops = 0;
    let mut finished = false;
    // The environment ended the episode (a tool result's `done`): a natural end, not a
    // limit, though no agent gave an answer.
    let mut ended_by_environment = false;
    for turn in 0..opts.max_turns {
        // The last turn goes to the workflow's final agent, whoever was due: an episode
        // that has run out of turns still gets its answer.
        if let Some(last) = &opts.final_agent
            && turn + 1 == opts.max_turns
        {
            current = last.clone();
        }
        let slot = team.agent(&current).ok_or_else(|| {
            let agent = transcript
                .last()
                .map(|t| t.agent.to_string())
                .unwrap_or_default();
            RolloutError::UnknownHandoff {
                component: team
                    .agent(&agent)
                    .map(|a| a.handle.id.name.clone())
                    .unwrap_or_default(),
                agent,
                to: current.clone(),
                known: team
                    .agents
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        })?;
        let model = team
            .models
            .get(&slot.model)
            .ok_or_else(|| RolloutError::NoModel {
                agent: slot.name.clone(),
                model: slot.model.clone(),
            })?;
        let codec_err = |source| RolloutError::Codec {
            model: model.id.clone(),
            source,
        };
        let view = EpisodeView {
            episode,
            task: task.clone(),
            agent: current.clone(),
            turn,
            transcript: transcript.clone(),
            tools: team.tools.clone(),
        };
        let agent_err = |e| RolloutError::plugin(&slot.handle.id, e);
        let messages = slot.handle.render(&view).map_err(agent_err)?;
        let prompt = model.codec.prompt_ids(&messages).map_err(codec_err)?;
        if opts.keep_prompts {
            prompts.push(model.codec.prompt_text(&messages).map_err(codec_err)?);
        }
        let (temperature, top_p) = spec
            .sampling_override
            .unwrap_or((slot.sampling.temperature, slot.sampling.top_p));
        let request = BackendRequest {
            prompt: prompt.clone(),
            params: SamplingParams {
                temperature,
                top_p,
                top_k: i64::from(slot.sampling.top_k),
                max_new_tokens: slot.sampling.max_new_tokens.get() as usize,
                stop_token_ids: model.codec.stop_token_ids(),
                seed: call_seed(opts.seed, &spec.uid, spec.traj, turn),
            },
            stop: slot.sampling.stop.clone(),
            shared_prefix: model.codec.shared_prefix(&messages, &prompt),
        };
        let generation = model.handle.generate(request).await?;
        let completion = model.codec.decode(&generation.tokens).map_err(codec_err)?;
        let parsed = slot.handle.parse(&view, &completion).map_err(agent_err)?;
        if !generation.tokens.is_empty() {
            pending.push((
                Sample {
                    uid: spec.uid.clone(),
                    traj: spec.traj,
                    agent: current.clone(),
                    model: model.id.clone(),
                    turn,
                    prompt_ids: prompt,
                    response_ids: generation.tokens,
                    logprobs: generation.logprobs,
                    temperature,
                    valid: parsed.valid,
                    score: 0.0,
                    finish: generation.finish.into(),
                    policy_version: generation.policy_version,
                    advantage: 0.0,
                },
                parsed.valid,
            ));
        }
        let mut record = TurnRecord {
            turn,
            agent: current.clone(),
            completion,
            action: parsed.action.clone(),
            valid: parsed.valid,
            note: parsed.note.clone(),
            tool_output: None,
            tool_reward: None,
        };
        match parsed.action {
            Action::Finish { answer } => {
                final_answer = Some(answer.to_string());
                finished = true;
                transcript.push(record);
                break;
            }
            Action::Handoff { to } => {
                transcript.push(record);
                if to.as_str() == opts.entry {
                    loops += 1;
                    if opts.max_loops.is_some_and(|m| loops > m) {
                        break;
                    }
                }
                current = to.to_string();
            }
            Action::Tool { name, input } => {
                tool_calls += 1;
                let context = ToolContext {
                    episode,
                    task: task.clone(),
                    agent: current.clone(),
                    turn,
                    transcript: transcript.clone(),
                };
                let result = call_tool(team, slot, context, ToolCall { name, input }).await?;
                record.tool_output = Some(result.output);
                record.tool_reward = result.reward;
                transcript.push(record);
                if result.done {
                    ended_by_environment = true;
                    break;
                }
                current = opts.entry.clone();
            }
            // `Invalid`, and `Unknown` (an action of a newer API than this host, which
            // cannot come from a plugin it loaded: it refuses newer plugins): give up.
            _ => {
                transcript.push(record);
                break;
            }
        }
    }
    // Cut by a limit or an invalid action: neither an agent nor the environment ended it.
    let truncated = !finished && !ended_by_environment;
    let record = EpisodeRecord {
        episode,
        task: task.clone(),
        final_answer: final_answer.clone(),
        transcript: transcript.clone(),
        truncated,
    };
    let scores = score_episode(team, &record)?;
    // The environment's numbers about the completed episode, from the record the
    // rewards scored (before the guard ends the episode with the environment).
    let metrics = match &team.environment {
        Some(env) => env
            .record_metrics(&record)
            .map_err(|e| RolloutError::plugin(&env.id, e))?,
        None => Metrics::new(),
    };
    // An episode that no agent finished and no invalid action ended ran into the turn or
    // loop limit: its last sample says so.
    let hit_limit = truncated
        && !transcript
            .last()
            .is_some_and(|t| matches!(t.action, Action::Invalid { .. }));
    if hit_limit && let Some((last, _)) = pending.last_mut() {
        last.finish = Finish::TurnLimit;
    }
    let samples = pending
        .into_iter()
        .map(|(mut s, valid)| {
            let reward = scores.sample_reward(team, &s.agent, s.turn);
            s.score = (reward - opts.invalid_penalty * if valid { 0.0 } else { 1.0 }) as f32;
            s
        })
        .collect();
    Ok(EpisodeOutcome {
        episode,
        uid: spec.uid,
        traj: spec.traj,
        task,
        final_answer,
        transcript,
        tool_calls,
        truncated,
        team_reward: scores.team as f32,
        rewards: scores.episode,
        samples,
        metrics,
        prompts,
    })
}

/// What the rewards said of one episode.
struct EpisodeScores {
    /// Each reward's episode score, in the experiment's order.
    episode: Vec<f32>,
    /// Each reward's score per turn (`None`: its episode score for every turn).
    turns: Vec<Option<Vec<f32>>>,
    /// Σ weight · score over the rewards of the whole team.
    team: f64,
}

impl EpisodeScores {
    /// Σ weight · score of the turn `turn` over the rewards that apply to `agent`.
    fn sample_reward(&self, team: &Team, agent: &str, turn: u32) -> f64 {
        team.rewards
            .iter()
            .zip(self.episode.iter().zip(&self.turns))
            .filter(|(slot, _)| slot.applies_to(agent))
            .map(|(slot, (&episode, turns))| {
                let score = turns
                    .as_ref()
                    .and_then(|t| t.get(turn as usize).copied())
                    .unwrap_or(episode);
                slot.weight * f64::from(score)
            })
            .sum()
    }
}

/// Scores a finished episode with every reward: its episode score and, for rewards that
/// judge turns ([`drmas_plugin_api::Reward::turn_scores`]), a score per turn.
fn score_episode(team: &Team, record: &EpisodeRecord) -> Result<EpisodeScores, RolloutError> {
    let mut scores = EpisodeScores {
        episode: Vec::with_capacity(team.rewards.len()),
        turns: Vec::with_capacity(team.rewards.len()),
        team: 0.0,
    };
    for slot in &team.rewards {
        let err = |e| RolloutError::plugin(&slot.handle.id, e);
        let r = slot.handle.score(record).map_err(err)?;
        scores
            .turns
            .push(slot.handle.turn_scores(record).map_err(err)?);
        scores.episode.push(r);
        if slot.team {
            scores.team += slot.weight * f64::from(r);
        }
    }
    Ok(scores)
}

/// Executes a tool call off the async threads, with the experiment's timeout
/// (`[environment] tool_timeout_s`). Every call gets it, whatever the environment's
/// `is_slow` says: a tool that is slow without saying so must not hang its episode (and
/// the rollout thread it would run on) past the limit the experiment set.
///
/// A tool the environment does not offer is the agent's mistake, refused before the
/// environment is called, when the environment declares its tools (one that declares
/// none, like a plugin built before tools were declared, decides alone).
async fn call_tool(
    team: &Arc<Team>,
    agent: &AgentSlot,
    context: ToolContext,
    call: ToolCall,
) -> Result<drmas_plugin_api::ToolResult, RolloutError> {
    let Some(env) = &team.environment else {
        return Err(RolloutError::NoEnvironment {
            agent: agent.name.clone(),
            component: agent.handle.id.name.clone(),
            tool: call.name.to_string(),
        });
    };
    if !team.tools.is_empty() && !team.tools.iter().any(|t| t.name == call.name) {
        return Err(RolloutError::UnknownTool {
            agent: agent.name.clone(),
            component: agent.handle.id.name.clone(),
            tool: call.name.to_string(),
            environment: env.id.name.clone(),
            offered: team
                .tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let env_err = |e| RolloutError::plugin(&env.id, e);
    let limit = team.options.tool_timeout;
    let team = team.clone();
    let tool = call.name.to_string();
    let job = tokio::task::spawn_blocking(move || {
        team.environment
            .as_ref()
            .expect("checked above")
            .call_tool(&context, &call)
    });
    // A call past the limit keeps its blocking thread until it returns; its episode
    // fails now, and its result, whenever it comes, is dropped.
    match tokio::time::timeout(limit, job).await {
        Ok(Ok(result)) => result.map_err(env_err),
        Ok(Err(join)) => Err(RolloutError::ToolTask {
            component: env.id.name.clone(),
            tool,
            message: join.to_string(),
        }),
        Err(_) => Err(RolloutError::ToolTimeout {
            component: env.id.name.clone(),
            tool,
            seconds: limit.as_secs_f64(),
        }),
    }
}

/// Runs every episode concurrently (their model calls meet in the workers) and returns
/// the outcomes in the order of `specs`. `on_done` is called as each one finishes, with
/// its index in `specs`.
pub async fn run_episodes(
    team: Arc<Team>,
    specs: Vec<EpisodeSpec>,
    on_done: impl FnMut(usize, &Result<EpisodeOutcome, RolloutError>),
) -> Vec<Result<EpisodeOutcome, RolloutError>> {
    run_episodes_until(team, specs, on_done, || false).await
}

/// [`run_episodes`] that gives up when `stop()` turns true (checked after each episode
/// ends and every 50 ms): the episodes still running are aborted (their environment
/// sees them end as cancelled) and come back as [`RolloutError::Cancelled`].
pub async fn run_episodes_until(
    team: Arc<Team>,
    specs: Vec<EpisodeSpec>,
    mut on_done: impl FnMut(usize, &Result<EpisodeOutcome, RolloutError>),
    stop: impl Fn() -> bool,
) -> Vec<Result<EpisodeOutcome, RolloutError>> {
    let mut set = tokio::task::JoinSet::new();
    let n = specs.len();
    let mut index = std::collections::HashMap::new();
    // The episodes' model calls meet in rounds on deterministic workers (pool::Rounds).
    let rounds = crate::pool::Rounds::new(n);
    // An environment's limit on episodes at once (a server's sessions): the others wait
    // for a permit away from the rounds, so the started ones' batches do not wait on
    // them. Which episodes start first then depends on timing; without a limit, or
    // with one above the rollout's size, nothing changes.
    let permits = team
        .environment
        .as_ref()
        .and_then(|env| env.max_episodes())
        .filter(|&limit| limit < n)
        .map(|limit| Arc::new(tokio::sync::Semaphore::new(limit)));
    // Ids in the order of `specs`, not in the order the threads happen to start them.
    let first = NEXT_EPISODE.fetch_add(n as u64, Ordering::Relaxed);
    for (i, spec) in specs.into_iter().enumerate() {
        let team = team.clone();
        let episode = first + i as u64;
        let permits = permits.clone();
        let task = set.spawn(rounds.scope(async move {
            let _permit = match permits {
                Some(p) => {
                    let _away = crate::pool::Rounds::away();
                    Some(
                        p.acquire_owned()
                            .await
                            .expect("the semaphore is never closed"),
                    )
                }
                None => None,
            };
            run_episode_as(team, spec, episode).await
        }));
        index.insert(task.id(), i);
    }
    let mut out: Vec<Option<Result<EpisodeOutcome, RolloutError>>> = (0..n).map(|_| None).collect();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
    type Joined =
        Result<(tokio::task::Id, Result<EpisodeOutcome, RolloutError>), tokio::task::JoinError>;
    let mut record =
        |joined: Joined, out: &mut Vec<Option<Result<EpisodeOutcome, RolloutError>>>| {
            let (id, result) = match joined {
                Ok(done) => done,
                Err(e) if e.is_cancelled() => return,
                Err(e) => {
                    let id = e.id();
                    let message = if e.is_panic() {
                        crate::pool::panic_message(e.into_panic().as_ref())
                    } else {
                        e.to_string()
                    };
                    tracing::error!("an episode task panicked: {message}");
                    (id, Err(RolloutError::Panicked(message)))
                }
            };
            let i = index[&id];
            on_done(i, &result);
            out[i] = Some(result);
        };
    loop {
        tokio::select! {
            joined = set.join_next_with_id() => match joined {
                None => break,
                Some(joined) => record(joined, &mut out),
            },
            _ = tick.tick() => {}
        }
        if stop() {
            // Aborted tasks drop their episodes' futures, whose guards end them as
            // cancelled; draining the set makes that happen before this returns.
            set.abort_all();
            while let Some(joined) = set.join_next_with_id().await {
                record(joined, &mut out);
            }
            return out
                .into_iter()
                .map(|o| o.unwrap_or(Err(RolloutError::Cancelled)))
                .collect();
        }
    }
    out.into_iter()
        .map(|o| o.unwrap_or(Err(RolloutError::Cancelled)))
        .collect()
}
