//! `drmas score REWARD FILE.jsonl`: scores completions with any reward component, with
//! no model, so a reward can be audited line by line. Each input line
//! `{"id", "completion", "answer"}` (optional `question`, `source`, `meta`) becomes a
//! finished one-agent episode whose one turn is the completion, finishing with it as
//! the answer; each output line is `{"id", "score"}`, in input order.

use super::PluginDirs;
use anyhow::Context;
use drmas::plugin::ResolvePolicy;
use drmas_plugin_api::{Action, EpisodeRecord, Task, TurnRecord};
use std::{io::BufRead, path::PathBuf, process::ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// The reward component, `plugin/component` (`math/boxed`).
    reward: String,
    /// JSONL of `{"id", "completion", "answer"}` (optional `question`, `source`, `meta`).
    file: PathBuf,
    /// The reward's config table, as TOML text (`key = "value"`).
    #[arg(long, default_value = "")]
    config: String,
    /// Write the scores here (whole or not at all) instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    plugin_dirs: PluginDirs,
}

/// One input line.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: serde_json::Value,
    completion: String,
    answer: String,
    #[serde(default)]
    question: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    meta: Option<serde_json::Value>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(out) = &args.out {
        use drmas::output::Input;
        drmas::output::check_file_target(out)?;
        drmas::output::check_not_an_input(out, &[Input::new("the completions", &args.file)])?;
    }
    let registry = args.plugin_dirs.discover(&Default::default())?;
    super::report_skipped(&registry);
    let reward = registry
        .create_reward(&args.reward, &args.config, &ResolvePolicy::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let file = std::fs::File::open(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let mut out = Vec::new();
    let mut scored = 0usize;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let at = format!("{}:{}", args.file.display(), i + 1);
        let line = line.with_context(|| at.clone())?;
        if line.trim().is_empty() {
            continue;
        }
        let row: Row = serde_json::from_str(&line).with_context(|| at.clone())?;
        let score = reward
            .score(&episode(&row))
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({ "id": row.id, "score": score }),
        )?;
        out.push(b'\n');
        scored += 1;
    }
    match &args.out {
        Some(path) => {
            drmas::output::write_atomic(path, &out)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            errln!(
                "{scored} line(s) scored with {}: {}",
                args.reward,
                path.display()
            );
        }
        None => drmas::output::console::write_bytes(drmas::output::console::Stream::Stdout, &out),
    }
    Ok(ExitCode::SUCCESS)
}

/// The finished episode a reward sees for one line: one agent, one turn.
fn episode(row: &Row) -> EpisodeRecord {
    let id = match &row.id {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    EpisodeRecord {
        task: Task {
            id,
            source: row.source.clone(),
            question: row.question.clone(),
            answer: row.answer.clone(),
            meta: match &row.meta {
                Some(serde_json::Value::Object(m)) => m.clone(),
                _ => Default::default(),
            },
        },
        final_answer: Some(row.completion.clone()),
        transcript: vec![TurnRecord {
            agent: "agent".into(),
            completion: row.completion.clone(),
            action: Action::finish(row.completion.as_str()),
            valid: true,
            ..TurnRecord::default()
        }],
        ..EpisodeRecord::default()
    }
}
