//! Operator attributes recorded in the bundle: structured values for the op
//! families Stowage knows, plus tract's own description of every op.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::cnn::{PaddingSpec, PoolSpec};

/// A typed attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// One integer.
    Int(i64),
    /// Integers.
    Ints(Vec<i64>),
    /// One float.
    Float(f32),
    /// Text.
    Text(String),
}

fn ints(v: impl IntoIterator<Item = usize>) -> Attr {
    Attr::Ints(v.into_iter().map(|x| x as i64).collect())
}

fn pool_attrs(out: &mut Vec<(String, Attr)>, spec: &PoolSpec) {
    out.push((
        "data_format".into(),
        Attr::Text(format!("{:?}", spec.data_format)),
    ));
    out.push((
        "kernel_shape".into(),
        ints(spec.kernel_shape.iter().copied()),
    ));
    let rank = spec.kernel_shape.len();
    out.push((
        "strides".into(),
        ints(spec.strides.clone().unwrap_or_else(|| tvec![1; rank])),
    ));
    out.push((
        "dilations".into(),
        ints(spec.dilations.clone().unwrap_or_else(|| tvec![1; rank])),
    ));
    let padding = match &spec.padding {
        PaddingSpec::Explicit(b, a) | PaddingSpec::ExplicitOnnxPool(b, a, _) => {
            out.push(("pads_before".into(), ints(b.iter().copied())));
            out.push(("pads_after".into(), ints(a.iter().copied())));
            if let PaddingSpec::ExplicitOnnxPool(_, _, ceil) = &spec.padding {
                out.push(("ceil_mode".into(), Attr::Int(*ceil as i64)));
            }
            "explicit"
        }
        PaddingSpec::Valid => "valid",
        PaddingSpec::SameUpper => "same_upper",
        PaddingSpec::SameLower => "same_lower",
    };
    out.push(("padding".into(), Attr::Text(padding.into())));
    out.push((
        "input_channels".into(),
        Attr::Int(spec.input_channels as i64),
    ));
    out.push((
        "output_channels".into(),
        Attr::Int(spec.output_channels as i64),
    ));
}

/// OneHot's values as their raw bits (`off`, `on`: exact for every element
/// type, which a float attribute is not), and the element type they are
/// of. Values of a type a bundle cannot hold get only their type name,
/// which the runtime then refuses.
fn one_hot_values(out: &mut Vec<(String, Attr)>, off: &Tensor, on: &Tensor) {
    let dt = off.datum_type();
    let held = crate::dtype::element_type(dt).filter(|_| dt.is_copy() && on.datum_type() == dt);
    let Some((name, size)) = held else {
        out.push(("value_type".into(), Attr::Text(format!("{dt:?}"))));
        return;
    };
    out.push(("value_type".into(), Attr::Text(name.into())));
    for (key, value) in [("off", off), ("on", on)] {
        let Ok(plain) = value.try_as_plain_ram() else {
            continue;
        };
        let bytes = plain.as_bytes();
        if bytes.len() == size as usize && bytes.len() <= 8 {
            let mut bits = [0u8; 8];
            bits[..bytes.len()].copy_from_slice(bytes);
            out.push((key.into(), Attr::Int(i64::from_le_bytes(bits))));
        }
    }
}

/// The output type of a quantized `EinSum` or `Conv` (tract's `q_params`:
/// nine inputs, integer accumulation, requantised output), as tract names
/// it (`U8`, `I8`, `I32`; a type with its own scale and zero point shows
/// them, and the runtime refuses it). Absent for the float forms.
fn q_params(out: &mut Vec<(String, Attr)>, q: Option<DatumType>) {
    if let Some(dt) = q {
        out.push(("q_params".into(), Attr::Text(format!("{dt:?}"))));
    }
}

/// Attributes of `op`, sorted by name.
pub(crate) fn attributes(op: &dyn TypedOp) -> Vec<(String, Attr)> {
    let mut out: Vec<(String, Attr)> = Vec::new();
    let any = op.as_op();
    if let Some(conv) = any.downcast_ref::<ops::cnn::Conv>() {
        pool_attrs(&mut out, &conv.pool_spec);
        out.push(("group".into(), Attr::Int(conv.group as i64)));
        out.push((
            "kernel_format".into(),
            Attr::Text(format!("{:?}", conv.kernel_fmt)),
        ));
        q_params(&mut out, conv.q_params);
    } else if let Some(deconv) = any.downcast_ref::<ops::cnn::Deconv>() {
        pool_attrs(&mut out, &deconv.pool_spec);
        out.push(("group".into(), Attr::Int(deconv.group as i64)));
        out.push((
            "kernel_format".into(),
            Attr::Text(format!("{:?}", deconv.kernel_format)),
        ));
        out.push((
            "adjustments".into(),
            ints(deconv.adjustments.iter().copied()),
        ));
    } else if let Some(pool) = any.downcast_ref::<ops::cnn::MaxPool>() {
        pool_attrs(&mut out, &pool.pool_spec);
    } else if let Some(indices) = any.downcast_ref::<crate::imports::MaxPoolIndices>() {
        out.push((
            "spatial_dims".into(),
            ints(indices.spatial_dims.iter().copied()),
        ));
        out.push((
            "storage_order".into(),
            Attr::Int(indices.column_major as i64),
        ));
    } else if let Some(pool) = any.downcast_ref::<ops::cnn::SumPool>() {
        pool_attrs(&mut out, &pool.pool_spec);
        out.push((
            "count_include_pad".into(),
            Attr::Int(pool.count_include_pad as i64),
        ));
        out.push(("normalize".into(), Attr::Int(pool.normalize as i64)));
    } else if let Some(einsum) = any.downcast_ref::<ops::einsum::EinSum>() {
        out.push(("expr".into(), Attr::Text(einsum.axes.to_string())));
        q_params(&mut out, einsum.q_params);
    } else if let Some(concat) = any.downcast_ref::<ops::array::TypedConcat>() {
        out.push(("axis".into(), Attr::Int(concat.axis as i64)));
    } else if let Some(reduce) = any.downcast_ref::<ops::nn::Reduce>() {
        out.push(("axes".into(), ints(reduce.axes.iter().copied())));
        out.push((
            "reducer".into(),
            Attr::Text(format!("{:?}", reduce.reducer)),
        ));
    } else if let Some(softmax) = any.downcast_ref::<ops::nn::Softmax>() {
        out.push(("axes".into(), ints(softmax.axes.iter().copied())));
        out.push(("kind".into(), Attr::Text(format!("{:?}", softmax.kind))));
    } else if let Some(axis) = any.downcast_ref::<AxisOp>() {
        match axis {
            AxisOp::Add(a) => out.push(("add".into(), Attr::Int(*a as i64))),
            AxisOp::Rm(a) => out.push(("rm".into(), Attr::Int(*a as i64))),
            AxisOp::Move(from, to) => out.push(("move".into(), ints([*from, *to]))),
            AxisOp::Reshape(at, from, to) => {
                out.push(("reshape_at".into(), Attr::Int(*at as i64)));
                out.push(("reshape_from".into(), Attr::Text(format!("{from:?}"))));
                out.push(("reshape_to".into(), Attr::Text(format!("{to:?}"))));
            }
        }
    } else if let Some(pad) = any.downcast_ref::<ops::array::Pad>() {
        out.push((
            "pads".into(),
            ints(pad.pads.iter().flat_map(|(b, a)| [*b, *a])),
        ));
        out.push(("mode".into(), Attr::Text(format!("{:?}", pad.mode))));
        if let ops::array::PadMode::Constant(value) = &pad.mode {
            // tract will not cast a bool to a number: read it as one.
            let v = if value.datum_type() == DatumType::Bool {
                value.cast_to_scalar::<bool>().map(|b| b as u8 as f32)
            } else {
                value.cast_to_scalar::<f32>()
            };
            if let Ok(v) = v {
                out.push(("value".into(), Attr::Float(v)));
            }
        }
    } else if let Some(norm) = any.downcast_ref::<ops::nn::RmsNorm>() {
        out.push(("axis".into(), Attr::Int(norm.axis as i64)));
        if let Ok(eps) = norm.eps.cast_to_scalar::<f32>() {
            out.push(("eps".into(), Attr::Float(eps)));
        }
    } else if let Some(resize) = any.downcast_ref::<ops::nn::Resize>() {
        let input = |ix: Option<usize>| Attr::Int(ix.map_or(-1, |i| i as i64));
        out.push((
            "coordinate_transformation".into(),
            Attr::Text(resize.coord_transformer.as_str().into()),
        ));
        out.push((
            "interpolator".into(),
            Attr::Text(resize.interpolator.as_str().into()),
        ));
        out.push(("nearest".into(), Attr::Text(resize.nearest.as_str().into())));
        out.push(("scales_input".into(), input(resize.optional_scales_input)));
        out.push(("sizes_input".into(), input(resize.optional_sizes_input)));
    } else if let Some(up) = any.downcast_ref::<ops::nn::NearestUpsample>() {
        out.push(("scales".into(), ints(up.scales.iter().copied())));
    } else if let Some(down) = any.downcast_ref::<ops::Downsample>() {
        out.push(("axis".into(), Attr::Int(down.axis as i64)));
        out.push(("stride".into(), Attr::Int(down.stride as i64)));
        out.push(("modulo".into(), Attr::Int(down.modulo as i64)));
    } else if let Some(cast) = any.downcast_ref::<ops::cast::Cast>() {
        out.push(("to".into(), Attr::Text(format!("{:?}", cast.to))));
    } else if let Some(slice) = any.downcast_ref::<ops::array::Slice>() {
        out.push(("axis".into(), Attr::Int(slice.axis as i64)));
        out.push(("start".into(), Attr::Text(slice.start.to_string())));
        out.push(("end".into(), Attr::Text(slice.end.to_string())));
    } else if let Some(gather) = any.downcast_ref::<ops::array::Gather>() {
        out.push(("axis".into(), Attr::Int(gather.axis as i64)));
    } else if let Some(bin) = any.downcast_ref::<ops::binary::TypedBinOp>() {
        out.push(("mini_op".into(), Attr::Text(bin.0.name().to_string())));
    } else if let Some(ew) = any.downcast_ref::<ops::element_wise::ElementWiseOp>() {
        out.push(("mini_op".into(), Attr::Text(ew.0.name().to_string())));
        if let Some(leaky) = ew.0.downcast_ref::<ops::nn::LeakyRelu>() {
            out.push(("alpha".into(), Attr::Float(leaky.alpha)));
        } else if let Some(pow) = ew.0.downcast_ref::<ops::math::PowConst>() {
            out.push(("exponent".into(), Attr::Float(pow.exponent)));
        } else if let Some(inf) = ew.0.downcast_ref::<ops::math::IsInf>() {
            out.push((
                "detect_positive".into(),
                Attr::Int(inf.detect_positive as i64),
            ));
            out.push((
                "detect_negative".into(),
                Attr::Int(inf.detect_negative as i64),
            ));
        } else if let Some(gelu) = ew.0.downcast_ref::<ops::nn::GeluApproximate>() {
            out.push(("fast_impl".into(), Attr::Int(gelu.fast_impl as i64)));
        }
    } else if let Some(trilu) = any.downcast_ref::<ops::array::Trilu>() {
        out.push(("upper".into(), Attr::Int(trilu.upper as i64)));
    } else if let Some(gather) = any.downcast_ref::<ops::array::GatherElements>() {
        out.push(("axis".into(), Attr::Int(gather.axis as i64)));
    } else if let Some(cell) = any.downcast_ref::<ops::lstm_cell::LstmEpilogue>() {
        out.push(("hidden".into(), Attr::Int(cell.hidden as i64)));
    } else if let Some(cell) = any.downcast_ref::<ops::gru_cell::GruEpilogue>() {
        out.push(("hidden".into(), Attr::Int(cell.hidden as i64)));
    } else if let Some(gs) = any.downcast_ref::<ops::nn::GridSample>() {
        out.push(("mode".into(), Attr::Text(gs.mode.as_str().into())));
        let padding = gs.padding_mode.as_str().into();
        out.push(("padding_mode".into(), Attr::Text(padding)));
        out.push(("align_corners".into(), Attr::Int(gs.align_corners as i64)));
    } else if let Some(q) = any.downcast_ref::<crate::quantize::Quantize>() {
        out.push(("axis".into(), Attr::Int(q.axis.map_or(-1, |a| a as i64))));
    } else if let Some(q) = any.downcast_ref::<crate::quantize::Dequantize>() {
        out.push(("axis".into(), Attr::Int(q.axis.map_or(-1, |a| a as i64))));
    } else if let Some(norm) = any.downcast_ref::<crate::norms::LayerNorm>() {
        out.push(("axis".into(), Attr::Int(norm.axis as i64)));
        out.push(("epsilon".into(), Attr::Float(norm.epsilon)));
    } else if let Some(pool) = any.downcast_ref::<crate::qops::QLinearGlobalAvgPool>() {
        out.push(("channels_last".into(), Attr::Int(pool.channels_last as i64)));
    } else if let Some(fft) = any.downcast_ref::<ops::fft::Fft>() {
        out.push(("axis".into(), Attr::Int(fft.axis as i64)));
        out.push(("inverse".into(), Attr::Int(fft.inverse as i64)));
    } else if let Some(lrn) = any.downcast_ref::<tract_onnx_opl::lrn::Lrn>() {
        out.push(("size".into(), Attr::Int(lrn.size as i64)));
        out.push(("alpha".into(), Attr::Float(lrn.alpha)));
        out.push(("beta".into(), Attr::Float(lrn.beta)));
        out.push(("bias".into(), Attr::Float(lrn.bias)));
    } else if let Some(hot) = any.downcast_ref::<ops::array::OneHot>() {
        out.push(("axis".into(), Attr::Int(hot.axis as i64)));
        out.push(("dim".into(), Attr::Int(hot.dim as i64)));
        one_hot_values(&mut out, &hot.off, &hot.on);
    } else if let Some(s) = any.downcast_ref::<ops::array::ScatterElements>() {
        out.push(("axis".into(), Attr::Int(s.axis as i64)));
        out.push(("reduction".into(), Attr::Text(s.reduction.as_str().into())));
    } else if let Some(s) = any.downcast_ref::<ops::array::ScatterNd>() {
        out.push(("reduction".into(), Attr::Text(s.reduction.as_str().into())));
    } else if let Some(g) = any.downcast_ref::<ops::array::GatherNd>() {
        out.push(("batch_dims".into(), Attr::Int(g.batch_dims as i64)));
    } else if let Some(tile) = any.downcast_ref::<ops::array::Tile>() {
        if let Some(m) = tile
            .multipliers
            .iter()
            .map(|d| d.to_i64().ok())
            .collect::<Option<Vec<i64>>>()
        {
            out.push(("multipliers".into(), Attr::Ints(m)));
        }
    }
    let info = op.info().unwrap_or_default();
    if !info.is_empty() {
        out.push(("tract.info".into(), Attr::Text(info.join("; "))));
    }
    out.push(("tract.debug".into(), Attr::Text(format!("{op:?}"))));
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
