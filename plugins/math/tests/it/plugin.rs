//! The plugin as the host sees it: manifest, environment, and config errors.

use crate::common;

use common::{task, try_agent, try_environment, try_reward};
use drmas_plugin_api::{ComponentKind, PluginErrorKind, ToolCall, ToolContext};

#[test]
fn manifest_lists_every_component() {
    let manifest = drmas_math::plugin().manifest();
    assert_eq!(manifest.plugin.as_str(), "math");
    assert_eq!(manifest.version.as_str(), env!("CARGO_PKG_VERSION"));
    let components: Vec<(ComponentKind, &str)> = manifest
        .components
        .iter()
        .map(|c| (c.kind, c.name.as_str()))
        .collect();
    assert_eq!(
        components,
        vec![
            (ComponentKind::Agent, "solver"),
            (ComponentKind::Agent, "verifier"),
            (ComponentKind::Agent, "critic"),
            (ComponentKind::Environment, "env"),
            (ComponentKind::Reward, "boxed"),
            (ComponentKind::Reward, "gsm8k"),
            (ComponentKind::Reward, "verdict"),
        ]
    );
}

#[test]
fn environment_keeps_the_task_and_has_no_tools() {
    let env = try_environment("").unwrap();
    let t = task("What is 5 + 3?", "8");
    assert_eq!(env.prepare(&t).unwrap(), t);
    assert!(!env.is_slow());
    let err = env
        .call_tool(
            &ToolContext {
                task: t.clone(),
                ..ToolContext::default()
            },
            &ToolCall {
                name: "search".into(),
                input: "5 + 3".into(),
            },
        )
        .unwrap_err();
    assert_eq!(err.kind, PluginErrorKind::NotFound);
    assert_eq!(err.message(), "math/env has no tools (asked for `search`)");
}

fn config_error(result: Result<impl Sized, drmas_plugin_api::PluginError>) -> String {
    match result {
        Ok(_) => panic!("config accepted"),
        Err(e) => {
            assert_eq!(e.kind, PluginErrorKind::Config, "{e}");
            e.message().to_string()
        }
    }
}

#[test]
fn unknown_keys_are_refused_by_name() {
    let message = config_error(try_agent("solver", "temperature = 0.7"));
    assert!(
        message.starts_with("unknown field `temperature`"),
        "{message}"
    );
    assert!(message.contains("`system_prompt`"), "{message}");
    let message = config_error(try_agent("verifier", "verifier = \"v\""));
    assert!(message.starts_with("unknown field `verifier`"), "{message}");
    let message = config_error(try_agent(
        "solver",
        "examples = [{ question = \"1+1\", answer = \"2\", reasoning = \"\" }]",
    ));
    assert!(
        message.starts_with("unknown field `reasoning`"),
        "{message}"
    );
    for reward in ["boxed", "gsm8k"] {
        let message = config_error(try_reward(reward, "tolerance = 0.1"));
        assert!(
            message.starts_with("unknown field `tolerance`"),
            "{message}"
        );
    }
    let message = config_error(try_environment("tools = []"));
    assert!(message.starts_with("unknown field `tools`"), "{message}");
}

#[test]
fn wrongly_typed_or_incomplete_configs_are_refused() {
    let message = config_error(try_agent("solver", "examples = 3"));
    assert!(message.contains("invalid type"), "{message}");
    let message = config_error(try_agent("solver", "examples = [{ question = \"1+1\" }]"));
    assert_eq!(
        message,
        "missing required key `answer` (string: the reply the model should have given: a \
         solution ending in \\boxed{}) (at `{ question = \"1+1\" }`)"
    );
}

#[test]
fn templates_must_name_their_placeholders() {
    assert_eq!(
        config_error(try_agent("solver", "user_template = \"Solve it.\"")),
        "`user_template` must contain the placeholder {question} (got \"Solve it.\")"
    );
    assert_eq!(
        config_error(try_agent(
            "solver",
            "retry_template = \"Again: {previous}\""
        )),
        "`retry_template` must contain the placeholder {question} (got \"Again: {previous}\")"
    );
    // {previous} is optional: a retry may be a plain resample of the question.
    assert!(try_agent("solver", "retry_template = \"{question}\"").is_ok());
    assert_eq!(
        config_error(try_agent("verifier", "user_template = \"{question}\"")),
        "`user_template` must contain the placeholder {solution} (got \"{question}\")"
    );
}

#[test]
fn templates_refuse_placeholders_the_agent_does_not_fill() {
    assert_eq!(
        config_error(try_agent("solver", "user_template = \"{questoin}\"")),
        "`user_template` has the unknown placeholder {questoin}; it may use {question}, {draft}, {critique}"
    );
    assert_eq!(
        config_error(try_agent(
            "solver",
            "retry_template = \"{question} {previous} {solution}\""
        )),
        "`retry_template` has the unknown placeholder {solution}; it may use {question}, {previous}"
    );
    assert_eq!(
        config_error(try_agent(
            "verifier",
            "user_template = \"{question} {solution} {previous}\""
        )),
        "`user_template` has the unknown placeholder {previous}; it may use {question}, {solution}"
    );
    // LaTeX braces are text; a word in braces is written doubled.
    assert!(
        try_agent(
            "solver",
            "user_template = '{question} in \\text{{cm}}, \\boxed{}'"
        )
        .is_ok()
    );
}
