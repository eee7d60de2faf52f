//! The orchestra with a scripted model and the real math plugin: routing solver →
//! verifier → solver on reject, stopping on approve, the loop and turn limits, invalid
//! outputs, and exactly the samples and scores that follow.

use crate::common;

use common::fake::{ByteCodec, ScriptedBackend};
use drmas::eval::{RewardStats, summarize};
use drmas::plugin::{Registry, ResolvePolicy};
use drmas::pool::{Backend, WorkerConfig, spawn_worker};
use drmas::rollout::{
    AgentSlot, EpisodeOutcome, EpisodeSpec, ModelSlot, Team, TeamOptions, reward_names,
    run_episode, run_episodes,
};
use drmas_plugin_api::Task;
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

type Queue = Arc<Mutex<VecDeque<&'static str>>>;

/// A team whose solver and verifier answer from the given queues, in order.
fn team(
    solver: &[&'static str],
    verifier: &[&'static str],
    max_turns: u32,
    max_loops: Option<u32>,
) -> Arc<Team> {
    let registry = Registry::builtin();
    let policy = ResolvePolicy::default();
    let s: Queue = Arc::new(Mutex::new(solver.iter().copied().collect()));
    let v: Queue = Arc::new(Mutex::new(verifier.iter().copied().collect()));
    let backend = ScriptedBackend {
        script: move |prompt: &str| {
            let queue = if prompt.contains("Proposed solution") {
                &v
            } else {
                &s
            };
            queue
                .lock()
                .unwrap()
                .pop_front()
                .expect("the script ran out of completions")
                .to_string()
        },
        calls: Arc::default(),
    };
    let handle = spawn_worker("lm", WorkerConfig::default(), move || {
        Ok(Box::new(backend) as Box<dyn Backend>)
    })
    .unwrap();
    let slot = |name: &str, component: &str| AgentSlot {
        name: name.into(),
        handle: registry.create_agent(component, "", &policy).unwrap(),
        model: "lm".into(),
        sampling: Default::default(),
    };
    Arc::new(Team {
        agents: vec![
            slot("solver", "math/solver"),
            slot("verifier", "math/verifier"),
        ],
        models: HashMap::from([(
            "lm".to_string(),
            ModelSlot {
                id: "lm".into(),
                codec: Arc::new(ByteCodec),
                handle,
            },
        )]),
        environment: Some(
            registry
                .create_environment("math/env", "", &policy)
                .unwrap(),
        ),
        tools: Vec::new(),
        rewards: vec![(
            registry.create_reward("math/boxed", "", &policy).unwrap(),
            1.0,
        )],
        options: TeamOptions {
            entry: "solver".into(),
            max_turns,
            final_agent: None,
            max_loops,
            invalid_penalty: 0.1,
            seed: 1,
            tool_timeout: Duration::from_secs(5),
            max_failed_episodes: 0.05,
            keep_prompts: false,
        },
    })
}

fn task() -> Task {
    Task {
        id: "t".into(),
        source: "arith".into(),
        question: "What is 3 + 4?".into(),
        answer: "7".into(),
        meta: Default::default(),
    }
}

fn run(team: Arc<Team>) -> EpisodeOutcome {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run_episode(
        team,
        EpisodeSpec {
            task: task(),
            uid: "u".into(),
            traj: 0,
            sampling_override: None,
        },
    ))
    .unwrap()
}

/// (agent, turn, valid, score) of each sample.
fn shape(o: &EpisodeOutcome) -> Vec<(String, u32, bool, f32)> {
    o.samples
        .iter()
        .map(|s| (s.agent.clone(), s.turn, s.valid, s.score))
        .collect()
}

fn row(agent: &str, turn: u32, valid: bool, score: f32) -> (String, u32, bool, f32) {
    (agent.to_string(), turn, valid, score)
}

#[test]
fn reject_sends_the_solver_back_and_approve_finishes() {
    let o = run(team(
        &["3 + 4 = 5, so \\boxed{5}", "Oops: 3 + 4 = \\boxed{7}"],
        &["<verify>reject</verify>", "<verify>approve</verify>"],
        8,
        Some(2),
    ));
    assert_eq!(o.final_answer.as_deref(), Some("7"));
    assert!(!o.truncated);
    assert_eq!(o.team_reward, 1.0);
    assert_eq!(
        shape(&o),
        vec![
            row("solver", 0, true, 1.0),
            row("verifier", 1, true, 1.0),
            row("solver", 2, true, 1.0),
            row("verifier", 3, true, 1.0)
        ]
    );
    // The retry prompt shows the rejected attempt.
    let second_solver_prompt = ByteCodec.decode_ids(&o.samples[2].prompt_ids);
    assert!(
        second_solver_prompt.contains("judged wrong")
            && second_solver_prompt.contains("\\boxed{5}"),
        "{second_solver_prompt}"
    );
    // Log-probs and response ids travel with each sample.
    assert_eq!(
        o.samples[0].response_ids.len(),
        "3 + 4 = 5, so \\boxed{5}".len()
    );
    assert!(o.samples[0].logprobs.iter().all(|&l| l == -0.5));
}

#[test]
fn the_loop_limit_ends_the_episode_and_the_last_box_is_scored() {
    let o = run(team(
        &["\\boxed{5}", "\\boxed{6}", "\\boxed{7}", "never used"],
        &["<verify>reject</verify>"; 3],
        20,
        Some(2),
    ));
    // solver, verifier, solver, verifier, solver, verifier: the third reject would be a
    // third return to the solver, over max_loops = 2.
    assert_eq!(o.transcript.len(), 6);
    assert!(o.truncated);
    assert_eq!(o.final_answer, None);
    assert_eq!(
        o.team_reward, 1.0,
        "the last \\boxed{{}} in the transcript is 7"
    );
    assert_eq!(o.samples.len(), 6);
}

#[test]
fn the_turn_limit_ends_the_episode() {
    let o = run(team(
        &["\\boxed{5}", "\\boxed{6}"],
        &["<verify>reject</verify>"],
        3,
        None,
    ));
    assert_eq!(
        o.transcript
            .iter()
            .map(|t| t.agent.to_string())
            .collect::<Vec<_>>(),
        ["solver", "verifier", "solver"]
    );
    assert!(o.truncated);
    assert_eq!(o.team_reward, 0.0);
    assert_eq!(
        shape(&o),
        vec![
            row("solver", 0, true, 0.0),
            row("verifier", 1, true, 0.0),
            row("solver", 2, true, 0.0)
        ]
    );
}

#[test]
fn invalid_outputs_are_marked_and_penalised() {
    // No box from the solver; a garbled verdict counts as approval of "no answer".
    let o = run(team(
        &["I think it is seven."],
        &["looks fine to me"],
        8,
        Some(2),
    ));
    assert_eq!(o.final_answer.as_deref(), Some(""));
    assert_eq!(o.team_reward, 0.0);
    assert_eq!(
        shape(&o),
        vec![
            row("solver", 0, false, -0.1),
            row("verifier", 1, false, -0.1)
        ]
    );
    assert!(!o.transcript[0].valid && !o.transcript[1].valid);
}

#[test]
fn metrics_of_scripted_groups_are_exact() {
    // Two tasks × 4 trajectories: task A succeeds in 1 of 4, task B in none.
    let completions: Vec<&'static str> = vec![
        "\\boxed{7}",
        "\\boxed{1}",
        "\\boxed{2}",
        "\\boxed{3}",
        "\\boxed{4}",
        "\\boxed{5}",
        "\\boxed{6}",
        "\\boxed{8}",
    ];
    let approvals = vec!["<verify>approve</verify>"; 8];
    let team = team(&completions, &approvals, 4, Some(1));
    let specs: Vec<EpisodeSpec> = (0..8u32)
        .map(|i| EpisodeSpec {
            task: task(),
            uid: if i < 4 { "A".into() } else { "B".into() },
            traj: i % 4,
            sampling_override: None,
        })
        .collect();
    // One at a time, so each episode takes the next scripted completion.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcomes: Vec<EpisodeOutcome> = specs
        .into_iter()
        .map(|s| {
            rt.block_on(run_episodes(team.clone(), vec![s], |_, _| {}))
                .remove(0)
                .unwrap()
        })
        .collect();
    let refs: Vec<&EpisodeOutcome> = outcomes.iter().collect();
    let r = summarize(&refs, 4, 1.0, &team.reward_names());
    assert_eq!(r.tasks, 2);
    assert_eq!(r.avg_at_k, (0.25 + 0.0) / 2.0);
    assert_eq!(r.pass_at_k, 0.5);
    // Unbiased pass@1 = mean of c/n; pass@2 = (1 − C(3,2)/C(4,2)) / 2 = 0.25.
    assert!((r.pass_at_unbiased[&1] - 0.125).abs() < 1e-12);
    assert!((r.pass_at_unbiased[&2] - 0.25).abs() < 1e-12);
    assert!((r.pass_at_unbiased[&4] - 0.5).abs() < 1e-12);
    assert_eq!(r.mean_turns, 2.0);
    assert_eq!(r.agents["solver"].calls, 8);
    // Every reward by name: its mean over the 8 episodes, and the mean best of each task.
    assert_eq!(
        r.rewards["math/boxed"],
        RewardStats {
            avg_at_k: 0.125,
            pass_at_k: 0.5
        }
    );
    // math/env reports no episode metrics.
    assert!(r.metrics.is_empty());
}

#[test]
fn a_reward_named_twice_is_numbered_in_reports() {
    assert_eq!(
        reward_names(["search/em", "search/f1", "search/em", "search/em"]),
        ["search/em", "search/f1", "search/em#2", "search/em#3"]
    );
}
