//! One test per `BundleError` variant: a handcrafted or mutated input that
//! must give exactly that variant, with the context it carries. A final
//! test checks that the cases cover every variant.

/// Asserts `$e` matches `$p` and yields it.
macro_rules! expect {
    ($e:expr, $p:pat $(if $guard:expr)?) => {{
        let e = $e;
        assert!(
            matches!(e, $p $(if $guard)?),
            "expected {}, got {e:?}",
            stringify!($p $(if $guard)?)
        );
        assert!(!e.to_string().is_empty());
        e
    }};
}

#[path = "../common/mod.rs"]
mod common;
mod content;
mod layout;

use content::*;
use layout::*;
use std::collections::BTreeSet;
use stow_bundle::BundleError;

/// The variant's name; the exhaustive match makes a new variant a compile
/// error here until it is listed (and given a case below).
fn variant(e: &BundleError) -> &'static str {
    use BundleError::*;
    match e {
        TooShort { .. } => "TooShort",
        BadMagic { .. } => "BadMagic",
        UnsupportedVersion { .. } => "UnsupportedVersion",
        UnknownFlags { .. } => "UnknownFlags",
        Reserved { .. } => "Reserved",
        LengthMismatch { .. } => "LengthMismatch",
        TooMany { .. } => "TooMany",
        BadArenaAlign { .. } => "BadArenaAlign",
        Checksum { .. } => "Checksum",
        UnknownSection { .. } => "UnknownSection",
        DuplicateSection { .. } => "DuplicateSection",
        MissingSection { .. } => "MissingSection",
        SectionOutOfBounds { .. } => "SectionOutOfBounds",
        SectionMisaligned { .. } => "SectionMisaligned",
        SectionsOverlap { .. } => "SectionsOverlap",
        StrayBytes { .. } => "StrayBytes",
        SectionSize { .. } => "SectionSize",
        BadField { .. } => "BadField",
        OutOfRegion { .. } => "OutOfRegion",
        ShapeSize { .. } => "ShapeSize",
        BadName { .. } => "BadName",
        Metadata { .. } => "Metadata",
        MetadataVsHeader { .. } => "MetadataVsHeader",
        MetadataVsRecord { .. } => "MetadataVsRecord",
        BadAttribute { .. } => "BadAttribute",
        BadTensorRef { .. } => "BadTensorRef",
        WeightCount { .. } => "WeightCount",
        WeightBytes { .. } => "WeightBytes",
        MissingDirectory { .. } => "MissingDirectory",
        Io { .. } => "Io",
        BadPool { .. } => "BadPool",
        BadInputRows { .. } => "BadInputRows",
    }
}

const ALL_VARIANTS: usize = 32;

/// Each case returns the errors it checked, for the coverage test.
macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { super::$name(); } )*
        pub(super) const CASES: &[(&str, fn() -> Vec<BundleError>)] = &[$((stringify!($name), super::$name)),*];
    };
}

mod case {
    use super::BundleError;
    cases!(
        too_short,
        bad_magic,
        unsupported_version,
        unknown_flags,
        reserved,
        length_mismatch,
        too_many,
        bad_arena_align,
        checksum,
        unknown_section,
        duplicate_section,
        missing_section,
        section_out_of_bounds,
        section_misaligned,
        sections_overlap,
        stray_bytes,
        section_size,
        bad_field,
        out_of_region,
        shape_size,
        bad_name,
        metadata,
        metadata_vs_header,
        metadata_vs_record,
        bad_attribute,
        bad_tensor_ref,
        weight_count,
        weight_bytes,
        missing_directory,
        io,
        bad_pool,
        bad_input_rows,
    );
}

#[test]
fn the_cases_cover_every_variant() {
    let mut seen = BTreeSet::new();
    for (name, case) in case::CASES {
        let errors = case();
        assert!(!errors.is_empty(), "{name} checked nothing");
        seen.extend(errors.iter().map(variant));
    }
    assert_eq!(seen.len(), ALL_VARIANTS, "variants seen: {seen:?}");
}
