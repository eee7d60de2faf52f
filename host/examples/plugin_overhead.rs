//! What a plugin call costs the host: the same component called three ways, side by side
//! in one run.
//!
//! - **inline**: the component's own trait object, called directly (what a
//!   plugin compiled into the host as ordinary Rust would cost);
//! - **built-in**: through the host's checked handle (panic guard, finiteness and length
//!   checks), as drmas calls its built-in plugins;
//! - **.so**: the same code built as a dynamic plugin and loaded from a folder, through
//!   the frozen ABI (JSON in and out) and the same handle.
//!
//! The components are the real ones: `math/solver` (render, parse), `math/boxed`
//! (score), `norms/drmas` (advantages of 1,024 rows) and, for a tool call, the `upper`
//! tool of the test fixture `good` beside an inline copy of its five lines.
//!
//! Usage (see `scripts/bench-plugin-calls.sh`, which builds the `.so` files):
//! `plugin_overhead DIR` where DIR holds `math.so`, `norms.so` and `good.so`.

use drmas::plugin::{Registry, ResolvePolicy, TrustPolicy};
use drmas_plugin_api::{
    Action, Agent, ComponentFactory, ComponentKind, Environment, EpisodeRecord, EpisodeView,
    Normalizer, PluginError, PluginResult, PluginSpec, Reward, SampleRow, Task, ToolCall,
    ToolContext, ToolResult, TurnRecord,
};
use std::{hint::black_box, path::PathBuf, time::Instant};

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench/plugins"));
    for name in ["math.so", "norms.so", "good.so"] {
        if !dir.join(name).exists() {
            eprintln!("plugin_overhead: no {}", dir.join(name).display());
            std::process::exit(2);
        }
    }
    let builtin = Registry::builtin();
    let builtin_policy = ResolvePolicy::default();
    let dynamic = Registry::discover(&[dir], &TrustPolicy::default());
    if let Some(f) = dynamic.failures().first() {
        eprintln!("plugin_overhead: {f}");
        std::process::exit(2);
    }
    // The folder's math and norms replace the built-ins of the same name.
    let dynamic_policy = ResolvePolicy {
        overrides: ["math", "norms"].map(String::from).into(),
        ..ResolvePolicy::default()
    };

    let view = episode_view();
    let completion = solution_text();
    let record = episode_record(&view, &completion);
    let rows = sample_rows(1024);
    let context = ToolContext {
        task: view.task.clone(),
        ..ToolContext::default()
    };
    let call = ToolCall {
        name: "search".into(),
        input: "the capital of france".into(),
    };

    let math = drmas_math::plugin();
    let norms = drmas_norms::plugin();
    let inline_solver = agent(&math, "solver");
    let inline_reward = reward(&math, "boxed");
    let inline_norm = normalizer(&norms, "drmas");
    let inline_tool = Upper;

    let solver_b = builtin
        .create_agent("math/solver", "", &builtin_policy)
        .unwrap();
    let reward_b = builtin
        .create_reward("math/boxed", "", &builtin_policy)
        .unwrap();
    let norm_b = builtin
        .create_normalizer("norms/drmas", "", &builtin_policy)
        .unwrap();
    let solver_d = dynamic
        .create_agent("math/solver", "", &dynamic_policy)
        .unwrap();
    let reward_d = dynamic
        .create_reward("math/boxed", "", &dynamic_policy)
        .unwrap();
    let norm_d = dynamic
        .create_normalizer("norms/drmas", "", &dynamic_policy)
        .unwrap();
    let env_d = dynamic
        .create_environment("good/upper", "", &dynamic_policy)
        .unwrap();

    // The three ways must agree before their times mean anything.
    assert_eq!(
        inline_solver.render(&view).unwrap(),
        solver_d.render(&view).unwrap()
    );
    assert_eq!(
        inline_solver.parse(&view, &completion).unwrap(),
        solver_d.parse(&view, &completion).unwrap()
    );
    assert_eq!(
        inline_reward.score(&record).unwrap(),
        reward_d.score(&record).unwrap()
    );
    assert_eq!(
        inline_norm.advantages(&rows).unwrap(),
        norm_d.advantages(&rows).unwrap()
    );
    assert_eq!(
        inline_tool.call_tool(&context, &call).unwrap(),
        env_d.call_tool(&context, &call).unwrap()
    );

    println!(
        "per call, median of 9 batches; input sizes: view {} B of JSON, 1,024 sample rows",
        serde_json::to_string(&view).unwrap().len()
    );
    println!(
        "{:<26} {:>10} {:>10} {:>10} {:>12}",
        "call", "inline µs", "built-in", ".so µs", ".so − inline"
    );
    row(
        "agent render",
        time(|| inline_solver.render(&view).unwrap()),
        time(|| solver_b.render(&view).unwrap()),
        time(|| solver_d.render(&view).unwrap()),
    );
    row(
        "agent parse",
        time(|| inline_solver.parse(&view, &completion).unwrap()),
        time(|| solver_b.parse(&view, &completion).unwrap()),
        time(|| solver_d.parse(&view, &completion).unwrap()),
    );
    row(
        "tool call",
        time(|| inline_tool.call_tool(&context, &call).unwrap()),
        f64::NAN,
        time(|| env_d.call_tool(&context, &call).unwrap()),
    );
    row(
        "reward score",
        time(|| inline_reward.score(&record).unwrap()),
        time(|| reward_b.score(&record).unwrap()),
        time(|| reward_d.score(&record).unwrap()),
    );
    row(
        "normalizer (1,024 rows)",
        time(|| inline_norm.advantages(&rows).unwrap()),
        time(|| norm_b.advantages(&rows).unwrap()),
        time(|| norm_d.advantages(&rows).unwrap()),
    );
}

fn row(name: &str, inline: f64, builtin: f64, dynamic: f64) {
    let b = if builtin.is_nan() {
        "-".to_string()
    } else {
        format!("{builtin:.2}")
    };
    println!(
        "{name:<26} {inline:>10.2} {b:>10} {dynamic:>10.2} {:>12.2}",
        dynamic - inline
    );
}

/// Median µs per call over 9 batches, each sized to take about 20 ms.
fn time<T>(mut f: impl FnMut() -> T) -> f64 {
    for _ in 0..50 {
        black_box(f());
    }
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed().as_millis() < 20 {
        black_box(f());
        n += 1;
    }
    let mut batches: Vec<f64> = (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                black_box(f());
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[4]
}

fn agent(spec: &PluginSpec, name: &str) -> Box<dyn Agent> {
    match &spec.entry(ComponentKind::Agent, name).unwrap().factory {
        ComponentFactory::Agent(make) => make("").unwrap(),
        _ => unreachable!(),
    }
}

fn reward(spec: &PluginSpec, name: &str) -> Box<dyn Reward> {
    match &spec.entry(ComponentKind::Reward, name).unwrap().factory {
        ComponentFactory::Reward(make) => make("").unwrap(),
        _ => unreachable!(),
    }
}

fn normalizer(spec: &PluginSpec, name: &str) -> Box<dyn Normalizer> {
    match &spec.entry(ComponentKind::Normalizer, name).unwrap().factory {
        ComponentFactory::Normalizer(make) => make("").unwrap(),
        _ => unreachable!(),
    }
}

/// The fixture's `upper` tool, inline.
struct Upper;

impl Environment for Upper {
    fn call_tool(&self, _context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        if call.name != "search" {
            return Err(PluginError::input(format!("unknown tool `{}`", call.name)));
        }
        Ok(ToolResult::output(call.input.to_uppercase()))
    }
}

fn solution_text() -> String {
    let steps: String = (1..=12)
        .map(|i| {
            format!(
                "Step {i}: the farmer has {} eggs after day {i}, so we carry it on. ",
                16 * i
            )
        })
        .collect();
    format!("{steps}Therefore the answer is \\boxed{{18}}.")
}

/// A solver's second turn: it solved, the verifier rejected, it is asked again.
fn episode_view() -> EpisodeView {
    let task = Task {
        id: "gsm8k-17".into(),
        source: "gsm8k".into(),
        question: "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning \
                   and bakes muffins for her friends every day with four. She sells the \
                   remainder at the farmers' market daily for $2 per fresh duck egg. How much \
                   in dollars does she make every day at the farmers' market?"
            .into(),
        answer: "18".into(),
        ..Task::default()
    };
    let transcript = vec![
        TurnRecord {
            turn: 0,
            agent: "solver".into(),
            completion: solution_text(),
            action: Action::handoff("verifier"),
            valid: true,
            ..TurnRecord::default()
        },
        TurnRecord {
            turn: 1,
            agent: "verifier".into(),
            completion: "The arithmetic in step 3 is wrong. <verify>reject</verify>".into(),
            action: Action::handoff("solver"),
            valid: true,
            ..TurnRecord::default()
        },
    ];
    EpisodeView {
        episode: 7,
        task,
        agent: "solver".into(),
        turn: 2,
        transcript,
        tools: Vec::new(),
    }
}

fn episode_record(view: &EpisodeView, completion: &str) -> EpisodeRecord {
    let mut transcript = view.transcript.clone();
    transcript.push(TurnRecord {
        turn: 2,
        agent: "solver".into(),
        completion: completion.to_string(),
        action: Action::finish("18"),
        valid: true,
        ..TurnRecord::default()
    });
    EpisodeRecord {
        episode: view.episode,
        task: view.task.clone(),
        final_answer: Some("18".into()),
        transcript,
        truncated: false,
    }
}

/// 1,024 rows: 32 tasks × 8 trajectories × (solver, verifier) × 2 turns.
fn sample_rows(n: usize) -> Vec<SampleRow> {
    (0..n)
        .map(|i| {
            let task = i / 32;
            let traj = (i / 4) % 8;
            let agent = if i % 2 == 0 { "solver" } else { "verifier" };
            let turn = (i / 2) % 2;
            let score = ((i * 7919) % 13) as f32 / 13.0;
            SampleRow::new(
                &format!("gsm8k/{task}"),
                traj as u32,
                agent,
                turn as u32,
                score,
            )
        })
        .collect()
}
