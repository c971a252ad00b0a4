//! Helpers the kernels' tests share.

/// Draws from `0..n` by xorshift, starting from `seed`: random cases that
/// are the same on every run.
pub(crate) fn below(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

/// A value in `[-1, 1)` for element `i` of the tensor numbered `seed`.
pub(crate) fn value(i: usize, seed: usize) -> f32 {
    ((i * 2_654_435_761 + seed * 40_503) % 1000) as f32 / 500.0 - 1.0
}
