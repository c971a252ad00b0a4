//! Open-and-walk: arbitrary bytes through `BundleView::parse`, and when
//! they pass, every tensor, weight, operator and lookup walked with the
//! reader's guarantees asserted (`stow_runtime::fuzzing`). Each input is
//! also tried with its checksums recomputed. Seeds: `seeds/bundle_open`.
//!
//!     cargo +nightly fuzz run bundle_open corpus/bundle_open seeds/bundle_open
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_runtime::fuzzing::run(data);
});
