//! What each math component describes of its config table, as `drmas plugins inspect`
//! shows it. The keys are derived from the config structs (`config_table!`), so these
//! tests pin what a user reads, not that two lists agree.

use drmas_math::{SolverConfig, VerifierConfig, solver, verifier};
use drmas_plugin_api::{
    ComponentInfo, ComponentKind, ConfigKey, check_manifest_config_keys, kit::ConfigTable,
    kit::toml_text,
};

fn component(kind: ComponentKind, name: &str) -> ComponentInfo {
    drmas_math::plugin()
        .manifest()
        .components
        .into_iter()
        .find(|c| c.kind == kind && c.name == name)
        .unwrap_or_else(|| panic!("math has no {kind} {name}"))
}

#[test]
fn the_solver_describes_its_table_with_the_defaults_it_uses() {
    let keys = component(ComponentKind::Agent, "solver").config.unwrap();
    assert_eq!(keys, SolverConfig::config_keys());
    let quoted = |s: &str| toml_text(s).unwrap();
    assert_eq!(
        keys,
        [
            ConfigKey::optional(
                "system_prompt",
                "string",
                "\"Solve the math problem step by step. Put your final answer in \\\\boxed{}.\"",
                "the system message; \"\" for none",
            ),
            ConfigKey::optional(
                "user_template",
                "string",
                "\"{question}\"",
                "the user turn; {question} is the task's question (a refiner's may also show {draft} and {critique})",
            ),
            ConfigKey::optional(
                "retry_template",
                "string",
                &quoted(solver::DEFAULT_RETRY_TEMPLATE),
                "the user turn after a reject: {question}, and optionally {previous} (the rejected solution); \"{question}\" alone makes the retry a plain resample",
            ),
            ConfigKey::optional(
                "examples",
                "array of tables {question, answer}",
                "[]",
                "few-shot turns after the system message",
            ),
            ConfigKey::optional(
                "verifier",
                "string",
                "\"verifier\"",
                "the agent the solution is handed to; \"\" to finish without a verifier",
            ),
            ConfigKey::optional(
                "max_attempts",
                "integer",
                "2",
                "attempts per episode: the last one finishes with its answer instead of going to the verifier (2: solver → verifier → solver, the paper's team); 0 for no limit (the workflow's max_turns and max_loops end the episode)",
            ),
            ConfigKey::optional(
                "draft",
                "string",
                "\"\"",
                "as a refiner: the agent whose latest completion {draft} shows (\"\" for none)",
            ),
            ConfigKey::optional(
                "critic",
                "string",
                "\"\"",
                "as a refiner: the agent whose latest completion {critique} shows (\"\" for none)",
            ),
        ]
    );
    // One line, with the newlines escaped, so the inspect table stays a table.
    assert!(
        keys[2]
            .default
            .as_deref()
            .unwrap()
            .starts_with("\"{question}\\n\\nYour previous solution")
    );
}

#[test]
fn the_verifier_describes_its_table_with_the_defaults_it_uses() {
    let keys = component(ComponentKind::Agent, "verifier").config.unwrap();
    assert_eq!(keys, VerifierConfig::config_keys());
    let described: Vec<(&str, &str, &str)> = keys
        .iter()
        .map(|k| {
            (
                k.name.as_str(),
                k.ty.as_str(),
                k.default.as_deref().unwrap(),
            )
        })
        .collect();
    let system = toml_text(verifier::DEFAULT_SYSTEM_PROMPT).unwrap();
    let user = toml_text(verifier::DEFAULT_USER_TEMPLATE).unwrap();
    assert_eq!(
        described,
        [
            ("system_prompt", "string", system.as_str()),
            ("user_template", "string", user.as_str()),
            ("solver", "string", "\"solver\""),
            (
                "examples",
                "array of tables {question, solution, reply}",
                "[]"
            ),
        ]
    );
}

#[test]
fn components_without_options_say_so_and_refuse_any_key() {
    assert_eq!(
        component(ComponentKind::Reward, "gsm8k").config,
        Some(vec![]),
        "math/gsm8k"
    );
    let err = drmas_math::Gsm8kReward::from_config("extra = 1").expect_err("any key is refused");
    assert_eq!(
        err.to_string(),
        "unknown field `extra`, there are no fields (at `extra`)"
    );
}

#[test]
fn the_environment_and_the_verdict_reward_name_the_roles_they_read() {
    let roles = vec![
        ConfigKey::optional(
            "solver",
            "string",
            "\"solver\"",
            "the agent whose solutions are judged",
        ),
        ConfigKey::optional(
            "verifier",
            "string",
            "\"verifier\"",
            "the agent whose verdicts are read",
        ),
    ];
    assert_eq!(
        component(ComponentKind::Environment, "env").config,
        Some(roles.clone())
    );
    assert_eq!(
        component(ComponentKind::Reward, "verdict").config,
        Some(roles)
    );
    assert_eq!(
        component(ComponentKind::Reward, "boxed").config,
        Some(vec![ConfigKey::optional(
            "fallback_to_earlier",
            "boolean",
            "false",
            "when the final answer is empty (the last attempt boxed nothing), score the last boxed answer of an earlier turn instead (off: the latest output is scored, as in the paper)",
        )])
    );
    let err = drmas_math::MathEnv::from_config("judge = \"v\"").expect_err("unknown key");
    assert_eq!(
        err.to_string(),
        "unknown field `judge`, expected `solver` or `verifier` (at `judge`)"
    );
}

#[test]
fn every_described_default_has_its_declared_type() {
    check_manifest_config_keys(&drmas_math::plugin().manifest()).unwrap();
}
