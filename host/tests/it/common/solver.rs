//! The one-model math experiment many CLI tests run: the tiny chat model as a lone
//! solver with the boxed reward, written to a folder with its data. Each test names
//! only what it changes; the layout is fixed, so a test may rely on the line of a
//! `[trainer]` key (the first extra trainer line is line 24).

use std::path::{Path, PathBuf};

pub struct SolverExperiment {
    /// Lines of `[experiment]` after its name (default: `output_dir = DIR/run`).
    pub top: Option<String>,
    /// Lines of `[[models]]` after its path (`lr = ...`; they move the lines below).
    pub model: String,
    pub max_new_tokens: u32,
    /// Lines of `[trainer]`.
    pub trainer: String,
    /// The training and validation tasks (JSONL).
    pub tasks: String,
}

impl Default for SolverExperiment {
    fn default() -> Self {
        Self {
            top: None,
            model: String::new(),
            max_new_tokens: 2,
            trainer: String::new(),
            tasks: "{\"id\": \"t1\", \"question\": \"What is 1 + 1?\", \"answer\": \"2\"}\n".into(),
        }
    }
}

impl SolverExperiment {
    /// Writes `DIR/tasks.jsonl` and `DIR/exp.toml`; returns the experiment's path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let data = dir.join("tasks.jsonl");
        std::fs::write(&data, &self.tasks).unwrap();
        let top = self
            .top
            .clone()
            .unwrap_or_else(|| format!("output_dir = {:?}", dir.join("run").display().to_string()));
        let text = format!(
            r#"[experiment]
name = "solo"
{top}
[[models]]
id = "lm"
path = {model:?}{model_extra}
[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = {{ max_new_tokens = {max_new} }}
[agents.config]
verifier = ""
[workflow]
entry = "solver"
[[rewards]]
component = "math/boxed"
[normalizer]
component = "norms/grpo"
[data]
train = {{ path = {data:?} }}
val = [{{ path = {data:?} }}]
[trainer]
{trainer}
[pool]
devices = ["cpu"]
"#,
            model = super::tiny_models().join("tiny-chat").display().to_string(),
            model_extra = if self.model.is_empty() {
                String::new()
            } else {
                format!("\n{}", self.model)
            },
            max_new = self.max_new_tokens,
            data = data.display().to_string(),
            trainer = self.trainer,
        );
        let config = dir.join("exp.toml");
        std::fs::write(&config, text).unwrap();
        config
    }
}
