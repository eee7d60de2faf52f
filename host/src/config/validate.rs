//! Semantic checks: names that must exist, numbers in range, and components that must
//! resolve in the plugin registry and accept their config.

use super::{
    error::{ConfigError, ConfigErrors},
    experiment::{Experiment, config_text},
    source::KeyPath,
};
use crate::plugin::{Registry, ResolveError, ResolvePolicy};
use drmas_plugin_api::ComponentKind;
use std::collections::BTreeSet;

/// The longest a slow environment's tool call may be allowed to take: a day.
pub const MAX_TOOL_TIMEOUT_S: f64 = 86_400.0;

/// Checks everything that does not need plugins, one section of the file after
/// another. Returns every problem found.
pub fn validate(exp: &Experiment) -> Vec<ConfigError> {
    let mut found = Found {
        exp,
        errors: Vec::new(),
    };
    if let Err(msg) = check_name(&exp.file.experiment.name) {
        found.at(KeyPath::root().key("experiment").key("name"), msg);
    }
    if exp
        .file
        .experiment
        .output_dir
        .as_ref()
        .is_some_and(|d| d.as_os_str().is_empty())
    {
        found.at(
            KeyPath::root().key("experiment").key("output_dir"),
            "an empty path would put the run in the current folder: name a folder, or leave the key out for runs/<name>".into(),
        );
    }
    plugins(&mut found);
    let model_ids = models(&mut found);
    let agent_names = agents(&mut found, &model_ids);
    workflow(&mut found, &agent_names);
    environment(&mut found);
    data(&mut found);
    rewards(&mut found, &agent_names);
    trainer(&mut found);
    pool(&mut found);
    tracking(&mut found);
    found.errors
}

/// `[tracking]`: an MLflow server drmas can reach (http://, no TLS), a named experiment,
/// and sample tables with at least one sample.
fn tracking(found: &mut Found) {
    let t = &found.exp.file.tracking;
    let tracking = KeyPath::root().key("tracking");
    if let Some(m) = &t.mlflow {
        let mlflow = tracking.key("mlflow");
        if !m.uri.starts_with("http://") {
            found.at(
                mlflow.key("uri"),
                format!(
                    "`{}` is not an http:// address (drmas's MLflow client has no TLS: reach the server on its own network, or through a local proxy)",
                    m.uri
                ),
            );
        }
        if m.experiment.trim().is_empty() {
            found.at(
                mlflow.key("experiment"),
                "must name the MLflow experiment".into(),
            );
        }
        if !(m.grace_s.is_finite() && (0.0..=3600.0).contains(&m.grace_s)) {
            found.at(
                mlflow.key("grace_s"),
                format!("must be between 0 and 3600 seconds, not {}", m.grace_s),
            );
        }
    }
    if t.log_samples_every > 0 && t.samples_per_agent == 0 {
        found.at(
            tracking.key("samples_per_agent"),
            "must be at least 1 when log_samples_every is set (0 turns the tables off)".into(),
        );
    }
}

/// The problems found so far, each at its key.
struct Found<'a> {
    exp: &'a Experiment,
    errors: Vec<ConfigError>,
}

impl Found<'_> {
    fn at(&mut self, path: KeyPath, message: String) {
        self.errors.push(self.exp.error_at(&path, message));
    }
}

/// The `[plugins]` table: folders that may be trusted, requirements that parse, pins that name a file and are sha256s.
fn plugins(found: &mut Found) {
    let f = &found.exp.file;
    let root = KeyPath::root();
    let plugins = root.key("plugins");
    for (i, dir) in f.plugins.dirs.iter().enumerate() {
        if let Err(problem) = crate::plugin::plugin_folder_problem(dir, None) {
            found.at(plugins.key("dirs").index(i), problem);
        }
    }
    for (name, req) in &f.plugins.require {
        if let Err(e) = semver::VersionReq::parse(req) {
            found.at(
                plugins.key("require").key(name),
                format!("`{req}` is not a semver requirement: {e}"),
            );
        }
    }
    for (name, hash) in &f.plugins.sha256 {
        let here = plugins.key("sha256").key(name);
        if name.contains('/') || !name.ends_with(".so") {
            found.at(
                here.clone(),
                format!(
                    "`{name}` is not a plugin file name: pins name a `*.so` file in a plugin folder, without its folder"
                ),
            );
        }
        if !crate::plugin::is_sha256_hex(hash) {
            found.at(
                here,
                format!("`{hash}` is not a sha256: expected 64 hex digits"),
            );
        }
    }
}

/// `[[models]]`: unique ids, optimizer numbers in range, a full model or a LoRA adapter, a device that exists. Returns the ids.
fn models<'a>(found: &mut Found<'a>) -> BTreeSet<&'a str> {
    let f = &found.exp.file;
    let root = KeyPath::root();
    let mut model_ids = BTreeSet::new();
    for (i, m) in f.models.iter().enumerate() {
        let here = root.key("models").index(i);
        if !model_ids.insert(m.id.as_str()) {
            found.at(
                here.key("id"),
                format!("model id `{}` is defined twice", m.id),
            );
        }
        if let Some(clip) = m.grad_clip
            && !(clip.is_finite() && clip > 0.0)
        {
            found.at(here.key("grad_clip"), format!("must be > 0, got {clip}"));
        }
        if !(m.weight_decay.is_finite() && m.weight_decay >= 0.0) {
            found.at(
                here.key("weight_decay"),
                format!("must be >= 0, got {}", m.weight_decay),
            );
        }
        if !(m.lr.is_finite() && m.lr > 0.0) {
            found.at(
                here.key("lr"),
                format!("must be a positive number, got {}", m.lr),
            );
        }
        let has_path = !m.path.as_os_str().is_empty();
        match (has_path, &m.base, &m.lora) {
            (true, Some(_), _) => found.at(
                here.key("base"),
                "a model has either `path` (a full model) or `base` (a LoRA adapter on it), not both".into(),
            ),
            (false, None, _) => found.at(
                here.clone(),
                format!("model `{}` needs `path` (an HF checkpoint folder) or `base` with `lora`", m.id),
            ),
            (_, Some(_), None) => found.at(
                here.key("base"),
                "`base` needs `lora = { rank = .., alpha = .., targets = [..] }`".into(),
            ),
            (true, None, Some(_)) => found.at(
                here.key("lora"),
                "`lora` needs `base` (the frozen model's folder) instead of `path`".into(),
            ),
            _ => {}
        }
        if let Some(problem) = m.lora.as_ref().and_then(|l| l.problem()) {
            found.at(here.key("lora"), problem);
        }
        if let Err(e) = m
            .device
            .spec()
            .and_then(|spec| spec.resolve_with(crate::pool::cuda_count()))
        {
            found.at(here.key("device"), e.to_string());
        }
        if m.shard == super::schema::Shard::Full
            && let Some(dropout) = m.lora.as_ref().map(|l| l.dropout).filter(|d| *d > 0.0)
        {
            // The backward recomputes each layer's forward (update/full.rs), where
            // dropout would draw other masks than the forward did.
            found.at(
                here.key("shard"),
                format!(
                    "\"full\" recomputes each layer's forward in the backward, where LoRA dropout ({dropout}) would draw other masks than the forward: set lora.dropout = 0, or shard = \"optimizer\""
                ),
            );
        }
        if let Some(engine) = &m.engine {
            for (key, problem) in engine_problems(engine) {
                found.at(here.key("engine").key(key), problem);
            }
        }
    }
    model_ids
}

/// What is wrong with a model's `[models.engine]`, by key.
fn engine_problems(e: &super::schema::EngineSection) -> Vec<(&'static str, String)> {
    use super::schema::EngineKind;
    let mut out = Vec::new();
    match e.kind {
        EngineKind::LlamaCpp => {
            match &e.command {
                None => out.push((
                    "command",
                    "llama-cpp needs `command`: drmas runs llama-server and restarts it on each update's weights (e.g. [\"llama-server\", \"-m\", \"{model}\", \"--port\", \"{port}\"])".to_string(),
                )),
                Some(c) if c.is_empty() => out.push(("command", "is empty".to_string())),
                Some(c) => {
                    for placeholder in ["{model}", "{port}"] {
                        if !c.iter().any(|a| a.contains(placeholder)) {
                            out.push((
                                "command",
                                format!("has no `{placeholder}`: drmas fills in the exported GGUF and the port there"),
                            ));
                        }
                    }
                }
            }
            if e.url.is_some() {
                out.push((
                    "url",
                    "llama-cpp has no call that loads new weights: drmas must run it (`command`), not reach one at a URL".to_string(),
                ));
            }
            if e.gguf.is_none() {
                out.push((
                    "gguf",
                    "llama-cpp needs `gguf`: the GGUF the model was imported from, whose layout and tokenizer the exports follow".to_string(),
                ));
            }
        }
        EngineKind::Sglang | EngineKind::Vllm => {
            match (&e.url, &e.command) {
                (None, None) => out.push((
                    "url",
                    "needs `url` (an engine that runs elsewhere, http://host:port) or `command` (one drmas starts on this machine)".to_string(),
                )),
                (Some(_), Some(_)) => out.push((
                    "command",
                    "give `url` (an engine that runs elsewhere) or `command` (one drmas starts), not both".to_string(),
                )),
                (None, Some(c)) if c.is_empty() => out.push(("command", "is empty".to_string())),
                (None, Some(c)) => {
                    for placeholder in ["{model}", "{port}"] {
                        if !c.iter().any(|a| a.contains(placeholder)) {
                            out.push((
                                "command",
                                format!("has no `{placeholder}`: drmas fills in the model's folder and the port there"),
                            ));
                        }
                    }
                }
                (Some(_), None) => {}
            }
            if e.gguf.is_some() {
                out.push(("gguf", "only llama-cpp loads GGUF files".to_string()));
            }
            if e.export != super::schema::ExportDtype::F32 {
                out.push((
                    "export",
                    "only llama-cpp takes exported GGUF weights".to_string(),
                ));
            }
        }
    }
    if e.kind != EngineKind::Vllm && e.served_model.is_some() {
        out.push((
            "served_model",
            "only vllm serves models by name".to_string(),
        ));
    }
    if let Some(url) = &e.url
        && !url.starts_with("http://")
    {
        out.push((
            "url",
            format!(
                "`{url}` is not an http:// address (the engine client has no TLS: reach the engine on its own network)"
            ),
        ));
    }
    // Checked here rather than typed `NonZeroUsize`: a 0 is reported together with the
    // section's other problems.
    if e.parallel == 0 {
        out.push(("parallel", "must be at least 1".to_string()));
    }
    if !(e.timeout_s.is_finite() && e.timeout_s > 0.0) {
        out.push((
            "timeout_s",
            format!("must be a positive number, got {}", e.timeout_s),
        ));
    }
    out
}

/// `[[agents]]`: at least one, unique names, a known model, sampling numbers in range. Returns the names.
fn agents<'a>(found: &mut Found<'a>, model_ids: &BTreeSet<&str>) -> BTreeSet<&'a str> {
    let f = &found.exp.file;
    let root = KeyPath::root();
    let mut agent_names = BTreeSet::new();
    if f.agents.is_empty() {
        found.at(
            root.clone(),
            "no agents: add at least one [[agents]] table".into(),
        );
    }
    for (i, a) in f.agents.iter().enumerate() {
        let here = root.key("agents").index(i);
        if !agent_names.insert(a.name.as_str()) {
            found.at(
                here.key("name"),
                format!("agent `{}` is defined twice", a.name),
            );
        }
        if !model_ids.contains(a.model.as_str()) {
            let known = if model_ids.is_empty() {
                "no [[models]] are defined".to_string()
            } else {
                format!(
                    "models: {}",
                    model_ids.iter().copied().collect::<Vec<_>>().join(", ")
                )
            };
            found.at(
                here.key("model"),
                format!("unknown model `{}` ({known})", a.model),
            );
        }
        let s = &a.sampling;
        let sampling = here.key("sampling");
        if !(s.temperature.is_finite() && s.temperature > 0.0) {
            found.at(
                sampling.key("temperature"),
                format!("must be > 0, got {}", s.temperature),
            );
        }
        if !(s.top_p > 0.0 && s.top_p <= 1.0) {
            found.at(
                sampling.key("top_p"),
                format!("must be in (0, 1], got {}", s.top_p),
            );
        }
    }
    agent_names
}

/// `[workflow]`: entry and final agents that exist, turn and failure limits in range.
fn workflow(found: &mut Found, agent_names: &BTreeSet<&str>) {
    let f = &found.exp.file;
    let root = KeyPath::root();
    let workflow = root.key("workflow");
    if !agent_names.contains(f.workflow.entry.as_str()) && !f.agents.is_empty() {
        found.at(
            workflow.key("entry"),
            format!(
                "entry agent `{}` is not defined (agents: {})",
                f.workflow.entry,
                agent_names.iter().copied().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    if let Some(last) = &f.workflow.final_agent
        && !agent_names.contains(last.as_str())
    {
        found.at(
            workflow.key("final_agent"),
            format!(
                "final agent `{last}` is not defined (agents: {})",
                agent_names.iter().copied().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    if f.workflow.max_turns.get() > MAX_TURNS {
        found.at(
            workflow.key("max_turns"),
            format!(
                "{} turns is more than the limit of {MAX_TURNS}: every turn is a generation in the episode's context",
                f.workflow.max_turns
            ),
        );
    }
    let m = f.workflow.max_failed_episodes;
    if !(m.is_finite() && (0.0..=1.0).contains(&m)) {
        found.at(
            workflow.key("max_failed_episodes"),
            format!("must be a fraction in [0, 1], got {m}"),
        );
    }
}

/// `[environment]`: a tool timeout in range.
fn environment(found: &mut Found) {
    let f = &found.exp.file;
    let root = KeyPath::root();
    if let Some(env) = &f.environment {
        let t = env.tool_timeout_s;
        if !(t.is_finite() && t > 0.0 && t <= MAX_TOOL_TIMEOUT_S) {
            found.at(
                root.key("environment").key("tool_timeout_s"),
                format!(
                    "must be a number of seconds above 0 and at most {MAX_TOOL_TIMEOUT_S}, got {t}"
                ),
            );
        }
    }
}

/// `[data]`: limits that take at least one task.
fn data(found: &mut Found) {
    let exp = found.exp;
    for (here, source) in exp.data_sources() {
        if source.limit == Some(0) {
            found.at(
                here.key("limit"),
                "must be at least 1 when set (leave it out for every task)".into(),
            );
        }
    }
}

/// `[[rewards]]`: at least one, finite weights, agent scopes that name agents, and at
/// least one reward of the whole team.
fn rewards(found: &mut Found, agent_names: &BTreeSet<&str>) {
    let f = &found.exp.file;
    let root = KeyPath::root();
    if f.rewards.is_empty() {
        found.at(
            root.clone(),
            "no rewards: add at least one [[rewards]] table".into(),
        );
    }
    for (i, r) in f.rewards.iter().enumerate() {
        let here = root.key("rewards").index(i);
        if !r.weight.is_finite() {
            found.at(
                here.key("weight"),
                format!("must be finite, got {}", r.weight),
            );
        }
        let Some(agents) = &r.agents else { continue };
        if agents.is_empty() {
            found.at(
                here.key("agents"),
                "an empty list scores no agent: name agents, or leave the key out for the whole team".into(),
            );
        }
        let mut seen = BTreeSet::new();
        for (j, name) in agents.iter().enumerate() {
            if !agent_names.contains(name.as_str()) && !f.agents.is_empty() {
                found.at(
                    here.key("agents").index(j),
                    format!(
                        "agent `{name}` is not defined (agents: {})",
                        agent_names.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                );
            } else if !seen.insert(name.as_str()) {
                found.at(
                    here.key("agents").index(j),
                    format!("agent `{name}` is named twice"),
                );
            }
        }
    }
    if !f.rewards.is_empty() && !f.rewards.iter().any(|r| r.in_team()) {
        let key = if f.rewards[0].team == Some(false) {
            "team"
        } else {
            "agents"
        };
        found.at(
            root.key("rewards").index(0).key(key),
            "no reward is part of the team reward: at least one must score the whole team \
             (no `agents` key) or say `team = true`, since the team reward is what success \
             and evaluation report"
                .into(),
        );
    }
}

/// `[trainer]`: counts of at least 1, coefficients in range, budgets that hold a full-length response.
fn trainer(found: &mut Found) {
    let f = &found.exp.file;
    let root = KeyPath::root();
    let t = &f.trainer;
    let trainer = root.key("trainer");
    for (key, value) in [
        ("steps", t.steps),
        ("prompts_per_step", t.prompts_per_step),
        ("group_size", t.group_size),
        ("micro_batch_tokens", t.micro_batch_tokens.unwrap_or(1)),
    ] {
        if value == 0 {
            found.at(trainer.key(key), "must be at least 1".into());
        }
    }
    if !(t.invalid_penalty.is_finite() && t.invalid_penalty >= 0.0) {
        found.at(
            trainer.key("invalid_penalty"),
            format!("must be >= 0, got {}", t.invalid_penalty),
        );
    }
    let clip = trainer.key("clip");
    if !(t.clip.low >= 0.0 && t.clip.low < 1.0) {
        found.at(
            clip.key("low"),
            format!("must be in [0, 1), got {}", t.clip.low),
        );
    }
    if !(t.clip.high.is_finite() && t.clip.high >= 0.0) {
        found.at(
            clip.key("high"),
            format!("must be >= 0, got {}", t.clip.high),
        );
    }
    if !(t.clip.dual.is_finite() && t.clip.dual > 1.0) {
        found.at(
            clip.key("dual"),
            format!("must be > 1, got {}", t.clip.dual),
        );
    }
    if !(t.grad_clip.is_finite() && t.grad_clip > 0.0) {
        found.at(
            trainer.key("grad_clip"),
            format!("must be > 0, got {}", t.grad_clip),
        );
    }
    if let Some(kl) = &t.kl
        && !(kl.coef.is_finite() && kl.coef >= 0.0)
    {
        found.at(
            trainer.key("kl").key("coef"),
            format!("must be >= 0, got {}", kl.coef),
        );
    }
    if !t.entropy_coef.is_finite() {
        found.at(
            trainer.key("entropy_coef"),
            format!("must be finite, got {}", t.entropy_coef),
        );
    }
    if let Some(cap) = t.tis_cap
        && !(cap.is_finite() && cap >= 1.0)
    {
        found.at(
            trainer.key("tis_cap"),
            format!("must be a number >= 1, got {cap}"),
        );
    }
    if !(t.min_lr_ratio.is_finite() && (0.0..=1.0).contains(&t.min_lr_ratio)) {
        found.at(
            trainer.key("min_lr_ratio"),
            format!("must be in [0, 1], got {}", t.min_lr_ratio),
        );
    }
    if t.warmup_steps > t.steps {
        found.at(
            trainer.key("warmup_steps"),
            format!(
                "{} warm-up steps is more than the run's {} steps",
                t.warmup_steps, t.steps
            ),
        );
    }
    if !(t.spike_factor.is_finite() && t.spike_factor > 1.0) {
        found.at(
            trainer.key("spike_factor"),
            format!("must be > 1, got {}", t.spike_factor),
        );
    }
    if !t.success_threshold.is_finite() {
        found.at(
            trainer.key("success_threshold"),
            format!("must be finite, got {}", t.success_threshold),
        );
    }
    if t.shadow_gradients && t.shadow_normalizer.is_none() {
        found.at(
            trainer.key("shadow_gradients"),
            "needs a `shadow_normalizer`: its advantages are what the second backward uses".into(),
        );
    }
    if t.shadow_gradients
        && let Some((i, m)) = f
            .models
            .iter()
            .enumerate()
            .find(|(_, m)| !m.shard.is_none())
    {
        found.at(
            trainer.key("shadow_gradients"),
            format!(
                "is not built for sharded models: models[{i}] (`{}`) has shard = \"{}\"",
                m.id,
                m.shard.name()
            ),
        );
    }
    // Unset, the budget is the CPU's on the CPU and at least that on a GPU.
    let (micro, unset) = match t.micro_batch_tokens {
        Some(m) => (u64::from(m), ""),
        None => (
            crate::pool::sizing::CPU.micro_batch_tokens as u64,
            " (unset: the CPU's budget, and the least a GPU's is sized to)",
        ),
    };
    for (i, a) in f.agents.iter().enumerate() {
        // One sample is at least its response; a budget below the generation budget
        // could never hold a full-length response.
        if u64::from(a.sampling.max_new_tokens.get()) > micro {
            found.at(
                root.key("agents")
                    .index(i)
                    .key("sampling")
                    .key("max_new_tokens"),
                format!(
                    "{} is more than [trainer] micro_batch_tokens = {micro}{unset}",
                    a.sampling.max_new_tokens
                ),
            );
        }
    }
}

/// `[pool]`: devices that exist, a positive memory limit.
fn pool(found: &mut Found) {
    let f = &found.exp.file;
    let root = KeyPath::root();
    let pool = root.key("pool");
    if f.pool.devices.is_empty() {
        found.at(pool.key("devices"), "must name at least one device".into());
    }
    if let Some(limit) = f.pool.memory_limit_gib
        && !(limit.is_finite() && limit > 0.0)
    {
        found.at(
            pool.key("memory_limit_gib"),
            format!("must be a positive number of GiB, got {limit}"),
        );
    }
    batch_limits(found, &pool);
    let gpus = crate::pool::cuda_count();
    for (i, d) in f.pool.devices.iter().enumerate() {
        if let Err(e) = d.spec().and_then(|spec| spec.resolve_with(gpus)) {
            found.at(pool.key("devices").index(i), e.to_string());
        }
    }
}

/// The most rows a generation batch, and threads the episodes, may be given: more
/// rows than this is a typo (the KV cache would not fit any machine), more threads
/// only compete with the workers.
pub const MAX_BATCH_ROWS: usize = 4096;
pub const MAX_EPISODE_THREADS: usize = 64;
/// The longest gather window: longer only idles the workers.
pub const MAX_GATHER_WINDOW_MS: u64 = 10_000;

/// `[pool]` batching limits: at least one row and one thread, within the bounds above.
fn batch_limits(found: &mut Found, pool: &KeyPath) {
    let p = &found.exp.file.pool;
    let (rows, window, threads) = (p.max_batch_rows, p.gather_window_ms, p.episode_threads);
    if let Some(rows) = rows
        && !(1..=MAX_BATCH_ROWS).contains(&rows)
    {
        found.at(
            pool.key("max_batch_rows"),
            format!("must be 1 to {MAX_BATCH_ROWS} rows, got {rows}"),
        );
    }
    if window > MAX_GATHER_WINDOW_MS {
        found.at(
            pool.key("gather_window_ms"),
            format!("must be 0 to {MAX_GATHER_WINDOW_MS} ms, got {window}"),
        );
    }
    if !(1..=MAX_EPISODE_THREADS).contains(&threads) {
        found.at(
            pool.key("episode_threads"),
            format!("must be 1 to {MAX_EPISODE_THREADS} threads, got {threads}"),
        );
    }
    let timeout = p.collective_timeout_s;
    if !(timeout.is_finite() && timeout > 0.0 && timeout <= MAX_COLLECTIVE_TIMEOUT_S) {
        found.at(
            pool.key("collective_timeout_s"),
            format!("must be more than 0 and at most {MAX_COLLECTIVE_TIMEOUT_S} s, got {timeout}"),
        );
    }
}

/// A day: a rank silent longer than that is gone.
pub const MAX_COLLECTIVE_TIMEOUT_S: f64 = 86_400.0;

/// The most turns an episode may have. Each turn generates within the episode's
/// context, so a larger bound only lets a looping workflow run away.
pub const MAX_TURNS: u32 = 64;

/// An experiment name is one plain folder name under `runs/`: it cannot reach outside
/// (`../x`, `/x`) or hide (`.x`).
fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 100 {
        return Err(format!(
            "must be at most 100 characters, has {}",
            name.len()
        ));
    }
    if name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "`{name}` is not a plain folder name: use letters, digits, `-`, `_` and `.`, not starting with `.` (it names the folder runs/<name>; set output_dir for another place)"
        ));
    }
    Ok(())
}

/// A component of the experiment that resolved and accepted its config.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedComponent {
    /// Where it is used: `agents[0]`, `normalizer`, ...
    pub role: String,
    pub kind: ComponentKind,
    pub name: String,
    pub version: String,
    pub source: String,
}

/// Resolves every component the experiment names and creates it with its config, so
/// plugin-side config errors surface now, under the component's name and position.
/// The caller reports the registry's skipped files once (`Registry::failures`); the
/// errors here refer to them rather than list them in every line.
pub fn check_components(
    exp: &Experiment,
    registry: &Registry,
) -> Result<Vec<CheckedComponent>, ConfigErrors> {
    let f = &exp.file;
    let policy = exp.resolve_policy();
    let root = KeyPath::root();
    let mut used: Vec<(KeyPath, ComponentKind, &str, &Option<toml::Table>)> = Vec::new();
    for (i, a) in f.agents.iter().enumerate() {
        used.push((
            root.key("agents").index(i),
            ComponentKind::Agent,
            &a.component,
            &a.config,
        ));
    }
    if let Some(env) = &f.environment {
        used.push((
            root.key("environment"),
            ComponentKind::Environment,
            &env.component,
            &env.config,
        ));
    }
    for (i, r) in f.rewards.iter().enumerate() {
        used.push((
            root.key("rewards").index(i),
            ComponentKind::Reward,
            &r.component,
            &r.config,
        ));
    }
    used.push((
        root.key("normalizer"),
        ComponentKind::Normalizer,
        &f.normalizer.component,
        &f.normalizer.config,
    ));
    if let Some(shadow) = &f.trainer.shadow_normalizer {
        used.push((
            root.key("trainer").key("shadow_normalizer"),
            ComponentKind::Normalizer,
            &shadow.component,
            &shadow.config,
        ));
    }

    let mut errors = Vec::new();
    // Requirements and overrides must name a loaded plugin: a misspelt name would
    // otherwise be ignored without a word.
    let plugins = root.key("plugins");
    let named = f
        .plugins
        .require
        .keys()
        .map(|name| (plugins.key("require").key(name), name));
    let overridden = f
        .plugins
        .overrides
        .iter()
        .enumerate()
        .map(|(i, name)| (plugins.key("override").index(i), name));
    for (path, name) in named.chain(overridden) {
        if let Err(e @ ResolveError::UnknownPlugin { .. }) =
            registry.plugin(name, &ResolvePolicy::default())
        {
            errors.push(exp.error_at(&path, one_line(e, registry).to_string()));
        }
    }
    errors.extend(check_pins(exp, registry));
    let mut checked = Vec::new();
    for (path, kind, name, table) in used {
        // Keys the component describes are checked first: an error at the key itself
        // says more than the plugin's refusal of the whole table.
        let key_errors =
            super::declared::config_key_errors(exp, registry, &policy, &path, kind, name, table);
        if !key_errors.is_empty() {
            errors.extend(key_errors);
            continue;
        }
        let text = config_text(table);
        let created = match kind {
            ComponentKind::Agent => registry.create_agent(name, &text, &policy).map(|h| h.id),
            ComponentKind::Environment => registry
                .create_environment(name, &text, &policy)
                .map(|h| h.id),
            ComponentKind::Reward => registry.create_reward(name, &text, &policy).map(|h| h.id),
            ComponentKind::Normalizer => registry
                .create_normalizer(name, &text, &policy)
                .map(|h| h.id),
        };
        match created {
            Ok(id) => checked.push(CheckedComponent {
                role: path.to_string(),
                kind,
                name: id.name,
                version: id.version,
                source: id.source,
            }),
            Err(e) => {
                let e = described_optional_but_required(
                    one_line(e, registry),
                    registry,
                    &policy,
                    kind,
                    name,
                );
                // Config refusals point at the config table; resolution errors at the name.
                let at = match (&e, table) {
                    (ResolveError::Create { .. }, Some(_)) => path.key("config"),
                    _ => path.key("component"),
                };
                errors.push(exp.error_at(&at, e.to_string()));
            }
        }
    }
    // Agents that name other agents (hand-offs, whose turns they read) must name ones
    // that exist: a typo would otherwise fail every episode at its first hand-off.
    let agent_names: BTreeSet<&str> = f.agents.iter().map(|a| a.name.as_str()).collect();
    for (i, a) in f.agents.iter().enumerate() {
        let Ok(links) = registry.agent_links(&a.component, &config_text(&a.config), &policy) else {
            // Creation errors were reported above.
            continue;
        };
        for name in links {
            if !agent_names.contains(name.as_str()) {
                let here = root.key("agents").index(i);
                let at = if a.config.is_some() {
                    here.key("config")
                } else {
                    here.key("component")
                };
                errors.push(exp.error_at(
                    &at,
                    format!(
                        "{} names agent `{name}`, which the experiment does not define (agents: {})",
                        a.component,
                        agent_names.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
    }
    errors.extend(super::declared::tool_errors(exp, registry, &policy));
    if errors.is_empty() {
        Ok(checked)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// A refusal "missing field `k`" for a key the component describes as optional (with a
/// default) is the plugin's defect, not the experiment's: say so, with the default its
/// description promises, instead of serde's bare words.
fn described_optional_but_required(
    e: ResolveError,
    registry: &Registry,
    policy: &ResolvePolicy,
    kind: ComponentKind,
    name: &str,
) -> ResolveError {
    let ResolveError::Create {
        kind: k,
        component,
        message,
    } = e
    else {
        return e;
    };
    let missing = message
        .split("missing field `")
        .nth(1)
        .and_then(|rest| rest.split('`').next());
    let described = missing.and_then(|key| {
        let (_, info) = registry.resolve(kind, name, policy).ok()?;
        let keys = info.config.as_ref()?;
        keys.iter()
            .find(|d| d.name == key)
            .and_then(|d| d.default.clone().map(|default| (key.to_string(), default)))
    });
    let message = match described {
        Some((key, default)) => format!(
            "{message} (its description says `{key}` is optional with default {default}, but the \
             component does not apply that default: a defect of the plugin; set `{key}` to work around it)"
        ),
        None => message,
    };
    ResolveError::Create {
        kind: k,
        component,
        message,
    }
}

/// An unknown plugin's error without the list of skipped files, so each config error
/// stays one line and each skipped file is reported once, by the caller.
fn one_line(e: ResolveError, registry: &Registry) -> ResolveError {
    match e {
        ResolveError::UnknownPlugin { plugin, loaded, .. } => ResolveError::UnknownPlugin {
            plugin,
            loaded,
            failures: if registry.failures().is_empty() {
                String::new()
            } else {
                "; plugin files were skipped, see the warnings".into()
            },
        },
        other => other,
    }
}

/// Every `[plugins] sha256` pin must name a file found in the plugin folders: a pin on a
/// misspelt or moved file would otherwise protect nothing without a word.
pub fn check_pins(exp: &Experiment, registry: &Registry) -> Vec<ConfigError> {
    let found: BTreeSet<&str> = registry
        .files()
        .iter()
        .filter_map(|p| p.file_name()?.to_str())
        .collect();
    let pins = KeyPath::root().key("plugins").key("sha256");
    exp.file
        .plugins
        .sha256
        .keys()
        .filter(|name| !found.contains(name.as_str()))
        .map(|name| {
            let seen = if found.is_empty() {
                "none".to_string()
            } else {
                found.iter().copied().collect::<Vec<_>>().join(", ")
            };
            exp.error_at(
                &pins.key(name),
                format!("no plugin file `{name}` in the plugin folders (files found: {seen})"),
            )
        })
        .collect()
}
