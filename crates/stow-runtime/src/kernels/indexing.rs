//! Reads and writes at positions given by index tensors: ONNX OneHot
//! (tract's `Onehot`), ScatterElements, ScatterND and GatherND.
//!
//! Shapes are checked at setup; the indices are data, so every one is
//! checked while running, and one outside its axis stops the step with
//! [`Failure::Index`] before anything is read or written through it.
//! Elements are moved as raw bits of their size; only the scatter
//! reductions look at values.

use super::cells::Src;
use super::layout::{strides_of, MAX_RANK};
use super::prepare::{arity, attr_int, attr_text, want};
use super::{Failure, Kernel, Loc, Operand, Views};
use alloc::{format, string::String, vec::Vec};
use bytemuck::Pod;
use core::cell::Cell;
use stow_bundle::{AttrValue, DType, Op};

/// How a scatter combines an update with the value already there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduction {
    /// The update replaces it (the last of duplicate indices wins).
    None,
    /// Sum.
    Add,
    /// Product.
    Mul,
    /// Larger.
    Max,
    /// Smaller.
    Min,
}

/// ONNX OneHot: `out[o, d, i] = idx[o, i] == d ? on : off`.
#[derive(Clone, Debug)]
pub struct OneHot {
    outer: usize,
    depth: usize,
    inner: usize,
    /// Raw bits of the values, little-endian in the low bytes.
    off: u64,
    on: u64,
}

/// ONNX ScatterElements: `out[p with axis := idx[p]] ∘= updates[p]`.
#[derive(Clone, Debug)]
pub struct ScatterElements {
    reduction: Reduction,
    data_strides: Vec<usize>,
    /// Shape of the indices and updates.
    shape: Vec<usize>,
    axis: usize,
    size: usize,
}

/// ONNX ScatterND: each index tuple names a slice of the output that the
/// matching slice of the updates lands on.
#[derive(Clone, Debug)]
pub struct ScatterNd {
    reduction: Reduction,
    /// Sizes and strides of the axes a tuple indexes.
    dims: Vec<usize>,
    strides: Vec<usize>,
    /// Elements of one slice.
    slice: usize,
    /// Tuples.
    count: usize,
}

/// ONNX GatherND: each index tuple names a slice of its batch of the data,
/// copied to the output in tuple order.
#[derive(Clone, Debug)]
pub struct GatherNd {
    batches: usize,
    /// Elements of one batch of the data.
    batch_len: usize,
    /// Tuples per batch.
    per_batch: usize,
    /// Sizes and strides (within a batch) of the axes a tuple indexes.
    dims: Vec<usize>,
    strides: Vec<usize>,
    slice: usize,
}

fn int_type(d: DType) -> bool {
    matches!(
        d,
        DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
    )
}

/// Index tensors of any integer type, read as i64.
#[derive(Clone, Copy)]
enum Indices<'a> {
    I8(Src<'a, i8>),
    I16(Src<'a, i16>),
    I32(Src<'a, i32>),
    I64(Src<'a, i64>),
    U8(Src<'a, u8>),
    U16(Src<'a, u16>),
    U32(Src<'a, u32>),
    U64(Src<'a, u64>),
}

impl<'a> Indices<'a> {
    fn of(v: &Views<'a>, o: &Operand<'a>) -> Result<Self, Failure> {
        Ok(match o.dtype {
            DType::I8 => Indices::I8(v.src(o)?),
            DType::I16 => Indices::I16(v.src(o)?),
            DType::I32 => Indices::I32(v.src(o)?),
            DType::I64 => Indices::I64(v.src(o)?),
            DType::U8 => Indices::U8(v.src(o)?),
            DType::U16 => Indices::U16(v.src(o)?),
            DType::U32 => Indices::U32(v.src(o)?),
            DType::U64 => Indices::U64(v.src(o)?),
            _ => return Err(Failure::View(o.id)),
        })
    }

    #[inline]
    fn at(self, i: usize) -> i64 {
        match self {
            Indices::I8(s) => s.at(i).into(),
            Indices::I16(s) => s.at(i).into(),
            Indices::I32(s) => s.at(i).into(),
            Indices::I64(s) => s.at(i),
            Indices::U8(s) => s.at(i).into(),
            Indices::U16(s) => s.at(i).into(),
            Indices::U32(s) => s.at(i).into(),
            // Past i64::MAX is past every axis anyway.
            Indices::U64(s) => i64::try_from(s.at(i)).unwrap_or(i64::MAX),
        }
    }
}

/// Position of `raw` on an axis of `size` (negative counts from the end).
#[inline]
fn place(raw: i64, size: usize) -> Result<usize, Failure> {
    let at = if raw < 0 {
        raw.checked_add(size as i64)
    } else {
        Some(raw)
    };
    match at {
        Some(i) if i >= 0 && (i as u64) < size as u64 => Ok(i as usize),
        _ => Err(Failure::Index(raw)),
    }
}

/// Runs `$body` with `$t` an unsigned type of the element size.
macro_rules! sized {
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

/// Arithmetic for the scatter reductions, as ONNX's reference does it:
/// integers wrap.
trait Num: Pod + PartialOrd {
    fn plus(self, u: Self) -> Self;
    fn times(self, u: Self) -> Self;
    fn nan(self) -> bool;
}

macro_rules! num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn plus(self, u: Self) -> Self { self.wrapping_add(u) }
            fn times(self, u: Self) -> Self { self.wrapping_mul(u) }
            fn nan(self) -> bool { false }
        }
    )*};
}
num_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn plus(self, u: Self) -> Self { self + u }
            fn times(self, u: Self) -> Self { self * u }
            fn nan(self) -> bool { self.is_nan() }
        }
    )*};
}
num_float!(f32, f64);

/// `d ∘ u` for a reduction other than `None`. ScatterND's reference takes
/// max/min with NumPy's `maximum`/`minimum` (a NaN wins); ScatterElements'
/// with Python's `max`/`min` (the update replaces only a value it beats).
#[inline]
fn reduce<T: Num>(r: Reduction, nan_wins: bool, d: T, u: T) -> T {
    let nan = nan_wins && (d.nan() || u.nan());
    match r {
        Reduction::Add => d.plus(u),
        Reduction::Mul => d.times(u),
        Reduction::Max | Reduction::Min if nan => {
            if d.nan() {
                d
            } else {
                u
            }
        }
        Reduction::Max if u > d => u,
        Reduction::Min if u < d => u,
        Reduction::None => u,
        _ => d,
    }
}

/// Runs `$body` with `$t` the element type and `$f` the combining function
/// of reduction `$r`: moved as raw bits without a reduction, as numbers
/// with one.
macro_rules! combining {
    (@as $t:ident, $f:ident, $ty:ty, $r:expr, $n:expr, $body:expr) => {{
        type $t = $ty;
        let $f = move |d: $t, u: $t| reduce($r, $n, d, u);
        $body
    }};
    ($dtype:expr, $r:expr, $nan_wins:expr, |$t:ident, $f:ident| $body:expr) => {{
        let (r, n) = ($r, $nan_wins);
        match $dtype {
            d if r == Reduction::None => sized!(d.size_bytes(), |$t| {
                let $f = |_: $t, u: $t| u;
                $body
            }),
            DType::F32 => combining!(@as $t, $f, f32, r, n, $body),
            DType::F64 => combining!(@as $t, $f, f64, r, n, $body),
            DType::I8 => combining!(@as $t, $f, i8, r, n, $body),
            DType::I16 => combining!(@as $t, $f, i16, r, n, $body),
            DType::I32 => combining!(@as $t, $f, i32, r, n, $body),
            DType::I64 => combining!(@as $t, $f, i64, r, n, $body),
            DType::U8 => combining!(@as $t, $f, u8, r, n, $body),
            DType::U16 => combining!(@as $t, $f, u16, r, n, $body),
            DType::U32 => combining!(@as $t, $f, u32, r, n, $body),
            // Setup admits no other type with a reduction.
            _ => combining!(@as $t, $f, u64, r, n, $body),
        }
    }};
}

fn reduces(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64) || int_type(d)
}

fn reduction(op: &Op, dtype: DType) -> Result<Reduction, String> {
    let r = match attr_text(op, "reduction")? {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        other => return Err(format!("scatter reduction `{other}`")),
    };
    want(r == Reduction::None || reduces(dtype), || {
        format!(
            "scatter with reduction {r:?} on {} (handled: f32, f64, integers)",
            dtype.name()
        )
    })?;
    Ok(r)
}

/// Byte range of an arena operand.
fn bytes(o: &Operand<'_>) -> Option<(usize, usize)> {
    match o.loc {
        Loc::Arena(at) => Some((at, at + o.len * o.dtype.size_bytes() as usize)),
        Loc::Weight(_) => None,
    }
}

/// The kernels write their output while still reading their inputs, so
/// an output sharing bytes with an input would change what is read. The
/// one exception is a scatter's data at exactly the output's place: each
/// element is then copied onto itself.
fn apart(ins: &[Operand<'_>], out: &Operand<'_>, same_ok: Option<usize>) -> Result<(), String> {
    let o = bytes(out).ok_or("the output is not in the arena")?;
    for (i, x) in ins.iter().enumerate() {
        if let Some(b) = bytes(x) {
            let overlap = b.0 < o.1 && o.0 < b.1 && b.0 != b.1 && o.0 != o.1;
            want(!overlap || (same_ok == Some(i) && b == o), || {
                format!("input {i} shares bytes with the output")
            })?;
        }
    }
    Ok(())
}

fn usize_attr(op: &Op, name: &str) -> Result<usize, String> {
    let v = attr_int(op, name)?;
    usize::try_from(v).map_err(|_| format!("attribute `{name}` holds {v}"))
}

/// Prepares one of this module's operators.
pub(super) fn prepare(
    op: &Op,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    match op.op_type.as_str() {
        "Onehot" => one_hot(op, ins, outs),
        "ScatterElements" => scatter_elements(op, ins, outs),
        "ScatterNd" => scatter_nd(op, ins, outs),
        _ => gather_nd(op, ins, outs),
    }
}

fn one_hot(op: &Op, ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<(Kernel, usize), String> {
    arity(ins, outs, 1)?;
    let (idx, out) = (&ins[0], &outs[0]);
    want(int_type(idx.dtype), || {
        format!(
            "OneHot with {} indices (handled: integers)",
            idx.dtype.name()
        )
    })?;
    let value_type = attr_text(op, "value_type")?;
    want(value_type == out.dtype.name(), || {
        format!(
            "OneHot values of type {value_type} for a {} output",
            out.dtype.name()
        )
    })?;
    let bits = |name: &str| match op.attributes.iter().find(|(n, _)| n == name) {
        Some((_, AttrValue::Int(b))) => Ok(*b as u64),
        _ => Err(format!("OneHot's `{name}` value is missing")),
    };
    let (off, on) = (bits("off")?, bits("on")?);
    let (axis, depth) = (usize_attr(op, "axis")?, usize_attr(op, "dim")?);
    let shape = &idx.shape;
    want(axis <= shape.len(), || format!("OneHot axis {axis}"))?;
    let mut expect = shape.clone();
    expect.insert(axis, depth);
    want(expect == out.shape, || {
        format!(
            "OneHot output {:?} for indices {shape:?} and depth {depth}",
            out.shape
        )
    })?;
    apart(ins, out, None)?;
    let k = OneHot {
        outer: shape[..axis].iter().product(),
        depth,
        inner: shape[axis..].iter().product(),
        off,
        on,
    };
    Ok((Kernel::OneHot(k), 0))
}

fn scatter_elements(
    op: &Op,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    arity(ins, outs, 3)?;
    let (data, idx, upd, out) = (&ins[0], &ins[1], &ins[2], &outs[0]);
    let axis = usize_attr(op, "axis")?;
    let reduction = reduction(op, data.dtype)?;
    want(int_type(idx.dtype), || {
        format!("ScatterElements with {} indices", idx.dtype.name())
    })?;
    want(
        data.dtype == upd.dtype && data.dtype == out.dtype && data.shape == out.shape,
        || "ScatterElements' data, updates and output differ in type or shape".into(),
    )?;
    let (d, i) = (&data.shape, &idx.shape);
    want(
        i == &upd.shape && i.len() == d.len() && axis < d.len() && d.len() <= MAX_RANK,
        || {
            format!(
                "ScatterElements shapes: data {d:?}, indices {i:?}, updates {:?}, axis {axis}",
                upd.shape
            )
        },
    )?;
    want((0..d.len()).all(|a| a == axis || i[a] <= d[a]), || {
        format!("ScatterElements indices {i:?} larger than the data {d:?}")
    })?;
    apart(&ins[1..], out, None)?;
    apart(&ins[..1], out, Some(0))?;
    let k = ScatterElements {
        reduction,
        data_strides: strides_of(d),
        shape: i.clone(),
        axis,
        size: d[axis],
    };
    Ok((Kernel::ScatterElements(k), 0))
}

fn scatter_nd(
    op: &Op,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    arity(ins, outs, 3)?;
    let (data, idx, upd, out) = (&ins[0], &ins[1], &ins[2], &outs[0]);
    let reduction = reduction(op, data.dtype)?;
    want(int_type(idx.dtype), || {
        format!("ScatterND with {} indices", idx.dtype.name())
    })?;
    want(
        data.dtype == upd.dtype && data.dtype == out.dtype && data.shape == out.shape,
        || "ScatterND's data, updates and output differ in type or shape".into(),
    )?;
    let (d, i) = (&data.shape, &idx.shape);
    let k = i.last().copied().unwrap_or(usize::MAX);
    want(k <= d.len(), || {
        format!("ScatterND indices {i:?} for data {d:?}")
    })?;
    let lead = &i[..i.len() - 1];
    let expect: Vec<usize> = lead.iter().chain(&d[k..]).copied().collect();
    want(expect == upd.shape, || {
        format!(
            "ScatterND updates {:?} for data {d:?} and indices {i:?}",
            upd.shape
        )
    })?;
    apart(&ins[1..], out, None)?;
    apart(&ins[..1], out, Some(0))?;
    let strides = strides_of(d);
    let kernel = ScatterNd {
        reduction,
        dims: d[..k].to_vec(),
        strides: strides[..k].to_vec(),
        slice: d[k..].iter().product(),
        count: lead.iter().product(),
    };
    Ok((Kernel::ScatterNd(kernel), 0))
}

fn gather_nd(
    op: &Op,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    arity(ins, outs, 2)?;
    let (data, idx, out) = (&ins[0], &ins[1], &outs[0]);
    let b = usize_attr(op, "batch_dims")?;
    want(int_type(idx.dtype), || {
        format!("GatherND with {} indices", idx.dtype.name())
    })?;
    want(data.dtype == out.dtype, || {
        "GatherND changes the type".into()
    })?;
    let (d, i) = (&data.shape, &idx.shape);
    let shapes = || format!("GatherND shapes: data {d:?}, indices {i:?}, batch_dims {b}");
    want(b < i.len() && b <= d.len() && d[..b] == i[..b], shapes)?;
    let k = i[i.len() - 1];
    want(k <= d.len() - b, shapes)?;
    let lead = &i[..i.len() - 1];
    let expect: Vec<usize> = lead.iter().chain(&d[b + k..]).copied().collect();
    want(expect == out.shape, || {
        format!("GatherND output {:?}; {}", out.shape, shapes())
    })?;
    apart(ins, out, None)?;
    let within = strides_of(&d[b..]);
    let batches = d[..b].iter().product();
    let kernel = GatherNd {
        batches,
        batch_len: d[b..].iter().product(),
        per_batch: lead[b..].iter().product(),
        dims: d[b..b + k].to_vec(),
        strides: within[..k].to_vec(),
        slice: d[b + k..].iter().product(),
    };
    Ok((Kernel::GatherNd(kernel), 0))
}

/// A value of `T` from the low bytes of `bits`.
fn from_bits<T: Pod>(bits: u64) -> T {
    bytemuck::pod_read_unaligned(&bits.to_le_bytes()[..core::mem::size_of::<T>()])
}

fn copy<T: Copy>(data: Src<'_, T>, out: &[Cell<T>]) {
    for (i, c) in out.iter().enumerate() {
        c.set(data.at(i));
    }
}

impl OneHot {
    /// Runs the kernel. An index outside `[-depth, depth)` leaves its
    /// positions all `off`, as ONNX specifies.
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        outs: &[Operand<'_>],
    ) -> Result<(), Failure> {
        let idx = Indices::of(v, &ins[0])?;
        let (outer, depth, inner) = (self.outer, self.depth, self.inner);
        sized!(outs[0].dtype.size_bytes(), |T| {
            let out = v.dst::<T>(&outs[0])?;
            let (off, on) = (from_bits::<T>(self.off), from_bits::<T>(self.on));
            out.iter().for_each(|c| c.set(off));
            for o in 0..outer {
                for i in 0..inner {
                    if let Ok(d) = place(idx.at(o * inner + i), depth) {
                        out[(o * depth + d) * inner + i].set(on);
                    }
                }
            }
        });
        Ok(())
    }
}

impl ScatterElements {
    /// Runs the kernel.
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        outs: &[Operand<'_>],
    ) -> Result<(), Failure> {
        let idx = Indices::of(v, &ins[1])?;
        combining!(outs[0].dtype, self.reduction, false, |T, f| {
            let out = v.dst::<T>(&outs[0])?;
            let upd = v.src::<T>(&ins[2])?;
            copy(v.src::<T>(&ins[0])?, out);
            let rank = self.shape.len();
            let mut coord = [0usize; MAX_RANK];
            for p in 0..upd.len() {
                let at = place(idx.at(p), self.size)?;
                let mut dst = 0;
                for a in 0..rank {
                    let c = if a == self.axis { at } else { coord[a] };
                    dst += c * self.data_strides[a];
                }
                out[dst].set(f(out[dst].get(), upd.at(p)));
                for a in (0..rank).rev() {
                    coord[a] += 1;
                    if coord[a] < self.shape[a] {
                        break;
                    }
                    coord[a] = 0;
                }
            }
        });
        Ok(())
    }
}

impl ScatterNd {
    /// Runs the kernel.
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        outs: &[Operand<'_>],
    ) -> Result<(), Failure> {
        let idx = Indices::of(v, &ins[1])?;
        let k = self.dims.len();
        combining!(outs[0].dtype, self.reduction, true, |T, f| {
            let out = v.dst::<T>(&outs[0])?;
            let upd = v.src::<T>(&ins[2])?;
            copy(v.src::<T>(&ins[0])?, out);
            for t in 0..self.count {
                let mut base = 0;
                for j in 0..k {
                    base += place(idx.at(t * k + j), self.dims[j])? * self.strides[j];
                }
                let from = t * self.slice;
                for (e, c) in out[base..base + self.slice].iter().enumerate() {
                    c.set(f(c.get(), upd.at(from + e)));
                }
            }
        });
        Ok(())
    }
}

impl GatherNd {
    /// Runs the kernel.
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        outs: &[Operand<'_>],
    ) -> Result<(), Failure> {
        let idx = Indices::of(v, &ins[1])?;
        let k = self.dims.len();
        sized!(outs[0].dtype.size_bytes(), |T| {
            let data = v.src::<T>(&ins[0])?;
            let out = v.dst::<T>(&outs[0])?;
            for b in 0..self.batches {
                for t in 0..self.per_batch {
                    let tuple = b * self.per_batch + t;
                    let mut src = b * self.batch_len;
                    for j in 0..k {
                        src += place(idx.at(tuple * k + j), self.dims[j])? * self.strides[j];
                    }
                    let dst = tuple * self.slice;
                    for (e, c) in out[dst..dst + self.slice].iter().enumerate() {
                        c.set(data.at(src + e));
                    }
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{run_part, Step};
    use super::*;
    use alloc::string::ToString;

    /// xorshift64*: reproducible inputs without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn shape(&mut self, rank: usize) -> Vec<usize> {
            (0..rank).map(|_| 1 + self.below(4)).collect()
        }

        /// Small integers as floats, so sums and products are exact.
        fn values(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.below(7) as f32 - 3.0).collect()
        }

        /// An index on an axis of `size`, negative half of the time.
        fn index(&mut self, size: usize) -> i64 {
            let i = self.below(size) as i64;
            if self.next().is_multiple_of(2) {
                i - size as i64
            } else {
                i
            }
        }
    }

    fn unravel(mut p: usize, shape: &[usize]) -> Vec<usize> {
        let mut c = vec![0; shape.len()];
        for a in (0..shape.len()).rev() {
            c[a] = p % shape[a];
            p /= shape[a];
        }
        c
    }

    fn ravel(c: &[usize], shape: &[usize]) -> usize {
        c.iter().zip(shape).fold(0, |acc, (&x, &d)| acc * d + x)
    }

    fn wrap(i: i64, size: usize) -> usize {
        (if i < 0 { i + size as i64 } else { i }) as usize
    }

    /// Operands laid out one after another in an 8-aligned arena.
    struct Bench {
        operands: Vec<Operand<'static>>,
        arena: Vec<u64>,
    }

    impl Bench {
        fn new(specs: &[(DType, &[usize])]) -> Bench {
            let mut at = 0;
            let mut operands = Vec::new();
            for (id, (dtype, shape)) in specs.iter().enumerate() {
                let len: usize = shape.iter().product();
                operands.push(Operand {
                    id: id as u32,
                    dtype: *dtype,
                    shape: shape.to_vec(),
                    len,
                    loc: Loc::Arena(at),
                });
                at += (len * dtype.size_bytes() as usize).div_ceil(8) * 8 + 8;
            }
            Bench {
                operands,
                arena: vec![0; at / 8],
            }
        }

        fn range(&self, i: usize) -> core::ops::Range<usize> {
            let o = &self.operands[i];
            let Loc::Arena(at) = o.loc else {
                unreachable!()
            };
            at..at + o.len * o.dtype.size_bytes() as usize
        }

        fn put<T: Pod>(&mut self, i: usize, values: &[T]) {
            let r = self.range(i);
            bytemuck::cast_slice_mut::<u64, u8>(&mut self.arena)[r]
                .copy_from_slice(bytemuck::cast_slice(values));
        }

        fn get<T: Pod>(&self, i: usize) -> Vec<T> {
            bytemuck::cast_slice(&bytemuck::cast_slice::<u64, u8>(&self.arena)[self.range(i)])
                .to_vec()
        }

        /// Prepares `op_type` over all operands but the last (the output)
        /// and runs it.
        fn run(
            &mut self,
            op_type: &str,
            attributes: Vec<(&str, AttrValue)>,
        ) -> Result<Result<(), Failure>, String> {
            let op = Op {
                name: "test".into(),
                op_type: op_type.into(),
                attributes: attributes
                    .into_iter()
                    .map(|(n, v)| (n.to_string(), v))
                    .collect(),
                inputs: vec![],
                outputs: vec![],
            };
            let n = self.operands.len();
            let (ins, outs) = self.operands.split_at(n - 1);
            let (kernel, scratch) = crate::kernels::prepare(&op, ins, outs)?;
            let step = Step {
                kernel,
                inputs: ins.to_vec(),
                outputs: outs.to_vec(),
                scratch,
                planned: None,
            };
            let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut self.arena);
            let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
            Ok(run_part(&step, &views, &[], 0, 1))
        }
    }

    fn text(s: &str) -> AttrValue {
        AttrValue::Text(s.into())
    }

    const REDUCTIONS: [&str; 5] = ["none", "add", "mul", "max", "min"];

    /// ONNX's reference combination; `numpy` for ScatterND's max/min.
    fn combine(r: &str, numpy: bool, d: f32, u: f32) -> f32 {
        match r {
            "add" => d + u,
            "mul" => d * u,
            "max" if numpy => d.max(u),
            "min" if numpy => d.min(u),
            "max" => {
                if u > d {
                    u
                } else {
                    d
                }
            }
            "min" => {
                if u < d {
                    u
                } else {
                    d
                }
            }
            _ => u,
        }
    }

    #[test]
    fn scatter_elements_matches_the_reference() {
        let mut rng = Rng(0x5ca7_7e12);
        for case in 0..300 {
            let rank = 1 + rng.below(4);
            let d = rng.shape(rank);
            let axis = rng.below(rank);
            let i: Vec<usize> = (0..rank)
                .map(|a| {
                    if a == axis {
                        1 + rng.below(6)
                    } else {
                        1 + rng.below(d[a])
                    }
                })
                .collect();
            let r = REDUCTIONS[case % 5];
            let idx_type = if case % 2 == 0 {
                DType::I64
            } else {
                DType::I32
            };
            let mut b = Bench::new(&[
                (DType::F32, &d),
                (idx_type, &i),
                (DType::F32, &i),
                (DType::F32, &d),
            ]);
            let data = rng.values(b.operands[0].len);
            let n = b.operands[1].len;
            // Axes of 1 to 3 elements make duplicate indices common.
            let idx: Vec<i64> = (0..n).map(|_| rng.index(d[axis])).collect();
            let upd = rng.values(n);
            b.put(0, &data);
            if idx_type == DType::I64 {
                b.put(1, &idx);
            } else {
                b.put(1, &idx.iter().map(|&x| x as i32).collect::<Vec<_>>());
            }
            b.put(2, &upd);
            let attrs = vec![
                ("axis", AttrValue::Int(axis as i64)),
                ("reduction", text(r)),
            ];
            b.run("ScatterElements", attrs).unwrap().unwrap();
            let mut want = data.clone();
            for p in 0..n {
                let mut c = unravel(p, &i);
                c[axis] = wrap(idx[p], d[axis]);
                let at = ravel(&c, &d);
                want[at] = combine(r, false, want[at], upd[p]);
            }
            assert_eq!(
                b.get::<f32>(3),
                want,
                "case {case}: {r} {d:?} {i:?} axis {axis}"
            );
        }
    }

    #[test]
    fn scatter_nd_matches_the_reference() {
        let mut rng = Rng(0x5ca7_7e4d);
        for case in 0..300 {
            let rank = 1 + rng.below(4);
            let d = rng.shape(rank);
            let k = rng.below(rank + 1);
            let lead_rank = rng.below(3);
            let lead = rng.shape(lead_rank);
            let i: Vec<usize> = lead.iter().copied().chain([k]).collect();
            let u: Vec<usize> = lead.iter().chain(&d[k..]).copied().collect();
            let r = REDUCTIONS[case % 5];
            let mut b = Bench::new(&[
                (DType::F32, &d),
                (DType::I64, &i),
                (DType::F32, &u),
                (DType::F32, &d),
            ]);
            let data = rng.values(b.operands[0].len);
            let count: usize = lead.iter().product();
            let idx: Vec<i64> = (0..count * k).map(|p| rng.index(d[p % k])).collect();
            let upd = rng.values(b.operands[2].len);
            b.put(0, &data);
            b.put(1, &idx);
            b.put(2, &upd);
            b.run("ScatterNd", vec![("reduction", text(r))])
                .unwrap()
                .unwrap();
            let mut want = data.clone();
            let slice: usize = d[k..].iter().product();
            for t in 0..count {
                let mut c = vec![0; rank];
                for j in 0..k {
                    c[j] = wrap(idx[t * k + j], d[j]);
                }
                let base = ravel(&c, &d);
                for e in 0..slice {
                    want[base + e] = combine(r, true, want[base + e], upd[t * slice + e]);
                }
            }
            assert_eq!(b.get::<f32>(3), want, "case {case}: {r} {d:?} {i:?}");
        }
    }

    #[test]
    fn gather_nd_matches_the_reference() {
        let mut rng = Rng(0x6a7e_124d);
        for case in 0..300 {
            let rank = 1 + rng.below(4);
            let d = rng.shape(rank);
            let batch = rng.below(rank);
            let k = rng.below(rank - batch + 1);
            let mut i = d[..batch].to_vec();
            let lead_rank = rng.below(3);
            i.extend(rng.shape(lead_rank));
            i.push(k);
            let out: Vec<usize> = i[..i.len() - 1]
                .iter()
                .chain(&d[batch + k..])
                .copied()
                .collect();
            // 2-byte elements: moved as raw bits.
            let mut b = Bench::new(&[(DType::I16, &d), (DType::I64, &i), (DType::I16, &out)]);
            let data: Vec<i16> = (0..b.operands[0].len).map(|_| rng.next() as i16).collect();
            let n = b.operands[1].len;
            let idx: Vec<i64> = (0..n).map(|p| rng.index(d[batch + p % k.max(1)])).collect();
            b.put(0, &data);
            b.put(1, &idx);
            let attrs = vec![("batch_dims", AttrValue::Int(batch as i64))];
            b.run("GatherNd", attrs).unwrap().unwrap();
            let mut want = Vec::new();
            let tuples: usize = i[..i.len() - 1].iter().product();
            let per_batch = tuples / d[..batch].iter().product::<usize>();
            for t in 0..tuples {
                let mut c = unravel(t / per_batch, &d[..batch]);
                for j in 0..k {
                    c.push(wrap(idx[t * k + j], d[batch + j]));
                }
                let rest: usize = d[batch + k..].iter().product();
                c.extend(vec![0; rank - c.len()]);
                let base = ravel(&c, &d);
                want.extend_from_slice(&data[base..base + rest]);
            }
            assert_eq!(
                b.get::<i16>(2),
                want,
                "case {case}: {d:?} {i:?} batch {batch}"
            );
        }
    }

    #[test]
    fn one_hot_matches_the_reference() {
        let mut rng = Rng(0x0e40_0007);
        for case in 0..200 {
            let rank = rng.below(4);
            let s = rng.shape(rank);
            let axis = rng.below(rank + 1);
            let depth = 1 + rng.below(5);
            let mut o = s.clone();
            o.insert(axis, depth);
            let mut b = Bench::new(&[(DType::I32, &s), (DType::F64, &o)]);
            // Out of [-depth, depth): all off.
            let idx: Vec<i32> = (0..b.operands[0].len)
                .map(|_| rng.below(2 * depth + 4) as i32 - depth as i32 - 2)
                .collect();
            b.put(0, &idx);
            let (off, on) = (-0.1f64, 1e300f64);
            let attrs = vec![
                ("axis", AttrValue::Int(axis as i64)),
                ("dim", AttrValue::Int(depth as i64)),
                ("value_type", text("f64")),
                ("off", AttrValue::Int(off.to_bits() as i64)),
                ("on", AttrValue::Int(on.to_bits() as i64)),
            ];
            b.run("Onehot", attrs).unwrap().unwrap();
            let want: Vec<f64> = (0..b.operands[1].len)
                .map(|p| {
                    let mut c = unravel(p, &o);
                    let at = c.remove(axis);
                    let x = idx[ravel(&c, &s)] as i64;
                    let hit = x == at as i64 || x == at as i64 - depth as i64;
                    if hit {
                        on
                    } else {
                        off
                    }
                })
                .collect();
            assert_eq!(
                b.get::<f64>(1),
                want,
                "case {case}: {s:?} axis {axis} depth {depth}"
            );
        }
    }

    #[test]
    fn integer_reductions_wrap() {
        let mut b = Bench::new(&[
            (DType::I32, &[2]),
            (DType::I64, &[3]),
            (DType::I32, &[3]),
            (DType::I32, &[2]),
        ]);
        b.put(0, &[i32::MAX, 5]);
        b.put(1, &[0i64, -1, 1]);
        b.put(2, &[1i32, 2, 3]);
        let attrs = vec![("axis", AttrValue::Int(0)), ("reduction", text("add"))];
        b.run("ScatterElements", attrs).unwrap().unwrap();
        assert_eq!(b.get::<i32>(3), [i32::MIN, 10]);
    }

    #[test]
    fn nan_follows_each_reference() {
        let nan = f32::NAN;
        for (op, want_0, want_1) in [("ScatterNd", true, true), ("ScatterElements", true, false)] {
            let idx_shape: &[usize] = if op == "ScatterNd" { &[2, 1] } else { &[2] };
            let mut b = Bench::new(&[
                (DType::F32, &[2]),
                (DType::I64, idx_shape),
                (DType::F32, &[2]),
                (DType::F32, &[2]),
            ]);
            b.put(0, &[nan, 1.0]);
            b.put(1, &[0i64, 1]);
            b.put(2, &[5.0f32, nan]);
            let mut attrs = vec![("reduction", text("max"))];
            if op == "ScatterElements" {
                attrs.push(("axis", AttrValue::Int(0)));
            }
            b.run(op, attrs).unwrap().unwrap();
            let got = b.get::<f32>(3);
            assert_eq!((got[0].is_nan(), got[1].is_nan()), (want_0, want_1), "{op}");
        }
    }

    #[test]
    fn an_index_out_of_range_fails_the_step() {
        for bad in [3i64, -4, i64::MIN, i64::MAX] {
            let mut b = Bench::new(&[
                (DType::F32, &[3, 2]),
                (DType::I64, &[2, 2]),
                (DType::F32, &[2, 2]),
                (DType::F32, &[3, 2]),
            ]);
            b.put(1, &[0i64, 1, bad, 0]);
            let attrs = vec![("axis", AttrValue::Int(0)), ("reduction", text("none"))];
            let r = b.run("ScatterElements", attrs).unwrap();
            assert!(matches!(r, Err(Failure::Index(i)) if i == bad), "{r:?}");

            let mut b = Bench::new(&[
                (DType::F32, &[3, 2]),
                (DType::I64, &[2, 1]),
                (DType::F32, &[2, 2]),
                (DType::F32, &[3, 2]),
            ]);
            b.put(1, &[1i64, bad]);
            let r = b
                .run("ScatterNd", vec![("reduction", text("add"))])
                .unwrap();
            assert!(matches!(r, Err(Failure::Index(i)) if i == bad), "{r:?}");

            let mut b = Bench::new(&[
                (DType::U8, &[2, 3]),
                (DType::I64, &[2, 2]),
                (DType::U8, &[2]),
            ]);
            b.put(1, &[1i64, -3, 0, bad]);
            let r = b
                .run("GatherNd", vec![("batch_dims", AttrValue::Int(0))])
                .unwrap();
            assert!(matches!(r, Err(Failure::Index(i)) if i == bad), "{r:?}");
        }
    }

    #[test]
    fn setup_refuses_what_it_cannot_run() {
        let refused = |specs: &[(DType, &[usize])], op: &str, attrs: Vec<(&str, AttrValue)>| {
            Bench::new(specs).run(op, attrs).unwrap_err()
        };
        let e = refused(
            &[
                (DType::Bool, &[2]),
                (DType::I64, &[2]),
                (DType::Bool, &[2]),
                (DType::Bool, &[2]),
            ],
            "ScatterElements",
            vec![("axis", AttrValue::Int(0)), ("reduction", text("add"))],
        );
        assert!(e.contains("reduction Add on bool"), "{e}");
        let hot = |value_type: &str| {
            vec![
                ("axis", AttrValue::Int(1)),
                ("dim", AttrValue::Int(3)),
                ("value_type", text(value_type)),
                ("off", AttrValue::Int(0)),
                ("on", AttrValue::Int(1)),
            ]
        };
        let e = refused(
            &[(DType::F32, &[2]), (DType::F32, &[2, 3])],
            "Onehot",
            hot("f32"),
        );
        assert!(e.contains("f32 indices"), "{e}");
        let e = refused(
            &[(DType::I64, &[2]), (DType::F32, &[2, 3])],
            "Onehot",
            hot("String"),
        );
        assert!(e.contains("String"), "{e}");
        let e = refused(
            &[(DType::I64, &[2]), (DType::F32, &[3, 2])],
            "Onehot",
            hot("f32"),
        );
        assert!(e.contains("OneHot output"), "{e}");
        let e = refused(
            &[
                (DType::F32, &[2, 3]),
                (DType::I64, &[2, 3]),
                (DType::F32, &[2]),
            ],
            "GatherNd",
            vec![("batch_dims", AttrValue::Int(0))],
        );
        assert!(e.contains("GatherND"), "{e}");
    }

    #[test]
    fn an_output_over_an_input_is_refused() {
        let mut b = Bench::new(&[(DType::I64, &[2]), (DType::I64, &[2, 1])]);
        b.operands[1].loc = b.operands[0].loc;
        let attrs = vec![
            ("axis", AttrValue::Int(1)),
            ("dim", AttrValue::Int(1)),
            ("value_type", text("i64")),
            ("off", AttrValue::Int(0)),
            ("on", AttrValue::Int(1)),
        ];
        let e = b.run("Onehot", attrs).unwrap_err();
        assert!(e.contains("shares bytes"), "{e}");
    }
}
