//! The METADATA section: [`Contents`] to and from the protobuf messages of
//! [`crate::proto`], and the cross-checks between the metadata, the header
//! and the fixed tensor records.

use crate::contents::{AttrValue, Contents, MemoryPool, Op, Provenance, Quantization, Tensor};
use crate::error::BundleError;
use crate::format::{Header, NO_ALIAS};
use crate::proto::{AttributeMeta, BundleMeta, OpMeta, PoolMeta, ProvenanceMeta, TensorMeta};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use prost::Message;

const ATTR_INT: u32 = 1;
const ATTR_INTS: u32 = 2;
const ATTR_FLOAT: u32 = 3;
const ATTR_FLOATS: u32 = 4;
const ATTR_TEXT: u32 = 5;

fn tensor_meta(t: &Tensor) -> TensorMeta {
    TensorMeta {
        name: t.name.clone(),
        kind: t.kind as u32,
        dtype: t.dtype as u32,
        shape: t.shape.clone(),
        region: t.region as u32,
        offset: t.offset,
        size: t.size,
        first_step: t.first_step,
        last_step: t.last_step,
        alias_kind: t.alias_of.map_or(0, |(k, _)| k as u32),
        alias_of: t.alias_of.map_or(NO_ALIAS, |(_, of)| of),
        pool: t.pool,
        quant_scale: t.quant.map(|q| q.scale),
        quant_zero_point: t.quant.map(|q| q.zero_point),
    }
}

fn pool_meta(p: &MemoryPool) -> PoolMeta {
    PoolMeta {
        name: p.name.clone(),
        bytes: p.bytes,
        align: p.align,
    }
}

fn attr_meta(name: &str, v: &AttrValue) -> AttributeMeta {
    let mut a = AttributeMeta {
        name: name.to_string(),
        ..Default::default()
    };
    match v {
        AttrValue::Int(i) => (a.kind, a.ints) = (ATTR_INT, vec![*i]),
        AttrValue::Ints(i) => (a.kind, a.ints) = (ATTR_INTS, i.clone()),
        AttrValue::Float(f) => (a.kind, a.floats) = (ATTR_FLOAT, vec![*f]),
        AttrValue::Floats(f) => (a.kind, a.floats) = (ATTR_FLOATS, f.clone()),
        AttrValue::Text(s) => (a.kind, a.text) = (ATTR_TEXT, s.clone()),
    }
    a
}

/// The metadata message for `c`, as the writer stores it.
pub(crate) fn to_message(c: &Contents) -> BundleMeta {
    let p = &c.provenance;
    BundleMeta {
        arena_bytes: c.arena_bytes,
        arena_align: c.arena_align,
        tensors: c.tensors.iter().map(tensor_meta).collect(),
        inputs: c.inputs.clone(),
        outputs: c.outputs.clone(),
        ops: c
            .ops
            .iter()
            .map(|op| OpMeta {
                name: op.name.clone(),
                op_type: op.op_type.clone(),
                attributes: op.attributes.iter().map(|(n, v)| attr_meta(n, v)).collect(),
                inputs: op.inputs.clone(),
                outputs: op.outputs.clone(),
            })
            .collect(),
        provenance: Some(ProvenanceMeta {
            strategy: p.strategy.clone(),
            lower_bound_bytes: p.lower_bound_bytes,
            naive_bytes: p.naive_bytes,
            plan_micros: p.plan_micros,
            optimal: p.optimal,
            producer: p.producer.clone(),
            source_model: p.source_model.clone(),
        }),
        pools: c.pools.iter().map(pool_meta).collect(),
    }
}

/// Encoded metadata for `c`.
pub(crate) fn encode(c: &Contents) -> Vec<u8> {
    to_message(c).encode_to_vec()
}

fn attr_value(op: usize, a: AttributeMeta) -> Result<(String, AttrValue), BundleError> {
    let value = match (a.kind, a.ints.as_slice(), a.floats.as_slice()) {
        (ATTR_INT, &[i], _) => AttrValue::Int(i),
        (ATTR_INTS, _, _) => AttrValue::Ints(a.ints),
        (ATTR_FLOAT, _, &[f]) => AttrValue::Float(f),
        (ATTR_FLOATS, _, _) => AttrValue::Floats(a.floats),
        (ATTR_TEXT, _, _) => AttrValue::Text(a.text),
        _ => {
            return Err(BundleError::BadAttribute {
                op,
                ints: a.ints.len(),
                floats: a.floats.len(),
                kind: a.kind,
                name: a.name,
            })
        }
    };
    Ok((a.name, value))
}

/// Decodes the metadata section (`offset`, `bytes`) and checks it against
/// the header and the tensors decoded from the fixed records, which become
/// the tensors of the result.
pub(crate) fn decode(
    bytes: &[u8],
    offset: u64,
    header: &Header,
    tensors: Vec<Tensor>,
    pools: Vec<MemoryPool>,
) -> Result<Contents, BundleError> {
    let meta = BundleMeta::decode(bytes).map_err(|source| BundleError::Metadata {
        offset,
        length: bytes.len() as u64,
        source,
    })?;
    let vs_header = [
        (
            "tensor_count",
            meta.tensors.len() as u64,
            header.tensor_count.into(),
        ),
        ("op_count", meta.ops.len() as u64, header.op_count.into()),
        ("arena_bytes", meta.arena_bytes, header.arena_bytes),
        ("arena_align", meta.arena_align, header.arena_align),
    ];
    for (field, metadata, header) in vs_header {
        if metadata != header {
            return Err(BundleError::MetadataVsHeader {
                field,
                metadata,
                header,
            });
        }
    }
    let mut tensors = tensors;
    for (index, (t, m)) in tensors.iter_mut().zip(&meta.tensors).enumerate() {
        compare(index, &tensor_meta(t), m)?;
        t.quant = match (m.quant_scale, m.quant_zero_point) {
            (Some(scale), Some(zero_point)) => Some(Quantization { scale, zero_point }),
            (None, None) => None,
            _ => {
                return Err(BundleError::MetadataVsRecord {
                    index,
                    field: "quant_zero_point",
                    record: "a scale and a zero point, or neither".into(),
                    metadata: format!("{:?} and {:?}", m.quant_scale, m.quant_zero_point),
                })
            }
        };
    }
    let records: Vec<PoolMeta> = pools.iter().map(pool_meta).collect();
    if records != meta.pools {
        return Err(BundleError::MetadataVsHeader {
            field: "pools",
            metadata: meta.pools.len() as u64,
            header: records.len() as u64,
        });
    }
    let mut ops = Vec::with_capacity(meta.ops.len());
    for (i, op) in meta.ops.into_iter().enumerate() {
        let attributes = op
            .attributes
            .into_iter()
            .map(|a| attr_value(i, a))
            .collect::<Result<_, _>>()?;
        ops.push(Op {
            name: op.name,
            op_type: op.op_type,
            attributes,
            inputs: op.inputs,
            outputs: op.outputs,
        });
    }
    let p = meta.provenance.unwrap_or_default();
    let contents = Contents {
        arena_bytes: meta.arena_bytes,
        arena_align: meta.arena_align,
        tensors,
        inputs: meta.inputs,
        outputs: meta.outputs,
        ops,
        provenance: Provenance {
            strategy: p.strategy,
            lower_bound_bytes: p.lower_bound_bytes,
            naive_bytes: p.naive_bytes,
            plan_micros: p.plan_micros,
            optimal: p.optimal,
            producer: p.producer,
            source_model: p.source_model,
        },
        pools,
    };
    // The pools flag was matched with the POOLS section before.
    for (mask, field) in [
        (
            crate::format::FLAG_PACKED | crate::format::FLAG_PACKED_INT8,
            "flags (packed weights)",
        ),
        (
            crate::format::FLAG_PACKED_LEFT,
            "flags (weights packed as left operands)",
        ),
    ] {
        let packed = contents.flags() & mask;
        if packed != header.flags & mask {
            return Err(BundleError::MetadataVsHeader {
                field,
                metadata: packed.into(),
                header: (header.flags & mask).into(),
            });
        }
    }
    check_refs(&contents)?;
    Ok(contents)
}

/// Field-by-field comparison of a record (as a message) with the metadata.
fn compare(index: usize, record: &TensorMeta, meta: &TensorMeta) -> Result<(), BundleError> {
    macro_rules! same {
        ($($field:ident),*) => {$(
            if record.$field != meta.$field {
                return Err(BundleError::MetadataVsRecord {
                    index,
                    field: stringify!($field),
                    record: format!("{:?}", record.$field),
                    metadata: format!("{:?}", meta.$field),
                });
            }
        )*};
    }
    same!(
        name, kind, dtype, shape, region, offset, size, first_step, last_step, alias_kind,
        alias_of, pool
    );
    Ok(())
}

/// Every tensor id in the graph inputs and outputs and the operators'
/// operands names an existing tensor.
pub(crate) fn check_refs(c: &Contents) -> Result<(), BundleError> {
    let count = c.tensors.len();
    let check =
        |what: &dyn Fn() -> String, ids: &[u32]| match ids.iter().find(|&&id| id as usize >= count)
        {
            Some(&id) => Err(BundleError::BadTensorRef {
                what: what(),
                id,
                count,
            }),
            None => Ok(()),
        };
    check(&|| "graph inputs".into(), &c.inputs)?;
    check(&|| "graph outputs".into(), &c.outputs)?;
    for (i, op) in c.ops.iter().enumerate() {
        check(&|| format!("op {i} (`{}`) inputs", op.name), &op.inputs)?;
        check(&|| format!("op {i} (`{}`) outputs", op.name), &op.outputs)?;
    }
    check_input_rows(c)
}

/// A graph input in region `rows` is a graph input no operator reads,
/// and its bands (the tensors aliasing it as `input-rows`, in id order)
/// are arena inputs from step 0, of its type and rank (at least 2), its
/// dimensions but the rows, whose rows add up to its rows; no operator
/// writes a band, and a band is no graph input itself.
fn check_input_rows(c: &Contents) -> Result<(), BundleError> {
    use crate::contents::{AliasKind, Region, TensorKind};
    let fail = |index: usize, reason: String| Err(BundleError::BadInputRows { index, reason });
    let mut rows = alloc::vec![0u64; c.tensors.len()];
    for (index, t) in c.tensors.iter().enumerate() {
        let Some((AliasKind::InputRows, of)) = t.alias_of else {
            continue;
        };
        let input = &c.tensors[of as usize];
        if input.region != Region::Rows {
            return fail(
                index,
                alloc::format!("holds rows of tensor {of}, which is not in region `rows`"),
            );
        }
        if t.region != Region::Arena || t.kind != TensorKind::Input || t.first_step != 0 {
            return fail(
                index,
                "a band of an input is an arena input from step 0".into(),
            );
        }
        let rank = input.shape.len();
        let same_but_rows = t.dtype == input.dtype
            && rank >= 2
            && t.shape.len() == rank
            && (0..rank).all(|d| d == rank - 2 || t.shape[d] == input.shape[d]);
        if !same_but_rows {
            return fail(index, alloc::format!("its type and shape ({} {:?}) are not those of input {of} ({} {:?}) but for the rows", t.dtype, t.shape, input.dtype, input.shape));
        }
        rows[of as usize] = rows[of as usize].saturating_add(t.shape[rank - 2]);
    }
    for (index, t) in c.tensors.iter().enumerate() {
        if t.region != Region::Rows {
            continue;
        }
        let want = t.shape.len().checked_sub(2).map_or(0, |axis| t.shape[axis]);
        if rows[index] != want || want == 0 {
            return fail(
                index,
                alloc::format!("its bands hold {} rows of its {want}", rows[index]),
            );
        }
        if !c.inputs.contains(&(index as u32)) {
            return fail(index, "in region `rows` but not a graph input".into());
        }
    }
    for (i, op) in c.ops.iter().enumerate() {
        for &id in op.inputs.iter().chain(&op.outputs) {
            let t = &c.tensors[id as usize];
            let written = op.outputs.contains(&id);
            if t.region == Region::Rows
                || (written && matches!(t.alias_of, Some((AliasKind::InputRows, _))))
            {
                return fail(id as usize, alloc::format!("op {i} (`{}`) reads or writes a whole input written in bands, or writes a band", op.name));
            }
        }
    }
    for &id in &c.inputs {
        if matches!(
            c.tensors[id as usize].alias_of,
            Some((AliasKind::InputRows, _))
        ) {
            return fail(
                id as usize,
                "a band of an input is listed as a graph input".into(),
            );
        }
    }
    Ok(())
}
