//! Arithmetic, comparison, bit operations and conversions on every element
//! type a bundle may hold, with the results ONNX defines where Rust's
//! operators would trap or differ (integer division by zero, shifts past
//! the width, out-of-range conversions).

use super::elementwise;
use super::float::Float;
use super::layout::Share;
use super::run::{Failure, Views};
use super::{BinOp, Operand};
use half::f16;
use stow_bundle::DType;

/// Integer arithmetic as ONNX defines it for fixed-width integers:
/// wrapping, and division truncating toward zero (a zero divisor gives 0
/// rather than a trap).
trait Int: bytemuck::Pod + Ord {
    fn plus(self, c: Self) -> Self;
    fn minus(self, c: Self) -> Self;
    fn times(self, c: Self) -> Self;
    fn over(self, c: Self) -> Self;
    fn rem(self, c: Self) -> Self;
    fn pow(self, c: Self) -> Self;
    /// A shift by a negative amount or by the width or more moves every
    /// bit out: 0, or all sign bits for an arithmetic right shift.
    fn shl(self, c: Self) -> Self;
    fn shr(self, c: Self) -> Self;
    fn and(self, c: Self) -> Self;
    fn or(self, c: Self) -> Self;
    fn xor(self, c: Self) -> Self;
    fn not(self) -> Self;
}

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl Int for $t {
            #[inline(always)]
            fn plus(self, c: Self) -> Self { self.wrapping_add(c) }
            #[inline(always)]
            fn minus(self, c: Self) -> Self { self.wrapping_sub(c) }
            #[inline(always)]
            fn times(self, c: Self) -> Self { self.wrapping_mul(c) }
            #[inline(always)]
            fn over(self, c: Self) -> Self { if c == 0 { 0 } else { self.wrapping_div(c) } }
            #[inline(always)]
            fn rem(self, c: Self) -> Self { if c == 0 { 0 } else { self.wrapping_rem(c) } }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn pow(self, c: Self) -> Self {
                if c >= 0 {
                    return self.wrapping_pow(u32::try_from(c).unwrap_or(u32::MAX));
                }
                // A negative power of an integer: only ±1 stay integers;
                // everything else truncates to 0.
                #[allow(clippy::eq_op)]
                let one: Self = 1;
                if self == one {
                    one
                } else if self.wrapping_add(one) == 0 {
                    if c % 2 == 0 { one } else { self }
                } else {
                    0
                }
            }
            #[inline(always)]
            fn shl(self, c: Self) -> Self {
                u32::try_from(c).ok().and_then(|c| self.checked_shl(c)).unwrap_or(0)
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn shr(self, c: Self) -> Self {
                let fill = if self < 0 { !0 } else { 0 };
                u32::try_from(c).ok().and_then(|c| self.checked_shr(c)).unwrap_or(fill)
            }
            #[inline(always)]
            fn and(self, c: Self) -> Self { self & c }
            #[inline(always)]
            fn or(self, c: Self) -> Self { self | c }
            #[inline(always)]
            fn xor(self, c: Self) -> Self { self ^ c }
            #[inline(always)]
            fn not(self) -> Self { !self }
        }
    )*};
}
int_ops!(i8, i16, i32, i64, u8, u16, u32, u64);

fn int_binary<T: Int>(
    v: &Views<'_>,
    b: BinOp,
    walk: Share<'_, 3>,
    x: &Operand<'_>,
    y: &Operand<'_>,
    o: &Operand<'_>,
) -> Result<(), Failure> {
    use elementwise::binary as run;
    use BinOp::*;
    let (p, q) = (v.src::<T>(x)?, v.src::<T>(y)?);
    if b.compares() {
        let out = v.dst::<u8>(o)?;
        run(walk, p, q, out, move |a: T, c: T| b.compare(a, c));
        return Ok(());
    }
    let out = v.dst::<T>(o)?;
    match b {
        Add => run(walk, p, q, out, T::plus),
        Sub => run(walk, p, q, out, T::minus),
        Mul => run(walk, p, q, out, T::times),
        Div => run(walk, p, q, out, T::over),
        Rem => run(walk, p, q, out, T::rem),
        Pow => run(walk, p, q, out, T::pow),
        Max => run(walk, p, q, out, T::max),
        ShiftLeft => run(walk, p, q, out, T::shl),
        ShiftRight => run(walk, p, q, out, T::shr),
        BitAnd => run(walk, p, q, out, T::and),
        BitOr => run(walk, p, q, out, T::or),
        BitXor => run(walk, p, q, out, T::xor),
        _ => run(walk, p, q, out, T::min),
    }
    Ok(())
}

fn float_binary<F>(
    v: &Views<'_>,
    b: BinOp,
    walk: Share<'_, 3>,
    x: &Operand<'_>,
    y: &Operand<'_>,
    o: &Operand<'_>,
    pow: fn(F, F) -> F,
) -> Result<(), Failure>
where
    F: bytemuck::Pod
        + PartialOrd
        + core::ops::Add<Output = F>
        + core::ops::Sub<Output = F>
        + core::ops::Mul<Output = F>
        + core::ops::Div<Output = F>
        + core::ops::Rem<Output = F>,
{
    use elementwise::binary as run;
    use BinOp::*;
    let (p, q) = (v.src::<F>(x)?, v.src::<F>(y)?);
    if b.compares() {
        let out = v.dst::<u8>(o)?;
        run(walk, p, q, out, move |a: F, c: F| b.compare(a, c));
        return Ok(());
    }
    let out = v.dst::<F>(o)?;
    // max/min as IEEE maxNum/minNum: a NaN operand yields the other one.
    let nan = |c: F| c.partial_cmp(&c).is_none();
    let max = move |a: F, c: F| if a >= c || nan(c) { a } else { c };
    let min = move |a: F, c: F| if a <= c || nan(c) { a } else { c };
    match b {
        Add => run(walk, p, q, out, |a, c| a + c),
        Sub => run(walk, p, q, out, |a, c| a - c),
        Mul => run(walk, p, q, out, |a, c| a * c),
        Div => run(walk, p, q, out, |a, c| a / c),
        // Rust's float remainder is C's fmod: the sign of the dividend.
        Rem => run(walk, p, q, out, |a, c| a % c),
        Pow => run(walk, p, q, out, pow),
        Max => run(walk, p, q, out, max),
        _ => run(walk, p, q, out, min),
    }
    Ok(())
}

/// Runs a prepared binary operation (types checked at setup).
pub(super) fn binary_run(
    v: &Views<'_>,
    b: BinOp,
    walk: Share<'_, 3>,
    x: &Operand<'_>,
    y: &Operand<'_>,
    o: &Operand<'_>,
) -> Result<(), Failure> {
    use elementwise::binary as run;
    use BinOp::*;
    match x.dtype {
        DType::F32 => float_binary::<f32>(v, b, walk, x, y, o, Float::powf)?,
        DType::F64 => float_binary::<f64>(v, b, walk, x, y, o, Float::powf)?,
        DType::I8 => int_binary::<i8>(v, b, walk, x, y, o)?,
        DType::I16 => int_binary::<i16>(v, b, walk, x, y, o)?,
        DType::I32 => int_binary::<i32>(v, b, walk, x, y, o)?,
        DType::I64 => int_binary::<i64>(v, b, walk, x, y, o)?,
        DType::U8 => int_binary::<u8>(v, b, walk, x, y, o)?,
        DType::U16 => int_binary::<u16>(v, b, walk, x, y, o)?,
        DType::U32 => int_binary::<u32>(v, b, walk, x, y, o)?,
        DType::U64 => int_binary::<u64>(v, b, walk, x, y, o)?,
        DType::Bool if b.compares() => {
            let (p, q) = (v.src::<u8>(x)?, v.src::<u8>(y)?);
            let out = v.dst::<u8>(o)?;
            run(walk, p, q, out, move |a: u8, c: u8| {
                b.compare(a != 0, c != 0)
            });
        }
        _ => {
            let (p, q) = (v.src::<u8>(x)?, v.src::<u8>(y)?);
            let out = v.dst::<u8>(o)?;
            match b {
                And => run(walk, p, q, out, |a, c| ((a != 0) && (c != 0)) as u8),
                Or => run(walk, p, q, out, |a, c| ((a != 0) || (c != 0)) as u8),
                _ => run(walk, p, q, out, |a, c| ((a != 0) != (c != 0)) as u8),
            }
        }
    }
    Ok(())
}

/// Flips every bit of an integer tensor.
pub(super) fn bit_not(v: &Views<'_>, x: &Operand<'_>, o: &Operand<'_>) -> Result<(), Failure> {
    fn go<T: Int>(v: &Views<'_>, x: &Operand<'_>, o: &Operand<'_>) -> Result<(), Failure> {
        elementwise::convert(v.src::<T>(x)?, v.dst::<T>(o)?, T::not);
        Ok(())
    }
    match x.dtype {
        DType::I8 => go::<i8>(v, x, o),
        DType::I16 => go::<i16>(v, x, o),
        DType::I32 => go::<i32>(v, x, o),
        DType::I64 => go::<i64>(v, x, o),
        DType::U16 => go::<u16>(v, x, o),
        DType::U32 => go::<u32>(v, x, o),
        DType::U64 => go::<u64>(v, x, o),
        _ => go::<u8>(v, x, o),
    }
}

/// Writes `test` of each float element of `x` into bool tensor `o`.
pub(super) fn float_test(
    v: &Views<'_>,
    x: &Operand<'_>,
    o: &Operand<'_>,
    test: impl Fn(f64) -> bool,
) -> Result<(), Failure> {
    let out = v.dst::<u8>(o)?;
    match x.dtype {
        DType::F16 => elementwise::convert(v.src::<f16>(x)?, out, |e| test(e.to_f64()) as u8),
        DType::F64 => elementwise::convert(v.src::<f64>(x)?, out, |e| test(e) as u8),
        _ => elementwise::convert(v.src::<f32>(x)?, out, |e| test(e.into()) as u8),
    }
    Ok(())
}

/// One element on its way from one type to another: integers exactly,
/// floats as f64 (which holds every f16 and f32 exactly).
#[derive(Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

/// An element type a cast reads and writes.
trait Element: bytemuck::Pod {
    fn to_num(self) -> Num;
    fn from_num(n: Num) -> Self;
}

macro_rules! int_elements {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline(always)]
            fn to_num(self) -> Num { Num::Int(self as i128) }
            /// Integers wrap to the width (two's complement, as numpy's
            /// astype); floats truncate toward zero and saturate, NaN to 0.
            #[inline(always)]
            fn from_num(n: Num) -> Self {
                match n {
                    Num::Int(i) => i as Self,
                    Num::Float(f) => f as Self,
                }
            }
        }
    )*};
}
int_elements!(i8, i16, i32, i64, u8, u16, u32, u64);

impl Element for f32 {
    fn to_num(self) -> Num {
        Num::Float(self.into())
    }
    fn from_num(n: Num) -> Self {
        // Straight from the integer: one rounding, not two through f64.
        match n {
            Num::Int(i) => i as f32,
            Num::Float(f) => f as f32,
        }
    }
}

impl Element for f64 {
    fn to_num(self) -> Num {
        Num::Float(self)
    }
    fn from_num(n: Num) -> Self {
        match n {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl Element for f16 {
    fn to_num(self) -> Num {
        Num::Float(self.to_f64())
    }
    fn from_num(n: Num) -> Self {
        // Integers past 2^53 are past f16's range: the f64 step cannot
        // change the result.
        match n {
            Num::Int(i) => f16::from_f64(i as f64),
            Num::Float(f) => f16::from_f64(f),
        }
    }
}

fn cast_from<S: Element>(v: &Views<'_>, x: &Operand<'_>, o: &Operand<'_>) -> Result<(), Failure> {
    let src = v.src::<S>(x)?;
    macro_rules! into {
        ($t:ty) => {
            elementwise::convert(src, v.dst::<$t>(o)?, |s: S| <$t>::from_num(s.to_num()))
        };
    }
    match o.dtype {
        DType::F16 => into!(f16),
        DType::F32 => into!(f32),
        DType::F64 => into!(f64),
        DType::I8 => into!(i8),
        DType::I16 => into!(i16),
        DType::I32 => into!(i32),
        DType::I64 => into!(i64),
        DType::U8 => into!(u8),
        DType::U16 => into!(u16),
        DType::U32 => into!(u32),
        DType::U64 => into!(u64),
        DType::Bool => elementwise::convert(src, v.dst::<u8>(o)?, |s: S| {
            (match s.to_num() {
                Num::Int(i) => i != 0,
                Num::Float(f) => f != 0.0,
            }) as u8
        }),
    }
    Ok(())
}

/// Converts `x` into `o`'s element type (a bool reads as 0 or 1).
pub(super) fn cast(v: &Views<'_>, x: &Operand<'_>, o: &Operand<'_>) -> Result<(), Failure> {
    if (x.dtype, o.dtype) == (DType::I32, DType::F32) {
        // An integer product's sums into floats (every MatMulInteger of a
        // dynamically quantised model): straight, one rounding as below,
        // not through i128, whose conversion is a library call per
        // element.
        let src = v.src::<i32>(x)?;
        elementwise::convert(src, v.dst::<f32>(o)?, |s: i32| s as f32);
        return Ok(());
    }
    match x.dtype {
        DType::F16 => cast_from::<f16>(v, x, o),
        DType::F32 => cast_from::<f32>(v, x, o),
        DType::F64 => cast_from::<f64>(v, x, o),
        DType::I8 => cast_from::<i8>(v, x, o),
        DType::I16 => cast_from::<i16>(v, x, o),
        DType::I32 => cast_from::<i32>(v, x, o),
        DType::I64 => cast_from::<i64>(v, x, o),
        DType::U16 => cast_from::<u16>(v, x, o),
        DType::U32 => cast_from::<u32>(v, x, o),
        DType::U64 => cast_from::<u64>(v, x, o),
        DType::U8 | DType::Bool => cast_from::<u8>(v, x, o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The i32 → f32 cast's direct conversion rounds as the one through
    /// i128 that every other integer takes.
    #[test]
    fn i32_to_f32_directly_equals_the_general_cast() {
        let mut x = 0x1234_5678u32;
        let mut values: alloc::vec::Vec<i32> =
            alloc::vec![0, 1, -1, i32::MAX, i32::MIN, 16_777_217, -16_777_217];
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            values.push(x as i32);
        }
        for v in values {
            assert_eq!(
                (v as f32).to_bits(),
                f32::from_num(v.to_num()).to_bits(),
                "{v}"
            );
        }
    }

    #[test]
    fn shifts_past_the_width_or_negative_move_every_bit_out() {
        assert_eq!(Int::shl(-8i8, 8), 0);
        assert_eq!(Int::shl(4i8, -1), 0);
        assert_eq!(Int::shl(1i32, 31), i32::MIN);
        assert_eq!(Int::shr(-8i8, 9), -1);
        assert_eq!(Int::shr(4i8, 9), 0);
        assert_eq!(Int::shr(-8i32, -16), -1);
        assert_eq!(Int::shr(-8i32, 2), -2);
        assert_eq!(Int::shr(200u8, 3), 25);
        assert_eq!(Int::shl(200u8, 8), 0);
        assert_eq!(Int::shr(u64::MAX, 64), 0);
    }

    #[test]
    fn integer_remainder_and_power_follow_the_truncating_definitions() {
        for a in -20i32..=20 {
            for c in -7i32..=7 {
                let want = if c == 0 { 0 } else { a % c };
                assert_eq!(Int::rem(a, c), want, "{a} % {c}");
                let p = Int::pow(a, c);
                let want = if c >= 0 {
                    (a as f64).powi(c).rem_euclid(2f64.powi(32)) as u32 as i32
                } else if a == 0 {
                    0
                } else {
                    (a as f64).powi(c).trunc() as i32
                };
                assert_eq!(p, want, "{a} ^ {c}");
            }
        }
        assert_eq!(Int::rem(i8::MIN, -1), 0);
        assert_eq!(Int::over(i8::MIN, -1), i8::MIN);
    }

    #[test]
    fn casts_round_once_and_wrap_integers() {
        let big = (1i64 << 60) + (1 << 36) + 1;
        // Just above half an f32 step past 2^60: rounding through f64
        // first would drop the +1 and then round the tie down to 2^60.
        assert_eq!(f32::from_num(big.to_num()), 2f32.powi(60) + 2f32.powi(37));
        assert_eq!(u8::from_num(300i32.to_num()), 44);
        assert_eq!(i8::from_num(255u8.to_num()), -1);
        assert_eq!(i64::from_num(u64::MAX.to_num()), -1);
        assert_eq!(i32::from_num(2.9f32.to_num()), 2);
        assert_eq!(i32::from_num((-2.9f64).to_num()), -2);
        assert_eq!(f16::from_num(65504.0f32.to_num()), f16::MAX);
        assert_eq!(
            f32::from_num(f16::from_f32(0.1).to_num()),
            f16::from_f32(0.1).to_f32()
        );
    }
}
