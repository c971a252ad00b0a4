//! The plain-Rust tile of [`super`]: what the vector kernels compute, for
//! CPUs without them and as the tests' reference.

use super::{PanelQuads, RowQuads, Tile, MR, NR};

/// The sum of four products of `x` (a panel's quad) and `w` (a row's).
#[inline(always)]
fn dot4<const LANES_UNSIGNED: bool>(x: [u8; 4], w: [u8; 4]) -> i32 {
    let mut s = 0i32;
    for t in 0..4 {
        // At most 4·255·128 in magnitude: no overflow.
        s += if LANES_UNSIGNED {
            i32::from(x[t]) * i32::from(w[t] as i8)
        } else {
            i32::from(x[t] as i8) * i32::from(w[t])
        };
    }
    s
}

/// [`super::tile`] in plain Rust.
pub(super) fn tile_portable<const LANES_UNSIGNED: bool, P: PanelQuads, R: RowQuads>(
    panel: P,
    rows: &R,
    nq: usize,
) -> Tile {
    let mut acc = [[0i32; NR]; MR];
    for q in 0..nq {
        let x: [[u8; 4]; NR] = core::array::from_fn(|l| panel.quad(q * NR + l).to_le_bytes());
        for (r, row) in acc.iter_mut().enumerate() {
            let w = rows.quad(q, r).to_le_bytes();
            for (a, x) in row.iter_mut().zip(x) {
                *a = a.wrapping_add(dot4::<LANES_UNSIGNED>(x, w));
            }
        }
    }
    acc
}
