//! The sweep file (docs/sweeps.md): a base experiment, named arms of overrides, seeds,
//! the evaluation of each run's final checkpoint, and the verdict rules stated before
//! the runs.

use crate::config::{ConfigError, ConfigErrors, KeyPath, Override, SourceMap, parse_toml};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::de::DeTable;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    pub sweep: SweepSection,
    pub arms: Vec<Arm>,
    #[serde(default)]
    pub eval: EvalSpec,
    #[serde(default)]
    pub stability: StabilitySpec,
    #[serde(default)]
    pub verdicts: Vec<VerdictRule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSection {
    pub name: String,
    /// The experiment every run starts from, as the file writes it: a relative path is
    /// relative to the sweep file's folder ([`Sweep::base`] is the resolved one).
    pub base: PathBuf,
    /// Where the runs and the report go; `runs/sweeps/<name>` when absent.
    #[serde(default)]
    pub output_dir: Option<PathBuf>,
    pub seeds: Vec<u64>,
    /// The arm the others are compared with, paired by seed.
    pub baseline: String,
    /// Runs at once (1: one after another).
    #[serde(default = "one")]
    pub jobs: u32,
    /// Overrides for every arm, before the arm's own: `"trainer.steps" = 30`.
    #[serde(default)]
    pub set: toml::Table,
    /// The standard deviation of a paired avg@k difference (one seed pair) expected
    /// from evaluation noise alone, stated before the runs; the report sets the
    /// measured one beside it.
    #[serde(default)]
    pub expected_noise: Option<f64>,
    /// The last N steps a run's final train reward and success rate are averaged over.
    #[serde(default = "five")]
    pub final_window: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    pub name: String,
    /// Overrides of this arm, after the sweep's: `"normalizer.component" = "norms/grpo"`.
    #[serde(default)]
    pub set: toml::Table,
}

/// How each run's final checkpoint is evaluated (`drmas eval`'s settings).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSpec {
    #[serde(default = "sixteen")]
    pub k: u32,
    #[serde(default = "temperature")]
    pub temperature: f64,
    #[serde(default = "top_p")]
    pub top_p: f64,
    #[serde(default = "one_f")]
    pub success_threshold: f64,
    /// The validation sets (`[data] val` of the experiment when absent), as the
    /// experiment file writes them: `[{ path = "…", limit = 16 }]`.
    #[serde(default)]
    pub val: Option<toml::Value>,
}

impl Default for EvalSpec {
    fn default() -> Self {
        Self {
            k: sixteen(),
            temperature: temperature(),
            top_p: top_p(),
            success_threshold: 1.0,
            val: None,
        }
    }
}

/// The arm-independent spike count: steps whose pre-clip gradient norm is above
/// `multiple` × the baseline arm's median over its first `early_steps` steps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StabilitySpec {
    #[serde(default = "three")]
    pub multiple: f64,
    #[serde(default = "five")]
    pub early_steps: u32,
}

impl Default for StabilitySpec {
    fn default() -> Self {
        Self {
            multiple: 3.0,
            early_steps: 5,
        }
    }
}

/// A rule stated before the runs: "`claim` holds if the paired difference `arm` −
/// baseline of `metric` has its 95 % interval `holds_if`".
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictRule {
    pub claim: String,
    pub arm: String,
    pub metric: Metric,
    /// For `avg_at_k` and `pass_at_k`: `overall` or a source's name.
    #[serde(default)]
    pub source: Option<String>,
    /// For the gradient metrics: a model id of the base experiment.
    #[serde(default)]
    pub model: Option<String>,
    pub holds_if: Rule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    AvgAtK,
    PassAtK,
    FinalReward,
    FinalSuccess,
    MeanLogGradNorm,
    MaxGradNorm,
    OverThreshold,
    Spikes,
}

impl Metric {
    /// As the sweep file writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::AvgAtK => "avg_at_k",
            Self::PassAtK => "pass_at_k",
            Self::FinalReward => "final_reward",
            Self::FinalSuccess => "final_success",
            Self::MeanLogGradNorm => "mean_log_grad_norm",
            Self::MaxGradNorm => "max_grad_norm",
            Self::OverThreshold => "over_threshold",
            Self::Spikes => "spikes",
        }
    }
    pub fn is_per_model(self) -> bool {
        matches!(
            self,
            Self::MeanLogGradNorm | Self::MaxGradNorm | Self::OverThreshold | Self::Spikes
        )
    }
    pub fn is_eval(self) -> bool {
        matches!(self, Self::AvgAtK | Self::PassAtK)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The interval lies above 0.
    Above,
    /// The interval lies below 0.
    Below,
    /// The interval does not hold 0.
    ExcludesZero,
}

fn one() -> u32 {
    1
}
fn one_f() -> f64 {
    1.0
}
fn five() -> u32 {
    5
}
fn three() -> f64 {
    3.0
}
fn sixteen() -> u32 {
    16
}
fn temperature() -> f64 {
    0.6
}
fn top_p() -> f64 {
    0.95
}

/// A parsed and checked sweep file.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub path: PathBuf,
    pub text: String,
    pub file: SweepFile,
    /// `[sweep] base` resolved: as written when absolute, else joined to the sweep
    /// file's folder (so a sweep runs the same from any working directory).
    pub base: PathBuf,
}

/// `base` of the sweep file at `sweep_path`: relative to that file's folder. A `..`
/// folds into the folder before it when that folder is a real one (not a link), so
/// `sweeps/` + `../configs/x.toml` reads as `configs/x.toml`.
pub fn resolve_base(sweep_path: &Path, base: &Path) -> PathBuf {
    if base.is_absolute() {
        return base.to_path_buf();
    }
    let joined = match sweep_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(base),
        _ => return base.to_path_buf(),
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        use std::path::Component;
        match part {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_)))
                    && std::fs::symlink_metadata(&out).is_ok_and(|m| m.is_dir()) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

impl Sweep {
    /// Where each key of the sweep file stands, for errors that name their line.
    pub(crate) fn source_map(&self) -> SourceMap<'_> {
        SourceMap::new(
            &self.text,
            DeTable::parse(&self.text).expect("parsed at load"),
        )
    }

    /// An error at `path` of the sweep file, with its line and column from `map`.
    pub(crate) fn error_at(&self, map: &SourceMap, path: KeyPath, message: String) -> ConfigError {
        let (line, col) = map.position(&path);
        ConfigError {
            file: self.path.clone(),
            line,
            col,
            key: path.to_string(),
            message,
        }
    }

    pub fn output_dir(&self) -> PathBuf {
        self.file
            .sweep
            .output_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs/sweeps").join(&self.file.sweep.name))
    }

    /// The overrides of `arm` (the sweep's, then the arm's), flattened to key paths.
    pub fn arm_overrides(&self, arm: &Arm) -> Result<Vec<Override>, String> {
        let mut out = Vec::new();
        let file = self.path.display();
        for (table, here) in [
            (&self.file.sweep.set, "sweep.set".to_string()),
            (&arm.set, format!("arm `{}`", arm.name)),
        ] {
            for (key, value) in flatten(table) {
                let origin = format!("{file}: {here}: {key} = {value}");
                out.push(Override::new(&key, value, origin)?);
            }
        }
        Ok(out)
    }
}

/// A table of overrides as `key.path → value`: a quoted dotted key is a path, and a
/// nested table is walked to its leaves (`set.trainer.steps = 3` and
/// `set = { "trainer.steps" = 3 }` say the same).
fn flatten(table: &toml::Table) -> Vec<(String, toml::Value)> {
    let mut out = Vec::new();
    for (key, value) in table {
        let key = if key.contains('.') && !key.starts_with('"') {
            key.clone()
        } else {
            KeyPath::root().key(key).to_string()
        };
        match value {
            toml::Value::Table(inner) if !inner.is_empty() => {
                for (sub, v) in flatten(inner) {
                    out.push((format!("{key}.{sub}"), v));
                }
            }
            v => out.push((key, v.clone())),
        }
    }
    out
}

/// Reads and checks a sweep file: every error with its position, all at once.
pub fn load_sweep(path: &Path) -> Result<Sweep, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_path_buf(),
        line: 0,
        col: 0,
        key: String::new(),
        message: format!("cannot read sweep file: {e}"),
    })?;
    let file: SweepFile = parse_toml(path, &text)?;
    let sweep = Sweep {
        path: path.to_path_buf(),
        base: resolve_base(path, &file.sweep.base),
        text,
        file,
    };
    let errors = validate(&sweep);
    if errors.is_empty() {
        Ok(sweep)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Why the base experiment cannot be read, naming the path it was looked for at (a
/// relative `base` is read from the sweep file's folder, not the working directory).
fn base_problem(sweep: &Sweep) -> Option<String> {
    let written = &sweep.file.sweep.base;
    let at = std::path::absolute(&sweep.base).unwrap_or_else(|_| sweep.base.clone());
    let found = match std::fs::metadata(&sweep.base) {
        Ok(m) if m.is_file() => return None,
        Ok(_) => "is not a file".to_string(),
        Err(e) => format!("cannot be read: {e}"),
    };
    Some(if written.is_absolute() {
        format!("the base experiment {} {found}", at.display())
    } else {
        format!(
            "the base experiment `{}`, read from the sweep file's folder as {}, {found}",
            written.display(),
            at.display()
        )
    })
}

fn validate(sweep: &Sweep) -> Vec<ConfigError> {
    let map = sweep.source_map();
    let mut errors = Vec::new();
    let mut err = |path: KeyPath, message: String| errors.push(sweep.error_at(&map, path, message));
    let f = &sweep.file;
    let s = KeyPath::root().key("sweep");
    if f.sweep.name.trim().is_empty() {
        err(s.key("name"), "must not be empty".into());
    }
    if let Some(problem) = base_problem(sweep) {
        err(s.key("base"), problem);
    }
    if f.sweep.seeds.is_empty() {
        err(s.key("seeds"), "list at least one seed".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, seed) in f.sweep.seeds.iter().enumerate() {
        if !seen.insert(seed) {
            err(
                s.key("seeds").index(i),
                format!("seed {seed} is listed twice"),
            );
        }
    }
    if f.sweep.jobs == 0 {
        err(s.key("jobs"), "must be at least 1".into());
    }
    if f.sweep.final_window == 0 {
        err(s.key("final_window"), "must be at least 1".into());
    }
    if let Some(n) = f.sweep.expected_noise
        && !(n.is_finite() && n >= 0.0)
    {
        err(s.key("expected_noise"), format!("must be ≥ 0, got {n}"));
    }
    let a = KeyPath::root().key("arms");
    if f.arms.len() < 2 {
        err(
            a.clone(),
            "list at least two arms: a baseline and one to compare with it".into(),
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, arm) in f.arms.iter().enumerate() {
        let valid = !arm.name.is_empty()
            && arm
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            err(
                a.index(i).key("name"),
                format!(
                    "`{}`: an arm's name names its folder: use letters, digits, `-` and `_`",
                    arm.name
                ),
            );
        } else if !names.insert(arm.name.as_str()) {
            err(
                a.index(i).key("name"),
                format!("arm `{}` is defined twice", arm.name),
            );
        }
    }
    let arm_list = || {
        f.arms
            .iter()
            .map(|a| format!("`{}`", a.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !names.contains(f.sweep.baseline.as_str()) {
        err(
            s.key("baseline"),
            format!(
                "no arm is named `{}`; the arms are {}",
                f.sweep.baseline,
                arm_list()
            ),
        );
    }
    let e = KeyPath::root().key("eval");
    if f.eval.k == 0 {
        err(e.key("k"), "must be at least 1".into());
    }
    if !(f.eval.temperature.is_finite() && f.eval.temperature >= 0.0) {
        err(
            e.key("temperature"),
            format!("must be ≥ 0 (0 = greedy), got {}", f.eval.temperature),
        );
    }
    if !(f.eval.top_p > 0.0 && f.eval.top_p <= 1.0) {
        err(
            e.key("top_p"),
            format!("must be in (0, 1], got {}", f.eval.top_p),
        );
    }
    if !f.eval.success_threshold.is_finite() {
        err(e.key("success_threshold"), "must be a finite number".into());
    }
    if let Some(v) = &f.eval.val
        && !v.is_array()
    {
        err(
            e.key("val"),
            "must be a list of data sources, as `[data] val` writes them".into(),
        );
    }
    let st = KeyPath::root().key("stability");
    if !(f.stability.multiple.is_finite() && f.stability.multiple > 1.0) {
        err(
            st.key("multiple"),
            format!("must be above 1, got {}", f.stability.multiple),
        );
    }
    if f.stability.early_steps == 0 {
        err(st.key("early_steps"), "must be at least 1".into());
    }
    let v = KeyPath::root().key("verdicts");
    for (i, rule) in f.verdicts.iter().enumerate() {
        let here = v.index(i);
        if !names.contains(rule.arm.as_str()) {
            err(
                here.key("arm"),
                format!(
                    "no arm is named `{}`; the arms are {}",
                    rule.arm,
                    arm_list()
                ),
            );
        } else if rule.arm == f.sweep.baseline {
            err(
                here.key("arm"),
                format!(
                    "`{}` is the baseline; a verdict compares another arm with it",
                    rule.arm
                ),
            );
        }
        if rule.metric.is_per_model() && rule.model.is_none() {
            err(
                here.clone(),
                format!(
                    "metric `{}` is per model: name one with `model`",
                    rule.metric.name()
                ),
            );
        }
        if !rule.metric.is_per_model() && rule.model.is_some() {
            err(
                here.key("model"),
                "only the gradient metrics are per model".into(),
            );
        }
        if !rule.metric.is_eval() && rule.source.is_some() {
            err(
                here.key("source"),
                "only avg_at_k and pass_at_k are per source".into(),
            );
        }
    }
    errors
}
