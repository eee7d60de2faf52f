//! What a set of episodes holds in host memory whatever the models generate: each
//! episode's spec and outcome carry a copy of its task, so `k` = 10^8 samples of 15
//! tasks is refused before 1.5 · 10^9 specs are built.

use super::{orchestra::EpisodeOutcome, orchestra::EpisodeSpec, sample::Sample};
use drmas_plugin_api::Task;

/// Bytes of one task: the struct and its strings.
fn task_bytes(t: &Task) -> u64 {
    (std::mem::size_of::<Task>()
        + t.id.len()
        + t.source.len()
        + t.question.len()
        + t.answer.len()
        // The map's own nodes are not counted; its JSON text is a fair floor.
        + serde_json::to_string(&t.meta).map_or(0, |m| m.len())) as u64
}

/// What every episode holds until it is reported, whatever its task: its spec, its
/// outcome and one sample's record (the task copies and token ids come on top).
pub const EPISODE_FLOOR_BYTES: u64 = (std::mem::size_of::<EpisodeSpec>()
    + std::mem::size_of::<EpisodeOutcome>()
    + std::mem::size_of::<Sample>()) as u64;

/// A floor for the bytes `per_task` episodes of each of `tasks` hold until they are
/// reported: the spec and the outcome (each with a copy of the task and the uid) and
/// one sample's record. Prompts, completions and transcripts come on top.
pub fn episodes_floor(tasks: &[Task], per_task: u64) -> u64 {
    let fixed = EPISODE_FLOOR_BYTES;
    tasks
        .iter()
        .map(|t| {
            let uid = (t.source.len() + t.id.len() + 1) as u64;
            fixed + 2 * (task_bytes(t) + uid)
        })
        .fold(0u64, |sum, one| {
            sum.saturating_add(one.saturating_mul(per_task))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_grows_with_k_and_saturates() {
        let task = Task {
            id: "7".into(),
            source: "gsm8k".into(),
            question: "What is 2 + 2?".into(),
            answer: "4".into(),
            meta: Default::default(),
        };
        let one = episodes_floor(std::slice::from_ref(&task), 1);
        let uid = 5 + 1 + 1;
        let task_size = std::mem::size_of::<Task>() as u64 + 1 + 5 + 14 + 1 + 2;
        let fixed = (std::mem::size_of::<EpisodeSpec>()
            + std::mem::size_of::<EpisodeOutcome>()
            + std::mem::size_of::<Sample>()) as u64;
        assert_eq!(one, fixed + 2 * (task_size + uid));
        assert_eq!(episodes_floor(&[task.clone(), task.clone()], 3), 6 * one);
        assert_eq!(episodes_floor(&[task], u64::MAX), u64::MAX);
    }
}
