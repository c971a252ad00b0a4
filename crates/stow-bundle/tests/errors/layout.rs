//! Cases for the header, the section table and the file layout.

use crate::common::*;
use crate::content::write_err;
use stow_bundle::format::{kind, MAX_ITEMS};
use stow_bundle::testing;
use stow_bundle::{BundleError, BundleView};

pub fn too_short() -> Vec<BundleError> {
    let g = good();
    let a = expect!(
        err(&g[..10]),
        BundleError::TooShort {
            what: "header",
            needed: 64,
            len: 10
        }
    );
    let mut b = g[..100].to_vec();
    let mut h = header(&b);
    h.file_len = 100;
    b[..64].copy_from_slice(bytemuck::bytes_of(&h));
    let c = expect!(
        err(&b),
        BundleError::TooShort {
            what: "section table",
            needed: 224,
            len: 100
        }
    );
    vec![a, c, err(&[])]
}

pub fn bad_magic() -> Vec<BundleError> {
    let mut b = good();
    b[0] = b'X';
    vec![expect!(
        err(&b),
        BundleError::BadMagic {
            found: [b'X', b'T', ..]
        }
    )]
}

pub fn unsupported_version() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_header(|h| h.version = 2)),
            BundleError::UnsupportedVersion {
                found: 2,
                supported: 1
            }
        ),
        expect!(
            err(&with_header(|h| h.version = 0)),
            BundleError::UnsupportedVersion { found: 0, .. }
        ),
    ]
}

pub fn unknown_flags() -> Vec<BundleError> {
    vec![expect!(
        err(&with_header(|h| h.flags = 32)),
        BundleError::UnknownFlags {
            flags: 32,
            known: 31
        }
    )]
}

pub fn reserved() -> Vec<BundleError> {
    let a = expect!(
        err(&with_header(|h| h.reserved[3] = 1)),
        BundleError::Reserved { offset: 56, .. }
    );
    let b = expect!(
        err(&with_entry(1, |e| e.reserved = 1)),
        BundleError::Reserved { offset: 124, .. }
    );
    assert!(b.to_string().contains("section entry 1"), "{b}");
    vec![a, b]
}

pub fn length_mismatch() -> Vec<BundleError> {
    let g = good();
    let n = g.len() as u64;
    let mut longer = g.clone();
    longer.extend_from_slice(&[0; 8]);
    vec![
        expect!(
            err(&longer),
            BundleError::LengthMismatch { header, actual } if header == n && actual == n + 8
        ),
        expect!(
            err(&g[..g.len() - 1]),
            BundleError::LengthMismatch { header, .. } if header == n
        ),
    ]
}

pub fn too_many() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_header(|h| h.section_count = 17)),
            BundleError::TooMany {
                what: "sections",
                count: 17,
                limit: 16
            }
        ),
        expect!(
            err(&with_header(|h| h.tensor_count = MAX_ITEMS + 1)),
            BundleError::TooMany {
                what: "tensors",
                ..
            }
        ),
        expect!(
            err(&with_header(|h| h.op_count = u32::MAX)),
            BundleError::TooMany { what: "ops", .. }
        ),
    ]
}

pub fn bad_arena_align() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_header(|h| h.arena_align = 48)),
            BundleError::BadArenaAlign { align: 48 }
        ),
        expect!(
            err(&with_header(|h| h.arena_align = 0)),
            BundleError::BadArenaAlign { align: 0 }
        ),
        expect!(
            write_err(|c, _| c.arena_align = 3),
            BundleError::BadArenaAlign { align: 3 }
        ),
    ]
}

pub fn checksum() -> Vec<BundleError> {
    let g = good();
    let mut b = g.clone();
    b[33] ^= 1; // arena_bytes, not resealed
    let head = expect!(
        err(&b),
        BundleError::Checksum {
            what: "header and section table",
            offset: 0,
            length: 224,
            ..
        }
    );
    let mut out = vec![head];
    for k in [kind::TENSORS, kind::STRINGS, kind::SHAPES, kind::METADATA] {
        let mut b = g.clone();
        let r = testing::section_range(&b, k);
        b[r.start] ^= 0x80;
        out.push(expect!(
            err(&b),
            BundleError::Checksum { what, offset, .. } if what == kind::name(k) && offset == r.start as u64
        ));
    }
    let mut b = g.clone();
    let r = testing::section_range(&b, kind::WEIGHTS);
    b[r.end - 1] ^= 1;
    let view = BundleView::parse(&b).expect("weights are not checked by parse");
    out.push(expect!(
        view.verify_weights().unwrap_err(),
        BundleError::Checksum { what: "weights", stored, computed, .. } if stored != computed
    ));
    out
}

pub fn unknown_section() -> Vec<BundleError> {
    vec![expect!(
        err(&with_entry(1, |e| e.kind = 77)),
        BundleError::UnknownSection { index: 1, kind: 77 }
    )]
}

pub fn duplicate_section() -> Vec<BundleError> {
    vec![expect!(
        err(&with_entry(1, |e| e.kind = kind::TENSORS)),
        BundleError::DuplicateSection {
            index: 1,
            kind: "tensors"
        }
    )]
}

pub fn missing_section() -> Vec<BundleError> {
    let mut out = Vec::new();
    for k in testing::KINDS {
        let b = with_raw(|raw| raw.sections.retain(|s| s.kind != k));
        out.push(expect!(
            err(&b),
            BundleError::MissingSection { kind } if kind == kind::name(k)
        ));
    }
    out
}

pub fn section_out_of_bounds() -> Vec<BundleError> {
    let n = good().len() as u64;
    vec![
        expect!(
            err(&with_entry(4, |e| e.length += 64)),
            BundleError::SectionOutOfBounds { index: 4, kind: "weights", end, .. } if end == n
        ),
        expect!(
            err(&with_entry(4, |e| e.length = u64::MAX)),
            BundleError::SectionOutOfBounds {
                index: 4,
                length: u64::MAX,
                ..
            }
        ),
        expect!(
            err(&with_entry(0, |e| e.offset = 0)),
            BundleError::SectionOutOfBounds {
                index: 0,
                offset: 0,
                start: 224,
                ..
            }
        ),
        expect!(
            err(&with_entry(3, |e| e.offset = u64::MAX - 7)),
            BundleError::SectionOutOfBounds {
                index: 3,
                kind: "metadata",
                ..
            }
        ),
    ]
}

pub fn section_misaligned() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_entry(1, |e| e.offset += 4)),
            BundleError::SectionMisaligned {
                index: 1,
                kind: "strings",
                required: 8,
                ..
            }
        ),
        expect!(
            err(&with_entry(4, |e| e.align = 8)),
            BundleError::SectionMisaligned {
                index: 4,
                align: 8,
                required: 64,
                ..
            }
        ),
    ]
}

pub fn sections_overlap() -> Vec<BundleError> {
    let tensors = testing::entry(&good(), 0);
    vec![
        expect!(
            err(&with_entry(2, |e| e.offset -= 8)),
            BundleError::SectionsOverlap {
                earlier: "strings",
                later: "shapes",
                ..
            }
        ),
        expect!(
            err(&with_entry(1, |e| e.offset = tensors.offset + 8)),
            BundleError::SectionsOverlap {
                earlier: "tensors",
                later: "strings",
                ..
            }
        ),
    ]
}

pub fn stray_bytes() -> Vec<BundleError> {
    let g = good();
    let n = g.len() as u64;
    let trailing = expect!(
        err(&with_entry(4, |e| e.length -= 8)),
        BundleError::StrayBytes { offset, end } if offset == n - 8 && end == n
    );
    // "xwhby" is 5 bytes: 3 bytes of padding before SHAPES.
    let strings = testing::section_range(&g, kind::STRINGS);
    assert_eq!(strings.len(), 5);
    let mut b = g.clone();
    b[strings.end + 1] = 1;
    let padding = expect!(
        err(&b),
        BundleError::StrayBytes { offset, .. } if offset == strings.end as u64
    );
    // A whole alignment unit of zeros before WEIGHTS is not padding.
    let mut b = g.clone();
    let w = testing::section_index(&b, kind::WEIGHTS);
    let mut e = testing::entry(&b, w);
    let at = e.offset as usize;
    b.splice(at..at, [0u8; 64]);
    e.offset += 64;
    testing::set_entry(&mut b, w, e);
    let mut h = header(&b);
    h.file_len += 64;
    b[..64].copy_from_slice(bytemuck::bytes_of(&h));
    testing::reseal(&mut b);
    let gap = expect!(
        err(&b),
        BundleError::StrayBytes { end, .. } if end == e.offset
    );
    vec![trailing, padding, gap]
}

pub fn section_size() -> Vec<BundleError> {
    vec![
        expect!(
            err(&with_header(|h| h.tensor_count = 4)),
            BundleError::SectionSize {
                kind: "tensors",
                expected: 256,
                found: 320
            }
        ),
        expect!(
            err(&with_raw(|r| r.section_mut(kind::STRINGS).body.push(b'z'))),
            BundleError::SectionSize {
                kind: "strings",
                expected: 5,
                found: 6
            }
        ),
        expect!(
            err(&with_raw(|r| r
                .section_mut(kind::SHAPES)
                .body
                .extend([0; 8]))),
            BundleError::SectionSize {
                kind: "shapes",
                expected: 72,
                found: 80
            }
        ),
        expect!(
            err(&with_raw(|r| r.section_mut(kind::SHAPES).body.push(0))),
            BundleError::SectionSize {
                kind: "shapes",
                expected: 72,
                found: 73
            }
        ),
    ]
}
