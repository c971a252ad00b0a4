//! A depthwise convolution whose output sits over its input (the compiler's
//! `depthwise-in-place` alias, `docs/REUSE.md`).
//!
//! Planes (image × channel, in memory order) are computed one at a time
//! into a one-plane temporary and then copied to their place. With `P`
//! planes of `IP` input and `OP ≤ IP` output elements, output plane `p`
//! lands on elements `[p·OP, (p+1)·OP)`, which lie before `(p+1)·IP`: only
//! input planes `0..=p` are overwritten, and those were read completely
//! before (plane `p` itself into the temporary).
//!
//! Threads:
//! - When the planes are the same size (`OP = IP`), output plane `p`
//!   covers input plane `p` exactly, so threads take disjoint runs of
//!   planes, each with its own temporary.
//! - When the output planes are at most half the input's (a stride of 2),
//!   every output lands within the first `⌈P·OP/IP⌉ ≤ P/2` input planes.
//!   Share 0 takes at least those, in order, and counts the planes it has
//!   read; the other shares split the rest, whose input nothing
//!   overwrites, and each waits before copying a plane into place until
//!   share 0 has read every input plane under it (at stride 2, at first
//!   for about a quarter of share 0's run, then hardly again). Share 0 never
//!   waits, so shares that run in order from share 0 finish too. This
//!   needs the step's counter ([`super::run::Views::with_progress`]);
//!   without it, and for other shapes (a later plane landing on an
//!   earlier one another thread may not have read yet), the step runs in
//!   plane order on one thread.

use super::cells::Src;
use super::gemm::Finish;
use super::linalg::{bias_at, ConvShape};
use core::cell::Cell;
use core::ops::Range;
use core::sync::atomic::{AtomicUsize, Ordering};

/// True when threads may split the planes (given the step's counter):
/// each output plane covers its own input plane and nothing else, or the
/// output planes are at most half the input's.
pub fn parallel(s: &ConvShape) -> bool {
    let (ip, op) = (s.window.input_plane(), s.window.output_plane());
    op == ip || (op > 0 && 2 * op <= ip)
}

/// Scratch floats per thread: one output plane.
pub fn scratch_elems(s: &ConvShape) -> usize {
    s.window.output_plane()
}

/// What a share does: its planes, and whether it counts them for the
/// others (share 0) or waits for share 0 before copying into place.
#[derive(Debug, PartialEq, Eq)]
enum Role {
    /// Nothing to wait for or tell.
    Alone,
    Counts,
    Waits,
}

/// The planes of share `part` of `parts`, and its role; `synced` when the
/// step's counter is there.
fn share(s: &ConvShape, part: usize, parts: usize, synced: bool) -> (Range<usize>, Role) {
    let planes = s.batch * s.groups;
    let (ip, op) = (s.window.input_plane(), s.window.output_plane());
    let parts = parts.max(1);
    if op == ip {
        let per = planes.div_ceil(parts);
        let range = (part * per).min(planes)..((part + 1) * per).min(planes);
        return (range, Role::Alone);
    }
    if !(synced && parts > 1 && parallel(s)) {
        let range = if part == 0 { 0..planes } else { 0..0 };
        return (range, Role::Alone);
    }
    // Input planes some output lands on: share 0's, at least. Beyond
    // that, share 0 takes `m` planes such that `m = r·m + (P − m)/(N − 1)`
    // (`r = OP/IP`): the others' first wait is about `r·m` planes of share
    // 0's time, so an even split would leave share 0 idle at the end.
    let landed = (planes * op).div_ceil(ip);
    let balanced = (planes * ip).div_ceil((parts - 1) * (ip - op) + ip);
    let first = balanced.max(landed).min(planes);
    if part == 0 {
        return (0..first, Role::Counts);
    }
    let per = (planes - first).div_ceil(parts - 1);
    let start = (first + (part - 1) * per).min(planes);
    (start..(start + per).min(planes), Role::Waits)
}

/// Tells the waiting shares that share 0 is done (also when it unwinds
/// from a panic, so that they do not wait forever; the run then fails).
struct Done<'a>(Option<&'a AtomicUsize>);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            p.store(usize::MAX, Ordering::Release);
        }
    }
}

/// Waits until share 0 has read `planes` input planes.
fn wait_for(progress: &AtomicUsize, planes: usize) {
    let mut polls = 0u32;
    while progress.load(Ordering::Acquire) < planes {
        core::hint::spin_loop();
        polls = polls.wrapping_add(1);
        // On a machine busier than its cores, share 0's thread may need
        // this one's core.
        #[cfg(feature = "std")]
        if polls.is_multiple_of(1024) {
            std::thread::yield_now();
        }
    }
}

/// Runs share `part` of `parts` (`share`) of the convolution of `x` into
/// `out`, where `out` starts at `x`'s first element, each output then
/// through `finish`; `temp` holds at least one output plane. `progress`
/// is the step's counter, if any (see the module's notes).
#[allow(clippy::too_many_arguments)]
pub fn run(
    s: &ConvShape,
    x: Src<'_, f32>,
    weight: Src<'_, f32>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    finish: Finish,
    temp: &[Cell<f32>],
    (part, parts): (usize, usize),
    progress: Option<&AtomicUsize>,
) {
    let (planes, role) = share(s, part, parts, progress.is_some());
    let _done = Done(progress.filter(|_| role == Role::Counts));
    if planes.is_empty() {
        return;
    }
    let (ip, op) = (s.window.input_plane(), s.window.output_plane());
    let plane_bias = |p: usize| bias_at(bias, p % s.groups);
    let plane = op;
    let place = |p: usize| {
        if let (Role::Waits, Some(progress)) = (&role, progress) {
            wait_for(progress, ((p + 1) * op).div_ceil(ip));
        }
        for (o, t) in out[p * plane..(p + 1) * plane].iter().zip(temp) {
            o.set(t.get());
        }
        if let (Role::Counts, Some(progress)) = (&role, progress) {
            progress.store(p + 1, Ordering::Release);
        }
    };
    // The bands, one plane at a time through the temporary.
    let by_bands = |planes: Range<usize>| {
        if planes.is_empty() || temp.len() < plane {
            return;
        }
        let temp = &temp[..plane];
        // The same steps per plane as the loop below, with the band set up
        // once.
        let through = crate::with_load!(x, |x| crate::with_load!(weight, |w| {
            super::depthwise::depthwise_through(
                s,
                x,
                w,
                plane_bias,
                temp,
                planes.clone(),
                finish,
                place,
            )
        }));
        if through {
            return;
        }
        for p in planes {
            crate::with_load!(x, |x| crate::with_load!(weight, |w| {
                super::depthwise::depthwise(s, x, w, plane_bias, temp, p..p + 1, p, finish)
            }));
            place(p);
        }
    };
    // Sixteen planes at a time, each block's output written over input
    // rows or planes already read: no temporary, and the roles' signals
    // per block. Planes before `from` take the bands.
    #[cfg(target_arch = "x86_64")]
    if let Some((lanes, from)) = lanes_from(s, &planes, &role) {
        by_bands(planes.start..from);
        let read = |end: usize| {
            if let (Role::Counts, Some(progress)) = (&role, progress) {
                progress.store(end, Ordering::Release);
            }
        };
        let store = |end: usize| {
            if let (Role::Waits, Some(progress)) = (&role, progress) {
                wait_for(progress, (end * op).div_ceil(ip));
            }
        };
        let done = crate::with_load!(x, |x| crate::with_load!(weight, |w| {
            super::depthwise_lanes::run(
                &lanes,
                s,
                x,
                w,
                plane_bias,
                out,
                from..planes.end,
                0,
                finish,
                (read, store),
            )
        }));
        if !done {
            by_bands(from..planes.end);
        }
        return;
    }
    by_bands(planes);
}

/// The lanes kernel's layout for this share's planes and the first of
/// them it takes (`None`: the bands take them all). A block of planes
/// `[a, b)` may be written in strips, before its own input is read whole,
/// where its output lands on input planes already read: on rows already
/// read of its own planes (`Lanes::of` in place), on share 0's planes
/// that a waiting share waits for, or below plane `a` once `b·OP ≤ a·IP`,
/// which at stride 2 (`OP ≈ IP/4`) holds from plane 6 on: the first
/// planes take the bands.
#[cfg(target_arch = "x86_64")]
fn lanes_from(
    s: &ConvShape,
    planes: &Range<usize>,
    role: &Role,
) -> Option<(super::depthwise_lanes::Lanes, usize)> {
    if let Some(lanes) = super::depthwise_lanes::Lanes::of(s, true) {
        return Some((lanes, planes.start));
    }
    let (ip, op) = (s.window.input_plane(), s.window.output_plane());
    if op >= ip {
        return None;
    }
    let lanes = super::depthwise_lanes::Lanes::of(s, false)?;
    let from = if *role == Role::Waits {
        planes.start
    } else {
        // The first `a` with `(a + 16)·OP ≤ a·IP`.
        planes.start.max((16 * op).div_ceil(ip - op))
    };
    Some((lanes, from.min(planes.end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::pool::Window;
    use alloc::vec;
    use alloc::vec::Vec;

    /// A small deterministic generator (xorshift), so that the cases are
    /// many and reproducible without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn value(&mut self) -> f32 {
            (self.below(2001) as f32 - 1000.0) / 500.0
        }
    }

    /// A random depthwise shape: batch 1–3, 1–7 channels, planes up to
    /// 40 × 40, kernels 1–5, strides 1–2, dilations 1–2, any padding, and
    /// now and then a 3-d window; a third of them "same" (odd kernels,
    /// stride 1, centred padding: output planes as large as the input's,
    /// the case threads split).
    fn random_shape(rng: &mut Rng) -> Option<ConvShape> {
        let deep = rng.below(6) == 0;
        let same = rng.below(3) == 0;
        let mut input = [1; 3];
        let mut kernel = [1; 3];
        let mut strides = [1; 3];
        let mut dilations = [1; 3];
        let mut pad = [0; 3];
        let mut pad_after = [0; 3];
        for a in usize::from(!deep)..3 {
            input[a] = 1 + rng.below(if a == 0 { 6 } else { 40 });
            kernel[a] = 1 + rng.below(5);
            strides[a] = 1 + rng.below(2);
            dilations[a] = 1 + rng.below(2);
            pad[a] = rng.below(3);
            pad_after[a] = rng.below(3);
            if same {
                kernel[a] = 1 + 2 * rng.below(3);
                strides[a] = 1;
                pad[a] = dilations[a] * (kernel[a] - 1) / 2;
                pad_after[a] = pad[a];
            }
        }
        let mut output = [1; 3];
        for a in 0..3 {
            let reach = dilations[a] * (kernel[a] - 1) + 1;
            let span = (input[a] + pad[a] + pad_after[a]).checked_sub(reach)?;
            output[a] = span / strides[a] + 1;
        }
        let channels = 1 + rng.below(7);
        Some(ConvShape {
            batch: 1 + rng.below(3),
            groups: channels,
            in_per_group: 1,
            out_per_group: 1,
            window: Window {
                planes: channels,
                input,
                output,
                kernel,
                strides,
                dilations,
                pad,
                pad_after,
            },
        })
        // Padding may make the output larger than the input: such a step
        // is never in place.
        .filter(|s| s.window.output_plane() <= s.window.input_plane())
    }

    /// The in-place kernel over one buffer gives the same bits as the
    /// out-of-place one over two, for 1–3 threads (each part run in
    /// turn, the parallel case in reverse too: parts of a parallel step
    /// touch disjoint planes, so their order cannot matter).
    #[test]
    fn in_place_matches_out_of_place() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut cases, mut strided, mut parallel_cases, mut shrinking) = (0, 0, 0, 0);
        let (mut lanes_cases, mut striped, mut mixed) = (0, 0, 0);
        while cases < 300 {
            let Some(s) = random_shape(&mut rng) else {
                continue;
            };
            let w = &s.window;
            let planes = s.batch * s.groups;
            let x: Vec<f32> = (0..planes * w.input_plane()).map(|_| rng.value()).collect();
            let weight: Vec<f32> = (0..s.groups * w.kernel.iter().product::<usize>())
                .map(|_| rng.value())
                .collect();
            let bias: Vec<f32> = (0..s.groups).map(|_| rng.value()).collect();
            // Every other case with a clamp merged in.
            let finish = if cases % 2 == 0 {
                Finish::Keep
            } else {
                Finish::Clamp(crate::kernels::gemm::Clamp {
                    lo: -1.0,
                    hi: 1.0,
                    max_first: false,
                })
            };
            let want: Vec<Cell<f32>> = vec![Cell::new(f32::NAN); planes * w.output_plane()];
            super::super::linalg::conv(
                &s,
                None,
                Src::Weight(&x),
                Src::Weight(&weight),
                Some(Src::Weight(&bias)),
                &want,
                (finish, None),
                &[],
                (0, 1),
            );
            let same = w.output_plane() == w.input_plane();
            for (parts, synced) in [(1, false), (2, false), (2, true), (3, true), (4, true)] {
                let buffer: Vec<Cell<f32>> = x.iter().map(|&v| Cell::new(v)).collect();
                let temps: Vec<Vec<Cell<f32>>> = (0..parts)
                    .map(|_| vec![Cell::new(f32::NAN); scratch_elems(&s)])
                    .collect();
                let progress = AtomicUsize::new(0);
                // Shares of equal planes touch disjoint planes, so their
                // order cannot matter; the others wait for share 0 alone,
                // so they run from share 0 on.
                let order: Vec<usize> = if same && parts > 1 {
                    (0..parts).rev().collect()
                } else {
                    (0..parts).collect()
                };
                for part in order {
                    run(
                        &s,
                        Src::Arena(&buffer),
                        Src::Weight(&weight),
                        Some(Src::Weight(&bias)),
                        &buffer[..want.len()],
                        finish,
                        &temps[part],
                        (part, parts),
                        synced.then_some(&progress),
                    );
                }
                for (i, (got, want)) in buffer.iter().zip(&want).enumerate() {
                    assert_eq!(
                        got.get().to_bits(),
                        want.get().to_bits(),
                        "{s:?}, {parts} parts: element {i}"
                    );
                }
            }
            cases += 1;
            strided += usize::from(w.strides.contains(&2));
            parallel_cases += usize::from(parallel(&s));
            shrinking += usize::from(parallel(&s) && !same);
            #[cfg(target_arch = "x86_64")]
            {
                use crate::kernels::depthwise_lanes::Lanes;
                if let Some(lanes) = Lanes::of(&s, true) {
                    lanes_cases += 1;
                    striped += usize::from(lanes.strip() < w.output[1]);
                } else if Lanes::of(&s, false).is_some() && !same && planes > 7 {
                    mixed += 1;
                }
            }
        }
        // On a CPU with AVX-512 the lanes kernel takes many of the cases,
        // some of them in strips of rows (each written over rows read),
        // some after the bands took the first planes.
        if crate::kernels::gemm::Isa::detect() == crate::kernels::gemm::Isa::Avx512 {
            assert!(
                lanes_cases > 100 && striped > 10 && mixed > 10,
                "{lanes_cases} by lanes, {striped} in strips, {mixed} after bands"
            );
        }
        assert!(
            strided > 50 && parallel_cases > 50 && shrinking > 20,
            "{strided} strided, {parallel_cases} parallel, {shrinking} shrinking"
        );
    }

    /// Every plane goes to exactly one share; with the counter, share 0
    /// holds every input plane an output lands on, and the others wait
    /// only for planes below their own.
    #[test]
    fn shares_cover_the_planes_once() {
        let mut rng = Rng(0x5EED);
        let mut checked = 0;
        while checked < 500 {
            let Some(s) = random_shape(&mut rng) else {
                continue;
            };
            let planes = s.batch * s.groups;
            let (ip, op) = (s.window.input_plane(), s.window.output_plane());
            for parts in 1..=4 {
                for synced in [false, true] {
                    let mut seen = vec![0u32; planes];
                    let mut first = 0;
                    for part in 0..parts {
                        let (range, role) = share(&s, part, parts, synced);
                        if part == 0 {
                            first = range.end;
                        }
                        if role == Role::Waits {
                            assert!(range.start >= first);
                            assert!(first >= (planes * op).div_ceil(ip));
                            for p in range.clone() {
                                assert!(((p + 1) * op).div_ceil(ip) <= first);
                            }
                        }
                        for p in range {
                            seen[p] += 1;
                        }
                    }
                    assert!(seen.iter().all(|&n| n == 1), "{s:?}, {parts} parts");
                }
            }
            checked += 1;
        }
    }
}
