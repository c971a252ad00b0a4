//! Typed, shared-mutable views of the arena.
//!
//! The plan makes tensors share bytes on purpose: an element-wise op
//! writes over its dead input, a view has its input's bytes, a concat's
//! output holds its inputs. A kernel therefore reads and writes one buffer
//! through views that may overlap, which `&`/`&mut` slices cannot express.
//! Every kernel sees the arena as `&[Cell<T>]`: overlapping reads and
//! writes are then ordinary safe code, and a kernel written for separate
//! buffers stays correct when its output is its input (each element is
//! read before it is written at the same index).

use bytemuck::Pod;
use core::cell::Cell;

/// Reinterprets `bytes[offset..offset + len * size_of::<T>()]` as cells of
/// `T`. `None` when the range is out of bounds or misaligned for `T`.
pub fn typed<T: Pod>(bytes: &[Cell<u8>], offset: usize, len: usize) -> Option<&[Cell<T>]> {
    let size = core::mem::size_of::<T>();
    let end = len.checked_mul(size)?.checked_add(offset)?;
    let range = bytes.get(offset..end)?;
    if !(range.as_ptr() as usize).is_multiple_of(core::mem::align_of::<T>()) {
        return None;
    }
    let ptr = range.as_ptr().cast::<Cell<T>>();
    // SAFETY: `Cell<T>` has the layout of `T` and `Cell<u8>` that of `u8`,
    // so the range is `len` values of `Cell<T>`: its length was checked
    // above, its start is aligned for `T` (checked above), and `T: Pod`
    // makes every bit pattern a valid `T`. Both slices give shared,
    // interior-mutable access to the same bytes with the lifetime of
    // `bytes`; `Cell` is `!Sync`, so the views cannot reach another thread,
    // and neither type hands out references into its contents, so no `&T`
    // can observe a write made through the other view.
    #[allow(unsafe_code)]
    Some(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// A read-only operand: a weight borrowed from the mapping or a tensor in
/// the arena.
#[derive(Clone, Copy)]
pub enum Src<'a, T> {
    /// A weight (read-only mapping).
    Weight(&'a [T]),
    /// An arena tensor.
    Arena(&'a [Cell<T>]),
}

impl<T: Copy> Src<'_, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Src::Weight(w) => w.len(),
            Src::Arena(a) => a.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `r` (clipped to the operand), as an operand of their own.
    pub fn slice(&self, r: core::ops::Range<usize>) -> Self {
        let end = r.end.min(self.len());
        let r = r.start.min(end)..end;
        match self {
            Src::Weight(w) => Src::Weight(&w[r]),
            Src::Arena(a) => Src::Arena(&a[r]),
        }
    }

    /// Element `i` (panics out of bounds: kernels check shapes at setup).
    #[inline(always)]
    pub fn at(&self, i: usize) -> T {
        match self {
            Src::Weight(w) => w[i],
            Src::Arena(a) => a[i].get(),
        }
    }
}

/// Element access shared by weights (`&[T]`) and arena tensors
/// (`&[Cell<T>]`), so hot loops are compiled once per storage kind
/// instead of branching on it per element.
pub trait Load<T>: Copy {
    /// Element `i`.
    fn load(self, i: usize) -> T;
    /// Number of elements.
    fn count(self) -> usize;
    /// Elements `start..start + len` (panics out of bounds: kernels check
    /// shapes at setup). Taking a row once lets the loop over it run
    /// without a bounds check per element, and vectorise.
    fn sub(self, start: usize, len: usize) -> Self;
    /// The first element's address, for vector loads of [`Load::count`]
    /// elements (no element is written while a kernel reads its inputs).
    fn ptr(self) -> *const T;
}

impl<T: Copy> Load<T> for &[T] {
    #[inline(always)]
    fn load(self, i: usize) -> T {
        self[i]
    }
    #[inline(always)]
    fn count(self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn sub(self, start: usize, len: usize) -> Self {
        &self[start..start + len]
    }
    #[inline(always)]
    fn ptr(self) -> *const T {
        self.as_ptr()
    }
}

impl<T: Copy> Load<T> for &[Cell<T>] {
    #[inline(always)]
    fn load(self, i: usize) -> T {
        self[i].get()
    }
    #[inline(always)]
    fn count(self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn sub(self, start: usize, len: usize) -> Self {
        &self[start..start + len]
    }
    #[inline(always)]
    fn ptr(self) -> *const T {
        // `Cell<T>` has the layout of `T`.
        self.as_ptr().cast()
    }
}

/// Elements a chunked loop reads before it writes.
const LANES: usize = 16;

/// `out[j] = f(a[j], b[j])` over one row. Each chunk of [`LANES`] elements
/// is read in full before any of it is written: the result is the same
/// when `out` is `a` or `b` (an op planned in place), and the compiler,
/// which cannot rule that overlap out, can still vectorise the chunk.
#[inline(always)]
pub fn zip_row<T: Copy, U: Copy>(
    out: &[Cell<U>],
    a: impl Load<T>,
    b: impl Load<T>,
    f: impl Fn(T, T) -> U,
) {
    let n = out.len().min(a.count()).min(b.count());
    let mut j = 0;
    while j + LANES <= n {
        let (o, x, y) = (&out[j..j + LANES], a.sub(j, LANES), b.sub(j, LANES));
        // Plain loops, as in [`map_row`].
        let mut r = [f(x.load(0), y.load(0)); LANES];
        for (i, v) in r.iter_mut().enumerate() {
            *v = f(x.load(i), y.load(i));
        }
        store(o, r);
        j += LANES;
    }
    for k in j..n {
        out[k].set(f(a.load(k), b.load(k)));
    }
}

/// Writes `r` over the first `N` cells of `out` in one store. A loop of
/// `Cell::set` over a chunk of bytes compiled to a masked vector store to
/// the stack and sixteen byte stores reloading it (a masked store does
/// not forward to loads): a third of a quantized residual Add's time.
#[inline(always)]
pub fn store<U: Copy, const N: usize>(out: &[Cell<U>], r: [U; N]) {
    let out = &out[..N];
    // SAFETY: `out` is `N` cells in a row, laid out as `N` values of `U`
    // (`Cell<U>` has `U`'s layout), and a cell may be written through a
    // shared reference, as `Cell::set` does.
    #[allow(unsafe_code)]
    unsafe {
        core::ptr::write_unaligned(out.as_ptr().cast::<[U; N]>().cast_mut(), r)
    }
}

/// `out[i] = v[i]` over the shorter of the two, as one copy rather than
/// a store per element.
#[inline(always)]
pub fn copy_into<T: Copy>(out: &[Cell<T>], v: &[T]) {
    let n = out.len().min(v.len());
    // SAFETY: `n` cells of `out` (laid out as `n` values of `T`), which may
    // be written through a shared reference, and `n` values of `v`; `v` is
    // a plain slice, so it cannot overlap cells being written.
    #[allow(unsafe_code)]
    unsafe {
        core::ptr::copy_nonoverlapping(v.as_ptr(), out.as_ptr().cast::<T>().cast_mut(), n)
    }
}

/// `dst[i] = src.load(i)` for every element of `dst` (`src` holds at
/// least as many), as one copy: element by element the loop kept a
/// bounds check per value and stayed scalar (an eighth of the depthwise
/// bands' time went to filling their buffers that way).
#[inline(always)]
pub fn read_into<T: Copy>(dst: &mut [T], src: impl Load<T>) {
    let n = dst.len();
    let src = src.sub(0, n);
    // SAFETY: `src` holds `n` values (`sub` checked) and `dst` is `n`
    // long; `dst` is an exclusive slice, so it overlaps nothing `src`
    // reads.
    #[allow(unsafe_code)]
    unsafe {
        core::ptr::copy_nonoverlapping(src.ptr(), dst.as_mut_ptr(), n)
    }
}

/// `out[j] = f(a[j])` over one row, chunked as [`zip_row`].
#[inline(always)]
pub fn map_row<T: Copy, U: Copy>(out: &[Cell<U>], a: impl Load<T>, f: impl Fn(T) -> U) {
    let n = out.len().min(a.count());
    let mut j = 0;
    while j + LANES <= n {
        let (o, x) = (&out[j..j + LANES], a.sub(j, LANES));
        // Plain loops, not `array::from_fn`: its closures are not always
        // inlined into the vector body (the QLinearMul of a gate ran one
        // call per element).
        let mut r = [f(x.load(0)); LANES];
        for (i, v) in r.iter_mut().enumerate() {
            *v = f(x.load(i));
        }
        store(o, r);
        j += LANES;
    }
    for k in j..n {
        out[k].set(f(a.load(k)));
    }
}

/// Calls `$body` with `$name` bound to the storage of `$src` as a
/// [`Load`] implementation, so the body is monomorphised per kind.
#[macro_export]
#[doc(hidden)]
macro_rules! with_load {
    ($src:expr, |$name:ident| $body:expr) => {
        match $src {
            $crate::kernels::cells::Src::Weight($name) => $body,
            $crate::kernels::cells::Src::Arena($name) => $body,
        }
    };
}
