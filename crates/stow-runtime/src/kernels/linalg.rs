//! Convolution (through the packed product, reading the image directly)
//! and the depthwise case, which has no product to speak of.

use super::cells::{Load, Src};
use super::gemm::{self, Dst, Finish, PackB, Start, Strided, NR};
use super::pool::Window;
use super::prepacked::{self, Panels};
use core::cell::Cell;

/// A convolution's shape: `groups` groups of `out_per_group` output and
/// `in_per_group` input channels per image, over [`Window`] geometry (its
/// `planes` is unused here).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvShape {
    /// Images.
    pub batch: usize,
    /// Groups.
    pub groups: usize,
    /// Input channels per group.
    pub in_per_group: usize,
    /// Output channels per group.
    pub out_per_group: usize,
    /// Spatial geometry.
    pub window: Window,
}

impl ConvShape {
    /// Depth of the product: input channels per group × kernel taps.
    pub fn k(&self) -> usize {
        self.in_per_group * self.window.kernel.iter().product::<usize>()
    }

    /// Output positions per image.
    pub fn n(&self) -> usize {
        self.window.output_plane()
    }

    /// True for one input and one output channel per group.
    pub fn depthwise(&self) -> bool {
        self.in_per_group == 1 && self.out_per_group == 1
    }

    /// True when the image itself is the right operand (1×1 kernel,
    /// stride 1, no padding).
    pub fn pointwise(&self) -> bool {
        let w = &self.window;
        w.kernel == [1, 1, 1] && w.strides == [1, 1, 1] && w.pad == [0, 0, 0] && w.input == w.output
    }

    /// Scratch floats [`conv`] needs.
    pub fn scratch_elems(&self) -> usize {
        if self.depthwise() {
            0
        } else {
            gemm::scratch_elems(self.out_per_group, self.n(), self.k())
        }
    }
}

/// The image of one group seen as the `k × n` matrix of im2col, packed
/// on the fly.
struct Im2col<L> {
    data: L,
    base: usize,
    s: ConvShape,
}

/// Columns of one packed panel that lie in one output row: `len`
/// columns from panel column `at`, output row `(z, y)`, first output
/// column `x`.
#[derive(Clone, Copy, Default)]
struct Run {
    at: usize,
    len: usize,
    z: usize,
    y: usize,
    x: usize,
}

/// A depth of the im2col matrix: its input channel and kernel position.
struct Tap {
    channel: usize,
    k: [usize; 3],
}

impl Tap {
    fn of(p: usize, [kd, kh, kw]: [usize; 3]) -> Tap {
        Tap {
            channel: p / (kd * kh * kw),
            k: [p / (kh * kw) % kd, p / kw % kh, p % kw],
        }
    }

    /// The next depth.
    #[inline(always)]
    fn step(&mut self, [kd, kh, kw]: [usize; 3]) {
        self.k[2] += 1;
        if self.k[2] == kw {
            self.k[2] = 0;
            self.k[1] += 1;
            if self.k[1] == kh {
                self.k[1] = 0;
                self.k[0] += 1;
                if self.k[0] == kd {
                    self.k[0] = 0;
                    self.channel += 1;
                }
            }
        }
    }
}

/// `dst` (at most 16 cells) set to `head` zeros, then the `inside`
/// values of `src`, then zeros: one masked load that touches only those
/// values and one masked store.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn padded_run_avx512(dst: &[Cell<f32>], src: *const f32, head: usize, inside: usize) {
    use core::arch::x86_64::*;
    let lanes = |n: usize| -> u32 {
        if n >= 16 {
            0xffff
        } else {
            (1u32 << n) - 1
        }
    };
    let keep = lanes(dst.len()) as __mmask16;
    let read = (lanes(head + inside) & !lanes(head) & lanes(dst.len())) as __mmask16;
    // SAFETY: the lanes of `read` load `src[0..inside]`, in bounds (the
    // caller's `sub`); masked-off lanes are not accessed (the address
    // before `src` is only formed, with wrapping arithmetic). The store
    // writes `dst`'s cells (at most 16), which only this thread writes
    // while it packs.
    #[allow(unsafe_code)]
    unsafe {
        let v = _mm512_maskz_loadu_ps(read, src.wrapping_sub(head));
        _mm512_mask_storeu_ps(dst.as_ptr() as *mut f32, keep, v);
    }
}

/// `dst` (at most 16 cells) set to the values of `row` (its `width`
/// values) at `x0`, `x0 + 2`, ..., zero where they fall outside it: two
/// masked loads of the 32 values the run spans and one shuffle of their
/// even lanes, instead of one bounds test per value.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn stride2_run_avx512(dst: &[Cell<f32>], row: *const f32, x0: isize, width: isize) {
    use core::arch::x86_64::*;
    // Lanes `from..to` of a 16-lane vector whose lane 0 is at `x`.
    let inside = |x: isize| -> __mmask16 {
        let (from, to) = ((-x).clamp(0, 16), (width - x).clamp(0, 16));
        if to <= from {
            return 0;
        }
        let upto = |n: isize| if n >= 16 { 0xffff_u32 } else { (1u32 << n) - 1 };
        (upto(to) & !upto(from)) as __mmask16
    };
    let keep = if dst.len() >= 16 {
        0xffff
    } else {
        ((1u32 << dst.len()) - 1) as __mmask16
    };
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    // SAFETY: the loads touch only lanes whose values lie inside the row
    // (`width` values from `row`, the caller's `sub`); the addresses of
    // the masked-off lanes are only formed, with wrapping arithmetic. The
    // store writes `dst`'s cells (at most 16), which only this thread
    // writes while it packs.
    #[allow(unsafe_code)]
    unsafe {
        let lo = _mm512_maskz_loadu_ps(inside(x0), row.wrapping_offset(x0));
        let hi = _mm512_maskz_loadu_ps(inside(x0 + 16), row.wrapping_offset(x0 + 16));
        let v = _mm512_permutex2var_ps(lo, even, hi);
        _mm512_mask_storeu_ps(dst.as_ptr() as *mut f32, keep, v);
    }
}

/// [`stride2_run_avx512`] in two 8-lane halves: each half's 16 input
/// values by two masked loads, their even lanes gathered by a shuffle
/// within 128-bit halves and a 64-bit permute, stored under a mask.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn stride2_run_avx2(dst: &[Cell<f32>], row: *const f32, x0: isize, width: isize) {
    use core::arch::x86_64::*;
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // Lanes of an 8-lane vector whose lane 0 is at `x` that lie in
    // `0..width`: all ones there, zero elsewhere.
    let inside = |x: isize| {
        let (from, to) = ((-x).clamp(0, 8) as i32, (width - x).clamp(0, 8) as i32);
        let ge = _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(from - 1));
        let lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(to), lane);
        _mm256_and_si256(ge, lt)
    };
    for half in 0..dst.len().div_ceil(8) {
        let cells = &dst[half * 8..dst.len().min(half * 8 + 8)];
        let x = x0 + 16 * half as isize;
        // Masked loads and stores only where lanes fall outside the row or
        // the panel: on AMD cores a masked store costs several times a
        // plain one, and it was most of this packing's time.
        let whole = x >= 0 && x + 16 <= width;
        // SAFETY: the loads touch only lanes whose values lie inside the
        // row (`width` values from `row`, the caller's `sub`): all 16 when
        // `whole`, else the lanes of the masks, the addresses of the
        // masked-off lanes only formed, with wrapping arithmetic. The
        // store writes `cells` (at most 8; all 8 unmasked), which only
        // this thread writes while it packs.
        #[allow(unsafe_code)]
        unsafe {
            let (lo, hi) = if whole {
                let at = row.offset(x);
                (_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(8)))
            } else {
                (
                    _mm256_maskload_ps(row.wrapping_offset(x), inside(x)),
                    _mm256_maskload_ps(row.wrapping_offset(x + 8), inside(x + 8)),
                )
            };
            let even = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            let v = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                even,
            )));
            if cells.len() == 8 {
                _mm256_storeu_ps(cells.as_ptr() as *mut f32, v);
            } else {
                let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(cells.len() as i32), lane);
                _mm256_maskstore_ps(cells.as_ptr() as *mut f32, keep, v);
            }
        }
    }
}

/// `dst` from the first `dst.len()` values of `src` (at most a panel), in
/// pieces of 8 and 4 so that a run one short of a panel (the first run
/// of a padded row) is not copied one value at a time.
#[inline(always)]
fn copy_run(dst: &[Cell<f32>], src: impl Load<f32>) {
    // Each piece read whole, then written: cells of one arena might
    // overlap, so a copy element by element stays scalar.
    let mut i = 0;
    while i + 8 <= dst.len() {
        let s = src.sub(i, 8);
        let v: [f32; 8] = core::array::from_fn(|l| s.load(l));
        dst[i..i + 8].iter().zip(v).for_each(|(d, v)| d.set(v));
        i += 8;
    }
    if i + 4 <= dst.len() {
        let s = src.sub(i, 4);
        let v: [f32; 4] = core::array::from_fn(|l| s.load(l));
        dst[i..i + 4].iter().zip(v).for_each(|(d, v)| d.set(v));
        i += 4;
    }
    for (l, d) in dst[i..].iter().enumerate() {
        d.set(src.load(i + l));
    }
}

impl<L: Load<f32>> PackB for Im2col<L> {
    fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        #[cfg(target_arch = "x86_64")]
        if super::gemm::Isa::detect() == super::gemm::Isa::Avx512 {
            // SAFETY: the function only needs the CPU to have AVX-512 F,
            // which `Isa::detect` checked at run time.
            #[allow(unsafe_code)]
            return unsafe { self.pack_avx512(p0, kc, j0, nc, dst) };
        }
        #[cfg(target_arch = "x86_64")]
        if super::gemm::Isa::detect() == super::gemm::Isa::Fma {
            // SAFETY: the function only needs AVX2, which `Isa::detect`
            // checked at run time.
            #[allow(unsafe_code)]
            return unsafe { self.pack_avx2(p0, kc, j0, nc, dst) };
        }
        self.pack_with::<1>(p0, kc, j0, nc, dst)
    }
}

impl<L: Load<f32>> Im2col<L> {
    /// [`PackB::pack`] with each contiguous run (its padding included)
    /// copied by one masked load and one masked store.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn pack_avx512(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        self.pack_with::<16>(p0, kc, j0, nc, dst)
    }

    /// [`PackB::pack`] with its runs copied in 8-lane pieces, stride-2
    /// runs by masked loads and a shuffle.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn pack_avx2(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        self.pack_with::<8>(p0, kc, j0, nc, dst)
    }

    /// The packing, with the vector code of `LANES`-lane registers where
    /// there is some (16: AVX-512, 8: AVX2, else none).
    #[inline(always)]
    fn pack_with<const LANES: usize>(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        dst: &[Cell<f32>],
    ) {
        let w = &self.s.window;
        let [id, ih, iw] = w.input.map(|d| d as isize);
        let [_, oh, ow] = w.output;
        let [kd, kh, kw] = w.kernel;
        let n = self.s.n();
        let [sz, sy, sx] = w.strides.map(|d| d as isize);
        let [pz, py, px] = w.pad.map(|d| d as isize);
        let [dz, dy, dx] = w.dilations.map(|d| d as isize);
        for (panel, c0) in (0..nc).step_by(NR).enumerate() {
            let out = &dst[panel * kc * NR..(panel + 1) * kc * NR];
            // The panel's columns split at output-row boundaries (at most
            // NR runs); columns past the matrix stay zero.
            let mut runs = [Run::default(); NR];
            let mut count = 0;
            let mut c = 0;
            while c < NR && j0 + c0 + c < n {
                let j = j0 + c0 + c;
                let (row, x) = (j / ow, j % ow);
                let len = (ow - x).min(NR - c).min(n - j);
                runs[count] = Run {
                    at: c,
                    len,
                    z: row / oh,
                    y: row % oh,
                    x,
                };
                count += 1;
                c += len;
            }
            let filled = c;
            // The tap of depth p0 + p, stepped rather than divided out for
            // every depth (the divisions were a third of the packing).
            let mut tap = Tap::of(p0, [kd, kh, kw]);
            for o in out.chunks_exact(NR) {
                let (ch, [kz, ky, kx]) = (tap.channel, tap.k.map(|k| k as isize));
                tap.step([kd, kh, kw]);
                let plane = self.base + ch * w.input_plane();
                for run in &runs[..count] {
                    let cells = &o[run.at..run.at + run.len];
                    let z = run.z as isize * sz - pz + kz * dz;
                    let y = run.y as isize * sy - py + ky * dy;
                    if !(0..id).contains(&z) || !(0..ih).contains(&y) {
                        cells.iter().for_each(|c| c.set(0.0));
                        continue;
                    }
                    let row = plane + ((z * ih + y) * iw) as usize;
                    let x0 = run.x as isize * sx - px + kx * dx;
                    if sx == 1 {
                        // Contiguous input columns x0..x0 + len, zero
                        // where they fall in the padding.
                        let (lo, hi) = (x0.clamp(0, iw), (x0 + run.len as isize).clamp(0, iw));
                        if hi <= lo {
                            cells.iter().for_each(|c| c.set(0.0));
                            continue;
                        }
                        let (head, inside) = ((lo - x0) as usize, (hi - lo) as usize);
                        #[cfg(target_arch = "x86_64")]
                        if LANES == 16 {
                            let src = self.data.sub(row + lo as usize, inside);
                            // SAFETY: 16 lanes only from `pack_avx512`, on a
                            // CPU with AVX-512 F.
                            #[allow(unsafe_code)]
                            unsafe {
                                padded_run_avx512(cells, src.ptr(), head, inside)
                            };
                            continue;
                        }
                        cells[..head].iter().for_each(|c| c.set(0.0));
                        copy_run(
                            &cells[head..head + inside],
                            self.data.sub(row + lo as usize, inside),
                        );
                        cells[head + inside..].iter().for_each(|c| c.set(0.0));
                    } else {
                        #[cfg(target_arch = "x86_64")]
                        if LANES > 1 && sx == 2 {
                            let src = self.data.sub(row, iw as usize).ptr();
                            // SAFETY: 16 lanes only from `pack_avx512`, on
                            // a CPU with AVX-512 F; 8 only from `pack_avx2`,
                            // on one with AVX2.
                            #[allow(unsafe_code)]
                            unsafe {
                                if LANES == 16 {
                                    stride2_run_avx512(cells, src, x0, iw)
                                } else {
                                    stride2_run_avx2(cells, src, x0, iw)
                                }
                            };
                            continue;
                        }
                        for (i, c) in cells.iter().enumerate() {
                            let x = x0 + i as isize * sx;
                            c.set(if (0..iw).contains(&x) {
                                self.data.load(row + x as usize)
                            } else {
                                0.0
                            });
                        }
                    }
                }
                o[filled..].iter().for_each(|c| c.set(0.0));
            }
        }
    }
}

/// Bias of output channel `channel`: one value for all, one per
/// channel, or none.
pub(super) fn bias_at(bias: Option<Src<'_, f32>>, channel: usize) -> f32 {
    match bias {
        Some(b) if b.len() == 1 => b.at(0),
        Some(b) => b.at(channel),
        None => 0.0,
    }
}

/// Writes each output channel's bias (or zero) over columns `cols` of
/// its plane.
pub(crate) fn fill_bias(
    s: &ConvShape,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    cols: core::ops::Range<usize>,
) {
    let channels = s.groups * s.out_per_group;
    let n = s.n();
    for (i, plane) in out.chunks_exact(n.max(1)).enumerate() {
        let b = bias_at(bias, i % channels);
        plane[cols.clone()].iter().for_each(|c| c.set(b));
    }
}

/// Convolution of `x` (N·C·H·W) with `weight` (O·I/g·KH·KW) plus `bias`,
/// plus `residual` (laid out as `out`) where given, each output then
/// through `finish`: the share `part` of `parts` (output columns; planes
/// for depthwise, which take no residual).
#[allow(clippy::too_many_arguments)]
pub fn conv(
    s: &ConvShape,
    packed: Option<&Panels>,
    x: Src<'_, f32>,
    weight: Src<'_, f32>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    (finish, residual): (Finish, Option<&[Cell<f32>]>),
    scratch: &[Cell<f32>],
    share: (usize, usize),
) {
    #[cfg(target_arch = "x86_64")]
    if let (Some(p), None) = (packed, residual) {
        if super::stem::applies(s, p) {
            return crate::with_load!(weight, |w| crate::with_load!(x, |x| {
                super::stem::conv(s, p, w, x, bias, out, finish, share)
            }));
        }
    }
    let direct = super::direct::applies(s);
    conv_as(
        s,
        (packed, direct),
        (x, weight, bias),
        out,
        (finish, residual),
        scratch,
        share,
    )
}

/// [`conv`], its packed kernel `packed.0` read against the image as it
/// lies by the kernels of `packed.1` when given (which
/// [`super::direct::can`] must allow), else against im2col panels.
pub(super) fn conv_as(
    s: &ConvShape,
    (packed, direct): (Option<&Panels>, Option<super::gemm::Isa>),
    (x, weight, bias): (Src<'_, f32>, Src<'_, f32>, Option<Src<'_, f32>>),
    out: &[Cell<f32>],
    (finish, residual): (Finish, Option<&[Cell<f32>]>),
    scratch: &[Cell<f32>],
    (part, parts): (usize, usize),
) {
    if s.depthwise() {
        debug_assert!(
            residual.is_none(),
            "a residual merged into a depthwise step"
        );
        let planes = s.batch * s.groups;
        let per = planes.div_ceil(parts.max(1));
        let (p0, p1) = ((part * per).min(planes), ((part + 1) * per).min(planes));
        // Plane p is channel p % groups.
        let plane_bias = |p: usize| bias_at(bias, p % s.groups);
        return crate::with_load!(x, |x| crate::with_load!(weight, |w| {
            super::depthwise::depthwise(s, x, w, plane_bias, out, p0..p1, 0, finish)
        }));
    }
    let w = &s.window;
    let (m, n, k) = (s.out_per_group, s.n(), s.k());
    let (lines, cols) = if packed.is_some() && k > 0 {
        let cheap_right = s.pointwise() || direct.is_some();
        prepacked::left_shares(m, n, (part, parts), cheap_right)
    } else {
        (0..m, gemm::share(n, part, parts))
    };
    if k == 0 {
        // No depth block to store the bias with.
        fill_bias(s, bias, out, cols.clone());
    }
    let plane_in = w.input_plane();
    for image in 0..s.batch {
        for g in 0..s.groups {
            let in_base = (image * s.groups + g) * s.in_per_group * plane_in;
            let out_base = (image * s.groups + g) * m * n;
            let dst = Dst {
                data: out,
                offset: out_base,
                rs: n,
                cs: 1,
                finish,
                // The first depth block writes bias + sum over the
                // output, so it is never filled with the bias first.
                start: Start::Store(bias, g * m),
                residual,
            };
            crate::with_load!(weight, |wt| crate::with_load!(x, |xs| {
                let group = Group {
                    s,
                    packed,
                    g,
                    weight: wt,
                };
                if s.pointwise() {
                    let b = Strided {
                        data: xs,
                        offset: in_base,
                        rs: n,
                        cs: 1,
                        rows: k,
                        cols: n,
                    };
                    group.product(&b, &dst, scratch, (lines.clone(), cols.clone()))
                } else if let (Some(p), Some(isa)) = (packed, direct) {
                    let share = (lines.clone(), cols.clone());
                    super::direct::conv(s, isa, p, g, wt, xs, in_base, &dst, scratch, share)
                } else {
                    let b = Im2col {
                        data: xs,
                        base: in_base,
                        s: *s,
                    };
                    group.product(&b, &dst, scratch, (lines.clone(), cols.clone()))
                }
            }))
        }
    }
}

/// One group's kernel: the left operand of its product, packed at compile
/// time or packed here block by block.
struct Group<'p, L> {
    s: &'p ConvShape,
    packed: Option<&'p Panels>,
    g: usize,
    weight: L,
}

impl<L: Load<f32>> Group<'_, L> {
    /// `dst += kernel · b` over rows `lines` (all of them unless the
    /// kernel is packed: [`prepacked::left_shares`]) and columns `cols`.
    fn product(
        &self,
        b: &impl PackB,
        dst: &Dst<'_>,
        scratch: &[Cell<f32>],
        (lines, cols): (core::ops::Range<usize>, core::ops::Range<usize>),
    ) {
        let (m, n, k) = (self.s.out_per_group, self.s.n(), self.s.k());
        match self.packed {
            Some(p) => {
                prepacked::gemm_left(p, self.g, self.weight, n, b, dst, scratch, (lines, cols))
            }
            None => {
                debug_assert_eq!(lines, 0..m, "an unpacked kernel split by rows");
                let a = Strided {
                    data: self.weight,
                    offset: self.g * m * k,
                    rs: k,
                    cs: 1,
                    rows: m,
                    cols: k,
                };
                gemm::gemm_cols(m, n, k, &a, b, dst, scratch, cols)
            }
        }
    }
}

/// Transposed convolution (`ConvTranspose`), by scattering each input
/// value through the kernel: `weight` is O·(I/g)·K… (tract's planned
/// graph reorders ONNX's I·(O/g)·K… kernel), `out` starts as the bias. Taps that fall outside the output (padding) are dropped.
pub fn deconv(
    s: &ConvShape,
    x: Src<'_, f32>,
    weight: Src<'_, f32>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
) {
    fill_bias(s, bias, out, 0..s.n());
    let w = &s.window;
    let [id, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    let [kd, kh, kw] = w.kernel;
    let taps = kd * kh * kw;
    for image in 0..s.batch {
        for g in 0..s.groups {
            for ic in 0..s.in_per_group {
                let cin = g * s.in_per_group + ic;
                let xb = (image * s.groups * s.in_per_group + cin) * w.input_plane();
                for oc in 0..s.out_per_group {
                    let cout = g * s.out_per_group + oc;
                    let ob = (image * s.groups * s.out_per_group + cout) * w.output_plane();
                    let wb = (cout * s.in_per_group + ic) * taps;
                    for (t, (kz, ky, kx)) in (0..kd)
                        .flat_map(|z| (0..kh).flat_map(move |y| (0..kw).map(move |x| (z, y, x))))
                        .enumerate()
                    {
                        let wv = weight.at(wb + t);
                        for iz in 0..id {
                            let Some(z) = place(iz, kz, 0, w, od) else {
                                continue;
                            };
                            for iy in 0..ih {
                                let Some(y) = place(iy, ky, 1, w, oh) else {
                                    continue;
                                };
                                for ix in 0..iw {
                                    let Some(xo) = place(ix, kx, 2, w, ow) else {
                                        continue;
                                    };
                                    let c = &out[ob + (z * oh + y) * ow + xo];
                                    c.set(c.get() + wv * x.at(xb + (iz * ih + iy) * iw + ix));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Output coordinate that input `i` reaches through tap `k` along `axis`.
fn place(i: usize, k: usize, axis: usize, w: &super::pool::Window, n: usize) -> Option<usize> {
    let at = (i * w.strides[axis] + k * w.dilations[axis]).checked_sub(w.pad[axis])?;
    (at < n).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::elementwise::{unary_f32, Unary};
    use alloc::vec::Vec;

    /// Every tap of every output, in f64.
    fn naive(s: &ConvShape, x: &[f32], weight: &[f32], bias: &[f32]) -> Vec<f32> {
        let w = &s.window;
        let [kd, kh, kw] = w.kernel;
        let [od, oh, ow] = w.output;
        let mut out = Vec::new();
        for image in 0..s.batch {
            for g in 0..s.groups {
                for oc in 0..s.out_per_group {
                    let cout = g * s.out_per_group + oc;
                    for o in 0..od * oh * ow {
                        let pos = [o / (oh * ow), o / ow % oh, o % ow];
                        let mut sum = f64::from(bias[cout]);
                        for ic in 0..s.in_per_group {
                            let cin = g * s.in_per_group + ic;
                            for t in 0..kd * kh * kw {
                                let k = [t / (kh * kw), t / kw % kh, t % kw];
                                let at: [isize; 3] = core::array::from_fn(|a| {
                                    (pos[a] * w.strides[a] + k[a] * w.dilations[a]) as isize
                                        - w.pad[a] as isize
                                });
                                if (0..3).any(|a| at[a] < 0 || at[a] >= w.input[a] as isize) {
                                    continue;
                                }
                                let xi = ((image * s.groups * s.in_per_group + cin) * w.input[0]
                                    + at[0] as usize)
                                    * w.input[1]
                                    * w.input[2]
                                    + at[1] as usize * w.input[2]
                                    + at[2] as usize;
                                let wi = (cout * s.in_per_group + ic) * kd * kh * kw + t;
                                sum += f64::from(x[xi]) * f64::from(weight[wi]);
                            }
                        }
                        out.push(sum as f32);
                    }
                }
            }
        }
        out
    }

    use crate::kernels::testing::value;

    /// The packed convolution (image packed straight into panels) equals
    /// the definition across strides, dilations, asymmetric padding, 1-d,
    /// 2-d and 3-d windows, groups, batches, output rows narrower and
    /// wider than a panel, and thread shares.
    /// Random 2-d geometries, rows up to 80 wide (several 16-lane
    /// panels per row and runs split at row ends), strides 1 to 3 (the
    /// stride-2 runs' masked loads at both paddings), dilations and
    /// asymmetric paddings: the packed product gives the definition.
    #[test]
    fn random_geometries_match_the_definition() {
        let mut below = crate::kernels::testing::below(0x5851_f42d_4c95_7f2du64);
        let mut tried = 0;
        while tried < 150 {
            let input = [1, 1 + below(9), 1 + below(80)];
            let kernel = [1, 1 + below(5), 1 + below(7)];
            let strides = [1, 1 + below(3), 1 + below(3)];
            let dilations = [1, 1 + below(2), 1 + below(2)];
            let pad = [0, below(kernel[1] + 1), below(kernel[2] + 1)];
            let pad_after = [0, below(kernel[1] + 1), below(kernel[2] + 1)];
            let Some(output) = (0..3)
                .map(|a| {
                    (input[a] + pad[a] + pad_after[a])
                        .checked_sub(dilations[a] * (kernel[a] - 1) + 1)
                        .map(|e| e / strides[a] + 1)
                })
                .collect::<Option<Vec<usize>>>()
            else {
                continue;
            };
            tried += 1;
            let (ipg, opg) = (1 + below(4), 1 + below(13));
            let s = ConvShape {
                batch: 1,
                groups: 1,
                in_per_group: ipg,
                out_per_group: opg,
                window: Window {
                    planes: ipg,
                    input,
                    output: [output[0], output[1], output[2]],
                    kernel,
                    strides,
                    dilations,
                    pad,
                    pad_after,
                },
            };
            let plane: usize = input.iter().product();
            let x: Vec<f32> = (0..ipg * plane).map(|i| value(i, 4)).collect();
            let weight: Vec<f32> = (0..opg * s.k()).map(|i| value(i, 5)).collect();
            let bias: Vec<f32> = (0..opg).map(|i| value(i, 6)).collect();
            let want = naive(&s, &x, &weight, &bias);
            let out = conv_in_parts(&s, (&x, &weight, &bias), 1);
            assert_near(&out, &want, &format!("{:?}", s.window));
        }
    }

    /// The convolution `s` of `x` with `weight` plus `bias`, computed in
    /// `parts` shares as threads would.
    fn conv_in_parts(
        s: &ConvShape,
        (x, weight, bias): (&[f32], &[f32], &[f32]),
        parts: usize,
    ) -> Vec<Cell<f32>> {
        let out: Vec<Cell<f32>> = (0..s.batch * s.groups * s.out_per_group * s.n())
            .map(|_| Cell::new(f32::NAN))
            .collect();
        let scratch: Vec<Cell<f32>> = (0..s.scratch_elems()).map(|_| Cell::new(0.0)).collect();
        for part in 0..parts {
            conv(
                s,
                None,
                Src::Weight(x),
                Src::Weight(weight),
                Some(Src::Weight(bias)),
                &out,
                (Finish::Keep, None),
                &scratch,
                (part, parts),
            );
        }
        out
    }

    fn assert_near(out: &[Cell<f32>], want: &[f32], case: &str) {
        assert_eq!(out.len(), want.len(), "{case}");
        for (i, (o, w)) in out.iter().zip(want).enumerate() {
            assert!(
                (o.get() - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{case}: output {i} is {} not {w}",
                o.get()
            );
        }
    }

    #[test]
    fn matches_the_definition() {
        // (input, kernel, strides, dilations, pad, pad_after, groups,
        // in/out channels per group, batch)
        type Geometry = [[usize; 3]; 6];
        type Case = (Geometry, usize, usize, usize, usize);
        let cases: [Case; 8] = [
            (
                [
                    [1, 7, 9],
                    [1, 3, 3],
                    [1, 1, 1],
                    [1, 1, 1],
                    [0, 1, 1],
                    [0, 1, 1],
                ],
                1,
                3,
                5,
                1,
            ),
            (
                [
                    [1, 20, 21],
                    [1, 3, 3],
                    [1, 2, 2],
                    [1, 1, 1],
                    [0, 1, 1],
                    [0, 1, 1],
                ],
                1,
                4,
                7,
                2,
            ),
            (
                [
                    [1, 9, 40],
                    [1, 3, 5],
                    [1, 1, 3],
                    [1, 2, 1],
                    [0, 2, 2],
                    [0, 0, 3],
                ],
                2,
                3,
                4,
                1,
            ),
            (
                [
                    [1, 1, 50],
                    [1, 1, 7],
                    [1, 1, 1],
                    [1, 1, 2],
                    [0, 0, 6],
                    [0, 0, 6],
                ],
                1,
                2,
                17,
                1,
            ),
            (
                [
                    [4, 5, 6],
                    [2, 3, 3],
                    [2, 1, 2],
                    [1, 1, 1],
                    [1, 1, 0],
                    [0, 1, 1],
                ],
                1,
                2,
                3,
                1,
            ),
            (
                [
                    [1, 3, 3],
                    [1, 5, 5],
                    [1, 1, 1],
                    [1, 1, 1],
                    [0, 2, 2],
                    [0, 2, 2],
                ],
                1,
                1,
                2,
                1,
            ),
            (
                [
                    [1, 6, 33],
                    [1, 1, 1],
                    [1, 1, 1],
                    [1, 1, 1],
                    [0, 0, 0],
                    [0, 0, 0],
                ],
                1,
                70,
                9,
                1,
            ),
            (
                [
                    [1, 12, 12],
                    [1, 7, 7],
                    [1, 2, 2],
                    [1, 1, 1],
                    [0, 3, 3],
                    [0, 3, 3],
                ],
                1,
                3,
                8,
                1,
            ),
        ];
        for ([input, kernel, strides, dilations, pad, pad_after], groups, ipg, opg, batch) in cases
        {
            let output: [usize; 3] = core::array::from_fn(|a| {
                (input[a] + pad[a] + pad_after[a] - dilations[a] * (kernel[a] - 1) - 1) / strides[a]
                    + 1
            });
            let s = ConvShape {
                batch,
                groups,
                in_per_group: ipg,
                out_per_group: opg,
                window: Window {
                    planes: batch * groups * ipg,
                    input,
                    output,
                    kernel,
                    strides,
                    dilations,
                    pad,
                    pad_after,
                },
            };
            let plane: usize = input.iter().product();
            let x: Vec<f32> = (0..batch * groups * ipg * plane)
                .map(|i| value(i, 1))
                .collect();
            let weight: Vec<f32> = (0..groups * opg * s.k()).map(|i| value(i, 2)).collect();
            let bias: Vec<f32> = (0..groups * opg).map(|i| value(i, 3)).collect();
            let want = naive(&s, &x, &weight, &bias);
            for parts in [1, 3] {
                let out = conv_in_parts(&s, (&x, &weight, &bias), parts);
                let case =
                    format!("input {input:?} kernel {kernel:?} strides {strides:?}, {parts} parts");
                assert_near(&out, &want, &case);
                let scratch: Vec<Cell<f32>> =
                    (0..s.scratch_elems()).map(|_| Cell::new(0.0)).collect();
                // An activation merged into the convolution gives the
                // bytes of its element-wise step run after it.
                let clamp = gemm::Clamp {
                    lo: -0.25,
                    hi: 0.5,
                    max_first: parts == 1,
                };
                let bits =
                    |v: &[Cell<f32>]| v.iter().map(|c| c.get().to_bits()).collect::<Vec<_>>();
                let stepped = |finish: Finish, v: &[Cell<f32>]| {
                    let after: Vec<Cell<f32>> = v.iter().map(|c| Cell::new(c.get())).collect();
                    let f = match finish {
                        Finish::Sigmoid => Unary::Sigmoid,
                        Finish::Silu => Unary::Silu,
                        Finish::HardSwish => Unary::HardSwish,
                        _ => return v.iter().map(|c| clamp.apply(c.get()).to_bits()).collect(),
                    };
                    unary_f32(f, Src::Arena(v), &after);
                    bits(&after)
                };
                let finishes = [
                    Finish::Clamp(clamp),
                    Finish::Sigmoid,
                    Finish::Silu,
                    Finish::HardSwish,
                ];
                for finish in finishes {
                    let fused: Vec<Cell<f32>> =
                        (0..want.len()).map(|_| Cell::new(f32::NAN)).collect();
                    for part in 0..parts {
                        conv(
                            &s,
                            None,
                            Src::Weight(&x),
                            Src::Weight(&weight),
                            Some(Src::Weight(&bias)),
                            &fused,
                            (finish, None),
                            &scratch,
                            (part, parts),
                        );
                    }
                    assert_eq!(
                        bits(&fused),
                        stepped(finish, &out),
                        "fused {finish:?}: input {input:?} kernel {kernel:?}"
                    );
                }
                let fused: Vec<Cell<f32>> = (0..want.len()).map(|_| Cell::new(f32::NAN)).collect();
                for part in 0..parts {
                    conv(
                        &s,
                        None,
                        Src::Weight(&x),
                        Src::Weight(&weight),
                        Some(Src::Weight(&bias)),
                        &fused,
                        (Finish::Clamp(clamp), None),
                        &scratch,
                        (part, parts),
                    );
                }
                assert!(
                    fused.iter().any(|c| c.get() == 0.5) && fused.iter().any(|c| c.get() == -0.25)
                );
                if s.depthwise() {
                    continue;
                }
                // The kernel packed ahead of time gives the same bytes.
                let p = Panels {
                    side: prepacked::Side::Left,
                    matrices: groups,
                    rows: opg,
                    depth: s.k(),
                    strides: [opg * s.k(), s.k(), 1],
                    kc: 0,
                }
                .with_depth_block(gemm::KC);
                let packed_weight = p.pack(&weight).expect("a permutation");
                let scratch: Vec<Cell<f32>> = (0..prepacked::scratch_elems(&p, s.n()))
                    .map(|_| Cell::new(0.0))
                    .collect();
                let again: Vec<Cell<f32>> = (0..want.len()).map(|_| Cell::new(f32::NAN)).collect();
                for part in 0..parts {
                    conv(
                        &s,
                        Some(&p),
                        Src::Weight(&x),
                        Src::Weight(&packed_weight),
                        Some(Src::Weight(&bias)),
                        &again,
                        (Finish::Keep, None),
                        &scratch,
                        (part, parts),
                    );
                }
                assert_eq!(
                    bits(&again),
                    bits(&out),
                    "packed: input {input:?} kernel {kernel:?}"
                );
                for finish in finishes {
                    for part in 0..parts {
                        conv(
                            &s,
                            Some(&p),
                            Src::Weight(&x),
                            Src::Weight(&packed_weight),
                            Some(Src::Weight(&bias)),
                            &again,
                            (finish, None),
                            &scratch,
                            (part, parts),
                        );
                    }
                    assert_eq!(
                        bits(&again),
                        stepped(finish, &out),
                        "packed and fused {finish:?}: input {input:?} kernel {kernel:?}"
                    );
                }
            }
        }
    }
}
