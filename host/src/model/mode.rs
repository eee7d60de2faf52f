//! The mode of a decoder's forwards — which adapter each row goes through, whether
//! every adapter is off (a LoRA model's KL reference), whether LoRA dropout applies
//! (training), and the sampler's row-block products — held by a guard.
//!
//! The mode lives in the decoder (the forwards read it), so a switch that is not undone
//! outlives its call: a panic in the KL reference's scoring once left the adapters off
//! for every later generation. Here the only way to switch is through a [`ModeGuard`],
//! which puts the mode it found back when it drops, on return, error or panic alike.

use super::{decoder::Decoder, lora::Routing};
use tch::Device;

/// The mode the decoder's forwards ran in when [`Decoder::mode`] was called, put back
/// when the guard drops. The guard's setters change the mode for the forwards that
/// follow while it lives; guards nest (each restores what it found).
#[must_use = "the mode goes back to what it was when the guard drops"]
pub struct ModeGuard<'a> {
    decoder: &'a Decoder,
    routing: Routing,
    train: bool,
    adapters_off: bool,
    product_rows: Option<i64>,
}

impl Decoder {
    /// A guard over this decoder's forward mode: what it sets lasts until it drops.
    pub fn mode(&self) -> ModeGuard<'_> {
        let state = self.route_state();
        ModeGuard {
            decoder: self,
            routing: state.routing.shallow_clone(),
            train: state.train,
            adapters_off: state.adapters_off,
            product_rows: state.product_rows,
        }
    }
}

impl ModeGuard<'_> {
    /// Every row through adapter `slot`; `None` = the base weights alone.
    pub fn route_all(&self, slot: Option<usize>) {
        self.decoder.route_state().routing = match slot {
            Some(s) => Routing::All(s),
            None => Routing::Base,
        };
    }

    /// Row `i` through adapter `slots[i]` (`None` = base).
    pub fn route_rows(&self, slots: &[Option<usize>]) {
        let routing = Routing::of_rows(slots, self.decoder.device());
        self.decoder.route_state().routing = routing;
    }

    /// Every adapter off, whatever the routing: the frozen base alone.
    pub fn adapters_off(&self) {
        self.decoder.route_state().adapters_off = true;
    }

    /// Whether the forwards train (LoRA dropout is applied only then).
    pub fn train(&self, train: bool) {
        self.decoder.route_state().train = train;
    }

    /// `Some(n)`: each projection is computed in products of exactly `n` rows
    /// (`decoder::in_row_blocks`), the sampler's row-independent mode; `None`: one
    /// product per projection (training, log-probs).
    ///
    /// On the CPU only: that is where the row-count dependence was measured and the
    /// contract is tested, and on a GPU blocks of 16 rows would cut a decode step's
    /// products into many small launches (docs/training.md says CUDA is not covered).
    pub fn product_rows(&self, rows: Option<i64>) {
        let rows = rows.filter(|_| self.decoder.device() == Device::Cpu);
        self.decoder.route_state().product_rows = rows;
    }
}

impl Drop for ModeGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.decoder.route_state();
        state.routing = std::mem::take(&mut self.routing);
        state.train = self.train;
        state.adapters_off = self.adapters_off;
        state.product_rows = self.product_rows;
    }
}
