//! The math plugin (docs/math.md): a solver and a verifier agent, a tool-less
//! environment, and two rewards built on the answer [`grader`].
//!
//! | component       | kind        | what it does                                                      |
//! |-----------------|-------------|-------------------------------------------------------------------|
//! | `math/solver`   | agent       | solution ending in `\boxed{}`; hands off to the verifier          |
//! | `math/verifier` | agent       | `<verify>approve</verify>` finishes, `reject` hands back          |
//! | `math/env`      | environment | tasks as given, no tools                                          |
//! | `math/boxed`    | reward      | final answer (or last `\boxed{}`) equivalent to the gold: 1, else 0 |
//! | `math/gsm8k`    | reward      | predicted number equals the number after `####`: 1, else 0        |

pub mod env;
pub mod grader;
pub mod reward;
pub mod solver;
mod template;
pub mod verifier;

pub use env::MathEnv;
pub use reward::{BoxedReward, Gsm8kReward};
pub use solver::{Example, Solver, SolverConfig};
pub use verifier::{Verdict, Verifier, VerifierConfig};

use drmas_plugin_api::{ConfigKey, PluginSpec};
use serde::Deserialize;

/// The config of a component that takes no options: any key is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoOptions {}

/// A string as TOML writes it: the default of a described config key.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The keys of [`SolverConfig`] (a test keeps them equal to the fields it accepts).
fn solver_keys() -> [ConfigKey; 5] {
    let d = SolverConfig::default();
    [
        ConfigKey::optional(
            "system_prompt",
            "string",
            &toml_string(&d.system_prompt),
            "the system message; \"\" for none",
        ),
        ConfigKey::optional(
            "user_template",
            "string",
            &toml_string(&d.user_template),
            "the user turn; {question} is the task's question",
        ),
        ConfigKey::optional(
            "retry_template",
            "string",
            &toml_string(&d.retry_template),
            "the user turn after a reject: {question} and {previous} (the rejected solution)",
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
            &toml_string(&d.verifier),
            "the agent the solution is handed to; \"\" to finish without a verifier",
        ),
    ]
}

/// The keys of [`VerifierConfig`] (a test keeps them equal to the fields it accepts).
fn verifier_keys() -> [ConfigKey; 4] {
    let d = VerifierConfig::default();
    [
        ConfigKey::optional(
            "system_prompt",
            "string",
            &toml_string(&d.system_prompt),
            "the system message; \"\" for none",
        ),
        ConfigKey::optional(
            "user_template",
            "string",
            &toml_string(&d.user_template),
            "the user turn: {question} and {solution} (the solver's latest completion)",
        ),
        ConfigKey::optional(
            "solver",
            "string",
            &toml_string(&d.solver),
            "the agent whose solution is checked and who gets it back on reject",
        ),
        ConfigKey::optional(
            "examples",
            "array of tables {question, solution, reply}",
            "[]",
            "worked verdicts shown before the real one",
        ),
    ]
}

/// The `math` plugin. The environment and the rewards take no options: they say so
/// (`config_keys([])`), and their parsers refuse any key too.
pub fn plugin() -> PluginSpec {
    PluginSpec::new("math", env!("CARGO_PKG_VERSION"))
        .agent(
            "solver",
            "solves step by step, answer in \\boxed{}; retries after the verifier rejects",
            Solver::from_config,
        )
        .config_keys(solver_keys())
        .agent(
            "verifier",
            "checks the latest solution: <verify>approve</verify> finishes, reject hands back",
            Verifier::from_config,
        )
        .config_keys(verifier_keys())
        .environment("env", "math tasks as given; no tools", MathEnv::from_config)
        .config_keys([])
        .reward(
            "boxed",
            "1 if the final (or last \\boxed{}) answer is equivalent to the gold answer, else 0",
            BoxedReward::from_config,
        )
        .config_keys([])
        .reward(
            "gsm8k",
            "1 if the predicted number equals the gold number after ####, else 0",
            Gsm8kReward::from_config,
        )
        .config_keys([])
}

// Linked into the host, it registers as a built-in; built alone, it is a `.so`.
#[cfg(feature = "builtin")]
drmas_plugin_api::register_builtin!(plugin);
#[cfg(not(feature = "builtin"))]
drmas_plugin_api::export_plugin!(plugin);
