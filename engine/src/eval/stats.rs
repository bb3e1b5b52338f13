//! The statistics of an evaluation: pass-rate intervals and duration percentiles.

/// The 95% Wilson score interval of `passed` successes in `total` trials, as `(low, high)`
/// fractions; `(0, 1)` with no trial. Unlike the plain normal interval it stays inside
/// [0, 1] and says something useful at 0 or `total` passes.
pub fn wilson_interval(passed: usize, total: usize) -> (f64, f64) {
    if total == 0 {
        return (0.0, 1.0);
    }
    const Z: f64 = 1.959_963_984_540_054;
    #[allow(clippy::cast_precision_loss, reason = "counts of runs")]
    let (n, p) = (total as f64, passed as f64 / total as f64);
    let z2 = Z * Z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The `p`-th percentile (0–100) of `values` by the nearest-rank method; 0 when empty.
pub fn percentile(values: &[u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a rank within the list"
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_published_values() {
        // 8 of 10: the textbook interval is [0.490, 0.943].
        let (low, high) = wilson_interval(8, 10);
        assert!((low - 0.4902).abs() < 1e-3, "{low}");
        assert!((high - 0.9433).abs() < 1e-3, "{high}");
        let (low, high) = wilson_interval(5, 5);
        assert!(
            high > 0.999_999 && (low - 0.5655).abs() < 1e-3,
            "{low} {high}"
        );
        assert_eq!(wilson_interval(0, 0), (0.0, 1.0));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let values = [40, 10, 30, 20, 50];
        assert_eq!(percentile(&values, 50.0), 30);
        assert_eq!(percentile(&values, 95.0), 50);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
