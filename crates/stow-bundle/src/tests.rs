//! Inline tests of internals: the `.proto` schema against the prost
//! structs, and the layout helpers.

use crate::proto::*;
use prost::Message;

const PROTO: &str = include_str!("../../../proto/stow_bundle.proto");

/// One field of the `.proto` file.
#[derive(Debug)]
struct ProtoField {
    repeated: bool,
    /// proto3 `optional`: presence is kept (`Option` in Rust).
    optional: bool,
    ty: String,
    name: String,
    tag: u32,
}

/// Messages and their fields, from the `.proto` text (the subset of the
/// language the schema uses: `message X { [repeated|optional] type name =
/// N; }`).
fn parse_proto(text: &str) -> Vec<(String, Vec<ProtoField>)> {
    let mut messages = Vec::new();
    let mut current: Option<(String, Vec<ProtoField>)> = None;
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        if let Some(rest) = line.strip_prefix("message ") {
            let name = rest.trim_end_matches('{').trim().to_string();
            current = Some((name, Vec::new()));
        } else if line == "}" {
            messages.push(current.take().expect("`}` outside a message"));
        } else if let Some((_, fields)) = current.as_mut() {
            if line.is_empty() {
                continue;
            }
            let decl = line.strip_suffix(';').expect("field line ends with `;`");
            let (lhs, tag) = decl.split_once('=').expect("field has a tag");
            let words: Vec<&str> = lhs.split_whitespace().collect();
            let (repeated, optional, ty, name) = match words.as_slice() {
                ["repeated", ty, name] => (true, false, *ty, *name),
                ["optional", ty, name] => (false, true, *ty, *name),
                [ty, name] => (false, false, *ty, *name),
                _ => panic!("unexpected field line `{line}`"),
            };
            fields.push(ProtoField {
                repeated,
                optional,
                ty: ty.to_string(),
                name: name.to_string(),
                tag: tag.trim().parse().expect("numeric tag"),
            });
        }
    }
    assert!(current.is_none(), "unterminated message");
    messages
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(tag: u32, wire: u64, out: &mut Vec<u8>) {
    varint((u64::from(tag) << 3) | wire, out);
}

const MESSAGES: [&str; 6] = [
    "BundleMeta",
    "TensorMeta",
    "PoolMeta",
    "OpMeta",
    "AttributeMeta",
    "ProvenanceMeta",
];

/// A one-field encoding of `f` with a value that is not the default, the
/// encoding prost must give back, and how its `Debug` must show the value.
fn probe(f: &ProtoField) -> (Vec<u8>, Vec<u8>, String) {
    let varint_of = |v: u64| {
        let mut p = Vec::new();
        varint(v, &mut p);
        p
    };
    // (payload, payload as re-encoded, wire type, debug form). Extreme
    // values tell widths and signedness apart: a uint32 field must
    // truncate a 64-bit varint, a uint64 field must keep it.
    let (payload, again, wire, shown): (Vec<u8>, Vec<u8>, u64, String) = match f.ty.as_str() {
        "uint32" => (
            varint_of(u64::MAX),
            varint_of(u32::MAX.into()),
            0,
            u32::MAX.to_string(),
        ),
        "uint64" => (
            varint_of(u64::MAX),
            varint_of(u64::MAX),
            0,
            u64::MAX.to_string(),
        ),
        "int64" => (varint_of(u64::MAX), varint_of(u64::MAX), 0, "-1".into()),
        // A negative int32 is sign-extended to ten bytes on the wire.
        "int32" => (varint_of(u64::MAX), varint_of(u64::MAX), 0, "-1".into()),
        "bool" => (vec![1], vec![1], 0, "true".into()),
        "float" => {
            let b = 1.5f32.to_le_bytes().to_vec();
            (b.clone(), b, 5, "1.5".into())
        }
        "string" => (b"\x02ab".to_vec(), b"\x02ab".to_vec(), 2, "\"ab\"".into()),
        // An empty sub-message.
        m if MESSAGES.contains(&m) => (vec![0], vec![0], 2, String::new()),
        other => panic!("type `{other}` in the .proto: teach this test about it"),
    };
    let message = MESSAGES.contains(&f.ty.as_str());
    let encode = |payload: &[u8]| {
        let mut out = Vec::new();
        if f.repeated && !message && f.ty != "string" {
            // Packed, as proto3 encodes repeated scalars.
            key(f.tag, 2, &mut out);
            varint(payload.len() as u64, &mut out);
        } else {
            key(f.tag, wire, &mut out);
        }
        out.extend_from_slice(payload);
        out
    };
    let shown = match (message, f.repeated) {
        (true, true) => format!("{}: [{} {{", f.name, f.ty),
        (true, false) => format!("{}: Some({} {{", f.name, f.ty),
        (false, true) => format!("{}: [{shown}]", f.name),
        (false, false) if f.optional => format!("{}: Some({shown})", f.name),
        (false, false) => format!("{}: {shown}", f.name),
    };
    (encode(&payload), encode(&again), shown)
}

/// Decodes `bytes` as the named message; returns its re-encoding and its
/// `Debug` form.
fn decode_as(message: &str, bytes: &[u8]) -> (Vec<u8>, String) {
    fn go<M: Message + Default + std::fmt::Debug>(bytes: &[u8]) -> (Vec<u8>, String) {
        let m = M::decode(bytes).expect("probe decodes");
        (m.encode_to_vec(), format!("{m:?}"))
    }
    match message {
        "BundleMeta" => go::<BundleMeta>(bytes),
        "TensorMeta" => go::<TensorMeta>(bytes),
        "PoolMeta" => go::<PoolMeta>(bytes),
        "OpMeta" => go::<OpMeta>(bytes),
        "AttributeMeta" => go::<AttributeMeta>(bytes),
        "ProvenanceMeta" => go::<ProvenanceMeta>(bytes),
        other => panic!("message {other} of the .proto has no Rust struct"),
    }
}

/// Field names of a default message, from its `Debug` form.
fn rust_fields(message: &str) -> Vec<String> {
    let (_, debug) = decode_as(message, &[]);
    let inner = debug
        .strip_prefix(&format!("{message} {{ "))
        .and_then(|s| s.strip_suffix(" }"))
        .unwrap_or_else(|| panic!("unexpected Debug form {debug}"));
    inner
        .split(", ")
        .map(|f| f.split(':').next().unwrap_or("").to_string())
        .collect()
}

/// Every message and field of `proto/stow_bundle.proto` exists in the
/// prost structs with the same name, tag, wire type, repetition and scalar
/// type, and the structs have no field the schema lacks. prost drops
/// unknown fields, so the expected re-encoding proves the tag is known
/// with that wire type; extreme values and the `Debug` form pin width and
/// signedness.
#[test]
fn proto_file_matches_prost_structs() {
    let messages = parse_proto(PROTO);
    let names: Vec<&str> = messages.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, MESSAGES);
    for (message, fields) in &messages {
        let mut schema: Vec<String> = fields.iter().map(|f| f.name.clone()).collect();
        let mut rust = rust_fields(message);
        schema.sort();
        rust.sort();
        assert_eq!(schema, rust, "fields of {message}");
        for f in fields {
            let (bytes, expected, shown) = probe(f);
            let (again, debug) = decode_as(message, &bytes);
            assert_eq!(
                again, expected,
                "{message}.{} (tag {}, {}) does not round-trip: wrong tag or type in Rust",
                f.name, f.tag, f.ty
            );
            assert!(
                debug.contains(&shown),
                "{message}.{}: expected `{shown}` in {debug}",
                f.name
            );
        }
    }
}

#[test]
fn writer_layout_is_canonical() {
    let bytes = crate::testing::sample_bytes();
    let view = crate::BundleView::parse(&bytes).unwrap();
    let kinds: Vec<u32> = view.sections().iter().map(|s| s.kind).collect();
    assert_eq!(kinds, crate::testing::KINDS);
    let mut cursor = (crate::format::HEADER_LEN + 5 * crate::format::SECTION_ENTRY_LEN) as u64;
    for s in view.sections() {
        assert_eq!(s.offset, cursor.next_multiple_of(s.align), "{s:?}");
        cursor = s.offset + s.length;
    }
    assert_eq!(cursor, bytes.len() as u64);
}
