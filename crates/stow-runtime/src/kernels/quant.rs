//! Quantization to 8-bit integers.

use super::cells::Src;
use super::run::{Failure, Views};
use super::Operand;

/// The scale and zero point that map the tensor's range, widened to hold
/// 0, onto 0..=255.
fn range_u8(src: Src<'_, f32>) -> (f32, u8) {
    let (mut lo, mut hi) = (0f32, 0f32);
    for i in 0..src.len() {
        let e = src.at(i);
        lo = lo.min(e);
        hi = hi.max(e);
    }
    let scale = (hi - lo) / 255.0;
    // An all-zero tensor has scale 0: its zero point and values are 0
    // (NaN saturates to 0 in the casts).
    let zero = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as u8;
    (scale, zero)
}

/// Divides rather than multiplying by the reciprocal: the two round some
/// values to different integers, and ONNX divides.
#[inline(always)]
fn quantize_u8(x: f32, scale: f32, zero: u8) -> u8 {
    ((x / scale).round_ties_even() as i32 + i32::from(zero)).clamp(0, 255) as u8
}

/// ONNX DynamicQuantizeLinear: outputs the quantized tensor, its scale and
/// its zero point (rounding half to even, saturating).
pub(super) fn dynamic_u8(
    v: &Views<'_>,
    x: &Operand<'_>,
    outs: &[Operand<'_>],
) -> Result<(), Failure> {
    let src = v.src::<f32>(x)?;
    let (scale, zero) = range_u8(src);
    for (i, c) in v.dst::<u8>(&outs[0])?.iter().enumerate() {
        c.set(quantize_u8(src.at(i), scale, zero));
    }
    v.dst::<f32>(&outs[1])?[0].set(scale);
    v.dst::<u8>(&outs[2])?[0].set(zero);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ONNX operator documentation's examples.
    #[test]
    fn matches_the_documented_examples() {
        let cases: [(&[f32], f32, u8, &[u8]); 3] = [
            (
                &[0., 2., -3., -2.5, 1.34, 0.5],
                0.019_607_844,
                153,
                &[153, 255, 0, 26, 221, 179],
            ),
            (
                &[-1., -2.1, -1.3, -2.5, -3.34, -4.],
                0.015_686_275,
                255,
                &[191, 121, 172, 96, 42, 0],
            ),
            (&[0., 0., 0.], 0.0, 0, &[0, 0, 0]),
        ];
        for (x, scale, zero, want) in cases {
            let (s, z) = range_u8(Src::Weight(x));
            assert!((s - scale).abs() < 1e-8, "{s} != {scale}");
            assert_eq!(z, zero);
            let got: Vec<u8> = x.iter().map(|&e| quantize_u8(e, s, z)).collect();
            assert_eq!(got, want);
        }
    }
}
