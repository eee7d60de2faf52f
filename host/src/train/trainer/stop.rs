//! What a run that stops keeps, said with the error that stopped it.

use super::Trainer;
use crate::train::{RunError, checkpoint};
use std::path::PathBuf;

/// "step 3" or "steps 1–3".
pub(super) fn steps_upto(n: u32) -> String {
    match n {
        1 => "step 1".into(),
        n => format!("steps 1–{n}"),
    }
}

/// "is" for one step, "are" for more.
pub(super) fn is_are(n: u32) -> &'static str {
    match n {
        1 => "is",
        _ => "are",
    }
}

impl Trainer {
    /// What a run that stops on `error` keeps, said with the error. While the step in
    /// flight has changed nothing but the data cursor (a rollout or advantages error:
    /// the failure limit, every episode failed, a plugin error), the cursor goes back
    /// and the steps done are checkpointed, as Ctrl-C does. Once a model may have taken
    /// its update, the state is not a step boundary: the newest checkpoint is named, and
    /// a resume redoes the steps after it (it drops their metrics lines).
    pub(super) fn stopped_by(&mut self, error: RunError) -> RunError {
        if matches!(error, RunError::TooManySkips { .. }) {
            return error; // it checkpointed and names the checkpoint itself
        }
        let done = self.state.step;
        let latest = checkpoint::latest(&self.parts.run_dir).ok().flatten();
        let newest = |latest: &Option<(u32, PathBuf)>| match latest {
            Some((k, dir)) if *k < done => format!(
                "the newest checkpoint is {} (step {k}); --resume continues from it and redoes steps {}–{done}",
                dir.display(),
                k + 1
            ),
            Some((_, dir)) => format!(
                "{} {} kept in {} (continue with --resume)",
                steps_upto(done),
                is_are(done),
                dir.display()
            ),
            None => "no checkpoint was written: the run starts again".into(),
        };
        let kept = match self.untouched.take() {
            Some(_) if done == 0 => "no step was completed, so nothing is kept".into(),
            Some(cursor) => {
                self.state.cursor = cursor;
                match &latest {
                    Some((k, _)) if *k == done => newest(&latest),
                    _ => match self.save() {
                        Ok(dir) => format!(
                            "{} {} kept in {} (fix the cause, then continue with --resume)",
                            steps_upto(done),
                            is_are(done),
                            dir.display()
                        ),
                        Err(e) => format!(
                            "the checkpoint of step {done} could not be written ({e}); {}",
                            newest(&latest)
                        ),
                    },
                }
            }
            None => newest(&latest),
        };
        RunError::Stopped {
            error: Box::new(error),
            kept,
        }
    }
}
