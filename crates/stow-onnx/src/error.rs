use std::path::PathBuf;
use thiserror::Error;

/// Which part of loading a model failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Reading and decoding the ONNX protobuf, building tract's graph.
    Parse,
    /// Propagating types and shapes.
    ShapeInference,
    /// Simplifying the graph into tract's typed form.
    Declutter,
    /// Ordering and recording tensors.
    Analysis,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Parse => "parse",
            Stage::ShapeInference => "shape inference",
            Stage::Declutter => "declutter",
            Stage::Analysis => "analysis",
        })
    }
}

/// Why a model could not be turned into a planning problem.
#[derive(Debug, Error)]
pub enum OnnxError {
    /// The model file could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The model path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The bytes are not a valid ONNX model.
    #[error("{} is not a valid ONNX model: {reason}", path.display())]
    NotOnnx {
        /// The model path.
        path: PathBuf,
        /// What the decoder said.
        reason: String,
    },
    /// An input file (`.npz` archive or `TensorProto` file) cannot be used.
    #[error("{}: {reason}", path.display())]
    BadInputFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor keeps its data in a side file that may not or cannot be
    /// read: outside the model's directory, missing, or too short.
    #[error("{}: tensor `{tensor}`: external data {reason}", path.display())]
    ExternalData {
        /// The model path.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// Operators tract cannot run; every one is listed.
    #[error("unsupported operator(s): {}", .nodes.iter().map(|(n, op)| format!("node `{n}` ({op})")).collect::<Vec<_>>().join(", "))]
    UnsupportedOps {
        /// (node name, ONNX op type) pairs.
        nodes: Vec<(String, String)>,
    },
    /// A symbolic dimension has no value.
    #[error("input `{input}` has symbolic dimension `{symbol}` with no value; fix it with `--dim {symbol}=VALUE` (or `--input {input}=...`)")]
    UnresolvedSymbol {
        /// The input name.
        input: String,
        /// The symbol name.
        symbol: String,
    },
    /// An intermediate shape is still symbolic after fixing inputs.
    #[error("tensor `{tensor}` has a shape that is not concrete ({shape}); fix input shapes with `--input` or `--dim`")]
    SymbolicShape {
        /// The tensor name.
        tensor: String,
        /// Its shape as tract prints it.
        shape: String,
    },
    /// `--input` or `--dim` named something the model does not have, or
    /// could not be parsed.
    #[error("{0}")]
    BadArgument(String),
    /// A tensor type Stowage cannot store.
    #[error("tensor `{tensor}` has element type {dtype}, which bundles cannot hold")]
    UnsupportedType {
        /// The tensor name.
        tensor: String,
        /// The element type as tract prints it.
        dtype: String,
    },
    /// A byte count does not fit in 64 bits.
    #[error("tensor `{tensor}`: byte size overflows")]
    Overflow {
        /// The tensor name.
        tensor: String,
    },
    /// tract failed at some stage.
    #[error("{stage} failed{}: {message}", .node.as_ref().map(|n| format!(" at node `{n}`")).unwrap_or_default())]
    Tract {
        /// The stage that failed.
        stage: Stage,
        /// The node, when known.
        node: Option<String>,
        /// tract's error chain.
        message: String,
    },
    /// tract panicked; the panic was contained.
    #[error("{stage} failed: tract panicked: {message}")]
    Panic {
        /// The stage that panicked.
        stage: Stage,
        /// The panic payload.
        message: String,
    },
}

impl OnnxError {
    pub(crate) fn tract(stage: Stage, err: impl std::fmt::Display) -> Self {
        let message = format!("{err:#}");
        OnnxError::Tract {
            stage,
            node: node_in_message(&message),
            message,
        }
    }
}

/// tract names failing nodes as `#12 "name" Op`; pull out the name.
fn node_in_message(message: &str) -> Option<String> {
    let start = message.find('"')?;
    let rest = &message[start + 1..];
    let end = rest.find('"')?;
    Some(rest[..end].to_string())
}

/// Runs `f`, turning a panic inside tract into an error naming the stage.
pub(crate) fn contain<T>(
    stage: Stage,
    f: impl FnOnce() -> Result<T, OnnxError>,
) -> Result<T, OnnxError> {
    // The default hook would print the panic and a backtrace before the
    // error is reported; silence it while the library runs.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    match outcome {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(OnnxError::Panic { stage, message })
        }
    }
}
