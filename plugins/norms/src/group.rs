//! Group statistics: mean and unbiased standard deviation.

/// Mean and unbiased (n − 1) standard deviation of `values`. For fewer than two values
/// the std is undefined; callers handle singletons before asking.
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbiased_std_of_known_values() {
        // mean 5, squared deviations 9+1+1+9 = 20, / 3
        let (m, s) = mean_std(&[2.0, 4.0, 6.0, 8.0]);
        assert_eq!(m, 5.0);
        assert!((s - (20.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn all_equal_values_have_zero_std() {
        assert_eq!(mean_std(&[0.5, 0.5, 0.5]), (0.5, 0.0));
    }
}
