//! A model whose rollouts run on an inference engine (docs/engines.md): generation goes
//! to the engine; updates, log-probs and checkpoints stay with the in-process
//! [`ModelBackend`], and after each update the engine takes the new weights. The rollout
//! code does not change: the worker and its handle are the same.

use super::{
    backend::{Backend, BackendRequest, ModelBackend, OffloadParts, Residency, ScoreRequest},
    error::BackendError,
};
use crate::engine::{
    EngineClient, EngineError, EngineFinish, EngineOutput, EngineRequest, ManagedServer,
};
use crate::model::{
    FinishReason, Generation, StopCheck, StopStrings, TextTokenizer,
    gguf::{ExportType, GgufFile, export_gguf},
    save_checkpoint,
};
use crate::update::{UpdateBatch, UpdateReport};
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// How the engine takes new weights.
pub enum WeightSync {
    /// The engine loads HF folders from disk (SGLang, vLLM): each version is written
    /// whole to `dir/v<version>` and loaded with the engine's own calls; the folder of
    /// the version before is then removed. `dir` must be a path the engine reads.
    Folder { dir: PathBuf },
    /// The engine loads GGUF files and drmas runs it (llama.cpp): each version is
    /// exported to `dir/v<version>.gguf` in the layout of `template` and the engine is
    /// restarted on it, on `port` of 127.0.0.1 each time (the client's address).
    Restart {
        dir: PathBuf,
        port: u16,
        template: PathBuf,
        kind: ExportType,
        command: Vec<String>,
        log: PathBuf,
        ready_within: Duration,
    },
}

/// The engine side of a model.
pub struct EngineBackend {
    inner: ModelBackend,
    client: EngineClient,
    /// Requests in flight at once (the engine batches them).
    parallel: usize,
    sync: WeightSync,
    server: Option<ManagedServer>,
    /// The version of the weights the engine holds.
    engine_version: u64,
    /// Seconds each weight sync took, in order.
    pub sync_seconds: Vec<f64>,
}

impl From<EngineError> for BackendError {
    fn from(e: EngineError) -> Self {
        BackendError::Engine(e.to_string())
    }
}

fn version_name(version: u64) -> String {
    format!("v{version:06}")
}

impl EngineBackend {
    /// An engine backend over `inner` (the weights drmas trains), talking to the engine
    /// through `client`. The engine gets drmas's current weights now (with
    /// [`WeightSync::Restart`] it is started on them), so that it generates with them
    /// from the first request.
    pub fn start(
        inner: ModelBackend,
        client: EngineClient,
        parallel: usize,
        sync: WeightSync,
    ) -> Result<EngineBackend, BackendError> {
        let version = inner.version();
        let mut backend = EngineBackend {
            inner,
            client,
            parallel: parallel.max(1),
            sync,
            server: None,
            engine_version: version,
            sync_seconds: Vec::new(),
        };
        backend.push_weights(version)?;
        Ok(backend)
    }

    pub fn url(&self) -> &str {
        self.client.url()
    }

    /// The managed engine process, if drmas runs it.
    pub fn server(&mut self) -> Option<&mut ManagedServer> {
        self.server.as_mut()
    }

    /// The version of the weights the engine holds.
    pub fn engine_version(&self) -> u64 {
        self.engine_version
    }

    /// Gives the engine the current weights as `version`.
    fn push_weights(&mut self, version: u64) -> Result<(), BackendError> {
        let started = Instant::now();
        let name = version_name(version);
        let before = version_name(self.engine_version);
        match &self.sync {
            WeightSync::Folder { dir } => {
                let out = dir.join(&name);
                save_checkpoint(&self.inner.model, &self.inner.source, &out)?;
                self.client.protocol().reload_from_disk(
                    &self.client,
                    &out.display().to_string(),
                    &version.to_string(),
                )?;
                if before != name {
                    let _ = std::fs::remove_dir_all(dir.join(before));
                }
            }
            WeightSync::Restart {
                dir,
                port,
                template,
                kind,
                command,
                log,
                ready_within,
            } => {
                std::fs::create_dir_all(dir).map_err(|e| crate::model::ModelError::io(dir, e))?;
                let out = dir.join(format!("{name}.gguf"));
                let template = GgufFile::open(template)?;
                let weights = self.inner.model.vs.variables().into_iter().collect();
                export_gguf(&template, &weights, *kind, &out)?;
                if let Some(mut old) = self.server.take() {
                    old.stop(Duration::from_secs(5));
                }
                let server = ManagedServer::start(command, *port, &out, log)
                    .map_err(|e| BackendError::Engine(format!("cannot start the engine: {e}")))?;
                if let Err(e) = self.client.wait_ready(*ready_within) {
                    return Err(BackendError::Engine(format!(
                        "{e}; the end of its log ({}):\n{}",
                        server.log().display(),
                        server.log_tail(10)
                    )));
                }
                self.server = Some(server);
                if before != name {
                    let _ = std::fs::remove_file(dir.join(format!("{before}.gguf")));
                }
            }
        }
        self.engine_version = version;
        self.sync_seconds.push(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// A dead managed engine, named with the end of its log.
    fn check_alive(&mut self) -> Result<(), BackendError> {
        if let Some(server) = &mut self.server
            && let Some(status) = server.exited()
        {
            return Err(BackendError::Engine(format!(
                "the engine at {} ended ({status}); the end of its log ({}):\n{}",
                server.url(),
                server.log().display(),
                server.log_tail(10)
            )));
        }
        Ok(())
    }
}

/// The engine's answer to `request` as the in-process generator would have given it:
/// cut after the first stop id, or where drmas's own stop-string check first fires (the
/// engine's cut may differ), and at `max_new_tokens`.
pub fn finish_generation(
    request: &BackendRequest,
    out: EngineOutput,
    stops: Option<(&dyn StopCheck, usize)>,
    version: u64,
) -> Result<Generation, BackendError> {
    let EngineOutput {
        mut tokens,
        mut logprobs,
        finish,
    } = out;
    if let EngineFinish::Abort(why) = &finish {
        return Err(BackendError::Engine(format!(
            "the engine aborted the request: {why}"
        )));
    }
    let mut reason = match finish {
        EngineFinish::StopToken => FinishReason::StopToken,
        EngineFinish::StopString(_) => FinishReason::StopString,
        _ => FinishReason::Length,
    };
    let mut cut = tokens.len().min(request.params.max_new_tokens);
    if cut < tokens.len() {
        reason = FinishReason::Length;
    }
    if let Some(k) = tokens[..cut]
        .iter()
        .position(|t| request.params.stop_token_ids.contains(t))
    {
        cut = k + 1;
        reason = FinishReason::StopToken;
    }
    if let Some((check, index)) = stops {
        // The generator checks after each new token and keeps what the check says.
        if let Some(n) = (1..=cut).find_map(|k| check.check(index, &tokens[..k])) {
            cut = n;
            reason = FinishReason::StopString;
        }
    }
    tokens.truncate(cut);
    logprobs.truncate(cut);
    Ok(Generation {
        tokens,
        logprobs,
        finish: reason,
        policy_version: version,
    })
}

fn engine_request(r: &BackendRequest) -> EngineRequest {
    EngineRequest {
        prompt: r.prompt.clone(),
        max_new_tokens: r.params.max_new_tokens,
        temperature: r.params.temperature,
        top_p: r.params.top_p,
        top_k: r.params.top_k,
        seed: r.params.seed,
        stop_token_ids: r.params.stop_token_ids.clone(),
        stop: r.stop.clone(),
        adapter: None,
    }
}

fn stop_strings<'t>(
    tokenizer: Option<&'t TextTokenizer>,
    requests: &[BackendRequest],
) -> Option<StopStrings<'t>> {
    tokenizer
        .filter(|_| requests.iter().any(|r| !r.stop.is_empty()))
        .map(|tokenizer| StopStrings {
            tokenizer,
            stops: requests.iter().map(|r| r.stop.clone()).collect(),
        })
}

impl Backend for EngineBackend {
    fn generate(&mut self, requests: &[BackendRequest]) -> Result<Vec<Generation>, BackendError> {
        self.check_alive()?;
        let reqs: Vec<EngineRequest> = requests.iter().map(engine_request).collect();
        let outs = self.client.generate_all(&reqs, self.parallel);
        let stops = stop_strings(self.inner.tokenizer.as_deref(), requests);
        let mut gens = Vec::with_capacity(outs.len());
        for (i, (out, request)) in outs.into_iter().zip(requests).enumerate() {
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    self.check_alive()?;
                    return Err(e.into());
                }
            };
            let check = stops.as_ref().map(|s| (s as &dyn StopCheck, i));
            gens.push(finish_generation(request, out, check, self.engine_version)?);
        }
        Ok(gens)
    }

    fn offload(&mut self, parts: OffloadParts) -> Result<(), BackendError> {
        self.inner.offload(parts)
    }

    fn residency(&self) -> Residency {
        self.inner.residency()
    }

    fn onload(&mut self) -> Result<(), BackendError> {
        self.inner.onload()
    }

    fn version(&self) -> u64 {
        self.inner.version()
    }

    fn update(&mut self, batch: &UpdateBatch) -> Result<UpdateReport, BackendError> {
        let report = self.inner.update(batch)?;
        self.push_weights(self.inner.version())?;
        Ok(report)
    }

    fn save(&mut self, dir: &Path) -> Result<(), BackendError> {
        self.inner.save(dir)
    }

    fn restore(&mut self, dir: &Path) -> Result<(), BackendError> {
        self.inner.restore(dir)?;
        self.push_weights(self.inner.version())
    }

    fn logprobs(&mut self, pairs: &[ScoreRequest]) -> Result<Vec<Vec<f32>>, BackendError> {
        self.inner.logprobs(pairs)
    }

    fn to_device(&mut self, device: tch::Device) -> Result<(), BackendError> {
        self.inner.to_device(device)
    }

    fn model_backend(&mut self) -> Option<&mut ModelBackend> {
        Some(&mut self.inner)
    }
}
