use crate::error::{contain, OnnxError, Stage};
use crate::graph::{analyse, ExecutionOrder, ModelGraph};
use crate::shapes::InputShape;
use prost::Message;
use std::path::Path;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

/// How to load a model.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Shapes that replace the model's own for the named inputs.
    pub inputs: Vec<InputShape>,
    /// Values for symbolic dimensions, by symbol name.
    pub dims: Vec<(String, i64)>,
    /// Graph inputs made constants (`--set`): they fold away and are not
    /// inputs of the compiled model.
    pub constants: Vec<crate::FixedInput>,
    /// Which byte sharing beyond lifetimes to apply.
    pub reuse: crate::ReuseOptions,
    /// Stages run in bands of rows (patch-based execution), applied in
    /// order to the decluttered model.
    pub stages: Vec<crate::PatchedStage>,
}

/// A model parsed, with its input shapes fixed and decluttered: what
/// [`load`] records in an execution order, kept so that several
/// rewrites of one model (patched stages tried by the compiler) need one
/// parse.
#[derive(Clone, Debug)]
pub struct Decluttered {
    model: TypedModel,
    /// Stages already rewritten into `model` ([`Decluttered::with_stages`]).
    applied: Vec<crate::PatchedStage>,
}

/// Loads `path`, fixes its input shapes, declutters it and records every
/// tensor and operator in execution order.
pub fn load(path: &Path, options: &LoadOptions) -> Result<ModelGraph, OnnxError> {
    load_decluttered(path, options)?.graph(options.reuse, &options.stages)
}

/// Loads `path`, fixes its input shapes and declutters it, ready to be
/// recorded ([`Decluttered::graph`]).
pub fn load_decluttered(path: &Path, options: &LoadOptions) -> Result<Decluttered, OnnxError> {
    let (typed, output_names) = match typed_model(path, options, false) {
        // Shapes recorded in `value_info` for other input shapes than the
        // ones fixed contradict what tract infers: they are hints, so drop
        // them rather than fail.
        Err(
            first @ OnnxError::Tract {
                stage: Stage::ShapeInference,
                ..
            },
        ) => typed_model(path, options, true).map_err(|_| first)?,
        other => other?,
    };
    let model = contain(Stage::Declutter, || {
        let mut model = typed;
        crate::widen::keep_f16_divisions(&mut model);
        crate::refusals::refuse_degenerate_windows(&model)?;
        crate::guards::guard(&mut model)?;
        crate::guards::declutter(&mut model)?;
        // Loops and data-dependent branches become straight lines of
        // steps; each may uncover more of the other in its bodies.
        while crate::unroll::unroll_loops(&mut model)?
            | crate::branches::select_branches(&mut model)?
        {}
        crate::refusals::refuse_random(&model)?;
        // Windows that loops and branches uncovered.
        crate::refusals::refuse_degenerate_windows(&model)?;
        crate::channels::channels_first(&mut model)?;
        crate::channels::cancel_moves(&mut model)?;
        crate::reverse::backward_slices_as_gathers(&mut model)?;
        crate::guards::lift(&mut model)?;
        crate::lookup::lookup_tables(&mut model)?;
        crate::lookup::compose_tables(&mut model)?;
        // Last: each pass above may change which operators hold f16.
        crate::widen::widen_f16(&mut model)?;
        crate::graph::name_outputs(&mut model, &output_names)?;
        Ok(model)
    })?;
    Ok(Decluttered {
        model,
        applied: Vec::new(),
    })
}

impl Decluttered {
    /// The model with `stages` rewritten into it, for further stages to
    /// be tried on ([`Decluttered::graph`] records them all).
    pub fn with_stages(&self, stages: &[crate::PatchedStage]) -> Result<Decluttered, OnnxError> {
        let model = contain(Stage::Declutter, || {
            let mut model = self.model.clone();
            for stage in stages {
                crate::stage::apply(&mut model, stage)?;
            }
            Ok(model)
        })?;
        let mut applied = self.applied.clone();
        applied.extend_from_slice(stages);
        Ok(Decluttered { model, applied })
    }

    /// Multiply-adds of the model's convolutions and products, with the
    /// stages applied so far.
    pub fn multiply_adds(&self) -> u64 {
        crate::stage::multiply_adds(&self.model)
    }

    /// The names of the graph inputs.
    pub fn input_names(&self) -> Vec<String> {
        self.model
            .input_outlets()
            .map(|o| {
                o.iter()
                    .map(|o| self.model.node(o.node).name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Why the operators from tensor `from` to tensor `to` cannot run in
    /// bands of rows, or `None` when they can.
    pub fn stage_refusal(&self, from: &str, to: &str) -> Option<String> {
        crate::stage::refusal(&self.model, from, to)
    }

    /// Tensors that can end a stage run in bands of rows from tensor
    /// `from` through the operator named `covering`, in evaluation order.
    pub fn stage_ends(&self, from: &str, covering: &str) -> Vec<String> {
        crate::stage::ends(&self.model, from, covering)
    }

    /// The model with `stages` run in bands of rows, recorded in the
    /// execution order with the smallest arena lower bound.
    pub fn graph(
        &self,
        reuse: crate::ReuseOptions,
        stages: &[crate::PatchedStage],
    ) -> Result<ModelGraph, OnnxError> {
        let decluttered = if stages.is_empty() && self.applied.is_empty() {
            self.model.clone()
        } else {
            let mut model = self.with_stages(stages)?.model;
            // A stage starting at a graph input reads it in bands of rows:
            // the caller writes it so (docs/PATCHES.md, "The input in bands").
            contain(Stage::Declutter, || {
                crate::input_rows::cut(&mut model)
                    .map_err(|e| OnnxError::tract(Stage::Declutter, e))
            })?;
            model
        };
        // Record the model under every order; keep the one whose arena lower
        // bound (after aliasing) is smallest, tract's RAM order on ties.
        let mut best: Option<ModelGraph> = None;
        let mut bounds = Vec::new();
        for order in ExecutionOrder::ALL {
            let mut graph = contain(Stage::Analysis, || analyse(decluttered.clone(), order))?;
            crate::alias::find_aliases(&mut graph, reuse);
            let bound = stow_plan::lower_bound(&graph.problem(1).0);
            bounds.push((order, bound));
            if best.as_ref().is_none_or(|b| bound < b.order_bounds[0].1) {
                graph.order_bounds = vec![(order, bound)];
                best = Some(graph);
            }
        }
        let mut graph =
            best.ok_or_else(|| OnnxError::tract(Stage::Analysis, "no execution order"))?;
        graph.order_bounds = bounds;
        for stage in self.applied.iter().chain(stages) {
            crate::stage::record(&mut graph, stage);
        }
        Ok(graph)
    }
}

/// Reads and parses `path` with every symbol the options bind replaced by
/// its value, fixes the input facts and infers every shape. Also returns
/// the graph's output names, which tract's outlet labels may lose (two
/// outputs one value after tract drops a no-op between them).
fn typed_model(
    path: &Path,
    options: &LoadOptions,
    ignore_value_info: bool,
) -> Result<(TypedModel, Vec<String>), OnnxError> {
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut proto =
        tract_onnx::pb::ModelProto::decode(&bytes[..]).map_err(|e| OnnxError::NotOnnx {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    drop(bytes);
    let Some(graph) = proto.graph.as_mut() else {
        return Err(OnnxError::NotOnnx {
            path: path.to_path_buf(),
            reason: "no graph in the file".into(),
        });
    };
    crate::external::check(path, graph)?;
    // Rewrites of the ONNX graph read tensors through tract, which may
    // panic on hostile bytes: contain it like the parse.
    contain(Stage::Parse, || {
        for c in &options.constants {
            if options.inputs.iter().any(|i| i.name == c.name) {
                return Err(OnnxError::BadArgument(format!(
                    "input `{}` is given both a shape (--input) and a value (--set)",
                    c.name
                )));
            }
        }
        crate::constants::apply(graph, &options.constants)?;
        crate::recurrent::reverse_layers_forward(graph)?;
        crate::refusals::refuse_mistranslated(graph)?;
        crate::refusals::valid_pools_in_ceil_mode_as_explicit(graph);
        let values = crate::bind::symbol_values(graph, &options.inputs, &options.dims)?;
        crate::bind::substitute(graph, &values);
        crate::fold::fold_constant_branches(graph, &Default::default())?;
        crate::qoperator::expand_contrib(graph)?;
        crate::qoperator::fuse_qdq(graph);
        Ok(())
    })?;
    let model_dir = path
        .parent()
        .and_then(|d| d.to_str())
        .map(|d| if d.is_empty() { "." } else { d });
    // An `If` on a shape (`squeeze(dim)` exported from PyTorch) has a
    // known condition once the inputs' shapes are fixed, but tract types
    // both branches, whose shapes then differ, before folding it. Let
    // tract's inference find such conditions, fold them here, and parse
    // again.
    for _ in 0..4 {
        if !proto.graph.as_ref().is_some_and(crate::fold::has_branches) {
            break;
        }
        let conditions = inferred_conditions(&proto, model_dir, options);
        let Some(graph) = proto.graph.as_mut() else {
            break;
        };
        if conditions.is_empty() || crate::fold::fold_constant_branches(graph, &conditions)? == 0 {
            break;
        }
    }
    if proto
        .graph
        .as_ref()
        .is_some_and(crate::deconv::has_output_shapes)
    {
        let (inputs, kernels) = inferred_deconv_shapes(&proto, model_dir, options);
        if let Some(graph) = proto.graph.as_mut() {
            crate::deconv::explicit_output_padding(graph, &inputs, &kernels)?;
        }
    }
    let model = contain(Stage::Parse, || {
        let parsed = crate::imports::onnx()
            .with_ignore_value_info(ignore_value_info)
            .parse(&proto, model_dir)
            .map_err(|e| OnnxError::tract(Stage::Parse, e))?;
        if !parsed.unresolved_inputs.is_empty() {
            return Err(OnnxError::Tract {
                stage: Stage::Parse,
                node: None,
                message: format!(
                    "values used but never defined: {}",
                    parsed.unresolved_inputs.join(", ")
                ),
            });
        }
        Ok(parsed.model)
    })?;
    let output_names: Vec<String> = proto
        .graph
        .as_ref()
        .map(|g| g.output.iter().map(|o| o.name.clone()).collect())
        .unwrap_or_default();
    drop(proto);
    reject_unimplemented(&model)?;
    let model = fix_inputs(model, options)?;
    let typed = contain(Stage::ShapeInference, || {
        model
            .into_typed()
            .map_err(|e| OnnxError::tract(Stage::ShapeInference, e))
    })?;
    Ok((typed, output_names))
}

/// The model parsed with the fixed input shapes and analysed as far as
/// tract's inference goes (its facts are what it could infer).
fn analysed(
    proto: &tract_onnx::pb::ModelProto,
    model_dir: Option<&str>,
    options: &LoadOptions,
) -> Result<InferenceModel, OnnxError> {
    let parsed = crate::imports::onnx()
        .parse(proto, model_dir)
        .map_err(|e| OnnxError::tract(Stage::Parse, e))?;
    let mut model = fix_inputs(parsed.model, options)?;
    let _ = model.analyse(true);
    Ok(model)
}

/// The conditions of `If` nodes that tract's inference (which propagates
/// values through shapes) finds constant for the fixed input shapes, by
/// node name. Best effort: a model tract cannot analyse gives none.
fn inferred_conditions(
    proto: &tract_onnx::pb::ModelProto,
    model_dir: Option<&str>,
    options: &LoadOptions,
) -> std::collections::HashMap<String, bool> {
    let found = contain(Stage::Parse, || {
        let model = analysed(proto, model_dir, options)?;
        let mut conditions = std::collections::HashMap::new();
        for node in model.nodes() {
            if node.op.name() != "If" {
                continue;
            }
            let value = node
                .inputs
                .first()
                .and_then(|o| model.outlet_fact(*o).ok())
                .and_then(|f| f.value.concretize());
            if let Some(cond) = value.and_then(|v| v.cast_to_scalar::<bool>().ok()) {
                conditions.insert(node.name.clone(), cond);
            }
        }
        Ok(conditions)
    });
    found.unwrap_or_default()
}

/// The input and kernel shapes of the `ConvTranspose` nodes that tract's
/// inference finds for the fixed input shapes, by node name. Best effort:
/// a model tract cannot analyse gives none.
fn inferred_deconv_shapes(
    proto: &tract_onnx::pb::ModelProto,
    model_dir: Option<&str>,
    options: &LoadOptions,
) -> (Shapes, Shapes) {
    let found = contain(Stage::Parse, || {
        let model = analysed(proto, model_dir, options)?;
        let (mut inputs, mut kernels) = (Shapes::new(), Shapes::new());
        for node in model.nodes() {
            if node.op.name() != "ConvTranspose" {
                continue;
            }
            let shape = |slot: usize| {
                node.inputs
                    .get(slot)
                    .and_then(|o| model.outlet_fact(*o).ok())
                    .and_then(|f| f.shape.concretize())
                    .and_then(|dims| {
                        dims.iter()
                            .map(|d| d.to_i64().ok()?.try_into().ok())
                            .collect()
                    })
            };
            if let Some(s) = shape(0) {
                inputs.insert(node.name.clone(), s);
            }
            if let Some(s) = shape(1) {
                kernels.insert(node.name.clone(), s);
            }
        }
        Ok((inputs, kernels))
    });
    found.unwrap_or_default()
}

type Shapes = std::collections::HashMap<String, Vec<usize>>;

fn reject_unimplemented(model: &InferenceModel) -> Result<(), OnnxError> {
    let nodes: Vec<(String, String)> = model
        .nodes()
        .iter()
        .filter_map(|n| {
            let name = n.op.name();
            let inner = name.strip_prefix("Unimplemented(")?.strip_suffix(')')?;
            Some((n.name.clone(), inner.to_string()))
        })
        .collect();
    if nodes.is_empty() {
        Ok(())
    } else {
        Err(OnnxError::UnsupportedOps { nodes })
    }
}

/// Replaces every input fact with a concrete type and shape, from
/// `--input`, from the model with `--dim` values substituted, or fails
/// naming the input and the symbol left open.
fn fix_inputs(
    mut model: InferenceModel,
    options: &LoadOptions,
) -> Result<InferenceModel, OnnxError> {
    let input_names: Vec<String> = model
        .input_outlets()
        .map_err(|e| OnnxError::tract(Stage::Parse, e))?
        .iter()
        .map(|o| model.node(o.node).name.clone())
        .collect();
    for given in &options.inputs {
        if !input_names.contains(&given.name) {
            return Err(OnnxError::BadArgument(format!(
                "--input `{}`: the model has no input of that name (inputs: {})",
                given.name,
                input_names.join(", ")
            )));
        }
    }
    // Symbols bound by `--input` and `--dim` were replaced by their values
    // before parsing ([`crate::bind`]): any symbol left is unbound.
    let values = SymbolValues::default();
    for (ix, name) in input_names.iter().enumerate() {
        let fact = model
            .input_fact(ix)
            .map_err(|e| OnnxError::tract(Stage::Parse, e))?
            .clone();
        let dt = fact.datum_type.concretize().unwrap_or(DatumType::F32);
        let dims: Vec<usize> = if let Some(given) = options.inputs.iter().find(|g| &g.name == name)
        {
            given.dims.clone()
        } else {
            let shape = fact.shape.concretize().ok_or_else(|| {
                OnnxError::BadArgument(format!(
                    "input `{name}` has no known shape; give it with `--input {name}=1x3x224x224`"
                ))
            })?;
            let mut dims = Vec::with_capacity(shape.len());
            for d in shape.iter() {
                if let Some(sym) = d.symbols().into_iter().next() {
                    return Err(OnnxError::UnresolvedSymbol {
                        input: name.clone(),
                        symbol: sym.to_string(),
                    });
                }
                let v = d.eval(&values).to_i64().map_err(|_| {
                    OnnxError::BadArgument(format!(
                        "input `{name}`: dimension `{d}` cannot be evaluated"
                    ))
                })?;
                let v = usize::try_from(v).map_err(|_| {
                    OnnxError::BadArgument(format!(
                        "input `{name}`: dimension `{d}` evaluates to {v}"
                    ))
                })?;
                dims.push(v);
            }
            dims
        };
        model
            .set_input_fact(ix, InferenceFact::dt_shape(dt, dims))
            .map_err(|e| OnnxError::tract(Stage::Parse, e))?;
    }
    Ok(model)
}
