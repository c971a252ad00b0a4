//! Valid-input generators for property tests, benches and fuzzing (feature
//! `testing`). Every generator is deterministic in its seed.

use crate::problem::{Buffer, BufferId, ConflictModel, Problem};

/// A small, fast, seedable generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`; `lo` when the range is empty.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo)
        }
    }

    /// True with probability `p_percent / 100`.
    pub fn chance(&mut self, p_percent: u64) -> bool {
        self.range(0, 100) < p_percent
    }
}

/// `n` buffers with random lifetimes within `steps` steps, sizes in
/// `1..=max_size`, alignments of 1 to 16, and now and then a pinned offset.
pub fn random_lifetimes(seed: u64, n: usize, steps: u32, max_size: u64) -> Problem {
    let mut r = Rng::new(seed);
    let mut buffers = Vec::with_capacity(n);
    for _ in 0..n {
        let start = r.range(0, u64::from(steps)) as u32;
        let end = r.range(u64::from(start), u64::from(steps) + 1) as u32;
        let align = 1u64 << r.range(0, 5);
        let mut b = Buffer::new(r.range(0, max_size + 1), start, end, align);
        if r.chance(5) {
            b.pinned_offset = Some(r.range(0, 4 * max_size) / align * align);
        }
        buffers.push(b);
    }
    avoid_pin_clashes(Problem::new(buffers, ConflictModel::Lifetimes))
}

/// `n` buffers with sizes in `1..=max_size` and each pair conflicting with
/// probability `density_percent / 100`.
pub fn random_explicit(seed: u64, n: usize, density_percent: u64, max_size: u64) -> Problem {
    let mut r = Rng::new(seed);
    let buffers = (0..n)
        .map(|_| Buffer::new(r.range(1, max_size + 1), 0, 1, 1))
        .collect();
    let mut adj = vec![Vec::new(); n];
    for a in 0..n {
        for b in a + 1..n {
            if r.chance(density_percent) {
                adj[a].push(BufferId(b as u32));
                adj[b].push(BufferId(a as u32));
            }
        }
    }
    Problem::new(buffers, ConflictModel::Explicit(adj))
}

/// Unpins buffers whose pins clash with an earlier pinned buffer they
/// conflict with, so that a valid plan exists.
fn avoid_pin_clashes(mut p: Problem) -> Problem {
    let pinned: Vec<usize> = (0..p.buffers.len())
        .filter(|&i| p.buffers[i].pinned_offset.is_some())
        .collect();
    let mut kept: Vec<usize> = Vec::new();
    for i in pinned {
        let clash = kept.iter().any(|&j| {
            let (a, b) = (&p.buffers[i], &p.buffers[j]);
            let (ao, bo) = (a.pinned_offset.unwrap_or(0), b.pinned_offset.unwrap_or(0));
            p.conflict(BufferId(i as u32), BufferId(j as u32))
                && a.size > 0
                && b.size > 0
                && ao < bo + b.size
                && bo < ao + a.size
        });
        if clash {
            p.buffers[i].pinned_offset = None;
        } else {
            kept.push(i);
        }
    }
    p
}

/// A full rectangle of `steps` steps by `height` bytes cut into `pieces`
/// buffers by random guillotine cuts: it packs perfectly, so its optimum
/// equals its lower bound, `height`. Buffers come out in random order.
pub fn perfect_packing(seed: u64, steps: u32, height: u64, pieces: usize) -> Problem {
    let mut r = Rng::new(seed);
    // (t0, t1, o0, o1)
    let mut rects = vec![(0u32, steps, 0u64, height)];
    let mut stuck = 0;
    while rects.len() < pieces && stuck < 100 {
        let k = r.range(0, rects.len() as u64) as usize;
        let (t0, t1, o0, o1) = rects[k];
        let in_time = r.chance(50);
        if in_time && t1 - t0 >= 2 {
            let c = r.range(u64::from(t0) + 1, u64::from(t1)) as u32;
            rects[k] = (t0, c, o0, o1);
            rects.push((c, t1, o0, o1));
        } else if !in_time && o1 - o0 >= 2 {
            let c = r.range(o0 + 1, o1);
            rects[k] = (t0, t1, o0, c);
            rects.push((t0, t1, c, o1));
        } else {
            stuck += 1;
        }
    }
    // Shuffle so the order hides the construction.
    for i in (1..rects.len()).rev() {
        let j = r.range(0, i as u64 + 1) as usize;
        rects.swap(i, j);
    }
    let buffers = rects
        .into_iter()
        .map(|(t0, t1, o0, o1)| Buffer::new(o1 - o0, t0, t1, 1))
        .collect();
    Problem::new(buffers, ConflictModel::Lifetimes)
}

/// A synthetic inference trace of `n` buffers, one produced per step, shaped
/// like a network's activations: most die after the next step, some feed
/// skip connections a few to tens of steps later, a few live for thousands
/// of steps. Sizes are 64-byte multiples between 4 KiB and 8 MiB (log
/// scale), aligned to 64.
pub fn synthetic_trace(seed: u64, n: usize) -> Problem {
    let mut r = Rng::new(seed);
    let buffers = (0..n as u32)
        .map(|i| {
            let roll = r.range(0, 1000);
            let life = match roll {
                0..700 => 1,
                700..900 => r.range(2, 9),
                900..990 => r.range(9, 65),
                _ => r.range(65, 5000),
            } as u32;
            let size = (1u64 << r.range(12, 23)) / 64 * r.range(64, 128);
            Buffer::new(size, i, i.saturating_add(1 + life), 64)
        })
        .collect();
    Problem::new(buffers, ConflictModel::Lifetimes)
}

/// A synthetic training trace of `n` buffers, shaped like a production
/// compiler's traces (forward and backward pass): a third are
/// activations saved in the forward pass and freed by the matching
/// backward step (nested lifetimes, so thousands are live at the middle),
/// the rest temporaries living 1 to 16 steps. Sizes are log-uniform from
/// 16 bytes to 1 GiB, aligned to 64; one buffer is produced per step.
pub fn synthetic_training(seed: u64, n: usize) -> Problem {
    let mut r = Rng::new(seed);
    let steps = n as u64;
    let buffers = (0..steps)
        .map(|i| {
            let size = log_uniform(&mut r, (16, 1 << 30), 1).next_multiple_of(64);
            let end = if r.chance(33) && i < steps / 2 {
                // Freed by the backward step that mirrors this one.
                steps - i
            } else {
                (i + r.range(1, 17)).min(steps + 1)
            };
            Buffer::new(size, i as u32, end.max(i + 1) as u32, 64)
        })
        .collect();
    Problem::new(buffers, ConflictModel::Lifetimes)
}

/// The worked example of the conflict-graph method (M1): 8 operators with
/// sizes in MiB units; the heaviest clique {4, 5, 6, 7} weighs 43, which is
/// the optimum.
pub fn worked_example() -> Problem {
    let sizes = [5u64, 10, 8, 20, 2, 6, 15, 3];
    let lists: [&[u32]; 8] = [
        &[2],
        &[1, 3, 4, 5],
        &[2, 4, 5, 6],
        &[2, 3, 5, 6, 7],
        &[2, 3, 4, 6, 7, 8],
        &[3, 4, 5, 7],
        &[4, 5, 6, 8],
        &[5, 7],
    ];
    Problem::new(
        sizes.iter().map(|&s| Buffer::new(s, 0, 1, 1)).collect(),
        ConflictModel::Explicit(
            lists
                .iter()
                .map(|l| l.iter().map(|&i| BufferId(i - 1)).collect())
                .collect(),
        ),
    )
}

/// Parses the interval trace format `id,lower,upper,size` (header line
/// first, `upper` exclusive) into a problem with alignment 1. Returns the
/// line number (1-based) of the first bad line.
pub fn parse_intervals(text: &str) -> Result<Problem, usize> {
    let mut buffers = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<u64> = line
            .split(',')
            .map(|x| x.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| n + 1)?;
        let [_, lower, upper, size] = f[..] else {
            return Err(n + 1);
        };
        let step = |v: u64| u32::try_from(v).map_err(|_| n + 1);
        buffers.push(Buffer::new(size, step(lower)?, step(upper)?, 1));
    }
    Ok(Problem::new(buffers, ConflictModel::Lifetimes))
}

/// Size and lifetime ranges of [`cut_arena`]'s pieces. Both are drawn
/// log-uniform and rounded to multiples of `quantum` (bytes and steps), as
/// in MiniMalloc's benchmark instances, where every size and every time is a
/// multiple of 1,024.
#[derive(Clone, Copy, Debug)]
pub struct CutProfile {
    /// Smallest and largest piece size in bytes.
    pub size: (u64, u64),
    /// Shortest and longest lifetime in steps.
    pub life: (u64, u64),
    /// Percent chance that a piece ending at a step also ends its
    /// neighbours that are still live, so the freed room is re-cut across
    /// their old boundaries (without it the packing is all guillotine cuts,
    /// which a search solves easily).
    pub merge: u64,
    /// The grid of sizes and steps.
    pub quantum: u64,
    /// Percent of the pieces dropped at random afterwards, except those
    /// live at one chosen step, which stays full: the bound stays
    /// `height` and the construction still fits, with some slack elsewhere
    /// as in A–E (filled to 89–98 % of bound × length). 0: a perfect
    /// packing, much harder than anything in MiniMalloc's sets.
    pub drop: u64,
}

impl CutProfile {
    /// Like MiniMalloc's challenging instances A–E: sizes 4 KiB to
    /// 640 KiB, lifetimes 8 Ki to 1 Mi steps.
    pub const CHALLENGING: CutProfile = CutProfile {
        size: (4 << 10, 640 << 10),
        life: (8 << 10, 1 << 20),
        merge: 40,
        quantum: 1 << 10,
        drop: 5,
    };
    /// Many mid-sized pieces, like MiniMalloc's larger benchmark instances
    /// (sizes 32–112 KiB, lifetimes 32–96 Ki steps).
    pub const UNIFORM: CutProfile = CutProfile {
        size: (32 << 10, 112 << 10),
        life: (32 << 10, 96 << 10),
        merge: 40,
        quantum: 1 << 10,
        drop: 5,
    };
}

fn log_uniform(r: &mut Rng, (lo, hi): (u64, u64), quantum: u64) -> u64 {
    let (a, b) = ((lo.max(1) as f64).ln(), (hi.max(lo).max(1) as f64).ln());
    let x = (a + (b - a) * (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64).exp();
    ((x as u64) / quantum).max(1) * quantum
}

/// A full `height` × `steps` rectangle cut into pieces along time: at each
/// step where live pieces end, their room (merged with neighbours ended
/// early, see [`CutProfile::merge`]) is re-cut into new pieces of random
/// sizes and lifetimes, and every piece still live at `steps` ends there.
/// Every step is full (before [`CutProfile::drop`]), so the lower bound is
/// `height` and a layout at the bound exists (the construction's own
/// offsets, returned second). Buffers come out in random order, alignment 1.
pub fn cut_arena(seed: u64, height: u64, steps: u32, profile: CutProfile) -> (Problem, Vec<u64>) {
    let mut r = Rng::new(seed);
    let q = profile.quantum.max(1);
    let steps = u64::from(steps);
    // Live pieces in offset order: (offset, size, start, planned end).
    let mut live: Vec<(u64, u64, u64, u64)> = Vec::new();
    let mut done: Vec<(u64, u64, u64, u64)> = Vec::new();
    let recut = |r: &mut Rng, live: &mut Vec<(u64, u64, u64, u64)>, lo: u64, hi: u64, at: u64| {
        let mut o = lo;
        while o < hi {
            let mut s = log_uniform(r, profile.size, q).min(hi - o);
            if hi - o - s < profile.size.0 {
                s = hi - o; // Never leave a sliver smaller than the smallest piece.
            }
            let end = (at + log_uniform(r, profile.life, q)).min(steps);
            live.push((o, s, at, end));
            o += s;
        }
    };
    recut(&mut r, &mut live, 0, height, 0);
    live.sort_unstable();
    while let Some(t) = live.iter().map(|p| p.3).min() {
        if t >= steps {
            break;
        }
        // Runs of adjacent pieces to end at `t`: those planned to, widened
        // now and then by a neighbour cut short.
        let mut ending: Vec<bool> = live.iter().map(|p| p.3 == t).collect();
        for k in 0..live.len() {
            if ending[k] {
                for n in [k.wrapping_sub(1), k + 1] {
                    if n < live.len() && !ending[n] && live[n].2 < t && r.chance(profile.merge) {
                        ending[n] = true;
                    }
                }
            }
        }
        let mut next = Vec::with_capacity(live.len());
        let mut k = 0;
        while k < live.len() {
            if !ending[k] {
                next.push(live[k]);
                k += 1;
                continue;
            }
            let lo = live[k].0;
            let mut hi = lo;
            while k < live.len() && ending[k] {
                let (o, s, a, _) = live[k];
                done.push((o, s, a, t));
                hi = o + s;
                k += 1;
            }
            recut(&mut r, &mut next, lo, hi, t);
        }
        next.sort_unstable();
        live = next;
    }
    done.extend(live.iter().map(|&(o, s, a, _)| (o, s, a, steps)));
    if profile.drop > 0 {
        let full = r.range(0, steps);
        done.retain(|&(_, _, a, e)| (a <= full && full < e) || !r.chance(profile.drop));
    }
    for i in (1..done.len()).rev() {
        let j = r.range(0, i as u64 + 1) as usize;
        done.swap(i, j);
    }
    let offsets = done.iter().map(|p| p.0).collect();
    let buffers = done
        .iter()
        .map(|&(_, s, a, e)| Buffer::new(s, a as u32, e as u32, 1))
        .collect();
    (Problem::new(buffers, ConflictModel::Lifetimes), offsets)
}

/// Writes a problem in the interval trace format [`parse_intervals`] reads,
/// with `comment` (`#` lines) after the header.
pub fn write_intervals(problem: &Problem, comment: &str) -> String {
    let mut out = String::from("id,lower,upper,size\n");
    for line in comment.lines() {
        out.push_str(&format!("# {line}\n"));
    }
    for (i, b) in problem.buffers.iter().enumerate() {
        out.push_str(&format!(
            "{i},{},{},{}\n",
            b.lifetime.start, b.lifetime.end, b.size
        ));
    }
    out
}

/// The time sweep alone (see `strategy/sweep.rs`): a layout of `problem`
/// within `cap` bytes, or `None` (not found within `node_limit`
/// placements or by `deadline`: the sweep is incomplete where there is
/// slack, so `None` proves nothing); and the placements it tried. The
/// layout has not been checked.
pub fn sweep_pack(
    problem: &Problem,
    cap: u64,
    node_limit: u64,
    deadline: std::time::Instant,
) -> (Option<Vec<u64>>, u64) {
    let o = crate::strategy::sweep::pack(problem, cap, deadline, node_limit);
    (o.offsets, o.nodes)
}

/// [`sweep_pack`] with the candidates of the first `events` start times
/// tried in the order of the layout `hint` first (an experiment: how much
/// of the sweep's cost is the order at those events).
pub fn sweep_pack_hinted(
    problem: &Problem,
    cap: u64,
    node_limit: u64,
    deadline: std::time::Instant,
    hint: &[u64],
    events: usize,
) -> (Option<Vec<u64>>, u64) {
    let o = crate::strategy::sweep::pack_hinted(
        problem,
        cap,
        deadline,
        node_limit,
        Some((hint, events)),
    );
    (o.offsets, o.nodes)
}
