//! Finding tensors by id or name, and reinterpreting their bytes as typed
//! slices without copying.

use alloc::string::{String, ToString};
use bytemuck::{Pod, PodCastError, Zeroable};
use stow_bundle::{Contents, DType, Tensor};
use thiserror::Error;

/// Why a tensor lookup or typed view failed. Every variant that concerns a
/// found tensor names it and gives its id.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LookupError {
    /// No tensor has this id.
    #[error("no tensor has id {id} (the bundle has {count} tensors)")]
    UnknownId {
        /// The id asked for.
        id: u32,
        /// Number of tensors in the bundle.
        count: usize,
    },
    /// No tensor has this name.
    #[error("no tensor is named `{name}`")]
    UnknownName {
        /// The name asked for.
        name: String,
    },
    /// More than one tensor has this name (the format allows repeated
    /// names); look it up by id instead.
    #[error("tensor name `{name}` is ambiguous: ids {first} and {second} both have it")]
    AmbiguousName {
        /// The name asked for.
        name: String,
        /// The first tensor with it.
        first: u32,
        /// The second tensor with it.
        second: u32,
    },
    /// The tensor's element type is not the one asked for.
    #[error("tensor `{name}` (id {id}) holds {stored}, not {requested}")]
    WrongDType {
        /// Tensor name.
        name: String,
        /// Tensor id.
        id: u32,
        /// Its element type.
        stored: DType,
        /// The element type asked for.
        requested: DType,
    },
    /// A weight was asked for, but the tensor lives in the arena.
    #[error("tensor `{name}` (id {id}) is not a weight: it lives in the arena")]
    NotAWeight {
        /// Tensor name.
        name: String,
        /// Tensor id.
        id: u32,
    },
    /// An arena tensor was asked for, but the tensor is a weight.
    #[error("tensor `{name}` (id {id}) is a weight, not an arena tensor; use Bundle::weight")]
    NotInArena {
        /// Tensor name.
        name: String,
        /// Tensor id.
        id: u32,
    },
    /// The input is written in bands of rows (a patched stage reads it
    /// so): it has no place of its own in the arena to hand out.
    #[error("input `{name}` (id {id}) is written in bands of rows and has no place of its own in the arena; copy it in with Session::write_input_bytes or set_input (C: stow_session_set_input)")]
    InBands {
        /// Tensor name.
        name: String,
        /// Tensor id.
        id: u32,
    },
    /// The tensor's bytes do not start at a multiple of the element
    /// type's alignment (a weight of a bundle held in an unaligned buffer,
    /// or an arena tensor at an odd offset).
    #[error("tensor `{name}` (id {id}) starts at address {address:#x}, not a multiple of {align} as its element type needs")]
    Misaligned {
        /// Tensor name.
        name: String,
        /// Tensor id.
        id: u32,
        /// Address of its first byte.
        address: usize,
        /// Alignment the element type needs.
        align: usize,
    },
    /// The tensor's byte length is not a whole number of elements, or its
    /// bytes are not where the record says (neither happens in a bundle
    /// that passed validation; checked anyway).
    #[error("tensor `{name}` (id {id}) has {bytes} bytes, which is not {elements} elements of {element_size} bytes")]
    BadLength {
        /// Tensor name.
        name: String,
        /// Tensor id.
        id: u32,
        /// Bytes found.
        bytes: u64,
        /// Elements the shape asks for.
        elements: u64,
        /// Bytes per element.
        element_size: u64,
    },
    /// The arena was made for another bundle (a different plan).
    #[error("this arena was allocated for another bundle (arena of {arena_bytes} bytes, plan checksum {arena_plan:#010x}; the bundle's are {bundle_bytes} bytes, {bundle_plan:#010x})")]
    WrongBundle {
        /// Size of the arena.
        arena_bytes: u64,
        /// Plan fingerprint the arena was made for.
        arena_plan: u32,
        /// Arena size the bundle plans.
        bundle_bytes: u64,
        /// The bundle's plan fingerprint.
        bundle_plan: u32,
    },
    /// Bundles are little-endian; typed views of multi-byte elements are
    /// only offered on little-endian hosts (use the byte views elsewhere).
    #[error("typed views of {dtype} need a little-endian host")]
    ByteOrder {
        /// The element type asked for.
        dtype: DType,
    },
}

/// A way to name a tensor: its id (`u32`) or its name (`&str`,
/// `String`). Names are looked up by a linear scan that also rejects
/// repeated names, so hot paths should resolve a name to an id once
/// ([`crate::Bundle::tensor`]) and use the id afterwards.
pub trait TensorKey {
    /// The id of the tensor this key names in `contents`.
    fn resolve(&self, contents: &Contents) -> Result<u32, LookupError>;
}

impl TensorKey for u32 {
    fn resolve(&self, contents: &Contents) -> Result<u32, LookupError> {
        if (*self as usize) < contents.tensors.len() {
            Ok(*self)
        } else {
            Err(LookupError::UnknownId {
                id: *self,
                count: contents.tensors.len(),
            })
        }
    }
}

impl TensorKey for str {
    fn resolve(&self, contents: &Contents) -> Result<u32, LookupError> {
        let mut found = contents
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.name == self)
            // The reader caps the tensor count at 2^24, so ids fit in u32.
            .map(|(i, _)| i as u32);
        match (found.next(), found.next()) {
            (Some(id), None) => Ok(id),
            (Some(first), Some(second)) => Err(LookupError::AmbiguousName {
                name: self.to_string(),
                first,
                second,
            }),
            (None, _) => Err(LookupError::UnknownName {
                name: self.to_string(),
            }),
        }
    }
}

impl TensorKey for String {
    fn resolve(&self, contents: &Contents) -> Result<u32, LookupError> {
        self.as_str().resolve(contents)
    }
}

impl<K: TensorKey + ?Sized> TensorKey for &K {
    fn resolve(&self, contents: &Contents) -> Result<u32, LookupError> {
        (**self).resolve(contents)
    }
}

/// A Rust type whose values are stored, bit for bit, as elements of the
/// bundle type [`Element::DTYPE`].
pub trait Element: Pod {
    /// The bundle element type.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t {
            const DTYPE: DType = DType::$d;
        })*
    };
}

element!(
    f32 => F32, f64 => F64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
);

/// An IEEE half-precision float as its raw bits (the crate does no f16
/// arithmetic; convert with a crate such as `half`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
#[repr(transparent)]
pub struct F16Bits(pub u16);

/// A boolean element as its stored byte: 0 is false, anything else true.
/// (`bool` itself cannot be viewed in place, since only 0 and 1 are valid
/// `bool`s and an arena or a hostile bundle may hold other bytes.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
#[repr(transparent)]
pub struct BoolByte(pub u8);

impl BoolByte {
    /// The truth value.
    pub fn get(self) -> bool {
        self.0 != 0
    }
}

element!(F16Bits => F16, BoolByte => Bool);

/// A tensor found in a bundle, with its id.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorRef<'a> {
    /// Its id (index in the tensor table).
    pub id: u32,
    /// Its record.
    pub tensor: &'a Tensor,
}

impl<'a> TensorRef<'a> {
    /// Name.
    pub fn name(&self) -> &'a str {
        &self.tensor.name
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.tensor.dtype
    }

    /// Dimensions, row-major.
    pub fn shape(&self) -> &'a [u64] {
        &self.tensor.shape
    }

    /// Byte length.
    pub fn size_bytes(&self) -> u64 {
        self.tensor.size
    }
}

/// The tensor `key` names.
pub(crate) fn find<'a, K: TensorKey + ?Sized>(
    contents: &'a Contents,
    key: &K,
) -> Result<TensorRef<'a>, LookupError> {
    let id = key.resolve(contents)?;
    let tensor = contents
        .tensors
        .get(id as usize)
        .ok_or(LookupError::UnknownId {
            id,
            count: contents.tensors.len(),
        })?;
    Ok(TensorRef { id, tensor })
}

/// Checks that `t` holds `T`s.
pub(crate) fn check_dtype<T: Element>(t: TensorRef<'_>) -> Result<(), LookupError> {
    if t.dtype() != T::DTYPE {
        return Err(LookupError::WrongDType {
            name: t.name().to_string(),
            id: t.id,
            stored: t.dtype(),
            requested: T::DTYPE,
        });
    }
    if cfg!(target_endian = "big") && core::mem::size_of::<T>() > 1 {
        return Err(LookupError::ByteOrder { dtype: T::DTYPE });
    }
    Ok(())
}

fn cast_error(
    t: TensorRef<'_>,
    e: PodCastError,
    address: usize,
    size: usize,
    align: usize,
) -> LookupError {
    match e {
        PodCastError::TargetAlignmentGreaterAndInputNotAligned
        | PodCastError::AlignmentMismatch => LookupError::Misaligned {
            name: t.name().to_string(),
            id: t.id,
            address,
            align,
        },
        PodCastError::OutputSliceWouldHaveSlop | PodCastError::SizeMismatch => {
            bad_length(t, size as u64)
        }
    }
}

pub(crate) fn bad_length(t: TensorRef<'_>, bytes: u64) -> LookupError {
    let element_size = t.dtype().size_bytes();
    LookupError::BadLength {
        name: t.name().to_string(),
        id: t.id,
        bytes,
        elements: t.tensor.shape_bytes().unwrap_or(0) / element_size,
        element_size,
    }
}

/// `bytes` as `&[T]`, checked for alignment and whole elements.
pub(crate) fn cast<'b, T: Element>(
    t: TensorRef<'_>,
    bytes: &'b [u8],
) -> Result<&'b [T], LookupError> {
    bytemuck::try_cast_slice(bytes).map_err(|e| {
        cast_error(
            t,
            e,
            bytes.as_ptr() as usize,
            bytes.len(),
            core::mem::align_of::<T>(),
        )
    })
}

/// `bytes` as `&mut [T]`, checked for alignment and whole elements.
pub(crate) fn cast_mut<'b, T: Element>(
    t: TensorRef<'_>,
    bytes: &'b mut [u8],
) -> Result<&'b mut [T], LookupError> {
    let (address, len) = (bytes.as_ptr() as usize, bytes.len());
    bytemuck::try_cast_slice_mut(bytes)
        .map_err(|e| cast_error(t, e, address, len, core::mem::align_of::<T>()))
}
