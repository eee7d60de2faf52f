//! The compatibility promise of the plugin API, proven with real `.so` files: a plugin
//! built against API 1.0 (the frozen copy in `tests/fixtures/api-1.0`) loads and runs in
//! this host; a plugin built against a newer minor, another major, or a different
//! layout under the same version is refused in one line naming what differs.

use crate::built_plugins;

use built_plugins::{path_of, plugin_dir, registry, task};
use drmas::plugin::{LoadError, ResolvePolicy};
use drmas_plugin_api::{
    Action, ComponentKind, ConfigKey, EpisodeEnd, EpisodeRecord, EpisodeStart, EpisodeStatus,
    EpisodeView, Message, Parsed, SampleRow, ToolCall, ToolContext, ToolResult, ToolSpec,
    TurnRecord, serde_json::json,
};

#[test]
fn the_frozen_copy_is_api_1_0_with_the_binary_interface_of_this_host() {
    let manifest = include_str!("../../../tests/fixtures/api-1.0/Cargo.toml");
    assert!(manifest.contains("\nversion = \"1.0.0\"\n"), "{manifest}");
    // The binary interface is frozen for all of 1.x: the copy must declare the same one.
    let ffi = include_str!("../../../tests/fixtures/api-1.0/src/ffi.rs");
    let declared = format!(
        "pub const ABI_VERSION: &str = \"{}\";",
        drmas_plugin_api::ffi::ABI_VERSION
    );
    assert!(
        ffi.contains(&declared),
        "the frozen ffi.rs lacks `{declared}`"
    );
}

#[test]
fn a_plugin_built_against_api_1_0_describes_its_components() {
    let dir = plugin_dir(&["api-1.0"]);
    let reg = registry(&dir);
    assert!(reg.failures().is_empty(), "{:?}", reg.failures());
    let plugin = reg.plugin("old-api", &ResolvePolicy::default()).unwrap();
    assert_eq!(plugin.version.to_string(), "1.0.0");
    let listed: Vec<(ComponentKind, &str, &str)> = plugin
        .components
        .iter()
        .map(|c| (c.kind, c.name.as_str(), c.summary.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            (ComponentKind::Agent, "caller", "calls its tool or answers"),
            (
                ComponentKind::Environment,
                "counter",
                "a `count` tool counting per episode"
            ),
            (ComponentKind::Reward, "match", "1 for the gold answer"),
            (ComponentKind::Normalizer, "scale", "score times a factor"),
        ]
    );
    let agent = plugin.component(ComponentKind::Agent, "caller").unwrap();
    assert_eq!(
        agent.config,
        Some(vec![
            ConfigKey::optional("tool", "string", "\"count\"", "the tool it calls"),
            ConfigKey::optional("partner", "string", "none", "an agent it names"),
        ])
    );
    let env = plugin
        .component(ComponentKind::Environment, "counter")
        .unwrap();
    assert_eq!(
        env.config,
        Some(vec![ConfigKey::optional(
            "limit",
            "integer",
            "2",
            "calls after which the episode ends"
        )])
    );
}

#[test]
fn a_plugin_built_against_api_1_0_runs_every_call() {
    let dir = plugin_dir(&["api-1.0"]);
    let reg = registry(&dir);
    let policy = ResolvePolicy::default();

    let agent = reg
        .create_agent("old-api/caller", "partner = \"judge\"", &policy)
        .unwrap();
    let view = EpisodeView {
        task: task(),
        agent: "caller".into(),
        turn: 2,
        tools: vec![ToolSpec::new("count", "counts its calls")],
        ..EpisodeView::default()
    };
    assert_eq!(
        agent.render(&view).unwrap(),
        [
            Message::system("tools: count"),
            Message::user("2+2? (turn 2)")
        ]
    );
    assert_eq!(
        agent.parse(&view, " call: paris ").unwrap(),
        Parsed::valid(Action::tool("count", "paris"))
    );
    assert_eq!(
        agent.parse(&view, "answer: 4").unwrap(),
        Parsed::valid(Action::finish("4"))
    );
    assert_eq!(
        agent.parse(&view, "hmm").unwrap(),
        Parsed::invalid(
            Action::invalid("no action"),
            "expected `call: ...` or `answer: ...`"
        )
    );
    assert_eq!(agent.linked_agents(), ["judge"]);
    assert_eq!(agent.tools_used(), ["count"]);

    let reward = reg
        .create_reward("old-api/match", "partial = 0.5", &policy)
        .unwrap();
    let scored = |answer: Option<&str>| {
        reward
            .score(&EpisodeRecord {
                task: task(),
                final_answer: answer.map(str::to_string),
                ..EpisodeRecord::default()
            })
            .unwrap()
    };
    assert_eq!(
        [scored(Some("4")), scored(Some("it is 4")), scored(None)],
        [1.0, 0.5, 0.0]
    );

    let norm = reg
        .create_normalizer("old-api/scale", "factor = 3.0", &policy)
        .unwrap();
    let rows = [
        SampleRow::new("u", 0, "caller", 0, 1.0),
        SampleRow::new("u", 1, "caller", 0, -0.5),
    ];
    assert_eq!(norm.advantages(&rows).unwrap(), [3.0, -1.5]);

    let err = reg
        .create_normalizer("old-api/scale", "factr = 3.0", &policy)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "normalizer `old-api/scale` refused its config: unknown field `factr`, expected `factor` \
         (at `factr`)"
    );
}

#[test]
fn a_plugin_built_against_api_1_0_keeps_episode_state_through_the_lifecycle() {
    let dir = plugin_dir(&["api-1.0"]);
    let env = registry(&dir)
        .create_environment("old-api/counter", "limit = 2", &ResolvePolicy::default())
        .unwrap();
    let prepared = env.prepare(&task()).unwrap();
    assert_eq!(prepared.question, "2+2? (prepared)");
    assert_eq!(prepared.meta["prepared"], json!(true));
    assert_eq!(
        env.tools().unwrap(),
        [ToolSpec::new("count", "counts its calls").with_input_format("any text")]
    );
    assert!(env.is_slow());

    for episode in [7, 8] {
        let start = EpisodeStart {
            episode,
            task: prepared.clone(),
            traj: 0,
        };
        env.start_episode(&start).unwrap();
    }
    let call = |episode| {
        let context = ToolContext {
            episode,
            task: prepared.clone(),
            agent: "caller".into(),
            ..ToolContext::default()
        };
        let call = ToolCall {
            name: "count".into(),
            input: "paris".into(),
        };
        env.call_tool(&context, &call)
    };
    assert_eq!(
        call(7).unwrap(),
        ToolResult::output("call 1 of 2 in task t1: PARIS")
    );
    assert_eq!(
        call(7).unwrap(),
        ToolResult {
            output: "call 2 of 2 in task t1: PARIS".into(),
            done: true,
            reward: None,
        }
    );
    // Episode 8 counts on its own.
    assert_eq!(
        call(8).unwrap(),
        ToolResult::output("call 1 of 2 in task t1: PARIS")
    );

    // `episode_metrics` came in 1.1: the 1.0 plugin answers `Unsupported` and the host
    // takes the default, no metrics.
    assert!(env.episode_metrics(7).unwrap().is_empty());

    let end = |episode| EpisodeEnd {
        episode,
        status: EpisodeStatus::Finished,
        final_answer: Some("4".into()),
        error: None,
    };
    env.end_episode(&end(7)).unwrap();
    let source = path_of(&dir, "api-1.0").display().to_string();
    assert_eq!(
        call(7).unwrap_err().to_string(),
        format!(
            "environment `old-api/counter` (old-api 1.0.0, {source}): episode 7 is not running"
        )
    );
    assert_eq!(
        env.end_episode(&end(7)).unwrap_err().to_string(),
        format!(
            "environment `old-api/counter` (old-api 1.0.0, {source}): episode 7 is not running"
        )
    );
    env.end_episode(&end(8)).unwrap();
}

#[test]
fn an_api_1_0_reward_scoped_to_one_agent_scores_its_turns_with_the_episode_score() {
    let dir = plugin_dir(&["api-1.0"]);
    let reg = registry(&dir);
    let policy = ResolvePolicy::default();
    // `turn_scores` and `record_metrics` came in 1.3: the 1.0 plugin answers
    // `Unsupported`, and the host takes the defaults (the episode score for every turn,
    // the metrics by episode id, none here).
    let reward = reg.create_reward("old-api/match", "", &policy).unwrap();
    let record = EpisodeRecord {
        task: task(),
        final_answer: Some("4".into()),
        transcript: vec![TurnRecord::default(); 2],
        ..EpisodeRecord::default()
    };
    assert_eq!(reward.score(&record).unwrap(), 1.0);
    assert_eq!(reward.turn_scores(&record).unwrap(), None);
    let env = reg
        .create_environment("old-api/counter", "", &policy)
        .unwrap();
    assert!(env.record_metrics(&record).unwrap().is_empty());
    // `probe` and `max_episodes` came in 1.4: nothing to reach, no limit.
    assert!(env.probe().unwrap().is_empty());
    assert_eq!(env.max_episodes(), None);

    // In a team: the math team's built-in reward for everyone, the old plugin's (which
    // scores "7" as the gold of the orchestra's task) for the verifier only.
    use crate::orchestra::{Scoped, row, run, shape, team_in};
    let rewards = [
        Scoped("math/boxed", "", 1.0, None),
        Scoped("old-api/match", "partial = 0.25", 2.0, Some(&["verifier"])),
    ];
    let team = team_in(
        &reg,
        "",
        &rewards,
        &["\\boxed{5}", "so \\boxed{7}"],
        &["<verify>reject</verify>"],
        3,
        Some(1),
    );
    let o = run(team);
    // The final answer `7` is the gold: 1 from each reward; the old one weighs 2.
    assert_eq!(o.rewards, [1.0, 1.0]);
    assert_eq!(
        o.team_reward, 1.0,
        "a scoped reward is not part of the team reward"
    );
    assert_eq!(
        shape(&o),
        vec![
            row("solver", 0, true, 1.0),
            row("verifier", 1, true, 3.0),
            row("solver", 2, true, 1.0)
        ]
    );
}

// The host's own version is part of the messages below: at API 1.4.0 they say `1.4.0`
// and `1.0 to 1.4`.

/// The plugin `name`, built against drmas-plugin-api `found`, is refused with both
/// versions named.
fn assert_refused_for_its_version(name: &str, found: &str) {
    let dir = plugin_dir(&[name]);
    let reg = registry(&dir);
    assert!(
        matches!(reg.failures(), [LoadError::ApiVersion { .. }]),
        "{:?}",
        reg.failures()
    );
    assert_eq!(
        reg.failures()[0].to_string(),
        format!(
            "{}: built against drmas-plugin-api {found}, but this host has API 1.4.0 and loads \
             plugins built against 1.0 to 1.4 (rebuild the plugin against drmas-plugin-api 1.4.0, \
             or use a newer drmas)",
            path_of(&dir, name).display()
        )
    );
}

#[test]
fn a_plugin_built_against_a_newer_minor_is_refused_naming_both_versions() {
    assert_refused_for_its_version("api-1.99", "1.99.0");
}

#[test]
fn a_plugin_built_against_another_major_is_refused_naming_both_versions() {
    assert_refused_for_its_version("api-v9", "9.0.0");
}

#[test]
fn a_layout_mismatch_under_the_same_version_names_the_type_in_one_line() {
    // The component object's `call` has an extra parameter; the versions are equal.
    let dir = plugin_dir(&["layout"]);
    let reg = registry(&dir);
    assert!(
        matches!(reg.failures(), [LoadError::Layout { .. }]),
        "{:?}",
        reg.failures()
    );
    assert_eq!(
        reg.failures()[0].to_string(),
        format!(
            "{}: layout mismatch in type `VTable` (via PluginMod -> RResult -> \
             FfiComponent_TO<'lt> -> RObject<'lt> -> PrefixRef<'a, VTable>): unexpected field; \
             the plugin was built against a different drmas-plugin-api of the same version \
             number (rebuild it)",
            path_of(&dir, "layout").display()
        )
    );
}
