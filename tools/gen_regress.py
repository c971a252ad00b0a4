#!/usr/bin/env python3
"""Generate the regression cases under testdata/regress/.

Each case is a directory in the layout of the ONNX backend test data:
`model.onnx`, `input_N.pb`, the expected `output_N.pb`, and optionally
`args.txt` (extra `stow compile` arguments, one per line),
`f16_steps.txt` (how many f16 rounding steps an f16 output may be off,
default 1),
`q_steps.txt` (how many integer steps a u8/i8 output may be off,
default 0) and other models a test reads (`float.onnx`). Expected outputs
come from a third party, never from Stowage or tract: onnxruntime for the
models built here, and the `onnx` package's own expected outputs for cases
taken from its node test suite. `crates/stow-cli/tests/regress.rs` compiles
each case, runs the bundle and compares.

Each case is a bug seen on a real model, reduced to a few nodes.

    python3 tools/gen_regress.py [--out DIR] [--only NAME ...]

Needs numpy, onnx and onnxruntime.
"""
import argparse
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


def model_of(nodes, inputs, outputs, inits=(), value_info=(), opset=OPSET, domains=()):
    graph = helper.make_graph(nodes, "regress", inputs, outputs, initializer=list(inits),
                              value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model


def weight(rng, name, shape, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def dense_head(perm):
    """Conv -> PRelu -> Transpose(perm) -> Reshape [1,-1] -> Gemm(transB=1):
    the classifier head of conv nets exported from PyTorch (permute, flatten,
    Linear)."""
    rng = np.random.default_rng(17)
    c, h, w, out = 4, 3, 5, 6
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("PRelu", ["conv", "slope"], ["act"]),
        helper.make_node("Transpose", ["act"], ["moved"], perm=perm),
        helper.make_node("Reshape", ["moved", "flat_shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    inits = [
        weight(rng, "conv_w", [c, 2, 3, 3]),
        weight(rng, "conv_b", [c]),
        numpy_helper.from_array((0.25 * rng.random([c, 1, 1])).astype(np.float32), "slope"),
        numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "flat_shape"),
        weight(rng, "fc_w", [out, c * h * w]),
        weight(rng, "fc_b", [out]),
    ]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, h, w])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out])], inits)
    return model, {"x": rng.standard_normal([1, 2, h, w]).astype(np.float32)}, []


def dense_head_0321():
    return dense_head([0, 3, 2, 1])


def dense_head_0231():
    return dense_head([0, 2, 3, 1])


def input_through_identity_transpose():
    """A graph input that feeds an identity Transpose first: the bundle's
    input must keep the graph's name `x`, not the Transpose's output's."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    x = np.random.default_rng(3).standard_normal([3, 4]).astype(np.float32)
    return model, {"x": x}, []


def symbolic_value_info():
    """Declared shapes use the symbol `batch_size` in the input, in
    value_info and in the output; `--input x=2x3x4` must bind it
    everywhere."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=0),
    ]
    inits = [weight(rng, "w", [4, 5]), numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")]
    value_info = [
        helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch_size", "seq", 5]),
        helper.make_tensor_value_info("r", TensorProto.FLOAT, ["batch_size", "seq", 5]),
    ]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", "seq", 4])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", 5])], inits,
                     value_info)
    x = rng.standard_normal([2, 3, 4]).astype(np.float32)
    return model, {"x": x}, ["--input", "x=2x3x4"]


def stale_value_info():
    """value_info recorded for another batch size (1) than the one compiled
    (2): it contradicts the fixed shapes and must be dropped, not fail."""
    model, feeds, _ = symbolic_value_info()
    for info in model.graph.value_info:
        info.type.tensor_type.shape.dim[0].dim_value = 1
        info.type.tensor_type.shape.dim[1].dim_value = 3
    return model, feeds, ["--input", "x=2x3x4"]


def recurrent(op, direction, **attrs):
    """One recurrent layer over 5 steps of 3 features, hidden size 4, with
    initial states, every output exposed."""
    rng = np.random.default_rng(23)
    steps, batch, features, hidden = 5, 2, 3, 4
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    inits = [
        weight(rng, "W", [dirs, gates * hidden, features]),
        weight(rng, "R", [dirs, gates * hidden, hidden]),
        weight(rng, "B", [dirs, 2 * gates * hidden]),
    ]
    inputs = ["x", "W", "R", "B", "", "h0"] + (["c0"] if op == "LSTM" else [])
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, inputs, outputs, hidden_size=hidden, direction=direction, **attrs)
    state = [dirs, batch, hidden]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, features]),
                    helper.make_tensor_value_info("h0", TensorProto.FLOAT, state)]
    feeds = {"x": rng.standard_normal([steps, batch, features]).astype(np.float32),
             "h0": (0.5 * rng.standard_normal(state)).astype(np.float32)}
    if op == "LSTM":
        graph_inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, state))
        feeds["c0"] = (0.5 * rng.standard_normal(state)).astype(np.float32)
    graph_outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, dirs, batch, hidden])] + [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, state) for o in outputs[1:]]
    return model_of([node], graph_inputs, graph_outputs, inits), feeds, []


def lstm_forward():
    return recurrent("LSTM", "forward")


def lstm_reverse():
    return recurrent("LSTM", "reverse")


def lstm_bidirectional():
    return recurrent("LSTM", "bidirectional")


def gru_forward():
    return recurrent("GRU", "forward")


def gru_reverse():
    return recurrent("GRU", "reverse")


def rnn_bidirectional():
    return recurrent("RNN", "bidirectional")


def branches(cond_nodes, cond_inputs):
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["then_out"])], "then", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")])
    else_graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "one"], ["else_out"])], "else", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one")])
    nodes = cond_nodes + [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph,
                                           else_branch=else_graph)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])] + cond_inputs
    return model_of(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])


def if_on_a_set_input():
    """An If on a sample-rate input: `--set sr=16000` folds it (the bundle
    has no `sr` input)."""
    model = branches([helper.make_node("Equal", ["sr", "rate"], ["cond"])],
                     [helper.make_tensor_value_info("sr", TensorProto.INT64, [])])
    model.graph.initializer.append(numpy_helper.from_array(np.array(16000, dtype=np.int64), "rate"))
    x = np.random.default_rng(7).standard_normal([2, 3]).astype(np.float32)
    return model, {"x": x}, ["--set", "sr=16000"], {"sr": np.array(16000, dtype=np.int64)}


def if_on_the_data(sign):
    model = branches([helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                      helper.make_node("Greater", ["total", "zero"], ["cond"])], [])
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"))
    x = np.abs(np.random.default_rng(9).standard_normal([2, 3]).astype(np.float32)) * sign
    return model, {"x": x}, []


def if_on_the_data_true():
    """A data-dependent If whose condition holds: both branches run, the
    select keeps `then`."""
    return if_on_the_data(1.0)


def if_on_the_data_false():
    return if_on_the_data(-1.0)


def pad_bool_with_true():
    """Pad of a bool tensor with constant True (found by tools/fuzz_graphs.py:
    the padding came out False)."""
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["y"])]
    inits = [numpy_helper.from_array(np.array([1, 0, 0, 1], dtype=np.int64), "pads"),
             numpy_helper.from_array(np.array(True), "value")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.BOOL, [1, 2])],
                     [helper.make_tensor_value_info("y", TensorProto.BOOL, [2, 3])], inits)
    return model, {"x": np.array([[False, True]])}, []


def two_outputs_one_value():
    """Output `b` is a no-op transpose of output `a`: both must be bundle
    outputs under their own names (found by tools/fuzz_graphs.py)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                     [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                      helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])])
    return model, {"x": np.random.default_rng(11).standard_normal([2, 3]).astype(np.float32)}, []


def conv_then(op, order):
    """Conv with a 3x3 kernel, then `op` with the convolution's output as
    operand `order` and a per-channel constant as the other (found by
    tools/fuzz_graphs.py: tract folds `c - conv` and `c / conv` into the
    kernel as if they were `conv - c` and `conv / c`)."""
    rng = np.random.default_rng(23)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], kernel_shape=[3, 3]),
             helper.make_node(op, ["conv", "c"][::order], ["y"])]
    inits = [numpy_helper.from_array((rng.random([3, 2, 3, 3]) * 0.5).astype(np.float32), "w"),
             numpy_helper.from_array(np.full([3], 0.5, np.float32), "b"),
             numpy_helper.from_array((1 + rng.random([1, 3, 1, 1])).astype(np.float32), "c")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 6])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3, 4])], inits)
    # Positive inputs keep the convolution away from zero for the division.
    return model, {"x": rng.random([1, 2, 5, 6]).astype(np.float32)}, []


def constant_minus_conv():
    return conv_then("Sub", -1)


def constant_over_conv():
    return conv_then("Div", -1)


def conv_minus_constant():
    return conv_then("Sub", 1)


def strided_after(first, second_attrs, x_shape, y_shape):
    """`first`, then a 1x1 Conv with the given strides (found by
    tools/fuzz_graphs.py: tract moves the stride into the node before)."""
    rng = np.random.default_rng(29)
    c = x_shape[1]
    nodes = [first, helper.make_node("Conv", ["a", "w2"], ["y"], kernel_shape=[1, 1], **second_attrs)]
    inits = [weight(rng, "w1", [c, c, 3, 3]), weight(rng, "w2", [2, c, 1, 1])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}, []


def conv_same_upper_then_strided_1x1():
    first = helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], auto_pad="SAME_UPPER")
    return strided_after(first, {"strides": [2, 2]}, [1, 2, 6, 7], [1, 2, 3, 4])


def conv_same_lower_then_strided_1x1():
    first = helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], auto_pad="SAME_LOWER",
                             strides=[1, 2])
    return strided_after(first, {"strides": [3, 1]}, [1, 2, 8, 9], [1, 2, 3, 5])


def strided_slice_after(first_nodes, inits, x_shape, starts, steps, y_shape):
    m = 2**63 - 1
    axes = list(range(len(starts)))
    inits = list(inits) + [numpy_helper.from_array(np.array(starts, np.int64), "starts"),
                           numpy_helper.from_array(np.array([m] * len(starts), np.int64), "ends"),
                           numpy_helper.from_array(np.array(axes, np.int64), "axes"),
                           numpy_helper.from_array(np.array(steps, np.int64), "steps")]
    nodes = list(first_nodes) + [helper.make_node("Slice", ["a", "starts", "ends", "axes", "steps"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    rng = np.random.default_rng(31)
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}, []


def softmax_then_strided_slice():
    """Softmax, then a Slice with step 2 along the softmax axis: the slice
    must not move before the normalisation (found by tools/fuzz_graphs.py)."""
    return strided_slice_after([helper.make_node("Softmax", ["x"], ["a"], axis=1)], [], [2, 7],
                               [0, 1], [1, 2], [2, 3])


def conv_then_offset_strided_slice():
    """A padded Conv, then a Slice starting at 1 with step 2 on both spatial
    axes: the stride may move into the convolution only with the offset."""
    rng = np.random.default_rng(37)
    first = [helper.make_node("Conv", ["x", "w"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    return strided_slice_after(first, [weight(rng, "w", [2, 2, 3, 3])], [1, 2, 6, 7],
                               [0, 0, 1, 1], [1, 1, 2, 2], [1, 2, 3, 3])


def conv_then_offset_strided_slice_same_length():
    """As above where the offset does not change the output's length (6
    rows from 1 by 2, or from 0 by 2, are 3 either way), so a lost offset
    gives a bundle of the right shape and wrong values."""
    rng = np.random.default_rng(38)
    first = [helper.make_node("Conv", ["x", "w"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    return strided_slice_after(first, [weight(rng, "w", [2, 2, 3, 3])], [1, 2, 6, 6],
                               [0, 0, 1, 1], [1, 1, 2, 2], [1, 2, 3, 3])


def convtranspose_output_shape_odd_padding():
    """ConvTranspose given `output_shape` with an odd total padding: ONNX
    puts the larger half at the start (found by tools/fuzz_graphs.py)."""
    rng = np.random.default_rng(41)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                              output_shape=[6, 8])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 8])],
                     [weight(rng, "w", [2, 3, 3, 3])])
    return model, {"x": rng.standard_normal([1, 2, 3, 4]).astype(np.float32)}, []


def resize_nearest_sizes_half_way():
    """Resize nearest, asymmetric, sizes 7 -> 8 with round_prefer_ceil:
    output 4 maps to 3.5 exactly, which rounds up (found by
    tools/fuzz_graphs.py)."""
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                              coordinate_transformation_mode="asymmetric",
                              nearest_mode="round_prefer_ceil")]
    inits = [numpy_helper.from_array(np.array([1, 1, 2, 8], np.int64), "sizes")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 7])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 8])], inits)
    return model, {"x": np.arange(14, dtype=np.float32).reshape(1, 1, 2, 7)}, []


def softplus_large_input():
    """Softplus(x) is about x for large x and must stay finite (found by
    tools/fuzz_graphs.py: exp overflowed)."""
    nodes = [helper.make_node("Softplus", ["x"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])])
    return model, {"x": np.array([-100, -1, 0, 50, 89, 364.4], np.float32)}, []


def batchnorm_computed_statistics():
    """BatchNormalization whose mean and variance are computed from the
    data, as TensorFlow exports a layer normalisation (seen in
    magika_standard_v1): tract imports only constant statistics."""
    rng = np.random.default_rng(43)
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[0, 2], keepdims=0),
             helper.make_node("Sub", ["x", "mean_b"], ["centred"]),
             helper.make_node("Mul", ["centred", "centred"], ["squares"]),
             helper.make_node("ReduceMean", ["squares"], ["var"], axes=[0, 2], keepdims=0),
             helper.make_node("Unsqueeze", ["mean", "axes"], ["mean_b"]),
             helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"],
                              epsilon=1e-3)]
    inits = [numpy_helper.from_array(np.array([0, 2], np.int64), "axes"),
             weight(rng, "scale", [4]), weight(rng, "bias", [4])]
    # Nodes in topological order.
    nodes = [nodes[0], nodes[4], nodes[1], nodes[2], nodes[3], nodes[5]]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5])], inits)
    return model, {"x": (3 + rng.standard_normal([2, 4, 5])).astype(np.float32)}, []


def input_used_for_its_shape_only():
    """A graph input whose shape alone is used (folded once the shapes are
    fixed): it is still an input of the bundle."""
    nodes = [helper.make_node("Shape", ["shape_only"], ["s"]),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["sf"], ["total"], keepdims=1),
             helper.make_node("Add", ["x", "total"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                             helper.make_tensor_value_info("shape_only", TensorProto.FLOAT, [2, 5])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return model, {"x": np.array([1, 2, 3], np.float32),
                   "shape_only": np.zeros([2, 5], np.float32)}, []


def resize_align_corners_fractional_scale():
    """Resize linear, align_corners, a scale whose output length is
    fractional (6 × 0.75 = 4.5 → 4): ONNX maps x to x·(6−1)/(4−1), with
    the output's length, not 4.5 (found by tools/fuzz_graphs.py)."""
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear",
                              coordinate_transformation_mode="align_corners")]
    inits = [numpy_helper.from_array(np.array([1, 1, 1, 0.75], np.float32), "scales")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 6])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 4])], inits)
    return model, {"x": np.arange(12, dtype=np.float32).reshape(1, 1, 2, 6) ** 2}, []


def nhwc_convs_with_channel_adds():
    """Three convolutions of a TensorFlow export in NHWC (seen in
    open_nsfw): each Transpose -> Conv without bias -> Transpose -> Cast
    (float to float) -> Add of a per-channel constant -> Relu, 1x1, 3x3 of
    16 channels, 1x1. tract folds each Add into the convolution's bias, and
    its ChangeAxes pass then took an axis added on the bias for one added
    on the data (`Conv: Bias should be scalar or a vector`)."""
    rng = np.random.default_rng(47)
    channels = [3, 16, 16, 4]
    nodes, inits, x = [], [], "x"
    for i, (k, cin, cout) in enumerate(zip([1, 3, 1], channels, channels[1:])):
        nodes += [
            helper.make_node("Transpose", [x], [f"nchw{i}"], perm=[0, 3, 1, 2]),
            helper.make_node("Conv", [f"nchw{i}", f"w{i}"], [f"conv{i}"], kernel_shape=[k, k],
                             pads=[k // 2] * 4),
            helper.make_node("Transpose", [f"conv{i}"], [f"nhwc{i}"], perm=[0, 2, 3, 1]),
            helper.make_node("Cast", [f"nhwc{i}"], [f"cast{i}"], to=TensorProto.FLOAT),
            helper.make_node("Add", [f"cast{i}", f"b{i}"], [f"biased{i}"]),
            helper.make_node("Relu", [f"biased{i}"], ["y" if i == 2 else f"relu{i}"]),
        ]
        inits += [weight(rng, f"w{i}", [cout, cin, k, k]), weight(rng, f"b{i}", [1, 1, 1, cout])]
        x = f"relu{i}"
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 3])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 4])], inits)
    return model, {"x": rng.standard_normal([1, 8, 8, 3]).astype(np.float32)}, []


def float16_elementwise():
    """f16 operators that the runtime has no f16 kernel for (arithmetic,
    Max/Min, fmod, a comparison, ReduceMax) next to ones it runs on f16
    (Exp, Transpose, Pad with a constant, which once filled with zeros): `stow compile` runs each of the first kind in f32
    between casts, rounding every result to f16, as numpy does (the node
    suite's f16 cases failed with "no kernel"). Expected outputs from the
    ONNX reference implementation (numpy): onnxruntime computes the chain
    Add -> Sub -> Mul -> Div in f32 without rounding in between, up to 4
    f16 steps away."""
    rng = np.random.default_rng(61)
    f16 = TensorProto.FLOAT16
    nodes = [
        helper.make_node("Add", ["x", "y"], ["sum"]),
        helper.make_node("Sub", ["sum", "c"], ["diff"]),
        helper.make_node("Mul", ["diff", "x"], ["prod"]),
        helper.make_node("Div", ["prod", "y"], ["chain"]),
        helper.make_node("Max", ["x", "y", "c"], ["largest"]),
        helper.make_node("Min", ["x", "c"], ["smallest"]),
        helper.make_node("Sub", ["largest", "smallest"], ["spread"]),
        helper.make_node("Mod", ["x", "y"], ["fmod"], fmod=1),
        helper.make_node("Less", ["x", "y"], ["less"]),
        helper.make_node("ReduceMax", ["chain"], ["peak"], axes=[2], keepdims=1),
        helper.make_node("Exp", ["x"], ["ex"]),
        helper.make_node("Transpose", ["ex"], ["ex_t"], perm=[0, 2, 1]),
        helper.make_node("Pad", ["x", "pads", "pad_value"], ["padded"]),
    ]
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, [5]).astype(np.float16), "c"),
             numpy_helper.from_array(np.array([0, 1, 0, 0, 0, 2], np.int64), "pads"),
             numpy_helper.from_array(np.array(1.5, np.float16), "pad_value")]
    inputs = [helper.make_tensor_value_info("x", f16, [2, 3, 5]),
              helper.make_tensor_value_info("y", f16, [2, 3, 5])]
    outputs = [helper.make_tensor_value_info("chain", f16, [2, 3, 5]),
               helper.make_tensor_value_info("spread", f16, [2, 3, 5]),
               helper.make_tensor_value_info("fmod", f16, [2, 3, 5]),
               helper.make_tensor_value_info("less", TensorProto.BOOL, [2, 3, 5]),
               helper.make_tensor_value_info("peak", f16, [2, 3, 1]),
               helper.make_tensor_value_info("ex_t", f16, [2, 5, 3]),
               helper.make_tensor_value_info("padded", f16, [2, 4, 7])]
    model = model_of(nodes, inputs, outputs, inits)
    # y away from 0 (it divides), with both signs (fmod keeps x's sign).
    y = rng.uniform(0.5, 2.0, [2, 3, 5]) * rng.choice([-1, 1], [2, 3, 5])
    feeds = {"x": (rng.standard_normal([2, 3, 5]) * 2).astype(np.float16),
             "y": y.astype(np.float16)}
    return model, feeds, []


float16_elementwise.expected_by_reference = True
# Every operator rounds once, exactly as numpy: no step of difference.
float16_elementwise.f16_steps = 0


def float16_conv_softmax():
    """f16 Conv with f16 weights and bias (converted to f32 when compiled),
    and an f16 Softmax, each straight from an input: both accumulate, and
    onnxruntime computes them in f32 and rounds once, as Stowage does (the
    ONNX reference accumulates the convolution in f16, 9 steps away)."""
    rng = np.random.default_rng(67)
    f16 = TensorProto.FLOAT16
    nodes = [
        helper.make_node("Conv", ["image", "w", "b"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Softmax", ["logits"], ["soft"], axis=-1),
    ]
    inits = [
        numpy_helper.from_array((rng.standard_normal([3, 2, 3, 3]) * 0.4).astype(np.float16), "w"),
        numpy_helper.from_array((rng.standard_normal([3]) * 0.1).astype(np.float16), "b"),
    ]
    inputs = [helper.make_tensor_value_info("image", f16, [1, 2, 5, 5]),
              helper.make_tensor_value_info("logits", f16, [2, 3, 7])]
    outputs = [helper.make_tensor_value_info("conv", f16, [1, 3, 5, 5]),
               helper.make_tensor_value_info("soft", f16, [2, 3, 7])]
    model = model_of(nodes, inputs, outputs, inits)
    feeds = {"image": rng.standard_normal([1, 2, 5, 5]).astype(np.float16),
             "logits": (rng.standard_normal([2, 3, 7]) * 3).astype(np.float16)}
    return model, feeds, []


def mod_smaller_first_operand():
    """Mod whose first operand is the smaller one of a broadcast, fmod 1
    and 0: tract took Mod for commutative and swapped the operands (found
    by tools/fuzz_graphs.py)."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1),
             helper.make_node("Mod", ["i", "j"], ["imod"], fmod=0)]
    inputs = [helper.make_tensor_value_info("a", f, [1, 4]),
              helper.make_tensor_value_info("b", f, [3, 4]),
              helper.make_tensor_value_info("i", TensorProto.INT32, [4]),
              helper.make_tensor_value_info("j", TensorProto.INT32, [2, 4])]
    outputs = [helper.make_tensor_value_info("fmod", f, [3, 4]),
               helper.make_tensor_value_info("imod", TensorProto.INT32, [2, 4])]
    model = model_of(nodes, inputs, outputs)
    feeds = {"a": np.array([[-0.27, 0.78, 5.5, -7.25]], np.float32),
             "b": np.array([[-1.96, 1.42, -1.7, 2.0], [0.5, -0.25, 3.0, 1.5],
                            [4.0, 4.0, -4.0, -4.0]], np.float32),
             "i": np.array([-7, 7, 9, -9], np.int32),
             "j": np.array([[3, -3, 4, 4], [10, 10, -10, -10]], np.int32)}
    return model, feeds, []


def pools_valid_ceil_mode():
    """MaxPool and AveragePool with auto_pad VALID and ceil_mode 1, whose
    last window overhangs the input: ONNX shape inference and onnxruntime
    keep it, tract's VALID rule dropped it (found by tools/fuzz_graphs.py;
    onnx.reference refuses ceil_mode with auto_pad, so onnxruntime is the
    judge)."""
    f = TensorProto.FLOAT
    attrs = dict(auto_pad="VALID", ceil_mode=1, kernel_shape=[2, 3], strides=[1, 3])
    nodes = [helper.make_node("MaxPool", ["x"], ["max"], **attrs),
             helper.make_node("AveragePool", ["x"], ["mean"], count_include_pad=0, **attrs),
             helper.make_node("AveragePool", ["x"], ["mean_with_pads"], count_include_pad=1,
                              **attrs)]
    inputs = [helper.make_tensor_value_info("x", f, [1, 2, 3, 8])]
    outputs = [helper.make_tensor_value_info(n, f, [1, 2, 2, 3])
               for n in ["max", "mean", "mean_with_pads"]]
    model = model_of(nodes, inputs, outputs)
    rng = np.random.default_rng(8079)
    feeds = {"x": rng.normal(size=(1, 2, 3, 8)).astype(np.float32)}
    return model, feeds, []


# ------------------------------------------------------------ quantized --
# onnxruntime's QOperator contrib operators (domain com.microsoft) and QDQ
# models. Outputs are the quantized tensors themselves, judged in integer
# steps (`q_steps.txt`, default 0): onnxruntime computes some operators in
# fixed point or with a combined scale, which may round a value to the
# neighbouring integer.

MS = "com.microsoft"


def q_param(name, value, dtype=None):
    arr = np.asarray(value, dtype=dtype if dtype is not None else np.float32)
    return numpy_helper.from_array(arr, name)


def qoperator_elementwise():
    """QLinearAdd (broadcast; u8 and i8), QLinearMul, QLinearSigmoid,
    QLinearLeakyRelu and QLinearConcat: tract-onnx cannot load any of
    them."""
    rng = np.random.default_rng(19)
    u8, i8 = TensorProto.UINT8, TensorProto.INT8
    inits = [
        q_param("sa", 0.05), q_param("za", 128, np.uint8),
        q_param("sb", 0.03), q_param("zb", 100, np.uint8),
        q_param("sc", 0.07), q_param("zc", 120, np.uint8),
        q_param("sm", 0.09), q_param("zm", 90, np.uint8),
        q_param("ss", 1 / 256), q_param("zs", 0, np.uint8),
        q_param("sl", 0.04), q_param("zl", 160, np.uint8),
        q_param("sy", 0.08), q_param("zy", 110, np.uint8),
        q_param("si", 0.02), q_param("zi", -3, np.int8),
        q_param("sk", 0.015), q_param("zk", 5, np.int8),
        q_param("so", 0.03), q_param("zo", 1, np.int8),
        numpy_helper.from_array(rng.integers(-128, 128, [3, 4]).astype(np.int8), "k"),
    ]
    nodes = [
        helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["add"], domain=MS),
        helper.make_node("QLinearMul", ["a", "sa", "za", "b", "sb", "zb", "sm", "zm"], ["mul"], domain=MS),
        helper.make_node("QLinearSigmoid", ["a", "sa", "za", "ss", "zs"], ["sig"], domain=MS),
        helper.make_node("QLinearLeakyRelu", ["a", "sa", "za", "sl", "zl"], ["leaky"], domain=MS, alpha=0.1),
        helper.make_node("QLinearConcat", ["sy", "zy", "add", "sc", "zc", "mul", "sm", "zm"], ["cat"],
                         domain=MS, axis=2),
        helper.make_node("QLinearAdd", ["i", "si", "zi", "k", "sk", "zk", "so", "zo"], ["addi8"], domain=MS),
    ]
    inputs = [helper.make_tensor_value_info("a", u8, [2, 3, 4]),
              helper.make_tensor_value_info("b", u8, [3, 4]),
              helper.make_tensor_value_info("i", i8, [2, 3, 4])]
    outputs = [helper.make_tensor_value_info("add", u8, [2, 3, 4]),
               helper.make_tensor_value_info("mul", u8, [2, 3, 4]),
               helper.make_tensor_value_info("sig", u8, [2, 3, 4]),
               helper.make_tensor_value_info("leaky", u8, [2, 3, 4]),
               helper.make_tensor_value_info("cat", u8, [2, 3, 8]),
               helper.make_tensor_value_info("addi8", i8, [2, 3, 4])]
    model = model_of(nodes, inputs, outputs, inits, domains=[MS])
    feeds = {"a": rng.integers(0, 256, [2, 3, 4]).astype(np.uint8),
             "b": rng.integers(0, 256, [3, 4]).astype(np.uint8),
             "i": rng.integers(-128, 128, [2, 3, 4]).astype(np.int8)}
    return model, feeds, []




def qlinear_rounding():
    """QLinearAdd and QLinearMul on the input pairs where the definition's
    order of f32 operations (dequantize each operand, combine, divide by
    the output scale) rounds to another integer than onnxruntime does: a
    few pairs in a million, found by running onnxruntime on all 65,536 u8
    pairs (or i8 pairs) under random parameters. Each node covers one
    parameter set and one way of broadcasting: both operands varying, b
    the same along each row (a per-channel operand, onnxruntime's "scalar"
    spans, where its Add adds b's term to the constant part first), and a
    the same along each row. Judged with no step allowed."""
    import onnxruntime as ort

    rng = np.random.default_rng(67)
    u8, i8 = TensorProto.UINT8, TensorProto.INT8
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    width = 4
    for kind, mode, dtype in [("Add", "both", u8), ("Add", "b_row", u8), ("Add", "a_row", u8),
                              ("Add", "both", i8), ("Mul", "both", u8), ("Mul", "b_row", u8)]:
        npt = np.uint8 if dtype == u8 else np.int8
        lo = 0 if dtype == u8 else -128
        values = np.arange(lo, lo + 256).astype(npt)
        # Every pair: a along rows of 256, b along columns (or the other
        # way round for a_row), so that a row keeps one operand fixed.
        full_a = np.repeat(values, 256).reshape(256, 256)
        full_b = np.tile(values, 256).reshape(256, 256)
        found = 0
        for _ in range(400):
            sa, sb, sc = (np.float32(10 ** rng.uniform(-3, 0)) for _ in range(3))
            za, zb, zc = (int(rng.integers(lo, lo + 256)) for _ in range(3))
            params = [q_param("sa", sa), q_param("za", za, npt), q_param("sb", sb),
                      q_param("zb", zb, npt), q_param("sc", sc), q_param("zc", zc, npt)]
            if mode == "both":
                shapes = ([256, 256], [256, 256])
                fa, fb = full_a, full_b
            elif mode == "b_row":
                shapes = ([256, 256], [256, 1])
                fa, fb = full_b, values.reshape(256, 1)
            else:
                shapes = ([256, 1], [256, 256])
                fa, fb = values.reshape(256, 1), full_b
            node = helper.make_node("QLinear" + kind, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"],
                                    ["y"], domain=MS)
            probe = model_of([node], [helper.make_tensor_value_info("a", dtype, shapes[0]),
                                      helper.make_tensor_value_info("b", dtype, shapes[1])],
                             [helper.make_tensor_value_info("y", dtype, [256, 256])], params, domains=[MS])
            got = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]
                                       ).run(None, {"a": fa, "b": fb})[0]
            da = (fa.astype(np.float32) - np.float32(za)) * sa
            db = (fb.astype(np.float32) - np.float32(zb)) * sb
            r = (da + db) if kind == "Add" else (da * db)
            spec = np.clip(np.rint(r / sc) + zc, lo, lo + 255)
            rows = np.unique(np.nonzero(spec != got)[0])
            if len(rows) == 0:
                continue
            # The rows (each with its fixed operand) that hold a pair
            # rounded differently, at most `width` of them, `width`
            # columns each including that pair.
            i = len(nodes)
            pick_rows = rows[:width]
            cols = []
            for row in pick_rows:
                bad = np.nonzero(spec[row] != got[row])[0][0]
                rest = rng.choice(np.setdiff1d(np.arange(256), [bad]), width - 1, replace=False)
                cols.append(np.concatenate([[bad], rest]))
            cols = np.array(cols)
            every_a, every_b = np.broadcast_to(fa, (256, 256)), np.broadcast_to(fb, (256, 256))
            a_in = fa[pick_rows] if mode == "a_row" else every_a[pick_rows[:, None], cols]
            b_in = fb[pick_rows] if mode == "b_row" else every_b[pick_rows[:, None], cols]
            names = [f"{n}{i}" for n in ("a", "sa", "za", "b", "sb", "zb", "sc", "zc", "y")]
            for t, n in zip(params, names[1:3] + names[4:8]):
                t.name = n
            inits += params
            nodes.append(helper.make_node("QLinear" + kind, names[:8], [names[8]], domain=MS))
            inputs += [helper.make_tensor_value_info(names[0], dtype, list(a_in.shape)),
                       helper.make_tensor_value_info(names[3], dtype, list(b_in.shape))]
            outputs.append(helper.make_tensor_value_info(names[8], dtype, [len(pick_rows), width]))
            feeds[names[0]], feeds[names[3]] = a_in, b_in
            found += 1
            if found == 2:
                break
        assert found == 2, f"{kind} {mode}: no parameters round differently in 400 tries"
    return model_of(nodes, inputs, outputs, inits, domains=[MS]), feeds, []


def qoperator_pooling():
    """QLinearGlobalAveragePool and QLinearAveragePool, channels first and
    channels last."""
    rng = np.random.default_rng(23)
    u8 = TensorProto.UINT8
    inits = [q_param("sx", 0.05), q_param("zx", 128, np.uint8),
             q_param("sy", 0.01), q_param("zy", 100, np.uint8)]
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0)
    nodes = [
        helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], ["gap"],
                         domain=MS, channels_last=0),
        helper.make_node("QLinearGlobalAveragePool", ["xt", "sx", "zx", "sy", "zy"], ["gap_nhwc"],
                         domain=MS, channels_last=1),
        helper.make_node("QLinearAveragePool", ["x", "sx", "zx", "sy", "zy"], ["avg"], domain=MS, **pool),
        helper.make_node("QLinearAveragePool", ["xt", "sx", "zx", "sy", "zy"], ["avg_nhwc"], domain=MS,
                         channels_last=1, **pool),
    ]
    inputs = [helper.make_tensor_value_info("x", u8, [1, 4, 5, 6]),
              helper.make_tensor_value_info("xt", u8, [1, 5, 6, 4])]
    outputs = [helper.make_tensor_value_info("gap", u8, [1, 4, 1, 1]),
               helper.make_tensor_value_info("gap_nhwc", u8, [1, 1, 1, 4]),
               helper.make_tensor_value_info("avg", u8, [1, 4, 3, 3]),
               helper.make_tensor_value_info("avg_nhwc", u8, [1, 3, 3, 4])]
    model = model_of(nodes, inputs, outputs, inits, domains=[MS])
    x = rng.integers(0, 256, [1, 4, 5, 6]).astype(np.uint8)
    return model, {"x": x, "xt": np.ascontiguousarray(x.transpose(0, 2, 3, 1))}, []



def qoperator_gemm():
    """QGemm with a quantized output (per-column weights, transposed, a
    bias) and with a float output (alpha 0.5)."""
    rng = np.random.default_rng(29)
    u8 = TensorProto.UINT8
    inits = [
        q_param("sa", 0.04), q_param("za", 120, np.uint8),
        numpy_helper.from_array(rng.integers(-127, 128, [5, 8]).astype(np.int8), "w"),
        q_param("sw", rng.uniform(0.005, 0.02, 5)), q_param("zw", np.zeros(5), np.int8),
        numpy_helper.from_array(rng.integers(-2000, 2000, [5]).astype(np.int32), "c"),
        q_param("sy", 0.1), q_param("zy", 128, np.uint8),
        numpy_helper.from_array(rng.integers(-127, 128, [8, 5]).astype(np.int8), "v"),
        q_param("sv", 0.01), q_param("zv", 0, np.int8),
    ]
    nodes = [
        helper.make_node("QGemm", ["a", "sa", "za", "w", "sw", "zw", "c", "sy", "zy"], ["y"],
                         domain=MS, transB=1),
        helper.make_node("QGemm", ["a", "sa", "za", "v", "sv", "zv", "c"], ["yf"], domain=MS, alpha=0.5),
    ]
    inputs = [helper.make_tensor_value_info("a", u8, [3, 8])]
    outputs = [helper.make_tensor_value_info("y", u8, [3, 5]),
               helper.make_tensor_value_info("yf", TensorProto.FLOAT, [3, 5])]
    model = model_of(nodes, inputs, outputs, inits, domains=[MS])
    return model, {"a": rng.integers(0, 256, [3, 8]).astype(np.uint8)}, []



def quantized_qdq(graph, shapes, seed):
    """The float model of `graph`, quantized statically to QDQ with
    per-channel weights by onnxruntime.quantization (seeded calibration),
    its output DequantizeLinear dropped so the case judges the quantized
    output in integer steps. Returns the QDQ model and the float one."""
    import tempfile

    from onnxruntime import quantization as q

    float_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    float_model.ir_version = IR_VERSION

    class Calibration(q.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(seed)
            self.batches = iter([{k: rng.uniform(-1, 1, v).astype(np.float32) for k, v in shapes.items()}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "qdq.onnx")
        onnx.save(float_model, src)
        q.quantize_static(src, dst, Calibration(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
        model = onnx.load(dst)
    g = model.graph
    out = g.output[0]
    last = next(n for n in g.node if n.op_type == "DequantizeLinear" and n.output[0] == out.name)
    g.node.remove(last)
    for n in g.node:
        if n.op_type == "QuantizeLinear" and n.output[0] == last.input[0]:
            n.output[0] = out.name
    out.type.tensor_type.elem_type = TensorProto.UINT8
    return model, float_model


def qdq_cnn():
    """A QDQ CNN (convolution, depthwise, 1x1, residual Add, global average
    pool, flatten, dense; per-channel weights): every pattern becomes an
    int8 operator and the activations u8 tensors (tests/quantized.rs also
    checks the arena against float.onnx's)."""
    rng = np.random.default_rng(31)
    w = lambda name, *shape: numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
        helper.make_node("Add", ["c3", "r1"], ["s"]),
        helper.make_node("GlobalAveragePool", ["s"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], transB=1),
    ]
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 1, 3, 3), w("b2", 8),
             w("w3", 8, 8, 1, 1), w("b3", 8), w("w4", 6, 8), w("b4", 6)]
    graph = helper.make_graph(nodes, "qdq_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)
    model, float_model = quantized_qdq(graph, {"x": [1, 3, 12, 12]}, 37)
    feeds = {"x": rng.uniform(-1, 1, [1, 3, 12, 12]).astype(np.float32)}
    return model, feeds, [], {}, {"float.onnx": float_model}



def qdq_movement():
    """A QDQ CNN whose values only move between equal parameters: an edge
    padding, a max pool, a zero padding (onnxruntime.quantization gives
    their outputs their inputs' scale and zero point); they run on the u8
    tensors themselves (tests/quantized.rs)."""
    rng = np.random.default_rng(41)
    w = lambda name, *shape: numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)
    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Pad", ["r1", "pads"], ["e1"], mode="edge"),
        helper.make_node("MaxPool", ["e1"], ["m1"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["m1", "w2", "b2"], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Pad", ["r2", "pads"], ["z2"]),
        helper.make_node("Conv", ["z2", "w3", "b3"], ["y"]),
    ]
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 1, 1), w("b2", 8),
             w("w3", 4, 8, 3, 3), w("b3", 4), pads]
    graph = helper.make_graph(nodes, "qdq_movement",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 15, 15])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model, float_model = quantized_qdq(graph, {"x": [1, 3, 15, 15]}, 43)
    feeds = {"x": rng.uniform(-1, 1, [1, 3, 15, 15]).astype(np.float32)}
    return model, feeds, [], {}, {"float.onnx": float_model}


def qdq_mlp():
    """A QDQ MLP (MatMul with per-column weights, bias Add, Relu)."""
    rng = np.random.default_rng(41)
    w = lambda name, *shape: numpy_helper.from_array(rng.normal(0, 0.2, shape).astype(np.float32), name)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["y"]),
    ]
    inits = [w("w1", 16, 24), w("b1", 24), w("w2", 24, 8), w("b2", 8)]
    graph = helper.make_graph(nodes, "qdq_mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits)
    model, _ = quantized_qdq(graph, {"x": [4, 16]}, 43)
    feeds = {"x": rng.uniform(-1, 1, [4, 16]).astype(np.float32)}
    return model, feeds, []



def dynamic_mlp():
    """An MLP quantized dynamically by onnxruntime.quantization
    (DynamicQuantizeLinear, MatMulInteger, the i32 sums cast to f32 and
    scaled): each cast of the sums runs in place, so the quantized arena
    is no larger than the float one."""
    import tempfile

    from onnxruntime import quantization as q
    rng = np.random.default_rng(67)
    w = lambda name, *shape: numpy_helper.from_array(rng.normal(0, 0.2, shape).astype(np.float32), name)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["y"]),
    ]
    inits = [w("w1", 32, 48), w("b1", 48), w("w2", 48, 16), w("b2", 16)]
    graph = helper.make_graph(nodes, "dynamic_mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])], inits)
    float_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    float_model.ir_version = IR_VERSION
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "dynamic.onnx")
        onnx.save(float_model, src)
        q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8)
        model = onnx.load(dst)
    feeds = {"x": rng.uniform(-1, 1, [8, 32]).astype(np.float32)}
    return model, feeds, []


def layernorm_constant_rows():
    """LayerNormalization of rows whose values are all equal normalises
    them to exactly zero (onnxruntime, onnx.reference). Found by
    tools/fuzz_graphs.py (seed 2026, graph 7153): a mean summed in f32 and
    multiplied by a rounded 1/n is one ulp off, and dividing by sqrt(eps)
    turned that into 0.00255. Node `fused` normalises the last axis with a
    scale and bias of its shape; node `broadcast` normalises from axis 0
    with a scale that broadcasts along some of the normalised axes."""
    rng = np.random.default_rng(7153)
    x = rng.standard_normal([3, 5, 48]).astype(np.float32)
    x[0, 0, :] = -1.3862944
    x[1, 2, :] = np.float32(np.log(1 / 6))
    z = np.full([4, 6, 6, 1], -1.3862944, np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["fused"], axis=-1),
             helper.make_node("LayerNormalization", ["z", "axis_scale"], ["broadcast"], axis=0)]
    inits = [weight(rng, "scale", [48]), weight(rng, "bias", [48]),
             weight(rng, "axis_scale", [6, 1, 1])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 48]),
                             helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 6, 6, 1])],
                     [helper.make_tensor_value_info("fused", TensorProto.FLOAT, [3, 5, 48]),
                      helper.make_tensor_value_info("broadcast", TensorProto.FLOAT, [4, 6, 6, 1])],
                     inits)
    return model, {"x": x, "z": z}, []


def logsumexp_extreme_values():
    """ReduceLogSumExp is m + ln(sum(exp(x - m))) with m the maximum, as
    onnxruntime computes it: ln(sum(exp(x))) overflows from x = 88.7 on
    and gives 0 for a tiny x alone (found by tools/fuzz_graphs.py, seed
    2027, graph 2239: 0 instead of 9.3e-20). One node keeps the reduced
    axis, one drops it; rows of -inf stay -inf."""
    x = np.array([[[9.3e-20, -3.0, 1.0, 2.0],
                   [100.0, 200.0, 300.0, -50.0]],
                  [[-np.inf, -np.inf, -np.inf, -np.inf],
                   [0.5, 0.25, -0.125, 1.5]]], np.float32)
    axis = helper.make_tensor("axis", TensorProto.INT64, [1], [2])
    nodes = [helper.make_node("ReduceLogSumExp", ["x", "axis"], ["kept"], keepdims=1),
             helper.make_node("ReduceLogSumExp", ["one", "axis0"], ["single"], keepdims=0)]
    axis0 = helper.make_tensor("axis0", TensorProto.INT64, [1], [0])
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 4]),
                             helper.make_tensor_value_info("one", TensorProto.FLOAT, [1])],
                     [helper.make_tensor_value_info("kept", TensorProto.FLOAT, [2, 2, 1]),
                      helper.make_tensor_value_info("single", TensorProto.FLOAT, [])],
                     [axis, axis0], opset=18)
    return model, {"x": x, "one": np.array([9.3e-20], np.float32)}, []


def qdq_activations():
    """A QDQ CNN whose activations (Sigmoid, LeakyRelu, HardSwish) sit
    between DequantizeLinear and QuantizeLinear: each becomes a 256-entry
    look-up table on the u8 tensor."""
    rng = np.random.default_rng(47)
    w = lambda name, *shape: numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s1"]),
        helper.make_node("Conv", ["s1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c2"], ["l2"], alpha=0.2),
        helper.make_node("Conv", ["l2", "w3", "b3"], ["c3"]),
        helper.make_node("HardSwish", ["c3"], ["h3"]),
        helper.make_node("GlobalAveragePool", ["h3"], ["y"]),
    ]
    inits = [w("w1", 6, 3, 3, 3), w("b1", 6), w("w2", 6, 6, 3, 3), w("b2", 6),
             w("w3", 4, 6, 1, 1), w("b3", 4)]
    graph = helper.make_graph(nodes, "qdq_activations",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], inits)
    model, _ = quantized_qdq(graph, {"x": [1, 3, 10, 10]}, 53)
    feeds = {"x": rng.uniform(-1, 1, [1, 3, 10, 10]).astype(np.float32)}
    return model, feeds, []


def qdq_swish():
    """A QDQ CNN with Swish (x·sigmoid(x), efficientnet's activation) after
    each convolution: onnxruntime.quantization writes the sigmoid between a
    DequantizeLinear and a QuantizeLinear and the product as a QDQ Mul of x
    and the sigmoid. The sigmoid becomes a table, then the product of x and
    that table one table of x, so sigmoid(x) never exists whole."""
    rng = np.random.default_rng(59)
    w = lambda name, *shape: numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s1"]),
        helper.make_node("Mul", ["c1", "s1"], ["m1"]),
        helper.make_node("Conv", ["m1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=6),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("Mul", ["s2", "c2"], ["m2"]),
        helper.make_node("Conv", ["m2", "w3", "b3"], ["y"]),
    ]
    inits = [w("w1", 6, 3, 3, 3), w("b1", 6), w("w2", 6, 1, 3, 3), w("b2", 6),
             w("w3", 4, 6, 1, 1), w("b3", 4)]
    graph = helper.make_graph(nodes, "qdq_swish",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])], inits)
    model, _ = quantized_qdq(graph, {"x": [1, 3, 12, 12]}, 61)
    feeds = {"x": rng.uniform(-1, 1, [1, 3, 12, 12]).astype(np.float32)}
    return model, feeds, []


def conv_packed_without_scratch():
    """A lone Conv whose arena has no room for kernel scratch: its weight
    is packed with the shallowest depth block (64 of its 130) and the step
    plans no scratch. `stow verify` once unpacked such a weight with the
    usual depth block and reported it differing from the model (the ONNX
    pytorch Conv1d cases)."""
    rng = np.random.default_rng(29)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[5])]
    inits = [weight(rng, "w", [8, 26, 5]),
             numpy_helper.from_array(rng.standard_normal([8]).astype(np.float32), "b")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 26, 20])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])], inits)
    return model, {"x": rng.standard_normal([1, 26, 20]).astype(np.float32)}, []


def int8_product_without_scratch():
    """A lone MatMulInteger, u8 [1, 8, 768] by an i8 [768, 32] weight: its
    step is the arena's peak, so no scratch fits under the bound. The
    compiler packed the weight only where the product's stack buffer held
    one panel and the rows (8 KiB: depths up to 408), so this one ran the
    plain loops, 500 times slower than packed."""
    rng = np.random.default_rng(71)
    nodes = [helper.make_node("MatMulInteger", ["a", "w", "a0", "w0"], ["y"])]
    inits = [numpy_helper.from_array(rng.integers(-128, 128, [768, 32]).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(131, dtype=np.uint8), "a0"),
             numpy_helper.from_array(np.array(0, dtype=np.int8), "w0")]
    model = model_of(nodes, [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 8, 768])],
                     [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 8, 32])], inits)
    return model, {"a": rng.integers(0, 256, [1, 8, 768]).astype(np.uint8)}, []


BUILT = [dense_head_0321, dense_head_0231, input_through_identity_transpose, symbolic_value_info,
         stale_value_info, lstm_forward, lstm_reverse, lstm_bidirectional, gru_forward,
         gru_reverse, rnn_bidirectional, if_on_a_set_input,
         if_on_the_data_true, if_on_the_data_false, pad_bool_with_true, two_outputs_one_value,
         constant_minus_conv, constant_over_conv, conv_minus_constant,
         conv_same_upper_then_strided_1x1, conv_same_lower_then_strided_1x1,
         softmax_then_strided_slice, conv_then_offset_strided_slice,
         conv_then_offset_strided_slice_same_length,
         convtranspose_output_shape_odd_padding, resize_nearest_sizes_half_way, softplus_large_input,
         batchnorm_computed_statistics, input_used_for_its_shape_only,
         resize_align_corners_fractional_scale, nhwc_convs_with_channel_adds,
         float16_elementwise, float16_conv_softmax, mod_smaller_first_operand,
         pools_valid_ceil_mode, qoperator_elementwise, qoperator_pooling, qoperator_gemm,
         qdq_cnn, qdq_mlp, dynamic_mlp, qdq_activations, qdq_movement, qdq_swish, qlinear_rounding, layernorm_constant_rows,
         logsumexp_extreme_values, conv_packed_without_scratch, int8_product_without_scratch]

# Cases of the onnx package's node suite, with its expected outputs.
NODE_CASES = [
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
    "test_constant",
    "test_dropout_default_mask",
]


def write_case(out, name, model, feeds, expected, args):
    case = os.path.join(out, name)
    shutil.rmtree(case, ignore_errors=True)
    os.makedirs(case)
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for i, (input_name, value) in enumerate(feeds):
        tensor = numpy_helper.from_array(value, input_name)
        with open(os.path.join(case, f"input_{i}.pb"), "wb") as f:
            f.write(tensor.SerializeToString())
    for i, (output_name, value) in enumerate(expected):
        tensor = numpy_helper.from_array(value, output_name)
        with open(os.path.join(case, f"output_{i}.pb"), "wb") as f:
            f.write(tensor.SerializeToString())
    if args:
        with open(os.path.join(case, "args.txt"), "w") as f:
            f.write("\n".join(args) + "\n")
    size = sum(os.path.getsize(os.path.join(case, f)) for f in os.listdir(case))
    print(f"{case}: {size:,} bytes")


def built_case(out, make):
    import onnxruntime as ort

    made = make()
    model, feeds, args = made[:3]
    # Inputs fixed with --set are fed to onnxruntime but are not inputs of
    # the bundle.
    fixed = made[3] if len(made) > 3 else {}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {**feeds, **fixed})
    names = [o.name for o in session.get_outputs()]
    if getattr(make, "expected_by_reference", False):
        from onnx.reference import ReferenceEvaluator

        reference = ReferenceEvaluator(model).run(None, {**feeds, **fixed})
        compare_f16(names, reference, outputs, "onnxruntime")
        outputs = reference
    else:
        compare_f16(names, outputs, None, "the ONNX reference", model, {**feeds, **fixed})
    write_case(out, make.__name__, model, list(feeds.items()), list(zip(names, outputs)), args)
    steps = getattr(make, "f16_steps", None)
    if steps is not None:
        with open(os.path.join(out, make.__name__, "f16_steps.txt"), "w") as f:
            f.write(f"{steps}\n")
    steps = getattr(make, "q_steps", None)
    if steps is not None:
        with open(os.path.join(out, make.__name__, "q_steps.txt"), "w") as f:
            f.write(f"{steps}\n")
    for name, extra in (made[4] if len(made) > 4 else {}).items():
        onnx.save(extra, os.path.join(out, make.__name__, name))


def compare_f16(names, expected, other, who, model=None, feeds=None):
    """Prints how many f16 steps `who` (the other third party) is from the
    expected outputs, for the record (they differ where one of them
    rounds more often)."""
    if not any(o.dtype == np.float16 for o in expected):
        return
    if other is None:
        from onnx.reference import ReferenceEvaluator

        other = ReferenceEvaluator(model).run(None, feeds)
    for name, want, got in zip(names, expected, other):
        if want.dtype != np.float16:
            continue
        step = np.spacing(np.abs(want)).astype(np.float64)
        ulps = np.abs(got.astype(np.float64) - want.astype(np.float64)) / step
        print(f"  {name}: {who} within {ulps.max():g} f16 steps")


def node_cases(out, names):
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        # The generators divide by zero on purpose for their inf cases.
        warnings.simplefilter("ignore")
        cases = {case.name: case for case in collect_testcases()}
    for name in names:
        case = cases.get(name)
        if case is None:
            raise SystemExit(f"no node case named {name}")
        model = case.model
        inputs, outputs = case.data_sets[0]
        graph_inputs = [i.name for i in model.graph.input
                        if i.name not in {t.name for t in model.graph.initializer}]
        feeds = list(zip(graph_inputs, inputs))
        expected = list(zip([o.name for o in model.graph.output], outputs))
        write_case(out, name.removeprefix("test_"), model, feeds, expected, [])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "testdata", "regress"))
    parser.add_argument("--only", action="append", metavar="NAME", help="generate only this case (repeatable)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for make in BUILT:
        if not args.only or make.__name__ in args.only:
            built_case(args.out, make)
    wanted = [n for n in NODE_CASES if not args.only or n.removeprefix("test_") in args.only]
    if wanted:
        node_cases(args.out, wanted)


if __name__ == "__main__":
    main()
