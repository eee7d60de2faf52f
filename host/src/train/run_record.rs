//! The run record, `RUN/run.json`: what it takes to trace a result back to what made
//! it — the resolved experiment (overrides applied), drmas's and the plugin API's
//! versions, the git commit and whether the tree was dirty (with a hash of the diff),
//! each loaded plugin file's sha256, each data file's and model file's hash (the run's
//! fingerprint), libtorch's version, the CPU's vector extensions, threads and CUDA
//! devices. Written whole at every start of the run (a resume rewrites it: the record
//! is of the process that trains now; `changes.jsonl` keeps what changed).

use super::{fingerprint::Fingerprint, run_error::RunError};
use crate::{
    config::Experiment,
    plugin::{Registry, Source},
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::{collections::BTreeMap, path::Path, process::Command};

pub const RUN_RECORD_FILE: &str = "run.json";

#[derive(Debug, Clone, Serialize)]
pub struct GitState {
    pub commit: String,
    pub dirty: bool,
    /// sha256 of `git diff HEAD` (tracked files' changes), when dirty.
    pub diff_sha256: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PluginFile {
    pub plugin: String,
    pub version: String,
    pub path: String,
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MachineState {
    pub libtorch_version: String,
    /// The x86 vector extensions the CPU has (`avx2`, `avx512f`, …), or the CPU's
    /// feature list's name elsewhere.
    pub cpu_flags: Vec<String>,
    pub cpu_model: Option<String>,
    pub cores: usize,
    /// libtorch's intra-op threads.
    pub threads: i32,
    pub cuda_devices: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub drmas_version: String,
    pub plugin_api_version: String,
    pub started_at_unix: u64,
    pub command: Vec<String>,
    pub experiment_file: String,
    /// The experiment as it trains (the text of `experiment.toml`).
    pub experiment: String,
    pub overrides: Vec<String>,
    /// The repository the experiment file is in, if it is one.
    pub git: Option<GitState>,
    pub plugins: Vec<PluginFile>,
    /// sha256 and size of each data file and model file (the run's fingerprint's).
    pub files: BTreeMap<String, String>,
    pub machine: MachineState,
}

fn sha256_of(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(format!("{:x}", Sha256::digest(&bytes)))
}

fn git(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// The commit of the repository holding `dir`, and its dirtiness.
fn git_state(dir: &Path) -> Option<GitState> {
    let commit = String::from_utf8(git(dir, &["rev-parse", "HEAD"])?)
        .ok()?
        .trim()
        .to_string();
    let status = git(dir, &["status", "--porcelain", "--untracked-files=no"])?;
    let dirty = !status.is_empty();
    let diff_sha256 = dirty
        .then(|| git(dir, &["diff", "HEAD"]))
        .flatten()
        .map(|d| format!("{:x}", Sha256::digest(&d)));
    Some(GitState {
        commit,
        dirty,
        diff_sha256,
    })
}

/// The vector extensions of this machine's CPU, from `/proc/cpuinfo`.
fn cpu() -> (Vec<String>, Option<String>) {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let interesting = |f: &&str| {
        f.starts_with("avx")
            || f.starts_with("amx")
            || matches!(*f, "fma" | "f16c" | "sse4_2" | "asimd" | "sve" | "sve2")
    };
    let flags = field("flags")
        .or_else(|| field("Features"))
        .map(|f| {
            f.split_whitespace()
                .filter(interesting)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    (flags, field("model name"))
}

impl RunRecord {
    pub fn gather(exp: &Experiment, registry: &Registry, fingerprint: &Fingerprint) -> RunRecord {
        let plugins = registry
            .plugins()
            .iter()
            .filter_map(|p| match &p.source {
                Source::File(path) => Some(PluginFile {
                    plugin: p.name.clone(),
                    version: p.version.to_string(),
                    path: path.display().to_string(),
                    sha256: sha256_of(path),
                }),
                Source::Builtin => None,
            })
            .collect();
        let files = fingerprint
            .iter()
            .filter(|(k, _)| k.starts_with("data.") || k.contains(".files["))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let runtime = crate::pool::runtime_info();
        let (cpu_flags, cpu_model) = cpu();
        let cuda_devices = crate::pool::driver_gpus()
            .into_iter()
            .map(|g| format!("{g:?}"))
            .collect();
        let dir = exp
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        RunRecord {
            drmas_version: env!("CARGO_PKG_VERSION").to_string(),
            plugin_api_version: drmas_plugin_api::API_VERSION.to_string(),
            started_at_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            command: std::env::args().collect(),
            experiment_file: exp.path.display().to_string(),
            experiment: exp.resolved_text(),
            overrides: exp.overrides.iter().map(|o| o.set.to_string()).collect(),
            git: git_state(dir),
            plugins,
            files,
            machine: MachineState {
                libtorch_version: runtime.libtorch_version,
                cpu_flags,
                cpu_model,
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                threads: runtime.threads,
                cuda_devices,
            },
        }
    }

    pub fn write(&self, run: &Path) -> Result<(), RunError> {
        let path = run.join(RUN_RECORD_FILE);
        let text = serde_json::to_string_pretty(self).expect("json");
        crate::output::write_atomic(&path, text.as_bytes()).map_err(|e| RunError::io(&path, e))
    }

    /// What MLflow tags a run with.
    pub fn tags(&self) -> Vec<(String, String)> {
        let mut tags = vec![
            ("drmas.version".to_string(), self.drmas_version.clone()),
            (
                "drmas.plugin_api".to_string(),
                self.plugin_api_version.clone(),
            ),
            (
                "drmas.experiment_file".to_string(),
                self.experiment_file.clone(),
            ),
        ];
        if let Some(g) = &self.git {
            tags.push(("mlflow.source.git.commit".into(), g.commit.clone()));
            tags.push(("drmas.git_dirty".into(), g.dirty.to_string()));
        }
        tags
    }
}
