//! The 16 × 16 transpose of 32-bit lanes in AVX-512 registers, which the
//! kernels that hold sixteen planes across a vector's lanes use to turn
//! planes into positions and back.

use core::arch::x86_64::*;

/// Lane `j` of result `i` is lane `i` of `r[j]`: sixteen rows of sixteen
/// 32-bit values turned into sixteen columns (four rounds of shuffles,
/// sixty-four instructions).
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline(always)]
#[allow(unsafe_code)]
pub(crate) unsafe fn transpose16(r: [__m512i; 16]) -> [__m512i; 16] {
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4i + j], lane k: rows 4i..4i + 3 of column 4k + j.
    let mut u = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    let mut cols = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x44>(u[j], u[4 + j]);
        let v1 = _mm512_shuffle_i32x4::<0xee>(u[j], u[4 + j]);
        let v2 = _mm512_shuffle_i32x4::<0x44>(u[8 + j], u[12 + j]);
        let v3 = _mm512_shuffle_i32x4::<0xee>(u[8 + j], u[12 + j]);
        cols[j] = _mm512_shuffle_i32x4::<0x88>(v0, v2);
        cols[4 + j] = _mm512_shuffle_i32x4::<0xdd>(v0, v2);
        cols[8 + j] = _mm512_shuffle_i32x4::<0x88>(v1, v3);
        cols[12 + j] = _mm512_shuffle_i32x4::<0xdd>(v1, v3);
    }
    cols
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_columns() {
        if !std::is_x86_feature_detected!("avx512f") {
            return;
        }
        let m: [[i32; 16]; 16] =
            core::array::from_fn(|i| core::array::from_fn(|j| (i * 100 + j) as i32));
        // SAFETY: AVX-512 F was detected; the loads and stores are of
        // whole 64-byte rows.
        #[allow(unsafe_code)]
        let t = unsafe {
            let r = core::array::from_fn(|i| _mm512_loadu_si512(m[i].as_ptr().cast()));
            let c = transpose16(r);
            let mut t = [[0i32; 16]; 16];
            for (row, v) in t.iter_mut().zip(c) {
                _mm512_storeu_si512(row.as_mut_ptr().cast(), v);
            }
            t
        };
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(t[i][j], m[j][i], "({i}, {j})");
            }
        }
    }
}
