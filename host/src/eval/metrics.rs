//! The metrics of docs/algorithms.md ("Evaluation metrics").

/// Mean success over the k samples of one task.
pub fn avg_at_k(successes: usize, k: usize) -> f64 {
    if k == 0 {
        0.0
    } else {
        successes as f64 / k as f64
    }
}

/// The unbiased pass@k estimator from n samples with c successes:
/// 1 − C(n−c, k) / C(n, k), computed as a product to stay exact for large n.
pub fn pass_at_k_unbiased(n: usize, c: usize, k: usize) -> f64 {
    if k == 0 || n == 0 {
        return 0.0;
    }
    if n - c < k {
        return 1.0;
    }
    // C(n−c, k)/C(n, k) = Π_{i = n−c+1}^{n} (1 − k / i)
    let miss: f64 = ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product();
    1.0 - miss
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbiased_pass_at_k_by_hand() {
        // n = 4, c = 1, k = 1: 1 − C(3,1)/C(4,1) = 1 − 3/4
        assert!((pass_at_k_unbiased(4, 1, 1) - 0.25).abs() < 1e-12);
        // n = 4, c = 1, k = 2: 1 − C(3,2)/C(4,2) = 1 − 3/6
        assert!((pass_at_k_unbiased(4, 1, 2) - 0.5).abs() < 1e-12);
        // n = 5, c = 2, k = 2: 1 − C(3,2)/C(5,2) = 1 − 3/10
        assert!((pass_at_k_unbiased(5, 2, 2) - 0.7).abs() < 1e-12);
        // k = n: any success
        assert_eq!(pass_at_k_unbiased(4, 1, 4), 1.0);
        assert_eq!(pass_at_k_unbiased(4, 0, 4), 0.0);
        // n − c < k
        assert_eq!(pass_at_k_unbiased(4, 3, 2), 1.0);
        assert_eq!(avg_at_k(3, 4), 0.75);
    }

    #[test]
    fn pass_at_one_is_the_success_rate() {
        for c in 0..=8 {
            assert!((pass_at_k_unbiased(8, c, 1) - c as f64 / 8.0).abs() < 1e-12);
        }
    }
}
