//! Key/value cache for incremental decoding: preallocated per layer, filled in place.

use tch::Tensor;

pub struct KvCache {
    /// Per layer: keys and values, [B, kv_heads, capacity, head_dim].
    layers: Vec<(Tensor, Tensor)>,
    len: i64,
    /// When set, one-token decode attention runs per group (see [`AttentionGroup`]).
    groups: Option<Vec<AttentionGroup>>,
}

/// Rows `first..first + rows` of a batch attend only to the keys from column `key` on.
/// The sampler lays each row out in a width set by its own prompt length (its bucket),
/// so a row's attention reads the same keys, the same padding and the same length
/// whatever else shares its batch: its result does not depend on its batch-mates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionGroup {
    pub first: i64,
    pub rows: i64,
    pub key: i64,
}

impl KvCache {
    pub fn new(
        layers: i64,
        batch: i64,
        kv_heads: i64,
        capacity: i64,
        head_dim: i64,
        options: (tch::Kind, tch::Device),
    ) -> Self {
        let make = || Tensor::zeros([batch, kv_heads, capacity, head_dim], options);
        Self {
            layers: (0..layers).map(|_| (make(), make())).collect(),
            len: 0,
            groups: None,
        }
    }

    /// Sets (or clears) the row groups of the next decode attention.
    pub fn set_groups(&mut self, groups: Option<Vec<AttentionGroup>>) {
        self.groups = groups;
    }

    /// The row groups decode attention runs in, if set.
    pub fn groups(&self) -> Option<&[AttentionGroup]> {
        self.groups.as_deref()
    }

    /// Tokens cached so far.
    pub fn cached(&self) -> i64 {
        self.len
    }

    /// Writes `k`, `v` [B, kv_heads, T, D] for `layer` after the cached tokens and returns
    /// views of everything cached for that layer, new tokens included.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        let t = k.size()[2];
        let (kc, vc) = &mut self.layers[layer];
        kc.narrow(2, self.len, t).copy_(k);
        vc.narrow(2, self.len, t).copy_(v);
        (kc.narrow(2, 0, self.len + t), vc.narrow(2, 0, self.len + t))
    }

    /// Marks `t` more tokens as cached (after every layer appended them).
    pub fn advance(&mut self, t: i64) {
        self.len += t;
    }

    /// Copies every row of `src` (all its cached tokens) into rows `first_row..` of this
    /// cache, starting at token `offset`. Used to assemble a left-padded batch cache
    /// from prefills done in smaller groups.
    pub fn write_rows(&mut self, first_row: i64, src: &KvCache, offset: i64) {
        let n = src.layers.first().map_or(0, |(k, _)| k.size()[0]);
        for ((k, v), (sk, sv)) in self.layers.iter_mut().zip(&src.layers) {
            k.narrow(0, first_row, n)
                .narrow(2, offset, src.len)
                .copy_(&sk.narrow(2, 0, src.len));
            v.narrow(0, first_row, n)
                .narrow(2, offset, src.len)
                .copy_(&sv.narrow(2, 0, src.len));
        }
    }

    /// Declares the first `len` tokens cached (after [`KvCache::write_rows`]).
    pub fn set_len(&mut self, len: i64) {
        self.len = len;
    }

    /// A cache whose row i is row `rows[i]` of this one: forks a prefilled prompt into
    /// the G samples of its group, or drops finished rows.
    pub fn select_rows(&self, rows: &Tensor) -> Self {
        Self {
            layers: self
                .layers
                .iter()
                .map(|(k, v)| (k.index_select(0, rows), v.index_select(0, rows)))
                .collect(),
            len: self.len,
            // The rows changed: the caller sets the groups of the new batch.
            groups: None,
        }
    }
}
