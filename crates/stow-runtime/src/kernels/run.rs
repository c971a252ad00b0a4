//! Running a prepared step over the arena: typed views of its operands
//! and the dispatch to the kernels. Nothing here allocates.

use super::cells::{self, typed, Src};
use super::float::Float;
use super::layout::Walk;
use super::{
    arith, contract, elementwise, gemm, linalg, movement, nn, pool, prepacked, quant, recurrent,
    Kernel, Loc, MatMul, Operand, Step,
};
use core::cell::Cell;
use core::sync::atomic::AtomicUsize;
use stow_bundle::DType;

/// Why a step failed while running.
#[derive(Debug)]
pub enum Failure {
    /// A tensor view did not fit the arena or its alignment (a bundle
    /// that passed setup cannot cause this).
    View(u32),
    /// An index out of range: a gather's, or a MaxPool index outside its
    /// plane.
    Index(i64),
}

/// Most memory pools a step can see (the bundle format's bound).
pub const MAX_POOLS: usize = stow_bundle::format::MAX_POOLS as usize;

/// The arena as shared cells, plus typed views of operands.
///
/// A bundle with several memory pools has one buffer per pool; kernels
/// see them as one address space in which pool `p` starts at its base
/// (`arena::pool_bases`), so an arena offset ([`Loc::Arena`]) names one
/// byte of one pool, and equal offsets mean the same bytes.
pub struct Views<'a> {
    /// `(base, bytes)` of each pool in base order; unused entries have
    /// base `usize::MAX` and no bytes.
    pools: [(usize, &'a [Cell<u8>]); MAX_POOLS],
    /// Where the shares of one step say how far they are, when a share may
    /// wait for share 0 ([`Views::with_progress`]).
    progress: Option<&'a AtomicUsize>,
}

impl<'a> Views<'a> {
    /// The views of a single arena (one pool at base 0).
    pub fn single(arena: &'a [Cell<u8>]) -> Views<'a> {
        let mut pools: [(usize, &'a [Cell<u8>]); MAX_POOLS] = [(usize::MAX, &[]); MAX_POOLS];
        pools[0] = (0, arena);
        Views {
            pools,
            progress: None,
        }
    }

    /// The views of several pools, `(base, bytes)` in increasing base
    /// order; pools beyond [`MAX_POOLS`] are not seen.
    pub fn pooled(list: impl IntoIterator<Item = (usize, &'a [Cell<u8>])>) -> Views<'a> {
        let mut pools: [(usize, &'a [Cell<u8>]); MAX_POOLS] = [(usize::MAX, &[]); MAX_POOLS];
        for (slot, pool) in pools.iter_mut().zip(list) {
            *slot = pool;
        }
        Views {
            pools,
            progress: None,
        }
    }

    /// These views with a counter, set to 0, that the shares of one step
    /// share: with it, a share other than 0 may wait for share 0 (a
    /// depthwise convolution whose smaller output lands on its own input,
    /// `depthwise_inplace`). Only for shares that run at the same time or
    /// in order from share 0: share 0 never waits.
    pub fn with_progress(mut self, progress: &'a AtomicUsize) -> Views<'a> {
        self.progress = Some(progress);
        self
    }

    /// The pool holding arena offset `off`, and `off` within it.
    pub fn locate(&self, off: usize) -> (&'a [Cell<u8>], usize) {
        self.pools
            .iter()
            .rev()
            .find(|(base, _)| *base <= off)
            .map_or((&[], off), |&(base, bytes)| (bytes, off - base))
    }

    /// `len` elements of `T` at arena offset `off`, if they fit its pool.
    pub fn at<T: bytemuck::Pod>(&self, off: usize, len: usize) -> Option<&'a [Cell<T>]> {
        let (bytes, local) = self.locate(off);
        typed(bytes, local, len)
    }

    /// A read-only view of `o` as `T`.
    pub fn src<T: bytemuck::Pod>(&self, o: &Operand<'a>) -> Result<Src<'a, T>, Failure> {
        match o.loc {
            Loc::Weight(bytes) => bytemuck::try_cast_slice(bytes)
                .ok()
                .filter(|s: &&[T]| s.len() == o.len)
                .map(Src::Weight)
                .ok_or(Failure::View(o.id)),
            Loc::Arena(off) => self
                .at(off, o.len)
                .map(Src::Arena)
                .ok_or(Failure::View(o.id)),
        }
    }

    /// A writable view of arena operand `o` as `T`.
    pub fn dst<T: bytemuck::Pod>(&self, o: &Operand<'_>) -> Result<&'a [Cell<T>], Failure> {
        match o.loc {
            Loc::Arena(off) => self.at(off, o.len).ok_or(Failure::View(o.id)),
            Loc::Weight(_) => Err(Failure::View(o.id)),
        }
    }
}

macro_rules! by_size {
    ($size:expr, |$t:ident| $body:expr) => {
        match $size {
            1 => {
                type $t = u8;
                $body
            }
            2 => {
                type $t = u16;
                $body
            }
            4 => {
                type $t = u32;
                $body
            }
            _ => {
                type $t = u64;
                $body
            }
        }
    };
}

/// Runs `$body` with `$t` the float type of `$dtype`: f64, else f32
/// (setup admits nothing else for the kernels dispatched through it).
macro_rules! by_float {
    ($dtype:expr, |$t:ident| $body:expr) => {
        if $dtype == DType::F64 {
            type $t = f64;
            $body
        } else {
            type $t = f32;
            $body
        }
    };
}

/// Elements an element-wise step must write before it is split between
/// threads: below this, waking the workers costs about what they save.
pub const SPLIT_ELEMENTS: usize = 1 << 15;

/// Multiply-adds below which a float product or convolution runs on one
/// thread.
pub const SPLIT_MACS: usize = 1 << 17;

/// True for steps that split their work between threads ([`run_part`]);
/// the others run whole on one thread.
pub fn splits(step: &Step<'_>) -> bool {
    let k = &step.kernel;
    match k {
        Kernel::DepthwiseInPlace(s, _) => super::depthwise_inplace::parallel(s),
        // Waking the workers costs more than a few microseconds of
        // arithmetic saves: small products (the bands of a patched stage,
        // a model's last layers) run on one thread.
        Kernel::Conv(s, ..) => step.outputs[0].len.saturating_mul(s.k()) >= SPLIT_MACS,
        Kernel::MatMul(m) => step.outputs[0].len.saturating_mul(m.mnk[2]) >= SPLIT_MACS,
        Kernel::QConv(_) | Kernel::QProduct(_) => true,
        Kernel::Unary(_)
        | Kernel::NanTo(_)
        | Kernel::Binary(..)
        | Kernel::Clamp(_)
        | Kernel::LeakyRelu(_)
        | Kernel::PowConst(_)
        | Kernel::QBinary(_) => {
            step.outputs[0].len >= SPLIT_ELEMENTS && overlaps_only_in_place(step, true)
        }
        // Shares quantize runs of elements; each reads the whole input.
        Kernel::DynamicQuantizeU8 => {
            step.outputs[0].len >= SPLIT_ELEMENTS && overlaps_only_in_place(step, false)
        }
        // Each lane (row) along the axis is read and written by one share.
        Kernel::Softmax(..) | Kernel::RmsNorm(..) | Kernel::LayerNorm(..) => {
            step.outputs[0].len >= SPLIT_ELEMENTS && overlaps_only_in_place(step, true)
        }
        // A copy that fills its output first (a pad) stays whole: the fill
        // is not shared out.
        Kernel::Copy { fill: None, .. } => {
            step.outputs[0].len >= SPLIT_ELEMENTS && overlaps_only_in_place(step, false)
        }
        Kernel::Pool(_, w) => {
            let taps: usize = w.kernel.iter().product();
            w.planes > 1
                && step.outputs[0].len.saturating_mul(taps) >= SPLIT_ELEMENTS
                && overlaps_only_in_place(step, false)
        }
        _ => false,
    }
}

/// Elements of one plane of `o` (its dimensions after the second) where it
/// has more than two: [`super::layout::Share::plane`].
fn plane_of(o: &Operand<'_>) -> usize {
    if o.shape.len() > 2 {
        o.shape[2..].iter().product()
    } else {
        0
    }
}

/// True when no thread's share can read what another's writes: each arena
/// input is clear of every output's bytes or, with `in_place`, is exactly
/// the output's bytes with its elements (element `i` of the input feeds
/// element `i` of the output alone, and both are in the same share). An
/// input laid over an output at any other offset (the sequential kernel
/// allows it when the output starts first) keeps the step on one thread.
fn overlaps_only_in_place(step: &Step<'_>, in_place: bool) -> bool {
    let bytes = |o: &Operand<'_>| match o.loc {
        Loc::Arena(at) => Some((at, at + o.len * o.dtype.size_bytes() as usize)),
        Loc::Weight(_) => None,
    };
    step.inputs.iter().all(|i| {
        let Some((i0, i1)) = bytes(i) else {
            return true;
        };
        step.outputs.iter().all(|o| {
            let Some((o0, o1)) = bytes(o) else {
                return true;
            };
            let same = (i0, i1) == (o0, o1)
                && i.len == o.len
                && i.dtype.size_bytes() == o.dtype.size_bytes();
            i1 <= o0 || o1 <= i0 || i0 == i1 || o0 == o1 || (in_place && same)
        })
    })
}

/// Runs share `part` of `parts` of a step that [`splits`] (shares write
/// disjoint parts of the output and read nothing another share writes);
/// any other step runs whole as part 0.
pub fn run_part(
    step: &Step<'_>,
    v: &Views<'_>,
    scratch: &[Cell<f32>],
    part: usize,
    parts: usize,
) -> Result<(), Failure> {
    let (ins, outs) = (&step.inputs, &step.outputs);
    let (part, parts) = if splits(step) {
        (part, parts.max(1))
    } else if part != 0 {
        return Ok(());
    } else {
        (0, 1)
    };
    // A one-input element-wise step's share: the same run of its input
    // and of its output.
    let run = || super::layout::span(outs[0].len, part, parts);
    // A step along an axis: its share of the lanes.
    let lanes = |at: &nn::AroundAxis| super::layout::span_rows(at.lane_count(), part, parts);
    match &step.kernel {
        Kernel::Nothing => {}
        Kernel::Clamp(k) => {
            let out = &v.dst::<f32>(&outs[0])?[run()];
            crate::with_load!(v.src::<f32>(&ins[0])?.slice(run()), |x| {
                gemm::Finish::Clamp(*k).map_row(out, x)
            });
        }
        Kernel::Unary(f) if ins[0].dtype == DType::F16 => {
            elementwise::unary_f16(*f, v.src(&ins[0])?.slice(run()), &v.dst(&outs[0])?[run()])
        }
        Kernel::Unary(f) if ins[0].dtype == DType::F64 => {
            elementwise::unary::<f64>(*f, v.src(&ins[0])?.slice(run()), &v.dst(&outs[0])?[run()])
        }
        Kernel::Unary(f) => {
            elementwise::unary_f32(*f, v.src(&ins[0])?.slice(run()), &v.dst(&outs[0])?[run()])
        }
        Kernel::NanTo(c) => {
            elementwise::nan_to(*c, v.src(&ins[0])?.slice(run()), &v.dst(&outs[0])?[run()])
        }
        Kernel::Binary(b, walk) => {
            let plane = plane_of(&outs[0]);
            let walk = super::layout::Share {
                walk,
                part,
                parts,
                plane,
            };
            arith::binary_run(v, *b, walk, &ins[0], &ins[1], &outs[0])?
        }
        Kernel::Select(walk) => {
            let cond = v.src::<u8>(&ins[0])?;
            by_size!(outs[0].dtype.size_bytes(), |T| elementwise::select::<T>(
                walk,
                cond,
                v.src(&ins[1])?,
                v.src(&ins[2])?,
                v.dst(&outs[0])?
            ))
        }
        Kernel::IsInf(positive, negative) => {
            let (p, n) = (*positive, *negative);
            arith::float_test(v, &ins[0], &outs[0], |x| {
                (p && x == f64::INFINITY) || (n && x == f64::NEG_INFINITY)
            })?
        }
        Kernel::Not => elementwise::convert(v.src::<u8>(&ins[0])?, v.dst::<u8>(&outs[0])?, |x| {
            (x == 0) as u8
        }),
        Kernel::PowConst(e) => {
            let e = *e;
            crate::with_load!(v.src::<f32>(&ins[0])?.slice(run()), |x| cells::map_row(
                &v.dst(&outs[0])?[run()],
                x,
                |x: f32| Float::powf(x, e)
            ))
        }
        Kernel::Cast => arith::cast(v, &ins[0], &outs[0])?,
        Kernel::Contraction(c) => contract::contract(v, c, ins, &outs[0])?,
        Kernel::BitNot => arith::bit_not(v, &ins[0], &outs[0])?,
        Kernel::DynamicQuantizeU8 => quant::dynamic_u8(v, &ins[0], outs, run())?,
        Kernel::Quantize(at) => quant::quantize(v, *at, ins, &outs[0])?,
        Kernel::Dequantize(at) => quant::dequantize(v, *at, ins, &outs[0])?,
        Kernel::IsNan => arith::float_test(v, &ins[0], &outs[0], f64::is_nan)?,
        Kernel::Copy { walk, base, fill } => {
            let o = &outs[0];
            if let Some(value) = fill {
                fill_value(v, o, *value)?;
            }
            let share = super::layout::Share {
                walk,
                part,
                parts,
                plane: 0,
            };
            by_size!(o.dtype.size_bytes(), |T| crate::with_load!(
                v.src::<T>(&ins[0])?,
                |s| movement::copy_share(share, *base, s, v.dst::<T>(o)?)
            ));
        }
        Kernel::Concat(parts) => {
            let o = &outs[0];
            for (i, walk, base) in parts {
                copy_into(v, walk, *base, &ins[*i], o)?
            }
        }
        Kernel::Gather { outer, axis, inner } => {
            let idx = v.src::<i64>(&ins[1])?;
            by_size!(outs[0].dtype.size_bytes(), |T| movement::gather::<T>(
                *outer,
                *axis,
                *inner,
                v.src(&ins[0])?,
                idx,
                v.dst(&outs[0])?
            ))
            .map_err(Failure::Index)?
        }
        Kernel::Softmax(at, log) if ins[0].dtype == DType::F32 => crate::with_load!(
            v.src::<f32>(&ins[0])?,
            |x| nn::softmax_f32(*at, *log, x, v.dst(&outs[0])?, lanes(at))
        ),
        Kernel::Softmax(at, log) => {
            by_float!(ins[0].dtype, |F| crate::with_load!(
                v.src::<F>(&ins[0])?,
                |x| nn::softmax(*at, *log, x, v.dst(&outs[0])?, lanes(at))
            ))
        }
        Kernel::RmsNorm(at, eps) => {
            by_float!(ins[0].dtype, |F| crate::with_load!(
                v.src::<F>(&ins[0])?,
                |x| nn::rms_norm(*at, *eps, x, v.dst(&outs[0])?, lanes(at))
            ))
        }
        Kernel::LayerNorm(n, eps) if ins[0].dtype == DType::F32 => {
            let scale = ins.get(1).map(|p| v.src::<f32>(p)).transpose()?;
            let bias = ins.get(2).map(|p| v.src::<f32>(p)).transpose()?;
            crate::with_load!(v.src::<f32>(&ins[0])?, |x| nn::layer_norm_f32(
                *n,
                *eps,
                x,
                scale,
                bias,
                v.dst(&outs[0])?,
                (part, parts)
            ))
        }
        Kernel::LayerNorm(n, eps) => {
            by_float!(ins[0].dtype, |F| {
                let scale = ins.get(1).map(|p| v.src::<F>(p)).transpose()?;
                let bias = ins.get(2).map(|p| v.src::<F>(p)).transpose()?;
                crate::with_load!(v.src::<F>(&ins[0])?, |x| nn::layer_norm(
                    *n,
                    *eps,
                    x,
                    scale,
                    bias,
                    v.dst(&outs[0])?,
                    (part, parts)
                ))
            })
        }
        Kernel::Reduce(r, walk, count) => {
            by_float!(ins[0].dtype, |F| crate::with_load!(
                v.src::<F>(&ins[0])?,
                |x| nn::reduce(*r, walk, *count, x, v.dst(&outs[0])?)
            ))
        }
        Kernel::Pool(pool::Pool::Max, w) => {
            let planes = pool_planes(w, part, parts);
            let indices = match outs.get(1) {
                Some(o) => Some(v.dst::<i64>(o)?),
                None => None,
            };
            let (x, o) = (&ins[0], &outs[0]);
            macro_rules! max_pool {
                ($t:ty) => {
                    crate::with_load!(v.src::<$t>(x)?, |x| pool::max_pool(
                        w,
                        planes.clone(),
                        x,
                        v.dst::<$t>(o)?,
                        indices
                    ))
                };
            }
            match x.dtype {
                DType::F32 => max_pool!(f32),
                DType::F64 => max_pool!(f64),
                // Byte pools (int8 models') compiled for the widest
                // vectors: baseline x86-64 has no signed byte maximum.
                DType::I8 => super::quant::widest(|| -> Result<(), Failure> {
                    max_pool!(i8);
                    Ok(())
                })?,
                DType::I16 => max_pool!(i16),
                DType::I32 => max_pool!(i32),
                DType::I64 => max_pool!(i64),
                DType::U8 => super::quant::widest(|| -> Result<(), Failure> {
                    max_pool!(u8);
                    Ok(())
                })?,
                DType::U16 => max_pool!(u16),
                DType::U32 => max_pool!(u32),
                DType::U64 => max_pool!(u64),
                // Refused at setup (`pool::max_pools`).
                DType::F16 | DType::Bool => return Err(Failure::View(x.id)),
            }
        }
        Kernel::Pool(kind, w) => {
            let planes = pool_planes(w, part, parts);
            crate::with_load!(v.src(&ins[0])?, |x| pool::pool(
                *kind,
                w,
                planes,
                x,
                v.dst(&outs[0])?
            ))
        }
        Kernel::MaxPoolIndices {
            spatial,
            per_plane,
            column_major,
        } => pool::max_pool_indices(
            spatial,
            *per_plane,
            *column_major,
            v.src(&ins[0])?,
            v.dst(&outs[0])?,
        )
        .map_err(Failure::Index)?,
        Kernel::Conv(s, packed, finish, residual) => {
            // A merged residual is the last input, after the bias if any;
            // a step marked so without one, or a depthwise one (which
            // does not add it), fails rather than run without it.
            let (ins, residual) = match (residual, ins.split_last()) {
                (false, _) => (&ins[..], None),
                (true, Some((r, rest))) if rest.len() >= 2 && !s.depthwise() => {
                    (rest, Some(residual_view(v, r, &outs[0])?))
                }
                (true, _) => return Err(Failure::View(outs[0].id)),
            };
            let bias = match ins.get(2) {
                Some(b) => Some(v.src(b)?),
                None => None,
            };
            linalg::conv(
                s,
                packed.as_ref(),
                v.src(&ins[0])?,
                v.src(&ins[1])?,
                bias,
                v.dst(&outs[0])?,
                (*finish, residual),
                scratch,
                (part, parts),
            )
        }
        Kernel::DepthwiseInPlace(s, finish) => {
            let bias = match ins.get(2) {
                Some(b) => Some(v.src(b)?),
                None => None,
            };
            super::depthwise_inplace::run(
                s,
                v.src(&ins[0])?,
                v.src(&ins[1])?,
                bias,
                v.dst(&outs[0])?,
                *finish,
                scratch,
                (part, parts),
                v.progress,
            )
        }
        Kernel::Deconv(s) => {
            let bias = match ins.get(2) {
                Some(b) => Some(v.src(b)?),
                None => None,
            };
            linalg::deconv(s, v.src(&ins[0])?, v.src(&ins[1])?, bias, v.dst(&outs[0])?)
        }
        Kernel::LeakyRelu(alpha) => {
            let a = *alpha;
            crate::with_load!(v.src::<f32>(&ins[0])?.slice(run()), |x| cells::map_row(
                &v.dst(&outs[0])?[run()],
                x,
                |x: f32| if x < 0.0 { a * x } else { x }
            ))
        }
        Kernel::PadEdges { reflect, before } => {
            let o = &outs[0];
            by_size!(o.dtype.size_bytes(), |T| movement::pad_edges::<T>(
                *reflect,
                before,
                &ins[0].shape,
                &o.shape,
                v.src(&ins[0])?,
                v.dst(o)?
            ))
        }
        Kernel::Resize(axes) => nn::resize(
            &ins[0].shape,
            &outs[0].shape,
            axes,
            v.src(&ins[0])?,
            v.dst(&outs[0])?,
        ),
        Kernel::Tile(walk, bases) => {
            let o = &outs[0];
            for base in bases {
                copy_into(v, walk, *base, &ins[0], o)?
            }
        }
        Kernel::Trilu { upper, rows, cols } => {
            let k = v.src::<i64>(&ins[1])?.at(0);
            let (upper, rows, cols) = (*upper, *rows as i64, *cols as i64);
            let keep = move |i: usize| {
                let (row, col) = ((i as i64 / cols) % rows, i as i64 % cols);
                if upper {
                    col >= row + k
                } else {
                    col <= row + k
                }
            };
            by_size!(outs[0].dtype.size_bytes(), |T| {
                let (x, out) = (v.src::<T>(&ins[0])?, v.dst::<T>(&outs[0])?);
                for (i, c) in out.iter().enumerate() {
                    c.set(if keep(i) {
                        x.at(i)
                    } else {
                        bytemuck::Zeroable::zeroed()
                    });
                }
            })
        }
        Kernel::GatherElements {
            data_strides,
            shape,
            axis,
            size,
        } => {
            let idx = v.src::<i64>(&ins[1])?;
            by_size!(outs[0].dtype.size_bytes(), |T| {
                let (x, out) = (v.src::<T>(&ins[0])?, v.dst::<T>(&outs[0])?);
                movement::gather_elements(data_strides, shape, *axis, *size, x, idx, out)
                    .map_err(Failure::Index)?
            })
        }
        Kernel::ArgExtreme { max, last, at } => {
            let out = v.dst::<i64>(&outs[0])?;
            crate::with_load!(v.src::<f32>(&ins[0])?, |x| nn::arg_extreme(
                *max, *last, *at, x, out
            ))
        }
        Kernel::LstmEpilogue(hidden) => {
            crate::with_load!(v.src(&ins[0])?, |pre| crate::with_load!(
                v.src(&ins[1])?,
                |c| recurrent::lstm_epilogue(*hidden, pre, c, v.dst(&outs[0])?, v.dst(&outs[1])?)
            ))
        }
        Kernel::GruEpilogue(hidden) => {
            crate::with_load!(v.src(&ins[0])?, |xh| crate::with_load!(
                v.src(&ins[1])?,
                |rh| crate::with_load!(v.src(&ins[2])?, |h| recurrent::gru_epilogue(
                    *hidden,
                    xh,
                    rh,
                    h,
                    v.dst(&outs[0])?
                ))
            ))
        }
        Kernel::GridSample(g) => crate::with_load!(v.src(&ins[0])?, |x| g.run(
            x,
            v.src(&ins[1])?,
            v.dst(&outs[0])?
        )),
        Kernel::Lrn(l) => crate::with_load!(v.src(&ins[0])?, |x| l.run(x, v.dst(&outs[0])?)),
        Kernel::Fourier(f) => match outs[0].dtype {
            DType::F16 => f.run::<half::f16>(v.src(&ins[0])?, v.dst(&outs[0])?),
            DType::F64 => f.run::<f64>(v.src(&ins[0])?, v.dst(&outs[0])?),
            _ => f.run::<f32>(v.src(&ins[0])?, v.dst(&outs[0])?),
        },
        Kernel::OneHot(k) => k.run(v, ins, outs)?,
        Kernel::ScatterElements(k) => k.run(v, ins, outs)?,
        Kernel::ScatterNd(k) => k.run(v, ins, outs)?,
        Kernel::GatherNd(k) => k.run(v, ins, outs)?,
        Kernel::QProduct(k) => k.run(v, ins, &outs[0], scratch, (part, parts))?,
        Kernel::QConv(k) => k.run(v, ins, &outs[0], scratch, (part, parts))?,
        Kernel::QBinary(k) => k.run(v, ins, &outs[0], (part, parts, plane_of(&outs[0])))?,
        Kernel::QGlobalPool(k) => k.run(v, ins, &outs[0])?,
        Kernel::QLookup => super::qpointwise::lookup(v, ins, &outs[0])?,
        Kernel::MatMul(mm) => {
            let residual = match (mm.residual, ins.get(2)) {
                (false, _) => None,
                (true, Some(r)) => Some(residual_view(v, r, &outs[0])?),
                (true, None) => return Err(Failure::View(outs[0].id)),
            };
            matmul(
                mm,
                (v.src(&ins[0])?, v.src(&ins[1])?),
                (v.dst(&outs[0])?, residual),
                scratch,
                part,
                parts,
            )
        }
    }
    Ok(())
}

/// The residual a product adds, which must be laid out as its output
/// `out` (setup merges only such `Add`s; a bundle that breaks this fails
/// here rather than read past or short of it).
fn residual_view<'a>(
    v: &Views<'a>,
    residual: &Operand<'_>,
    out: &Operand<'_>,
) -> Result<&'a [Cell<f32>], Failure> {
    if residual.len != out.len {
        return Err(Failure::View(residual.id));
    }
    v.dst::<f32>(residual)
}

/// Planes of a pooling step that share `part` of `parts` computes.
fn pool_planes(w: &pool::Window, part: usize, parts: usize) -> core::ops::Range<usize> {
    let per = w.planes.div_ceil(parts);
    (part * per).min(w.planes)..((part + 1) * per).min(w.planes)
}

/// A strided copy from `src` into `o`, moving elements as raw bits.
fn copy_into(
    v: &Views<'_>,
    walk: &Walk<2>,
    base: [usize; 2],
    src: &Operand<'_>,
    o: &Operand<'_>,
) -> Result<(), Failure> {
    by_size!(o.dtype.size_bytes(), |T| crate::with_load!(
        v.src::<T>(src)?,
        |s| movement::copy(walk, base, s, v.dst::<T>(o)?)
    ));
    Ok(())
}

fn fill_value(v: &Views<'_>, o: &Operand<'_>, value: f64) -> Result<(), Failure> {
    match o.dtype {
        DType::F32 => v.dst::<f32>(o)?.iter().for_each(|c| c.set(value as f32)),
        DType::F64 => v.dst::<f64>(o)?.iter().for_each(|c| c.set(value)),
        DType::I64 => v.dst::<i64>(o)?.iter().for_each(|c| c.set(value as i64)),
        DType::I32 => v.dst::<i32>(o)?.iter().for_each(|c| c.set(value as i32)),
        DType::I16 => v.dst::<i16>(o)?.iter().for_each(|c| c.set(value as i16)),
        DType::I8 => v.dst::<i8>(o)?.iter().for_each(|c| c.set(value as i8)),
        DType::U64 => v.dst::<u64>(o)?.iter().for_each(|c| c.set(value as u64)),
        DType::U32 => v.dst::<u32>(o)?.iter().for_each(|c| c.set(value as u32)),
        DType::U16 => v.dst::<u16>(o)?.iter().for_each(|c| c.set(value as u16)),
        DType::U8 => v.dst::<u8>(o)?.iter().for_each(|c| c.set(value as u8)),
        DType::Bool => v
            .dst::<u8>(o)?
            .iter()
            .for_each(|c| c.set((value != 0.0) as u8)),
        // The recorded value is an f16 read as f32: exact.
        DType::F16 => v
            .dst::<half::f16>(o)?
            .iter()
            .for_each(|c| c.set(half::f16::from_f64(value))),
    }
    Ok(())
}

fn matmul(
    mm: &MatMul,
    (a, b): (Src<'_, f32>, Src<'_, f32>),
    (c, residual): (&[Cell<f32>], Option<&[Cell<f32>]>),
    scratch: &[Cell<f32>],
    part: usize,
    parts: usize,
) {
    let (a, b) = if mm.swapped { (b, a) } else { (a, b) };
    let [m, n, k] = mm.mnk;
    // The packed product stores its first depth block over C, so C needs
    // no zeros first, unless batch positions that walk a k axis
    // accumulate into the same C (or the one-row path, which adds).
    let store = k > 0 && m > 1 && mm.writes_apart();
    // A packed left weight may split by rows ([`prepacked::left_shares`]);
    // everything else here (the zero fill, the one-row path) by columns.
    let (lines, cols) = match &mm.packed {
        Some(_) if mm.swapped && store => prepacked::left_shares(m, n, (part, parts), true),
        _ => (0..m, gemm::share(n, part, parts)),
    };
    let (len, [sc, sa, sb]) = mm.batch.inner();
    let start = if store {
        gemm::Start::Store(None, 0)
    } else {
        gemm::Start::Add
    };
    mm.batch.rows([0, 0, 0], |[oc, _, _]| {
        if store {
            return;
        }
        for j in 0..len {
            let base = oc + j * sc;
            // One fill per contiguous row or column rather than a strided
            // store per element (that was a tenth of mobilenet_v2's time).
            if mm.c[1] == 1 {
                for i in 0..m {
                    let row = base + i * mm.c[0];
                    c[row + cols.start..row + cols.end]
                        .iter()
                        .for_each(|x| x.set(0.0));
                }
            } else if mm.c[0] == 1 {
                for col in cols.clone() {
                    let column = base + col * mm.c[1];
                    c[column..column + m].iter().for_each(|x| x.set(0.0));
                }
            } else {
                for i in 0..m {
                    for col in cols.clone() {
                        c[base + i * mm.c[0] + col * mm.c[1]].set(0.0);
                    }
                }
            }
        }
    });
    mm.batch.rows([0, 0, 0], |[oc, oa, ob]| {
        for j in 0..len {
            let dst = gemm::Dst {
                data: c,
                offset: oc + j * sc,
                rs: mm.c[0],
                cs: mm.c[1],
                finish: mm.finish,
                start,
                residual,
            };
            if m == 1 {
                crate::with_load!(a, |a| crate::with_load!(b, |b| super::gemv::gemv(
                    k,
                    (a, oa + j * sa, mm.a[1]),
                    (b, ob + j * sb, mm.b),
                    &dst,
                    cols.clone()
                )));
                if let Some(r) = residual {
                    for col in cols.clone() {
                        let at = dst.offset + col * dst.cs;
                        c[at].set(mm.finish.value(c[at].get() + r[at].get()));
                    }
                } else if mm.finish != gemm::Finish::Keep {
                    for col in cols.clone() {
                        let cell = &c[dst.offset + col * dst.cs];
                        cell.set(mm.finish.value(cell.get()));
                    }
                }
                continue;
            }
            crate::with_load!(a, |a| crate::with_load!(b, |b| {
                let pa = gemm::Strided {
                    data: a,
                    offset: oa + j * sa,
                    rs: mm.a[0],
                    cs: mm.a[1],
                    rows: m,
                    cols: k,
                };
                let pb = gemm::Strided {
                    data: b,
                    offset: ob + j * sb,
                    rs: mm.b[0],
                    cs: mm.b[1],
                    rows: k,
                    cols: n,
                };
                // A weight shared by every batch position (setup checked
                // its batch strides are zero) is read from its panels: as
                // the left operand of a swapped product, else the right.
                match &mm.packed {
                    Some(p) if mm.swapped => {
                        let shares = (lines.clone(), cols.clone());
                        prepacked::gemm_left(p, 0, a, n, &pb, &dst, scratch, shares)
                    }
                    Some(p) => prepacked::gemm_right(p, m, &pa, b, &dst, scratch, cols.clone()),
                    None => gemm::gemm_cols(m, n, k, &pa, &pb, &dst, scratch, cols.clone()),
                }
            }))
        }
    });
}
