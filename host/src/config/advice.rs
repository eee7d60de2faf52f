//! Settings that are valid but almost surely not what the user meant: each is printed
//! as a warning at its key by every command that reads the experiment, and nothing is
//! refused.

use super::{error::ConfigError, experiment::Experiment, source::KeyPath};

/// The warnings of `exp`, each at its key.
pub fn warnings(exp: &Experiment) -> Vec<ConfigError> {
    let f = &exp.file;
    let micro = f.trainer.micro_batch_tokens.map_or(
        crate::pool::sizing::CPU.micro_batch_tokens as u64,
        u64::from,
    );
    let mut out = Vec::new();
    // A micro-batch holds whole rows (prompt + response): when two full-length
    // responses do not fit, nearly every micro-batch is one row, which trains slowly.
    if let Some(a) = f
        .agents
        .iter()
        .filter(|a| micro < 2 * u64::from(a.sampling.max_new_tokens.get()))
        .max_by_key(|a| a.sampling.max_new_tokens)
    {
        out.push(exp.error_at(
            &KeyPath::root().key("trainer").key("micro_batch_tokens"),
            format!(
                "{micro} tokens cannot hold two full-length responses of agent `{}` (max_new_tokens = {}, before its prompt): most micro-batches will be a single row, which trains slowly; a budget of several rows (e.g. {}) is usual",
                a.name,
                a.sampling.max_new_tokens,
                (8 * (u64::from(a.sampling.max_new_tokens.get()) + 512)).next_power_of_two()
            ),
        ));
    }
    // A table value replaces the whole table: say which of the file's keys it dropped.
    for o in &exp.overrides {
        if let Some(note) = o.dropped_note() {
            out.push(ConfigError {
                file: exp.path.clone(),
                line: 0,
                col: 0,
                key: o.path.clone(),
                message: note,
            });
        }
    }
    out
}
