//! Window operators over f32 tensors and max pooling over any number
//! type: max and average pooling, the indices of a max pool.

use super::cells::{Load, Src};
use core::cell::Cell;
use core::ops::Range;
use stow_bundle::DType;

/// Geometry of a window op over `planes` planes of up to three spatial
/// dimensions (depth, height, width; 1-D and 2-D ops have leading
/// dimensions of size 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Images × channels.
    pub planes: usize,
    /// Input depth, height and width.
    pub input: [usize; 3],
    /// Output depth, height and width.
    pub output: [usize; 3],
    /// Kernel depth, height and width.
    pub kernel: [usize; 3],
    /// Strides.
    pub strides: [usize; 3],
    /// Dilations.
    pub dilations: [usize; 3],
    /// Padding before (front, top, left).
    pub pad: [usize; 3],
    /// Padding after (back, bottom, right).
    pub pad_after: [usize; 3],
}

impl Window {
    /// Taps of the window at output position `o` along `axis` that land
    /// inside the input, as (first tap, last tap + 1).
    #[inline]
    pub fn taps(&self, axis: usize, o: usize) -> (usize, usize) {
        let start = (o * self.strides[axis]) as isize - self.pad[axis] as isize;
        let d = self.dilations[axis] as isize;
        let n = self.input[axis] as isize;
        let mut lo = 0;
        while lo < self.kernel[axis] && start + lo as isize * d < 0 {
            lo += 1;
        }
        let mut hi = self.kernel[axis];
        while hi > lo && start + (hi as isize - 1) * d >= n {
            hi -= 1;
        }
        (lo, hi)
    }

    /// Taps of the window at output position `o` along `axis` that land
    /// inside the input or its padding: what an average that counts
    /// padding divides by. A window that ceil mode lets run past the
    /// padding does not count what lies beyond it.
    pub fn padded_taps(&self, axis: usize, o: usize) -> usize {
        let start = (o * self.strides[axis]) as isize - self.pad[axis] as isize;
        let d = self.dilations[axis] as isize;
        let (lo, hi) = (
            -(self.pad[axis] as isize),
            (self.input[axis] + self.pad_after[axis]) as isize,
        );
        (0..self.kernel[axis])
            .filter(|&k| (lo..hi).contains(&(start + k as isize * d)))
            .count()
    }

    /// Input coordinate of tap `tap` of output position `o` along `axis`
    /// (only for taps inside the input).
    pub fn input_at(&self, axis: usize, o: usize, tap: usize) -> usize {
        o * self.strides[axis] + tap * self.dilations[axis] - self.pad[axis]
    }

    /// Elements of one input plane.
    pub fn input_plane(&self) -> usize {
        self.input.iter().product()
    }

    /// Elements of one output plane.
    pub fn output_plane(&self) -> usize {
        self.output.iter().product()
    }
}

/// Pooling flavours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pool {
    /// Largest value in the window.
    Max,
    /// Sum, optionally divided by the window size (with or without the
    /// padding).
    Sum {
        /// Divide by the count.
        normalize: bool,
        /// Count padding positions too.
        count_include_pad: bool,
    },
}

/// Element types max pooling takes: ordered, with a least value to start
/// from.
pub trait Ordered: bytemuck::Pod + PartialOrd {
    /// The least value (−∞ for floats).
    const LOWEST: Self;
}

macro_rules! ordered {
    ($($t:ty: $lowest:expr),*) => {$(
        impl Ordered for $t {
            const LOWEST: Self = $lowest;
        }
    )*};
}
ordered!(f32: f32::NEG_INFINITY, f64: f64::NEG_INFINITY, i8: i8::MIN, i16: i16::MIN,
    i32: i32::MIN, i64: i64::MIN, u8: 0, u16: 0, u32: 0, u64: 0);

/// True for the element types [`max_pool`] is run on (every number type
/// but f16, which the runtime has no arithmetic for).
pub fn max_pools(dtype: DType) -> bool {
    !matches!(dtype, DType::F16 | DType::Bool)
}

/// Max-pools planes `planes` of `x` into `out` and, when given, writes where
/// each maximum is in its input plane into `indices` (row-major over the
/// plane's depth, height and width).
///
/// A value replaces the maximum only when larger, as onnxruntime does: a
/// float NaN is skipped, and among equal values the first (row-major)
/// wins. The index is that of the first tap when no value exceeds
/// [`Ordered::LOWEST`], rather than onnxruntime's position before the
/// window; −1 for a window with no tap in the input (all padding).
pub fn max_pool<T: Ordered>(
    w: &Window,
    planes: Range<usize>,
    x: impl Load<T>,
    out: &[Cell<T>],
    indices: Option<&[Cell<i64>]>,
) {
    let planar = w.input[0] == 1 && w.output[0] == 1 && w.kernel[0] == 1;
    match indices {
        None if planar => max_pool_rows(w, planes, x, out),
        _ => max_pool_taps(w, planes, x, out, indices),
    }
}

/// Outputs of one row of a 2-d max pool computed together.
const CHUNK: usize = 64;

/// [`max_pool`] of 2-d windows without indices, a row of outputs at a
/// time: each window row's maximum first (the windows' columns fixed for
/// the whole plane, the inner ones without a bounds test), then the
/// maximum of those down the window. Taking the first value larger than
/// all before it row by row, then the first such row maximum larger than
/// all before it, keeps the value the row-major scan keeps, signed zeros
/// and NaNs included (the generic loop with its tap ranges per output was
/// 5 % of resnet50's run for its one 3×3 / 2 pool).
fn max_pool_rows<T: Ordered>(w: &Window, planes: Range<usize>, x: impl Load<T>, out: &[Cell<T>]) {
    let [_, _, iw] = w.input;
    let [_, oh, ow] = w.output;
    let (kw, sx, dx, px) = (w.kernel[2], w.strides[2], w.dilations[2], w.pad[2]);
    // Outputs whose window lies inside the row: from the first whose
    // first tap is in, to the last whose last tap is.
    let inner_lo = px.div_ceil(sx).min(ow);
    let span = (kw - 1) * dx;
    let inner_hi = if iw + px > span {
        ((iw + px - span - 1) / sx + 1).clamp(inner_lo, ow)
    } else {
        inner_lo
    };
    for plane in planes.start..planes.end.min(w.planes) {
        let xb = plane * w.input_plane();
        let ob = plane * w.output_plane();
        for oy in 0..oh {
            let (ky0, ky1) = w.taps(1, oy);
            for c0 in (0..ow).step_by(CHUNK) {
                let n = CHUNK.min(ow - c0);
                let mut acc = [T::LOWEST; CHUNK];
                // The chunk's outputs whose windows lie inside the row.
                let (a, b) = (inner_lo.clamp(c0, c0 + n), inner_hi.clamp(c0, c0 + n));
                for ky in ky0..ky1 {
                    let row = x.sub(xb + w.input_at(1, oy, ky) * iw, iw);
                    let mut h = [T::LOWEST; CHUNK];
                    for ox in (c0..a).chain(b..c0 + n) {
                        let (kx0, kx1) = w.taps(2, ox);
                        for kx in kx0..kx1 {
                            let v = row.load(w.input_at(2, ox, kx));
                            if v > h[ox - c0] {
                                h[ox - c0] = v;
                            }
                        }
                    }
                    let inner = &mut h[a - c0..b - c0];
                    if b > a && (kw, sx, dx) == (3, 2, 1) {
                        // resnet's pool: the run the windows read taken
                        // once, so the three taps need no bounds tests.
                        let seg = row.sub(a * 2 - px, 2 * (b - a) + 1);
                        // Sixteen outputs at a time from a fixed array of
                        // their 33 inputs, so that the stride-2 reads are
                        // shuffles and the comparisons vector code (byte
                        // by byte it was 8 % of resnet50 QDQ's run); the
                        // taps in the same order, so the same values.
                        let mut i = bytes::max3_stride2(seg, inner);
                        while i + 16 <= inner.len() {
                            let s = seg.sub(2 * i, 33);
                            // Copied by a plain loop: `from_fn` loads
                            // them one by one.
                            let mut v = [T::LOWEST; 33];
                            for (k, v) in v.iter_mut().enumerate() {
                                *v = s.load(k);
                            }
                            let m: &mut [T] = &mut inner[i..i + 16];
                            for t in 0..3 {
                                for (l, m) in m.iter_mut().enumerate() {
                                    if v[2 * l + t] > *m {
                                        *m = v[2 * l + t];
                                    }
                                }
                            }
                            i += 16;
                        }
                        for (i, m) in inner.iter_mut().enumerate().skip(i) {
                            for v in [seg.load(2 * i), seg.load(2 * i + 1), seg.load(2 * i + 2)] {
                                if v > *m {
                                    *m = v;
                                }
                            }
                        }
                    } else {
                        for (i, m) in inner.iter_mut().enumerate() {
                            let start = (a + i) * sx - px;
                            for k in 0..kw {
                                let v = row.load(start + k * dx);
                                if v > *m {
                                    *m = v;
                                }
                            }
                        }
                    }
                    let done = bytes::max_into(&mut acc[..n], &h[..n]);
                    for (m, v) in acc[done..n].iter_mut().zip(&h[done..n]) {
                        if *v > *m {
                            *m = *v;
                        }
                    }
                }
                let o = &out[ob + oy * ow + c0..ob + oy * ow + c0 + n];
                super::cells::copy_into(o, &acc[..n]);
            }
        }
    }
}

/// [`max_pool`] by the definition: every tap of every window in row-major
/// order.
fn max_pool_taps<T: Ordered>(
    w: &Window,
    planes: Range<usize>,
    x: impl Load<T>,
    out: &[Cell<T>],
    indices: Option<&[Cell<i64>]>,
) {
    let [_, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    for plane in planes.start..planes.end.min(w.planes) {
        let xb = plane * w.input_plane();
        let ob = plane * w.output_plane();
        for oz in 0..od {
            let (kz0, kz1) = w.taps(0, oz);
            for oy in 0..oh {
                let (ky0, ky1) = w.taps(1, oy);
                for ox in 0..ow {
                    let (kx0, kx1) = w.taps(2, ox);
                    let (mut max, mut at) = (T::LOWEST, None);
                    for kz in kz0..kz1 {
                        let depth = w.input_at(0, oz, kz) * ih * iw;
                        for ky in ky0..ky1 {
                            let row = depth + w.input_at(1, oy, ky) * iw;
                            for kx in kx0..kx1 {
                                let p = row + w.input_at(2, ox, kx);
                                let v = x.load(xb + p);
                                if v > max || at.is_none() {
                                    max = if v > max { v } else { max };
                                    at = Some(p);
                                }
                            }
                        }
                    }
                    let o = ob + (oz * oh + oy) * ow + ox;
                    out[o].set(max);
                    if let Some(indices) = indices {
                        indices[o].set(at.map_or(-1, |p| p as i64));
                    }
                }
            }
        }
    }
}

/// Rewrites `x`, indices within their plane (as [`max_pool`] writes them)
/// of an input whose planes have dimensions `spatial`, as ONNX's: the
/// planes before counted in, column-major within the plane when
/// `column_major`. `per_plane` indices belong to each plane. Fails with an
/// index outside its plane.
pub fn max_pool_indices(
    spatial: &[usize],
    per_plane: usize,
    column_major: bool,
    x: Src<'_, i64>,
    out: &[Cell<i64>],
) -> Result<(), i64> {
    let plane_len: usize = spatial.iter().product();
    for (i, cell) in out.iter().enumerate() {
        let index = x.at(i);
        let mut within = usize::try_from(index)
            .ok()
            .filter(|&p| p < plane_len)
            .ok_or(index)?;
        if column_major {
            // Coordinates peeled off from the fastest (last) axis, then
            // weighted by the product of the axes before each.
            let (mut rest, mut stride, mut flipped) = (within, plane_len, 0);
            for &dim in spatial.iter().rev() {
                stride /= dim;
                flipped += (rest % dim) * stride;
                rest /= dim;
            }
            within = flipped;
        }
        let plane = i / per_plane.max(1);
        let onnx = plane
            .checked_mul(plane_len)
            .and_then(|b| b.checked_add(within))
            .and_then(|v| i64::try_from(v).ok())
            .ok_or(index)?;
        cell.set(onnx);
    }
    Ok(())
}

/// Pools planes `planes` of `x` into `out`.
pub fn pool(kind: Pool, w: &Window, planes: Range<usize>, x: impl Load<f32>, out: &[Cell<f32>]) {
    let [_, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    for plane in planes.start..planes.end.min(w.planes) {
        let xb = plane * w.input_plane();
        let ob = plane * w.output_plane();
        for oz in 0..od {
            let (kz0, kz1) = w.taps(0, oz);
            for oy in 0..oh {
                let (ky0, ky1) = w.taps(1, oy);
                for ox in 0..ow {
                    let (kx0, kx1) = w.taps(2, ox);
                    let mut acc = match kind {
                        Pool::Max => f32::NEG_INFINITY,
                        Pool::Sum { .. } => 0.0,
                    };
                    for kz in kz0..kz1 {
                        let depth = xb + w.input_at(0, oz, kz) * ih * iw;
                        for ky in ky0..ky1 {
                            let row = depth + w.input_at(1, oy, ky) * iw;
                            for kx in kx0..kx1 {
                                let v = x.load(row + w.input_at(2, ox, kx));
                                acc = match kind {
                                    Pool::Max => acc.max(v),
                                    Pool::Sum { .. } => acc + v,
                                };
                            }
                        }
                    }
                    if let Pool::Sum {
                        normalize: true,
                        count_include_pad,
                    } = kind
                    {
                        let count = if count_include_pad {
                            w.padded_taps(0, oz) * w.padded_taps(1, oy) * w.padded_taps(2, ox)
                        } else {
                            (kz1 - kz0) * (ky1 - ky0) * (kx1 - kx0)
                        };
                        acc /= count.max(1) as f32;
                    }
                    out[ob + (oz * oh + oy) * ow + ox].set(acc);
                }
            }
        }
    }
}

/// Byte rows of the 3-wide stride-2 pool in vector registers: an int8
/// resnet50's one pool ran byte by byte (the generic 16-output loop is
/// not vectorised for bytes) and took 9 % of the model's run.
mod bytes {
    use super::{Load, Ordered};
    use core::any::TypeId;

    /// `Some(true)` for `i8`, `Some(false)` for `u8`, `None` for the
    /// types without a byte kernel.
    fn byte_signedness<T: Ordered>() -> Option<bool> {
        if TypeId::of::<T>() == TypeId::of::<u8>() {
            Some(false)
        } else if TypeId::of::<T>() == TypeId::of::<i8>() {
            Some(true)
        } else {
            None
        }
    }

    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    fn is_f32<T: Ordered>() -> bool {
        TypeId::of::<T>() == TypeId::of::<f32>()
    }

    /// `m[i] = max(m[i], s[2i], s[2i+1], s[2i+2])` for the leading outputs
    /// of `m` a vector kernel covers, when `T` is `u8` or `i8` and the CPU
    /// has one; returns how many it did (the caller does the rest). `s`
    /// holds `2 * m.len() + 1` elements. Integers have one maximum, so the
    /// order of the comparisons does not matter.
    pub(super) fn max3_stride2<T: Ordered>(s: impl Load<T>, m: &mut [T]) -> usize {
        let Some(signed) = byte_signedness::<T>() else {
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            if is_f32::<T>() && std::is_x86_feature_detected!("avx512f") {
                assert!(s.count() > 2 * m.len());
                // SAFETY: the CPU has AVX-512 F (checked above); `T` is
                // `f32` (checked above), `s` holds `2 * m.len() + 1` of
                // them (asserted), and the kernel reads and writes within
                // those.
                #[allow(unsafe_code)]
                return unsafe {
                    x86::max3_stride2_f32(s.ptr().cast(), m.as_mut_ptr().cast(), m.len())
                };
            }
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            if is_f32::<T>() && std::is_x86_feature_detected!("avx2") {
                assert!(s.count() > 2 * m.len());
                // SAFETY: as above, with AVX2.
                #[allow(unsafe_code)]
                return unsafe {
                    x86::max3_stride2_f32_avx2(s.ptr().cast(), m.as_mut_ptr().cast(), m.len())
                };
            }
            return 0;
        };
        assert!(s.count() > 2 * m.len());
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above); `T` is one byte
            // (checked above), `s` holds `2 * m.len() + 1` of them
            // (asserted), and the kernel reads and writes within those.
            #[allow(unsafe_code)]
            return unsafe {
                let (src, dst) = (s.ptr().cast::<u8>(), m.as_mut_ptr().cast::<u8>());
                if signed {
                    x86::max3_stride2::<true>(src, dst, m.len())
                } else {
                    x86::max3_stride2::<false>(src, dst, m.len())
                }
            };
        }
        let _ = signed;
        0
    }

    /// `m[i] = max(m[i], v[i])` for the leading elements a vector kernel
    /// covers, as [`max3_stride2`]; returns how many.
    pub(super) fn max_into<T: Ordered>(m: &mut [T], v: &[T]) -> usize {
        let n = m.len().min(v.len());
        let Some(signed) = byte_signedness::<T>() else {
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            if is_f32::<T>() && std::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512 F (checked above); `T` is
                // `f32` (checked above) and both slices hold `n` of them.
                #[allow(unsafe_code)]
                return unsafe { x86::max_into_f32(v.as_ptr().cast(), m.as_mut_ptr().cast(), n) };
            }
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            if is_f32::<T>() && std::is_x86_feature_detected!("avx2") {
                // SAFETY: as above, with AVX2.
                #[allow(unsafe_code)]
                return unsafe {
                    x86::max_into_f32_avx2(v.as_ptr().cast(), m.as_mut_ptr().cast(), n)
                };
            }
            return 0;
        };
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above); `T` is one byte
            // (checked above) and both slices hold `n` of them.
            #[allow(unsafe_code)]
            return unsafe {
                let (src, dst) = (v.as_ptr().cast::<u8>(), m.as_mut_ptr().cast::<u8>());
                if signed {
                    x86::max_into::<true>(src, dst, n)
                } else {
                    x86::max_into::<false>(src, dst, n)
                }
            };
        }
        let _ = (signed, n);
        0
    }

    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    #[allow(unsafe_code)]
    mod x86 {
        use core::arch::x86_64::*;

        /// [`max3_stride2`] for floats, 16 outputs at a time: the even
        /// and odd lanes of the 32 floats from `2i`, then the even lanes
        /// of the 32 from `2i + 2`, each kept where greater, in the taps'
        /// order. `_mm512_max_ps(v, m)` is `v` exactly where `v > m` and
        /// `m` otherwise (NaNs and equal zeros included), the scalar
        /// loop's rule; the overlapping last block takes maxima already
        /// taken, which changes nothing.
        ///
        /// # Safety
        /// AVX-512 F; `src` readable for `2 * n + 1` floats, `dst`
        /// writable for `n`.
        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn max3_stride2_f32(src: *const f32, dst: *mut f32, n: usize) -> usize {
            let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            let block = |i: usize| {
                // SAFETY: floats 2i .. 2i + 34 are within the `2n + 1`
                // readable (the callers below keep 2i + 34 <= 2n + 1) and
                // outputs i .. i + 16 within the `n` writable.
                let p = src.add(2 * i);
                let ld = |k: usize| _mm512_loadu_ps(p.add(k));
                let (a, b) = (ld(0), ld(16));
                let (c, d) = (ld(2), ld(18));
                let dp = dst.add(i);
                let mut m = _mm512_loadu_ps(dp);
                m = _mm512_max_ps(_mm512_permutex2var_ps(a, even, b), m);
                m = _mm512_max_ps(_mm512_permutex2var_ps(a, odd, b), m);
                m = _mm512_max_ps(_mm512_permutex2var_ps(c, even, d), m);
                _mm512_storeu_ps(dp, m);
            };
            // The last block reads up to float 2i + 34.
            if 2 * 16 + 2 > 2 * n + 1 {
                return 0;
            }
            let mut i = 0;
            while i + 16 <= n && 2 * i + 34 <= 2 * n + 1 {
                block(i);
                i += 16;
            }
            if i < n {
                let last = (n - 16).min((2 * n + 1 - 34) / 2);
                block(last);
                return last + 16;
            }
            n
        }

        /// [`max_into`] for floats, 16 at a time, the end overlapping the
        /// block before as in [`max3_stride2_f32`].
        ///
        /// # Safety
        /// AVX-512 F; `src` readable and `dst` writable for `n` floats.
        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn max_into_f32(src: *const f32, dst: *mut f32, n: usize) -> usize {
            let block = |i: usize| {
                // SAFETY: i + 16 <= n (the callers below).
                let d = dst.add(i);
                _mm512_storeu_ps(
                    d,
                    _mm512_max_ps(_mm512_loadu_ps(src.add(i)), _mm512_loadu_ps(d)),
                );
            };
            if n < 16 {
                return 0;
            }
            let mut i = 0;
            while i + 16 <= n {
                block(i);
                i += 16;
            }
            if i < n {
                block(n - 16);
            }
            n
        }

        /// [`max3_stride2_f32`] with AVX2, 8 outputs at a time: the
        /// even and odd lanes of the 16 floats from `2i` (a shuffle within
        /// each 128-bit half, then the halves' 64-bit pieces put in
        /// order), then the even lanes of the 16 from `2i + 2`.
        /// `_mm256_max_ps(v, m)` is `v` exactly where `v > m`, as there.
        ///
        /// # Safety
        /// AVX2; `src` readable for `2 * n + 1` floats, `dst` writable
        /// for `n`.
        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn max3_stride2_f32_avx2(
            src: *const f32,
            dst: *mut f32,
            n: usize,
        ) -> usize {
            // Lanes (a0 a2 b0 b2 | a4 a6 b4 b6) to (a0 a2 a4 a6 b0 b2 b4 b6).
            let order = |v: __m256| {
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)))
            };
            let block = |i: usize| {
                // SAFETY: floats 2i .. 2i + 18 are within the `2n + 1`
                // readable (the callers below keep 2i + 18 <= 2n + 1) and
                // outputs i .. i + 8 within the `n` writable.
                let p = src.add(2 * i);
                let ld = |k: usize| _mm256_loadu_ps(p.add(k));
                let (a, b) = (ld(0), ld(8));
                let (c, d) = (ld(2), ld(10));
                let dp = dst.add(i);
                let mut m = _mm256_loadu_ps(dp);
                m = _mm256_max_ps(order(_mm256_shuffle_ps::<0b10_00_10_00>(a, b)), m);
                m = _mm256_max_ps(order(_mm256_shuffle_ps::<0b11_01_11_01>(a, b)), m);
                m = _mm256_max_ps(order(_mm256_shuffle_ps::<0b10_00_10_00>(c, d)), m);
                _mm256_storeu_ps(dp, m);
            };
            if 2 * 8 + 2 > 2 * n + 1 {
                return 0;
            }
            let mut i = 0;
            while i + 8 <= n && 2 * i + 18 <= 2 * n + 1 {
                block(i);
                i += 8;
            }
            if i < n {
                let last = (n - 8).min((2 * n + 1 - 18) / 2);
                block(last);
                return last + 8;
            }
            n
        }

        /// [`max_into_f32`] with AVX2, 8 at a time.
        ///
        /// # Safety
        /// AVX2; `src` readable and `dst` writable for `n` floats.
        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn max_into_f32_avx2(src: *const f32, dst: *mut f32, n: usize) -> usize {
            let block = |i: usize| {
                // SAFETY: i + 8 <= n (the callers below).
                let d = dst.add(i);
                _mm256_storeu_ps(
                    d,
                    _mm256_max_ps(_mm256_loadu_ps(src.add(i)), _mm256_loadu_ps(d)),
                );
            };
            if n < 8 {
                return 0;
            }
            let mut i = 0;
            while i + 8 <= n {
                block(i);
                i += 8;
            }
            if i < n {
                block(n - 8);
            }
            n
        }

        /// 32 outputs at a time from the 65 bytes their windows span:
        /// in each 16-bit lane of a load from `2i`, its low byte is the
        /// first tap and its high byte the second; the third is the high
        /// byte of the load one byte on. Shifting the high bytes down and
        /// taking the maxima leaves each output in its lane's low byte
        /// (no byte past the windows is read). A row whose length is not a
        /// multiple of 32 ends with a block overlapping the one before
        /// (the maximum twice over is the same maximum).
        ///
        /// # Safety
        /// AVX2; `src` readable for `2 * n + 1` bytes, `dst` writable
        /// for `n`.
        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn max3_stride2<const SIGNED: bool>(
            src: *const u8,
            dst: *mut u8,
            n: usize,
        ) -> usize {
            let max = |a, b| {
                if SIGNED {
                    _mm256_max_epi8(a, b)
                } else {
                    _mm256_max_epu8(a, b)
                }
            };
            // Even bytes of each 128-bit lane to its low half.
            let even = _mm256_setr_epi8(
                0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1, 0, 2, 4, 6, 8, 10, 12,
                14, -1, -1, -1, -1, -1, -1, -1, -1,
            );
            let block = |i: usize| {
                // SAFETY: bytes 2i .. 2i + 65 are within the `2n + 1`
                // readable and outputs i .. i + 32 within the `n` writable
                // (the callers below keep i + 32 <= n).
                let p = src.add(2 * i);
                let ld = |k: usize| _mm256_loadu_si256(p.add(k).cast());
                let taps = |a: __m256i, b: __m256i| {
                    max(max(a, _mm256_srli_epi16::<8>(a)), _mm256_srli_epi16::<8>(b))
                };
                let (lo, hi) = (taps(ld(0), ld(1)), taps(ld(32), ld(33)));
                // lo's lanes hold outputs 0-7 and 8-15, hi's 16-23 and
                // 24-31, each in its low 8 bytes.
                let (lo, hi) = (_mm256_shuffle_epi8(lo, even), _mm256_shuffle_epi8(hi, even));
                let out = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_unpacklo_epi64(lo, hi));
                let d = dst.add(i).cast::<__m256i>();
                _mm256_storeu_si256(d, max(_mm256_loadu_si256(d), out));
            };
            if n < 32 {
                return 0;
            }
            let mut i = 0;
            while i + 32 <= n {
                block(i);
                i += 32;
            }
            if i < n {
                block(n - 32);
            }
            n
        }

        /// `dst[i] = max(dst[i], src[i])`, 32 at a time, the end as in
        /// [`max3_stride2`].
        ///
        /// # Safety
        /// AVX2; `src` readable and `dst` writable for `n` bytes.
        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn max_into<const SIGNED: bool>(
            src: *const u8,
            dst: *mut u8,
            n: usize,
        ) -> usize {
            let block = |i: usize| {
                // SAFETY: i + 32 <= n (the callers below).
                let (a, d) = (_mm256_loadu_si256(src.add(i).cast()), dst.add(i).cast());
                let b = _mm256_loadu_si256(d);
                let m = if SIGNED {
                    _mm256_max_epi8(a, b)
                } else {
                    _mm256_max_epu8(a, b)
                };
                _mm256_storeu_si256(d, m);
            };
            if n < 32 {
                return 0;
            }
            let mut i = 0;
            while i + 32 <= n {
                block(i);
                i += 32;
            }
            // The end overlapping the block before: the same maxima.
            if i < n {
                block(n - 32);
            }
            n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// One plane of `input` (height × width), a `kernel` (height ×
    /// width) with `stride` and `pad` on every side, no dilation.
    fn window(input: [usize; 2], kernel: [usize; 2], stride: usize, pad: usize) -> Window {
        let out = |n: usize, k: usize| (n + 2 * pad - k) / stride + 1;
        Window {
            planes: 1,
            input: [1, input[0], input[1]],
            output: [1, out(input[0], kernel[0]), out(input[1], kernel[1])],
            kernel: [1, kernel[0], kernel[1]],
            strides: [1, stride, stride],
            dilations: [1; 3],
            pad: [0, pad, pad],
            pad_after: [0, pad, pad],
        }
    }

    fn run<T: Ordered + Default>(w: &Window, x: &[T]) -> (Vec<T>, Vec<i64>) {
        let n = w.planes * w.output_plane();
        let out = vec![Cell::new(T::default()); n];
        let indices = vec![Cell::new(0i64); n];
        max_pool(w, 0..w.planes, x, &out, Some(&indices));
        (
            out.iter().map(Cell::get).collect(),
            indices.iter().map(Cell::get).collect(),
        )
    }

    /// The 2-d path without indices keeps the value the definition keeps
    /// (first maximum in row-major order: which zero of ±0, NaNs
    /// skipped, −∞ and empty windows), over random sizes, kernels,
    /// strides, dilations, padding on either side (ceil mode's windows
    /// past the input included) and plane ranges.
    #[test]
    fn planar_max_pool_equals_the_definition() {
        let mut below = crate::kernels::testing::below(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..400 {
            let planes = 1 + below(4);
            let (ih, iw) = (1 + below(20), 1 + below(150));
            let kernel = [1 + below(4), 1 + below(4)];
            let (sy, sx) = (1 + below(3), 1 + below(3));
            let (dy, dx) = (1 + below(2), 1 + below(2));
            let pad = [below(kernel[0]), below(kernel[1])];
            let after = [below(kernel[0] + 1), below(kernel[1] + 1)];
            let span = |k: usize, d: usize| (k - 1) * d + 1;
            let out = |n: usize, p: usize, q: usize, k: usize, s: usize| {
                (n + p + q).checked_sub(k).map(|e| e / s + 1)
            };
            let (Some(oh), Some(ow)) = (
                out(ih, pad[0], after[0], span(kernel[0], dy), sy),
                out(iw, pad[1], after[1], span(kernel[1], dx), sx),
            ) else {
                continue;
            };
            let w = Window {
                planes,
                input: [1, ih, iw],
                output: [1, oh, ow],
                kernel: [1, kernel[0], kernel[1]],
                strides: [1, sy, sx],
                dilations: [1, dy, dx],
                pad: [0, pad[0], pad[1]],
                pad_after: [0, after[0], after[1]],
            };
            let x: Vec<f32> = (0..planes * ih * iw)
                .map(|_| match below(12) {
                    0 => f32::NAN,
                    1 => 0.0,
                    2 => -0.0,
                    3 => f32::NEG_INFINITY,
                    _ => below(7) as f32 - 3.0,
                })
                .collect();
            let n = planes * oh * ow;
            let p0 = below(planes);
            let p1 = p0 + 1 + below(planes - p0);
            let want = vec![Cell::new(1.5f32); n];
            max_pool_taps(&w, p0..p1, &x[..], &want, None);
            let got = vec![Cell::new(1.5f32); n];
            max_pool(&w, p0..p1, &x[..], &got, None);
            let bits = |v: &[Cell<f32>]| v.iter().map(|c| c.get().to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&want),
                "case {case}: {w:?}, planes {p0}..{p1}"
            );
            // And bytes (the quantized models' pools).
            let x: Vec<u8> = (0..planes * ih * iw).map(|_| below(256) as u8).collect();
            let want = vec![Cell::new(7u8); n];
            max_pool_taps(&w, p0..p1, &x[..], &want, None);
            let got = vec![Cell::new(7u8); n];
            max_pool(&w, p0..p1, &x[..], &got, None);
            let bytes = |v: &[Cell<u8>]| v.iter().map(Cell::get).collect::<Vec<_>>();
            assert_eq!(bytes(&got), bytes(&want), "case {case} (u8): {w:?}");
        }
    }

    /// The vector kernels of 3-wide stride-2 rows (resnets' pool) keep
    /// the definition's values for u8, i8 and f32, from weights and from
    /// arena cells, at every width around its 32-output blocks and either
    /// padding.
    #[test]
    fn pools_of_stride_two_equal_the_definition() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut byte = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        };
        for iw in 1..200usize {
            for pad in 0..2usize {
                let Some(ow) = (iw + 2 * pad).checked_sub(3).map(|e| e / 2 + 1) else {
                    continue;
                };
                let w = Window {
                    planes: 2,
                    input: [1, 4, iw],
                    output: [1, 2, ow],
                    kernel: [1, 3, 3],
                    strides: [1, 2, 2],
                    dilations: [1; 3],
                    pad: [0, 1, pad],
                    pad_after: [0, 1, pad],
                };
                let x: Vec<u8> = (0..2 * 4 * iw).map(|_| byte()).collect();
                let n = 2 * 2 * ow;
                let want = vec![Cell::new(0u8); n];
                max_pool_taps(&w, 0..2, &x[..], &want, None);
                let got = vec![Cell::new(0u8); n];
                let cells: Vec<Cell<u8>> = x.iter().copied().map(Cell::new).collect();
                max_pool(&w, 0..2, &cells[..], &got, None);
                let vals = |v: &[Cell<u8>]| v.iter().map(Cell::get).collect::<Vec<_>>();
                assert_eq!(vals(&got), vals(&want), "u8, width {iw}, pad {pad}");

                let x: Vec<i8> = x.iter().map(|&b| b as i8).collect();
                let want = vec![Cell::new(0i8); n];
                max_pool_taps(&w, 0..2, &x[..], &want, None);
                let got = vec![Cell::new(0i8); n];
                max_pool(&w, 0..2, &x[..], &got, None);
                let vals = |v: &[Cell<i8>]| v.iter().map(Cell::get).collect::<Vec<_>>();
                assert_eq!(vals(&got), vals(&want), "i8, width {iw}, pad {pad}");

                // Floats from the same bytes, with NaNs, both zeros and
                // −∞ among them (resnet50's fp32 pool).
                let x: Vec<f32> = x
                    .iter()
                    .map(|&b| match b as u8 % 16 {
                        0 => f32::NAN,
                        1 => 0.0,
                        2 => -0.0,
                        3 => f32::NEG_INFINITY,
                        v => v as f32 - 8.0,
                    })
                    .collect();
                let want = vec![Cell::new(0f32); n];
                max_pool_taps(&w, 0..2, &x[..], &want, None);
                let got = vec![Cell::new(0f32); n];
                let cells: Vec<Cell<f32>> = x.iter().copied().map(Cell::new).collect();
                max_pool(&w, 0..2, &cells[..], &got, None);
                let bits =
                    |v: &[Cell<f32>]| v.iter().map(|c| c.get().to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "f32, width {iw}, pad {pad}");
            }
        }
    }

    #[test]
    fn max_pool_of_integers_uses_the_whole_range() {
        // u8 above 127 and i64 beyond f32's exact integers.
        let w = window([2, 3], [2, 2], 1, 0);
        let (v, ix) = run(&w, &[1u8, 255, 3, 200, 5, 254]);
        assert_eq!((v, ix), (vec![255, 255], vec![1, 1]));
        let big = (1i64 << 53) + 1;
        let (v, ix) = run(&w, &[i64::MIN, big, big - 1, -4, big + 2, 0]);
        assert_eq!((v, ix), (vec![big + 2, big + 2], vec![4, 4]));
    }

    #[test]
    fn max_pool_indices_count_within_the_plane_with_padding() {
        // 3x3 input, 2x2 windows with padding 1: output 4x4; each index
        // is the position in the input plane, the first among equals.
        let w = window([3, 3], [2, 2], 1, 1);
        let x = [1.0f32, 5.0, 2.0, 5.0, 0.0, 7.0, 3.0, 8.0, 7.0];
        let (v, ix) = run(&w, &x);
        assert_eq!(
            v,
            [1.0, 5.0, 5.0, 2.0, 5.0, 5.0, 7.0, 7.0, 5.0, 8.0, 8.0, 7.0, 3.0, 8.0, 8.0, 7.0]
        );
        assert_eq!(ix, [0, 1, 1, 2, 3, 1, 5, 5, 3, 7, 7, 5, 6, 7, 7, 8]);
    }

    #[test]
    fn max_pool_skips_nan_and_indexes_a_window_of_lowest_values() {
        let w = window([1, 4], [1, 2], 2, 0);
        let (v, ix) = run(&w, &[f32::NAN, 2.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert_eq!(v, [2.0, f32::NEG_INFINITY]);
        assert_eq!(ix, [1, 2]);
        let (v, ix) = run(&w, &[0u16, 0, 9, 9]);
        assert_eq!((v, ix), (vec![0, 9], vec![0, 2]));
    }

    fn onnx_indices(
        spatial: &[usize],
        per_plane: usize,
        column_major: bool,
        x: &[i64],
    ) -> Result<Vec<i64>, i64> {
        let out = vec![Cell::new(0i64); x.len()];
        max_pool_indices(spatial, per_plane, column_major, Src::Weight(x), &out)?;
        Ok(out.iter().map(Cell::get).collect())
    }

    #[test]
    fn max_pool_indices_count_the_planes_before() {
        // Planes of 2x3 inputs, two pooled positions each.
        let x = [0, 5, 4, 1, 3, 2];
        assert_eq!(
            onnx_indices(&[2, 3], 2, false, &x),
            Ok(vec![0, 5, 10, 7, 15, 14])
        );
        // Column-major: (h, w) = h + 2w.
        assert_eq!(
            onnx_indices(&[2, 3], 2, true, &x),
            Ok(vec![0, 5, 9, 8, 13, 16])
        );
    }

    #[test]
    fn max_pool_indices_column_major_in_3d() {
        let dims = [2, 3, 4];
        let x: Vec<i64> = (0..24).collect();
        let got = onnx_indices(&dims, 24, true, &x).unwrap();
        for d in 0..2 {
            for h in 0..3 {
                for w in 0..4 {
                    let row = (d * 3 + h) * 4 + w;
                    assert_eq!(got[row], (d + h * 2 + w * 6) as i64, "at {d},{h},{w}");
                }
            }
        }
    }

    #[test]
    fn max_pool_indices_refuse_an_index_outside_its_plane() {
        assert_eq!(onnx_indices(&[2, 2], 1, false, &[0, 4]), Err(4));
        assert_eq!(onnx_indices(&[2, 2], 1, true, &[-1]), Err(-1));
    }
}
