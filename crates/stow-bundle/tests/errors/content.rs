//! Cases for records, metadata, writer input and file writing.

use crate::common::*;
use stow_bundle::format::{kind, NO_ALIAS};
use stow_bundle::testing::{refs, sample, sample_pooled, sample_rows, with_assigned_offsets};
use stow_bundle::{to_bytes, write_file, BundleError, Region};

pub fn write_err(f: impl FnOnce(&mut stow_bundle::Contents, &mut Vec<Vec<u8>>)) -> BundleError {
    let (mut c, mut w) = sample();
    f(&mut c, &mut w);
    to_bytes(&c, &refs(&w)).expect_err("writer input must be rejected")
}

pub fn bad_field() -> Vec<BundleError> {
    let rec = |i, f: fn(&mut stow_bundle::format::TensorRecord)| err(&with_record(i, f));
    macro_rules! field {
        ($e:expr, $index:literal, $field:literal) => {
            expect!(
                $e,
                BundleError::BadField {
                    index: $index,
                    field: $field,
                    ..
                }
            )
        };
    }
    vec![
        field!(rec(0, |r| r.id = 3), 0, "id"),
        field!(rec(0, |r| r.kind = 0), 0, "kind"),
        field!(rec(0, |r| r.dtype = 99), 0, "dtype"),
        field!(rec(0, |r| r.region = 9), 0, "region"),
        field!(rec(0, |r| r.region = Region::Weights as u32), 0, "region"),
        field!(rec(1, |r| r.region = Region::Arena as u32), 1, "region"),
        field!(rec(0, |r| r.alias_kind = 9), 0, "alias_kind"),
        field!(rec(0, |r| r.alias_of = 3), 0, "alias_of"),
        field!(rec(4, |r| r.alias_of = 5), 4, "alias_of"),
        field!(rec(4, |r| r.alias_of = NO_ALIAS), 4, "alias_of"),
        field!(rec(0, |r| r.name_offset = 1), 0, "name_offset"),
        field!(rec(4, |r| r.name_len = 1000), 4, "name_len"),
        field!(rec(1, |r| r.dims_index = 0), 1, "dims_index"),
        field!(rec(4, |r| r.rank = 100), 4, "rank"),
        field!(rec(1, |r| r.offset = 8), 1, "offset"),
        field!(
            rec(2, |r| (r.first_step, r.last_step) = (2, 1)),
            2,
            "last_step"
        ),
        field!(
            write_err(|c, w| {
                c.tensors[0].kind = stow_bundle::TensorKind::Weight;
                w[0] = vec![0; 32];
            }),
            0,
            "region"
        ),
        field!(
            write_err(|c, _| c.tensors[2].first_step = 9),
            2,
            "last_step"
        ),
        field!(
            write_err(|c, _| c.tensors[2].alias_of = Some((stow_bundle::AliasKind::View, 5))),
            2,
            "alias_of"
        ),
    ]
}

pub fn out_of_region() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_record(2, |r| r.offset = 120)),
            BundleError::OutOfRegion {
                index: 2,
                region: "arena",
                offset: 120,
                size: 16,
                limit: 128
            }
        ),
        expect!(
            err(&with_record(2, |r| r.offset = u64::MAX - 4)),
            BundleError::OutOfRegion { index: 2, .. }
        ),
        expect!(
            err(&with_record(3, |r| r.offset = 192)),
            BundleError::OutOfRegion {
                index: 3,
                region: "weights",
                limit: 152,
                ..
            }
        ),
        expect!(
            write_err(|c, _| c.tensors[2].offset = 120),
            BundleError::OutOfRegion {
                index: 2,
                region: "arena",
                ..
            }
        ),
    ]
}

pub fn shape_size() -> Vec<BundleError> {
    let huge = with_raw(|r| {
        r.section_mut(kind::SHAPES).body[..8].copy_from_slice(&u64::MAX.to_le_bytes())
    });
    vec![
        expect!(
            err(&with_record(0, |r| r.size = 16)),
            BundleError::ShapeSize {
                index: 0,
                size: 16,
                expected: 32,
                dtype: "f32",
                ..
            }
        ),
        expect!(
            err(&huge),
            BundleError::ShapeSize {
                index: 0,
                expected: u64::MAX,
                ..
            }
        ),
        expect!(
            write_err(|c, _| c.tensors[0].size = 3),
            BundleError::ShapeSize {
                index: 0,
                size: 3,
                expected: 32,
                ..
            }
        ),
    ]
}

pub fn bad_name() -> Vec<BundleError> {
    let b = with_raw(|r| r.section_mut(kind::STRINGS).body[2] = 0xFF);
    vec![expect!(
        err(&b),
        BundleError::BadName {
            index: 2,
            offset: 2
        }
    )]
}

pub fn metadata() -> Vec<BundleError> {
    let garbage = with_raw(|r| r.section_mut(kind::METADATA).body = vec![0xFF; 16]);
    let cut = with_raw(|r| {
        let body = &mut r.section_mut(kind::METADATA).body;
        body.truncate(body.len() - 1);
    });
    vec![
        expect!(err(&garbage), BundleError::Metadata { length: 16, .. }),
        expect!(err(&cut), BundleError::Metadata { .. }),
    ]
}

pub fn metadata_vs_header() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_meta(|m| {
                m.tensors.pop();
            })),
            BundleError::MetadataVsHeader {
                field: "tensor_count",
                metadata: 4,
                header: 5
            }
        ),
        expect!(
            err(&with_meta(|m| {
                m.ops.pop();
            })),
            BundleError::MetadataVsHeader {
                field: "op_count",
                metadata: 1,
                header: 2
            }
        ),
        expect!(
            err(&with_meta(|m| m.arena_bytes = 256)),
            BundleError::MetadataVsHeader {
                field: "arena_bytes",
                metadata: 256,
                header: 128
            }
        ),
        expect!(
            err(&with_meta(|m| m.arena_align = 16)),
            BundleError::MetadataVsHeader {
                field: "arena_align",
                ..
            }
        ),
        // The packed-weights flag without an operator reading a packed
        // weight, and such an operator without the flag.
        expect!(
            err(&with_header(|h| h.flags = stow_bundle::format::FLAG_PACKED)),
            BundleError::MetadataVsHeader {
                field: "flags (packed weights)",
                metadata: 0,
                header: 2
            }
        ),
        expect!(
            err(&with_meta(|m| m.ops[0].attributes.push(
                stow_bundle::proto::AttributeMeta {
                    name: stow_bundle::format::PACKED_ATTR.into(),
                    kind: 1,
                    ints: vec![16],
                    ..Default::default()
                }
            ))),
            BundleError::MetadataVsHeader {
                field: "flags (packed weights)",
                metadata: 2,
                header: 0
            }
        ),
        // The int8 flag without an operator reading a packed u8 or i8
        // weight.
        expect!(
            err(&with_header(
                |h| h.flags = stow_bundle::format::FLAG_PACKED_INT8
            )),
            BundleError::MetadataVsHeader {
                field: "flags (packed weights)",
                metadata: 0,
                header: 8
            }
        ),
    ]
}

pub fn metadata_vs_record() -> Vec<BundleError> {
    let name = expect!(
        err(&with_meta(|m| m.tensors[4].name = "z".into())),
        BundleError::MetadataVsRecord {
            index: 4,
            field: "name",
            ..
        }
    );
    assert!(name.to_string().contains("\"y\"") && name.to_string().contains("\"z\""));
    vec![
        name,
        expect!(
            err(&with_meta(|m| m.tensors[1].shape = vec![4, 8])),
            BundleError::MetadataVsRecord {
                index: 1,
                field: "shape",
                ..
            }
        ),
        expect!(
            err(&with_meta(|m| m.tensors[3].offset = 0)),
            BundleError::MetadataVsRecord {
                index: 3,
                field: "offset",
                ..
            }
        ),
        expect!(
            err(&with_meta(|m| m.tensors[4].alias_kind = 0)),
            BundleError::MetadataVsRecord {
                index: 4,
                field: "alias_kind",
                ..
            }
        ),
    ]
}

pub fn bad_attribute() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_meta(|m| m.ops[0].attributes[1].kind = 9)),
            BundleError::BadAttribute { op: 0, kind: 9, .. }
        ),
        expect!(
            err(&with_meta(|m| m.ops[0].attributes[1].ints.push(3))),
            BundleError::BadAttribute {
                op: 0,
                kind: 1,
                ints: 2,
                ..
            }
        ),
        expect!(
            err(&with_meta(|m| m.ops[1].attributes[1].floats.clear())),
            BundleError::BadAttribute {
                op: 1,
                kind: 3,
                floats: 0,
                ..
            }
        ),
    ]
}

pub fn bad_tensor_ref() -> Vec<BundleError> {
    let op = expect!(
        err(&with_meta(|m| m.ops[0].inputs[1] = 42)),
        BundleError::BadTensorRef {
            id: 42,
            count: 5,
            ..
        }
    );
    assert!(op.to_string().contains("op 0 (`mm`) inputs"), "{op}");
    vec![
        op,
        expect!(
            err(&with_meta(|m| m.outputs = vec![9])),
            BundleError::BadTensorRef { id: 9, .. }
        ),
        expect!(
            err(&with_meta(|m| m.inputs = vec![5])),
            BundleError::BadTensorRef { id: 5, .. }
        ),
        expect!(
            write_err(|c, _| c.ops[1].outputs = vec![17]),
            BundleError::BadTensorRef { id: 17, .. }
        ),
    ]
}

pub fn weight_count() -> Vec<BundleError> {
    let (c, w) = sample();
    vec![expect!(
        to_bytes(&c, &refs(&w)[..4]).unwrap_err(),
        BundleError::WeightCount {
            tensors: 5,
            slices: 4
        }
    )]
}

pub fn weight_bytes() -> Vec<BundleError> {
    vec![
        expect!(
            write_err(|_, w| w[1] = vec![1, 2, 3]),
            BundleError::WeightBytes {
                index: 1,
                expected: 128,
                found: 3,
                ..
            }
        ),
        expect!(
            write_err(|_, w| w[0] = vec![1]),
            BundleError::WeightBytes {
                index: 0,
                expected: 0,
                found: 1,
                ..
            }
        ),
    ]
}

pub fn missing_directory() -> Vec<BundleError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/x.stow");
    let e = expect!(
        write_file(&path, b"abc").unwrap_err(),
        BundleError::MissingDirectory { dir: ref d, .. } if d == &dir.path().join("no/such")
    );
    assert!(e.to_string().contains("no/such"), "{e}");
    vec![e]
}

pub fn io() -> Vec<BundleError> {
    // The target is a directory: the rename fails after the temporary
    // file was written, and the temporary file must go.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("x.stow");
    std::fs::create_dir(&target).unwrap();
    let e = expect!(
        write_file(&target, &good()).unwrap_err(),
        BundleError::Io { .. }
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["x.stow"], "temporary file left behind");
    vec![e]
}

/// The bytes of [`sample_pooled`].
fn pooled() -> Vec<u8> {
    let (c, w) = sample_pooled();
    to_bytes(&c, &refs(&w)).expect("the pooled sample is valid")
}

pub fn bad_pool() -> Vec<BundleError> {
    use stow_bundle::format::{FLAG_POOLS, POOL_RECORD_LEN};
    let raw = |f: &dyn Fn(&mut stow_bundle::testing::RawBundle)| {
        let mut r = stow_bundle::testing::RawBundle::split(&pooled());
        f(&mut r);
        err(&r.assemble())
    };
    let pool_problem = |e: BundleError, index: usize, needle: &str| {
        let shown = e.to_string();
        assert!(shown.contains(needle), "`{shown}` does not say `{needle}`");
        expect!(e, BundleError::BadPool { index: i, .. } if i == index)
    };
    // Pool 1's name starts at byte 16 of its record.
    let name_at = POOL_RECORD_LEN + 16;
    vec![
        pool_problem(
            raw(&|r| r.header.flags &= !FLAG_POOLS),
            0,
            "flag is not set",
        ),
        pool_problem(
            raw(&|r| r.sections.retain(|s| s.kind != kind::POOLS)),
            0,
            "no POOLS section",
        ),
        pool_problem(
            raw(&|r| {
                r.section_mut(kind::POOLS).body[name_at..name_at + 4].copy_from_slice(b"sram")
            }),
            1,
            "used twice",
        ),
        pool_problem(
            raw(&|r| r.section_mut(kind::POOLS).body[name_at] = 0),
            1,
            "not zero",
        ),
        pool_problem(
            raw(&|r| r.section_mut(kind::POOLS).body[0] ^= 64),
            0,
            "header's arena",
        ),
        pool_problem(
            write_err(|c, _| {
                c.pools = vec![stow_bundle::MemoryPool {
                    name: String::new(),
                    bytes: c.arena_bytes,
                    align: c.arena_align,
                }]
            }),
            0,
            "1 to 16 bytes",
        ),
        // A tensor naming a pool the bundle does not have.
        expect!(
            {
                let (mut c, w) = sample_pooled();
                c.tensors[0].pool = 2;
                to_bytes(&c, &refs(&w)).expect_err("pool 2 does not exist")
            },
            BundleError::BadField {
                index: 0,
                field: "region",
                ..
            }
        ),
        // A tensor beyond the end of its own pool (pool 1 has 64 bytes).
        expect!(
            {
                let (mut c, w) = sample_pooled();
                let out = c.outputs[0] as usize;
                c.tensors[out].offset = 64;
                to_bytes(&c, &refs(&w)).expect_err("past the end of pool 1")
            },
            BundleError::OutOfRegion { limit: 64, .. }
        ),
    ]
}

/// An input written in bands of rows and its bands must fit together: the
/// writer refuses each mismatch, and the valid sample round-trips with the
/// header flag set.
pub fn bad_input_rows() -> Vec<BundleError> {
    use stow_bundle::{AliasKind, BundleView};
    let (c, w) = sample_rows();
    let bytes = to_bytes(&c, &refs(&w)).expect("the sample is valid");
    let view = BundleView::parse(&bytes).expect("and reads back");
    assert_eq!(view.contents(), &with_assigned_offsets(&c));
    assert_ne!(
        view.header().flags & stow_bundle::format::FLAG_INPUT_ROWS,
        0
    );
    let rows_err = |f: fn(&mut stow_bundle::Contents)| {
        let (mut c, w) = sample_rows();
        f(&mut c);
        to_bytes(&c, &refs(&w)).expect_err("writer input must be rejected")
    };
    let input_rows = |e: BundleError, index: usize| expect!(e, BundleError::BadInputRows { index: i, .. } if i == index);
    vec![
        // The bands hold 1 of the input's 2 rows.
        input_rows(rows_err(|c| c.tensors[6].alias_of = None), 0),
        // A band of another type.
        input_rows(
            rows_err(|c| {
                c.tensors[6].dtype = stow_bundle::DType::I32;
            }),
            6,
        ),
        // A band that the caller cannot have written before step 0.
        input_rows(
            rows_err(|c| (c.tensors[6].first_step, c.tensors[6].last_step) = (1, 1)),
            6,
        ),
        // Rows of a tensor that is not in region `rows`.
        input_rows(
            rows_err(|c| c.tensors[6].alias_of = Some((AliasKind::InputRows, 2))),
            6,
        ),
        // An operator reading the whole input.
        input_rows(rows_err(|c| c.ops[0].inputs[0] = 0), 0),
        // An operator writing a band.
        input_rows(rows_err(|c| c.ops[1].outputs[0] = 6), 6),
        // A band listed as a graph input of its own.
        input_rows(rows_err(|c| c.inputs.push(5)), 5),
        // The input in region `rows` but not a graph input.
        input_rows(rows_err(|c| c.inputs.clear()), 0),
        expect!(
            rows_err(|c| c.tensors[0].offset = 8),
            BundleError::BadField {
                index: 0,
                field: "offset",
                ..
            }
        ),
        expect!(
            rows_err(|c| c.tensors[0].kind = stow_bundle::TensorKind::Activation),
            BundleError::BadField {
                index: 0,
                field: "region",
                ..
            }
        ),
    ]
}
