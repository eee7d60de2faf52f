//! The math plugin (docs/math.md): a solver and a verifier agent, a tool-less
//! environment, and two rewards built on the answer [`grader`].
//!
//! | component       | kind        | what it does                                                      |
//! |-----------------|-------------|-------------------------------------------------------------------|
//! | `math/solver`   | agent       | solution ending in `\boxed{}`; hands off to the verifier          |
//! | `math/verifier` | agent       | `<verify>approve</verify>` finishes, `reject` hands back          |
//! | `math/critic`   | agent       | a critique of the latest solution in words; hands off to `next`  |
//! | `math/env`      | environment | tasks as given, no tools; the verifier's approve rates per episode |
//! | `math/boxed`    | reward      | final answer (or last `\boxed{}`) equivalent to the gold: 1, else 0 |
//! | `math/gsm8k`    | reward      | predicted number equals the number after `####`: 1, else 0        |
//! | `math/verdict`  | reward      | per verifier turn: 1 when the verdict matches the answer's correctness |

pub mod critic;
pub mod env;
pub mod grader;
pub mod judged;
pub mod reward;
pub mod solver;
pub mod verifier;
mod view;

pub use critic::{Critic, CriticConfig};
pub use env::MathEnv;
pub use judged::Roles;
pub use reward::{BoxedConfig, BoxedReward, Gsm8kReward, VerdictReward};
pub use solver::{Example, Solver, SolverConfig};
pub use verifier::{Verdict, Verifier, VerifierConfig, VerifierExample};

use drmas_plugin_api::{PluginSpec, kit::NoConfig};

/// The `math` plugin. Each component's described keys are those of the config table
/// it parses; the environment and the rewards take none (`NoConfig`).
pub fn plugin() -> PluginSpec {
    PluginSpec::new("math", env!("CARGO_PKG_VERSION"))
        .agent_with(
            "solver",
            "solves step by step, answer in \\boxed{}; retries after the verifier rejects",
            Solver::new,
        )
        .agent_with(
            "verifier",
            "checks the latest solution: <verify>approve</verify> finishes, reject hands back",
            Verifier::new,
        )
        .agent_with(
            "critic",
            "reviews the latest solution in words (no answer) and hands off to a refiner",
            Critic::new,
        )
        .environment_with(
            "env",
            "math tasks as given; no tools; reports the verifier's approve rates",
            |roles: Roles| Ok(MathEnv::new(roles)),
        )
        .reward_with(
            "boxed",
            "1 if the final (or last \\boxed{}) answer is equivalent to the gold answer, else 0",
            |c: BoxedConfig| Ok(BoxedReward::new(c)),
        )
        .reward_with(
            "gsm8k",
            "1 if the predicted number equals the gold number after ####, else 0",
            |NoConfig {}| Ok(Gsm8kReward),
        )
        .reward_with(
            "verdict",
            "per verifier turn: 1 if its verdict matches the judged answer's correctness, else 0",
            |roles: Roles| Ok(VerdictReward::new(roles)),
        )
}

// Linked into the host, it registers as a built-in; built alone, it is a `.so`.
#[cfg(feature = "builtin")]
drmas_plugin_api::register_builtin!(plugin);
#[cfg(not(feature = "builtin"))]
drmas_plugin_api::export_plugin!(plugin);
