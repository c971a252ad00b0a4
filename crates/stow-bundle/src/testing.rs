//! Test support (feature `testing`): a small valid bundle, a proptest
//! generator of valid inputs, and tools to build deliberately broken files
//! (edit a section, reseal the checksums) for hostile-input tests.
//!
//! Nothing here validates anything; it is for tests only.

use crate::checksum::crc32;
use crate::contents::*;
use crate::format::{kind, Header, SectionEntry, HEADER_LEN, SECTION_ENTRY_LEN, WEIGHT_ALIGN};
use crate::write::{assemble, Body};
use crate::{header, meta, proto, to_bytes};
use proptest::prelude::*;

/// A five-tensor, two-op model with two weights (different alignments and
/// types), attributes of several kinds and provenance.
pub fn sample() -> (Contents, Vec<Vec<u8>>) {
    let t = |name: &str, kind, dtype, shape: Vec<u64>, region, offset, (first, last)| {
        let mut t = Tensor {
            name: String::from(name),
            kind,
            dtype,
            shape,
            region,
            offset,
            size: 0,
            first_step: first,
            last_step: last,
            alias_of: None,
            pool: 0,
            quant: None,
        };
        t.size = t.shape_bytes().unwrap_or(0);
        t
    };
    use DType::*;
    use Region::*;
    use TensorKind::*;
    let mut tensors = vec![
        t("x", Input, F32, vec![1, 8], Arena, 0, (0, 0)),
        t("w", Weight, F32, vec![8, 4], Weights, 0, (0, 0)),
        t("h", Activation, F32, vec![1, 4], Arena, 64, (0, 1)),
        t("b", Weight, I64, vec![3], Weights, 0, (1, 1)),
        t("y", Output, F32, vec![1, 4], Arena, 0, (1, 1)),
    ];
    tensors[4].alias_of = Some((AliasKind::View, 0));
    let weights = vec![vec![], (0..128u8).collect(), vec![], vec![7u8; 24], vec![]];
    let ops = vec![
        Op {
            name: "mm".into(),
            op_type: "EinSum".into(),
            attributes: vec![
                ("expr".into(), AttrValue::Text("ak,kn->an".into())),
                ("k".into(), AttrValue::Int(8)),
            ],
            inputs: vec![0, 1],
            outputs: vec![2],
        },
        Op {
            name: "add".into(),
            op_type: "Add".into(),
            attributes: vec![
                ("f".into(), AttrValue::Floats(vec![0.5, 1.5])),
                ("g".into(), AttrValue::Float(-2.0)),
                ("i".into(), AttrValue::Ints(vec![1, -1])),
            ],
            inputs: vec![2, 3],
            outputs: vec![4],
        },
    ];
    let c = Contents {
        arena_bytes: 128,
        arena_align: 64,
        tensors,
        inputs: vec![0],
        outputs: vec![4],
        ops,
        provenance: Provenance {
            strategy: "greedy-size".into(),
            lower_bound_bytes: 64,
            naive_bytes: 192,
            plan_micros: 12,
            optimal: true,
            producer: "stow test".into(),
            source_model: "sample.onnx".into(),
        },
        pools: Vec::new(),
    };
    (c, weights)
}

/// [`sample`] with its arena split into two memory pools: the output moves
/// to a second pool `dram` of 64 bytes, at offset 0 (where pool 0 holds
/// the input).
pub fn sample_pooled() -> (Contents, Vec<Vec<u8>>) {
    let (mut c, w) = sample();
    let out = c.outputs[0] as usize;
    c.tensors[out].pool = 1;
    c.tensors[out].offset = 0;
    c.tensors[out].alias_of = None;
    c.pools = vec![
        MemoryPool {
            name: "sram".into(),
            bytes: c.arena_bytes,
            align: c.arena_align,
        },
        MemoryPool {
            name: "dram".into(),
            bytes: 64,
            align: 64,
        },
    ];
    (c, w)
}

/// [`sample`] with its input `x` (now 2 × 4) written in bands of rows:
/// `x` in region `rows`, its two rows in the arena tensors 5 and 6
/// (`x.rows0-1` at offset 0, `x.rows1-2` at 16), and the product reading
/// the first band.
pub fn sample_rows() -> (Contents, Vec<Vec<u8>>) {
    let (mut c, mut w) = sample();
    let x = c.tensors[0].clone();
    c.tensors[0].shape = vec![2, 4];
    c.tensors[0].region = Region::Rows;
    c.tensors[4].alias_of = None;
    for (row, offset) in [(0, 0), (1, 16)] {
        let mut band = x.clone();
        band.name = format!("x.rows{row}-{}", row + 1);
        band.shape = vec![1, 4];
        band.size = 16;
        band.offset = offset;
        band.alias_of = Some((AliasKind::InputRows, 0));
        c.tensors.push(band);
        w.push(Vec::new());
    }
    c.ops[0].inputs[0] = 5;
    (c, w)
}

/// Slices of owned weights, as [`to_bytes`] takes them.
pub fn refs(weights: &[Vec<u8>]) -> Vec<&[u8]> {
    weights.iter().map(Vec::as_slice).collect()
}

/// The encoded [`sample`].
pub fn sample_bytes() -> Vec<u8> {
    let (c, w) = sample();
    to_bytes(&c, &refs(&w)).expect("the sample is valid")
}

/// The metadata message the writer stores for `c`.
pub fn metadata(c: &Contents) -> proto::BundleMeta {
    meta::to_message(c)
}

/// One section of a [`RawBundle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawSection {
    /// Kind code.
    pub kind: u32,
    /// Alignment (written to the entry and used for the layout).
    pub align: u64,
    /// The section's bytes.
    pub body: Vec<u8>,
}

/// A bundle taken apart: header plus section bodies, to edit and
/// [`assemble`](RawBundle::assemble) again with fresh checksums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawBundle {
    /// The header (`file_len`, `section_count` and `header_crc` are
    /// recomputed by `assemble`).
    pub header: Header,
    /// Sections in table order.
    pub sections: Vec<RawSection>,
}

impl RawBundle {
    /// Takes a well-formed bundle apart.
    ///
    /// # Panics
    /// If the header or a section entry lies outside `bytes`.
    pub fn split(bytes: &[u8]) -> RawBundle {
        let header: Header = bytemuck::pod_read_unaligned(&bytes[..HEADER_LEN]);
        let sections = (0..header.section_count as usize)
            .map(|i| {
                let e = entry(bytes, i);
                RawSection {
                    kind: e.kind,
                    align: e.align.into(),
                    body: bytes[e.offset as usize..(e.offset + e.length) as usize].to_vec(),
                }
            })
            .collect();
        RawBundle { header, sections }
    }

    /// The first section of kind `k`.
    ///
    /// # Panics
    /// If there is none.
    pub fn section_mut(&mut self, k: u32) -> &mut RawSection {
        self.sections
            .iter_mut()
            .find(|s| s.kind == k)
            .expect("no section of that kind")
    }

    /// Lays the file out as the writer does and seals every checksum.
    pub fn assemble(&self) -> Vec<u8> {
        let bodies: Vec<Body<'_>> = self
            .sections
            .iter()
            .map(|s| Body::whole(s.kind, s.align, &s.body))
            .collect();
        assemble(self.header, &bodies)
    }
}

/// Section entry `i` of `bytes`.
///
/// # Panics
/// If the entry lies outside `bytes`.
pub fn entry(bytes: &[u8], i: usize) -> SectionEntry {
    let at = HEADER_LEN + i * SECTION_ENTRY_LEN;
    bytemuck::pod_read_unaligned(&bytes[at..at + SECTION_ENTRY_LEN])
}

/// Overwrites section entry `i` of `bytes` (checksums untouched).
///
/// # Panics
/// If the entry lies outside `bytes`.
pub fn set_entry(bytes: &mut [u8], i: usize, e: SectionEntry) {
    let at = HEADER_LEN + i * SECTION_ENTRY_LEN;
    bytes[at..at + SECTION_ENTRY_LEN].copy_from_slice(bytemuck::bytes_of(&e));
}

/// Recomputes, in place, the checksum of every section whose entry and
/// bytes lie within `bytes`, then the header checksum, so that a deliberate
/// edit reaches the checks behind them. Nothing else is changed.
///
/// # Panics
/// If `bytes` is shorter than the header.
pub fn reseal(bytes: &mut [u8]) {
    let mut h: Header = bytemuck::pod_read_unaligned(&bytes[..HEADER_LEN]);
    let count = (h.section_count as usize).min(16);
    for i in 0..count {
        if HEADER_LEN + (i + 1) * SECTION_ENTRY_LEN > bytes.len() {
            break;
        }
        let mut e = entry(bytes, i);
        let body = usize::try_from(e.offset).ok().and_then(|start| {
            let end = start.checked_add(usize::try_from(e.length).ok()?)?;
            bytes.get(start..end)
        });
        if let Some(body) = body {
            e.crc = crc32(body);
            set_entry(bytes, i, e);
        }
    }
    let end = (HEADER_LEN + SECTION_ENTRY_LEN * count).min(bytes.len());
    h.header_crc = header::header_crc(&bytes[..end]).unwrap_or(0);
    bytes[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&h));
}

/// Index of the first section entry of kind `k`.
///
/// # Panics
/// If there is none.
pub fn section_index(bytes: &[u8], k: u32) -> usize {
    let h: Header = bytemuck::pod_read_unaligned(&bytes[..HEADER_LEN]);
    (0..h.section_count as usize)
        .find(|&i| entry(bytes, i).kind == k)
        .expect("no section of that kind")
}

/// Byte range of the first section of kind `k`.
pub fn section_range(bytes: &[u8], k: u32) -> std::ops::Range<usize> {
    let e = entry(bytes, section_index(bytes, k));
    e.offset as usize..(e.offset + e.length) as usize
}

fn arb_attr() -> impl Strategy<Value = AttrValue> {
    let float = -1.0e6f32..1.0e6f32;
    prop_oneof![
        any::<i64>().prop_map(AttrValue::Int),
        proptest::collection::vec(any::<i64>(), 0..4).prop_map(AttrValue::Ints),
        float.clone().prop_map(AttrValue::Float),
        proptest::collection::vec(float, 0..4).prop_map(AttrValue::Floats),
        "[ -~é]{0,12}".prop_map(AttrValue::Text),
    ]
}

fn ids(n: usize, max_len: usize) -> BoxedStrategy<Vec<u32>> {
    if n == 0 {
        Just(Vec::new()).boxed()
    } else {
        proptest::collection::vec(0..n as u32, 0..max_len).boxed()
    }
}

fn arb_op(n: usize) -> impl Strategy<Value = Op> {
    (
        "[a-z0-9_./]{0,10}",
        "[A-Za-z]{1,8}",
        proptest::collection::vec(("[a-z_.]{1,8}", arb_attr()), 0..4),
        ids(n, 4),
        ids(n, 3),
    )
        .prop_map(|(name, op_type, mut attributes, inputs, outputs)| {
            attributes.sort_by(|a, b| a.0.cmp(&b.0));
            Op {
                name,
                op_type,
                attributes,
                inputs,
                outputs,
            }
        })
}

/// Tensor without size or placement; those are filled in by `arb_bundle`.
fn arb_tensor(n: usize) -> impl Strategy<Value = (Tensor, u64, u64)> {
    let kinds = prop_oneof![
        Just(TensorKind::Input),
        Just(TensorKind::Output),
        Just(TensorKind::Activation),
        Just(TensorKind::Weight),
    ];
    let alias = if n == 0 {
        Just(None).boxed()
    } else {
        proptest::option::of((
            prop_oneof![
                Just(AliasKind::InPlace),
                Just(AliasKind::View),
                Just(AliasKind::ConcatSlice),
                Just(AliasKind::DepthwiseInPlace)
            ],
            0..n as u32,
        ))
        .boxed()
    };
    (
        "[a-zA-Z0-9_:./é]{0,12}",
        kinds,
        proptest::sample::select(DType::ALL.to_vec()),
        proptest::collection::vec(prop_oneof![9 => 1u64..5, 1 => Just(0u64)], 0..4),
        (0u32..20, 0u32..20),
        alias,
        0u64..512,
        any::<u64>(),
    )
        .prop_map(
            |(name, kind, dtype, shape, (a, b), alias_of, offset, seed)| {
                let region = if kind == TensorKind::Weight {
                    Region::Weights
                } else {
                    Region::Arena
                };
                // Quantized tensors carry parameters in some draws.
                let quant = matches!(dtype, DType::U8 | DType::I8)
                    .then(|| crate::Quantization {
                        scale: (offset % 97 + 1) as f32 / 64.0,
                        zero_point: (offset % 7) as i32,
                    })
                    .filter(|_| offset % 2 == 0);
                let mut t = Tensor {
                    name,
                    kind,
                    dtype,
                    shape,
                    region,
                    offset,
                    size: 0,
                    first_step: a.min(b),
                    last_step: a.max(b),
                    alias_of,
                    pool: 0,
                    quant,
                };
                t.size = t.shape_bytes().unwrap_or(0);
                (t, offset, seed)
            },
        )
}

/// Valid writer input: contents and one weight slice per tensor (empty for
/// arena tensors). Weight offsets in the contents are arbitrary (the
/// writer ignores them); everything else obeys the format's rules.
pub fn arb_bundle() -> impl Strategy<Value = (Contents, Vec<Vec<u8>>)> {
    (0usize..10)
        .prop_flat_map(|n| {
            (
                proptest::collection::vec(arb_tensor(n), n..=n),
                proptest::collection::vec(arb_op(n), 0..5),
                ids(n, 3),
                ids(n, 3),
                0u32..8,
                0u64..100,
                (
                    "[a-z-]{0,10}",
                    any::<u64>(),
                    any::<u64>(),
                    any::<u64>(),
                    any::<bool>(),
                ),
            )
        })
        .prop_map(|(tensors, ops, inputs, outputs, align_log2, slack, prov)| {
            let arena_bytes = tensors
                .iter()
                .filter(|(t, _, _)| t.region == Region::Arena)
                .map(|(t, _, _)| t.offset + t.size)
                .max()
                .unwrap_or(0)
                + slack;
            let weights = tensors
                .iter()
                .map(|(t, _, seed)| match t.region {
                    Region::Weights => (0..t.size)
                        .map(|i| (seed.wrapping_mul(i + 1) >> 7) as u8)
                        .collect(),
                    Region::Arena | Region::Rows => Vec::new(),
                })
                .collect();
            let (strategy, lower, naive, micros, optimal) = prov;
            let c = Contents {
                arena_bytes,
                arena_align: 1 << align_log2,
                tensors: tensors.into_iter().map(|(t, _, _)| t).collect(),
                inputs,
                outputs,
                ops,
                provenance: Provenance {
                    strategy,
                    lower_bound_bytes: lower,
                    naive_bytes: naive,
                    plan_micros: micros,
                    optimal,
                    producer: "proptest".into(),
                    source_model: "m.onnx".into(),
                },
                pools: Vec::new(),
            };
            (c, weights)
        })
}

/// `c` with weight offsets replaced by the ones the writer assigns (each
/// weight at the next multiple of 64 after the previous one, in tensor
/// order): what a reader gives back for `to_bytes(c, ..)`.
pub fn with_assigned_offsets(c: &Contents) -> Contents {
    let mut c = c.clone();
    let mut end = 0u64;
    for t in c.tensors.iter_mut().filter(|t| t.region == Region::Weights) {
        t.offset = end.next_multiple_of(WEIGHT_ALIGN);
        end = t.offset + t.size;
    }
    c
}

/// Section kind codes in the order version 1 writes them.
pub const KINDS: [u32; 5] = [
    kind::TENSORS,
    kind::STRINGS,
    kind::SHAPES,
    kind::METADATA,
    kind::WEIGHTS,
];

/// Compiles the C program `source` against `include/stow_bundle.h` into
/// `exe` with the strictest warnings (`$CC`, else `cc`). `None`, after a
/// note on stderr, when no C compiler can be run; a compile error fails
/// the calling test.
pub fn compile_c(source: &std::path::Path, exe: &std::path::Path) -> Option<std::path::PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let include = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let out = std::process::Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O1",
            "-I",
        ])
        .arg(include)
        .arg(source)
        .arg("-o")
        .arg(exe)
        .output();
    match out {
        Err(e) => {
            eprintln!("note: C test skipped: cannot run `{cc}`: {e}");
            None
        }
        Ok(o) => {
            assert!(
                o.status.success(),
                "{} does not compile:\n{}",
                source.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            Some(exe.to_path_buf())
        }
    }
}
