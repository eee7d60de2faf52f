//! The sample dump of `drmas eval --dump-samples`: one JSON line per sample with what
//! the episode made of it (prompt text, completion, parsed action, tool call, rewards),
//! and one line per failed episode.

use super::runner::Evaluation;
use crate::rollout::{EpisodeOutcome, Sample};
use serde_json::{Map, Value, json};

/// The dump's lines: every sample of every completed episode, then every failed
/// episode. `reward_names` are the rewards' component names in the experiment's order;
/// token ids and log-probs only `with_ids`.
pub fn dump_lines(eval: &Evaluation, reward_names: &[String], with_ids: bool) -> Vec<Value> {
    let mut lines: Vec<Value> = eval
        .outcomes
        .iter()
        .flat_map(|o| {
            o.samples
                .iter()
                .map(move |s| sample_line(o, s, reward_names, with_ids))
        })
        .collect();
    lines.extend(eval.failed.iter().map(|f| {
        json!({
            "uid": f.uid,
            "traj": f.traj,
            "task": f.task,
            "failed": { "component": f.blame.to_string(), "error": f.error },
        })
    }));
    lines
}

fn sample_line(o: &EpisodeOutcome, s: &Sample, reward_names: &[String], with_ids: bool) -> Value {
    let turn = o.transcript.iter().find(|t| t.turn == s.turn);
    let tool = turn.and_then(|t| match &t.action {
        drmas_plugin_api::Action::Tool { name, input } => Some(json!({
            "name": name,
            "input": input,
            "output": t.tool_output,
        })),
        _ => None,
    });
    let mut rewards = Map::new();
    for (i, (name, value)) in reward_names.iter().zip(&o.rewards).enumerate() {
        // Two rewards of one component (with different configs) keep both values.
        let key = if rewards.contains_key(name) {
            format!("{name}#{i}")
        } else {
            name.clone()
        };
        rewards.insert(key, json!(value));
    }
    let mut line = json!({
        "uid": s.uid,
        "traj": s.traj,
        "episode": o.episode,
        "task": o.task.id,
        "agent": s.agent,
        "turn": s.turn,
        "model": s.model,
        "prompt": o.prompts.get(s.turn as usize),
        "completion": turn.map(|t| t.completion.as_str()),
        "action": turn.map(|t| &t.action),
        "valid": s.valid,
        "note": turn.map(|t| t.note.as_str()).unwrap_or_default(),
        "tool": tool,
        "final_answer": o.final_answer,
        "rewards": rewards,
        "team_reward": o.team_reward,
        "score": s.score,
        "finish": s.finish,
    });
    if with_ids {
        line["prompt_ids"] = json!(s.prompt_ids);
        line["response_ids"] = json!(s.response_ids);
        line["logprobs"] = json!(s.logprobs);
    }
    line
}
