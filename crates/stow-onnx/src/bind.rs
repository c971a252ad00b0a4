//! Binds the symbols of a model's declared shapes to the values fixed by
//! `--input` and `--dim`, everywhere in the model.
//!
//! Exporters name dynamic dimensions (`batch_size`, `DynamicDimension.0`,
//! `unk__12`) in the graph's inputs, in `value_info`, and in the shapes of
//! subgraphs. Fixing an input's shape fixes those symbols too: left
//! symbolic in `value_info`, they meet the concrete shapes tract infers
//! and fail to unify. Every symbol bound by an input or a `--dim` is
//! replaced by its value; symbols still unbound in `value_info` and in
//! subgraphs' declared shapes become unknown dimensions (the inputs are
//! concrete, so shape inference finds them).

use crate::error::OnnxError;
use crate::shapes::InputShape;
use std::collections::{BTreeMap, HashSet};
use tract_onnx::pb::tensor_shape_proto::dimension::Value as Dim;
use tract_onnx::pb::type_proto::Value as Type;
use tract_onnx::pb::{GraphProto, ValueInfoProto};

/// Where a symbol's value came from, for error messages.
#[derive(Clone, Debug)]
struct Binding {
    value: i64,
    from: String,
}

/// The symbols bound by `--dim` values and by the inputs whose shapes
/// `--input` fixes (a declared symbolic dimension takes the given size).
/// A symbol given two different values is an error naming both sources.
pub(crate) fn symbol_values(
    graph: &GraphProto,
    inputs: &[InputShape],
    dims: &[(String, i64)],
) -> Result<BTreeMap<String, i64>, OnnxError> {
    let mut bound: BTreeMap<String, Binding> = BTreeMap::new();
    let mut bind = |symbol: &str, value: i64, from: String| -> Result<(), OnnxError> {
        match bound.get(symbol) {
            Some(b) if b.value != value => Err(OnnxError::BadArgument(format!(
                "symbol `{symbol}` is {} from {} but {value} from {from}",
                b.value, b.from
            ))),
            Some(_) => Ok(()),
            None => {
                bound.insert(symbol.to_string(), Binding { value, from });
                Ok(())
            }
        }
    };
    let declared: HashSet<String> = graph
        .input
        .iter()
        .filter_map(declared_dims)
        .flatten()
        .filter_map(|d| match d {
            Some(Dim::DimParam(s)) => Some(s),
            _ => None,
        })
        .collect();
    for (symbol, value) in dims {
        if !declared.contains(symbol) {
            return Err(OnnxError::BadArgument(format!(
                "--dim `{symbol}`: no input of the model uses a symbol of that name"
            )));
        }
        bind(symbol, *value, format!("--dim {symbol}={value}"))?;
    }
    for given in inputs {
        let Some(declared) = graph.input.iter().find(|i| i.name == given.name) else {
            continue;
        };
        let Some(declared) = declared_dims(declared) else {
            continue;
        };
        if declared.len() != given.dims.len() {
            continue;
        }
        for (d, &size) in declared.iter().zip(&given.dims) {
            if let Some(Dim::DimParam(symbol)) = d {
                if is_named(symbol) {
                    let value = i64::try_from(size).map_err(|_| {
                        OnnxError::BadArgument(format!("--input `{}`: size {size}", given.name))
                    })?;
                    bind(symbol, value, format!("input `{}`", given.name))?;
                }
            }
        }
    }
    Ok(bound.into_iter().map(|(s, b)| (s, b.value)).collect())
}

/// Replaces bound symbols by their values in the graph's inputs, outputs
/// and `value_info`, and in every subgraph; other symbols in `value_info`
/// and in subgraphs become unknown.
pub(crate) fn substitute(graph: &mut GraphProto, values: &BTreeMap<String, i64>) {
    let initializers: HashSet<String> = graph.initializer.iter().map(|t| t.name.clone()).collect();
    for input in graph
        .input
        .iter_mut()
        .filter(|i| !initializers.contains(&i.name))
    {
        rewrite(input, values, false);
    }
    for info in graph.output.iter_mut() {
        rewrite(info, values, false);
    }
    for info in graph.value_info.iter_mut() {
        rewrite(info, values, true);
    }
    for node in graph.node.iter_mut() {
        for attr in node.attribute.iter_mut() {
            for sub in attr.g.iter_mut().chain(attr.graphs.iter_mut()) {
                substitute_subgraph(sub, values);
            }
        }
    }
}

fn substitute_subgraph(graph: &mut GraphProto, values: &BTreeMap<String, i64>) {
    for info in graph
        .input
        .iter_mut()
        .chain(graph.output.iter_mut())
        .chain(graph.value_info.iter_mut())
    {
        rewrite(info, values, true);
    }
    for node in graph.node.iter_mut() {
        for attr in node.attribute.iter_mut() {
            for sub in attr.g.iter_mut().chain(attr.graphs.iter_mut()) {
                substitute_subgraph(sub, values);
            }
        }
    }
}

/// A dimension symbol that names a size (not `?` nor empty).
fn is_named(symbol: &str) -> bool {
    !symbol.is_empty() && symbol != "?"
}

fn declared_dims(info: &ValueInfoProto) -> Option<Vec<Option<Dim>>> {
    let Some(Type::TensorType(t)) = info.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    Some(
        t.shape
            .as_ref()?
            .dim
            .iter()
            .map(|d| d.value.clone())
            .collect(),
    )
}

fn rewrite(info: &mut ValueInfoProto, values: &BTreeMap<String, i64>, forget_unbound: bool) {
    let Some(Type::TensorType(t)) = info.r#type.as_mut().and_then(|t| t.value.as_mut()) else {
        return;
    };
    let Some(shape) = t.shape.as_mut() else {
        return;
    };
    for d in shape.dim.iter_mut() {
        if let Some(Dim::DimParam(symbol)) = &d.value {
            if let Some(&v) = values.get(symbol) {
                d.value = Some(Dim::DimValue(v));
            } else if forget_unbound {
                d.value = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::pb::{tensor_shape_proto, type_proto, TensorShapeProto, TypeProto};

    fn info(name: &str, dims: &[&str]) -> ValueInfoProto {
        let dim = dims
            .iter()
            .map(|d| tensor_shape_proto::Dimension {
                value: Some(match d.parse::<i64>() {
                    Ok(v) => Dim::DimValue(v),
                    Err(_) => Dim::DimParam(d.to_string()),
                }),
                ..Default::default()
            })
            .collect();
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                value: Some(Type::TensorType(type_proto::Tensor {
                    elem_type: 1,
                    shape: Some(TensorShapeProto { dim }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn dims_of(info: &ValueInfoProto) -> Vec<Option<Dim>> {
        declared_dims(info).unwrap()
    }

    #[test]
    fn input_shapes_bind_symbols_everywhere() {
        let mut graph = GraphProto {
            input: vec![info("x", &["batch", "3", "seq"]), info("mask", &["batch"])],
            value_info: vec![info("h", &["batch", "seq", "other"])],
            ..Default::default()
        };
        let given = [InputShape {
            name: "x".into(),
            dims: vec![2, 3, 7],
        }];
        let values = symbol_values(&graph, &given, &[]).unwrap();
        assert_eq!(
            values,
            BTreeMap::from([("batch".into(), 2), ("seq".into(), 7)])
        );
        substitute(&mut graph, &values);
        assert_eq!(dims_of(&graph.input[1]), vec![Some(Dim::DimValue(2))]);
        assert_eq!(
            dims_of(&graph.value_info[0]),
            vec![Some(Dim::DimValue(2)), Some(Dim::DimValue(7)), None]
        );
    }

    #[test]
    fn a_symbol_given_two_values_names_both_sources() {
        let graph = GraphProto {
            input: vec![info("a", &["n"]), info("b", &["n"])],
            ..Default::default()
        };
        let given = [
            InputShape {
                name: "a".into(),
                dims: vec![2],
            },
            InputShape {
                name: "b".into(),
                dims: vec![3],
            },
        ];
        let e = symbol_values(&graph, &given, &[]).unwrap_err().to_string();
        assert!(
            e.contains("`n` is 2 from input `a` but 3 from input `b`"),
            "{e}"
        );
        let e = symbol_values(&graph, &given[..1], &[("m".into(), 5)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--dim `m`: no input"), "{e}");
        let e = symbol_values(&graph, &given[..1], &[("n".into(), 5)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--dim n=5") && e.contains("input `a`"), "{e}");
    }
}
