//! The activation arena: one zeroed allocation of the planned size (or a
//! caller's buffer), and typed views of the tensors the plan placed in it.

use crate::lookup::{self, Element, LookupError, TensorKey, TensorRef};
use crate::{shown, Bundle, BundlePath};
use alloc::string::ToString;
use alloc::vec::Vec;
use bytemuck::{Pod, Zeroable};
use stow_bundle::Region;
use thiserror::Error;

/// The largest arena alignment [`Arena::new`] honours. The compiler asks
/// for 64; a larger power of two costs up to that many extra bytes, so a
/// hostile bundle asking for 2^63 is refused rather than obeyed.
pub const MAX_ARENA_ALIGN: u64 = 1 << 16;

/// Why an arena could not be allocated.
#[derive(Debug, Error)]
pub enum ArenaError {
    /// The bundle asks for an alignment above [`MAX_ARENA_ALIGN`].
    #[error(
        "{}: the arena alignment {align} is above the supported {MAX_ARENA_ALIGN}",
        shown(path)
    )]
    Alignment {
        /// The bundle.
        path: BundlePath,
        /// The alignment asked for.
        align: u64,
    },
    /// The allocation failed (or does not fit in the address space).
    #[error("{}: cannot allocate an arena of {bytes} bytes", shown(path))]
    Alloc {
        /// The bundle.
        path: BundlePath,
        /// The size asked for.
        bytes: u64,
    },
    /// A caller's buffer does not start at a multiple of the arena
    /// alignment.
    #[error(
        "{}: the arena buffer at {address:#x} is not aligned to {align} bytes",
        shown(path)
    )]
    Misaligned {
        /// The bundle.
        path: BundlePath,
        /// Address of the buffer's first byte.
        address: usize,
        /// The alignment the bundle needs (`arena_align`).
        align: u64,
    },
    /// The caller gave a number of buffers other than the bundle's number
    /// of memory pools.
    #[error(
        "{}: {given} arena buffers given, the bundle plans {need} memory pools",
        shown(path)
    )]
    PoolCount {
        /// The bundle.
        path: BundlePath,
        /// Buffers given.
        given: usize,
        /// Pools the bundle plans.
        need: usize,
    },
    /// A caller's buffer is smaller than the arena.
    #[error(
        "{}: the arena buffer holds {given} bytes, the bundle needs {need}",
        shown(path)
    )]
    TooSmall {
        /// The bundle.
        path: BundlePath,
        /// Bytes in the buffer.
        given: usize,
        /// Bytes the arena needs (`arena_bytes`).
        need: u64,
    },
}

/// The unit of allocation: 64 bytes aligned to 64, so that a `Vec` of
/// them is a 64-byte-aligned buffer without `unsafe` or a custom
/// allocator.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Chunk([u8; CHUNK]);

const CHUNK: usize = 64;

/// A bundle's activation arena: `arena_bytes` zeroed bytes whose first
/// byte is aligned to `arena_align`, allocated once ([`Arena::new`]) or
/// placed in a buffer the caller lends for `'a` ([`Arena::in_buffer`]:
/// static memory on a device). A bundle whose arena is split across
/// memory pools has one such buffer per pool ([`Arena::in_buffers`]);
/// [`Arena::bytes`], [`Arena::len`] and [`Arena::align`] then describe
/// pool 0, and [`Arena::pool_bytes`] any pool.
///
/// Tensor views borrow the arena; the bundle is passed to each call only
/// to find the tensor's offset, and must be the bundle the arena was made
/// for (checked: [`LookupError::WrongBundle`]).
///
/// **Aliased tensors overlap by design.** The planner gives tensors whose
/// lifetimes do not overlap the same bytes, and aliases (an op written in
/// place of its input, a view with a new shape, a slice of a concat's
/// output) share bytes with the tensor they alias even while both are
/// live. So a view of one tensor may show bytes another tensor wrote:
/// read a tensor only during its steps (`first_step..=last_step`), and
/// read outputs after the last step. The borrow checker still prevents
/// two live views where one is mutable.
pub struct Arena<'a> {
    /// One memory per pool, pool 0 first (one for a bundle without pools).
    pools: Vec<PoolMemory<'a>>,
    plan: u32,
}

/// One pool's buffer.
struct PoolMemory<'a> {
    storage: Storage<'a>,
    /// Byte offset of the pool's first byte in the storage (non-zero
    /// only for an allocation aligned above 64).
    start: usize,
    len: usize,
    align: u64,
}

/// Where each pool starts in the one address space the kernels see: pool
/// `p` at the end of pool `p − 1` rounded up to 64 bytes, so that offsets
/// of different pools never coincide and an offset's alignment to an
/// element size is the same in the pool and in that space. `None` when
/// the sum does not fit in `usize`.
pub(crate) fn pool_bases(contents: &stow_bundle::Contents) -> Option<Vec<usize>> {
    let mut bases = Vec::with_capacity(contents.pool_count());
    let mut next = 0usize;
    for (bytes, _) in contents.pool_sizes() {
        bases.push(next);
        let end = next.checked_add(usize::try_from(bytes).ok()?)?;
        next = end.checked_next_multiple_of(CHUNK)?;
    }
    Some(bases)
}

enum Storage<'a> {
    Allocated(Vec<Chunk>),
    Borrowed(&'a mut [u8]),
}

impl Storage<'_> {
    fn all(&self) -> &[u8] {
        match self {
            Storage::Allocated(chunks) => bytemuck::cast_slice(chunks),
            Storage::Borrowed(buffer) => buffer,
        }
    }

    fn all_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Allocated(chunks) => bytemuck::cast_slice_mut(chunks),
            Storage::Borrowed(buffer) => buffer,
        }
    }
}

impl<'a> PoolMemory<'a> {
    /// Places a pool of `bytes` aligned to `align` at the start of
    /// `buffer` and zeroes it.
    fn borrowed(
        bundle: &Bundle,
        buffer: &'a mut [u8],
        bytes: u64,
        align: u64,
    ) -> Result<PoolMemory<'a>, ArenaError> {
        let path = || bundle.path_owned();
        let align = align.max(1);
        let address = buffer.as_ptr() as usize;
        // `align` is a power of two (validated); one above the address
        // space cannot be met by any address but 0.
        if !usize::try_from(align).is_ok_and(|a| address.is_multiple_of(a)) {
            return Err(ArenaError::Misaligned {
                path: path(),
                address,
                align,
            });
        }
        let len = usize::try_from(bytes)
            .ok()
            .filter(|&n| n <= buffer.len())
            .ok_or_else(|| ArenaError::TooSmall {
                path: path(),
                given: buffer.len(),
                need: bytes,
            })?;
        buffer[..len].fill(0);
        Ok(PoolMemory {
            storage: Storage::Borrowed(buffer),
            start: 0,
            len,
            align,
        })
    }

    fn bytes(&self) -> &[u8] {
        // `start + len` fits: allocated, or checked, at least that much.
        let all = self.storage.all();
        all.get(self.start..self.start + self.len).unwrap_or(&[])
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let (start, len) = (self.start, self.len);
        let all = self.storage.all_mut();
        all.get_mut(start..start + len).unwrap_or(&mut [])
    }
}

impl PoolMemory<'static> {
    /// Allocates a zeroed pool of `bytes` aligned to `align`. Fails,
    /// rather than aborting, when the allocation is refused.
    fn allocated(bundle: &Bundle, bytes: u64, align: u64) -> Result<Self, ArenaError> {
        let path = || bundle.path_owned();
        let asked = align;
        let align = align.max(1);
        if align > MAX_ARENA_ALIGN {
            return Err(ArenaError::Alignment {
                path: path(),
                align: asked,
            });
        }
        let alloc = || ArenaError::Alloc {
            path: path(),
            bytes,
        };
        // A Vec<Chunk> is 64-aligned; a larger alignment is reached by
        // allocating `align - 64` extra bytes and starting inside.
        let slack = align.saturating_sub(CHUNK as u64);
        let len = usize::try_from(bytes).map_err(|_| alloc())?;
        let total = bytes.checked_add(slack).ok_or_else(alloc)?;
        let count = usize::try_from(total.div_ceil(CHUNK as u64)).map_err(|_| alloc())?;
        let mut chunks = Vec::new();
        chunks.try_reserve_exact(count).map_err(|_| alloc())?;
        chunks.resize(count, Chunk::zeroed());
        // `align` is a power of two (validated) no larger than 2^16.
        let align_usize = align as usize;
        let base = chunks.as_ptr() as usize;
        let start = (align_usize - base % align_usize) % align_usize;
        Ok(PoolMemory {
            storage: Storage::Allocated(chunks),
            start,
            len,
            align,
        })
    }
}

impl<'a> Arena<'a> {
    /// Places the arena `bundle` plans at the start of `buffer` and zeroes
    /// it; nothing is allocated. The buffer must start at a multiple of
    /// the bundle's `arena_align` ([`ArenaError::Misaligned`]) and hold at
    /// least `arena_bytes` ([`ArenaError::TooSmall`]); bytes beyond are
    /// left alone. A bundle with several memory pools needs
    /// [`Arena::in_buffers`] ([`ArenaError::PoolCount`]).
    pub fn in_buffer(bundle: &Bundle, buffer: &'a mut [u8]) -> Result<Arena<'a>, ArenaError> {
        Arena::in_buffers(bundle, alloc::vec![buffer])
    }

    /// Places each memory pool `bundle` plans at the start of its buffer
    /// (`buffers[p]` for pool `p`, fastest first, as
    /// [`Contents::pool_sizes`](stow_bundle::Contents::pool_sizes) lists
    /// them) and zeroes it. Each buffer must be aligned to its pool's
    /// alignment and hold its bytes, and there must be one buffer per pool
    /// ([`ArenaError::PoolCount`]). Only the list itself is allocated.
    pub fn in_buffers(
        bundle: &Bundle,
        buffers: Vec<&'a mut [u8]>,
    ) -> Result<Arena<'a>, ArenaError> {
        let sizes = bundle.contents().pool_sizes();
        if buffers.len() != sizes.len() {
            return Err(ArenaError::PoolCount {
                path: bundle.path_owned(),
                given: buffers.len(),
                need: sizes.len(),
            });
        }
        let pools = buffers
            .into_iter()
            .zip(sizes)
            .map(|(buffer, (bytes, align))| PoolMemory::borrowed(bundle, buffer, bytes, align))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arena {
            pools,
            plan: bundle.header().header_crc,
        })
    }
}

impl<'a> Arena<'a> {
    /// Every pool's bytes, writable, pool 0 first.
    pub(crate) fn pools_mut<'s>(&'s mut self) -> impl Iterator<Item = &'s mut [u8]> + use<'s, 'a> {
        self.pools.iter_mut().map(PoolMemory::bytes_mut)
    }
}

impl Arena<'static> {
    /// Allocates the arena `bundle` plans (one buffer per memory pool),
    /// zeroed. Fails, rather than aborting, when an allocation is refused.
    pub fn new(bundle: &Bundle) -> Result<Arena<'static>, ArenaError> {
        let pools = bundle
            .contents()
            .pool_sizes()
            .into_iter()
            .map(|(bytes, align)| PoolMemory::allocated(bundle, bytes, align))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arena {
            pools,
            plan: bundle.header().header_crc,
        })
    }
}

impl Arena<'_> {
    /// The arena's bytes (pool 0's, with several pools).
    pub fn bytes(&self) -> &[u8] {
        self.pools.first().map_or(&[], PoolMemory::bytes)
    }

    /// True when `len` bytes at `ptr` overlap one of the arena's pools.
    pub fn overlaps(&self, ptr: *const u8, len: usize) -> bool {
        let (lo, hi) = (ptr as usize, (ptr as usize).saturating_add(len));
        self.pools.iter().any(|p| {
            let b = p.bytes();
            let start = b.as_ptr() as usize;
            lo < start + b.len() && start < hi
        })
    }

    /// The arena's bytes, writable (pool 0's, with several pools).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.pools
            .first_mut()
            .map_or(&mut [], PoolMemory::bytes_mut)
    }

    /// The bytes of memory pool `pool` (`None` past the last pool).
    pub fn pool_bytes(&self, pool: usize) -> Option<&[u8]> {
        self.pools.get(pool).map(PoolMemory::bytes)
    }

    /// Number of memory pools (1 for a bundle without pools).
    pub fn pool_count(&self) -> usize {
        self.pools.len()
    }

    /// Size in bytes (the planned `arena_bytes`: pool 0's, with several
    /// pools).
    pub fn len(&self) -> usize {
        self.pools.first().map_or(0, |p| p.len)
    }

    /// True for a model whose plan needs no arena bytes in pool 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The alignment of the first byte (the bundle's `arena_align`).
    pub fn align(&self) -> u64 {
        self.pools.first().map_or(1, |p| p.align)
    }

    /// Fills every pool with zeros.
    pub fn clear(&mut self) {
        for p in &mut self.pools {
            p.bytes_mut().fill(0);
        }
    }

    /// The arena tensor `key` names, after checking that this arena was
    /// made for `bundle`.
    fn locate<'b, K: TensorKey + ?Sized>(
        &self,
        bundle: &'b Bundle,
        key: &K,
    ) -> Result<(TensorRef<'b>, usize, core::ops::Range<usize>), LookupError> {
        let h = bundle.header();
        if h.header_crc != self.plan || h.arena_bytes != self.len() as u64 {
            return Err(LookupError::WrongBundle {
                arena_bytes: self.len() as u64,
                arena_plan: self.plan,
                bundle_bytes: h.arena_bytes,
                bundle_plan: h.header_crc,
            });
        }
        let t = lookup::find(bundle.contents(), key)?;
        if t.tensor.region == Region::Rows {
            return Err(LookupError::InBands {
                name: t.name().to_string(),
                id: t.id,
            });
        }
        if t.tensor.region != Region::Arena {
            return Err(LookupError::NotInArena {
                name: t.name().to_string(),
                id: t.id,
            });
        }
        // Validation put `offset + size` within the tensor's pool; checked
        // again so that no bundle can make this index out of bounds.
        let pool = t.tensor.pool as usize;
        let len = self.pools.get(pool).map_or(0, |p| p.len);
        let range = usize::try_from(t.tensor.offset)
            .ok()
            .and_then(|o| Some(o..o.checked_add(usize::try_from(t.tensor.size).ok()?)?))
            .filter(|r| r.end <= len)
            .ok_or_else(|| lookup::bad_length(t, t.tensor.size))?;
        Ok((t, pool, range))
    }

    fn pool_of(&self, pool: usize) -> &[u8] {
        self.pools.get(pool).map_or(&[], PoolMemory::bytes)
    }

    fn pool_of_mut(&mut self, pool: usize) -> &mut [u8] {
        self.pools
            .get_mut(pool)
            .map_or(&mut [], PoolMemory::bytes_mut)
    }

    /// The bytes of arena tensor `key`.
    pub fn tensor_bytes<K: TensorKey + ?Sized>(
        &self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&[u8], LookupError> {
        let (_, pool, range) = self.locate(bundle, key)?;
        Ok(self.pool_of(pool).get(range).unwrap_or(&[]))
    }

    /// The bytes of arena tensor `key`, writable.
    pub fn tensor_bytes_mut<K: TensorKey + ?Sized>(
        &mut self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&mut [u8], LookupError> {
        let (_, pool, range) = self.locate(bundle, key)?;
        Ok(self.pool_of_mut(pool).get_mut(range).unwrap_or(&mut []))
    }

    /// Copies `data`, all of tensor `key`'s bytes, into the arena: into
    /// its place, or, for an input written in bands of rows, row by row
    /// into its bands. Returns the tensor's byte size when `data` has
    /// another length (nothing is written then).
    pub fn write_bytes<K: TensorKey + ?Sized>(
        &mut self,
        bundle: &Bundle,
        key: &K,
        data: &[u8],
    ) -> Result<Result<(), u64>, LookupError> {
        let contents = bundle.contents();
        let t = lookup::find(contents, key)?;
        if data.len() as u64 != t.tensor.size {
            return Ok(Err(t.tensor.size));
        }
        if t.tensor.region != Region::Rows {
            self.tensor_bytes_mut(bundle, &t.id)?.copy_from_slice(data);
            return Ok(Ok(()));
        }
        // Validation made the bands' rows add up to the input's, with the
        // input's other dimensions: `data` is `outer` blocks of `height`
        // rows, each band takes its rows of every block.
        let shape = &t.tensor.shape;
        let axis = shape.len().saturating_sub(2);
        let row_bytes: u64 =
            shape[axis + 1..].iter().product::<u64>() * t.tensor.dtype.size_bytes();
        let height = shape.get(axis).copied().unwrap_or(0);
        let block = usize::try_from(height * row_bytes).unwrap_or(usize::MAX);
        let mut first_row = 0u64;
        for (band, b) in contents.tensors.iter().enumerate() {
            if b.alias_of != Some((stow_bundle::AliasKind::InputRows, t.id)) {
                continue;
            }
            let rows = b.shape.get(axis).copied().unwrap_or(0);
            let (start, len) = (first_row * row_bytes, rows * row_bytes);
            let (start, len) = (start as usize, len as usize);
            let dst = self.tensor_bytes_mut(bundle, &(band as u32))?;
            for (out, src) in dst
                .chunks_exact_mut(len.max(1))
                .zip(data.chunks_exact(block.max(1)))
            {
                out.copy_from_slice(&src[start..start + len]);
            }
            first_row += rows;
        }
        Ok(Ok(()))
    }

    /// Arena tensor `key` as a slice of `T`, which must match its element
    /// type. Inputs, outputs and activations all live here.
    pub fn tensor<T: Element, K: TensorKey + ?Sized>(
        &self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&[T], LookupError> {
        let (t, pool, range) = self.locate(bundle, key)?;
        lookup::check_dtype::<T>(t)?;
        lookup::cast(t, self.pool_of(pool).get(range).unwrap_or(&[]))
    }

    /// Arena tensor `key` as a writable slice of `T` (to fill an input,
    /// or for a kernel to write its output).
    pub fn tensor_mut<T: Element, K: TensorKey + ?Sized>(
        &mut self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&mut [T], LookupError> {
        let (t, pool, range) = self.locate(bundle, key)?;
        lookup::check_dtype::<T>(t)?;
        lookup::cast_mut(t, self.pool_of_mut(pool).get_mut(range).unwrap_or(&mut []))
    }
}

impl core::fmt::Debug for Arena<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Arena")
            .field("len", &self.len())
            .field("align", &self.align())
            .field("pools", &self.pools.len())
            .field(
                "address",
                &format_args!("{:#x}", self.bytes().as_ptr() as usize),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RuntimeError;
    use alloc::boxed::Box;

    /// A 64-aligned buffer of at least `len` bytes, leaked (bundles read
    /// from memory borrow their bytes for `'static`).
    fn aligned(len: usize) -> &'static mut [u8] {
        let blocks = Box::leak(vec![Chunk([0xA5; CHUNK]); len / CHUNK + 2].into_boxed_slice());
        bytemuck::cast_slice_mut(blocks)
    }

    /// `stow_bundle::testing::sample_bytes`, in place at a 64-byte boundary.
    fn sample() -> Bundle {
        let bytes = stow_bundle::testing::sample_bytes();
        let buffer = aligned(bytes.len());
        buffer[..bytes.len()].copy_from_slice(&bytes);
        Bundle::from_static(&buffer[..bytes.len()]).unwrap()
    }

    #[test]
    fn bundle_bytes_off_a_64_byte_boundary_are_refused() {
        let bytes = stow_bundle::testing::sample_bytes();
        let buffer = aligned(bytes.len() + 8);
        buffer[8..8 + bytes.len()].copy_from_slice(&bytes);
        let e = Bundle::from_static(&buffer[8..8 + bytes.len()]).unwrap_err();
        assert!(
            matches!(e, RuntimeError::Misaligned { align: 64, .. }),
            "{e}"
        );
        let b = sample();
        assert!(crate::shown(&b.path_owned())
            .to_string()
            .starts_with("<memory at 0x"));
        b.verify_weights().unwrap();
        #[cfg(feature = "std")]
        b.release_host_pages().unwrap();
    }

    #[test]
    fn a_caller_buffer_must_be_aligned_and_large_enough_and_is_zeroed() {
        let b = sample();
        let need = b.header().arena_bytes as usize;
        assert!(need > 0);
        let buffer = aligned(need + 64);
        let e = Arena::in_buffer(&b, &mut buffer[1..]).unwrap_err();
        assert!(matches!(e, ArenaError::Misaligned { align: 64, .. }), "{e}");
        let e = Arena::in_buffer(&b, &mut buffer[..need - 1]).unwrap_err();
        assert!(matches!(e, ArenaError::TooSmall { .. }), "{e}");
        assert!(e.to_string().contains(&format!(
            "holds {} bytes, the bundle needs {need}",
            need - 1
        )));
        let start = buffer.as_ptr() as usize;
        let arena = Arena::in_buffer(&b, buffer).unwrap();
        assert_eq!((arena.len(), arena.align()), (need, 64));
        assert_eq!(
            arena.bytes().as_ptr() as usize,
            start,
            "the arena is the buffer"
        );
        assert!(arena.bytes().iter().all(|&x| x == 0), "the arena is zeroed");
    }
}
