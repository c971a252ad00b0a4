//! Rewriting every node of a kind in a typed model, one patch at a time.

use crate::error::OnnxError;
use tract_onnx::prelude::*;

/// Replaces nodes of type `O` one at a time by the patch `patch_for`
/// makes for each (a patch may wire in new `O` nodes: they are rewritten
/// in turn), then declutters the result. Returns whether anything changed.
pub(crate) fn rewrite_each<O: TypedOp>(
    model: &mut TypedModel,
    patch_for: impl Fn(&TypedModel, &TypedNode) -> Result<TypedModelPatch, OnnxError>,
    refuse: impl Fn(&TypedNode, String) -> OnnxError,
) -> Result<bool, OnnxError> {
    let mut changed = false;
    while let Some(id) = model.nodes().iter().position(|n| n.op_is::<O>()) {
        let node = model.node(id).clone();
        let patch = patch_for(model, &node)?;
        patch
            .apply(model)
            .map_err(|e| refuse(&node, format!("{e:#}")))?;
        changed = true;
    }
    if changed {
        crate::guards::declutter(model)?;
    }
    Ok(changed)
}
