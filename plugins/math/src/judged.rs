//! What the verifier said about which solution: the verdicts of an episode, each with
//! the solver attempt it judged and whether that attempt was right. The environment's
//! approve rates and the `math/verdict` reward both read episodes through this.

use crate::grader::{is_equiv, last_boxed};
use crate::reward::gold_answer;
use crate::verifier::{Verdict, verdict};
use drmas_plugin_api::{EpisodeRecord, config_table};

config_table! {
    /// Which agents of the experiment are the solver and the verifier (by their
    /// `[[agents]] name`), for components that read an episode's roles.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Roles {
        /// the agent whose solutions are judged
        pub solver: String = "solver".to_string(),
        /// the agent whose verdicts are read
        pub verifier: String = "verifier".to_string(),
    }
}

/// One verifier turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// The verifier's turn (its index in the transcript).
    pub turn: usize,
    pub verdict: Verdict,
    /// Whether the latest solver attempt before it has the gold answer; `None` when no
    /// solver turn came before (nothing was judged).
    pub judged_correct: Option<bool>,
}

impl Judgement {
    /// The verdict says the solution is right, in so many words.
    pub fn approves(&self) -> bool {
        self.verdict == Verdict::Approve
    }
    /// The verdict is neither `approve` nor `reject`.
    pub fn unreadable(&self) -> bool {
        !matches!(self.verdict, Verdict::Approve | Verdict::Reject)
    }
    /// A readable verdict that agrees with the judged solution's correctness.
    pub fn agrees(&self) -> bool {
        match (&self.verdict, self.judged_correct) {
            (Verdict::Approve, Some(c)) => c,
            (Verdict::Reject, Some(c)) => !c,
            _ => false,
        }
    }
}

/// Whether a solver completion's last `\boxed{}` holds the task's gold answer.
pub fn solution_correct(completion: &str, gold: &str) -> bool {
    last_boxed(completion).is_some_and(|a| !a.is_empty() && is_equiv(&a, gold))
}

/// Every verifier turn of `episode`, in order, with what it judged.
pub fn judgements(episode: &EpisodeRecord, roles: &Roles) -> Vec<Judgement> {
    let gold = gold_answer(&episode.task.answer);
    let mut latest: Option<&str> = None;
    let mut out = Vec::new();
    for (i, t) in episode.transcript.iter().enumerate() {
        if t.agent.as_str() == roles.solver {
            latest = Some(t.completion.as_str());
        } else if t.agent.as_str() == roles.verifier {
            out.push(Judgement {
                turn: i,
                verdict: verdict(&t.completion),
                judged_correct: latest.map(|s| solution_correct(s, &gold)),
            });
        }
    }
    out
}

/// The solver's completions of `episode`, in order.
pub fn attempts<'e>(episode: &'e EpisodeRecord, roles: &Roles) -> Vec<&'e str> {
    episode
        .transcript
        .iter()
        .filter(|t| t.agent.as_str() == roles.solver)
        .map(|t| t.completion.as_str())
        .collect()
}
