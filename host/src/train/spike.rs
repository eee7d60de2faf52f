//! The gradient-spike detector (the paper's instability signal): a step whose gradient
//! norm exceeds `factor` × the running median of that model's recent norms is a spike.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpikeDetector {
    /// The most recent finite norms, oldest first.
    pub window: VecDeque<f64>,
    pub spikes: u64,
}

/// Norms needed before anything is called a spike.
const MIN_HISTORY: usize = 3;

impl SpikeDetector {
    /// The median of the window, if it has enough history.
    pub fn median(&self) -> Option<f64> {
        if self.window.len() < MIN_HISTORY {
            return None;
        }
        let mut v: Vec<f64> = self.window.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// Records `norm`; true when it is a spike against the norms before it.
    pub fn observe(&mut self, norm: f64, factor: f64, window: usize) -> bool {
        if !norm.is_finite() {
            return false;
        }
        let spike = self.median().is_some_and(|m| norm > factor * m);
        if spike {
            self.spikes += 1;
        }
        self.window.push_back(norm);
        while self.window.len() > window.max(1) {
            self.window.pop_front();
        }
        spike
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_norm_far_above_the_running_median_is_a_spike() {
        let mut d = SpikeDetector::default();
        // No verdict before three norms.
        assert!(!d.observe(1.0, 5.0, 4));
        assert!(!d.observe(100.0, 5.0, 4));
        assert!(!d.observe(1.2, 5.0, 4));
        // median(1, 100, 1.2) = 1.2: 6.1 > 5 × 1.2.
        assert!(d.observe(6.1, 5.0, 4));
        assert_eq!(Vec::from(d.window.clone()), vec![1.0, 100.0, 1.2, 6.1]);
        // The window keeps the last 4: median(100, 1.2, 6.1, 2.0) = 4.05, 20 ≤ 5 × 4.05.
        assert!(!d.observe(2.0, 5.0, 4));
        assert_eq!(Vec::from(d.window.clone()), vec![100.0, 1.2, 6.1, 2.0]);
        assert!(!d.observe(20.0, 5.0, 4));
        assert_eq!(d.spikes, 1);
        assert!(!d.observe(f64::NAN, 5.0, 4));
        assert_eq!(d.window.len(), 4);
    }
}
