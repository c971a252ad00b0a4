//! The writer: validates [`Contents`] and weight bytes, lays the file out
//! deterministically (fixed section order, zero padding), parses its own
//! output with the reader. Writing a file is in `file.rs` (feature `std`).

use crate::checksum::crc32;
use crate::contents::{Contents, Region};
use crate::error::BundleError;
use crate::format::{
    kind, Header, SectionEntry, HEADER_LEN, MAGIC, MAX_ITEMS, SECTION_ENTRY_LEN, VERSION,
    WEIGHT_ALIGN,
};
use crate::read::BundleView;
use crate::{header, meta, pools, records};
use alloc::vec;
use alloc::vec::Vec;

/// One section to lay out: `len` bytes, zero except for `pieces`
/// (offset within the section, bytes).
pub(crate) struct Body<'a> {
    pub kind: u32,
    pub align: u64,
    pub len: u64,
    pub pieces: Vec<(u64, &'a [u8])>,
}

impl<'a> Body<'a> {
    pub(crate) fn whole(kind: u32, align: u64, bytes: &'a [u8]) -> Body<'a> {
        Body {
            kind,
            align,
            len: bytes.len() as u64,
            pieces: vec![(0, bytes)],
        }
    }
}

fn usize_of(n: u64) -> usize {
    // Only used for sizes of buffers that exist in memory.
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Lays out `header` (whose `file_len`, `section_count` and `header_crc`
/// are filled in here) and `bodies` in order, each at the next multiple of
/// its alignment, with zero padding, and seals every checksum. Performs no
/// validation: the caller decides what goes in.
pub(crate) fn assemble(mut header: Header, bodies: &[Body<'_>]) -> Vec<u8> {
    let table_end = HEADER_LEN + SECTION_ENTRY_LEN * bodies.len();
    let mut total = table_end as u64;
    for b in bodies {
        total = total.next_multiple_of(b.align.max(1)) + b.len;
    }
    let mut out = Vec::with_capacity(usize_of(total));
    out.resize(table_end, 0);
    let mut entries = Vec::with_capacity(bodies.len());
    for b in bodies {
        let offset = (out.len() as u64).next_multiple_of(b.align.max(1));
        out.resize(usize_of(offset), 0);
        let start = out.len();
        out.resize(start + usize_of(b.len), 0);
        for &(at, piece) in &b.pieces {
            let at = start + usize_of(at);
            out[at..at + piece.len()].copy_from_slice(piece);
        }
        entries.push(SectionEntry {
            kind: b.kind,
            align: u32::try_from(b.align).unwrap_or(u32::MAX),
            offset,
            length: b.len,
            crc: crc32(&out[start..]),
            reserved: 0,
        });
    }
    for (i, e) in entries.iter().enumerate() {
        let at = HEADER_LEN + i * SECTION_ENTRY_LEN;
        out[at..at + SECTION_ENTRY_LEN].copy_from_slice(bytemuck::bytes_of(e));
    }
    header.file_len = out.len() as u64;
    header.section_count = u32::try_from(bodies.len()).unwrap_or(u32::MAX);
    header.header_crc = 0;
    out[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&header));
    header.header_crc = header::header_crc(&out[..table_end]).unwrap_or(0);
    out[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&header));
    out
}

/// Encodes a bundle.
///
/// `weights[i]` holds the raw little-endian bytes of tensor `i` when it is
/// a weight (`region == Region::Weights`, exactly `size` bytes) and is empty
/// for arena tensors. The writer assigns weight offsets itself, in tensor
/// order, each at the next multiple of [`WEIGHT_ALIGN`] in the weight
/// section; the `offset` of weight tensors in `contents` is ignored and the
/// assigned offsets are what the file (and a reader's `contents()`)
/// carries. Arena offsets are kept as given.
///
/// The input must obey the same rules the reader enforces (see
/// `docs/FORMAT.md`, "Validation"): counts within the caps, a power-of-two
/// arena alignment, weights (and only weights) in the weight region, sizes
/// equal to the shape's bytes, arena tensors inside `arena_bytes`,
/// `first_step <= last_step`, and every tensor id (aliases, graph inputs
/// and outputs, operator operands) in range. The output is deterministic,
/// and is parsed back (weights checksum included) before it is returned.
pub fn to_bytes(contents: &Contents, weights: &[&[u8]]) -> Result<Vec<u8>, BundleError> {
    let n = contents.tensors.len();
    if weights.len() != n {
        return Err(BundleError::WeightCount {
            tensors: n,
            slices: weights.len(),
        });
    }
    for (what, count) in [("tensors", n), ("ops", contents.ops.len())] {
        if count as u64 > u64::from(MAX_ITEMS) {
            return Err(BundleError::TooMany {
                what,
                count: count as u64,
                limit: MAX_ITEMS.into(),
            });
        }
    }
    if !contents.arena_align.is_power_of_two() {
        return Err(BundleError::BadArenaAlign {
            align: contents.arena_align,
        });
    }
    let mut c = contents.clone();
    let mut pieces: Vec<(u64, &[u8])> = Vec::new();
    let mut weights_len = 0u64;
    for (index, (t, &w)) in c.tensors.iter_mut().zip(weights).enumerate() {
        records::check_role(index, t)?;
        let expected = match t.region {
            Region::Weights => t.size,
            Region::Arena | Region::Rows => 0,
        };
        if w.len() as u64 != expected {
            return Err(BundleError::WeightBytes {
                index,
                name: t.name.clone(),
                expected,
                found: w.len() as u64,
            });
        }
        if t.region == Region::Weights {
            t.offset = weights_len.next_multiple_of(WEIGHT_ALIGN);
            pieces.push((t.offset, w));
            // Bounded by the sum of slice lengths held in memory.
            weights_len = t.offset + t.size;
        }
    }
    if !c.pools.is_empty() {
        pools::check(&c.pools, c.arena_bytes, c.arena_align)?;
    }
    let pool_bytes: Vec<u64> = c.pool_sizes().iter().map(|&(b, _)| b).collect();
    for (index, t) in c.tensors.iter().enumerate() {
        records::check_tensor(index, t, n, &pool_bytes, weights_len)?;
    }
    meta::check_refs(&c)?;
    let encoded = records::encode(&c.tensors)?;
    let metadata = meta::encode(&c);
    let header = Header {
        magic: MAGIC,
        version: VERSION,
        flags: c.flags(),
        file_len: 0,
        section_count: 0,
        header_crc: 0,
        arena_bytes: c.arena_bytes,
        arena_align: c.arena_align,
        tensor_count: n as u32,
        op_count: c.ops.len() as u32,
        reserved: [0; 8],
    };
    let align = |k: u32| kind::required_align(k).unwrap_or(8);
    let pool_records = pools::encode(&c.pools);
    let mut bodies = vec![
        Body::whole(kind::TENSORS, align(kind::TENSORS), &encoded.records),
        Body::whole(kind::STRINGS, align(kind::STRINGS), &encoded.strings),
        Body::whole(kind::SHAPES, align(kind::SHAPES), &encoded.shapes),
        Body::whole(kind::METADATA, align(kind::METADATA), &metadata),
    ];
    // Only bundles with pools carry the section, so a bundle with one
    // arena is byte for byte what earlier writers produced.
    if !c.pools.is_empty() {
        bodies.push(Body::whole(kind::POOLS, align(kind::POOLS), &pool_records));
    }
    bodies.push(Body {
        kind: kind::WEIGHTS,
        align: WEIGHT_ALIGN,
        len: weights_len,
        pieces,
    });
    let out = assemble(header, &bodies);
    let view = BundleView::parse(&out)?;
    view.verify_weights()?;
    Ok(out)
}
