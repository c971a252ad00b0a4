//! Protobuf metadata, mirroring `proto/stow_bundle.proto` field for field.
//! The messages are written with prost's derives so no `protoc` is needed.

use crate::contents::*;
use crate::error::BundleError;
use crate::format::NO_ALIAS;
use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub(crate) struct BundleMeta {
    #[prost(uint64, tag = "1")]
    pub arena_bytes: u64,
    #[prost(uint64, tag = "2")]
    pub arena_align: u64,
    #[prost(message, repeated, tag = "3")]
    pub tensors: Vec<TensorMeta>,
    #[prost(uint32, repeated, tag = "4")]
    pub inputs: Vec<u32>,
    #[prost(uint32, repeated, tag = "5")]
    pub outputs: Vec<u32>,
    #[prost(message, repeated, tag = "6")]
    pub ops: Vec<OpMeta>,
    #[prost(message, optional, tag = "7")]
    pub provenance: Option<ProvenanceMeta>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct TensorMeta {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub kind: u32,
    #[prost(uint32, tag = "3")]
    pub dtype: u32,
    #[prost(uint64, repeated, tag = "4")]
    pub shape: Vec<u64>,
    #[prost(uint32, tag = "5")]
    pub region: u32,
    #[prost(uint64, tag = "6")]
    pub offset: u64,
    #[prost(uint64, tag = "7")]
    pub size: u64,
    #[prost(uint32, tag = "8")]
    pub first_step: u32,
    #[prost(uint32, tag = "9")]
    pub last_step: u32,
    #[prost(uint32, tag = "10")]
    pub alias_kind: u32,
    #[prost(uint32, tag = "11")]
    pub alias_of: u32,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct OpMeta {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op_type: String,
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<AttributeMeta>,
    #[prost(uint32, repeated, tag = "4")]
    pub inputs: Vec<u32>,
    #[prost(uint32, repeated, tag = "5")]
    pub outputs: Vec<u32>,
}

/// `kind`: 1 int, 2 ints, 3 float, 4 floats, 5 text.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct AttributeMeta {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub kind: u32,
    #[prost(int64, repeated, tag = "3")]
    pub ints: Vec<i64>,
    #[prost(float, repeated, tag = "4")]
    pub floats: Vec<f32>,
    #[prost(string, tag = "5")]
    pub text: String,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct ProvenanceMeta {
    #[prost(string, tag = "1")]
    pub strategy: String,
    #[prost(uint64, tag = "2")]
    pub lower_bound_bytes: u64,
    #[prost(uint64, tag = "3")]
    pub naive_bytes: u64,
    #[prost(uint64, tag = "4")]
    pub plan_micros: u64,
    #[prost(bool, tag = "5")]
    pub optimal: bool,
    #[prost(string, tag = "6")]
    pub producer: String,
    #[prost(string, tag = "7")]
    pub source_model: String,
}

pub(crate) fn encode(c: &Contents) -> Vec<u8> {
    let meta = BundleMeta {
        arena_bytes: c.arena_bytes,
        arena_align: c.arena_align,
        tensors: c
            .tensors
            .iter()
            .map(|t| TensorMeta {
                name: t.name.clone(),
                kind: t.kind as u32,
                dtype: t.dtype as u32,
                shape: t.shape.clone(),
                region: t.region as u32,
                offset: t.offset,
                size: t.size,
                first_step: t.first_step,
                last_step: t.last_step,
                alias_kind: t.alias_of.map(|(k, _)| k as u32).unwrap_or(0),
                alias_of: t.alias_of.map(|(_, of)| of).unwrap_or(NO_ALIAS),
            })
            .collect(),
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
            strategy: c.provenance.strategy.clone(),
            lower_bound_bytes: c.provenance.lower_bound_bytes,
            naive_bytes: c.provenance.naive_bytes,
            plan_micros: c.provenance.plan_micros,
            optimal: c.provenance.optimal,
            producer: c.provenance.producer.clone(),
            source_model: c.provenance.source_model.clone(),
        }),
    };
    meta.encode_to_vec()
}

fn attr_meta(name: &str, v: &AttrValue) -> AttributeMeta {
    let mut a = AttributeMeta {
        name: name.to_string(),
        ..Default::default()
    };
    match v {
        AttrValue::Int(i) => (a.kind, a.ints) = (1, vec![*i]),
        AttrValue::Ints(i) => (a.kind, a.ints) = (2, i.clone()),
        AttrValue::Float(f) => (a.kind, a.floats) = (3, vec![*f]),
        AttrValue::Floats(f) => (a.kind, a.floats) = (4, f.clone()),
        AttrValue::Text(s) => (a.kind, a.text) = (5, s.clone()),
    }
    a
}

fn attr_value(op: usize, a: AttributeMeta) -> Result<(String, AttrValue), BundleError> {
    let bad = || {
        BundleError::Disagree(format!(
            "op {op}: attribute `{}` has kind {} or a wrong value count",
            a.name, a.kind
        ))
    };
    let value = match a.kind {
        1 if a.ints.len() == 1 => AttrValue::Int(a.ints[0]),
        2 => AttrValue::Ints(a.ints.clone()),
        3 if a.floats.len() == 1 => AttrValue::Float(a.floats[0]),
        4 => AttrValue::Floats(a.floats.clone()),
        5 => AttrValue::Text(a.text.clone()),
        _ => return Err(bad()),
    };
    Ok((a.name, value))
}

/// Decodes metadata into contents; codes are checked here, cross-checks
/// with the fixed records happen in the reader.
pub(crate) fn decode(bytes: &[u8]) -> Result<Contents, BundleError> {
    let meta = BundleMeta::decode(bytes).map_err(|e| BundleError::Metadata(e.to_string()))?;
    let mut tensors = Vec::with_capacity(meta.tensors.len());
    for (i, t) in meta.tensors.into_iter().enumerate() {
        let field =
            |f: &str, v: u32| BundleError::Disagree(format!("tensor {i}: {f} code {v} is unknown"));
        let alias_of = match t.alias_kind {
            0 => None,
            k => Some((
                AliasKind::from_code(k).ok_or_else(|| field("alias kind", k))?,
                t.alias_of,
            )),
        };
        tensors.push(Tensor {
            name: t.name,
            kind: TensorKind::from_code(t.kind).ok_or_else(|| field("kind", t.kind))?,
            dtype: DType::from_code(t.dtype).ok_or_else(|| field("dtype", t.dtype))?,
            shape: t.shape,
            region: Region::from_code(t.region).ok_or_else(|| field("region", t.region))?,
            offset: t.offset,
            size: t.size,
            first_step: t.first_step,
            last_step: t.last_step,
            alias_of,
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
    Ok(Contents {
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
    })
}
