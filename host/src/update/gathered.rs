//! A model's weights sharded across the ranks of its process group during the update
//! (`[[models]] shard = "full"`, ZeRO-3 / FSDP; docs/distributed.md, "Sharding"). Each
//! rank keeps, per unit of the flat layout ([`super::flat`]), only its shard of the
//! weights, in their dtype. Released, a weight's storage is an empty tensor (its
//! handle stays: `set_data`, which every handle to it sees — the decoder's, the
//! optimizer's); gathered, it is a view of the unit's whole flat buffer, all-gathered
//! from the ranks' shards in one collective. The update gathers one decoder layer at a
//! time ([`super::full`]); generation, evaluation and saving see whole weights, gathered
//! once at the end of the update.

use super::{
    error::TrainError,
    flat::{FlatLayout, FlatUnit, UnitKind},
    sync::{Collective, Pending},
};
use tch::{Device, Kind, Tensor};

/// One unit: its tensors (indices into [`ShardedWeights::params`]), dtype and this
/// rank's shard.
#[derive(Debug)]
struct UnitWeights {
    params: Vec<usize>,
    kind: Kind,
    shard: Tensor,
    whole: bool,
    /// A gather started ([`ShardedWeights::prefetch`]) into this buffer, not yet waited.
    incoming: Option<(Tensor, Pending)>,
}

/// See the module's documentation.
#[derive(Debug)]
pub struct ShardedWeights {
    params: Vec<(String, Tensor)>,
    layout: FlatLayout,
    rank: usize,
    units: Vec<UnitWeights>,
    /// The most bytes of weights whole at once since [`Self::release_all`] (what the
    /// update's layer-by-layer gathers cost a rank at their peak).
    most_whole: u64,
}

/// What a rank held of a model's weights during a sharded update, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeightBytes {
    /// This rank's shards.
    pub shard: u64,
    /// The most held whole at once (gathered units).
    pub most_gathered: u64,
    /// The whole model's (every unit padded), as every rank holds them outside updates.
    pub whole: u64,
}

impl ShardedWeights {
    /// The weights `params` (handles to a model's tensors, whole now) laid out over
    /// `world_size` ranks; this rank, `rank`, keeps its shard of each unit (a copy).
    /// The weights stay whole until [`Self::release_all`].
    pub fn new(
        mut params: Vec<(String, Tensor)>,
        world_size: usize,
        rank: usize,
    ) -> Result<Self, TrainError> {
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let layout = FlatLayout::new(&params, world_size)?;
        let _guard = tch::no_grad_guard();
        let mut units = Vec::with_capacity(layout.units.len());
        for unit in &layout.units {
            let tensors = unit.resolve(&params)?;
            unit.common(&tensors)?;
            let flat = unit.flatten(&tensors)?;
            let shard = unit.shard(&flat, rank)?.copy();
            let index = |name: &str| {
                params
                    .iter()
                    .position(|(n, _)| n == name)
                    .expect("resolved above")
            };
            units.push(UnitWeights {
                params: unit
                    .params
                    .iter()
                    .map(|p| {
                        std::iter::once(&p.name)
                            .chain(&p.aliases)
                            .find(|n| params.iter().any(|(m, _)| m == *n))
                            .map(|n| index(n))
                            .expect("resolved above")
                    })
                    .collect(),
                kind: flat.kind(),
                shard,
                whole: true,
                incoming: None,
            });
        }
        Ok(ShardedWeights {
            params,
            layout,
            rank,
            units,
            most_whole: 0,
        })
    }

    /// The flat layout the weights are sharded by.
    pub fn layout(&self) -> &FlatLayout {
        &self.layout
    }

    /// The index of the unit of `kind`, if the weights have one.
    pub fn unit_index(&self, kind: UnitKind) -> Option<usize> {
        self.layout.units.iter().position(|u| u.kind == kind)
    }

    /// The tensors of unit `u`, in its order.
    pub fn unit_params(&self, u: usize) -> Vec<&Tensor> {
        self.units[u]
            .params
            .iter()
            .map(|&i| &self.params[i].1)
            .collect()
    }

    /// Unit `u`'s layout.
    pub fn unit(&self, u: usize) -> &FlatUnit {
        &self.layout.units[u]
    }

    /// Unit `u` made whole: its shards all-gathered into one flat buffer, which its
    /// weights become views of; a gather [`Self::prefetch`] started is waited for
    /// instead. Every rank of the group must call it, in the same order.
    pub fn gather(&mut self, sync: &mut dyn Collective, u: usize) -> Result<(), TrainError> {
        if self.units[u].whole {
            return Ok(());
        }
        let _guard = tch::no_grad_guard();
        let whole = match self.units[u].incoming.take() {
            Some((whole, pending)) => {
                pending.wait()?;
                whole
            }
            None => {
                let state = &self.units[u];
                let padded = self.layout.units[u].padded;
                let mut whole = Tensor::empty([padded], (state.kind, state.shard.device()));
                sync.all_gather_into_tensor(&mut whole, &state.shard)?;
                whole
            }
        };
        let unit = &self.layout.units[u];
        for (&i, view) in self.units[u].params.iter().zip(unit.views(&whole)?) {
            self.params[i].1.shallow_clone().set_data(&view);
        }
        self.units[u].whole = true;
        self.note_held();
        Ok(())
    }

    /// Starts unit `u`'s gather, for a later [`Self::gather`] to wait for: the next
    /// layer's weights arrive while this one computes (FSDP's prefetch; on a group
    /// without asynchronous collectives it runs at once). Every rank of the group must
    /// call it where the others do.
    pub fn prefetch(&mut self, sync: &mut dyn Collective, u: usize) -> Result<(), TrainError> {
        let state = &self.units[u];
        if state.whole || state.incoming.is_some() {
            return Ok(());
        }
        let padded = self.layout.units[u].padded;
        let whole = Tensor::empty([padded], (state.kind, state.shard.device()));
        let pending = sync.start_all_gather_into_tensor(&whole, &state.shard)?;
        self.units[u].incoming = Some((whole, pending));
        self.note_held();
        Ok(())
    }

    /// Unit `u` whole, and unit `next`'s gather started ([`Self::gather`],
    /// [`Self::prefetch`]): the step of a walk over the layers.
    pub fn gather_then_prefetch(
        &mut self,
        sync: &mut dyn Collective,
        u: usize,
        next: Option<usize>,
    ) -> Result<(), TrainError> {
        self.gather(sync, u)?;
        match next {
            Some(n) => self.prefetch(sync, n),
            None => Ok(()),
        }
    }

    /// Counts the bytes whole now, and arriving, toward the most held at once.
    fn note_held(&mut self) {
        let incoming: u64 = self
            .units
            .iter()
            .filter_map(|s| s.incoming.as_ref())
            .map(|(t, _)| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
            .sum();
        self.most_whole = self.most_whole.max(self.whole_bytes() + incoming);
    }

    /// Unit `u`'s weights freed: each becomes an empty tensor of its dtype (its shard
    /// is kept).
    pub fn release(&mut self, u: usize) {
        let state = &mut self.units[u];
        if !state.whole {
            return;
        }
        let _guard = tch::no_grad_guard();
        for &i in &state.params {
            let t = &self.params[i].1;
            t.shallow_clone()
                .set_data(&Tensor::empty([0], (t.kind(), t.device())));
        }
        state.whole = false;
    }

    /// Every unit freed ([`Self::release`]).
    pub fn release_all(&mut self) {
        for u in 0..self.units.len() {
            self.release(u);
        }
        self.most_whole = 0;
    }

    /// What this rank holds, for the update's report.
    pub fn bytes(&self) -> WeightBytes {
        WeightBytes {
            shard: self.shard_bytes(),
            most_gathered: self.most_whole,
            whole: self
                .layout
                .units
                .iter()
                .zip(&self.units)
                .map(|(u, s)| (u.padded as usize * s.kind.elt_size_in_bytes()) as u64)
                .sum(),
        }
    }

    /// Every unit made whole ([`Self::gather`]).
    pub fn gather_all(&mut self, sync: &mut dyn Collective) -> Result<(), TrainError> {
        for u in 0..self.units.len() {
            self.gather(sync, u)?;
        }
        Ok(())
    }

    /// Replaces unit `u`'s shard (an optimizer step's new weights, in their dtype); a
    /// whole unit is released first, its weights now stale.
    pub fn set_shard(&mut self, u: usize, shard: Tensor) -> Result<(), TrainError> {
        let unit = &self.layout.units[u];
        let state = &self.units[u];
        if shard.size() != [unit.shard_numel()] || shard.kind() != state.kind {
            return Err(TrainError::Shape {
                what: format!(
                    "the new weights' shard of the {} ({:?}, got {:?})",
                    unit.kind,
                    state.kind,
                    shard.kind()
                ),
                expected: format!("[{}]", unit.shard_numel()),
                got: shard.size(),
            });
        }
        self.release(u);
        self.units[u].shard = shard;
        Ok(())
    }

    /// This rank's shard of unit `u`.
    pub fn shard(&self, u: usize) -> &Tensor {
        &self.units[u].shard
    }

    /// Bytes of this rank's shards.
    pub fn shard_bytes(&self) -> u64 {
        self.units
            .iter()
            .map(|u| (u.shard.numel() * u.shard.kind().elt_size_in_bytes()) as u64)
            .sum()
    }

    /// Bytes of the weights now whole on this rank (gathered units).
    pub fn whole_bytes(&self) -> u64 {
        self.layout
            .units
            .iter()
            .zip(&self.units)
            .filter(|(_, s)| s.whole)
            .map(|(u, s)| (u.padded as usize * s.kind.elt_size_in_bytes()) as u64)
            .sum()
    }

    /// Moves the shards (the whole weights are moved by their owner).
    pub fn to_device(&mut self, device: Device) {
        for u in &mut self.units {
            u.shard = u.shard.to_device(device);
        }
    }

    /// This rank's place.
    pub fn rank(&self) -> usize {
        self.rank
    }
}
