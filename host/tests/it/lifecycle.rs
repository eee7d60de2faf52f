//! The episode lifecycle an environment sees: every started episode ends exactly once
//! (finished, truncated, failed or cancelled), per-episode state stays with its
//! episode, tool calls see the turns before them, and a failure is blamed on the
//! component that caused it.

use crate::common;

use common::fake::{ByteCodec, ScriptedBackend};
use drmas::plugin::{AgentHandle, ComponentId, EnvironmentHandle, RewardHandle};
use drmas::pool::{Backend, WorkerConfig, spawn_worker};
use drmas::rollout::{
    AgentSlot, EpisodeOutcome, EpisodeSpec, FailureTally, ModelSlot, RolloutError, Team,
    TeamOptions, run_episode, run_episodes, run_episodes_until,
};
use drmas_plugin_api::{
    Action, Agent, ComponentKind, Environment, EpisodeEnd, EpisodeId, EpisodeRecord, EpisodeStart,
    EpisodeStatus, EpisodeView, Message, Parsed, PluginError, PluginResult, Reward, Task, ToolCall,
    ToolContext, ToolResult, ToolSpec,
};
use std::{
    collections::HashMap,
    sync::{Arc, Condvar, Mutex},
    time::Duration,
};

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Start {
        episode: EpisodeId,
        task: String,
        traj: u32,
    },
    Tool {
        episode: EpisodeId,
        turn: u32,
        /// The episode's state after this call: its start marker, then each input.
        state: Vec<String>,
        /// (turn, completion) of the transcript the call saw.
        before: Vec<(u32, String)>,
    },
    End {
        episode: EpisodeId,
        status: EpisodeStatus,
        error: Option<String>,
        answer: Option<String>,
    },
}

type Events = Arc<Mutex<Vec<Event>>>;

/// Records every lifecycle call; keeps per-episode state under the episode id.
struct Recorder {
    events: Events,
    state: Mutex<HashMap<EpisodeId, Vec<String>>>,
    fail_start: bool,
    fail_tool: bool,
    /// A tool call waits for this gate (a tool that is slow without saying so: the
    /// recorder's `is_slow` is the default, false).
    hold_tool: Option<Arc<Gate>>,
    /// The tool call with this many inputs so far ends the episode, rewarded 0.5.
    done_after: Option<usize>,
    /// `max_episodes`, and the most episodes seen started and not ended at once.
    max_episodes: Option<usize>,
    open: Mutex<(usize, usize)>,
}

impl Environment for Recorder {
    fn start_episode(&self, start: &EpisodeStart) -> PluginResult<()> {
        self.events.lock().unwrap().push(Event::Start {
            episode: start.episode,
            task: start.task.id.clone(),
            traj: start.traj,
        });
        if self.fail_start {
            return Err(PluginError::other(format!(
                "no sandbox for task {}",
                start.task.id
            )));
        }
        self.state.lock().unwrap().insert(
            start.episode,
            vec![format!("{}#{}", start.task.id, start.traj)],
        );
        let mut open = self.open.lock().unwrap();
        open.0 += 1;
        open.1 = open.1.max(open.0);
        Ok(())
    }

    fn max_episodes(&self) -> Option<usize> {
        self.max_episodes
    }

    fn call_tool(&self, context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        if self.fail_tool {
            return Err(PluginError::other("the calculator is broken"));
        }
        if let Some(gate) = &self.hold_tool {
            gate.wait();
        }
        let mut all = self.state.lock().unwrap();
        let mine = all
            .get_mut(&context.episode)
            .ok_or_else(|| PluginError::input("a tool call in an episode that never started"))?;
        mine.push(call.input.clone());
        self.events.lock().unwrap().push(Event::Tool {
            episode: context.episode,
            turn: context.turn,
            state: mine.clone(),
            before: context
                .transcript
                .iter()
                .map(|t| (t.turn, t.completion.clone()))
                .collect(),
        });
        if self.done_after == Some(mine.len() - 1) {
            return Ok(ToolResult {
                output: mine.join(","),
                done: true,
                reward: Some(0.5.into()),
            });
        }
        Ok(ToolResult::output(mine.join(",")))
    }

    fn end_episode(&self, end: &EpisodeEnd) -> PluginResult<()> {
        self.events.lock().unwrap().push(Event::End {
            episode: end.episode,
            status: end.status,
            error: end.error.clone(),
            answer: end.final_answer.clone(),
        });
        if self.state.lock().unwrap().remove(&end.episode).is_some() {
            self.open.lock().unwrap().0 -= 1;
        }
        Ok(())
    }
}

/// Renders `task=<id> turn=<n>`; parses `tool:X` (the tool `calc`), `use:NAME:X` (the
/// tool NAME), `finish:X`, `panic`, and anything else as a hand-off back to itself.
struct Scripted;

impl Agent for Scripted {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        Ok(vec![Message::user(format!(
            "task={} turn={}",
            view.task.id, view.turn
        ))])
    }
    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        Ok(Parsed::valid(
            if let Some(input) = completion.strip_prefix("tool:") {
                Action::tool("calc", input)
            } else if let Some((name, input)) = completion
                .strip_prefix("use:")
                .and_then(|rest| rest.split_once(':'))
            {
                Action::tool(name, input)
            } else if let Some(answer) = completion.strip_prefix("finish:") {
                Action::finish(answer)
            } else if completion == "panic" {
                panic!("the agent exploded on `{completion}`")
            } else {
                Action::handoff("solver")
            },
        ))
    }
}

/// 1 for the answer `done`; NaN on task `nan`.
struct Done;

impl Reward for Done {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        if episode.task.id == "nan" {
            return Ok(f32::NAN);
        }
        Ok(if episode.final_answer.as_deref() == Some("done") {
            1.0
        } else {
            0.0
        })
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

/// Blocks prompts that contain `held` until it is released.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.changed.wait(open).unwrap();
        }
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

/// The completion for (task id, turn).
type Script = Box<dyn Fn(&str, u32) -> String + Send>;

struct Setup {
    script: Script,
    max_turns: u32,
    fail_start: bool,
    fail_tool: bool,
    /// A prompt containing this waits for `gate`.
    held: Option<(&'static str, Arc<Gate>)>,
    /// Every tool call waits for this gate.
    hold_tool: Option<Arc<Gate>>,
    tool_timeout: Duration,
    /// The tools the environment offers (none: it declares none).
    tools: Vec<ToolSpec>,
    done_after: Option<usize>,
    max_episodes: Option<usize>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            script: Box::new(|_, _| "finish:done".into()),
            max_turns: 4,
            fail_start: false,
            fail_tool: false,
            held: None,
            hold_tool: None,
            tool_timeout: Duration::from_secs(5),
            tools: Vec::new(),
            done_after: None,
            max_episodes: None,
        }
    }
}

/// A one-agent team whose model answers `script(task id, turn)`.
fn team(setup: Setup) -> (Arc<Team>, Events) {
    let (team, events, _) = team_with_peak(setup);
    (team, events)
}

/// [`team`], and the most episodes its environment had open at once (so far).
fn team_with_peak(setup: Setup) -> (Arc<Team>, Events, Arc<Recorder>) {
    let events = Events::default();
    let Setup {
        script,
        max_turns,
        fail_start,
        fail_tool,
        held,
        hold_tool,
        tool_timeout,
        tools,
        done_after,
        max_episodes,
    } = setup;
    let backend = ScriptedBackend {
        script: move |prompt: &str| {
            if let Some((text, gate)) = &held
                && prompt.contains(text)
            {
                gate.wait();
            }
            let task = prompt
                .split("task=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .unwrap();
            let turn: u32 = prompt
                .split("turn=")
                .nth(1)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            script(task, turn)
        },
        calls: Arc::default(),
    };
    let recorder = Arc::new(Recorder {
        events: events.clone(),
        state: Mutex::default(),
        fail_start,
        fail_tool,
        hold_tool,
        done_after,
        max_episodes,
        open: Mutex::default(),
    });
    let handle = spawn_worker("lm", WorkerConfig::default(), move || {
        Ok(Box::new(backend) as Box<dyn Backend>)
    })
    .unwrap();
    let team = Team {
        agents: vec![AgentSlot {
            name: "solver".into(),
            handle: AgentHandle::new(
                id(ComponentKind::Agent, "test/scripted"),
                Box::new(Scripted),
            ),
            model: "lm".into(),
            sampling: Default::default(),
        }],
        models: HashMap::from([(
            "lm".to_string(),
            ModelSlot {
                id: "lm".into(),
                codec: Arc::new(ByteCodec),
                handle,
            },
        )]),
        environment: Some(EnvironmentHandle::new(
            id(ComponentKind::Environment, "test/recorder"),
            Box::new(Shared(recorder.clone())),
        )),
        tools,
        rewards: vec![drmas::rollout::RewardSlot::team(
            RewardHandle::new(id(ComponentKind::Reward, "test/done"), Box::new(Done)),
            1.0,
        )],
        options: TeamOptions {
            entry: "solver".into(),
            max_turns,
            final_agent: None,
            max_loops: None,
            invalid_penalty: 0.1,
            seed: 1,
            tool_timeout,
            max_failed_episodes: 0.05,
            keep_prompts: false,
        },
    };
    (Arc::new(team), events, recorder)
}

/// The recorder behind the team's handle, still reachable by the test.
struct Shared(Arc<Recorder>);

impl Environment for Shared {
    fn start_episode(&self, start: &EpisodeStart) -> PluginResult<()> {
        self.0.start_episode(start)
    }
    fn call_tool(&self, context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        self.0.call_tool(context, call)
    }
    fn end_episode(&self, end: &EpisodeEnd) -> PluginResult<()> {
        self.0.end_episode(end)
    }
    fn max_episodes(&self) -> Option<usize> {
        self.0.max_episodes()
    }
}

fn spec(task: &str, traj: u32) -> EpisodeSpec {
    EpisodeSpec {
        task: Task {
            id: task.into(),
            source: "s".into(),
            question: "?".into(),
            answer: "done".into(),
            meta: Default::default(),
        },
        uid: format!("s/{task}"),
        traj,
        sampling_override: None,
    }
}

fn run(team: &Arc<Team>, spec: EpisodeSpec) -> Result<EpisodeOutcome, RolloutError> {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(run_episode(team.clone(), spec))
}

fn events(e: &Events) -> Vec<Event> {
    e.lock().unwrap().clone()
}

fn ends(events: &[Event]) -> Vec<(EpisodeId, EpisodeStatus, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::End {
                episode,
                status,
                error,
                ..
            } => Some((*episode, *status, error.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_finished_episode_starts_and_ends_once_and_tools_see_the_turns_before() {
    let (team, log) = team(Setup {
        script: Box::new(|_, turn| match turn {
            0 => "tool:2+2".into(),
            1 => "tool:3*3".into(),
            _ => "finish:done".into(),
        }),
        ..Setup::default()
    });
    let o = run(&team, spec("t1", 3)).unwrap();
    assert_eq!(o.final_answer.as_deref(), Some("done"));
    assert_eq!(o.team_reward, 1.0);
    let ep = o.episode;
    assert_eq!(
        events(&log),
        [
            Event::Start {
                episode: ep,
                task: "t1".into(),
                traj: 3
            },
            Event::Tool {
                episode: ep,
                turn: 0,
                state: vec!["t1#3".into(), "2+2".into()],
                before: vec![],
            },
            Event::Tool {
                episode: ep,
                turn: 1,
                state: vec!["t1#3".into(), "2+2".into(), "3*3".into()],
                before: vec![(0, "tool:2+2".into())],
            },
            Event::End {
                episode: ep,
                status: EpisodeStatus::Finished,
                error: None,
                answer: Some("done".into()),
            },
        ]
    );
    // The tool's output (the episode's state) is in the transcript.
    assert_eq!(o.transcript[1].tool_output.as_deref(), Some("t1#3,2+2,3*3"));
}

#[test]
fn the_turn_limit_ends_an_episode_as_truncated() {
    let (team, log) = team(Setup {
        script: Box::new(|_, _| "thinking".into()),
        max_turns: 3,
        ..Setup::default()
    });
    let o = run(&team, spec("t1", 0)).unwrap();
    assert!(o.truncated);
    assert_eq!(o.transcript.len(), 3);
    assert_eq!(
        events(&log).last(),
        Some(&Event::End {
            episode: o.episode,
            status: EpisodeStatus::Truncated,
            error: None,
            answer: None,
        })
    );
    assert_eq!(ends(&events(&log)).len(), 1);
}

#[test]
fn a_failing_tool_fails_the_episode_and_it_still_ends_once() {
    let (team, log) = team(Setup {
        script: Box::new(|_, _| "tool:1/0".into()),
        fail_tool: true,
        ..Setup::default()
    });
    let e = run(&team, spec("t1", 0)).unwrap_err();
    let text = "environment `test/recorder` (test 0.1.0, built-in): the calculator is broken";
    assert_eq!(e.to_string(), text);
    assert_eq!(e.blame().unwrap().to_string(), "environment test/recorder");
    let events = events(&log);
    assert_eq!(events.len(), 2, "{events:?}");
    let Event::Start { episode, .. } = events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(
        ends(&events),
        [(episode, EpisodeStatus::Failed, Some(text.to_string()))]
    );
}

#[test]
fn a_failing_start_still_gets_its_end() {
    let (team, log) = team(Setup {
        fail_start: true,
        ..Setup::default()
    });
    let e = run(&team, spec("t7", 0)).unwrap_err();
    let text = "environment `test/recorder` (test 0.1.0, built-in): no sandbox for task t7";
    assert_eq!(e.to_string(), text);
    let events = events(&log);
    let Event::Start { episode, .. } = events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(events.len(), 2, "no turn was played: {events:?}");
    assert_eq!(
        ends(&events),
        [(episode, EpisodeStatus::Failed, Some(text.to_string()))]
    );
}

#[test]
fn a_panicking_agent_fails_its_episode_with_the_panic_text() {
    let (team, log) = team(Setup {
        script: Box::new(|_, turn| {
            if turn == 0 {
                "tool:x".into()
            } else {
                "panic".into()
            }
        }),
        ..Setup::default()
    });
    let e = run(&team, spec("t1", 0)).unwrap_err();
    // The panic's place comes with its text (the raw panic block is not printed).
    let text = "agent `test/scripted` (test 0.1.0, built-in): panicked: the agent exploded on `panic` (at host/tests/it/lifecycle.rs:163:17)";
    assert_eq!(e.to_string(), text);
    assert_eq!(e.blame().unwrap().to_string(), "agent test/scripted");
    let events = events(&log);
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(ends(&events)[0].1, EpisodeStatus::Failed);
    assert_eq!(ends(&events)[0].2.as_deref(), Some(text));
}

#[test]
fn a_non_finite_reward_fails_the_episode_and_is_blamed_on_the_reward() {
    let (team, log) = team(Setup::default());
    let e = run(&team, spec("nan", 0)).unwrap_err();
    let events = events(&log);
    let Event::Start { episode, .. } = events[0] else {
        panic!("{events:?}")
    };
    // Which reward, which episode (the id the environment saw start) of which task,
    // and why it stopped.
    let text = format!(
        "reward `test/done` (test 0.1.0, built-in) returned NaN as the score of episode \
         {episode} (task s/nan); a score must be finite, so the episode failed"
    );
    assert_eq!(e.to_string(), text);
    assert_eq!(e.blame().unwrap().to_string(), "reward test/done");
    assert_eq!(
        ends(&events),
        [(episode, EpisodeStatus::Failed, Some(text.clone()))]
    );
}

#[test]
fn a_tool_not_marked_slow_still_gets_the_tool_timeout() {
    let gate = Arc::new(Gate::default());
    let (team, log) = team(Setup {
        script: Box::new(|_, _| "tool:2+2".into()),
        hold_tool: Some(gate.clone()),
        tool_timeout: Duration::from_millis(50),
        ..Setup::default()
    });
    assert!(!team.environment.as_ref().unwrap().is_slow());
    // The tool waits for the gate, which opens only after the episode has come back:
    // the episode can only have ended by the timeout. (The runtime is dropped after the
    // gate opens: dropping it waits for the blocking thread the call still holds.)
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let e = runtime
        .block_on(run_episode(team.clone(), spec("t1", 0)))
        .unwrap_err();
    gate.release();
    drop(runtime);
    let text = "environment `test/recorder`: tool call `calc` timed out after 0.05s (raise \
                [environment] tool_timeout_s in the experiment if the tool is meant to take \
                longer)";
    assert_eq!(e.to_string(), text);
    assert_eq!(e.blame().unwrap().to_string(), "environment test/recorder");
    let events = events(&log);
    let Event::Start { episode, .. } = events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(
        ends(&events),
        [(episode, EpisodeStatus::Failed, Some(text.to_string()))]
    );
}

#[test]
fn a_tool_the_environment_does_not_offer_is_blamed_on_the_agent() {
    let (team, log) = team(Setup {
        script: Box::new(|_, _| "use:search:paris".into()),
        tools: vec![
            ToolSpec::new("calc", "evaluates arithmetic"),
            ToolSpec::new("sqrt", "a square root"),
        ],
        ..Setup::default()
    });
    let e = run(&team, spec("t1", 0)).unwrap_err();
    let text = "agent `solver` (test/scripted) called tool `search`, which environment \
                `test/recorder` does not offer (its tools: calc, sqrt)";
    assert_eq!(e.to_string(), text);
    assert_eq!(e.blame().unwrap().to_string(), "agent test/scripted");
    // The environment was never asked to run it; the episode still ended once.
    let events = events(&log);
    assert!(
        !events.iter().any(|e| matches!(e, Event::Tool { .. })),
        "{events:?}"
    );
    assert_eq!(ends(&events).len(), 1);
    assert_eq!(ends(&events)[0].1, EpisodeStatus::Failed);
    assert_eq!(ends(&events)[0].2.as_deref(), Some(text));
}

#[test]
fn an_offered_tool_reaches_the_environment() {
    let (team, log) = team(Setup {
        script: Box::new(|_, turn| match turn {
            0 => "use:calc:1+1".into(),
            _ => "finish:done".into(),
        }),
        tools: vec![ToolSpec::new("calc", "evaluates arithmetic")],
        ..Setup::default()
    });
    let o = run(&team, spec("t1", 0)).unwrap();
    assert_eq!(o.tool_calls, 1);
    assert_eq!(o.transcript[0].tool_output.as_deref(), Some("t1#0,1+1"));
    assert_eq!(
        events(&log)
            .iter()
            .filter(|e| matches!(e, Event::Tool { .. }))
            .count(),
        1
    );
}

#[test]
fn concurrent_episodes_of_one_task_keep_their_own_state() {
    let (team, log) = team(Setup {
        script: Box::new(|_, turn| match turn {
            0 => "tool:a".into(),
            1 => "tool:b".into(),
            _ => "finish:done".into(),
        }),
        ..Setup::default()
    });
    let g = 4;
    let specs: Vec<EpisodeSpec> = (0..g).map(|traj| spec("t1", traj)).collect();
    let results = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(run_episodes(team.clone(), specs, |_, _| {}));
    let outcomes: Vec<EpisodeOutcome> = results.into_iter().map(Result::unwrap).collect();
    let mut ids: Vec<EpisodeId> = outcomes.iter().map(|o| o.episode).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), g as usize, "distinct episode ids");
    let events = events(&log);
    for o in &outcomes {
        let mine: Vec<&Event> = events
            .iter()
            .filter(|e| match e {
                Event::Start { episode, .. }
                | Event::Tool { episode, .. }
                | Event::End { episode, .. } => *episode == o.episode,
            })
            .collect();
        let marker = format!("t1#{}", o.traj);
        let states: Vec<Vec<String>> = mine
            .iter()
            .filter_map(|e| match e {
                Event::Tool { state, .. } => Some(state.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            states,
            [
                vec![marker.clone(), "a".to_string()],
                vec![marker.clone(), "a".to_string(), "b".to_string()]
            ]
        );
        assert_eq!(mine.len(), 4, "start, two tools, end: {mine:?}");
        assert!(matches!(mine[0], Event::Start { traj, .. } if *traj == o.traj));
        assert!(matches!(
            mine[3],
            Event::End {
                status: EpisodeStatus::Finished,
                ..
            }
        ));
    }
}

#[test]
fn an_episode_the_environment_ends_is_finished_and_keeps_its_step_reward() {
    let (team, log) = team(Setup {
        script: Box::new(|_, turn| format!("tool:{turn}")),
        max_turns: 6,
        done_after: Some(2),
        ..Setup::default()
    });
    let o = run(&team, spec("t1", 0)).unwrap();
    // Two tool calls, the second one done: not a limit, so not truncated, and the last
    // sample did not run into the turn limit.
    assert_eq!(o.transcript.len(), 2);
    assert!(!o.truncated);
    assert_eq!(o.transcript[0].tool_reward, None);
    assert_eq!(o.transcript[1].tool_reward, Some(0.5.into()));
    assert_ne!(
        o.samples.last().unwrap().finish,
        drmas::rollout::Finish::TurnLimit
    );
    let ends = ends(&events(&log));
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].1, EpisodeStatus::Finished);
}

#[test]
fn an_environment_limit_on_episodes_at_once_is_kept_without_stalling_the_rounds() {
    // Eight episodes on a deterministic worker, at most three at once: the five that
    // wait must not hold up the rounds of the three they wait for.
    let (team, _log, recorder) = team_with_peak(Setup {
        script: Box::new(|_, turn| match turn {
            0 | 1 => format!("tool:{turn}"),
            _ => "finish:done".into(),
        }),
        max_episodes: Some(3),
        ..Setup::default()
    });
    let specs: Vec<EpisodeSpec> = (0..8).map(|traj| spec("t1", traj)).collect();
    let results = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(run_episodes(team.clone(), specs, |_, _| {}));
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let peak = recorder.open.lock().unwrap().1;
    assert_eq!(peak, 3, "the most episodes open at once");
}

#[test]
fn a_stopped_run_cancels_the_running_episodes_and_ends_each_once() {
    let gate = Arc::new(Gate::default());
    let (team, log) = team(Setup {
        script: Box::new(|task, turn| match (task, turn) {
            ("quick", _) => "finish:done".into(),
            (_, 0) => "tool:a".into(),
            _ => "finish:late".into(),
        }),
        // The slow episode's second turn waits until the run has been stopped.
        held: Some(("task=slow turn=1", gate.clone())),
        ..Setup::default()
    });
    let log_for_stop = log.clone();
    // Stop once the slow episode's tool call happened: its next turn is held.
    let stop = move || {
        log_for_stop
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Tool { .. }))
    };
    let mut tally = FailureTally::default();
    let results = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(run_episodes_until(
            team.clone(),
            vec![spec("slow", 0)],
            |_, r| {
                if let Err(e) = r {
                    tally.record("s/slow", e);
                }
            },
            stop,
        ));
    gate.release();
    assert!(matches!(results[..], [Err(RolloutError::Cancelled)]));
    assert!(tally.is_empty(), "a cancelled episode is not a failure");
    let events = events(&log);
    let Event::Start { episode, .. } = events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(ends(&events), [(episode, EpisodeStatus::Cancelled, None)]);
    // The worker finishing the held generation afterwards changes nothing.
    drop(team);
    assert_eq!(ends(&self::events(&log)).len(), 1);
}
