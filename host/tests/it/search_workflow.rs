//! The search team end to end with scripted models: the real `search/*` agents, the
//! real environment over a BM25 index built in the test, the real EM and F1 rewards,
//! through the host's episode loop. Each agent has its own scripted model, so every
//! completion is given in order and every prompt is kept.

use crate::common;

use common::fake::{ByteCodec, ScriptedBackend};
use drmas::eval::{RewardStats, summarize};
use drmas::plugin::{Registry, ResolvePolicy};
use drmas::pool::{Backend, WorkerConfig, spawn_worker};
use drmas::rollout::{
    AgentSlot, EpisodeOutcome, EpisodeSpec, ModelSlot, Team, TeamOptions, run_episode,
};
use drmas_plugin_api::{Action, Task, serde_json::json};
use std::{
    collections::{HashMap, VecDeque},
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

const CORPUS: &[(&str, &str, &str)] = &[
    (
        "p1",
        "Canberra",
        "Canberra is the capital city of Australia, founded in 1913.",
    ),
    (
        "p2",
        "Sydney",
        "Sydney is the largest city in Australia, on the east coast.",
    ),
    (
        "p3",
        "Mount Everest",
        "Mount Everest is the highest mountain above sea level, in the Himalayas.",
    ),
    (
        "p4",
        "Photosynthesis",
        "Photosynthesis converts light energy into chemical energy in plants.",
    ),
];

fn build_index(dir: &Path) -> std::path::PathBuf {
    let corpus = dir.join("corpus.jsonl");
    let text: String = CORPUS
        .iter()
        .map(|(id, title, text)| format!("{}\n", json!({"id": id, "title": title, "text": text})))
        .collect();
    std::fs::write(&corpus, text).unwrap();
    let index = dir.join("index");
    std::fs::create_dir_all(&index).unwrap();
    drmas_search::index::build_index(&corpus, &index, &mut |_| {}).unwrap();
    index
}

type Prompts = Arc<Mutex<Vec<String>>>;

/// A scripted model answering from `script` in order; its prompts are kept.
fn model(id: &str, script: &[&'static str]) -> (ModelSlot, Prompts) {
    let queue: Arc<Mutex<VecDeque<&'static str>>> =
        Arc::new(Mutex::new(script.iter().copied().collect()));
    let calls: Prompts = Arc::default();
    let backend = ScriptedBackend {
        script: move |_: &str| {
            queue
                .lock()
                .unwrap()
                .pop_front()
                .expect("the script ran out of completions")
                .to_string()
        },
        calls: calls.clone(),
    };
    let handle = spawn_worker(id, WorkerConfig::default(), move || {
        Ok(Box::new(backend) as Box<dyn Backend>)
    })
    .unwrap();
    let slot = ModelSlot {
        id: id.into(),
        codec: Arc::new(ByteCodec),
        handle,
    };
    (slot, calls)
}

struct Scripted {
    team: Arc<Team>,
    verifier: Prompts,
    searcher: Prompts,
    answerer: Prompts,
}

fn team(
    index: &Path,
    verifier: &[&'static str],
    searcher: &[&'static str],
    answerer: &[&'static str],
    max_turns: u32,
) -> Scripted {
    let registry = Registry::builtin();
    let policy = ResolvePolicy::default();
    let (v, v_calls) = model("verifier-lm", verifier);
    let (s, s_calls) = model("searcher-lm", searcher);
    let (a, a_calls) = model("answerer-lm", answerer);
    let slot = |name: &str, model: &str| AgentSlot {
        name: name.into(),
        handle: registry
            .create_agent(&format!("search/{name}"), "", &policy)
            .unwrap(),
        model: model.into(),
        sampling: Default::default(),
    };
    let env_config = format!(
        "retriever = {{ index = {:?} }}\ntopk = 2\nmax_chars = 200\n",
        index.display().to_string()
    );
    let environment = registry
        .create_environment("search/env", &env_config, &policy)
        .unwrap();
    let tools = environment.tools().unwrap();
    let team = Team {
        agents: vec![
            slot("verifier", "verifier-lm"),
            slot("searcher", "searcher-lm"),
            slot("answerer", "answerer-lm"),
        ],
        models: HashMap::from([
            ("verifier-lm".to_string(), v),
            ("searcher-lm".to_string(), s),
            ("answerer-lm".to_string(), a),
        ]),
        environment: Some(environment),
        tools,
        rewards: vec![
            drmas::rollout::RewardSlot::team(
                registry.create_reward("search/em", "", &policy).unwrap(),
                1.0,
            ),
            drmas::rollout::RewardSlot::team(
                registry.create_reward("search/f1", "", &policy).unwrap(),
                0.0,
            ),
        ],
        options: TeamOptions {
            entry: "verifier".into(),
            max_turns,
            final_agent: Some("answerer".into()),
            max_loops: None,
            invalid_penalty: 0.1,
            seed: 1,
            tool_timeout: Duration::from_secs(30),
            max_failed_episodes: 0.05,
            keep_prompts: false,
        },
    };
    Scripted {
        team: Arc::new(team),
        verifier: v_calls,
        searcher: s_calls,
        answerer: a_calls,
    }
}

fn task(id: &str) -> Task {
    Task {
        id: id.into(),
        source: "nq".into(),
        question: "What is the capital of Australia?".into(),
        answer: "Canberra".into(),
        meta: json!({"answers": ["Canberra", "Canberra, ACT"]})
            .as_object()
            .unwrap()
            .clone(),
    }
}

fn run(team: &Arc<Team>, id: &str, traj: u32) -> EpisodeOutcome {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run_episode(
        team.clone(),
        EpisodeSpec {
            task: task(id),
            uid: format!("nq/{id}"),
            traj,
            sampling_override: None,
        },
    ))
    .unwrap()
}

/// (agent, turn, valid, score) of each sample.
fn shape(o: &EpisodeOutcome) -> Vec<(&str, u32, bool, f32)> {
    o.samples
        .iter()
        .map(|s| (s.agent.as_str(), s.turn, s.valid, s.score))
        .collect()
}

#[test]
fn no_searches_and_the_information_reaches_the_next_turn_then_yes_answers() {
    let dir = tempfile::tempdir().unwrap();
    let index = build_index(dir.path());
    let s = team(
        &index,
        &["<verify>no</verify>", "<verify>yes</verify>"],
        &["<search>capital of Australia</search>"],
        &["<answer>Canberra</answer>"],
        7,
    );
    let o = run(&s.team, "q1", 0);
    let agents: Vec<&str> = o.transcript.iter().map(|t| t.agent.as_str()).collect();
    assert_eq!(agents, ["verifier", "searcher", "verifier", "answerer"]);
    assert_eq!(
        o.transcript[1].action,
        Action::tool("search", "capital of Australia")
    );
    let info = o.transcript[1].tool_output.as_deref().unwrap();
    assert!(
        info.starts_with("<information>") && info.trim_end().ends_with("</information>"),
        "{info}"
    );
    assert!(info.contains("Doc 1(Title: Canberra) Canberra is the capital city of Australia"));
    assert_eq!(o.tool_calls, 1);
    assert_eq!(o.final_answer.as_deref(), Some("Canberra"));
    assert!(!o.truncated);
    assert_eq!(o.rewards, [1.0, 1.0]);
    // EM is the team reward (F1 has weight 0): every valid sample scores 1.
    assert_eq!(
        shape(&o),
        [
            ("verifier", 0, true, 1.0),
            ("searcher", 1, true, 1.0),
            ("verifier", 2, true, 1.0),
            ("answerer", 3, true, 1.0),
        ]
    );
    // The verifier's second prompt and the answerer's hold the retrieved passage; the
    // first verifier prompt has nothing retrieved yet.
    let v = s.verifier.lock().unwrap();
    assert!(!v[0].contains("Doc 1(Title: Canberra)"));
    assert!(v[1].contains("Doc 1(Title: Canberra)"), "{}", v[1]);
    assert!(s.answerer.lock().unwrap()[0].contains("Doc 1(Title: Canberra)"));
    assert_eq!(s.searcher.lock().unwrap().len(), 1);
    assert_eq!(o.metrics["searches"], 1.0);
    assert_eq!(o.metrics["retrieval_failures"], 0.0);
    assert_eq!(o.metrics["answer_recall"], 1.0);
}

#[test]
fn the_last_turn_goes_to_the_answerer_and_an_untagged_answer_ends_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let index = build_index(dir.path());
    // max_turns 5: verifier, searcher, verifier, searcher, and the last turn (when the
    // verifier would be due after the second search) goes to the answerer.
    let s = team(
        &index,
        &["<verify>no</verify>", "<verify>no</verify>"],
        &[
            "<search>largest city Australia</search>",
            "<search>highest mountain</search>",
        ],
        &["It is Canberra."],
        5,
    );
    let o = run(&s.team, "q2", 1);
    let agents: Vec<&str> = o.transcript.iter().map(|t| t.agent.as_str()).collect();
    assert_eq!(
        agents,
        ["verifier", "searcher", "verifier", "searcher", "answerer"]
    );
    assert_eq!(o.tool_calls, 2);
    assert_eq!(o.final_answer, None);
    assert!(o.truncated);
    assert!(matches!(o.transcript[4].action, Action::Invalid { .. }));
    assert_eq!(o.rewards, [0.0, 0.0]);
    assert_eq!(
        shape(&o),
        [
            ("verifier", 0, true, 0.0),
            ("searcher", 1, true, 0.0),
            ("verifier", 2, true, 0.0),
            ("searcher", 3, true, 0.0),
            ("answerer", 4, false, -0.1),
        ]
    );
    // The answerer saw both searches' passages.
    let a = &s.answerer.lock().unwrap()[0];
    assert!(
        a.contains("(Title: Sydney)") && a.contains("(Title: Mount Everest)"),
        "{a}"
    );
    assert_eq!(o.metrics["searches"], 2.0);
    // The first search's passages hold "Canberra" (the Sydney passage is first, Canberra
    // second), the second's do not.
    assert_eq!(o.metrics["answer_recall"], 0.5);
}

#[test]
fn an_unparseable_verdict_counts_as_yes_and_is_marked_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let index = build_index(dir.path());
    let s = team(
        &index,
        &["I think we know this."],
        &[],
        &["<answer>Sydney</answer>"],
        7,
    );
    let o = run(&s.team, "q3", 2);
    let agents: Vec<&str> = o.transcript.iter().map(|t| t.agent.as_str()).collect();
    assert_eq!(agents, ["verifier", "answerer"]);
    assert!(!o.transcript[0].valid && !o.transcript[0].note.is_empty());
    assert_eq!(o.final_answer.as_deref(), Some("Sydney"));
    assert_eq!(o.rewards, [0.0, 0.0]);
    assert_eq!(
        shape(&o),
        [("verifier", 0, false, -0.1), ("answerer", 1, true, 0.0)]
    );
    // No search: the episode reports none, and no recall.
    assert_eq!(o.metrics["searches"], 0.0);
    assert!(!o.metrics.contains_key("answer_recall"));
}

#[test]
fn the_report_shows_every_reward_and_metric_per_source() {
    let dir = tempfile::tempdir().unwrap();
    let index = build_index(dir.path());
    // Two episodes of one question: one right after a search, one partly right (F1 only).
    let s = team(
        &index,
        &[
            "<verify>no</verify>",
            "<verify>yes</verify>",
            "<verify>yes</verify>",
        ],
        &["<search>capital of Australia</search>"],
        &[
            "<answer>Canberra</answer>",
            "<answer>the city of Canberra</answer>",
        ],
        7,
    );
    let first = run(&s.team, "q4", 0);
    let second = run(&s.team, "q4", 1);
    // "city of canberra" against "canberra": precision 1/3, recall 1, F1 = 0.5.
    assert_eq!(second.rewards, [0.0, 0.5]);
    let r = summarize(&[&first, &second], 2, 1.0, &s.team.reward_names());
    assert_eq!(
        r.rewards["search/em"],
        RewardStats {
            avg_at_k: 0.5,
            pass_at_k: 1.0
        }
    );
    assert_eq!(
        r.rewards["search/f1"],
        RewardStats {
            avg_at_k: 0.75,
            pass_at_k: 1.0
        }
    );
    // searches: 1 and 0; recall only from the episode that searched.
    assert_eq!(r.metrics["searches"], 0.5);
    assert_eq!(r.metrics["answer_recall"], 1.0);
    assert_eq!(r.mean_tool_calls, 0.5);
}
