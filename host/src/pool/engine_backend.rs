//! A model whose rollouts run on an inference engine (docs/engines.md): generation goes
//! to the engine; updates, log-probs and checkpoints stay with the in-process
//! [`ModelBackend`], and after each update the engine takes the new weights. The rollout
//! code does not change: the worker and its handle are the same.

use super::{
    backend::{
        Backend, BackendRequest, ModelBackend, OffloadParts, Residency, ScoreRequest, save_adapter,
    },
    error::{BackendError, EngineFailure},
};
use crate::engine::{
    AdapterRef, EngineClient, EngineFinish, EngineOutput, EngineRequest, ManagedServer,
};
use crate::model::{
    FinishReason, Generation, ModelError, StopCheck, StopStrings, TextTokenizer,
    gguf::{ExportType, GgufFile, export_gguf, export_lora_gguf},
    save_checkpoint,
};
use crate::update::{UpdateBatch, UpdateReport};
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// How the engine takes new weights.
///
/// A LoRA model's base is frozen: only its adapters travel. With `Folder` each adapter
/// version is written as a PEFT folder `dir/<model id>-v<version>` and loaded under the
/// model's id (the engine must have been started on the same base); with `Restart` the
/// base is exported once to `dir/base.gguf`, each adapter version to
/// `dir/<model id>-v<version>.gguf`, and the engine restarted with them as `--lora`
/// files in slot order.
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
    /// Per slot, the version of the weights (or adapter) the engine holds.
    engine_versions: Vec<u64>,
    /// Per slot, the adapter as requests address it; `None` for a full model.
    adapters: Option<Vec<AdapterRef>>,
    /// With `Restart` and adapters: the base's export, made once.
    base_gguf: Option<PathBuf>,
    /// Seconds each weight sync took, in order.
    pub sync_seconds: Vec<f64>,
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
        Self::start_on(inner, client, parallel, sync, None)
    }

    /// [`Self::start`] with the engine process drmas started for it (SGLang, vLLM run by
    /// drmas): kept running with the backend, watched, and stopped with it.
    pub fn start_on(
        inner: ModelBackend,
        mut client: EngineClient,
        parallel: usize,
        sync: WeightSync,
        server: Option<ManagedServer>,
    ) -> Result<EngineBackend, BackendError> {
        // No id the model cannot embed reaches an update.
        client.set_vocab(usize::try_from(inner.model.config.vocab_size).unwrap_or(0));
        let adapters = inner.slots.iter().any(|s| s.adapter.is_some()).then(|| {
            inner
                .slots
                .iter()
                .enumerate()
                .map(|(index, s)| AdapterRef {
                    name: s.id.clone(),
                    index,
                })
                .collect()
        });
        let versions = inner.slots.iter().map(|s| s.version()).collect();
        let mut backend = EngineBackend {
            inner,
            client,
            parallel: parallel.max(1),
            sync,
            server,
            engine_versions: versions,
            adapters,
            base_gguf: None,
            sync_seconds: Vec::new(),
        };
        let slots: Vec<usize> = (0..backend.engine_versions.len()).collect();
        backend.push(&slots)?;
        Ok(backend)
    }

    pub fn url(&self) -> &str {
        self.client.url()
    }

    /// The managed engine process, if drmas runs it.
    pub fn server(&mut self) -> Option<&mut ManagedServer> {
        self.server.as_mut()
    }

    /// The version of slot `slot`'s weights (for a LoRA model, of its adapter) the
    /// engine holds.
    pub fn engine_version(&self, slot: usize) -> Result<u64, BackendError> {
        self.inner.slot(slot)?;
        Ok(self.engine_versions[slot])
    }

    /// Gives the engine the current weights of `slots` (every slot of a full model is
    /// slot 0), each as its version now.
    fn push(&mut self, slots: &[usize]) -> Result<(), BackendError> {
        let started = Instant::now();
        let versions = slots
            .iter()
            .map(|&s| self.inner.slot_version(s))
            .collect::<Result<Vec<u64>, BackendError>>()?;
        // Owned copies: the restarts below need `self` mutably.
        let target = match &self.sync {
            WeightSync::Folder { dir } => Target::Folder(dir.clone()),
            WeightSync::Restart {
                dir,
                template,
                kind,
                ..
            } => Target::Gguf(dir.clone(), template.clone(), *kind),
        };
        let adapters = self.adapters.clone();
        match (&adapters, target) {
            (None, Target::Folder(dir)) => {
                let (name, before) = (
                    version_name(versions[0]),
                    version_name(self.engine_versions[0]),
                );
                let out = dir.join(&name);
                save_checkpoint(&self.inner.model, &self.inner.source, &out)?;
                self.client.protocol().reload_from_disk(
                    &self.client,
                    &out.display().to_string(),
                    &versions[0].to_string(),
                )?;
                if before != name {
                    let _ = std::fs::remove_dir_all(dir.join(before));
                }
            }
            (Some(adapters), Target::Folder(dir)) => {
                for (&slot, &version) in slots.iter().zip(&versions) {
                    let a = &adapters[slot];
                    let out = dir.join(adapter_name(&a.name, version));
                    let index = self.inner.slots[slot].adapter.expect("a LoRA slot");
                    save_adapter(&self.inner.model, index, &self.inner.source, &out)?;
                    self.client.protocol().load_adapter(
                        &self.client,
                        &a.name,
                        &out.display().to_string(),
                    )?;
                    let before = self.engine_versions[slot];
                    if before != version {
                        let _ = std::fs::remove_dir_all(dir.join(adapter_name(&a.name, before)));
                    }
                }
            }
            (None, Target::Gguf(dir, template, kind)) => {
                std::fs::create_dir_all(&dir).map_err(|e| ModelError::io(&dir, e))?;
                let out = dir.join(format!("{}.gguf", version_name(versions[0])));
                let template = GgufFile::open(&template)?;
                let weights = self.inner.model.vs.variables().into_iter().collect();
                export_gguf(&template, &weights, kind, &out)?;
                self.restart(&out, &[])?;
                let before = self.engine_versions[0];
                if before != versions[0] {
                    let _ =
                        std::fs::remove_file(dir.join(format!("{}.gguf", version_name(before))));
                }
            }
            (Some(adapters), Target::Gguf(dir, template, kind)) => {
                std::fs::create_dir_all(&dir).map_err(|e| ModelError::io(&dir, e))?;
                let template = GgufFile::open(&template)?;
                let base = match &self.base_gguf {
                    Some(b) => b.clone(),
                    None => {
                        let b = dir.join("base.gguf");
                        let weights = self.inner.model.vs.variables().into_iter().collect();
                        export_gguf(&template, &weights, kind, &b)?;
                        b
                    }
                };
                for (&slot, &version) in slots.iter().zip(&versions) {
                    let index = self.inner.slots[slot].adapter.expect("a LoRA slot");
                    let a = &self.inner.model.adapters()[index];
                    let out = dir.join(format!(
                        "{}.gguf",
                        adapter_name(&adapters[slot].name, version)
                    ));
                    export_lora_gguf(
                        &template,
                        &a.params,
                        a.config.rank,
                        a.config.scale(),
                        kind,
                        &out,
                    )?;
                }
                // Every slot's newest export, in slot order: the engine's adapter ids.
                let files: Vec<PathBuf> = (0..adapters.len())
                    .map(|slot| {
                        let version = slots
                            .iter()
                            .position(|&s| s == slot)
                            .map_or(self.engine_versions[slot], |k| versions[k]);
                        dir.join(format!(
                            "{}.gguf",
                            adapter_name(&adapters[slot].name, version)
                        ))
                    })
                    .collect();
                let mut extra = vec!["--lora-init-without-apply".to_string()];
                for f in &files {
                    extra.push("--lora".into());
                    extra.push(f.display().to_string());
                }
                let names: Vec<String> = adapters.iter().map(|a| a.name.clone()).collect();
                self.restart(&base, &extra)?;
                self.base_gguf = Some(base);
                for (&slot, &version) in slots.iter().zip(&versions) {
                    let before = self.engine_versions[slot];
                    if before != version {
                        let old = dir.join(format!("{}.gguf", adapter_name(&names[slot], before)));
                        let _ = std::fs::remove_file(old);
                    }
                }
            }
        }
        for (&slot, &version) in slots.iter().zip(&versions) {
            self.engine_versions[slot] = version;
        }
        self.sync_seconds.push(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Stops the managed engine and starts it again on `model` with `extra` arguments,
    /// waiting until it serves.
    fn restart(&mut self, model: &Path, extra: &[String]) -> Result<(), BackendError> {
        let WeightSync::Restart {
            port,
            command,
            log,
            ready_within,
            ..
        } = &self.sync
        else {
            unreachable!("a restart is for managed engines")
        };
        if let Some(mut old) = self.server.take() {
            old.stop(Duration::from_secs(5));
        }
        let server = start_serving(
            command,
            extra,
            *port,
            model,
            log,
            &self.client,
            *ready_within,
        )?;
        self.server = Some(server);
        Ok(())
    }

    /// A dead managed engine, named with the end of its log.
    fn check_alive(&mut self) -> Result<(), BackendError> {
        if let Some(server) = &mut self.server
            && let Some(status) = server.exited()
        {
            return Err(EngineFailure::Ended {
                url: server.url(),
                status,
                log: server.log().to_path_buf(),
                tail: server.log_tail(10),
            }
            .into());
        }
        Ok(())
    }
}

/// Where a sync writes: HF or adapter folders, or GGUF exports (folder, template, type).
enum Target {
    Folder(PathBuf),
    Gguf(PathBuf, PathBuf, ExportType),
}

/// The file or folder name of model `id`'s adapter at `version`.
fn adapter_name(id: &str, version: u64) -> String {
    format!("{id}-{}", version_name(version))
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
        return Err(EngineFailure::Aborted(why.clone()).into());
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
    fn generate_slots(
        &mut self,
        requests: &[BackendRequest],
        slots: &[usize],
    ) -> Result<Vec<Generation>, BackendError> {
        self.generate_each(requests, slots)?.into_iter().collect()
    }

    fn generate_each(
        &mut self,
        requests: &[BackendRequest],
        slots: &[usize],
    ) -> Result<Vec<Result<Generation, BackendError>>, BackendError> {
        for &slot in slots {
            self.inner.slot(slot)?;
        }
        self.check_alive()?;
        let reqs: Vec<EngineRequest> = requests
            .iter()
            .zip(slots)
            .map(|(r, &slot)| {
                let mut e = engine_request(r);
                e.adapter = self.adapters.as_ref().and_then(|a| a.get(slot).cloned());
                e
            })
            .collect();
        let outs = self.client.generate_all(&reqs, self.parallel);
        if outs.iter().any(Result::is_err) {
            // A dead engine fails the batch, named with the end of its log.
            self.check_alive()?;
        }
        let stops = stop_strings(self.inner.tokenizer.as_deref(), requests);
        let mut gens = Vec::with_capacity(outs.len());
        for (i, ((out, request), &slot)) in outs.into_iter().zip(requests).zip(slots).enumerate() {
            let check = stops.as_ref().map(|s| (s as &dyn StopCheck, i));
            let version = self.engine_versions[slot];
            gens.push(
                out.map_err(BackendError::from)
                    .and_then(|out| finish_generation(request, out, check, version)),
            );
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

    fn version(&self, slot: usize) -> Result<u64, BackendError> {
        self.inner.version(slot)
    }

    fn update(&mut self, slot: usize, batch: &UpdateBatch) -> Result<UpdateReport, BackendError> {
        let mut report = self.inner.update(slot, batch)?;
        self.push(&[slot])?;
        report.engine_sync = self.sync_seconds.last().copied();
        Ok(report)
    }

    fn save(&mut self, slot: usize, dir: &Path) -> Result<(), BackendError> {
        self.inner.save(slot, dir)
    }

    fn gather_optimizer(
        &mut self,
        slot: usize,
        to: Option<super::backend::GatherTo>,
    ) -> Result<(), BackendError> {
        self.inner.gather_optimizer(slot, to)
    }

    fn restore(&mut self, slot: usize, dir: &Path) -> Result<(), BackendError> {
        self.inner.restore(slot, dir)?;
        self.push(&[slot])
    }

    fn logprobs(
        &mut self,
        slot: usize,
        pairs: &[ScoreRequest],
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        self.inner.logprobs(slot, pairs)
    }

    fn to_device(&mut self, device: tch::Device) -> Result<(), BackendError> {
        self.inner.to_device(device)
    }

    fn model_backend(&mut self) -> Option<&mut ModelBackend> {
        Some(&mut self.inner)
    }
}

/// Starts an engine server on `model` and waits until `client` finds it serving; a
/// server that ends or never answers is an error with the end of its log. Both the first
/// start and a restart with new weights go through here.
pub fn start_serving(
    command: &[String],
    extra: &[String],
    port: u16,
    model: &Path,
    log: &Path,
    client: &EngineClient,
    ready_within: Duration,
) -> Result<ManagedServer, EngineFailure> {
    let mut server = crate::engine::start_server(command, extra, port, model, log)
        .map_err(EngineFailure::Start)?;
    if let Err(source) = client.wait_ready(ready_within) {
        return Err(EngineFailure::NotReady {
            source,
            ended: server.exited(),
            log: server.log().to_path_buf(),
            tail: server.log_tail(10),
        });
    }
    Ok(server)
}
