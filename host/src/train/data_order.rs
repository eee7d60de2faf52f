//! Which training tasks each step takes: every epoch visits the tasks in a fresh order
//! that is a pure function of (seed, epoch), so a cursor (epoch, position) is all a
//! checkpoint needs to continue exactly — also across an epoch boundary.

use rand::{SeedableRng, rngs::StdRng, seq::SliceRandom};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DataCursor {
    pub epoch: u64,
    /// Tasks of this epoch already taken.
    pub position: usize,
}

/// The order of `n` tasks in `epoch`.
pub fn epoch_order(seed: u64, epoch: u64, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = StdRng::seed_from_u64(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    order.shuffle(&mut rng);
    order
}

impl DataCursor {
    /// The next `count` task indices out of `n`, moving into the next epoch (in its own
    /// order) when this one runs out. Returns each index with the epoch it belongs to.
    pub fn take(&mut self, seed: u64, n: usize, count: usize) -> Vec<(usize, u64)> {
        let mut out = Vec::with_capacity(count);
        if n == 0 {
            return out;
        }
        let mut order = epoch_order(seed, self.epoch, n);
        while out.len() < count {
            if self.position >= n {
                self.epoch += 1;
                self.position = 0;
                order = epoch_order(seed, self.epoch, n);
            }
            out.push((order[self.position], self.epoch));
            self.position += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_continues_into_the_next_epoch_exactly() {
        let mut whole = DataCursor::default();
        let all: Vec<_> = (0..5).flat_map(|_| whole.take(7, 4, 3)).collect();
        // 15 tasks from a set of 4: epochs 0..3 each a permutation of 0..4.
        for e in 0..3 {
            let mut epoch: Vec<usize> = all[e * 4..e * 4 + 4].iter().map(|x| x.0).collect();
            assert!(all[e * 4..e * 4 + 4].iter().all(|x| x.1 == e as u64));
            epoch.sort();
            assert_eq!(epoch, vec![0, 1, 2, 3]);
        }
        // Stopping at any step and continuing from a copy of the cursor gives the same.
        for stop in 0..5 {
            let mut a = DataCursor::default();
            let mut got: Vec<_> = (0..stop).flat_map(|_| a.take(7, 4, 3)).collect();
            let mut resumed =
                serde_json::from_str::<DataCursor>(&serde_json::to_string(&a).unwrap()).unwrap();
            got.extend((stop..5).flat_map(|_| resumed.take(7, 4, 3)));
            assert_eq!(got, all);
        }
        // Resuming exactly at an epoch boundary (position = n) still yields tasks.
        let mut at_end = DataCursor {
            epoch: 0,
            position: 4,
        };
        assert_eq!(at_end.take(7, 4, 2).len(), 2);
        assert_eq!(at_end.epoch, 1);
    }
}
