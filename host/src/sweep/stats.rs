//! The statistics of a sweep: means with Student-t intervals over seeds, paired
//! differences, quantiles, and the evaluation's own binomial noise.

use crate::eval::TaskCount;
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::collections::BTreeMap;

/// The two-sided level of every interval of a report.
pub const LEVEL: f64 = 0.95;

/// A mean over seeds with its two-sided t-interval. With one value the interval and
/// the standard deviation are unknown (NaN, `null` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
    /// The sample standard deviation (n − 1).
    pub sd: f64,
    pub n: usize,
}

impl Interval {
    /// Whether the interval lies wholly above 0, below 0, or holds it (`None` when it
    /// is unknown).
    pub fn sign(&self) -> Option<std::cmp::Ordering> {
        if !(self.low.is_finite() && self.high.is_finite()) {
            return None;
        }
        Some(if self.low > 0.0 {
            std::cmp::Ordering::Greater
        } else if self.high < 0.0 {
            std::cmp::Ordering::Less
        } else {
            std::cmp::Ordering::Equal
        })
    }
}

pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The sample standard deviation (n − 1 in the denominator); NaN below two values.
pub fn sd(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return f64::NAN;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// The `p` quantile of Student's t with `df` degrees of freedom.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df)
        .map(|t| t.inverse_cdf(p))
        .unwrap_or(f64::NAN)
}

/// The mean of `xs` with its [`LEVEL`] t-interval: mean ± t(1 − α/2, n − 1) · sd / √n.
pub fn t_interval(xs: &[f64]) -> Interval {
    let n = xs.len();
    let m = mean(xs);
    let s = sd(xs);
    let half = if n >= 2 {
        t_quantile(1.0 - (1.0 - LEVEL) / 2.0, (n - 1) as f64) * s / (n as f64).sqrt()
    } else {
        f64::NAN
    };
    Interval {
        mean: m,
        low: m - half,
        high: m + half,
        sd: s,
        n,
    }
}

/// The t-interval of the paired differences `a[i] − b[i]`.
pub fn paired(a: &[f64], b: &[f64]) -> Interval {
    assert_eq!(a.len(), b.len(), "paired values come in pairs");
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    t_interval(&d)
}

/// The `q` quantile by linear interpolation between order statistics (numpy's
/// default); NaN for no values.
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

pub fn median(xs: &[f64]) -> f64 {
    quantile(xs, 0.5)
}

/// The variance of one evaluation's avg@k that comes from sampling alone: each task's
/// success fraction p̂ = c / n is binomial, with unbiased variance p̂(1 − p̂)/(n − 1),
/// and avg@k is the mean over the T tasks, so Var = Σ p̂(1 − p̂)/(n − 1) / T². A task
/// of one episode adds nothing (its variance is unknown).
pub fn avg_at_k_noise_var(per_task: &BTreeMap<String, TaskCount>) -> f64 {
    let t = per_task.len();
    if t == 0 {
        return f64::NAN;
    }
    let sum: f64 = per_task
        .values()
        .filter(|c| c.episodes > 1)
        .map(|c| {
            let p = c.successes as f64 / c.episodes as f64;
            p * (1.0 - p) / (c.episodes - 1) as f64
        })
        .sum();
    sum / (t * t) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn mean_sd_and_interval_by_hand() {
        // 1, 2, 3, 4: mean 2.5, Σ(x − m)² = 5, sd = √(5/3); t(0.975, 3) = 3.182446305284263.
        let i = t_interval(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(i.mean, 2.5);
        assert!(close(i.sd, (5.0f64 / 3.0).sqrt(), 1e-15));
        let half = 3.182446305284263 * (5.0f64 / 3.0).sqrt() / 2.0;
        assert!(close(i.low, 2.5 - half, 1e-9), "{i:?}");
        assert!(close(i.high, 2.5 + half, 1e-9), "{i:?}");
        assert_eq!(i.sign(), Some(std::cmp::Ordering::Greater));
        // One value: no interval.
        let one = t_interval(&[0.3]);
        assert_eq!(one.mean, 0.3);
        assert!(one.low.is_nan() && one.sd.is_nan());
        assert_eq!(one.sign(), None);
    }

    #[test]
    fn paired_differences() {
        // Differences 0.1, −0.1, 0.3: mean 0.1, sd 0.2, t(0.975, 2) = 4.302652729749464.
        let i = paired(&[0.5, 0.4, 0.9], &[0.4, 0.5, 0.6]);
        assert!(close(i.mean, 0.1, 1e-12));
        assert!(close(i.sd, 0.2, 1e-12));
        let half = 4.302652729749464 * 0.2 / 3f64.sqrt();
        assert!(close(i.high, 0.1 + half, 1e-9));
        assert_eq!(i.sign(), Some(std::cmp::Ordering::Equal));
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert_eq!(median(&v), 2.5);
        // pos = 0.95 × 3 = 2.85: 3 + 0.85 × (4 − 3).
        assert!(close(quantile(&v, 0.95), 3.85, 1e-12));
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn binomial_noise_of_avg_at_k() {
        // Two tasks of 4 episodes, 1 and 2 successes: (0.25·0.75/3 + 0.5·0.5/3) / 4.
        let per_task = BTreeMap::from([
            (
                "a".to_string(),
                TaskCount {
                    episodes: 4,
                    successes: 1,
                },
            ),
            (
                "b".to_string(),
                TaskCount {
                    episodes: 4,
                    successes: 2,
                },
            ),
        ]);
        let want = (0.25 * 0.75 / 3.0 + 0.25 / 3.0) / 4.0;
        assert!(close(avg_at_k_noise_var(&per_task), want, 1e-15));
    }
}
