//! The last stage of the quantized products and convolutions: a row of
//! i32 sums (a tile's row, a depthwise output row) becomes output bytes,
//!
//! ```text
//! acc_l = raw_l − m·lane_sum_l + c          (i32, wrapping)
//! y_l   = requantize(acc_l, scale, zero, range)
//! ```
//!
//! `m·lane_sum_l` and `c` fold the zero points and the bias back in
//! ([`super::fast`]); a depthwise row has no lane sums (`m` = 0). Each
//! instruction set computes exactly [`super::requantize`]. For a u8 or
//! i8 output that is onnxruntime's (MLAS's) arithmetic, in f32: the sum
//! converted to f32 and multiplied by the scale (two roundings to nearest
//! even, never fused), clipped to `lo − zero ..= hi − zero` with MAXPS and
//! MINPS (NaN takes the lower bound, as theirs does), converted to an
//! integer rounding to nearest even, then the zero point added. The
//! vectors hold sixteen f32 lanes per AVX-512 instruction (eight with
//! AVX2); a zero point outside the output's range (never from ONNX, whose
//! zero point has the output's type) takes the scalar loop, which also
//! saturates after adding it.
//!
//! An i32 output (MatMulInteger, ConvInteger) keeps the exact f64
//! arithmetic of [`super::requantize_wide`]: `f64(acc)·f64(scale) +
//! f64(zero)`, clamped, rounded half to even by `vcvtpd2dq` / `vroundpd`
//! (the scalar loop for a scale that is not finite, whose NaN handling,
//! 0, the vector conversions do not share).
//!
//! - AVX-512 (with [`Isa::Vnni`]): sixteen lanes per step, stored with
//!   `vpmovdb` under a lane mask;
//! - AVX2: sixteen lanes per step as two vectors of eight, packed with the
//!   saturating packs (exact: the values are already in range);
//! - portable: the scalar loop.

use super::igemm::{Isa, NR};
use super::{requantize, Out};
use core::cell::Cell;

/// What is common to a row: the multiplier of the lane sums, the constant
/// added, the combined scale, the output's zero point and range.
#[derive(Clone, Copy, Debug)]
pub(super) struct Line {
    pub m: i32,
    pub c: i32,
    pub scale: f32,
    pub zero: i32,
    pub range: (i32, i32),
}

impl Line {
    /// A placeholder before a row's line is known.
    pub const ZERO: Line = Line {
        m: 0,
        c: 0,
        scale: 0.0,
        zero: 0,
        range: (0, 0),
    };

    /// Output `l` of a row, the reference's way.
    #[inline]
    fn scalar(&self, raw: i32, lane_sum: i32) -> i32 {
        let acc = raw
            .wrapping_sub(self.m.wrapping_mul(lane_sum))
            .wrapping_add(self.c);
        requantize(acc, self.scale, self.zero, self.range)
    }
}

/// Writes the outputs of `raw` (with `lane_sums` of the same length, or
/// none: all zero) to `out` from element `o` on. `out` must hold
/// `o + raw.len()` elements.
#[inline]
pub(super) fn row(
    isa: Isa,
    raw: &[i32],
    lane_sums: Option<&[i32]>,
    line: &Line,
    out: &Out<'_>,
    o: usize,
) {
    let n = raw.len();
    if let Some(s) = lane_sums {
        debug_assert_eq!(s.len(), n);
    }
    let sums = lane_sums.map(|s| &s[..n]);
    match out {
        Out::U8(c) => emit(isa, raw, sums, line, Dst::U8(&c[o..o + n])),
        Out::I8(c) => emit(isa, raw, sums, line, Dst::I8(&c[o..o + n])),
        Out::I32(c) => emit(isa, raw, sums, line, Dst::I32(&c[o..o + n])),
        Out::F32(f) => match f.row(o, n) {
            Some(dst) => emit(isa, raw, sums, line, Dst::F32(dst)),
            None => {
                for (l, &r) in raw.iter().enumerate() {
                    let s = sums.map_or(0, |s| s[l]);
                    out.set(o + l, line.scalar(r, s));
                }
            }
        },
    }
}

/// A whole tile's rows: row `r` of `raw` (its first `lanes` sums) with
/// `lines[r] = (o, line)` goes to `out` from element `o` on, the rows
/// sharing the lane sums. One call per tile rather than per row: with
/// AVX-512 and narrow outputs the rows run in one function (sixteen lanes,
/// one vector per row); otherwise row by row through [`row`]. The same
/// bytes either way.
#[inline]
pub(super) fn tile(
    isa: Isa,
    raw: &[[i32; NR]],
    lanes: usize,
    lane_sums: Option<&[i32]>,
    lines: &[(usize, Line)],
    out: &Out<'_>,
) {
    let lanes = lanes.min(NR);
    let sums = lane_sums.map(|s| &s[..lanes]);
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni {
        let vector = |l: &(usize, Line)| (l.1.range.0..=l.1.range.1).contains(&l.1.zero);
        let fits = |len: usize| lines.iter().all(|(o, _)| o + lanes <= len);
        let dst = match out {
            Out::U8(c) if fits(c.len()) => Some((c.as_ptr().cast::<Cell<u8>>(), c.len())),
            Out::I8(c) if fits(c.len()) => Some((c.as_ptr().cast::<Cell<u8>>(), c.len())),
            _ => None,
        };
        if let Out::F32(f) = out {
            let identity = |l: &(usize, Line)| {
                l.1.scale == 1.0 && l.1.zero == 0 && l.1.range == (i32::MIN, i32::MAX)
            };
            if lines.iter().all(identity) {
                // SAFETY: `Isa::Vnni` is only chosen where the CPU has
                // AVX-512 F and BW; the rows of `f` are as long as `lanes`.
                #[allow(unsafe_code)]
                unsafe {
                    x86::tile_floats_avx512(raw, lanes, sums, lines, f)
                };
                return;
            }
        }
        if let Some((base, len)) = dst.filter(|_| lines.iter().all(vector)) {
            // SAFETY: `Isa::Vnni` is only chosen where the CPU has AVX-512
            // F and BW; every row's `lanes` outputs lie inside `out`
            // (`fits`, `len` its length), whose u8 and i8 cells have one
            // byte's layout.
            #[allow(unsafe_code)]
            unsafe {
                let bytes = core::slice::from_raw_parts(base, len);
                x86::tile_avx512(raw, lanes, sums, lines, bytes)
            };
            return;
        }
    }
    for (r, (o, line)) in lines.iter().enumerate() {
        row(isa, &raw[r][..lanes], sums, line, out, *o);
    }
}

/// The bytes of a u8 or i8 output (the same bytes the requantisation
/// stores for either, [`x86::Consts::narrow`]); `None` for an i32 one.
pub(super) fn bytes<'o>(out: &Out<'o>) -> Option<&'o [Cell<u8>]> {
    match *out {
        Out::U8(c) => Some(c),
        Out::I8(c) => {
            // SAFETY: `Cell<i8>` and `Cell<u8>` have one byte's size and
            // alignment and every bit pattern is valid for both; the new
            // slice covers the same cells for the same lifetime, still
            // shared and interior-mutable.
            #[allow(unsafe_code)]
            let bytes =
                unsafe { core::slice::from_raw_parts(c.as_ptr().cast::<Cell<u8>>(), c.len()) };
            Some(bytes)
        }
        Out::I32(_) | Out::F32(_) => None,
    }
}

/// The output row, exactly as long as the sums.
#[derive(Clone, Copy)]
enum Dst<'a> {
    U8(&'a [core::cell::Cell<u8>]),
    I8(&'a [core::cell::Cell<i8>]),
    I32(&'a [core::cell::Cell<i32>]),
    /// A row of an f32 output ([`super::Floats::row`]).
    F32(super::Floats<'a>),
}

impl Dst<'_> {
    #[inline]
    fn set(self, l: usize, y: i32) {
        match self {
            Dst::U8(c) => c[l].set(y as u8),
            Dst::I8(c) => c[l].set(y as i8),
            Dst::I32(c) => c[l].set(y),
            Dst::F32(f) => f.cells[l].set(f.value(l, y)),
        }
    }
}

#[inline]
fn emit(isa: Isa, raw: &[i32], sums: Option<&[i32]>, line: &Line, dst: Dst<'_>) {
    let (lo, hi) = line.range;
    let narrow = matches!(dst, Dst::U8(_) | Dst::I8(_));
    // Narrow outputs: a zero point inside the range keeps `r + zero` in it
    // (no i32 overflow, no saturation needed). Wide ones: a finite scale,
    // the vector conversions having no NaN rule of their own.
    let vector = if narrow {
        (lo..=hi).contains(&line.zero)
    } else {
        line.scale.is_finite()
    };
    if vector {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni => {
                // SAFETY: `Isa::Vnni` is only chosen where the CPU has
                // AVX-512 F and BW (`Isa::detect`); the lengths of `raw`,
                // `sums` and `dst` are equal (`row`).
                #[allow(unsafe_code)]
                unsafe {
                    if narrow {
                        x86::narrow_avx512(raw, sums, line, dst)
                    } else {
                        x86::row_avx512(raw, sums, line, dst)
                    }
                };
                return;
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                // SAFETY: `Isa::Avx2` is only chosen where the CPU has
                // AVX2; lengths as above.
                #[allow(unsafe_code)]
                unsafe {
                    if narrow {
                        x86::narrow_avx2(raw, sums, line, dst)
                    } else {
                        x86::row_avx2(raw, sums, line, dst)
                    }
                };
                return;
            }
            _ => {}
        }
    }
    for (l, &r) in raw.iter().enumerate() {
        let s = sums.map_or(0, |s| s[l]);
        dst.set(l, line.scalar(r, s));
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::super::clip_bounds;
    use super::{Dst, Line};
    use core::arch::x86_64::*;
    use core::cell::Cell;

    /// Lanes per step.
    const W: usize = 16;

    /// [`super::tile`]'s rows with AVX-512 F/BW, each by
    /// [`narrow_avx512`] into the bytes of `out` (u8 or i8 cells) from
    /// its offset on; `sums` (if any) `lanes` long, every row's outputs
    /// inside `out`, `line.zero` within `line.range`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn tile_avx512(
        raw: &[[i32; super::NR]],
        lanes: usize,
        sums: Option<&[i32]>,
        lines: &[(usize, Line)],
        out: &[Cell<u8>],
    ) {
        for (r, (o, line)) in lines.iter().enumerate() {
            narrow_avx512(&raw[r][..lanes], sums, line, Dst::U8(&out[*o..*o + lanes]));
        }
    }

    /// [`super::tile`]'s rows into an f32 output with AVX-512 F/BW, every
    /// line an identity (an i32 product's: scale 1, zero point 0, every
    /// i32): each row's sums as [`row_avx512`] gives them, into f32 by
    /// [`floats_avx512`]; a row whose biases wrap past the last axis
    /// lane by lane.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn tile_floats_avx512(
        raw: &[[i32; super::NR]],
        lanes: usize,
        sums: Option<&[i32]>,
        lines: &[(usize, Line)],
        out: &super::super::Floats<'_>,
    ) {
        let mask: __mmask16 = if lanes >= W { !0 } else { (1u16 << lanes) - 1 };
        // SAFETY: `sums` holds `lanes` values; masked lanes are not read.
        #[allow(unsafe_code)]
        let s = sums.map(|s| unsafe { _mm512_maskz_loadu_epi32(mask, s.as_ptr().cast()) });
        for (r, (o, line)) in lines.iter().enumerate() {
            // SAFETY: a tile row holds `NR` = 16 sums.
            #[allow(unsafe_code)]
            let mut acc = unsafe { _mm512_maskz_loadu_epi32(mask, raw[r].as_ptr().cast()) };
            if let Some(s) = s {
                acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(line.m), s));
            }
            acc = _mm512_add_epi32(acc, _mm512_set1_epi32(line.c));
            match out.row(*o, lanes) {
                Some(f) => floats_avx512(f, 0, mask, acc),
                None => {
                    let mut ys = [0i32; W];
                    // SAFETY: `ys` holds 16 i32.
                    #[allow(unsafe_code)]
                    unsafe {
                        _mm512_storeu_epi32(ys.as_mut_ptr(), acc)
                    };
                    for (l, &y) in ys[..lanes].iter().enumerate() {
                        super::super::Out::F32(*out).set(o + l, y);
                    }
                }
            }
        }
    }

    /// [`super::emit`] for a u8 or i8 output with AVX-512 F/BW: MLAS's
    /// f32 requantisation on sixteen lanes; `line.zero` within
    /// `line.range`, `sums` and `dst` as long as `raw`. The bytes stored
    /// are the same for either type (the low byte of each i32).
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    pub(super) fn narrow_avx512(raw: &[i32], sums: Option<&[i32]>, line: &Line, dst: Dst<'_>) {
        let n = raw.len();
        let k = Consts::of(line);
        // A zero multiplier (symmetric weights: b0 = 0) adds nothing: the
        // lane sums are not read, the same sums either way.
        let sums = sums.filter(|_| line.m != 0);
        let mut l = 0;
        while l < n {
            let lanes = W.min(n - l);
            let mask: __mmask16 = if lanes == W { !0 } else { (1u16 << lanes) - 1 };
            // SAFETY (all three blocks): lanes `l..l + lanes` are inside
            // `raw`, `sums` and `dst` (equal lengths), and the masked
            // loads and stores touch no other lane; `dst`'s cells are
            // only accessed by this thread while the row is written.
            #[allow(unsafe_code)]
            let acc = unsafe { _mm512_maskz_loadu_epi32(mask, raw.as_ptr().add(l).cast()) };
            #[allow(unsafe_code)]
            let s =
                sums.map(|s| unsafe { _mm512_maskz_loadu_epi32(mask, s.as_ptr().add(l).cast()) });
            let y = k.narrow(acc, s);
            #[allow(unsafe_code)]
            unsafe {
                match dst {
                    Dst::U8(d) => {
                        _mm512_mask_cvtepi32_storeu_epi8(d.as_ptr().add(l) as *mut i8, mask, y)
                    }
                    Dst::I8(d) => {
                        _mm512_mask_cvtepi32_storeu_epi8(d.as_ptr().add(l) as *mut i8, mask, y)
                    }
                    // Not narrow: `emit` sends them to `row_avx512`.
                    Dst::I32(_) | Dst::F32(_) => {}
                }
            }
            l += lanes;
        }
    }

    /// A [`Line`] in AVX-512 registers, for sixteen lanes at a time: the
    /// one source of the narrow requantisation, used on rows re-read from
    /// a tile ([`narrow_avx512`]) and on sums still in the product's
    /// registers (`igemm`'s fused tiles).
    #[derive(Clone, Copy)]
    pub(in crate::kernels::qlinear) struct Consts {
        m: __m512i,
        c: __m512i,
        scale: __m512,
        min: __m512,
        max: __m512,
        zero: __m512i,
    }

    impl Consts {
        /// `line`'s constants; its zero point within its range.
        #[target_feature(enable = "avx512f,avx512bw")]
        #[inline]
        pub(in crate::kernels::qlinear) fn of(line: &Line) -> Consts {
            let (min, max) = clip_bounds(line.zero, line.range);
            Consts {
                m: _mm512_set1_epi32(line.m),
                c: _mm512_set1_epi32(line.c),
                scale: _mm512_set1_ps(line.scale),
                min: _mm512_set1_ps(min),
                max: _mm512_set1_ps(max),
                zero: _mm512_set1_epi32(line.zero),
            }
        }

        /// MLAS's f32 requantisation of sixteen raw sums `acc` (less `m`
        /// times the lane sums `sums`, if any): the outputs as i32, each
        /// within the line's range, whose low bytes are the u8 or i8
        /// outputs.
        #[target_feature(enable = "avx512f,avx512bw")]
        #[inline]
        pub(in crate::kernels::qlinear) fn narrow(
            &self,
            acc: __m512i,
            sums: Option<__m512i>,
        ) -> __m512i {
            let mut acc = acc;
            if let Some(s) = sums {
                acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(self.m, s));
            }
            acc = _mm512_add_epi32(acc, self.c);
            let y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), self.scale);
            // Operand order as MLAS's: a NaN takes the second, the bound.
            let y = _mm512_min_ps(_mm512_max_ps(y, self.min), self.max);
            let r =
                _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
            _mm512_add_epi32(r, self.zero)
        }
    }

    /// [`narrow_avx512`] with AVX2: two vectors of eight f32 per step; the
    /// tail short of sixteen lanes goes through a stack row.
    #[target_feature(enable = "avx2")]
    pub(super) fn narrow_avx2(raw: &[i32], sums: Option<&[i32]>, line: &Line, dst: Dst<'_>) {
        let n = raw.len();
        let m = _mm256_set1_epi32(line.m);
        let c = _mm256_set1_epi32(line.c);
        let scale = _mm256_set1_ps(line.scale);
        let (min, max) = clip_bounds(line.zero, line.range);
        let (min, max) = (_mm256_set1_ps(min), _mm256_set1_ps(max));
        let zero = _mm256_set1_epi32(line.zero);
        let mut l = 0;
        while l < n {
            let lanes = W.min(n - l);
            let mut r = [0i32; W];
            let mut s = [0i32; W];
            r[..lanes].copy_from_slice(&raw[l..l + lanes]);
            if let Some(sums) = sums {
                s[..lanes].copy_from_slice(&sums[l..l + lanes]);
            }
            let mut q = [_mm256_setzero_si256(); 2];
            for (h, q) in q.iter_mut().enumerate() {
                // SAFETY: `r` and `s` hold 16 i32; 8 from 8·h are read.
                #[allow(unsafe_code)]
                let (rv, sv) = unsafe {
                    (
                        _mm256_loadu_si256(r.as_ptr().add(8 * h).cast()),
                        _mm256_loadu_si256(s.as_ptr().add(8 * h).cast()),
                    )
                };
                let acc = _mm256_add_epi32(_mm256_sub_epi32(rv, _mm256_mullo_epi32(m, sv)), c);
                let y = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale);
                let y = _mm256_min_ps(_mm256_max_ps(y, min), max);
                // The default rounding (MXCSR): to nearest even.
                *q = _mm256_add_epi32(_mm256_cvtps_epi32(y), zero);
            }
            let w0 = _mm_packs_epi32(
                _mm256_castsi256_si128(q[0]),
                _mm256_extracti128_si256::<1>(q[0]),
            );
            let w1 = _mm_packs_epi32(
                _mm256_castsi256_si128(q[1]),
                _mm256_extracti128_si256::<1>(q[1]),
            );
            let b = if matches!(dst, Dst::U8(_)) {
                _mm_packus_epi16(w0, w1)
            } else {
                _mm_packs_epi16(w0, w1)
            };
            let mut bytes = [0u8; W];
            // SAFETY: `bytes` is 16 bytes, one unaligned store.
            #[allow(unsafe_code)]
            unsafe {
                _mm_storeu_si128(bytes.as_mut_ptr().cast(), b)
            };
            match dst {
                Dst::U8(d) => d[l..l + lanes]
                    .iter()
                    .zip(&bytes)
                    .for_each(|(d, &b)| d.set(b)),
                Dst::I8(d) => d[l..l + lanes]
                    .iter()
                    .zip(&bytes)
                    .for_each(|(d, &b)| d.set(b as i8)),
                Dst::I32(_) | Dst::F32(_) => {}
            }
            l += lanes;
        }
    }

    /// [`super::emit`] for an i32 output with AVX-512 F/BW (f64 lanes, as
    /// [`super::super::requantize_wide`]); `line.scale` finite, `sums` and
    /// `dst` as long as `raw`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn row_avx512(raw: &[i32], sums: Option<&[i32]>, line: &Line, dst: Dst<'_>) {
        let n = raw.len();
        let m = _mm512_set1_epi32(line.m);
        let c = _mm512_set1_epi32(line.c);
        let scale = _mm512_set1_pd(f64::from(line.scale));
        let zero = _mm512_set1_pd(f64::from(line.zero));
        let lo = _mm512_set1_pd(f64::from(line.range.0));
        let hi = _mm512_set1_pd(f64::from(line.range.1));
        let half = |v: __m256i| {
            let y = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtepi32_pd(v), scale), zero);
            let y = _mm512_min_pd(_mm512_max_pd(y, lo), hi);
            _mm512_cvt_roundpd_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y)
        };
        // An i32 output at scale 1 and zero point 0 over the whole i32
        // range (MatMulInteger's, ConvInteger's) is the sum itself: every
        // i32 is exact in f64, so the conversions leave it as it is.
        let identity = matches!(dst, Dst::I32(_) | Dst::F32(_))
            && line.scale == 1.0
            && line.zero == 0
            && line.range == (i32::MIN, i32::MAX);
        let mut l = 0;
        while l < n {
            let lanes = W.min(n - l);
            let mask: __mmask16 = if lanes == W { !0 } else { (1u16 << lanes) - 1 };
            // SAFETY (all three blocks): lanes `l..l + lanes` are inside
            // `raw`, `sums` and `dst` (equal lengths), and the masked
            // loads and stores touch no other lane; `dst`'s cells are
            // only accessed by this thread while the row is written.
            #[allow(unsafe_code)]
            let mut acc = unsafe { _mm512_maskz_loadu_epi32(mask, raw.as_ptr().add(l).cast()) };
            if let Some(s) = sums {
                #[allow(unsafe_code)]
                let s = unsafe { _mm512_maskz_loadu_epi32(mask, s.as_ptr().add(l).cast()) };
                acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(m, s));
            }
            acc = _mm512_add_epi32(acc, c);
            if identity {
                match dst {
                    Dst::I32(d) => {
                        #[allow(unsafe_code)]
                        unsafe {
                            _mm512_mask_storeu_epi32(d.as_ptr().add(l) as *mut i32, mask, acc)
                        }
                    }
                    Dst::F32(f) => floats_avx512(f, l, mask, acc),
                    _ => {}
                }
                l += lanes;
                continue;
            }
            let y = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(half(_mm512_castsi512_si256(acc))),
                half(_mm512_extracti64x4_epi64::<1>(acc)),
            );
            #[allow(unsafe_code)]
            unsafe {
                match dst {
                    Dst::U8(d) => {
                        _mm512_mask_cvtepi32_storeu_epi8(d.as_ptr().add(l) as *mut i8, mask, y)
                    }
                    Dst::I8(d) => {
                        _mm512_mask_cvtepi32_storeu_epi8(d.as_ptr().add(l) as *mut i8, mask, y)
                    }
                    Dst::I32(d) => _mm512_mask_storeu_epi32(d.as_ptr().add(l) as *mut i32, mask, y),
                    Dst::F32(f) => floats_avx512(f, l, mask, y),
                }
            }
            l += lanes;
        }
    }

    /// Lanes `l..` under `mask` of an f32 row from their i32 values `y`:
    /// converted (rounding to nearest even, as `as f32`), times the
    /// scale, plus the bias, each a rounding of its own as in the steps.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn floats_avx512(f: super::super::Floats<'_>, l: usize, mask: __mmask16, y: __m512i) {
        let x = _mm512_mul_ps(_mm512_cvtepi32_ps(y), _mm512_set1_ps(f.scale));
        // SAFETY: lanes `l..` under `mask` are inside the row's cells and
        // bias (as long as the sums, `emit`); masked lanes are not read
        // nor written.
        #[allow(unsafe_code)]
        unsafe {
            let x = match f.bias {
                None => x,
                Some(b) => {
                    let c = _mm512_maskz_loadu_ps(mask, b.as_ptr().add(l));
                    if f.bias_first {
                        _mm512_add_ps(c, x)
                    } else {
                        _mm512_add_ps(x, c)
                    }
                }
            };
            _mm512_mask_storeu_ps(f.cells.as_ptr().add(l) as *mut f32, mask, x)
        }
    }

    /// [`row_avx512`] with AVX2. The tail short of sixteen lanes goes
    /// through a stack row.
    #[target_feature(enable = "avx2")]
    pub(super) fn row_avx2(raw: &[i32], sums: Option<&[i32]>, line: &Line, dst: Dst<'_>) {
        let n = raw.len();
        let m = _mm256_set1_epi32(line.m);
        let c = _mm256_set1_epi32(line.c);
        let scale = _mm256_set1_pd(f64::from(line.scale));
        let zero = _mm256_set1_pd(f64::from(line.zero));
        let lo = _mm256_set1_pd(f64::from(line.range.0));
        let hi = _mm256_set1_pd(f64::from(line.range.1));
        let quarter = |v: __m128i| {
            let y = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(v), scale), zero);
            let y = _mm256_min_pd(_mm256_max_pd(y, lo), hi);
            // An integer after the rounding: the truncating conversion
            // is exact.
            let y = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
            _mm256_cvttpd_epi32(y)
        };
        let mut l = 0;
        while l < n {
            let lanes = W.min(n - l);
            let mut r = [0i32; W];
            let mut s = [0i32; W];
            r[..lanes].copy_from_slice(&raw[l..l + lanes]);
            if let Some(sums) = sums {
                s[..lanes].copy_from_slice(&sums[l..l + lanes]);
            }
            let mut q = [_mm_setzero_si128(); 4];
            for h in 0..2 {
                // SAFETY: `r` and `s` hold 16 i32; 8 from 8·h are read.
                #[allow(unsafe_code)]
                let (rv, sv) = unsafe {
                    (
                        _mm256_loadu_si256(r.as_ptr().add(8 * h).cast()),
                        _mm256_loadu_si256(s.as_ptr().add(8 * h).cast()),
                    )
                };
                let acc = _mm256_add_epi32(_mm256_sub_epi32(rv, _mm256_mullo_epi32(m, sv)), c);
                q[2 * h] = quarter(_mm256_castsi256_si128(acc));
                q[2 * h + 1] = quarter(_mm256_extracti128_si256::<1>(acc));
            }
            match dst {
                Dst::U8(_) | Dst::I8(_) => {
                    // Values within u8 or i8: the saturating packs keep them.
                    let w0 = _mm_packs_epi32(q[0], q[1]);
                    let w1 = _mm_packs_epi32(q[2], q[3]);
                    let b = if matches!(dst, Dst::U8(_)) {
                        _mm_packus_epi16(w0, w1)
                    } else {
                        _mm_packs_epi16(w0, w1)
                    };
                    let mut bytes = [0u8; W];
                    // SAFETY: `bytes` is 16 bytes, one unaligned store.
                    #[allow(unsafe_code)]
                    unsafe {
                        _mm_storeu_si128(bytes.as_mut_ptr().cast(), b)
                    };
                    match dst {
                        Dst::U8(d) => d[l..l + lanes]
                            .iter()
                            .zip(&bytes)
                            .for_each(|(d, &b)| d.set(b)),
                        Dst::I8(d) => d[l..l + lanes]
                            .iter()
                            .zip(&bytes)
                            .for_each(|(d, &b)| d.set(b as i8)),
                        Dst::I32(_) | Dst::F32(_) => {}
                    }
                }
                Dst::I32(_) | Dst::F32(_) => {
                    let mut ys = [0i32; W];
                    for (t, v) in q.iter().enumerate() {
                        // SAFETY: `ys` holds 16 i32; 4 from 4·t are written.
                        #[allow(unsafe_code)]
                        unsafe {
                            _mm_storeu_si128(ys.as_mut_ptr().add(4 * t).cast(), *v)
                        };
                    }
                    for (i, &y) in ys[..lanes].iter().enumerate() {
                        dst.set(l + i, y);
                    }
                }
            }
            l += lanes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::cell::Cell;

    /// xorshift64*.
    fn next(s: &mut u64) -> u64 {
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Every instruction set writes the scalar reference's outputs: sums
    /// at the ends of i32 and wrapping, ties (scales of ½ and ¼ on odd
    /// sums), results past every range, scales tiny, huge, negative,
    /// zero, NaN and infinite, every length from 0 to 40.
    #[test]
    fn every_isa_requantises_as_the_reference() {
        let mut s = 0x5eed_1234_u64;
        let scales = [
            0.5f32,
            0.25,
            1.0,
            -0.5,
            1e-3,
            3.1e-5,
            7.0e-10,
            1e-45,
            1e30,
            -1e30,
            0.0,
            -0.0,
            f32::MAX,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.012_345_67,
        ];
        let ranges = [(0, 255), (-128, 127), (i32::MIN, i32::MAX)];
        let mut checked = 0;
        // Rows of MatMulInteger's line (scale 1, zero 0, every i32), which
        // AVX-512 stores unconverted.
        let mut identities = 0;
        let mut floats_checked = 0;
        for case in 0..4000 {
            let n = case % 41;
            let scale = if case % 9 == 1 {
                1.0
            } else if case % 3 == 0 {
                f32::from_bits(next(&mut s) as u32 & 0x3fff_ffff)
            } else {
                scales[case % scales.len()]
            };
            let range = ranges[case / 7 % 3];
            let zero = match case % 5 {
                0 => range.0,
                1 => range.1,
                2 => 0,
                _ => (next(&mut s) as i32) % 300,
            };
            if scale == 1.0 && zero == 0 && range == (i32::MIN, i32::MAX) {
                identities += n;
            }
            let pick = |s: &mut u64| -> i32 {
                match next(s) % 6 {
                    0 => i32::MIN,
                    1 => i32::MAX,
                    2 => (next(s) % 2001) as i32 - 1000,
                    3 => 2 * ((next(s) % 200) as i32) + 1,
                    _ => next(s) as i32,
                }
            };
            let raw: Vec<i32> = (0..n).map(|_| pick(&mut s)).collect();
            let sums: Vec<i32> = (0..n).map(|_| pick(&mut s)).collect();
            let line = Line {
                m: if case % 2 == 0 { 0 } else { pick(&mut s) },
                c: pick(&mut s),
                scale,
                zero,
                range,
            };
            let with_sums = case % 4 != 0;
            let want: Vec<i32> = (0..n)
                .map(|l| line.scalar(raw[l], if with_sums { sums[l] } else { 0 }))
                .collect();
            for isa in Isa::all_available() {
                let cells: Vec<Cell<i32>> = (0..n + 3).map(|_| Cell::new(0x5a5a_5a5a)).collect();
                let bytes: Vec<Cell<u8>> = (0..n + 3).map(|_| Cell::new(0xa5)).collect();
                let sbytes: Vec<Cell<i8>> = (0..n + 3).map(|_| Cell::new(-91)).collect();
                let sums = with_sums.then_some(&sums[..]);
                let got: Vec<i32> = match range {
                    (0, 255) => {
                        row(isa, &raw, sums, &line, &Out::U8(&bytes), 2);
                        assert_eq!(bytes[0].get(), 0xa5);
                        assert_eq!(bytes[n + 2].get(), 0xa5);
                        bytes[2..n + 2].iter().map(|c| c.get().into()).collect()
                    }
                    (-128, 127) => {
                        row(isa, &raw, sums, &line, &Out::I8(&sbytes), 2);
                        assert_eq!(sbytes[1].get(), -91);
                        assert_eq!(sbytes[n + 2].get(), -91);
                        sbytes[2..n + 2].iter().map(|c| c.get().into()).collect()
                    }
                    _ => {
                        row(isa, &raw, sums, &line, &Out::I32(&cells), 2);
                        assert_eq!(cells[1].get(), 0x5a5a_5a5a);
                        assert_eq!(cells[n + 2].get(), 0x5a5a_5a5a);
                        cells[2..n + 2].iter().map(Cell::get).collect()
                    }
                };
                assert_eq!(got, want, "{isa:?} case {case} {line:?}");
                checked += n;
                if range != (i32::MIN, i32::MAX) {
                    continue;
                }
                // The same row into f32 (a product merged with the steps
                // that dequantize its output): each lane `f32(y)·scale`,
                // plus its bias in the `Add`'s operand order.
                let f_scale = f32::from_bits(next(&mut s) as u32 & 0x3fff_ffff);
                let bias: Vec<f32> = (0..n + 3)
                    .map(|_| (next(&mut s) % 999) as f32 * 0.37 - 99.0)
                    .collect();
                let floats: Vec<Cell<f32>> = (0..n + 3).map(|_| Cell::new(-7.5)).collect();
                let bias_first = case % 3 == 0;
                let f = super::super::Floats {
                    cells: &floats,
                    scale: f_scale,
                    bias: (case % 5 != 0).then_some(&bias[..]),
                    bias_first,
                };
                row(isa, &raw, sums, &line, &Out::F32(f), 2);
                assert_eq!(floats[1].get(), -7.5);
                assert_eq!(floats[n + 2].get(), -7.5);
                for l in 0..n {
                    let x = want[l] as f32 * f_scale;
                    let y = match f.bias {
                        None => x,
                        Some(b) if bias_first => b[l + 2] + x,
                        Some(b) => x + b[l + 2],
                    };
                    assert_eq!(
                        floats[l + 2].get().to_bits(),
                        y.to_bits(),
                        "{isa:?} case {case} lane {l}"
                    );
                }
                floats_checked += n;
            }
        }
        assert!(checked > 50_000);
        assert!(identities > 500, "{identities} identity lanes");
        assert!(floats_checked > 10_000, "{floats_checked} f32 lanes");
    }

    /// A tile's rows in one call give each row's outputs as the scalar
    /// reference does, on every instruction set, for u8, i8 and i32
    /// outputs, 1 to 4 rows and 0 to 16 lanes; nothing else is written.
    #[test]
    fn tiles_requantise_as_rows() {
        let mut s = 0x7113_u64;
        for case in 0..600 {
            let rows = 1 + case % 4;
            let lanes = case % 17;
            let range = [(0, 255), (-128, 127), (i32::MIN, i32::MAX)][case / 4 % 3];
            let raw: Vec<[i32; NR]> = (0..rows)
                .map(|_| core::array::from_fn(|_| (next(&mut s) % 4001) as i32 - 2000))
                .collect();
            let sums: [i32; NR] = core::array::from_fn(|_| (next(&mut s) % 301) as i32 - 150);
            let zero = if case % 7 == 0 {
                300
            } else {
                range.0 + (next(&mut s) % 100) as i32
            };
            let lines: Vec<(usize, Line)> = (0..rows)
                .map(|r| {
                    let line = Line {
                        m: (next(&mut s) % 5) as i32 - 2,
                        c: (next(&mut s) % 1001) as i32 - 500,
                        scale: [0.5, 0.013, 0.25, 1.5e-3][(case + r) % 4],
                        zero,
                        range,
                    };
                    (1 + r * 20, line)
                })
                .collect();
            let with_sums = case % 3 != 0;
            let want = |r: usize, l: usize| {
                lines[r]
                    .1
                    .scalar(raw[r][l], if with_sums { sums[l] } else { 0 })
            };
            for isa in Isa::all_available() {
                let sums = with_sums.then_some(&sums[..lanes]);
                let n = 100;
                let got: Vec<i32> = match range.1 {
                    255 => {
                        let c: Vec<Cell<u8>> = (0..n).map(|_| Cell::new(7)).collect();
                        tile(isa, &raw, lanes, sums, &lines, &Out::U8(&c));
                        c.iter().map(|c| c.get().into()).collect()
                    }
                    127 => {
                        let c: Vec<Cell<i8>> = (0..n).map(|_| Cell::new(7)).collect();
                        tile(isa, &raw, lanes, sums, &lines, &Out::I8(&c));
                        c.iter().map(|c| c.get().into()).collect()
                    }
                    _ => {
                        let c: Vec<Cell<i32>> = (0..n).map(|_| Cell::new(7)).collect();
                        tile(isa, &raw, lanes, sums, &lines, &Out::I32(&c));
                        c.iter().map(Cell::get).collect()
                    }
                };
                for (i, &g) in got.iter().enumerate() {
                    let row = (0..rows).find(|&r| (1 + r * 20..1 + r * 20 + lanes).contains(&i));
                    let w = row.map_or(7, |r| want(r, i - 1 - r * 20));
                    assert_eq!(g, w, "{isa:?} case {case} at {i}");
                }
            }
        }
    }

    /// Ties of every kind near zero and near the ends of the ranges, for
    /// every sum the scale ½ makes a tie of.
    #[test]
    fn ties_round_to_even_on_every_isa() {
        for range in [(0, 255), (-128, 127), (i32::MIN, i32::MAX)] {
            for zero in [range.0, 0, range.1] {
                let raw: Vec<i32> = (-700..700).collect();
                let line = Line {
                    m: 0,
                    c: 0,
                    scale: 0.5,
                    zero,
                    range,
                };
                let want: Vec<i32> = raw.iter().map(|&r| line.scalar(r, 0)).collect();
                for isa in Isa::all_available() {
                    let cells: Vec<Cell<i32>> = raw.iter().map(|_| Cell::new(0)).collect();
                    let bytes: Vec<Cell<u8>> = raw.iter().map(|_| Cell::new(0)).collect();
                    let sbytes: Vec<Cell<i8>> = raw.iter().map(|_| Cell::new(0)).collect();
                    let got: Vec<i32> = match range.1 {
                        255 => {
                            row(isa, &raw, None, &line, &Out::U8(&bytes), 0);
                            bytes.iter().map(|c| c.get().into()).collect()
                        }
                        127 => {
                            row(isa, &raw, None, &line, &Out::I8(&sbytes), 0);
                            sbytes.iter().map(|c| c.get().into()).collect()
                        }
                        _ => {
                            row(isa, &raw, None, &line, &Out::I32(&cells), 0);
                            cells.iter().map(Cell::get).collect()
                        }
                    };
                    assert_eq!(got, want, "{isa:?} {range:?} zero {zero}");
                }
            }
        }
        // The scalar loop is itself round-half-even: 5/2 → 2, 7/2 → 4.
        let line = Line {
            m: 0,
            c: 0,
            scale: 0.5,
            zero: 0,
            range: (0, 255),
        };
        assert_eq!((line.scalar(5, 0), line.scalar(7, 0)), (2, 4));
    }
}
