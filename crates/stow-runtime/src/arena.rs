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
/// static memory on a device).
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
    storage: Storage<'a>,
    /// Byte offset of the arena's first byte in the storage (non-zero
    /// only for an allocation aligned above 64).
    start: usize,
    len: usize,
    align: u64,
    plan: u32,
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

impl<'a> Arena<'a> {
    /// Places the arena `bundle` plans at the start of `buffer` and zeroes
    /// it; nothing is allocated. The buffer must start at a multiple of
    /// the bundle's `arena_align` ([`ArenaError::Misaligned`]) and hold at
    /// least `arena_bytes` ([`ArenaError::TooSmall`]); bytes beyond are
    /// left alone.
    pub fn in_buffer(bundle: &Bundle, buffer: &'a mut [u8]) -> Result<Arena<'a>, ArenaError> {
        let h = bundle.header();
        let path = || bundle.path_owned();
        let align = h.arena_align.max(1);
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
        let len = usize::try_from(h.arena_bytes)
            .ok()
            .filter(|&n| n <= buffer.len())
            .ok_or_else(|| ArenaError::TooSmall {
                path: path(),
                given: buffer.len(),
                need: h.arena_bytes,
            })?;
        buffer[..len].fill(0);
        Ok(Arena {
            storage: Storage::Borrowed(buffer),
            start: 0,
            len,
            align,
            plan: h.header_crc,
        })
    }
}

impl Arena<'static> {
    /// Allocates the arena `bundle` plans, zeroed. Fails, rather than
    /// aborting, when the allocation is refused.
    pub fn new(bundle: &Bundle) -> Result<Arena<'static>, ArenaError> {
        let h = bundle.header();
        let path = || bundle.path_owned();
        let bytes = h.arena_bytes;
        let align = h.arena_align.max(1);
        if align > MAX_ARENA_ALIGN {
            return Err(ArenaError::Alignment {
                path: path(),
                align: h.arena_align,
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
        Ok(Arena {
            storage: Storage::Allocated(chunks),
            start,
            len,
            align,
            plan: h.header_crc,
        })
    }
}

impl Arena<'_> {
    /// The arena's bytes.
    pub fn bytes(&self) -> &[u8] {
        // `start + len` fits: `new` allocated, and `in_buffer` checked, at
        // least that much.
        let all = self.storage.all();
        all.get(self.start..self.start + self.len).unwrap_or(&[])
    }

    /// The arena's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let (start, len) = (self.start, self.len);
        let all = self.storage.all_mut();
        all.get_mut(start..start + len).unwrap_or(&mut [])
    }

    /// Size in bytes (the planned `arena_bytes`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a model whose plan needs no arena bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The alignment of the first byte (the bundle's `arena_align`).
    pub fn align(&self) -> u64 {
        self.align
    }

    /// Fills the arena with zeros.
    pub fn clear(&mut self) {
        self.bytes_mut().fill(0);
    }

    /// The arena tensor `key` names, after checking that this arena was
    /// made for `bundle`.
    fn locate<'b, K: TensorKey + ?Sized>(
        &self,
        bundle: &'b Bundle,
        key: &K,
    ) -> Result<(TensorRef<'b>, core::ops::Range<usize>), LookupError> {
        let h = bundle.header();
        if h.header_crc != self.plan || h.arena_bytes != self.len as u64 {
            return Err(LookupError::WrongBundle {
                arena_bytes: self.len as u64,
                arena_plan: self.plan,
                bundle_bytes: h.arena_bytes,
                bundle_plan: h.header_crc,
            });
        }
        let t = lookup::find(bundle.contents(), key)?;
        if t.tensor.region != Region::Arena {
            return Err(LookupError::NotInArena {
                name: t.name().to_string(),
                id: t.id,
            });
        }
        // Validation put `offset + size` within `arena_bytes`; checked
        // again so that no bundle can make this index out of bounds.
        let range = usize::try_from(t.tensor.offset)
            .ok()
            .and_then(|o| Some(o..o.checked_add(usize::try_from(t.tensor.size).ok()?)?))
            .filter(|r| r.end <= self.len)
            .ok_or_else(|| lookup::bad_length(t, t.tensor.size))?;
        Ok((t, range))
    }

    /// The bytes of arena tensor `key`.
    pub fn tensor_bytes<K: TensorKey + ?Sized>(
        &self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&[u8], LookupError> {
        let (_, range) = self.locate(bundle, key)?;
        Ok(self.bytes().get(range).unwrap_or(&[]))
    }

    /// The bytes of arena tensor `key`, writable.
    pub fn tensor_bytes_mut<K: TensorKey + ?Sized>(
        &mut self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&mut [u8], LookupError> {
        let (_, range) = self.locate(bundle, key)?;
        Ok(self.bytes_mut().get_mut(range).unwrap_or(&mut []))
    }

    /// Arena tensor `key` as a slice of `T`, which must match its element
    /// type. Inputs, outputs and activations all live here.
    pub fn tensor<T: Element, K: TensorKey + ?Sized>(
        &self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&[T], LookupError> {
        let (t, range) = self.locate(bundle, key)?;
        lookup::check_dtype::<T>(t)?;
        lookup::cast(t, self.bytes().get(range).unwrap_or(&[]))
    }

    /// Arena tensor `key` as a writable slice of `T` (to fill an input,
    /// or for a kernel to write its output).
    pub fn tensor_mut<T: Element, K: TensorKey + ?Sized>(
        &mut self,
        bundle: &Bundle,
        key: &K,
    ) -> Result<&mut [T], LookupError> {
        let (t, range) = self.locate(bundle, key)?;
        lookup::check_dtype::<T>(t)?;
        lookup::cast_mut(t, self.bytes_mut().get_mut(range).unwrap_or(&mut []))
    }
}

impl core::fmt::Debug for Arena<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Arena")
            .field("len", &self.len)
            .field("align", &self.align)
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
