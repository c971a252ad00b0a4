//! Sixteen bytes, one per lane of a panel ([`NR`]): what a packer builds
//! one depth of a panel from when its lanes read a line of the image
//! (consecutive bytes, or every other byte), and the interleave of four
//! depths into the panel's quads.
//!
//! On x86 the operations are SSE2 instructions, which every x86-64 has:
//! inlined into the packers compiled for AVX2 or AVX-512
//! ([`super::pack_lanes`]) they are encoded as VEX instructions. Elsewhere
//! they are plain arrays, the same operations byte by byte (the tests
//! compare the two).

use super::NR;
use crate::kernels::cells::Load;
#[cfg(test)]
use core::cell::Cell;

/// Quads after which [`LaneSums`] widens its 16-bit partial sums: each
/// quad adds at most 4·255 to one, and 64·1020 < 2¹⁶.
const FLUSH: usize = 64;

#[cfg(target_arch = "x86_64")]
mod imp {
    /// An SSE2 intrinsic call. SSE2 is in every x86-64 CPU (the target's
    /// baseline), yet its intrinsics are declared for callers compiled
    /// with the feature named, which these `#[inline(always)]` helpers
    /// cannot be.
    macro_rules! sse2 {
        ($e:expr) => {{
            // SAFETY: SSE2 is part of x86-64 itself, and the intrinsics
            // wrapped here only compute on registers.
            #[allow(unsafe_code)]
            unsafe {
                $e
            }
        }};
    }

    use super::{Load, NR};
    use core::arch::x86_64::*;
    use core::cell::Cell;

    /// One byte per lane.
    #[derive(Clone, Copy)]
    pub struct V16(__m128i);

    impl V16 {
        #[inline(always)]
        pub fn splat(b: u8) -> V16 {
            V16(sse2!(_mm_set1_epi8(b as i8)))
        }

        #[inline(always)]
        pub fn from_array(b: [u8; NR]) -> V16 {
            // SAFETY: `b` is 16 bytes, what one unaligned load reads.
            #[allow(unsafe_code)]
            V16(unsafe { _mm_loadu_si128(b.as_ptr().cast()) })
        }

        #[inline(always)]
        pub fn to_array(self) -> [u8; NR] {
            let mut b = [0u8; NR];
            // SAFETY: `b` is 16 bytes, what one unaligned store writes.
            #[allow(unsafe_code)]
            unsafe {
                _mm_storeu_si128(b.as_mut_ptr().cast(), self.0)
            };
            b
        }

        /// Bytes `at..at + 16` of `src` (panics past its end).
        #[inline(always)]
        pub fn load<L: Load<u8>>(src: L, at: usize) -> V16 {
            let line = src.sub(at, NR);
            // SAFETY: `sub` checked that 16 bytes follow `at`; nothing
            // writes an operand while a kernel reads it (`Load::ptr`).
            #[allow(unsafe_code)]
            V16(unsafe { _mm_loadu_si128(line.ptr().cast()) })
        }

        /// Bytes `at, at + 2, …, at + 30` of `src`, which must hold
        /// `at + 32` bytes (panics otherwise): the even bytes of two loads,
        /// each word's high byte cleared and the words packed (no
        /// saturation: every word is at most 255).
        #[inline(always)]
        pub fn load_even<L: Load<u8>>(src: L, at: usize) -> V16 {
            let line = src.sub(at, 2 * NR);
            // SAFETY: `sub` checked that 32 bytes follow `at`, what the
            // two unaligned loads read.
            #[allow(unsafe_code)]
            let (lo, hi) = unsafe {
                let p = line.ptr().cast::<__m128i>();
                (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1)))
            };
            let low = sse2!(_mm_set1_epi16(0xff));
            V16(sse2!(_mm_packus_epi16(
                _mm_and_si128(lo, low),
                _mm_and_si128(hi, low),
            )))
        }

        /// Lanes at `p, p + S, …, p + 15·S` (`S` 1 or 2).
        ///
        /// # Safety
        /// `p..p + 16·S` readable, not written meanwhile.
        #[inline(always)]
        #[allow(unsafe_code)]
        pub unsafe fn load_at<const S: usize>(p: *const u8) -> V16 {
            let p = p.cast::<__m128i>();
            // SAFETY: the caller's.
            let lo = unsafe { _mm_loadu_si128(p) };
            if S == 1 {
                return V16(lo);
            }
            // SAFETY: the caller's (32 bytes for S = 2).
            let hi = unsafe { _mm_loadu_si128(p.add(1)) };
            let low = sse2!(_mm_set1_epi16(0xff));
            V16(sse2!(_mm_packus_epi16(
                _mm_and_si128(lo, low),
                _mm_and_si128(hi, low),
            )))
        }

        #[inline(always)]
        pub fn and(self, o: V16) -> V16 {
            V16(sse2!(_mm_and_si128(self.0, o.0)))
        }

        #[inline(always)]
        pub fn or(self, o: V16) -> V16 {
            V16(sse2!(_mm_or_si128(self.0, o.0)))
        }

        #[inline(always)]
        pub fn xor(self, o: V16) -> V16 {
            V16(sse2!(_mm_xor_si128(self.0, o.0)))
        }

        /// `self & !mask`.
        #[inline(always)]
        pub fn and_not(self, mask: V16) -> V16 {
            V16(sse2!(_mm_andnot_si128(mask.0, self.0)))
        }
    }

    /// Quads of lanes `4g..4g + 4` (`out[g]`, byte `4l + t` depth `t` of
    /// lane `4g + l`) of four depths, and each lane's sum of the four as
    /// u16 (lanes 0..8, then 8..16).
    #[inline(always)]
    pub fn interleave(rows: [V16; 4]) -> ([V16; 4], Sum4) {
        let [r0, r1, r2, r3] = rows.map(|r| r.0);
        // Pairs of depths per lane: word l holds depth 0 (or 2) of lane l
        // in its low byte and depth 1 (or 3) in its high one.
        let (a, b) = (
            sse2!(_mm_unpacklo_epi8(r0, r1)),
            sse2!(_mm_unpackhi_epi8(r0, r1)),
        );
        let (c, d) = (
            sse2!(_mm_unpacklo_epi8(r2, r3)),
            sse2!(_mm_unpackhi_epi8(r2, r3)),
        );
        let quads = [
            sse2!(_mm_unpacklo_epi16(a, c)),
            sse2!(_mm_unpackhi_epi16(a, c)),
            sse2!(_mm_unpacklo_epi16(b, d)),
            sse2!(_mm_unpackhi_epi16(b, d)),
        ]
        .map(V16);
        let low = sse2!(_mm_set1_epi16(0xff));
        let pair = |w: __m128i| sse2!(_mm_add_epi16(_mm_and_si128(w, low), _mm_srli_epi16(w, 8)));
        let sum = |x: __m128i, y: __m128i| sse2!(_mm_add_epi16(pair(x), pair(y)));
        (quads, Sum4([sum(a, c), sum(b, d)]))
    }

    /// Each lane's sum of four depths, as u16.
    #[derive(Clone, Copy)]
    pub struct Sum4([__m128i; 2]);

    impl Sum4 {
        #[cfg(test)]
        pub fn to_array(self) -> [u16; NR] {
            Part(self.0).to_array()
        }
    }

    /// Writes `quads` ([`interleave`]) as the [`NR`] quads of `out`
    /// (panics if it is shorter).
    #[inline(always)]
    pub fn store(quads: [V16; 4], out: &[Cell<u32>]) {
        let out = &out[..NR];
        let p = out.as_ptr().cast::<Cell<u32>>() as *mut __m128i;
        for (g, q) in quads.iter().enumerate() {
            // SAFETY: `out` holds 16 quads, 64 bytes, four stores of 16;
            // its cells are only this thread's (scratch), and a `Cell`
            // may be written through a shared reference.
            #[allow(unsafe_code)]
            unsafe {
                _mm_storeu_si128(p.add(g), q.0)
            };
        }
    }

    /// Per-lane u16 partial sums, added eight lanes at a time.
    #[derive(Clone, Copy)]
    pub struct Part([__m128i; 2]);

    impl Part {
        #[inline(always)]
        pub fn zero() -> Part {
            Part([sse2!(_mm_setzero_si128()); 2])
        }

        #[inline(always)]
        pub fn add(&mut self, s: Sum4) {
            for (p, s) in self.0.iter_mut().zip(s.0) {
                *p = sse2!(_mm_add_epi16(*p, s));
            }
        }

        #[inline(always)]
        pub fn to_array(self) -> [u16; NR] {
            let mut s = [0u16; NR];
            // SAFETY: `s` is 32 bytes, the two unaligned stores.
            #[allow(unsafe_code)]
            unsafe {
                _mm_storeu_si128(s.as_mut_ptr().cast(), self.0[0]);
                _mm_storeu_si128(s.as_mut_ptr().add(8).cast(), self.0[1]);
            }
            s
        }
    }
}

/// The same operations on plain arrays.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
mod plain {
    use super::{Load, NR};
    use core::cell::Cell;

    #[derive(Clone, Copy)]
    pub struct V16([u8; NR]);

    impl V16 {
        #[inline(always)]
        pub fn splat(b: u8) -> V16 {
            V16([b; NR])
        }

        #[inline(always)]
        pub fn from_array(b: [u8; NR]) -> V16 {
            V16(b)
        }

        #[inline(always)]
        pub fn to_array(self) -> [u8; NR] {
            self.0
        }

        #[inline(always)]
        pub fn load<L: Load<u8>>(src: L, at: usize) -> V16 {
            let line = src.sub(at, NR);
            V16(core::array::from_fn(|l| line.load(l)))
        }

        #[inline(always)]
        pub fn load_even<L: Load<u8>>(src: L, at: usize) -> V16 {
            let line = src.sub(at, 2 * NR);
            V16(core::array::from_fn(|l| line.load(2 * l)))
        }

        /// Lanes at `p, p + S, …, p + 15·S`.
        ///
        /// # Safety
        /// `p..p + 16·S` readable, not written meanwhile.
        #[inline(always)]
        #[allow(unsafe_code)]
        pub unsafe fn load_at<const S: usize>(p: *const u8) -> V16 {
            // SAFETY: the caller's.
            V16(core::array::from_fn(|l| unsafe { p.add(S * l).read() }))
        }

        #[inline(always)]
        fn zip(self, o: V16, f: impl Fn(u8, u8) -> u8) -> V16 {
            V16(core::array::from_fn(|l| f(self.0[l], o.0[l])))
        }

        #[inline(always)]
        pub fn and(self, o: V16) -> V16 {
            self.zip(o, |a, b| a & b)
        }

        #[inline(always)]
        pub fn or(self, o: V16) -> V16 {
            self.zip(o, |a, b| a | b)
        }

        #[inline(always)]
        pub fn xor(self, o: V16) -> V16 {
            self.zip(o, |a, b| a ^ b)
        }

        #[inline(always)]
        pub fn and_not(self, mask: V16) -> V16 {
            self.zip(mask, |a, m| a & !m)
        }
    }

    #[inline(always)]
    pub fn interleave(rows: [V16; 4]) -> ([V16; 4], Sum4) {
        let quads =
            core::array::from_fn(|g| V16(core::array::from_fn(|i| rows[i % 4].0[4 * g + i / 4])));
        let sums = core::array::from_fn(|l| rows.iter().map(|r| u16::from(r.0[l])).sum());
        (quads, Sum4(sums))
    }

    #[derive(Clone, Copy)]
    pub struct Sum4([u16; NR]);

    impl Sum4 {
        #[cfg(test)]
        pub fn to_array(self) -> [u16; NR] {
            self.0
        }
    }

    #[inline(always)]
    pub fn store(quads: [V16; 4], out: &[Cell<u32>]) {
        let out = &out[..NR];
        for (l, cell) in out.iter().enumerate() {
            let q = &quads[l / 4].0[4 * (l % 4)..4 * (l % 4) + 4];
            cell.set(u32::from_le_bytes([q[0], q[1], q[2], q[3]]));
        }
    }

    #[derive(Clone, Copy)]
    pub struct Part([u16; NR]);

    impl Part {
        #[inline(always)]
        pub fn zero() -> Part {
            Part([0; NR])
        }

        #[inline(always)]
        pub fn add(&mut self, s: Sum4) {
            for (p, s) in self.0.iter_mut().zip(s.0) {
                *p = p.wrapping_add(s);
            }
        }

        #[inline(always)]
        pub fn to_array(self) -> [u16; NR] {
            self.0
        }
    }
}

#[cfg(target_arch = "x86_64")]
use imp::Part;
#[cfg(target_arch = "x86_64")]
pub use imp::{interleave, store, Sum4, V16};
#[cfg(not(target_arch = "x86_64"))]
use plain::Part;
#[cfg(not(target_arch = "x86_64"))]
pub use plain::{interleave, store, Sum4, V16};

/// Each lane's sum of the u8 bytes of a panel's quads, as they are
/// written: 16-bit partial sums, widened every [`FLUSH`] quads.
pub struct LaneSums {
    part: Part,
    quads: usize,
    total: [i32; NR],
}

impl LaneSums {
    #[inline(always)]
    pub fn new() -> LaneSums {
        LaneSums {
            part: Part::zero(),
            quads: 0,
            total: [0; NR],
        }
    }

    /// Adds one quad's sums ([`interleave`]).
    #[inline(always)]
    pub fn add(&mut self, s: Sum4) {
        self.part.add(s);
        self.quads += 1;
        if self.quads == FLUSH {
            self.flush();
        }
    }

    #[inline(always)]
    fn flush(&mut self) {
        for (t, p) in self.total.iter_mut().zip(self.part.to_array()) {
            // Exact: at most 64·1020 per partial sum; the totals wrap
            // modulo 2³² like every other sum of the products.
            *t = t.wrapping_add(i32::from(p));
        }
        self.part = Part::zero();
        self.quads = 0;
    }

    #[inline(always)]
    pub fn finish(mut self) -> [i32; NR] {
        self.flush();
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector operations against the plain ones, on random bytes.
    #[test]
    fn vectors_match_plain_arrays() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut byte = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        };
        for _ in 0..200 {
            let src: alloc::vec::Vec<u8> = (0..64).map(|_| byte()).collect();
            let at = usize::from(byte() % 32);
            let rows: [[u8; NR]; 4] = core::array::from_fn(|_| core::array::from_fn(|_| byte()));
            let mask: [u8; NR] = core::array::from_fn(|_| if byte() & 1 == 0 { 0xff } else { 0 });
            let (m, pm) = (V16::from_array(mask), plain::V16::from_array(mask));
            let v = V16::load(&src[..], at).xor(V16::splat(0x80)).and_not(m);
            let pv = plain::V16::load(&src[..], at)
                .xor(plain::V16::splat(0x80))
                .and_not(pm);
            assert_eq!(v.to_array(), pv.to_array());
            let e = V16::load_even(&src[..], at).or(m).and(V16::splat(0x3c));
            let pe = plain::V16::load_even(&src[..], at)
                .or(pm)
                .and(plain::V16::splat(0x3c));
            assert_eq!(e.to_array(), pe.to_array());
            // SAFETY: `at + 32 <= 64` bytes of `src`.
            #[allow(unsafe_code)]
            let (a1, a2, p1, p2) = unsafe {
                let p = src.as_ptr().add(at);
                (
                    V16::load_at::<1>(p),
                    V16::load_at::<2>(p),
                    plain::V16::load_at::<1>(p),
                    plain::V16::load_at::<2>(p),
                )
            };
            assert_eq!(a1.to_array(), V16::load(&src[..], at).to_array());
            assert_eq!(a2.to_array(), V16::load_even(&src[..], at).to_array());
            assert_eq!(p1.to_array(), a1.to_array());
            assert_eq!(p2.to_array(), a2.to_array());
            let (q, s) = interleave(rows.map(V16::from_array));
            let (pq, ps) = plain::interleave(rows.map(plain::V16::from_array));
            assert_eq!(s.to_array(), ps.to_array());
            let cells: [Cell<u32>; NR] = core::array::from_fn(|_| Cell::new(0));
            let plain_cells: [Cell<u32>; NR] = core::array::from_fn(|_| Cell::new(0));
            store(q, &cells);
            plain::store(pq, &plain_cells);
            for l in 0..NR {
                let want = u32::from_le_bytes(core::array::from_fn(|t| rows[t][l]));
                assert_eq!(cells[l].get(), want);
                assert_eq!(plain_cells[l].get(), want);
            }
        }
        // Partial sums widened before they wrap: 200 quads of 255s.
        let mut sums = LaneSums::new();
        let (_, s) = interleave([V16::splat(255); 4]);
        for _ in 0..200 {
            sums.add(s);
        }
        assert_eq!(sums.finish(), [200 * 4 * 255; NR]);
    }
}
