//! What one training step holds in host memory whatever the models generate, checked
//! before the first step like the models' sizes: every episode of a step lives until
//! the step's update (its spec, its outcome, its samples), so `prompts_per_step` ×
//! `group_size` (and the in-training evaluation's tasks × `eval_k`) size an
//! allocation. `prompts_per_step = 4294967295` is refused here, with the key and the
//! numbers, instead of aborting in step 1.

use crate::config::{ConfigError, Experiment, KeyPath};
use crate::model::memory::{self, gib};
use crate::rollout::EPISODE_FLOOR_BYTES;

/// The counts that size a step, each refused at its key when its episodes cannot fit
/// in `available` bytes of host memory (`source` says where the number comes from).
pub fn step_memory_problems(exp: &Experiment, available: u64, source: &str) -> Vec<ConfigError> {
    let t = &exp.file.trainer;
    let trainer = KeyPath::root().key("trainer");
    let mut problems = Vec::new();
    let episodes = u64::from(t.prompts_per_step) * u64::from(t.group_size);
    let need = episodes.saturating_mul(EPISODE_FLOOR_BYTES);
    if need > available {
        // Blame the larger factor: lowering it helps most.
        let key = if t.prompts_per_step >= t.group_size {
            "prompts_per_step"
        } else {
            "group_size"
        };
        problems.push(exp.error_at(
            &trainer.key(key),
            format!(
                "prompts_per_step × group_size = {} × {} = {episodes} episodes a step hold at least {} in host memory before anything is generated; {source} is {}: lower {key}",
                t.prompts_per_step,
                t.group_size,
                gib(need),
                gib(available)
            ),
        ));
    }
    if t.eval_every > 0 {
        // Each validation set has at least one task.
        let sets = exp.file.data.val.len().max(1) as u64;
        let episodes = sets.saturating_mul(u64::from(t.eval_k.get()));
        let need = episodes.saturating_mul(EPISODE_FLOOR_BYTES);
        if need > available {
            problems.push(exp.error_at(
                &trainer.key("eval_k"),
                format!(
                    "{} samples of each task of {sets} validation set(s) hold at least {} in host memory; {source} is {}: lower eval_k",
                    t.eval_k,
                    gib(need),
                    gib(available)
                ),
            ));
        }
    }
    problems
}

/// [`step_memory_problems`] against what this machine has available now (nothing is
/// refused where that cannot be read).
pub fn check_step_memory(exp: &Experiment) -> Vec<ConfigError> {
    match memory::available_memory(tch::Device::Cpu) {
        Some(a) => step_memory_problems(exp, a.bytes, &a.source),
        None => Vec::new(),
    }
}
