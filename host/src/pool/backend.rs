//! What a model worker owns and serves: a [`Backend`]. The real one, [`ModelBackend`],
//! holds the decoder, its tokenizer (for stop strings) and, when the model trains, its
//! optimizer moments and frozen reference copy; tests script fakes that only generate.

use super::error::BackendError;
use crate::model::{
    DEFAULT_LOGITS_BUDGET, Decoder, Generation, GenerationRequest, ModelError, SamplingParams,
    SequencePair, StopStrings, TextTokenizer, generate_routed, load_weights, lora, memory,
    response_logprobs_per_row, save_checkpoint,
};
use crate::update::{
    AdamW, Collective, Optimizer, Shard, ShardedAdamW, TrainError, UpdateBatch, UpdateReport,
    UpdateSettings, run_update, run_update_full, run_update_sharded,
};
use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

/// One generation request as the worker receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendRequest {
    pub prompt: Vec<i64>,
    pub params: SamplingParams,
    /// Stop strings (the codec's text), besides `params.stop_token_ids`.
    pub stop: Vec<String>,
    /// See [`GenerationRequest::shared_prefix`].
    pub shared_prefix: usize,
}

/// A (prompt, response) pair to score, with the temperature its logits are divided by.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRequest {
    pub prompt: Vec<i64>,
    pub response: Vec<i64>,
    pub temperature: f64,
}

/// What a backend holds in host memory instead of on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadParts {
    /// The optimizer state (moments and master weights) of every model it holds.
    Optimizer,
    /// Everything: weights, adapters, optimizer state, reference copy.
    All,
}

/// Where a backend's tensors are and what moving them has cost so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Residency {
    /// Bytes of weights, adapters, optimizer state and reference on the device now.
    pub on_device: u64,
    /// Bytes parked in host memory now.
    pub on_host: u64,
    /// Totals since the start: bytes moved either way and seconds spent moving them.
    pub moved_bytes: u64,
    pub move_seconds: f64,
    pub offloads: u64,
    /// The worker's device (`cpu`, `cuda:0`).
    pub device: String,
    /// Bytes in use on that device now (CUDA: the whole device; CPU: this process).
    pub device_used: Option<u64>,
}

/// Everything a worker can be asked to do. Only generation is required; a backend that
/// cannot train says so with [`BackendError::Unsupported`].
///
/// A worker may serve several models on one base (LoRA adapters), each in its own
/// slot: every command about one model names its slot, and a slot the backend does not
/// have is refused ([`BackendError::UnknownSlot`]).
pub trait Backend: Send {
    /// Generates for every request, request `i` with the model in slot `slots[i]`.
    fn generate_slots(
        &mut self,
        requests: &[BackendRequest],
        slots: &[usize],
    ) -> Result<Vec<Generation>, BackendError>;

    /// [`Backend::generate_slots`] where each request may fail alone (an engine's bad
    /// answer to one request fails that request's episode, not its batch's); `Err` fails
    /// the whole batch. By default the batch succeeds or fails as one.
    fn generate_each(
        &mut self,
        requests: &[BackendRequest],
        slots: &[usize],
    ) -> Result<Vec<Result<Generation, BackendError>>, BackendError> {
        self.generate_slots(requests, slots)
            .map(|gens| gens.into_iter().map(Ok).collect())
    }

    /// Moves `parts` to host memory; they come back before the next command that
    /// needs them.
    fn offload(&mut self, _parts: OffloadParts) -> Result<(), BackendError> {
        Ok(())
    }

    fn residency(&self) -> Residency {
        Residency::default()
    }

    /// Brings back whatever [`Backend::offload`] parked.
    fn onload(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Refuses, before it joins a batch, a request this backend can never serve: longer
    /// than the model's context, or too large for memory even alone.
    fn admit(&self, _request: &BackendRequest) -> Result<(), BackendError> {
        Ok(())
    }

    /// Whether `rows` requests whose longest prompt has `prompt_len` tokens and which
    /// generate up to `new_tokens` each fit in memory as one batch. The worker starts a
    /// new batch rather than grow one past this.
    fn fits(&self, _rows: usize, _prompt_len: usize, _new_tokens: usize) -> bool {
        true
    }

    /// Updates slot `slot`'s model has received (the policy version of what it
    /// generates).
    fn version(&self, _slot: usize) -> Result<u64, BackendError> {
        Ok(0)
    }

    /// One training update of slot `slot`'s model on a batch of samples.
    fn update(&mut self, _slot: usize, _batch: &UpdateBatch) -> Result<UpdateReport, BackendError> {
        Err(BackendError::Unsupported)
    }

    /// Writes slot `slot`'s weights (HF layout, or its adapter) and optimizer state into
    /// the folder `dir`.
    fn save(&mut self, _slot: usize, _dir: &Path) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    /// Before a checkpoint, on every rank of a data-parallel job: slot `slot`'s sharded
    /// optimizer state is gathered from the ranks one unit at a time, and the rank given
    /// a [`GatherTo`] (rank 0) streams it into that file, which its next
    /// [`Backend::save`] moves into the checkpoint. Nothing to do for a state every rank
    /// holds whole.
    fn gather_optimizer(
        &mut self,
        _slot: usize,
        _to: Option<GatherTo>,
    ) -> Result<(), BackendError> {
        Ok(())
    }

    /// Loads into slot `slot` what [`Backend::save`] wrote.
    fn restore(&mut self, _slot: usize, _dir: &Path) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    /// log p of each response token given its prompt under slot `slot`'s current
    /// weights, at the given temperature (no grad).
    fn logprobs(
        &mut self,
        _slot: usize,
        _pairs: &[ScoreRequest],
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        Err(BackendError::Unsupported)
    }

    /// Moves the weights, the optimizer moments and the reference copy to `device`.
    fn to_device(&mut self, _device: tch::Device) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    /// The real model, for inspection (tests, `drmas` internals).
    fn model_backend(&mut self) -> Option<&mut ModelBackend> {
        None
    }
}

/// What a training model owns besides its weights.
pub struct Training {
    pub settings: UpdateSettings,
    /// What of the model's state each rank keeps only its share of.
    pub shard: Shard,
    pub optimizer: Optimizer,
    /// The frozen initial weights, when the loss has a KL term.
    pub reference: Option<Decoder>,
    /// Where a sharded optimizer's whole state was written for the next save, and its
    /// step count ([`Backend::gather_optimizer`], on rank 0).
    gathered: Option<(PathBuf, i64)>,
}

/// Where rank 0 writes a sharded optimizer's gathered state before a checkpoint: a file
/// beside the staged checkpoint's model folders (the save moves it in), and the model
/// whose state it is (the file's header names it, as every optimizer state's does).
#[derive(Debug, Clone)]
pub struct GatherTo {
    pub file: PathBuf,
    pub model: String,
}

/// One model a backend serves: the whole decoder, or one LoRA adapter on it.
pub struct Slot {
    /// The model's id (for the checkpoint's adapter config, and the worker's logs).
    pub id: String,
    /// The decoder's adapter, or `None` for the full model.
    pub adapter: Option<usize>,
    pub training: Option<Training>,
    version: u64,
}

impl Slot {
    /// Updates this slot's model has received.
    pub fn version(&self) -> u64 {
        self.version
    }
}

/// Tensors parked in host memory: each live handle with its host copy.
#[derive(Default)]
struct Parked {
    /// Variables (weights, adapters, the reference's) emptied on the device.
    weights: Vec<(tch::Tensor, tch::Tensor)>,
    /// Gradients emptied on the device (zero between updates: they come back as zeros).
    grads: Vec<(tch::Tensor, Vec<i64>)>,
    /// Whether the optimizer state is in host memory.
    optimizer: bool,
}

/// The real backend.
pub struct ModelBackend {
    pub model: Decoder,
    /// For stop strings; without one they are not checked.
    pub tokenizer: Option<Arc<TextTokenizer>>,
    /// The folder the model was loaded from: its config and tokenizer files go into
    /// every checkpoint (for LoRA, the base's folder).
    pub source: PathBuf,
    pub slots: Vec<Slot>,
    parked: Parked,
    residency: Residency,
    /// Offload even where the device is the CPU (the move is then a copy within host
    /// memory and saves nothing; tests use it to exercise the round trip).
    pub offload_on_cpu: bool,
    /// With data parallelism: this model's process group with its copies on the other
    /// ranks, used by its updates only (docs/distributed.md).
    pub collective: Option<super::collective::ModelGroup>,
}

pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
const WORKER_STATE_FILE: &str = "worker.json";
/// The optimizer state's header entry naming whose it is: the folder it was saved in,
/// which a checkpoint names after the model (`step-N/<model id>/`). A state moved to
/// another model's folder says so, even where the two states are equal (moments still
/// zero after a step without signal).
pub const OPTIMIZER_OWNER_KEY: &str = "drmas.model";

fn bytes_of(t: &tch::Tensor) -> u64 {
    (t.numel() * t.kind().elt_size_in_bytes()) as u64
}

impl ModelBackend {
    /// Slot `slot`, or the error that names the slots there are.
    pub fn slot(&self, slot: usize) -> Result<&Slot, BackendError> {
        self.slots.get(slot).ok_or(BackendError::UnknownSlot {
            slot,
            slots: self.slots.len(),
        })
    }

    fn slot_mut(&mut self, slot: usize) -> Result<&mut Slot, BackendError> {
        let slots = self.slots.len();
        self.slots
            .get_mut(slot)
            .ok_or(BackendError::UnknownSlot { slot, slots })
    }

    /// Updates slot `slot` has received (the policy version of what it generates).
    pub fn slot_version(&self, slot: usize) -> Result<u64, BackendError> {
        Ok(self.slot(slot)?.version)
    }

    /// A backend serving the full `model` (one slot, not trainable until
    /// [`ModelBackend::with_training`]).
    pub fn new(model: Decoder, tokenizer: Option<Arc<TextTokenizer>>, source: PathBuf) -> Self {
        Self {
            model,
            tokenizer,
            source,
            slots: vec![Slot {
                id: String::new(),
                adapter: None,
                training: None,
                version: 0,
            }],
            parked: Parked::default(),
            residency: Residency::default(),
            offload_on_cpu: false,
            collective: None,
        }
    }

    /// A backend serving one LoRA adapter per entry of `adapters` (model id, config) on
    /// the frozen `base`: slot `i` is adapter `i`, initialised from `seed`.
    pub fn with_adapters(
        mut base: Decoder,
        tokenizer: Option<Arc<TextTokenizer>>,
        source: PathBuf,
        adapters: &[(String, lora::LoraConfig)],
        seed: u64,
    ) -> Self {
        base.vs.freeze();
        let slots = adapters
            .iter()
            .map(|(id, config)| Slot {
                id: id.clone(),
                adapter: Some(base.add_adapter(config, seed)),
                training: None,
                version: 0,
            })
            .collect();
        let mut backend = Self::new(base, tokenizer, source);
        backend.slots = slots;
        backend
    }

    /// Makes every slot trainable: AdamW over the full model's weights, or over one
    /// adapter's tensors only (the base stays frozen), and `reference` kept frozen for
    /// a full model (it is only ever run under `no_grad`, so nothing accumulates on it).
    pub fn with_training(self, settings: UpdateSettings, reference: Option<Decoder>) -> Self {
        let each = vec![settings; self.slots.len()];
        self.with_training_each(each, reference)
    }

    /// [`Self::with_training`] with each slot's own settings (LoRA models on one base
    /// keep their own weight decay and loss normalisation).
    pub fn with_training_each(
        self,
        settings: Vec<UpdateSettings>,
        reference: Option<Decoder>,
    ) -> Self {
        let whole = vec![Shard::None; settings.len()];
        self.with_training_sharded(settings, &whole, reference)
            .expect("a whole optimizer needs no process group")
    }

    /// [`Self::with_training_each`] with each slot's `shard` mode: a slot with
    /// `Shard::Optimizer` keeps its shard of the optimizer state on this rank of the
    /// backend's [`Self::collective`], which must be set first.
    pub fn with_training_sharded(
        mut self,
        settings: Vec<UpdateSettings>,
        shards: &[Shard],
        reference: Option<Decoder>,
    ) -> Result<Self, BackendError> {
        assert_eq!(settings.len(), self.slots.len(), "one settings per slot");
        assert_eq!(shards.len(), self.slots.len(), "one shard mode per slot");
        let mut reference = reference;
        for (i, settings) in settings.into_iter().enumerate() {
            let params: Vec<(String, tch::Tensor)> = match self.slots[i].adapter {
                None => self.model.vs.variables().into_iter().collect(),
                Some(a) => self.model.adapters()[a]
                    .params
                    .iter()
                    .map(|(n, t)| (n.clone(), t.shallow_clone()))
                    .collect(),
            };
            let optimizer = match shards[i] {
                Shard::None => Optimizer::Whole(AdamW::new(params, settings.optimizer)),
                // "full" shards the optimizer state as "optimizer" does; its update
                // shards the weights too (run_update_full).
                Shard::Optimizer | Shard::Full => {
                    let group = self.collective.as_ref().ok_or(TrainError::Missing {
                        what: "a process group (a data-parallel job)",
                        when: "the optimizer state is sharded (shard = \"optimizer\" or \"full\")",
                    })?;
                    let (world_size, rank) = (group.world_size(), group.rank());
                    Optimizer::Sharded(ShardedAdamW::new(
                        params,
                        settings.optimizer,
                        world_size,
                        rank,
                    )?)
                }
            };
            self.slots[i].training = Some(Training {
                settings,
                shard: shards[i],
                optimizer,
                reference: reference.take(),
                gathered: None,
            });
        }
        Ok(self)
    }

    /// Slot `slot`'s training state (`None` for a slot that does not train or does not
    /// exist).
    pub fn training(&self, slot: usize) -> Option<&Training> {
        self.slots.get(slot)?.training.as_ref()
    }

    fn training_mut(&mut self, slot: usize) -> Result<&mut Training, BackendError> {
        self.slot_mut(slot)?
            .training
            .as_mut()
            .ok_or(BackendError::Unsupported)
    }

    /// Every variable the backend owns on its device: weights, adapters, references.
    fn variables(&self) -> Vec<tch::Tensor> {
        let mut out: Vec<tch::Tensor> = self.model.vs.variables().into_values().collect();
        for a in self.model.adapters() {
            out.extend(a.params.iter().map(|(_, t)| t.shallow_clone()));
        }
        for slot in &self.slots {
            if let Some(r) = slot.training.as_ref().and_then(|t| t.reference.as_ref()) {
                out.extend(r.vs.variables().into_values());
            }
        }
        out
    }

    fn moves(&self) -> bool {
        self.model.device().is_cuda() || self.offload_on_cpu
    }

    /// A host copy of `t` (pinned where the device is CUDA, so it comes back at full
    /// bus speed).
    fn to_host(t: &tch::Tensor) -> tch::Tensor {
        match t.device() {
            tch::Device::Cuda(i) => {
                let host = tch::Tensor::empty(t.size(), (t.kind(), tch::Device::Cpu))
                    .pin_memory(tch::Device::Cuda(i));
                let mut host = host;
                host.copy_(t);
                host
            }
            _ => t.copy(),
        }
    }

    /// Brings back from host memory what generation and log-probs need: the weights
    /// (variables). An entry leaves the parked list only once it is back, so a failure
    /// (out of memory) leaves the rest parked, never lost.
    fn bring_back_weights(&mut self) -> Result<(), BackendError> {
        if self.parked.weights.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let device = self.model.device();
        let _guard = tch::no_grad_guard();
        let mut moved = 0;
        while let Some((live, host)) = self.parked.weights.last_mut() {
            let back = host.f_to_device(device).map_err(ModelError::from)?;
            moved += bytes_of(host);
            live.set_data(&back);
            self.parked.weights.pop();
        }
        self.note_move(moved, started);
        Ok(())
    }

    /// Brings back everything an update, a save or a move needs: the weights, then the
    /// gradient buffers (zeros: they are zero between updates) and the optimizer state,
    /// kept parked until each is back as [`Self::bring_back_weights`] does.
    fn bring_back_all(&mut self) -> Result<(), BackendError> {
        self.bring_back_weights()?;
        if self.parked.grads.is_empty() && !self.parked.optimizer {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let device = self.model.device();
        let _guard = tch::no_grad_guard();
        let mut moved = 0;
        while let Some((grad, size)) = self.parked.grads.last_mut() {
            let zeros = tch::Tensor::f_zeros(size.as_slice(), (grad.kind(), device))
                .map_err(ModelError::from)?;
            grad.set_data(&zeros);
            self.parked.grads.pop();
        }
        if self.parked.optimizer {
            for slot in &mut self.slots {
                if let Some(t) = &mut slot.training {
                    moved += t.optimizer.state_bytes();
                    // A no-op for a tensor already there (a move cut short).
                    t.optimizer.map_state(|s| s.to_device(device));
                }
            }
            self.parked.optimizer = false;
        }
        self.note_move(moved, started);
        Ok(())
    }

    /// Writes slot `slot`'s weights (or adapter) and optimizer state into `dir`.
    fn save_slot(&mut self, slot: usize, dir: &Path) -> Result<(), BackendError> {
        let (adapter, version) = {
            let s = self.slot(slot)?;
            (s.adapter, s.version)
        };
        match adapter {
            None => save_checkpoint(&self.model, &self.source, dir)?,
            Some(a) => save_adapter(&self.model, a, &self.source, dir)?,
        }
        let t = self.training_mut(slot)?;
        let path = dir.join(OPTIMIZER_FILE);
        let steps = match &t.optimizer {
            Optimizer::Whole(o) => {
                let (tensors, steps) = o.state();
                let owner = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                crate::model::write_tensors_with(&path, &tensors, (OPTIMIZER_OWNER_KEY, &owner))?;
                steps
            }
            // Written whole by the gather, as one process writes it: any world size
            // resumes from it.
            Optimizer::Sharded(_) => {
                let (file, steps) = t.gathered.take().ok_or(TrainError::Missing {
                    what: "the optimizer state gathered from every rank",
                    when: "a sharded optimizer's model is saved",
                })?;
                std::fs::rename(&file, &path).map_err(|e| ModelError::io(&file, e))?;
                steps
            }
        };
        let state = serde_json::json!({ "optimizer_steps": steps, "policy_version": version });
        crate::output::write_atomic(
            &dir.join(WORKER_STATE_FILE),
            serde_json::to_string_pretty(&state)
                .expect("json")
                .as_bytes(),
        )
        .map_err(|e| ModelError::io(dir.join(WORKER_STATE_FILE), e))?;
        Ok(())
    }

    fn note_move(&mut self, bytes: u64, started: std::time::Instant) {
        super::synchronize(self.model.device());
        self.residency.moved_bytes += bytes;
        self.residency.move_seconds += started.elapsed().as_secs_f64();
    }

    /// Bytes of weights, adapters, optimizer state and reference on the device and in
    /// host memory.
    fn sizes(&self) -> (u64, u64) {
        let parked: u64 = self.parked.weights.iter().map(|(_, h)| bytes_of(h)).sum();
        let optimizer: u64 = self
            .slots
            .iter()
            .filter_map(|s| s.training.as_ref())
            .map(|t| t.optimizer.state_bytes())
            .sum();
        let live: u64 = self.variables().iter().map(bytes_of).sum();
        let (opt_device, opt_host) = if self.parked.optimizer {
            (0, optimizer)
        } else {
            (optimizer, 0)
        };
        (live + opt_device, parked + opt_host)
    }
}

impl Backend for ModelBackend {
    fn generate_slots(
        &mut self,
        requests: &[BackendRequest],
        slots: &[usize],
    ) -> Result<Vec<Generation>, BackendError> {
        let adapters = slots
            .iter()
            .map(|&s| Ok(self.slot(s)?.adapter))
            .collect::<Result<Vec<Option<usize>>, BackendError>>()?;
        self.bring_back_weights()?;
        let reqs: Vec<GenerationRequest> = requests
            .iter()
            .map(|r| GenerationRequest {
                prompt: r.prompt.clone(),
                params: r.params.clone(),
                shared_prefix: r.shared_prefix,
            })
            .collect();
        let stops = self
            .tokenizer
            .as_deref()
            .filter(|_| requests.iter().any(|r| !r.stop.is_empty()))
            .map(|tokenizer| StopStrings {
                tokenizer,
                stops: requests.iter().map(|r| r.stop.clone()).collect(),
            });
        let check = stops.as_ref().map(|s| s as &dyn crate::model::StopCheck);
        let mode = self.model.mode();
        mode.train(false);
        let mut gens = generate_routed(&self.model, &reqs, Some(&adapters), check)?;
        drop(mode);
        for (g, &s) in gens.iter_mut().zip(slots) {
            g.policy_version = self.slots[s].version;
        }
        Ok(gens)
    }

    fn offload(&mut self, parts: OffloadParts) -> Result<(), BackendError> {
        if !self.moves() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let device = self.model.device();
        let _guard = tch::no_grad_guard();
        let mut moved = 0;
        let has_optimizer = self.slots.iter().any(|s| s.training.is_some());
        if !self.parked.optimizer && has_optimizer {
            // Marked first: a move cut short is completed by the next bring-back.
            self.parked.optimizer = true;
            for slot in &mut self.slots {
                if let Some(t) = &mut slot.training {
                    moved += t.optimizer.state_bytes();
                    t.optimizer.map_state(Self::to_host);
                }
            }
        }
        if parts == OffloadParts::All && self.parked.weights.is_empty() {
            for mut live in self.variables() {
                let mut grad = live.grad();
                if grad.defined() {
                    // Zero between updates: nothing to copy, only memory to give back.
                    let size = grad.size();
                    grad.set_data(&tch::Tensor::empty([0], (grad.kind(), device)));
                    self.parked.grads.push((grad, size));
                }
                let host = Self::to_host(&live);
                moved += bytes_of(&host);
                // Emptied in place: every handle to the variable (the decoder's, the
                // optimizer's) sees the same storage come back.
                live.set_data(&tch::Tensor::empty([0], (live.kind(), device)));
                self.parked.weights.push((live, host));
            }
        }
        self.residency.offloads += 1;
        self.note_move(moved, started);
        Ok(())
    }

    fn onload(&mut self) -> Result<(), BackendError> {
        self.bring_back_all()
    }

    fn residency(&self) -> Residency {
        let (on_device, on_host) = self.sizes();
        let device = self.model.device();
        Residency {
            device: match device {
                tch::Device::Cuda(i) => format!("cuda:{i}"),
                _ => "cpu".into(),
            },
            device_used: memory::device_used(device),
            on_device,
            on_host,
            ..self.residency.clone()
        }
    }

    fn admit(&self, request: &BackendRequest) -> Result<(), BackendError> {
        let (prompt, new) = (
            request.prompt.len() as u64,
            request.params.max_new_tokens as u64,
        );
        self.model.check_context(
            || format!("prompt of {prompt} tokens + max_new_tokens {new}"),
            prompt.saturating_add(new),
        )?;
        memory::check_generation(
            &self.model.config,
            self.model.kind(),
            self.model.device(),
            1,
            prompt,
            new,
        )?;
        Ok(())
    }

    fn fits(&self, rows: usize, prompt_len: usize, new_tokens: usize) -> bool {
        memory::generation_fits(
            &self.model.config,
            self.model.kind(),
            self.model.device(),
            rows as u64,
            prompt_len as u64,
            new_tokens as u64,
        )
    }

    fn version(&self, slot: usize) -> Result<u64, BackendError> {
        self.slot_version(slot)
    }

    fn update(&mut self, slot: usize, batch: &UpdateBatch) -> Result<UpdateReport, BackendError> {
        self.slot(slot)?;
        let vocab = self.model.config.vocab_size;
        for (i, s) in batch.samples.iter().enumerate() {
            check_vocab(vocab, "sample", i, &s.prompt, &s.response)?;
        }
        self.bring_back_all()?;
        let Self {
            model,
            slots,
            collective,
            ..
        } = self;
        let model = &*model;
        let slot = &mut slots[slot];
        let t = slot.training.as_mut().ok_or(BackendError::Unsupported)?;
        // Through the slot's adapter, with LoRA dropout, until the update returns.
        let mode = model.mode();
        mode.route_all(slot.adapter);
        mode.train(true);
        if let Some(g) = collective.as_mut() {
            // Counted from here: a checkpoint's gather is not the update's.
            g.take_traffic();
        }
        let sync = collective
            .as_mut()
            .map(|g| g as &mut dyn crate::update::Collective);
        // A LoRA adapter's KL reference is the frozen base it sits on.
        let reference = match (&t.reference, slot.adapter) {
            (Some(r), _) => Some(r),
            (None, Some(_)) if t.settings.loss.kl.is_some() => Some(model),
            (None, _) => None,
        };
        t.gathered = None;
        let report = match &mut t.optimizer {
            Optimizer::Whole(o) => run_update(model, o, reference, batch, &t.settings, sync),
            Optimizer::Sharded(o) => match sync {
                Some(sync) if t.shard == Shard::Full => {
                    run_update_full(model, o, reference, batch, &t.settings, sync)
                }
                Some(sync) => run_update_sharded(model, o, reference, batch, &t.settings, sync),
                None => Err(TrainError::Missing {
                    what: "a process group (a data-parallel job)",
                    when: "the optimizer state is sharded (shard = \"optimizer\")",
                }),
            },
        };
        drop(mode);
        let report = report?;
        if let Some(w) = report.weights {
            tracing::info!(
                model = %slot.id,
                shard_bytes = w.shard,
                most_gathered_bytes = w.most_gathered,
                whole_bytes = w.whole,
                "weights sharded during the update: this rank held its shard and the units it gathered"
            );
        }
        if let Some(g) = collective.as_mut() {
            let t = g.take_traffic();
            let training = slot.training.as_ref().ok_or(BackendError::Unsupported)?;
            // What stays allocated between updates: the parameters' own gradients (a
            // sharded update reduces them into the optimizer's shard), and the state.
            let grad_bytes: u64 = training
                .optimizer
                .params()
                .iter()
                .map(|(_, p)| p.grad())
                .filter(tch::Tensor::defined)
                .map(|g| (g.numel() * g.kind().elt_size_in_bytes()) as u64)
                .sum();
            tracing::info!(
                model = %slot.id,
                held_grad_bytes = grad_bytes,
                optimizer_bytes = training.optimizer.state_bytes(),
                all_reduce_calls = t.all_reduce.0,
                all_reduce_bytes = t.all_reduce.1,
                reduce_scatter_calls = t.reduce_scatter.0,
                reduce_scatter_bytes = t.reduce_scatter.1,
                all_gather_calls = t.all_gather.0,
                all_gather_bytes = t.all_gather.1,
                "the update's collectives, and what the rank holds after it"
            );
        }
        if report.applied > 0 {
            slot.version += 1;
        }
        Ok(report)
    }

    fn save(&mut self, slot: usize, dir: &Path) -> Result<(), BackendError> {
        self.slot(slot)?;
        // What was in host memory goes back there after the save, so a checkpoint does
        // not bring every model onto the device at once.
        let was_parked = (!self.parked.weights.is_empty(), self.parked.optimizer);
        self.bring_back_all()?;
        let saved = self.save_slot(slot, dir);
        match was_parked {
            (true, _) => self.offload(OffloadParts::All)?,
            (false, true) => self.offload(OffloadParts::Optimizer)?,
            _ => {}
        }
        saved
    }

    fn gather_optimizer(&mut self, slot: usize, to: Option<GatherTo>) -> Result<(), BackendError> {
        self.slot(slot)?;
        let Self {
            slots, collective, ..
        } = self;
        let Some(t) = slots[slot].training.as_mut() else {
            return Ok(());
        };
        let Optimizer::Sharded(o) = &t.optimizer else {
            return Ok(());
        };
        let group = collective.as_mut().ok_or(TrainError::Missing {
            what: "a process group (a data-parallel job)",
            when: "the optimizer state is sharded (shard = \"optimizer\")",
        })?;
        // Rank 0 writes the checkpoint (docs/distributed.md, "Writes"); the others take
        // part in the gathers.
        let mut file = to
            .as_ref()
            .map(|to| {
                crate::model::StreamedTensors::create(
                    &to.file,
                    o.state_entries(),
                    (OPTIMIZER_OWNER_KEY, &to.model),
                )
            })
            .transpose()?;
        let steps = o.write_state(group, file.as_mut())?;
        if let (Some(file), Some(to)) = (file, to) {
            file.finish()?;
            t.gathered = Some((to.file, steps));
        }
        Ok(())
    }

    fn restore(&mut self, slot: usize, dir: &Path) -> Result<(), BackendError> {
        let adapter = self.slot(slot)?.adapter;
        self.bring_back_all()?;
        match adapter {
            None => {
                check_saved_config(dir, &self.model.config)?;
                load_weights(&mut self.model, dir)?
            }
            Some(a) => load_adapter_dir(&mut self.model, a, dir)?,
        }
        let state_path = dir.join(WORKER_STATE_FILE);
        let text =
            std::fs::read_to_string(&state_path).map_err(|e| ModelError::io(&state_path, e))?;
        let state: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ModelError::io(&state_path, e))?;
        let steps = state["optimizer_steps"].as_i64().unwrap_or(0);
        let version = state["policy_version"].as_u64().unwrap_or(0);
        let path = dir.join(OPTIMIZER_FILE);
        let device = self.model.device();
        match &mut self.training_mut(slot)?.optimizer {
            Optimizer::Whole(o) => {
                let tensors =
                    tch::Tensor::read_safetensors(&path).map_err(|e| ModelError::io(&path, e))?;
                let tensors: Vec<(String, tch::Tensor)> = tensors
                    .into_iter()
                    .map(|(n, t)| (n, t.to_device(device)))
                    .collect();
                o.load_state(&tensors, steps)?
            }
            // The whole state, whatever world size or mode wrote it, read where it lies
            // in the file: this rank copies its shard's slices to its device.
            Optimizer::Sharded(o) => {
                let mapped = crate::model::MappedTensors::open(&path)?;
                o.load_state(mapped.tensors(), steps)?
            }
        }
        self.slots[slot].version = version;
        Ok(())
    }

    fn logprobs(
        &mut self,
        slot: usize,
        pairs: &[ScoreRequest],
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        let adapter = self.slot(slot)?.adapter;
        let vocab = self.model.config.vocab_size;
        for (i, p) in pairs.iter().enumerate() {
            check_vocab(vocab, "pair", i, &p.prompt, &p.response)?;
        }
        self.bring_back_weights()?;
        let mode = self.model.mode();
        mode.route_all(adapter);
        mode.train(false);
        let _guard = tch::no_grad_guard();
        let mut out = Vec::with_capacity(pairs.len());
        // One pair at a time keeps memory to one sequence; scoring is not the hot path.
        for p in pairs {
            let pair = [SequencePair {
                prompt: &p.prompt,
                response: &p.response,
            }];
            let lp = response_logprobs_per_row(
                &self.model,
                &pair,
                &[p.temperature],
                false,
                DEFAULT_LOGITS_BUDGET,
            )?;
            out.push(lp.row(0, p.response.len()));
        }
        Ok(out)
    }

    fn to_device(&mut self, device: tch::Device) -> Result<(), BackendError> {
        self.bring_back_all()?;
        self.model.to_device(device);
        for slot in &mut self.slots {
            if let Some(t) = &mut slot.training {
                t.optimizer.to_device(device);
                if let Some(r) = &mut t.reference {
                    r.to_device(device);
                }
            }
        }
        Ok(())
    }

    fn model_backend(&mut self) -> Option<&mut ModelBackend> {
        Some(self)
    }
}

/// A saved model's `config.json` must agree with its own weights (the sizes in the
/// safetensors headers) and with the model it is loaded into: a config edited after
/// the save, or the folder of another model, is refused naming the first field that
/// differs.
fn check_saved_config(dir: &Path, own: &crate::model::ModelConfig) -> Result<(), ModelError> {
    let saved = crate::model::checked_config(dir)?;
    match saved.first_difference(own) {
        Some((field, here, theirs)) => Err(ModelError::Config {
            path: dir.join("config.json"),
            field: field.into(),
            message: format!("{here} here, but the model it is loaded into has {theirs}"),
        }),
        None => Ok(()),
    }
}

/// Writes adapter `slot` of `model` into `dir` in PEFT's layout (staged and swapped in
/// whole), with the base's tokenizer files beside it so the folder also serves as a
/// tokenizer source.
pub fn save_adapter(
    model: &Decoder,
    slot: usize,
    base: &Path,
    dir: &Path,
) -> Result<(), ModelError> {
    let staged = crate::output::StagedDir::new(dir).map_err(|e| ModelError::io(dir, e))?;
    let a = &model.adapters()[slot];
    let base_name = base.display().to_string();
    lora::write_peft(staged.path(), &a.config, &base_name, &a.params)?;
    for name in [
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ] {
        let from = base.join(name);
        if from.is_file() {
            std::fs::copy(&from, staged.path().join(name)).map_err(|e| ModelError::io(&from, e))?;
        }
    }
    crate::model::mark_as_made(staged.path())?;
    staged.commit().map_err(|e| ModelError::io(dir, e))
}

/// Loads the PEFT adapter in `dir` into `slot`, refusing one whose configuration is not
/// the slot's (rank, alpha, targets) by key.
pub fn load_adapter_dir(model: &mut Decoder, slot: usize, dir: &Path) -> Result<(), ModelError> {
    let config = lora::read_peft_config(dir)?;
    let own = &model.adapters()[slot].config;
    if config.rank != own.rank
        || config
            .targets
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            != own.targets.iter().collect()
        || config.alpha != own.alpha
        || config.rslora != own.rslora
    {
        return Err(ModelError::Config {
            path: dir.join(lora::ADAPTER_CONFIG),
            field: "lora".into(),
            message: format!(
                "rank {}, alpha {}, targets {:?} differ from the experiment's rank {}, alpha {}, targets {:?}",
                config.rank, config.alpha, config.targets, own.rank, own.alpha, own.targets
            ),
        });
    }
    let tensors = lora::read_peft_tensors(dir)?;
    model.load_adapter(slot, &tensors, &dir.join(lora::ADAPTER_WEIGHTS))
}

/// Every id of a prompt and response within `0..vocab`: an id outside it is an error
/// naming the item (`what` `index`), the part, the position and the id, where libtorch's
/// embedding would abort the worker thread.
fn check_vocab(
    vocab: i64,
    what: &'static str,
    index: usize,
    prompt: &[i64],
    response: &[i64],
) -> Result<(), BackendError> {
    for (part, ids) in [("prompt", prompt), ("response", response)] {
        if let Some((position, &id)) = ids
            .iter()
            .enumerate()
            .find(|(_, t)| !(0..vocab).contains(*t))
        {
            return Err(BackendError::TokenOutOfVocab {
                what,
                index,
                part,
                position,
                id,
                vocab,
            });
        }
    }
    Ok(())
}
