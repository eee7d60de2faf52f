//! AdamW sharded across a model's ranks (ZeRO-2, `[[models]] shard = "optimizer"`;
//! docs/distributed.md, "Sharding"). Each rank keeps, per unit of the flat layout
//! ([`super::flat`]), only its shard's AdamW moments and f32 master weights. After the
//! backward each unit's gradient is reduce-scattered, so a rank holds its shard of the
//! ranks' summed gradient; the clip's global norm is the sum over the ranks of the
//! shards' squared norms (padding adds zero); the rank steps its shard with
//! [`super::AdamW`]'s arithmetic, element for element; and the updated shards are
//! all-gathered into the model's whole weights, which every rank still holds.
//!
//! Its saved state is the whole one [`super::AdamW::state`] writes, gathered from the
//! ranks one unit at a time and streamed into the file by the rank that writes it: any
//! world size, sharded or not, reads it back (each rank reading its shard's slices of
//! the file mapped into memory).

use super::{
    error::TrainError,
    flat::{FlatError, FlatLayout, FlatUnit, UnitKind},
    optimizer::{AdamWConfig, SquaresOnDevice, adamw_update, check_saved_state, warn_rebuilt},
    sync::{Collective, sum_f64},
};
use crate::model::{StreamedTensors, TensorEntry};
use std::collections::HashMap;
use tch::{Device, Kind, Tensor};

/// One unit's optimizer state on this rank: f32 tensors of the unit's shard length.
#[derive(Debug)]
struct UnitShard {
    /// The unit's parameters, as indices into [`ShardedAdamW::params`], in its order.
    params: Vec<usize>,
    /// The parameters' dtype (a flat buffer has one).
    kind: Kind,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    /// f32 master weights where the parameters are not f32. f32 parameters are their
    /// own master, as in [`super::AdamW`]: the shard is read from them at each step.
    master: Option<Tensor>,
    /// The ranks' summed gradient of the optimizer step so far, this rank's shard, in
    /// the parameters' dtype (as [`super::AdamW`] keeps, clips and sums gradients);
    /// `None` before the step's first reduction.
    grad: Option<Tensor>,
    /// With the weights sharded too (`shard = "full"`), the current agent's reduced
    /// gradient, this rank's shard: added to by every micro-batch, moved into `grad` at
    /// the agent's end ([`ShardedAdamW::finish_agent`]).
    agent: Option<Tensor>,
}

/// AdamW over a model's parameters whose state is sharded across the ranks of its
/// process group. The parameters stay whole on every rank.
#[derive(Debug)]
pub struct ShardedAdamW {
    params: Vec<(String, Tensor)>,
    layout: FlatLayout,
    rank: usize,
    units: Vec<UnitShard>,
    step: i64,
    config: AdamWConfig,
}

impl ShardedAdamW {
    /// `params` (shallow clones of the trainable variables, kept sorted by name as
    /// [`super::AdamW::new`] keeps them) laid out over `world_size` ranks; this rank,
    /// `rank`, keeps its shard of the state. Each unit's parameters must share a dtype
    /// and device.
    pub fn new(
        mut params: Vec<(String, Tensor)>,
        config: AdamWConfig,
        world_size: usize,
        rank: usize,
    ) -> Result<Self, TrainError> {
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let layout = FlatLayout::new(&params, world_size)?;
        if rank >= world_size {
            return Err(FlatError::Rank { rank, world_size }.into());
        }
        let index: HashMap<&str, usize> = params
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.as_str(), i))
            .collect();
        let mut units = Vec::with_capacity(layout.units.len());
        for unit in &layout.units {
            let tensors = unit.resolve(&params)?;
            let (kind, device) = unit.common(&tensors)?;
            let zeros = || Tensor::zeros([unit.shard_numel()], (Kind::Float, device));
            let master = (kind != Kind::Float).then(|| read_shard(unit, rank, &tensors, device));
            units.push(UnitShard {
                params: unit.params.iter().map(|p| index[p.name.as_str()]).collect(),
                kind,
                exp_avg: zeros(),
                exp_avg_sq: zeros(),
                master: master.transpose()?,
                grad: None,
                agent: None,
            });
        }
        Ok(ShardedAdamW {
            params,
            layout,
            rank,
            units,
            step: 0,
            config,
        })
    }

    /// The parameters, name-sorted, as given to [`ShardedAdamW::new`].
    pub fn params(&self) -> &[(String, Tensor)] {
        &self.params
    }

    /// The flat layout the state is sharded by.
    pub fn layout(&self) -> &FlatLayout {
        &self.layout
    }

    /// This rank's place: which shard of each unit it keeps.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Steps taken (restored by [`ShardedAdamW::load_state`]).
    pub fn steps(&self) -> i64 {
        self.step
    }

    /// Zeroes the parameters' gradients and forgets the step's reduced shards.
    pub fn zero_grad(&mut self) {
        for (_, p) in &mut self.params {
            p.zero_grad();
        }
        for u in &mut self.units {
            u.grad = None;
            u.agent = None;
        }
    }

    /// With the weights sharded (`shard = "full"`): unit `u`'s whole gradient `flat` (its
    /// padded length, the parameters' dtype) from this rank's micro-batch,
    /// reduce-scattered; the ranks' sum, this rank's shard, is added to the current
    /// agent's. Every rank of the group calls it for the same units in the same order.
    pub fn add_unit_grad(
        &mut self,
        sync: &mut dyn Collective,
        u: usize,
        flat: &Tensor,
    ) -> Result<(), TrainError> {
        self.check_group(sync)?;
        let _guard = tch::no_grad_guard();
        let unit = &self.layout.units[u];
        let state = &mut self.units[u];
        let mut mine = Tensor::zeros([unit.shard_numel()], (state.kind, flat.device()));
        sync.reduce_scatter_sum(flat, &mut mine)?;
        match &mut state.agent {
            Some(g) => *g += &mine,
            None => state.agent = Some(mine),
        }
        Ok(())
    }

    /// Unit `u`'s gradients as the parameters hold them (a parameter without one counts
    /// as zeros) reduce-scattered into the current agent's shard, as
    /// [`Self::add_unit_grad`], and zeroed.
    pub fn add_held_grads(
        &mut self,
        sync: &mut dyn Collective,
        u: usize,
    ) -> Result<(), TrainError> {
        let flat = {
            let unit = &self.layout.units[u];
            let tensors: Vec<&Tensor> = self.units[u]
                .params
                .iter()
                .map(|&i| &self.params[i].1)
                .collect();
            let flat = unit.flatten_grads(&tensors)?;
            for t in tensors {
                let mut g = t.grad();
                if g.defined() {
                    let _ = g.zero_();
                }
            }
            flat
        };
        self.add_unit_grad(sync, u, &flat)
    }

    /// The end of an agent's micro-batches with the weights sharded: its reduced shards
    /// join the step's. Returns their Σ x² on this rank (the agent's norm is the ranks'
    /// sum), as [`Self::reduce_gradients`] does.
    pub fn finish_agent(&mut self) -> f64 {
        let _guard = tch::no_grad_guard();
        let mut squares = SquaresOnDevice::new(0.0);
        for state in &mut self.units {
            let Some(mine) = state.agent.take() else {
                continue;
            };
            squares.add(&mine);
            match &mut state.grad {
                Some(g) => *g += &mine,
                None => state.grad = Some(mine),
            }
        }
        squares.read()
    }

    /// Reduce-scatters each unit's gradient (a parameter without one counts as zeros):
    /// the ranks' sum of it, this rank's shard, is added to the step's, and the
    /// parameters' own gradients are zeroed, ready for the next agent's. Returns the
    /// Σ x² of this reduction's shards on this rank (an agent's norm is the ranks' sum).
    pub fn reduce_gradients(&mut self, sync: &mut dyn Collective) -> Result<f64, TrainError> {
        self.check_group(sync)?;
        let _guard = tch::no_grad_guard();
        let mut squares = SquaresOnDevice::new(0.0);
        for (unit, state) in self.layout.units.iter().zip(&mut self.units) {
            let tensors: Vec<&Tensor> = state.params.iter().map(|&i| &self.params[i].1).collect();
            let flat = unit.flatten_grads(&tensors)?;
            let mut mine = Tensor::zeros([unit.shard_numel()], (state.kind, flat.device()));
            sync.reduce_scatter_sum(&flat, &mut mine)?;
            drop(flat);
            squares.add(&mine);
            match &mut state.grad {
                Some(g) => *g += &mine,
                None => state.grad = Some(mine),
            }
            for t in tensors {
                let mut g = t.grad();
                if g.defined() {
                    let _ = g.zero_();
                }
            }
        }
        Ok(squares.read())
    }

    /// The global L2 norm of the step's reduced gradient (the ranks' sum of their
    /// shards' Σ x²), before clipping; scales the shards so that it is at most
    /// `max_norm` as [`super::AdamW::clip_grad_norm`] does. Every rank gets the same norm.
    pub fn clip_grad_norm(
        &mut self,
        sync: &mut dyn Collective,
        max_norm: f64,
    ) -> Result<f64, TrainError> {
        self.check_group(sync)?;
        let _guard = tch::no_grad_guard();
        let mut on_device = SquaresOnDevice::new(-0.0);
        for g in self.units.iter().filter_map(|u| u.grad.as_ref()) {
            on_device.add(g);
        }
        let mut squares = [on_device.read()];
        sum_f64(sync, &mut squares)?;
        let norm = squares[0].sqrt();
        let coef = max_norm / (norm + 1e-6);
        if coef < 1.0 {
            for g in self.units.iter_mut().filter_map(|u| u.grad.as_mut()) {
                *g *= coef;
            }
        }
        Ok(norm)
    }

    /// One AdamW step at learning rate `lr` on this rank's shards (a unit without a
    /// reduced gradient steps on zeros, as a rank of a data-parallel job does with a
    /// parameter no sample reached), then every unit's shards gathered into the
    /// parameters.
    pub fn step(&mut self, sync: &mut dyn Collective, lr: f64) -> Result<(), TrainError> {
        self.check_group(sync)?;
        let _guard = tch::no_grad_guard();
        self.step += 1;
        for u in 0..self.units.len() {
            let mine = self.step_unit(u, lr, None)?;
            let unit = &self.layout.units[u];
            let state = &self.units[u];
            let tensors: Vec<&Tensor> = state.params.iter().map(|&i| &self.params[i].1).collect();
            let mut whole = Tensor::empty([unit.padded], (state.kind, mine.device()));
            sync.all_gather_into_tensor(&mut whole, &mine)?;
            unit.unflatten(&whole, &tensors)?;
        }
        Ok(())
    }

    /// [`Self::step`] with the weights sharded too (`shard = "full"`): each unit's new
    /// weights, this rank's shard, replace `weights`' (whose layout must be this
    /// optimizer's); the units are not gathered (the update gathers them when it needs
    /// them). f32 weights are their own masters: a unit's shard is read from `weights`.
    pub fn step_sharded(
        &mut self,
        sync: &mut dyn Collective,
        lr: f64,
        weights: &mut super::gathered::ShardedWeights,
    ) -> Result<(), TrainError> {
        self.check_group(sync)?;
        if weights.layout() != &self.layout {
            return Err(TrainError::State {
                name: "weights".into(),
                message: "the sharded weights are not laid out as the optimizer's parameters"
                    .into(),
            });
        }
        let _guard = tch::no_grad_guard();
        self.step += 1;
        for u in 0..self.units.len() {
            let mine = self.step_unit(u, lr, Some(weights.shard(u)))?;
            weights.set_shard(u, mine)?;
        }
        Ok(())
    }

    /// AdamW's arithmetic on unit `u`'s shard at learning rate `lr` (a unit without a
    /// reduced gradient steps on zeros); returns the shard's new weights in the
    /// parameters' dtype (rounded as AdamW rounds a master into its parameter). An f32
    /// unit's current weights are read from `weights` (the unit's shard) or, without
    /// it, from the whole parameters.
    fn step_unit(
        &mut self,
        u: usize,
        lr: f64,
        weights: Option<&Tensor>,
    ) -> Result<Tensor, TrainError> {
        let unit = &self.layout.units[u];
        let state = &mut self.units[u];
        let device = state.exp_avg.device();
        let grad = match state.grad.take() {
            Some(g) => g.to_kind(Kind::Float),
            None => Tensor::zeros([unit.shard_numel()], (Kind::Float, device)),
        };
        let mut p = match (&state.master, weights) {
            (Some(m), _) => m.shallow_clone(),
            (None, Some(w)) => w.copy(),
            (None, None) => {
                let tensors: Vec<&Tensor> =
                    state.params.iter().map(|&i| &self.params[i].1).collect();
                read_shard(unit, self.rank, &tensors, device)?
            }
        };
        // AdamW::step's operations, in its order, on the shard.
        adamw_update(
            &mut p,
            &grad,
            &mut state.exp_avg,
            &mut state.exp_avg_sq,
            &self.config,
            self.step,
            lr,
        );
        Ok(p.to_kind(state.kind))
    }

    /// The whole state, gathered from every rank (every rank must call it), in the
    /// names, shapes and order of [`super::AdamW::state`]: `exp_avg.<param>`,
    /// `exp_avg_sq.<param>` and `master.<param>` for parameters that are not f32, in
    /// host memory. What a checkpoint holds, whatever the world size or `shard` mode
    /// ([`Self::write_state`] writes it without holding it whole; this, for tests).
    #[cfg(test)]
    pub fn gather_state(
        &self,
        sync: &mut dyn Collective,
    ) -> Result<(Vec<(String, Tensor)>, i64), TrainError> {
        let mut tensors = Vec::new();
        self.gather_each(sync, &mut |name, t| {
            tensors.push((name, t.to_device(Device::Cpu)));
            Ok(())
        })?;
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((tensors, self.step))
    }

    /// The names, dtypes and shapes of the whole state, in the order
    /// [`Self::write_state`] writes them: unit by unit, each unit's first moments, second
    /// moments and masters.
    pub fn state_entries(&self) -> Vec<TensorEntry> {
        let mut entries = Vec::new();
        for (unit, state) in self.layout.units.iter().zip(&self.units) {
            let parts = [true, true, state.master.is_some()];
            for (prefix, _) in STATE_PREFIXES.iter().zip(parts).filter(|(_, on)| *on) {
                for p in &unit.params {
                    entries.push(TensorEntry {
                        name: format!("{prefix}.{}", p.name),
                        kind: Kind::Float,
                        shape: p.shape.clone(),
                    });
                }
            }
        }
        entries
    }

    /// The whole state, in [`super::AdamW::state`]'s names and shapes, gathered one unit
    /// at a time (every rank must call it) and written by the rank given a file to `to`
    /// (created with [`Self::state_entries`]), so no rank holds more than one unit of it
    /// whole.
    /// Returns the step count.
    pub fn write_state(
        &self,
        sync: &mut dyn Collective,
        mut to: Option<&mut StreamedTensors>,
    ) -> Result<i64, TrainError> {
        self.gather_each(sync, &mut |_, t| match to.as_mut() {
            Some(file) => Ok(file.append(&t)?),
            None => Ok(()),
        })?;
        Ok(self.step)
    }

    /// Gathers each unit's state in turn and hands `f` each parameter's part of it, in
    /// [`Self::state_entries`]'s order.
    fn gather_each(
        &self,
        sync: &mut dyn Collective,
        f: &mut dyn FnMut(String, Tensor) -> Result<(), TrainError>,
    ) -> Result<(), TrainError> {
        self.check_group(sync)?;
        let _guard = tch::no_grad_guard();
        for (unit, state) in self.layout.units.iter().zip(&self.units) {
            let shards = [
                Some(&state.exp_avg),
                Some(&state.exp_avg_sq),
                state.master.as_ref(),
            ];
            for (prefix, shard) in STATE_PREFIXES.iter().zip(shards) {
                let Some(shard) = shard else { continue };
                let mut whole = Tensor::empty([unit.padded], (Kind::Float, shard.device()));
                sync.all_gather_into_tensor(&mut whole, shard)?;
                for (p, view) in unit.params.iter().zip(unit.views(&whole)?) {
                    f(format!("{prefix}.{}", p.name), view)?;
                }
            }
        }
        Ok(())
    }

    /// Restores a whole state ([`Self::write_state`]'s, or [`super::AdamW::state`]'s
    /// from any world size) by keeping this rank's shard of it. Everything is checked
    /// first, as [`super::AdamW::load_state`] checks it; a state without master weights
    /// has them rebuilt from the parameters.
    pub fn load_state(
        &mut self,
        tensors: &[(String, Tensor)],
        step: i64,
    ) -> Result<(), TrainError> {
        let expected = self.whole_shapes();
        let checked = check_saved_state(&expected, &self.params, tensors, step)?;
        let _guard = tch::no_grad_guard();
        let mut rebuilt = 0;
        for (unit, state) in self.layout.units.iter().zip(&mut self.units) {
            let tensors: Vec<&Tensor> = state.params.iter().map(|&i| &self.params[i].1).collect();
            let device = state.exp_avg.device();
            let from = |prefix: &str| -> Vec<Tensor> {
                unit.params
                    .iter()
                    .map(|p| checked.given[format!("{prefix}.{}", p.name).as_str()].shallow_clone())
                    .collect()
            };
            let exp_avg = from("exp_avg");
            let exp_avg_sq = from("exp_avg_sq");
            state
                .exp_avg
                .f_copy_(&read_shard(unit, self.rank, &refs(&exp_avg), device)?)?;
            state
                .exp_avg_sq
                .f_copy_(&read_shard(unit, self.rank, &refs(&exp_avg_sq), device)?)?;
            if let Some(master) = &mut state.master {
                let saved = if checked.rebuild_masters {
                    rebuilt += unit.params.len();
                    read_shard(unit, self.rank, &tensors, device)?
                } else {
                    read_shard(unit, self.rank, &refs(&from("master")), device)?
                };
                master.f_copy_(&saved)?;
            }
        }
        warn_rebuilt(rebuilt);
        self.step = step;
        Ok(())
    }

    /// This rank's own state, one flat f32 tensor per unit and kind:
    /// `exp_avg.<unit>`, `exp_avg_sq.<unit>` and `master.<unit>` (units named
    /// `layers.<i>` and `outer`). Shares storage with the live state.
    pub fn shard_state(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (unit, state) in self.layout.units.iter().zip(&self.units) {
            let name = unit_name(unit.kind);
            let shards = [
                Some(&state.exp_avg),
                Some(&state.exp_avg_sq),
                state.master.as_ref(),
            ];
            for (prefix, shard) in STATE_PREFIXES.iter().zip(shards) {
                if let Some(t) = shard {
                    out.push((format!("{prefix}.{name}"), t.shallow_clone()));
                }
            }
        }
        out
    }

    /// Bytes of this rank's state (moments and master weights).
    pub fn state_bytes(&self) -> u64 {
        self.units
            .iter()
            .flat_map(|u| [Some(&u.exp_avg), Some(&u.exp_avg_sq), u.master.as_ref()])
            .flatten()
            .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
            .sum()
    }

    /// Replaces every state tensor by `f` of it (to host memory and back).
    pub fn map_state(&mut self, mut f: impl FnMut(&Tensor) -> Tensor) {
        for u in &mut self.units {
            u.exp_avg = f(&u.exp_avg);
            u.exp_avg_sq = f(&u.exp_avg_sq);
            if let Some(m) = &mut u.master {
                *m = f(m);
            }
            if let Some(g) = &mut u.grad {
                *g = f(g);
            }
            if let Some(g) = &mut u.agent {
                *g = f(g);
            }
        }
    }

    /// Moves the state (the parameters are moved by their owner).
    pub fn to_device(&mut self, device: Device) {
        self.map_state(|t| t.to_device(device));
    }

    /// The whole state's names and shapes, as [`super::AdamW::state`] lists them.
    fn whole_shapes(&self) -> Vec<(String, Vec<i64>)> {
        let shape = |(n, p): &(String, Tensor), prefix: &str| (format!("{prefix}.{n}"), p.size());
        let masters = self
            .params
            .iter()
            .filter(|(_, p)| p.kind() != Kind::Float)
            .map(|np| shape(np, "master"));
        self.params
            .iter()
            .map(|np| shape(np, "exp_avg"))
            .chain(self.params.iter().map(|np| shape(np, "exp_avg_sq")))
            .chain(masters)
            .collect()
    }

    /// The collectives must be over the group the state was sharded for.
    fn check_group(&self, sync: &dyn Collective) -> Result<(), TrainError> {
        let (world_size, rank) = (sync.world_size(), sync.rank());
        if world_size != self.layout.world_size || rank != self.rank {
            return Err(TrainError::ShardGroup {
                rank: self.rank,
                world_size: self.layout.world_size,
                group_rank: rank,
                group_size: world_size,
            });
        }
        Ok(())
    }
}

/// The kinds of state, in the order they are saved.
const STATE_PREFIXES: [&str; 3] = ["exp_avg", "exp_avg_sq", "master"];

fn unit_name(kind: UnitKind) -> String {
    match kind {
        UnitKind::Layer(i) => format!("layers.{i}"),
        UnitKind::Outer => "outer".into(),
    }
}

fn refs(tensors: &[Tensor]) -> Vec<&Tensor> {
    tensors.iter().collect()
}

/// Rank `rank`'s shard of the unit whose tensors are `tensors` (in its order), as f32
/// on `device`: only the shard's elements are copied, and its padding is zeros.
fn read_shard(
    unit: &FlatUnit,
    rank: usize,
    tensors: &[&Tensor],
    device: Device,
) -> Result<Tensor, TrainError> {
    let _guard = tch::no_grad_guard();
    let shard = Tensor::zeros([unit.shard_numel()], (Kind::Float, device));
    for piece in unit.pieces(rank)? {
        let n = piece.in_param.end - piece.in_param.start;
        let src = tensors[piece.param]
            .reshape([-1])
            .narrow(0, piece.in_param.start, n);
        shard.narrow(0, piece.in_shard.start, n).f_copy_(&src)?;
    }
    Ok(shard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::{AdamW, sync::Solo};
    use drmas_dist::DistError;
    use std::sync::{Arc, Barrier, Mutex};

    /// N ranks as threads of this process: each collective deposits every rank's
    /// tensor, then each rank computes the result from all of them in rank order.
    struct Hub {
        slots: Mutex<Vec<Option<Tensor>>>,
        barrier: Barrier,
    }

    struct Local {
        hub: Arc<Hub>,
        rank: usize,
        world_size: usize,
    }

    impl Local {
        fn group(world_size: usize) -> Vec<Local> {
            let hub = Arc::new(Hub {
                slots: Mutex::new((0..world_size).map(|_| None).collect()),
                barrier: Barrier::new(world_size),
            });
            (0..world_size)
                .map(|rank| Local {
                    hub: hub.clone(),
                    rank,
                    world_size,
                })
                .collect()
        }

        /// Every rank's `t` (flat), in rank order.
        fn exchange(&self, t: &Tensor) -> Vec<Tensor> {
            self.hub.slots.lock().unwrap()[self.rank] = Some(t.reshape([-1]).copy());
            self.hub.barrier.wait();
            let all = self
                .hub
                .slots
                .lock()
                .unwrap()
                .iter()
                .map(|s| s.as_ref().unwrap().copy())
                .collect();
            self.hub.barrier.wait();
            all
        }

        fn sum(&self, t: &Tensor) -> Tensor {
            let all = self.exchange(t);
            let mut total = all[0].copy();
            for other in &all[1..] {
                total += other;
            }
            total
        }
    }

    impl Collective for Local {
        fn world_size(&self) -> usize {
            self.world_size
        }

        fn rank(&self) -> usize {
            self.rank
        }

        fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), DistError> {
            let total = self.sum(t);
            t.copy_(&total.view_as(t));
            Ok(())
        }

        fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), DistError> {
            let all = self.exchange(t);
            let mut max = all[0].copy();
            for other in &all[1..] {
                max = max.maximum(other);
            }
            t.copy_(&max.view_as(t));
            Ok(())
        }

        fn reduce_scatter_sum(
            &mut self,
            input: &Tensor,
            output: &mut Tensor,
        ) -> Result<(), DistError> {
            let n = output.numel() as i64;
            let total = self.sum(input);
            output.copy_(&total.narrow(0, self.rank as i64 * n, n));
            Ok(())
        }

        fn all_gather_into_tensor(
            &mut self,
            output: &mut Tensor,
            input: &Tensor,
        ) -> Result<(), DistError> {
            let all = self.exchange(input);
            output.copy_(&Tensor::cat(&all, 0).view_as(output));
            Ok(())
        }
    }

    const SHAPES: [(&str, &[i64]); 5] = [
        ("model.layers.0.mlp.weight", &[3, 5]),
        ("model.layers.0.norm.weight", &[7]),
        ("model.layers.1.mlp.weight", &[2, 2]),
        ("model.embed_tokens.weight", &[4, 3]),
        ("model.norm.weight", &[1]),
    ];

    /// A model's parameters, name-sorted (the order both optimizers keep): units of
    /// 15 + 7, 4 and 12 + 1 elements (none a multiple of 3, two not of 2), the same
    /// values on every rank.
    fn params(kind: Kind) -> Vec<(String, Tensor)> {
        let mut named: Vec<(String, Tensor)> = SHAPES
            .iter()
            .enumerate()
            .map(|(i, (name, shape))| {
                let n: i64 = shape.iter().product();
                let x = Tensor::arange(n, (Kind::Float, Device::Cpu)) * 0.37 - 0.5 * i as f64;
                let t = x
                    .sin()
                    .reshape(*shape)
                    .to_kind(kind)
                    .set_requires_grad(true);
                (name.to_string(), t)
            })
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    }

    fn handles(params: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
        params
            .iter()
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .collect()
    }

    /// Rank `rank`'s gradient of parameter `name` at step `step`, in the parameters'
    /// dtype (distinct on every rank, parameter and step).
    fn grad(rank: usize, name: &str, step: usize, kind: Kind) -> Tensor {
        let i = SHAPES.iter().position(|(n, _)| *n == name).unwrap();
        let shape = SHAPES[i].1;
        let n: i64 = shape.iter().product();
        let phase = 1.3 * rank as f64 + 0.7 * i as f64 + 2.1 * step as f64;
        let x = Tensor::arange(n, (Kind::Float, Device::Cpu)) * 0.91 + phase;
        (x.cos() * 0.1).reshape(shape).to_kind(kind)
    }

    /// The ranks' gradients summed in rank order in their dtype, as the collectives sum.
    fn summed(world_size: usize, name: &str, step: usize, kind: Kind) -> Tensor {
        let mut total = grad(0, name, step, kind);
        for r in 1..world_size {
            total += grad(r, name, step, kind);
        }
        total
    }

    /// Makes each parameter's gradient exactly `grads`' (d/dp Σ p·g = g).
    fn set_grads(params: &[(String, Tensor)], grads: impl Fn(&str) -> Tensor) {
        for (name, p) in params {
            let mut p = p.shallow_clone();
            p.zero_grad();
            (&p * grads(name)).sum(Kind::Float).backward();
        }
    }

    const LR: f64 = 0.01;
    const STEPS: usize = 3;

    /// A clip that binds at every step for f32 (its scaling is then part of what is
    /// compared). For bf16 none: the norm of bf16 gradients is taken row by row in bf16
    /// ([`sum_of_squares`]), and a shard's rows are not a tensor's.
    fn clip(kind: Kind) -> f64 {
        if kind == Kind::Float { 0.3 } else { 1e9 }
    }

    fn weights(params: &[(String, Tensor)]) -> Vec<Tensor> {
        params.iter().map(|(_, p)| p.detach().copy()).collect()
    }

    /// One process's AdamW, STEPS steps on the ranks' summed gradients.
    fn unsharded(world_size: usize, kind: Kind) -> (Vec<(String, Tensor)>, AdamW) {
        let params = params(kind);
        let mut opt = AdamW::new(handles(&params), AdamWConfig::default());
        for step in 0..STEPS {
            set_grads(&params, |name| summed(world_size, name, step, kind));
            opt.clip_grad_norm(clip(kind));
            opt.step(LR);
        }
        (params, opt)
    }

    /// One rank's weights and optimizer after STEPS sharded steps on its gradients.
    fn sharded_rank(sync: &mut dyn Collective, kind: Kind) -> (Vec<Tensor>, ShardedAdamW) {
        let params = params(kind);
        let (world_size, rank) = (sync.world_size(), sync.rank());
        let mut opt =
            ShardedAdamW::new(handles(&params), AdamWConfig::default(), world_size, rank).unwrap();
        for step in 0..STEPS {
            opt.zero_grad();
            set_grads(&params, |name| grad(rank, name, step, kind));
            opt.reduce_gradients(sync).unwrap();
            // The parameters' own gradients are spent: zeroed for the next agent's.
            for (_, p) in &params {
                assert_eq!(p.grad().abs().sum(Kind::Double).double_value(&[]), 0.0);
            }
            opt.clip_grad_norm(sync, clip(kind)).unwrap();
            opt.step(sync, LR).unwrap();
        }
        (weights(&params), opt)
    }

    /// Runs `f` on each of `world_size` ranks (threads), results in rank order.
    fn on_ranks<T: Send + 'static>(
        world_size: usize,
        f: impl Fn(&mut Local) -> T + Send + Sync + Clone + 'static,
    ) -> Vec<T> {
        let threads: Vec<_> = Local::group(world_size)
            .into_iter()
            .map(|mut sync| {
                let f = f.clone();
                std::thread::spawn(move || f(&mut sync))
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap()).collect()
    }

    fn max_abs_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| {
                let d = x.to_kind(Kind::Double) - y.to_kind(Kind::Double);
                d.abs().max().double_value(&[])
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn one_rank_without_a_group_steps_as_adamw() {
        for kind in [Kind::Float, Kind::BFloat16] {
            let (got, opt) = sharded_rank(&mut Solo, kind);
            let (params, _) = unsharded(1, kind);
            let diff = max_abs_diff(&got, &weights(&params));
            assert!(diff <= 1e-6, "{kind:?}: {diff}");
            assert_eq!(opt.steps(), STEPS as i64);
        }
    }

    #[test]
    fn n_ranks_step_as_one_process_on_the_summed_gradients() {
        for world_size in [2, 3] {
            for kind in [Kind::Float, Kind::BFloat16] {
                let ranks = on_ranks(world_size, move |sync| sharded_rank(sync, kind).0);
                // Every rank holds the same whole weights, bit for bit…
                for other in &ranks[1..] {
                    assert_eq!(max_abs_diff(other, &ranks[0]), 0.0);
                }
                // …those one process's AdamW computes (the clip's norm sums its squares
                // per shard instead of per tensor: 1e-16 relative).
                let (params, _) = unsharded(world_size, kind);
                let diff = max_abs_diff(&ranks[0], &weights(&params));
                assert!(diff <= 1e-6, "{world_size} ranks, {kind:?}: {diff}");
            }
        }
    }

    #[test]
    fn each_rank_holds_its_shard_of_the_state_only() {
        // Units of 22, 4 and 13 elements, padded to 24, 6 and 15 over 3 ranks: each
        // rank holds 8 + 2 + 5 = 15 elements of each kind of state.
        let ranks = on_ranks(3, |sync| sharded_rank(sync, Kind::BFloat16).1);
        let padded: Vec<i64> = ranks[0].layout().units.iter().map(|u| u.padded).collect();
        assert_eq!(padded, [24, 6, 15]);
        for (rank, opt) in ranks.iter().enumerate() {
            assert_eq!(opt.rank(), rank);
            let state = opt.shard_state();
            let names: Vec<&str> = state.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(
                names,
                [
                    "exp_avg.layers.0",
                    "exp_avg_sq.layers.0",
                    "master.layers.0",
                    "exp_avg.layers.1",
                    "exp_avg_sq.layers.1",
                    "master.layers.1",
                    "exp_avg.outer",
                    "exp_avg_sq.outer",
                    "master.outer",
                ]
            );
            let sizes: Vec<i64> = state.iter().map(|(_, t)| t.numel() as i64).collect();
            assert_eq!(sizes, [8, 8, 8, 2, 2, 2, 5, 5, 5]);
            // Two moments and a master (the weights are bf16), f32: 3 × 15 × 4 bytes,
            // where one process's AdamW holds 3 × 39 × 4.
            assert_eq!(opt.state_bytes(), 180);
        }
        assert_eq!(unsharded(3, Kind::BFloat16).1.state_bytes(), 468);
        // f32 weights are their own masters: two moments of 11 + 2 + 7 over 2 ranks.
        for opt in on_ranks(2, |sync| sharded_rank(sync, Kind::Float).1) {
            assert_eq!(opt.state_bytes(), 2 * 20 * 4);
        }
    }

    #[test]
    fn the_gathered_state_is_adamws_and_loads_into_any_world_size() {
        let kind = Kind::BFloat16;
        // Two ranks' state, gathered on each, is one process's AdamW state.
        let gathered = on_ranks(2, move |sync| {
            let (w, opt) = sharded_rank(sync, kind);
            (w, opt.gather_state(sync).unwrap())
        });
        let (_, one) = unsharded(2, kind);
        let (want, steps) = one.state();
        let (weights_two, (got, got_steps)) = &gathered[0];
        assert_eq!(*got_steps, steps);
        let names = |s: &[(String, Tensor)]| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(got), names(&want));
        assert_eq!(names(&gathered[1].1.0), names(got));
        for ((name, a), (_, b)) in got.iter().zip(&want) {
            assert_eq!(a.size(), b.size(), "{name}");
            assert_eq!(a.device(), Device::Cpu);
            let diff = max_abs_diff(&[a.shallow_clone()], &[b.shallow_clone()]);
            assert!(diff <= 1e-6, "{name}: {diff}");
        }

        // It loads into 3 ranks, each keeping its shard, and into one process's AdamW;
        // both then take the same step on the same gradients.
        let saved: Vec<(String, Vec<f32>, Vec<i64>)> = got
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    Vec::<f32>::try_from(t.reshape([-1])).unwrap(),
                    t.size(),
                )
            })
            .collect();
        let start: Vec<Vec<f32>> = weights_two
            .iter()
            .map(|w| Vec::<f32>::try_from(w.to_kind(Kind::Float).reshape([-1])).unwrap())
            .collect();
        let restore = move |params: &[(String, Tensor)]| {
            for ((_, p), w) in params.iter().zip(&start) {
                let w = Tensor::from_slice(w).reshape(p.size()).to_kind(kind);
                tch::no_grad(|| p.shallow_clone().copy_(&w));
            }
            saved
                .iter()
                .map(|(n, v, s)| (n.clone(), Tensor::from_slice(v).reshape(s.as_slice())))
                .collect::<Vec<_>>()
        };
        let restore_each = restore.clone();
        let three = on_ranks(3, move |sync| {
            let params = params(kind);
            let state = restore_each(&params);
            let (world_size, rank) = (sync.world_size(), sync.rank());
            let mut opt =
                ShardedAdamW::new(handles(&params), AdamWConfig::default(), world_size, rank)
                    .unwrap();
            opt.load_state(&state, steps).unwrap();
            assert_eq!(opt.steps(), steps);
            opt.zero_grad();
            set_grads(&params, |name| grad(rank, name, STEPS, kind));
            opt.reduce_gradients(sync).unwrap();
            opt.step(sync, LR).unwrap();
            weights(&params)
        });
        let params = params(kind);
        let state = restore(&params);
        let mut alone = AdamW::new(handles(&params), AdamWConfig::default());
        alone.load_state(&state, steps).unwrap();
        set_grads(&params, |name| summed(3, name, STEPS, kind));
        alone.step(LR);
        assert_eq!(max_abs_diff(&three[0], &three[2]), 0.0);
        let diff = max_abs_diff(&three[0], &weights(&params));
        assert!(diff <= 1e-6, "{diff}");
    }

    #[test]
    fn a_bad_state_or_group_is_refused() {
        let params = params(Kind::Float);
        let config = AdamWConfig::default();
        let mut opt = ShardedAdamW::new(handles(&params), config, 2, 1).unwrap();
        // A rank's shards are not a state: the whole one is expected.
        assert_eq!(
            opt.load_state(&opt.shard_state(), 1)
                .unwrap_err()
                .to_string(),
            "optimizer state `exp_avg.model.embed_tokens.weight`: missing"
        );
        assert_eq!(
            opt.step(&mut Solo, LR).unwrap_err().to_string(),
            "sharded optimizer: its state is rank 1's of 2, but the update's group is rank 0 of 1"
        );
        assert_eq!(opt.steps(), 0);
        assert_eq!(
            ShardedAdamW::new(handles(&params), config, 2, 2)
                .unwrap_err()
                .to_string(),
            "sharded optimizer: rank 2 is not in a job of 2 ranks"
        );
        let mut mixed = handles(&params);
        mixed[4].1 = mixed[4].1.to_kind(Kind::Double);
        assert_eq!(
            ShardedAdamW::new(mixed, config, 2, 0)
                .unwrap_err()
                .to_string(),
            "sharded optimizer: unit of the embeddings, final norm and head: \
             `model.embed_tokens.weight` is Float on Cpu and `model.norm.weight` Double on \
             Cpu: a flat buffer has one dtype and device"
        );
    }
}
