//! Hostile-bytes tests: one per error the reader can give, plus a sweep over
//! every truncation and every bit flip of a small bundle.

use crate::checksum::crc32;
use crate::contents::*;
use crate::format::*;
use crate::{to_bytes, BundleError, BundleView};

pub(crate) fn sample() -> (Contents, Vec<Vec<u8>>) {
    let t = |name: &str, kind, dtype, shape: Vec<u64>, region, offset, steps: (u32, u32)| {
        let mut t = Tensor {
            name: name.into(),
            kind,
            dtype,
            shape,
            region,
            offset,
            size: 0,
            first_step: steps.0,
            last_step: steps.1,
            alias_of: None,
        };
        t.size = t.shape_bytes().unwrap();
        t
    };
    let tensors = vec![
        t(
            "x",
            TensorKind::Input,
            DType::F32,
            vec![1, 8],
            Region::Arena,
            0,
            (0, 0),
        ),
        t(
            "w",
            TensorKind::Weight,
            DType::F32,
            vec![8, 4],
            Region::Weights,
            0,
            (0, 0),
        ),
        t(
            "h",
            TensorKind::Activation,
            DType::F32,
            vec![1, 4],
            Region::Arena,
            64,
            (0, 1),
        ),
        t(
            "b",
            TensorKind::Weight,
            DType::I64,
            vec![3],
            Region::Weights,
            0,
            (1, 1),
        ),
        t(
            "y",
            TensorKind::Output,
            DType::F32,
            vec![1, 4],
            Region::Arena,
            0,
            (1, 1),
        ),
    ];
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
            attributes: vec![("f".into(), AttrValue::Floats(vec![0.5, 1.5]))],
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
            ..Default::default()
        },
    };
    (c, weights)
}

fn sample_bytes() -> Vec<u8> {
    let (c, w) = sample();
    let refs: Vec<&[u8]> = w.iter().map(|w| w.as_slice()).collect();
    to_bytes(&c, &refs).unwrap()
}

fn header(bytes: &[u8]) -> Header {
    bytemuck::pod_read_unaligned(&bytes[..HEADER_LEN])
}

fn entry(bytes: &[u8], i: usize) -> SectionEntry {
    let at = HEADER_LEN + i * SECTION_ENTRY_LEN;
    bytemuck::pod_read_unaligned(&bytes[at..at + SECTION_ENTRY_LEN])
}

fn set_entry(bytes: &mut [u8], i: usize, e: SectionEntry) {
    let at = HEADER_LEN + i * SECTION_ENTRY_LEN;
    bytes[at..at + SECTION_ENTRY_LEN].copy_from_slice(bytemuck::bytes_of(&e));
}

fn section_index(bytes: &[u8], k: u32) -> usize {
    (0..header(bytes).section_count as usize)
        .find(|&i| entry(bytes, i).kind == k)
        .unwrap()
}

/// Recomputes every checksum so a deliberate edit reaches the deeper checks.
fn reseal(bytes: &mut [u8]) {
    let mut h = header(bytes);
    for i in 0..h.section_count as usize {
        if HEADER_LEN + (i + 1) * SECTION_ENTRY_LEN > bytes.len() {
            break;
        }
        let mut e = entry(bytes, i);
        let end = e.offset.saturating_add(e.length) as usize;
        if let Some(body) = bytes.get(e.offset as usize..end) {
            e.crc = crc32(body);
        }
        set_entry(bytes, i, e);
    }
    h.header_crc = 0;
    bytes[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&h));
    let end = HEADER_LEN + SECTION_ENTRY_LEN * h.section_count as usize;
    h.header_crc = crc32(&bytes[..end.min(bytes.len())]);
    bytes[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&h));
}

fn edit_header(bytes: &mut [u8], f: impl FnOnce(&mut Header)) {
    let mut h = header(bytes);
    f(&mut h);
    bytes[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&h));
    reseal(bytes);
}

fn edit_record(bytes: &mut [u8], index: usize, f: impl FnOnce(&mut TensorRecord)) {
    let e = entry(bytes, section_index(bytes, kind::TENSORS));
    let at = e.offset as usize + index * TENSOR_RECORD_LEN;
    let mut r: TensorRecord = bytemuck::pod_read_unaligned(&bytes[at..at + TENSOR_RECORD_LEN]);
    f(&mut r);
    bytes[at..at + TENSOR_RECORD_LEN].copy_from_slice(bytemuck::bytes_of(&r));
    reseal(bytes);
}

fn parse_err(bytes: &[u8]) -> BundleError {
    BundleView::parse(bytes).expect_err("must be rejected")
}

#[test]
fn round_trip_keeps_contents_and_weights() {
    let (c, w) = sample();
    let bytes = sample_bytes();
    let view = BundleView::parse(&bytes).unwrap();
    view.verify_weights().unwrap();
    let got = view.contents();
    assert_eq!(got.ops, c.ops);
    assert_eq!(got.inputs, c.inputs);
    assert_eq!(got.provenance, c.provenance);
    for (i, t) in got.tensors.iter().enumerate() {
        let mut want = c.tensors[i].clone();
        if want.region == Region::Weights {
            want.offset = t.offset;
            assert_eq!(t.offset % WEIGHT_ALIGN, 0);
            assert_eq!(view.weight_bytes(i as u32).unwrap(), &w[i][..]);
        }
        assert_eq!(t, &want);
    }
    assert_eq!(bytes, sample_bytes(), "the writer is deterministic");
}

#[test]
fn every_truncation_is_rejected() {
    let bytes = sample_bytes();
    for len in 0..bytes.len() {
        assert!(
            BundleView::parse(&bytes[..len]).is_err(),
            "truncated to {len} bytes was accepted"
        );
    }
}

#[test]
fn every_bit_flip_is_rejected() {
    let bytes = sample_bytes();
    let weights = entry(&bytes, section_index(&bytes, kind::WEIGHTS));
    for byte in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[byte] ^= 1 << bit;
            let in_weights = (byte as u64) >= weights.offset;
            match BundleView::parse(&b) {
                Err(_) => {}
                Ok(v) if in_weights => assert!(
                    v.verify_weights().is_err(),
                    "flip at {byte}.{bit} passed the weight check"
                ),
                Ok(_) => panic!("flip at byte {byte} bit {bit} was accepted"),
            }
        }
    }
}

#[test]
fn header_errors() {
    let good = sample_bytes();
    assert!(matches!(
        parse_err(&good[..10]),
        BundleError::TooShort { what: "header", .. }
    ));
    let mut b = good.clone();
    b[0] = b'X';
    assert!(matches!(parse_err(&b), BundleError::BadMagic { .. }));
    let mut b = good.clone();
    edit_header(&mut b, |h| h.version = 2);
    assert!(matches!(parse_err(&b), BundleError::UnsupportedVersion(2)));
    let mut b = good.clone();
    edit_header(&mut b, |h| h.flags = 4);
    assert!(matches!(parse_err(&b), BundleError::UnknownFlags(4)));
    let mut b = good.clone();
    edit_header(&mut b, |h| h.reserved[3] = 1);
    assert!(matches!(parse_err(&b), BundleError::Reserved("header")));
    let mut b = good.clone();
    b.extend_from_slice(&[0; 8]);
    assert!(matches!(parse_err(&b), BundleError::LengthMismatch { .. }));
    let mut b = good.clone();
    edit_header(&mut b, |h| h.section_count = 99);
    assert!(matches!(
        parse_err(&b),
        BundleError::TooMany {
            what: "sections",
            ..
        }
    ));
    let mut b = good.clone();
    edit_header(&mut b, |h| h.tensor_count = MAX_ITEMS + 1);
    assert!(matches!(
        parse_err(&b),
        BundleError::TooMany {
            what: "tensors",
            ..
        }
    ));
    let mut b = good.clone();
    b[33] ^= 1; // arena_bytes, without resealing
    assert!(matches!(
        parse_err(&b),
        BundleError::Checksum {
            what: "header and section table",
            ..
        }
    ));
    let mut b = good.clone();
    edit_header(&mut b, |h| h.arena_align = 48);
    assert!(matches!(parse_err(&b), BundleError::Disagree(_)));
}

#[test]
fn section_errors() {
    let good = sample_bytes();
    let with_entry = |i: usize, f: &dyn Fn(&mut SectionEntry)| {
        let mut b = good.clone();
        let mut e = entry(&b, i);
        f(&mut e);
        set_entry(&mut b, i, e);
        reseal(&mut b);
        b
    };
    assert!(matches!(
        parse_err(&with_entry(1, &|e| e.kind = 77)),
        BundleError::UnknownSection { index: 1, kind: 77 }
    ));
    assert!(matches!(
        parse_err(&with_entry(1, &|e| e.kind = kind::TENSORS)),
        BundleError::DuplicateSection("tensors")
    ));
    assert!(matches!(
        parse_err(&with_entry(1, &|e| e.offset += 4)),
        BundleError::SectionMisaligned { .. }
    ));
    assert!(matches!(
        parse_err(&with_entry(1, &|e| e.reserved = 1)),
        BundleError::Reserved("section entry")
    ));
    assert!(matches!(
        parse_err(&with_entry(4, &|e| e.length += 64)),
        BundleError::SectionOutOfBounds { .. }
    ));
    assert!(matches!(
        parse_err(&with_entry(4, &|e| e.length = u64::MAX)),
        BundleError::SectionOutOfBounds { .. }
    ));
    assert!(matches!(
        parse_err(&with_entry(0, &|e| e.offset = 0)),
        BundleError::SectionOutOfBounds { .. }
    ));
    assert!(matches!(
        parse_err(&with_entry(2, &|e| e.offset -= 8)),
        BundleError::SectionsOverlap { .. }
    ));
    let shrunk = with_entry(4, &|e| e.length -= 8);
    assert!(matches!(parse_err(&shrunk), BundleError::StrayBytes { .. }));
    let mut b = good.clone();
    edit_header(&mut b, |h| h.section_count = 4);
    assert!(matches!(
        parse_err(&b),
        BundleError::MissingSection("weights")
            | BundleError::SectionOutOfBounds { .. }
            | BundleError::StrayBytes { .. }
    ));
    let mut b = good.clone();
    let meta = entry(&b, section_index(&b, kind::METADATA));
    b[meta.offset as usize] ^= 0xFF;
    assert!(matches!(
        parse_err(&b),
        BundleError::Checksum {
            what: "metadata",
            ..
        }
    ));
}

#[test]
fn record_errors() {
    let good = sample_bytes();
    let rec = |index: usize, f: &dyn Fn(&mut TensorRecord)| {
        let mut b = good.clone();
        edit_record(&mut b, index, |r| f(r));
        parse_err(&b)
    };
    assert!(matches!(
        rec(0, &|r| r.id = 3),
        BundleError::BadField {
            index: 0,
            field: "id",
            ..
        }
    ));
    assert!(matches!(
        rec(0, &|r| r.dtype = 99),
        BundleError::BadField { field: "dtype", .. }
    ));
    assert!(matches!(
        rec(0, &|r| r.kind = 0),
        BundleError::BadField { field: "kind", .. }
    ));
    assert!(matches!(
        rec(0, &|r| r.region = 2),
        BundleError::BadField {
            field: "region",
            ..
        }
    ));
    assert!(matches!(
        rec(0, &|r| r.alias_kind = 9),
        BundleError::BadField {
            field: "alias_kind",
            ..
        }
    ));
    assert!(matches!(
        rec(0, &|r| r.alias_of = 3),
        BundleError::BadField {
            field: "alias_of",
            ..
        }
    ));
    assert!(matches!(
        rec(0, &|r| r.name_offset = 10_000),
        BundleError::BadField {
            field: "name_offset",
            ..
        }
    ));
    assert!(matches!(
        rec(0, &|r| r.dims_index = 10_000),
        BundleError::BadField {
            field: "dims_index",
            ..
        }
    ));
    assert!(matches!(
        rec(0, &|r| r.size = 16),
        BundleError::ShapeSize { index: 0, .. }
    ));
    assert!(matches!(
        rec(2, &|r| r.offset = 120),
        BundleError::OutOfRegion {
            index: 2,
            region: "arena",
            ..
        }
    ));
    assert!(matches!(
        rec(2, &|r| r.offset = u64::MAX - 4),
        BundleError::OutOfRegion { .. }
    ));
    assert!(matches!(
        rec(1, &|r| r.offset = 8),
        BundleError::BadField {
            field: "offset",
            ..
        } | BundleError::OutOfRegion { .. }
    ));
    assert!(matches!(
        rec(2, &|r| (r.first_step, r.last_step) = (2, 1)),
        BundleError::BadField {
            field: "last_step",
            ..
        }
    ));
    assert!(matches!(
        rec(2, &|r| r.offset = 0),
        BundleError::Disagree(_)
    ));
    let mut b = good.clone();
    let strings = entry(&b, section_index(&b, kind::STRINGS));
    b[strings.offset as usize] = 0xFF;
    reseal(&mut b);
    assert!(matches!(parse_err(&b), BundleError::BadName(0)));
}

#[test]
fn metadata_errors() {
    let (c, w) = sample();
    let refs: Vec<&[u8]> = w.iter().map(|w| w.as_slice()).collect();
    let good = to_bytes(&c, &refs).unwrap();
    // Weight offsets as the writer assigned them.
    let c = BundleView::parse(&good).unwrap().contents().clone();
    let with_metadata = |meta: Vec<u8>| {
        // Rebuild the file with a different metadata section of the same
        // length or padded with a trailing unknown field.
        let mut b = good.clone();
        let i = section_index(&b, kind::METADATA);
        let e = entry(&b, i);
        assert!(meta.len() <= e.length as usize);
        let mut body = meta;
        // Unknown protobuf field 15 (bytes) soaks up the remaining length.
        let spare = e.length as usize - body.len();
        if spare > 0 {
            assert!(spare >= 2 && spare - 2 < 128);
            body.push((15 << 3) | 2);
            body.push((spare - 2) as u8);
            body.resize(e.length as usize, 0);
        }
        b[e.offset as usize..(e.offset + e.length) as usize].copy_from_slice(&body);
        reseal(&mut b);
        parse_err(&b)
    };
    let e = entry(&good, section_index(&good, kind::METADATA));
    assert!(matches!(
        with_metadata(vec![0xFF; e.length as usize]),
        BundleError::Metadata(_)
    ));
    let mut bad = c.clone();
    bad.ops[0].inputs[0] = 42;
    let err = with_metadata(crate::meta::encode(&bad));
    assert!(
        matches!(err, BundleError::BadTensorRef { id: 42, .. }),
        "{err:?}"
    );
    let mut bad = c.clone();
    bad.outputs = vec![9];
    assert!(matches!(
        with_metadata(crate::meta::encode(&bad)),
        BundleError::BadTensorRef { id: 9, .. }
    ));
    let mut bad = c.clone();
    bad.tensors[4].name = "z".into();
    assert!(matches!(
        with_metadata(crate::meta::encode(&bad)),
        BundleError::Disagree(_)
    ));
    let mut bad = c.clone();
    bad.tensors.pop();
    assert!(matches!(
        with_metadata(crate::meta::encode(&bad)),
        BundleError::Disagree(_)
    ));
}

#[test]
fn writer_rejects_bad_contents() {
    let (c, w) = sample();
    let refs: Vec<&[u8]> = w.iter().map(|w| w.as_slice()).collect();
    let mut bad = c.clone();
    bad.tensors[2].offset = 120;
    assert!(matches!(to_bytes(&bad, &refs), Err(BundleError::Input(_))));
    let mut bad = c.clone();
    bad.tensors[0].size = 3;
    assert!(matches!(to_bytes(&bad, &refs), Err(BundleError::Input(_))));
    let mut short = refs.clone();
    short[1] = &[1, 2, 3];
    assert!(matches!(to_bytes(&c, &short), Err(BundleError::Input(_))));
    let mut bad = c.clone();
    bad.ops[1].outputs = vec![17];
    assert!(matches!(to_bytes(&bad, &refs), Err(BundleError::Input(_))));
}

#[test]
fn write_file_leaves_nothing_behind_on_failure() {
    let dir = std::env::temp_dir().join(format!("stow-bundle-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no/such/dir/x.stow");
    assert!(matches!(
        crate::write_file(&missing, b"abc"),
        Err(BundleError::MissingDirectory(_))
    ));
    let ok = dir.join("x.stow");
    crate::write_file(&ok, &sample_bytes()).unwrap();
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("x.stow")],
        "no temporary file left"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
