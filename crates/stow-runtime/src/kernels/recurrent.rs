//! The gate arithmetic of recurrent cells, as tract fuses it behind the
//! products of an LSTM or GRU step (`LstmEpilogue`, `GruEpilogue`). The
//! loop itself was unrolled at compile time; each iteration is a product
//! or two followed by one of these.

use super::cells::Load;
use super::float::Float;
use core::cell::Cell;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + Float::exp(-x))
}

/// One LSTM step's gates: `pre` holds rows of `[i, o, f, c̃]`
/// pre-activations (`4·hidden` each), `c_prev` the previous cell state;
/// writes the new hidden and cell states (`hidden` per row).
pub fn lstm_epilogue(
    hidden: usize,
    pre: impl Load<f32>,
    c_prev: impl Load<f32>,
    h_out: &[Cell<f32>],
    c_out: &[Cell<f32>],
) {
    let rows = c_out.len() / hidden.max(1);
    for r in 0..rows {
        let (p, s) = (r * 4 * hidden, r * hidden);
        for j in 0..hidden {
            let input = sigmoid(pre.load(p + j));
            let output = sigmoid(pre.load(p + hidden + j));
            let forget = sigmoid(pre.load(p + 2 * hidden + j));
            let candidate = Float::tanh(pre.load(p + 3 * hidden + j));
            let c = forget * c_prev.load(s + j) + input * candidate;
            c_out[s + j].set(c);
            h_out[s + j].set(output * Float::tanh(c));
        }
    }
}

/// One GRU step's gates (linear-before-reset form): `xh` and `rh` hold
/// rows of `[z, r, h̃]` pre-activations from the input and from the
/// previous hidden state, `h_prev` that state; writes the new state.
pub fn gru_epilogue(
    hidden: usize,
    xh: impl Load<f32>,
    rh: impl Load<f32>,
    h_prev: impl Load<f32>,
    h_out: &[Cell<f32>],
) {
    let rows = h_out.len() / hidden.max(1);
    for r in 0..rows {
        let (g, s) = (r * 3 * hidden, r * hidden);
        for j in 0..hidden {
            let update = sigmoid(xh.load(g + j) + rh.load(g + j));
            let reset = sigmoid(xh.load(g + hidden + j) + rh.load(g + hidden + j));
            let candidate =
                Float::tanh(xh.load(g + 2 * hidden + j) + reset * rh.load(g + 2 * hidden + j));
            let previous = h_prev.load(s + j);
            h_out[s + j].set(candidate + update * (previous - candidate));
        }
    }
}
