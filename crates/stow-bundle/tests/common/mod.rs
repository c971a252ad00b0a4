//! Helpers shared by the integration tests: edit a valid bundle in one
//! place and reseal its checksums so the edit reaches the check behind
//! them.
#![allow(dead_code)] // each test binary uses a different subset

use prost::Message;
use stow_bundle::format::{Header, SectionEntry, TensorRecord, HEADER_LEN, TENSOR_RECORD_LEN};
use stow_bundle::testing::{self, RawBundle};
use stow_bundle::{format::kind, proto, BundleError, BundleView};

/// The sample bundle.
pub fn good() -> Vec<u8> {
    testing::sample_bytes()
}

pub fn header(bytes: &[u8]) -> Header {
    bytemuck::pod_read_unaligned(&bytes[..HEADER_LEN])
}

/// The sample with its header edited and resealed.
pub fn with_header(f: impl FnOnce(&mut Header)) -> Vec<u8> {
    let mut b = good();
    let mut h = header(&b);
    f(&mut h);
    b[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&h));
    testing::reseal(&mut b);
    b
}

/// The sample with section entry `i` edited and resealed.
pub fn with_entry(i: usize, f: impl FnOnce(&mut SectionEntry)) -> Vec<u8> {
    let mut b = good();
    let mut e = testing::entry(&b, i);
    f(&mut e);
    testing::set_entry(&mut b, i, e);
    testing::reseal(&mut b);
    b
}

/// The sample with tensor record `index` edited and resealed.
pub fn with_record(index: usize, f: impl FnOnce(&mut TensorRecord)) -> Vec<u8> {
    let mut b = good();
    let at = testing::section_range(&b, kind::TENSORS).start + index * TENSOR_RECORD_LEN;
    let mut r: TensorRecord = bytemuck::pod_read_unaligned(&b[at..at + TENSOR_RECORD_LEN]);
    f(&mut r);
    b[at..at + TENSOR_RECORD_LEN].copy_from_slice(bytemuck::bytes_of(&r));
    testing::reseal(&mut b);
    b
}

/// The sample taken apart, edited and laid out again.
pub fn with_raw(f: impl FnOnce(&mut RawBundle)) -> Vec<u8> {
    let mut raw = RawBundle::split(&good());
    f(&mut raw);
    raw.assemble()
}

/// The sample with its metadata message edited.
pub fn with_meta(f: impl FnOnce(&mut proto::BundleMeta)) -> Vec<u8> {
    with_raw(|raw| {
        let s = raw.section_mut(kind::METADATA);
        let mut m = proto::BundleMeta::decode(s.body.as_slice()).unwrap();
        f(&mut m);
        s.body = m.encode_to_vec();
    })
}

/// The error `parse` gives for `bytes`.
pub fn err(bytes: &[u8]) -> BundleError {
    match BundleView::parse(bytes) {
        Ok(_) => panic!("bytes were accepted"),
        Err(e) => e,
    }
}
