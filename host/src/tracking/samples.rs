//! Sample tables: a few samples per agent of a step, as researchers read them — the
//! rendered prompt, the completion, the score, the advantage, whether the agent's output
//! was valid and why generation stopped — in `RUN/samples/step-NNNNNN.jsonl` (written
//! whole), and as markdown for TensorBoard's text plugin.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One sample of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRow {
    pub step: u64,
    pub agent: String,
    pub model: String,
    /// The task group and the trajectory in it.
    pub uid: String,
    pub traj: u32,
    pub turn: u32,
    pub prompt: String,
    pub completion: String,
    pub score: f64,
    pub advantage: f64,
    pub valid: bool,
    pub finish: String,
}

/// Writes `rows` as `RUN/samples/step-NNNNNN.jsonl` and returns the file's path.
pub fn write_samples(run: &Path, step: u64, rows: &[SampleRow]) -> std::io::Result<PathBuf> {
    let dir = run.join("samples");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("step-{step:06}.jsonl"));
    let mut text = String::new();
    for row in rows {
        text.push_str(&serde_json::to_string(row).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    crate::output::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// The sample tables in `run` (`RUN/samples/step-NNNNNN.jsonl`), by step.
pub fn tables(run: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(run.join("samples")) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_name()?.to_str()?;
            let step = name.strip_prefix("step-")?.strip_suffix(".jsonl")?;
            Some((step.parse().ok()?, path))
        })
        .collect();
    out.sort();
    out
}

/// Text for a markdown table cell: pipes escaped, line breaks as `<br>`.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', "<br>")
}

/// `rows` as a markdown table.
pub fn markdown<'r>(rows: impl Iterator<Item = &'r SampleRow>) -> String {
    let mut out = String::from(
        "| task | traj | turn | prompt | completion | score | advantage | valid | finish |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.4} | {:.4} | {} | {} |\n",
            cell(&r.uid),
            r.traj,
            r.turn,
            cell(&r.prompt),
            cell(&r.completion),
            r.score,
            r.advantage,
            r.valid,
            r.finish
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_escapes_pipes_and_breaks_and_its_file_is_one_row_per_line() {
        let row = SampleRow {
            step: 4,
            agent: "solver".into(),
            model: "lm".into(),
            uid: "1:0:arith/a-1".into(),
            traj: 2,
            turn: 0,
            prompt: "What is 2|3?\nThink.".into(),
            completion: "\\boxed{5}".into(),
            score: 1.0,
            advantage: -0.5,
            valid: true,
            finish: "stop_token".into(),
        };
        let table = markdown([&row].into_iter());
        assert!(table.ends_with(
            "| 1:0:arith/a-1 | 2 | 0 | What is 2\\|3?<br>Think. | \\boxed{5} | 1.0000 | -0.5000 | true | stop_token |\n"
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = write_samples(dir.path(), 4, &[row.clone(), row.clone()]).unwrap();
        assert_eq!(path, dir.path().join("samples/step-000004.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap();
        let back: Vec<SampleRow> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, [row.clone(), row]);
    }

    #[test]
    fn the_tables_of_a_run_are_listed_by_step() {
        let dir = tempfile::tempdir().unwrap();
        assert!(tables(dir.path()).is_empty());
        let twelve = write_samples(dir.path(), 12, &[]).unwrap();
        let four = write_samples(dir.path(), 4, &[]).unwrap();
        // Not a table: a stray file and a leftover of a killed write.
        std::fs::write(dir.path().join("samples/notes.txt"), "x").unwrap();
        std::fs::write(dir.path().join("samples/.step-000006.jsonl.tmp-123"), "x").unwrap();
        assert_eq!(tables(dir.path()), [(4, four), (12, twelve)]);
    }
}
