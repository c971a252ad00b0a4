//! The TENSORS, STRINGS and SHAPES sections: one fixed [`TensorRecord`] per
//! tensor, which a C reader can use without protobuf, and the names and
//! dimensions the records point into.
//!
//! The encoding is canonical: record `i` has id `i`; names are stored in
//! record order with no gaps, so each `name_offset` is the sum of the
//! earlier `name_len`s and STRINGS ends with the last name; likewise
//! `dims_index` is the sum of the earlier ranks and SHAPES holds exactly the
//! total rank of u64s.

use crate::contents::{AliasKind, DType, Region, Tensor, TensorKind};
use crate::error::BundleError;
use crate::format::{
    TensorRecord, NO_ALIAS, REGION_CODE_MASK, REGION_POOL_SHIFT, TENSOR_RECORD_LEN, WEIGHT_ALIGN,
};
use crate::sections::slice;
use alloc::string::ToString;
use alloc::vec::Vec;

/// The three sections' bodies.
pub(crate) struct Encoded {
    pub records: Vec<u8>,
    pub strings: Vec<u8>,
    pub shapes: Vec<u8>,
}

fn too_many(what: &'static str, count: usize) -> BundleError {
    BundleError::TooMany {
        what,
        count: count as u64,
        limit: u32::MAX.into(),
    }
}

/// Encodes tensors (already checked with [`check_tensor`]).
pub(crate) fn encode(tensors: &[Tensor]) -> Result<Encoded, BundleError> {
    let mut out = Encoded {
        records: Vec::with_capacity(tensors.len() * TENSOR_RECORD_LEN),
        strings: Vec::new(),
        shapes: Vec::new(),
    };
    let mut dims = 0usize;
    for (i, t) in tensors.iter().enumerate() {
        let u32_of = |what, n: usize| u32::try_from(n).map_err(|_| too_many(what, n));
        let record = TensorRecord {
            id: u32_of("tensors", i)?,
            kind: t.kind as u32,
            dtype: t.dtype as u32,
            region: t.region as u32 | t.pool << REGION_POOL_SHIFT,
            offset: t.offset,
            size: t.size,
            first_step: t.first_step,
            last_step: t.last_step,
            alias_kind: t.alias_of.map_or(0, |(k, _)| k as u32),
            alias_of: t.alias_of.map_or(NO_ALIAS, |(_, of)| of),
            name_offset: u32_of("bytes of tensor names", out.strings.len())?,
            name_len: u32_of("bytes of one tensor name", t.name.len())?,
            dims_index: u32_of("dimensions", dims)?,
            rank: u32_of("dimensions of one tensor", t.shape.len())?,
        };
        out.records.extend_from_slice(bytemuck::bytes_of(&record));
        out.strings.extend_from_slice(t.name.as_bytes());
        for d in &t.shape {
            out.shapes.extend_from_slice(&d.to_le_bytes());
        }
        dims += t.shape.len();
    }
    // The running offsets are u32: the totals must fit too, or the last
    // record's name or dimensions would be out of reach.
    u32::try_from(out.strings.len())
        .map_err(|_| too_many("bytes of tensor names", out.strings.len()))?;
    u32::try_from(dims).map_err(|_| too_many("dimensions", dims))?;
    Ok(out)
}

/// Decodes and validates every record (`records.len()` is a multiple of
/// [`TENSOR_RECORD_LEN`], checked by the caller) against the pool sizes
/// (the arena alone in a bundle without pools) and the weight section
/// length.
pub(crate) fn decode(
    records: &[u8],
    strings: &[u8],
    shapes: &[u8],
    pool_bytes: &[u64],
    weights_len: u64,
) -> Result<Vec<Tensor>, BundleError> {
    let count = records.len() / TENSOR_RECORD_LEN;
    let mut tensors = Vec::with_capacity(count);
    let mut name_cursor = 0u64;
    let mut dims_cursor = 0u64;
    for (index, raw) in records.chunks_exact(TENSOR_RECORD_LEN).enumerate() {
        let r: TensorRecord = bytemuck::pod_read_unaligned(raw);
        let bad = |field: &'static str, value: u64| BundleError::BadField {
            index,
            field,
            value,
        };
        if r.id as usize != index {
            return Err(bad("id", r.id.into()));
        }
        let kind = TensorKind::from_code(r.kind).ok_or_else(|| bad("kind", r.kind.into()))?;
        let dtype = DType::from_code(r.dtype).ok_or_else(|| bad("dtype", r.dtype.into()))?;
        let region = Region::from_code(r.region & REGION_CODE_MASK)
            .ok_or_else(|| bad("region", r.region.into()))?;
        let alias_of = match (r.alias_kind, r.alias_of) {
            (0, NO_ALIAS) => None,
            (0, of) => return Err(bad("alias_of", of.into())),
            (k, of) => Some((
                AliasKind::from_code(k).ok_or_else(|| bad("alias_kind", k.into()))?,
                of,
            )),
        };
        if u64::from(r.name_offset) != name_cursor {
            return Err(bad("name_offset", r.name_offset.into()));
        }
        let name = slice(strings, name_cursor, r.name_len.into())
            .ok_or_else(|| bad("name_len", r.name_len.into()))?;
        let name = core::str::from_utf8(name).map_err(|_| BundleError::BadName {
            index,
            offset: name_cursor,
        })?;
        name_cursor += u64::from(r.name_len);
        if u64::from(r.dims_index) != dims_cursor {
            return Err(bad("dims_index", r.dims_index.into()));
        }
        let dims = slice(shapes, dims_cursor * 8, u64::from(r.rank) * 8)
            .ok_or_else(|| bad("rank", r.rank.into()))?;
        dims_cursor += u64::from(r.rank);
        let (dims, _) = dims.as_chunks::<8>();
        let tensor = Tensor {
            name: name.to_string(),
            kind,
            dtype,
            shape: dims.iter().map(|d| u64::from_le_bytes(*d)).collect(),
            region,
            offset: r.offset,
            size: r.size,
            first_step: r.first_step,
            last_step: r.last_step,
            alias_of,
            pool: r.region >> REGION_POOL_SHIFT,
            quant: None,
        };
        check_tensor(index, &tensor, count, pool_bytes, weights_len)?;
        tensors.push(tensor);
    }
    let unused = |kind, expected, found: usize| BundleError::SectionSize {
        kind,
        expected,
        found: found as u64,
    };
    if name_cursor != strings.len() as u64 {
        return Err(unused("strings", name_cursor, strings.len()));
    }
    if dims_cursor * 8 != shapes.len() as u64 {
        return Err(unused("shapes", dims_cursor * 8, shapes.len()));
    }
    Ok(tensors)
}

/// Weights, and only weights, live in the weight region.
pub(crate) fn check_role(index: usize, t: &Tensor) -> Result<(), BundleError> {
    if (t.kind == TensorKind::Weight) != (t.region == Region::Weights) {
        return Err(BundleError::BadField {
            index,
            field: "region",
            value: t.region as u64,
        });
    }
    Ok(())
}

/// The rules every tensor obeys, in files and in writer input: weights
/// (and only they) live in the weight region, 64-aligned; an arena tensor's
/// pool exists (weights are in pool 0); size equals the shape's bytes; the
/// bytes lie inside the region (the tensor's pool); `first_step <=
/// last_step`; an alias names an existing tensor.
pub(crate) fn check_tensor(
    index: usize,
    t: &Tensor,
    count: usize,
    pool_bytes: &[u64],
    weights_len: u64,
) -> Result<(), BundleError> {
    let bad = |field: &'static str, value: u64| BundleError::BadField {
        index,
        field,
        value,
    };
    check_role(index, t)?;
    let pool_limit = pool_bytes.get(t.pool as usize).copied();
    if pool_limit.is_none() || (t.region == Region::Weights && t.pool != 0) {
        return Err(bad(
            "region",
            (t.region as u32 | t.pool << REGION_POOL_SHIFT).into(),
        ));
    }
    let expected = t.shape_bytes();
    if expected != Some(t.size) {
        return Err(BundleError::ShapeSize {
            index,
            size: t.size,
            shape: t.shape.clone(),
            dtype: t.dtype.name(),
            expected: expected.unwrap_or(u64::MAX),
        });
    }
    let limit = match t.region {
        Region::Arena => pool_limit.unwrap_or(0),
        Region::Weights => weights_len,
        // Bytes of its own: none; `size` is the bands' total.
        Region::Rows => {
            if t.kind != TensorKind::Input || t.pool != 0 {
                return Err(bad("region", t.region as u64));
            }
            if t.offset != 0 {
                return Err(bad("offset", t.offset));
            }
            u64::MAX
        }
    };
    if t.offset.checked_add(t.size).is_none_or(|end| end > limit) {
        return Err(BundleError::OutOfRegion {
            index,
            region: t.region.name(),
            offset: t.offset,
            size: t.size,
            limit,
        });
    }
    if t.region == Region::Weights && !t.offset.is_multiple_of(WEIGHT_ALIGN) {
        return Err(bad("offset", t.offset));
    }
    if t.first_step > t.last_step {
        return Err(bad("last_step", t.last_step.into()));
    }
    if let Some((_, of)) = t.alias_of {
        if of as usize >= count {
            return Err(bad("alias_of", of.into()));
        }
    }
    Ok(())
}
