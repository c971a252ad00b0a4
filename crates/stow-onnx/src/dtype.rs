use tract_onnx::prelude::DatumType;

/// Element type name and size in bytes for a tract type, or `None` when a
/// bundle cannot hold it. `TDim` values are stored as 64-bit integers.
pub(crate) fn element_type(dt: DatumType) -> Option<(&'static str, u64)> {
    Some(match dt.unquantized() {
        DatumType::F32 => ("f32", 4),
        DatumType::F16 => ("f16", 2),
        DatumType::F64 => ("f64", 8),
        DatumType::I8 => ("i8", 1),
        DatumType::I16 => ("i16", 2),
        DatumType::I32 => ("i32", 4),
        DatumType::I64 | DatumType::TDim => ("i64", 8),
        DatumType::U8 => ("u8", 1),
        DatumType::U16 => ("u16", 2),
        DatumType::U32 => ("u32", 4),
        DatumType::U64 => ("u64", 8),
        DatumType::Bool => ("bool", 1),
        _ => return None,
    })
}
