//! The orchestra with a scripted model and the real math plugin: routing solver →
//! verifier → solver on reject, stopping on approve, the loop and turn limits, invalid
//! outputs, and exactly the samples and scores that follow.

use crate::common;

use common::fake::{ByteCodec, ScriptedBackend};
use drmas::eval::{RewardStats, summarize};
use drmas::plugin::{Registry, ResolvePolicy};
use drmas::pool::{Backend, WorkerConfig, spawn_worker};
use drmas::rollout::{
    AgentSlot, EpisodeOutcome, EpisodeSpec, ModelSlot, RewardSlot, Team, TeamOptions, reward_names,
    run_episode, run_episodes,
};
use drmas_plugin_api::Task;
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

type Queue = Arc<Mutex<VecDeque<&'static str>>>;

/// A team whose solver and verifier answer from the given queues, in order; the
/// solver with no attempt limit (the workflow's limits end its episodes).
fn team(
    solver: &[&'static str],
    verifier: &[&'static str],
    max_turns: u32,
    max_loops: Option<u32>,
) -> Arc<Team> {
    team_with("max_attempts = 0", solver, verifier, max_turns, max_loops)
}

/// [`team`] with this `[agents.config]` for the solver.
fn team_with(
    solver_config: &str,
    solver: &[&'static str],
    verifier: &[&'static str],
    max_turns: u32,
    max_loops: Option<u32>,
) -> Arc<Team> {
    let boxed = [Scoped("math/boxed", "", 1.0, None)];
    team_full(
        solver_config,
        &boxed,
        solver,
        verifier,
        max_turns,
        max_loops,
    )
}

/// A reward: component, config text, weight, and the agents it scores (None: the team).
pub(crate) struct Scoped(
    pub &'static str,
    pub &'static str,
    pub f64,
    pub Option<&'static [&'static str]>,
);

/// [`team_with`] with these rewards.
fn team_full(
    solver_config: &str,
    rewards: &[Scoped],
    solver: &[&'static str],
    verifier: &[&'static str],
    max_turns: u32,
    max_loops: Option<u32>,
) -> Arc<Team> {
    let registry = Registry::builtin();
    team_in(
        &registry,
        solver_config,
        rewards,
        solver,
        verifier,
        max_turns,
        max_loops,
    )
}

/// [`team_full`] with the components of `registry` (built-ins and loaded plugins).
pub(crate) fn team_in(
    registry: &Registry,
    solver_config: &str,
    rewards: &[Scoped],
    solver: &[&'static str],
    verifier: &[&'static str],
    max_turns: u32,
    max_loops: Option<u32>,
) -> Arc<Team> {
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
    let slot = |name: &str, component: &str, config: &str| AgentSlot {
        name: name.into(),
        handle: registry.create_agent(component, config, &policy).unwrap(),
        model: "lm".into(),
        sampling: Default::default(),
    };
    Arc::new(Team {
        agents: vec![
            slot("solver", "math/solver", solver_config),
            slot("verifier", "math/verifier", ""),
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
        rewards: rewards
            .iter()
            .map(|Scoped(component, config, weight, agents)| RewardSlot {
                handle: registry.create_reward(component, config, &policy).unwrap(),
                weight: *weight,
                agents: agents.map(|a| a.iter().map(|s| s.to_string()).collect()),
                team: agents.is_none(),
            })
            .collect(),
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

pub(crate) fn run(team: Arc<Team>) -> EpisodeOutcome {
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
pub(crate) fn shape(o: &EpisodeOutcome) -> Vec<(String, u32, bool, f32)> {
    o.samples
        .iter()
        .map(|s| (s.agent.clone(), s.turn, s.valid, s.score))
        .collect()
}

pub(crate) fn row(agent: &str, turn: u32, valid: bool, score: f32) -> (String, u32, bool, f32) {
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
    // Per task, by uid: what a sweep pairs and estimates evaluation noise from.
    let per_task: Vec<(&str, usize, usize)> = r
        .per_task
        .iter()
        .map(|(uid, c)| (uid.as_str(), c.episodes, c.successes))
        .collect();
    assert_eq!(per_task, [("A", 4, 1), ("B", 4, 0)]);
    // Every reward by name: its mean over the 8 episodes, and the mean best of each task.
    assert_eq!(
        r.rewards["math/boxed"],
        RewardStats {
            avg_at_k: 0.125,
            pass_at_k: 0.5
        }
    );
    // math/env's episode metrics: every verdict approved one attempt, 1 of 8 right.
    let metrics: Vec<(&str, f64)> = r.metrics.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        metrics,
        [
            ("approve_given_correct", 1.0),
            ("approve_given_wrong", 1.0),
            ("approve_rate", 1.0),
            ("first_attempt_correct", 0.125),
            ("last_attempt_correct", 0.125),
            ("solver_attempts", 1.0),
            ("verdict_accuracy", 0.125),
            ("verdict_invalid", 0.0),
        ]
    );
}

#[test]
fn a_reward_named_twice_is_numbered_in_reports() {
    assert_eq!(
        reward_names(["search/em", "search/f1", "search/em", "search/em"]),
        ["search/em", "search/f1", "search/em#2", "search/em#3"]
    );
}

/// Who acted, in order.
fn agents_of(o: &EpisodeOutcome) -> Vec<String> {
    o.transcript.iter().map(|t| t.agent.to_string()).collect()
}

/// The paper's team: the solver's defaults (two attempts) under `max_turns = 3`,
/// `max_loops = 1`, as the shipped math configs set them.
fn paper_team(solver: &[&'static str], verifier: &[&'static str]) -> Arc<Team> {
    team_with("", solver, verifier, 3, Some(1))
}

#[test]
fn the_paper_team_approved_first_attempt_is_the_answer() {
    let o = run(paper_team(&["\\boxed{7}"], &["<verify>approve</verify>"]));
    assert_eq!(agents_of(&o), ["solver", "verifier"]);
    assert_eq!(o.final_answer.as_deref(), Some("7"));
    assert!(!o.truncated);
    assert_eq!(
        shape(&o),
        vec![row("solver", 0, true, 1.0), row("verifier", 1, true, 1.0)]
    );
}

#[test]
fn the_paper_team_re_asks_the_solver_only_after_a_reject_and_never_judges_the_last_attempt() {
    // The verifier's script has one verdict: a second verifier call would fail the
    // episode ("the script ran out").
    let o = run(paper_team(
        &["\\boxed{5}", "\\boxed{7}"],
        &["<verify>reject</verify>"],
    ));
    assert_eq!(agents_of(&o), ["solver", "verifier", "solver"]);
    assert_eq!(o.final_answer.as_deref(), Some("7"));
    assert!(!o.truncated, "the second attempt finishes the episode");
    assert_eq!(o.team_reward, 1.0);
    assert_eq!(
        shape(&o),
        vec![
            row("solver", 0, true, 1.0),
            row("verifier", 1, true, 1.0),
            row("solver", 2, true, 1.0)
        ]
    );
    assert!(
        o.samples
            .iter()
            .all(|s| s.finish != drmas::rollout::Finish::TurnLimit),
        "no sample ran into a limit"
    );
    // The verifier judged the first attempt (wrong) and rejected it.
    assert_eq!(o.metrics["approve_rate"], 0.0);
    assert_eq!(o.metrics["approve_given_wrong"], 0.0);
    assert!(!o.metrics.contains_key("approve_given_correct"));
    assert_eq!(o.metrics["verdict_accuracy"], 1.0);
    assert_eq!(o.metrics["solver_attempts"], 2.0);
    assert_eq!(o.metrics["first_attempt_correct"], 0.0);
    assert_eq!(o.metrics["last_attempt_correct"], 1.0);
}

#[test]
fn the_latest_attempt_is_scored_and_an_earlier_box_only_with_the_fallback() {
    // Right first, wrongly rejected, then no box at all.
    let solver = ["\\boxed{7}", "I give up"];
    let verifier = ["<verify>reject</verify>"];
    let o = run(paper_team(&solver, &verifier));
    assert_eq!(o.final_answer.as_deref(), Some(""));
    assert_eq!(
        o.team_reward, 0.0,
        "the latest output is scored, as in the paper"
    );
    assert_eq!(
        shape(&o),
        vec![
            row("solver", 0, true, 0.0),
            row("verifier", 1, true, 0.0),
            row("solver", 2, false, -0.1)
        ]
    );
    let fallback = [Scoped(
        "math/boxed",
        "fallback_to_earlier = true",
        1.0,
        None,
    )];
    let o = run(team_full("", &fallback, &solver, &verifier, 3, Some(1)));
    assert_eq!(
        o.team_reward, 1.0,
        "the fallback scores the first attempt's 7"
    );
}

#[test]
fn a_group_of_the_paper_team_re_asks_exactly_the_rejected_episodes() {
    // Four episodes, one at a time: right and approved; wrong, rejected, then right;
    // right with an unreadable verdict (it passes); wrong, rejected, then wrong.
    let solver = [
        "\\boxed{7}",
        "\\boxed{1}",
        "\\boxed{7}",
        "\\boxed{7}",
        "\\boxed{2}",
        "\\boxed{9}",
    ];
    let verifier = [
        "<verify>approve</verify>",
        "<verify>reject</verify>",
        "fine",
        "<verify>reject</verify>",
    ];
    let team = paper_team(&solver, &verifier);
    let outcomes: Vec<EpisodeOutcome> = (0..4).map(|_| run(team.clone())).collect();
    let who: Vec<Vec<String>> = outcomes.iter().map(agents_of).collect();
    assert_eq!(
        who,
        [
            vec!["solver", "verifier"],
            vec!["solver", "verifier", "solver"],
            vec!["solver", "verifier"],
            vec!["solver", "verifier", "solver"],
        ]
    );
    let answers: Vec<Option<&str>> = outcomes.iter().map(|o| o.final_answer.as_deref()).collect();
    assert_eq!(answers, [Some("7"), Some("7"), Some("7"), Some("9")]);
    let rewards: Vec<f32> = outcomes.iter().map(|o| o.team_reward).collect();
    assert_eq!(rewards, [1.0, 1.0, 1.0, 0.0]);
    // The unreadable verdict passes the answer on, counted invalid.
    assert_eq!(shape(&outcomes[2])[1], row("verifier", 1, false, 0.9));
    // Over the group: 1 explicit approve of 4 verdicts; 2 verdicts on right first
    // answers (7: approved, 7: unreadable), 2 on wrong ones (1 and 2: both rejected).
    let refs: Vec<&EpisodeOutcome> = outcomes.iter().collect();
    let m = drmas::eval::metric_means(&refs);
    assert_eq!(m["approve_rate"], 0.25);
    assert_eq!(m["approve_given_correct"], 0.5);
    assert_eq!(m["approve_given_wrong"], 0.0);
    assert_eq!(m["verdict_invalid"], 0.25);
    assert_eq!(m["solver_attempts"], 1.5);
}

#[test]
fn a_reward_scoped_to_the_verifier_scores_only_its_samples() {
    // The team reward for everyone, the verdict reward (weight 0.5) for the verifier.
    let rewards = [
        Scoped("math/boxed", "", 1.0, None),
        Scoped("math/verdict", "", 0.5, Some(&["verifier"])),
    ];
    // A wrong first answer rightly rejected, then a right one.
    let o = run(team_full(
        "",
        &rewards,
        &["\\boxed{5}", "\\boxed{7}"],
        &["<verify>reject</verify>"],
        3,
        Some(1),
    ));
    assert_eq!(
        o.team_reward, 1.0,
        "the team reward is the unscoped rewards' sum"
    );
    assert_eq!(o.rewards, [1.0, 1.0], "each reward's episode score");
    assert_eq!(
        shape(&o),
        vec![
            row("solver", 0, true, 1.0),
            row("verifier", 1, true, 1.5),
            row("solver", 2, true, 1.0)
        ]
    );
    // A right first answer wrongly rejected: the verifier's verdict scores 0.
    let o = run(team_full(
        "",
        &rewards,
        &["\\boxed{7}", "\\boxed{7}"],
        &["<verify>reject</verify>"],
        3,
        Some(1),
    ));
    assert_eq!(o.rewards, [1.0, 0.0]);
    assert_eq!(shape(&o)[1], row("verifier", 1, true, 1.0));
}
