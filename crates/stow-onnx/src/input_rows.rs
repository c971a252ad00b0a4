//! Graph inputs written in bands of rows.
//!
//! A patched stage that starts at a graph input (the image) reads it only
//! through slices of its rows, one per step. Kept whole, the input holds
//! its bytes until the stage's last step, beside everything the stage
//! computes. Cut instead into disjoint bands (one `Slice` per band, and a
//! `Concat` of adjacent bands where a step reads rows of several), the
//! bands become arena inputs of their own that the caller writes with the
//! input, and each band's bytes are free after its last reader
//! (docs/PATCHES.md, "The input in bands"; docs/FORMAT.md, region
//! `rows`).

use std::collections::{BTreeSet, HashSet};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::DimLike;
use tract_onnx::tract_core::ops;

/// The rows axis of a tensor of rank `rank`.
fn rows_axis(rank: usize) -> Option<usize> {
    rank.checked_sub(2)
}

/// The row slices every reader of graph input `input` takes, as (reader
/// node, first row, end row), when every reader is a `Slice` of the rows
/// with constant bounds and the input is no graph output; `None`
/// otherwise.
fn row_readers(model: &TypedModel, input: OutletId) -> Option<Vec<(usize, usize, usize)>> {
    if model.output_outlets().ok()?.contains(&input) {
        return None;
    }
    let fact = model.outlet_fact(input).ok()?;
    let axis = rows_axis(fact.rank())?;
    let readers = &model.node(input.node).outputs[input.slot].successors;
    if readers.is_empty() {
        return None;
    }
    readers
        .iter()
        .map(|inlet| {
            let slice = model.node(inlet.node).op_as::<ops::array::Slice>()?;
            let (a, b) = (slice.start.to_usize().ok()?, slice.end.to_usize().ok()?);
            (slice.axis == axis && a < b).then_some((inlet.node, a, b))
        })
        .collect()
}

/// The bands graph input `input` is cut into, as (slice node, first row,
/// end row) in row order, when its readers' row slices are disjoint,
/// cover every row and are at least two; `None` otherwise.
pub(crate) fn bands(model: &TypedModel, input: OutletId) -> Option<Vec<(usize, usize, usize)>> {
    let mut readers = row_readers(model, input)?;
    readers.sort_by_key(|&(_, a, b)| (a, b));
    let fact = model.outlet_fact(input).ok()?;
    let height = fact.shape.as_concrete()?[rows_axis(fact.rank())?];
    let mut end = 0;
    for &(_, a, b) in &readers {
        if a != end {
            return None;
        }
        end = b;
    }
    (end == height && readers.len() >= 2).then_some(readers)
}

/// Cuts every graph input read only through row slices into disjoint
/// bands at every slice's bounds; each slice then reads its band, or the
/// bands it spans joined. Inputs already in bands, or read whole, are
/// left alone.
pub(crate) fn cut(model: &mut TypedModel) -> TractResult<()> {
    let mut names: HashSet<String> = model.nodes().iter().map(|n| n.name.clone()).collect();
    for input in model.input_outlets()?.to_vec() {
        if bands(model, input).is_some() {
            continue;
        }
        let Some(readers) = row_readers(model, input) else {
            continue;
        };
        let fact = model.outlet_fact(input)?;
        let Some(shape) = fact.shape.as_concrete() else {
            continue;
        };
        let Some(axis) = rows_axis(fact.rank()) else {
            continue;
        };
        let height = shape[axis];
        let cuts: BTreeSet<usize> = readers
            .iter()
            .flat_map(|&(_, a, b)| [a, b])
            .chain([0, height])
            .collect();
        if cuts.len() < 3 {
            continue;
        }
        let cuts: Vec<usize> = cuts.into_iter().collect();
        let input_name = model.node(input.node).name.clone();
        let mut pieces = Vec::with_capacity(cuts.len() - 1);
        for w in cuts.windows(2) {
            let name =
                crate::stage::unique(&mut names, format!("{input_name}.rows{}-{}", w[0], w[1]));
            let band =
                model.wire_node(name, ops::array::Slice::new(axis, w[0], w[1]), &[input])?[0];
            pieces.push((w[0], w[1], band));
        }
        for (reader, a, b) in readers {
            let parts: TVec<OutletId> = pieces
                .iter()
                .filter(|&&(lo, hi, _)| lo >= a && hi <= b)
                .map(|&(_, _, band)| band)
                .collect();
            let joined = if parts.len() == 1 {
                parts[0]
            } else {
                let name =
                    crate::stage::unique(&mut names, format!("{}.bands", model.node(reader).name));
                model.wire_node(name, ops::array::TypedConcat::new(axis), &parts)?[0]
            };
            crate::stage::replace_outlet(model, OutletId::new(reader, 0), joined)?;
        }
    }
    model.compact()
}
