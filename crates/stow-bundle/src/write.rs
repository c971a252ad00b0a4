use crate::checksum::crc32;
use crate::contents::{Contents, Region};
use crate::error::BundleError;
use crate::format::*;
use crate::meta;
use crate::read::BundleView;
use std::io::Write;
use std::path::Path;

fn input(msg: String) -> BundleError {
    BundleError::Input(msg)
}

fn pad_to(buf: &mut Vec<u8>, align: u64) {
    while !(buf.len() as u64).is_multiple_of(align) {
        buf.push(0);
    }
}

/// Encodes `contents` with `weights[i]` as the bytes of tensor `i` when it
/// is a weight (empty for arena tensors). Weight offsets are assigned here,
/// each aligned to [`WEIGHT_ALIGN`]; the `offset` of weight tensors in
/// `contents` is ignored. The result is parsed back and its weights
/// checked before it is returned.
pub fn to_bytes(contents: &Contents, weights: &[&[u8]]) -> Result<Vec<u8>, BundleError> {
    let n = contents.tensors.len();
    if weights.len() != n {
        return Err(input(format!(
            "{} weight slices for {n} tensors",
            weights.len()
        )));
    }
    if n as u64 > MAX_ITEMS as u64 || contents.ops.len() as u64 > MAX_ITEMS as u64 {
        return Err(input(format!(
            "{n} tensors / {} ops exceed the limit of {MAX_ITEMS}",
            contents.ops.len()
        )));
    }
    if contents.arena_align == 0 || !contents.arena_align.is_power_of_two() {
        return Err(input(format!(
            "arena alignment {} is not a power of two",
            contents.arena_align
        )));
    }
    let mut c = contents.clone();
    let mut weight_section: Vec<u8> = Vec::new();
    let mut strings: Vec<u8> = Vec::new();
    let mut shapes: Vec<u8> = Vec::new();
    let mut records: Vec<u8> = Vec::with_capacity(n * TENSOR_RECORD_LEN);
    let mut dims_index = 0u64;
    for (i, t) in c.tensors.iter_mut().enumerate() {
        let want = t
            .shape_bytes()
            .ok_or_else(|| input(format!("tensor `{}`: shape size overflows", t.name)))?;
        if want != t.size {
            return Err(input(format!(
                "tensor `{}`: size {} but its shape needs {want}",
                t.name, t.size
            )));
        }
        match t.region {
            Region::Weights => {
                if weights[i].len() as u64 != t.size {
                    return Err(input(format!(
                        "weight `{}`: {} bytes given, {} expected",
                        t.name,
                        weights[i].len(),
                        t.size
                    )));
                }
                pad_to(&mut weight_section, WEIGHT_ALIGN);
                t.offset = weight_section.len() as u64;
                weight_section.extend_from_slice(weights[i]);
            }
            Region::Arena => {
                let end = t.offset.checked_add(t.size);
                if end.is_none_or(|e| e > c.arena_bytes) {
                    return Err(input(format!(
                        "tensor `{}` ends past the arena of {} bytes",
                        t.name, c.arena_bytes
                    )));
                }
            }
        }
        if let Some((_, of)) = t.alias_of {
            if of as usize >= n {
                return Err(input(format!(
                    "tensor `{}` aliases unknown tensor {of}",
                    t.name
                )));
            }
        }
        let name_offset =
            u32::try_from(strings.len()).map_err(|_| input("names exceed 4 GiB".into()))?;
        strings.extend_from_slice(t.name.as_bytes());
        let record = TensorRecord {
            id: i as u32,
            kind: t.kind as u32,
            dtype: t.dtype as u32,
            region: t.region as u32,
            offset: t.offset,
            size: t.size,
            first_step: t.first_step,
            last_step: t.last_step,
            alias_kind: t.alias_of.map(|(k, _)| k as u32).unwrap_or(0),
            alias_of: t.alias_of.map(|(_, of)| of).unwrap_or(NO_ALIAS),
            name_offset,
            name_len: t.name.len() as u32,
            dims_index: u32::try_from(dims_index)
                .map_err(|_| input("too many dimensions".into()))?,
            rank: t.shape.len() as u32,
        };
        records.extend_from_slice(bytemuck::bytes_of(&record));
        for d in &t.shape {
            shapes.extend_from_slice(&d.to_le_bytes());
        }
        dims_index += t.shape.len() as u64;
    }
    for (o, op) in c.ops.iter().enumerate() {
        for &id in op.inputs.iter().chain(&op.outputs) {
            if id as usize >= n {
                return Err(input(format!(
                    "op {o} (`{}`) names unknown tensor {id}",
                    op.name
                )));
            }
        }
    }
    for &id in c.inputs.iter().chain(&c.outputs) {
        if id as usize >= n {
            return Err(input(format!(
                "graph input/output names unknown tensor {id}"
            )));
        }
    }
    let metadata = meta::encode(&c);
    let bodies: [(u32, u64, &[u8]); 5] = [
        (kind::TENSORS, 8, &records),
        (kind::STRINGS, 8, &strings),
        (kind::SHAPES, 8, &shapes),
        (kind::METADATA, 8, &metadata),
        (kind::WEIGHTS, WEIGHT_ALIGN, &weight_section),
    ];
    let table_end = HEADER_LEN + SECTION_ENTRY_LEN * bodies.len();
    let mut out = vec![0u8; table_end];
    let mut entries = Vec::with_capacity(bodies.len());
    for (k, align, body) in bodies {
        pad_to(&mut out, align);
        entries.push(SectionEntry {
            kind: k,
            align: align as u32,
            offset: out.len() as u64,
            length: body.len() as u64,
            crc: crc32(body),
            reserved: 0,
        });
        out.extend_from_slice(body);
    }
    let mut header = Header {
        magic: MAGIC,
        version: VERSION,
        flags: 0,
        file_len: out.len() as u64,
        section_count: entries.len() as u32,
        header_crc: 0,
        arena_bytes: c.arena_bytes,
        arena_align: c.arena_align,
        tensor_count: n as u32,
        op_count: c.ops.len() as u32,
        reserved: [0; 8],
    };
    for (i, e) in entries.iter().enumerate() {
        let at = HEADER_LEN + i * SECTION_ENTRY_LEN;
        out[at..at + SECTION_ENTRY_LEN].copy_from_slice(bytemuck::bytes_of(e));
    }
    out[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&header));
    header.header_crc = crc32(&out[..table_end]);
    out[..HEADER_LEN].copy_from_slice(bytemuck::bytes_of(&header));
    let view = BundleView::parse(&out)?;
    view.verify_weights()?;
    Ok(out)
}

/// Writes `bytes` to `path` through a temporary file in the same directory
/// and a rename, so a failure never leaves a partial file at `path`.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BundleError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(BundleError::MissingDirectory(dir));
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle".into());
    let tmp = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let io = |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(())
}
