//! The POOLS section: one fixed [`PoolRecord`] per memory pool of a bundle
//! whose arena is split across memories (header flag
//! [`FLAG_POOLS`](crate::format::FLAG_POOLS)). Pool 0 is the header's arena.

use crate::contents::MemoryPool;
use crate::error::BundleError;
use crate::format::{PoolRecord, MAX_POOLS, POOL_NAME_LEN, POOL_RECORD_LEN};
use alloc::format;
use alloc::string::ToString;
use alloc::vec::Vec;

fn bad(index: usize, problem: impl Into<alloc::string::String>) -> BundleError {
    BundleError::BadPool {
        index,
        problem: problem.into(),
    }
}

/// The rules every pool list obeys, in files and in writer input: 1 to
/// [`MAX_POOLS`] pools; names of 1 to 16 bytes without NUL, unique;
/// power-of-two alignments; pool 0 equal to the header's arena.
pub(crate) fn check(
    pools: &[MemoryPool],
    arena_bytes: u64,
    arena_align: u64,
) -> Result<(), BundleError> {
    if pools.is_empty() || pools.len() > MAX_POOLS as usize {
        return Err(bad(
            0,
            format!("{} pools declared, 1 to {MAX_POOLS} allowed", pools.len()),
        ));
    }
    for (i, p) in pools.iter().enumerate() {
        if p.name.is_empty() || p.name.len() > POOL_NAME_LEN || p.name.contains('\0') {
            return Err(bad(
                i,
                format!(
                    "name `{}` is not 1 to {POOL_NAME_LEN} bytes without NUL",
                    p.name
                ),
            ));
        }
        if pools[..i].iter().any(|q| q.name == p.name) {
            return Err(bad(i, format!("name `{}` is used twice", p.name)));
        }
        if !p.align.is_power_of_two() {
            return Err(bad(
                i,
                format!("alignment {} is not a power of two", p.align),
            ));
        }
    }
    let first = &pools[0];
    if (first.bytes, first.align) != (arena_bytes, arena_align) {
        return Err(bad(
            0,
            format!(
                "{} bytes aligned to {}, but the header's arena is {arena_bytes} aligned to {arena_align}",
                first.bytes, first.align
            ),
        ));
    }
    Ok(())
}

/// The section's bytes for `pools` (already checked).
pub(crate) fn encode(pools: &[MemoryPool]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pools.len() * POOL_RECORD_LEN);
    for p in pools {
        let mut name = [0u8; POOL_NAME_LEN];
        let n = p.name.len().min(POOL_NAME_LEN);
        name[..n].copy_from_slice(&p.name.as_bytes()[..n]);
        let record = PoolRecord {
            bytes: p.bytes,
            align: p.align,
            name,
        };
        out.extend_from_slice(bytemuck::bytes_of(&record));
    }
    out
}

/// Decodes and checks the section's bytes.
pub(crate) fn decode(
    bytes: &[u8],
    arena_bytes: u64,
    arena_align: u64,
) -> Result<Vec<MemoryPool>, BundleError> {
    if !bytes.len().is_multiple_of(POOL_RECORD_LEN)
        || bytes.len() > MAX_POOLS as usize * POOL_RECORD_LEN
    {
        return Err(BundleError::SectionSize {
            kind: "pools",
            expected: (bytes.len() / POOL_RECORD_LEN * POOL_RECORD_LEN)
                .min(MAX_POOLS as usize * POOL_RECORD_LEN) as u64,
            found: bytes.len() as u64,
        });
    }
    let mut pools = Vec::with_capacity(bytes.len() / POOL_RECORD_LEN);
    for (i, raw) in bytes.chunks_exact(POOL_RECORD_LEN).enumerate() {
        let r: PoolRecord = bytemuck::pod_read_unaligned(raw);
        let len = r.name.iter().position(|&b| b == 0).unwrap_or(POOL_NAME_LEN);
        if r.name[len..].iter().any(|&b| b != 0) {
            return Err(bad(i, "bytes after the name's end are not zero"));
        }
        let name =
            core::str::from_utf8(&r.name[..len]).map_err(|_| bad(i, "the name is not UTF-8"))?;
        pools.push(MemoryPool {
            name: name.to_string(),
            bytes: r.bytes,
            align: r.align,
        });
    }
    check(&pools, arena_bytes, arena_align)?;
    Ok(pools)
}
