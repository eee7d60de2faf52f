//! Real `.so` plugins, built by `scripts/build-test-plugins.sh`, loaded by the host.
//! Every bad plugin must give one clear line and leave the host running.

use crate::built_plugins;

use built_plugins::{path_of, plugin_dir, registry, task};
use drmas::plugin::{Registry, ResolveError, ResolvePolicy};
use drmas_plugin_api::{
    Action, EpisodeRecord, EpisodeView, Message, Parsed, SampleRow, ToolCall, ToolContext,
};
use std::process::Command;

fn rows() -> Vec<SampleRow> {
    vec![
        SampleRow::new("u", 0, "a", 0, 1.0),
        SampleRow::new("u", 1, "a", 0, 0.0),
    ]
}

#[test]
fn good_plugin_components_work_through_the_abi() {
    let dir = plugin_dir(&["good"]);
    let reg = registry(&dir);
    assert!(reg.failures().is_empty(), "{:?}", reg.failures());
    let policy = ResolvePolicy::default();
    let good = reg.plugin("good", &policy).unwrap();
    assert_eq!(good.version.to_string(), "1.0.0");
    assert_eq!(good.components.len(), 4);

    let norm = reg
        .create_normalizer("good/shift", "offset = 0.25", &policy)
        .unwrap();
    assert_eq!(norm.advantages(&rows()).unwrap(), vec![0.75, -0.25]);
    assert_eq!(
        norm.id.to_string(),
        format!(
            "normalizer `good/shift` (good 1.0.0, {})",
            path_of(&dir, "good").display()
        )
    );

    let view = EpisodeView {
        task: task(),
        agent: "solver".into(),
        ..EpisodeView::default()
    };
    let agent = reg.create_agent("good/echo", "", &policy).unwrap();
    assert_eq!(agent.render(&view).unwrap(), vec![Message::user("2+2?")]);
    assert_eq!(
        agent.parse(&view, "search: capital of France").unwrap(),
        Parsed::valid(Action::Tool {
            name: "search".into(),
            input: "capital of France".into()
        })
    );
    assert_eq!(
        agent.parse(&view, " 4\n").unwrap(),
        Parsed::valid(Action::Finish { answer: "4".into() })
    );

    let env = reg.create_environment("good/upper", "", &policy).unwrap();
    let out = env
        .call_tool(
            &ToolContext {
                task: task(),
                ..ToolContext::default()
            },
            &ToolCall {
                name: "search".into(),
                input: "paris".into(),
            },
        )
        .unwrap();
    assert_eq!(out.output.as_str(), "PARIS");
    let err = env
        .call_tool(
            &ToolContext {
                task: task(),
                ..ToolContext::default()
            },
            &ToolCall {
                name: "fetch".into(),
                input: "x".into(),
            },
        )
        .unwrap_err();
    assert!(err.to_string().ends_with(": unknown tool `fetch`"), "{err}");

    let reward = reg.create_reward("good/exact", "", &policy).unwrap();
    let mut episode = EpisodeRecord {
        task: task(),
        final_answer: Some("4".into()),
        ..EpisodeRecord::default()
    };
    assert_eq!(reward.score(&episode).unwrap(), 1.0);
    episode.final_answer = None;
    assert_eq!(reward.score(&episode).unwrap(), 0.0);
}

#[test]
fn a_dynamic_agent_says_which_agents_its_config_names() {
    let dir = plugin_dir(&["good"]);
    let reg = registry(&dir);
    let policy = ResolvePolicy::default();
    assert_eq!(
        reg.agent_links("good/echo", "reviewer = \"checker\"\n", &policy)
            .unwrap(),
        vec!["checker".to_string()]
    );
    assert!(
        reg.agent_links("good/echo", "", &policy)
            .unwrap()
            .is_empty()
    );
    let err = reg
        .agent_links("good/echo", "reviewr = 1", &policy)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `reviewr`"), "{err}");
}

#[test]
fn plugin_config_errors_come_back_as_text() {
    let dir = plugin_dir(&["good"]);
    let err = registry(&dir)
        .create_normalizer("good/shift", "offset = \"high\"", &ResolvePolicy::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "normalizer `good/shift` refused its config: invalid type: string \"high\", expected f32 (at `\"high\"`)"
    );
}

#[test]
fn garbage_empty_and_foreign_files_are_skipped_with_one_line_each() {
    let dir = plugin_dir(&["garbage", "empty", "not-a-plugin", "good"]);
    let reg = registry(&dir);
    let msgs: Vec<String> = reg.failures().iter().map(|f| f.to_string()).collect();
    assert_eq!(
        msgs,
        vec![
            format!(
                "{}: empty file, not a shared library",
                path_of(&dir, "empty").display()
            ),
            format!(
                "{}: not a shared library (no ELF header)",
                path_of(&dir, "garbage").display()
            ),
            format!(
                "{}: not a drmas plugin (it exports no drmas plugin header)",
                path_of(&dir, "not-a-plugin").display()
            ),
        ]
    );
    // The good plugin beside them still loads.
    assert!(reg.plugin("good", &ResolvePolicy::default()).is_ok());
}

#[test]
fn a_failed_plugin_is_a_hard_error_when_the_experiment_needs_it() {
    let dir = plugin_dir(&["garbage"]);
    let err = registry(&dir)
        .create_normalizer("acme/centered", "", &ResolvePolicy::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "no plugin `acme` is loaded (loaded: math, norms, remote, search); these plugin files failed to load:\n  - {}: not a shared library (no ELF header)",
            path_of(&dir, "garbage").display()
        )
    );
}

#[test]
fn panicking_constructor_is_an_error_not_an_abort() {
    let dir = plugin_dir(&["misbehave"]);
    let err = registry(&dir)
        .create_normalizer("misbehave/ctor-panics", "", &ResolvePolicy::default())
        .err()
        .unwrap();
    assert_eq!(
        err,
        ResolveError::Create {
            kind: "normalizer".into(),
            component: "misbehave/ctor-panics".into(),
            message:
                "panicked: constructor exploded (at tests/fixtures/misbehave/src/lib.rs:63:45)"
                    .into(),
        }
    );
}

#[test]
fn panicking_method_is_an_error_naming_plugin_and_component() {
    let dir = plugin_dir(&["misbehave"]);
    let norm = registry(&dir)
        .create_normalizer("misbehave/method-panics", "", &ResolvePolicy::default())
        .unwrap();
    let err = norm.advantages(&rows()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "normalizer `misbehave/method-panics` (misbehave 0.3.0, {}): panicked: advantages exploded (at tests/fixtures/misbehave/src/lib.rs:11:9)",
            path_of(&dir, "misbehave").display()
        )
    );
    // The component is still usable: the panic did not poison the host.
    assert!(norm.advantages(&rows()).is_err());
}

#[test]
fn nan_inf_and_wrong_length_results_are_refused() {
    let dir = plugin_dir(&["misbehave"]);
    let reg = registry(&dir);
    let p = ResolvePolicy::default();
    let src = path_of(&dir, "misbehave");
    let err = reg
        .create_normalizer("misbehave/nan", "", &p)
        .unwrap()
        .advantages(&rows())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "normalizer `misbehave/nan` (misbehave 0.3.0, {}) returned NaN as the advantage of \
             sample 1 of 2 (task group u, trajectory 1, agent a, turn 0); advantages must be \
             finite",
            src.display()
        )
    );
    let err = reg
        .create_normalizer("misbehave/short", "", &p)
        .unwrap()
        .advantages(&rows())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "normalizer `misbehave/short` (misbehave 0.3.0, {}) returned 1 values for 2 samples",
            src.display()
        )
    );
    let episode = EpisodeRecord {
        episode: 4,
        task: drmas_plugin_api::Task {
            source: "gsm8k".into(),
            ..task()
        },
        truncated: true,
        ..EpisodeRecord::default()
    };
    let err = reg
        .create_reward("misbehave/inf", "", &p)
        .unwrap()
        .score(&episode)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "reward `misbehave/inf` (misbehave 0.3.0, {}) returned inf as the score of episode 4 \
             (task gsm8k/t1); a score must be finite, so the episode failed",
            src.display()
        )
    );
}

#[test]
fn two_files_with_the_same_plugin_name_are_refused() {
    let dir = plugin_dir(&["good>good-a", "good>good-b"]);
    let err = registry(&dir)
        .create_normalizer("good/shift", "", &ResolvePolicy::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "plugin `good` is provided by more than one source ({}, {}); remove all but one",
            path_of(&dir, "good-a").display(),
            path_of(&dir, "good-b").display()
        )
    );
}

#[test]
fn a_file_replaces_a_built_in_only_when_the_experiment_says_so() {
    let dir = plugin_dir(&["norms"]);
    let reg = registry(&dir);
    let err = reg
        .create_normalizer("norms/drmas", "", &ResolvePolicy::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "plugin `norms` is provided by more than one source (built-in, {}); remove all but one, \
             or set `override = [\"norms\"]` in [plugins] to let the file replace the built-in",
            path_of(&dir, "norms").display()
        )
    );
    let policy = ResolvePolicy {
        overrides: ["norms".to_string()].into(),
        ..Default::default()
    };
    let norm = reg.create_normalizer("norms/drmas", "", &policy).unwrap();
    assert_eq!(norm.id.source, path_of(&dir, "norms").display().to_string());
    // The dynamic build computes the same numbers as the built-in.
    let builtin = Registry::builtin()
        .create_normalizer("norms/drmas", "", &ResolvePolicy::default())
        .unwrap();
    assert_eq!(
        norm.advantages(&rows()).unwrap(),
        builtin.advantages(&rows()).unwrap()
    );
}

#[test]
fn unmet_version_requirement_is_refused() {
    let dir = plugin_dir(&["good"]);
    let policy = ResolvePolicy {
        require: [(
            "good".to_string(),
            semver::VersionReq::parse("^1.2").unwrap(),
        )]
        .into(),
        ..Default::default()
    };
    let err = registry(&dir)
        .create_normalizer("good/shift", "", &policy)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "plugin `good` is version 1.0.0, but the experiment requires `^1.2`"
    );
    let ok = ResolvePolicy {
        require: [(
            "good".to_string(),
            semver::VersionReq::parse("^1.0").unwrap(),
        )]
        .into(),
        ..Default::default()
    };
    assert!(
        registry(&dir)
            .create_normalizer("good/shift", "", &ok)
            .is_ok()
    );
}

#[test]
fn unknown_component_lists_what_the_plugin_has() {
    let dir = plugin_dir(&["good"]);
    let err = registry(&dir)
        .create_reward("good/fuzzy", "", &ResolvePolicy::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "plugin `good` 1.0.0 has no reward `fuzzy` (its rewards: exact)"
    );
}

#[test]
fn the_drmas_binary_survives_a_folder_of_bad_plugins() {
    let dir = plugin_dir(&[
        "garbage",
        "empty",
        "not-a-plugin",
        "api-v9",
        "layout",
        "misbehave",
        "good",
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["plugins", "list", "--plugin-dir"])
        .arg(dir.path())
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("good/shift"), "{stdout}");
    assert!(stdout.contains("misbehave/nan"), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("skipped: "))
            .count(),
        5,
        "{stdout}"
    );
    // Each is reported once: in the listing, not again as a warning.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("skipped"), "{stderr}");
}

#[test]
fn plugins_inspect_shows_one_plugin_or_component_and_refuses_unknown_names() {
    let dir = plugin_dir(&["good"]);
    let inspect = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_drmas"))
            .args(["plugins", "inspect", name, "--plugin-dir"])
            .arg(dir.path())
            .env_remove("DRMAS_PLUGIN_PATH")
            .output()
            .unwrap()
    };
    let out = inspect("good/shift");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "plugin good 1.0.0\n  source: {}\n  normalizer good/shift: score minus a configured offset\n\
             \x20   config:\n\
             \x20     KEY     TYPE   DEFAULT  DOC\n\
             \x20     offset  float  0.0      subtracted from every score\n",
            path_of(&dir, "good").display()
        )
    );
    // Every component: its config keys as a table (or a line saying it describes none),
    // and for the environment the tools it offers. No colour codes in a pipe.
    let out = inspect("good");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains('\x1b'), "{stdout}");
    let lines: Vec<&str> = stdout.lines().skip(6).collect();
    assert_eq!(
        lines,
        [
            "  reward good/exact: 1 if the final answer equals the gold answer",
            "    config: no keys described (the component checks its own table)",
            "  agent good/echo: asks the question, answers with its completion",
            "    config:",
            "      KEY       TYPE    DEFAULT   DOC",
            "      reviewer  string  \"\"        an agent this one names (none when empty)",
            "      tool      string  \"search\"  the tool it calls",
            "  environment good/upper: a `search` tool that upper-cases",
            "    config: no keys described (the component checks its own table)",
            "    tools:",
            "      TOOL    DESCRIPTION            INPUT",
            "      search  upper-cases its input  any text",
        ],
        "{stdout}"
    );
    // A built-in's described keys, a default cut to fit, and an environment without tools.
    let out = inspect("math");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "      verifier        string                              \"verifier\"                                \
             the agent the solution is handed to; \"\" to finish without a verifier\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("  environment math/env: math tasks as given; no tools; reports the verifier's approve rates\n    config:\n      KEY       TYPE    DEFAULT     DOC\n      solver    string  \"solver\"    the agent whose solutions are judged\n      verifier  string  \"verifier\"  the agent whose verdicts are read\n    tools: none\n"),
        "{stdout}"
    );
    // A component that takes no keys says so.
    assert!(
        stdout.contains("  reward math/gsm8k: 1 if the predicted number equals the gold number after ####, else 0\n    config: none (the component takes no keys)\n"),
        "{stdout}"
    );
    let out = inspect("nope");
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "error: no plugin `nope` is loaded (loaded: math, norms, remote, search, good)"
    );
    let out = inspect("good/nope");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "error: plugin `good` has no component `nope`"
    );
}
