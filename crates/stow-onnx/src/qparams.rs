//! The scale and zero point of a quantized tensor, where the model gives
//! one pair for the whole tensor: read off the operator that writes it
//! (a QuantizeLinear, a quantized convolution or product, `QLinearAdd`,
//! `QLinearMul`, `QLinearGlobalAveragePool`, a look-up table), or through
//! operators that only move quantized values (a reshape, a pad, a max pool,
//! a concatenation of equal parameters, ...) from the tensor they move.
//! Bundles record them for `stow inspect`; kernels take their parameters
//! from their operands.

use crate::lookup::QLookup;
use crate::qops::{QLinearBinary, QLinearGlobalAvgPool};
use crate::quantize::Quantize;
use tract_onnx::prelude::*;

/// Operators whose quantized output has their first input's parameters.
const MOVING: &[&str] = &[
    "AddAxis",
    "RmAxis",
    "MoveAxis",
    "Reshape",
    "Pad",
    "MaxPool",
    "Downsample",
    "Slice",
    "TypedConcat",
    "Concat",
    "Identity",
];

/// The parameters of the u8/i8 value at `outlet`, when one pair holds for
/// all of it and the writer is one of those above.
pub(crate) fn of(model: &TypedModel, outlet: OutletId) -> Option<(f32, i32)> {
    let mut o = outlet;
    // Chains of moves are short; the bound only guards against a cycle.
    for _ in 0..256 {
        let node = model.node(o.node);
        let fact = model.outlet_fact(o).ok()?;
        if !matches!(fact.datum_type, DatumType::U8 | DatumType::I8) {
            return None;
        }
        let konst = |i: usize| model.outlet_fact(*node.inputs.get(i)?).ok()?.konst.clone();
        let pair = |s: usize, z: usize| -> Option<(f32, i32)> {
            let (s, z) = (konst(s)?, konst(z)?);
            (s.len() == 1 && z.len() == 1).then_some(())?;
            Some((
                s.cast_to_scalar::<f32>().ok()?,
                z.cast_to_scalar::<i32>().ok()?,
            ))
        };
        let name = node.op.name();
        return if let Some(l) = node.op_as::<QLookup>() {
            l.output.map(|(bits, zero)| (f32::from_bits(bits), zero))
        } else if node.op_is::<Quantize>() {
            pair(1, 2)
        } else if node.op_is::<QLinearBinary>() {
            pair(6, 7)
        } else if node.op_is::<QLinearGlobalAvgPool>() {
            pair(3, 4)
        } else if matches!(&*name, "Conv" | "EinSum") && node.inputs.len() == 9 {
            // Quantized convolutions and products: x, weights, bias, then
            // each operand's zero point and scale, the output's last.
            pair(8, 7)
        } else if MOVING.contains(&&*name) && o.slot == 0 {
            o = *node.inputs.first()?;
            continue;
        } else {
            None
        };
    }
    None
}
