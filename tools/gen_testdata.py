#!/usr/bin/env python3
"""Generate the small ONNX models checked in under testdata/.

Deterministic (fixed seed, random weights), opset 17, each well under 1 MB.
Needs the `onnx` and `numpy` packages (`pip install onnx numpy`); when
onnxruntime is installed, every model is also executed once as a check.

    python3 tools/gen_testdata.py [--out DIR] [--only NAME ...]
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


class Builder:
    """Collects nodes and random initializers for one graph."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def weight(self, base, shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        name = self.name(base)
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def const(self, base, value):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type, inputs, n_out=1, out=None, **attrs):
        outs = [out] if out else [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x, cin, cout, k=3, stride=1, group=1, bias=True):
        w = self.weight("conv_w", [cout, cin // group, k, k])
        inputs = [x, w] + ([self.weight("conv_b", [cout], 0.1)] if bias else [])
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group)

    def bn(self, x, c):
        scale = self.const("bn_scale", (1.0 + 0.1 * self.rng.standard_normal(c)).astype(np.float32))
        bias = self.const("bn_bias", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        mean = self.const("bn_mean", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        var = self.const("bn_var", (1.0 + 0.1 * self.rng.random(c)).astype(np.float32))
        return self.op("BatchNormalization", [x, scale, bias, mean, var])

    def model(self, name, inputs, outputs):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="stowage-gen-testdata")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def residual_cnn():
    b = Builder(1)
    x = b.op("Relu", [b.bn(b.conv("image", 3, 16), 16)])
    for _ in range(2):
        y = b.op("Relu", [b.bn(b.conv(x, 16, 16), 16)])
        y = b.bn(b.conv(y, 16, 16), 16)
        x = b.op("Relu", [b.op("Add", [x, y])])
    x = b.op("Relu", [b.conv(x, 16, 32, stride=2)])
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1)
    b.op("Gemm", [x, b.weight("fc_w", [10, 32]), b.weight("fc_b", [10], 0.1)], out="logits", transB=1)
    return b.model("residual_cnn", [f32("image", [1, 3, 32, 32])], [f32("logits", [1, 10])])


def two_branch():
    b = Builder(2)
    x = b.op("Relu", [b.conv("image", 3, 8)])
    left = b.op("Relu", [b.conv(x, 8, 8)])
    left = b.op("Relu", [b.conv(left, 8, 8)])
    right = b.op("MaxPool", [b.conv(x, 8, 8, k=1)], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    joined = b.op("Concat", [left, right], axis=1)
    y = b.op("Relu", [b.conv(joined, 16, 8, k=1)])
    b.op("AveragePool", [y], out="features", kernel_shape=[2, 2], strides=[2, 2])
    return b.model("two_branch", [f32("image", [1, 3, 24, 24])], [f32("features", [1, 8, 12, 12])])


def mobilenet_block():
    b = Builder(3)
    lo, hi = b.const("clip_min", np.float32(0.0)), b.const("clip_max", np.float32(6.0))

    def inverted_residual(x, c, expand):
        h = b.op("Clip", [b.conv(x, c, c * expand, k=1), lo, hi])
        h = b.op("Clip", [b.conv(h, c * expand, c * expand, k=3, group=c * expand), lo, hi])
        h = b.conv(h, c * expand, c, k=1)
        return b.op("Add", [x, h])

    x = b.op("Clip", [b.conv("image", 3, 16, stride=2), lo, hi])
    x = inverted_residual(x, 16, 4)
    x = inverted_residual(x, 16, 4)
    x = b.op("GlobalAveragePool", [x], out="pooled")
    return b.model("mobilenet_block", [f32("image", [1, 3, 32, 32])], [f32("pooled", [1, 16, 1, 1])])


def mlp():
    b = Builder(4)
    x = "features"
    for cin, cout in [(64, 128), (128, 128)]:
        x = b.op("Relu", [b.op("Gemm", [x, b.weight("w", [cout, cin]), b.weight("b", [cout], 0.1)], transB=1)])
    x = b.op("Gemm", [x, b.weight("w", [10, 128]), b.weight("b", [10], 0.1)], transB=1)
    b.op("Softmax", [x], out="probs", axis=-1)
    return b.model("mlp", [f32("features", [1, 64])], [f32("probs", [1, 10])])


def transformer_block():
    b = Builder(5)
    seq, hidden, heads = 16, 32, 4
    head = hidden // heads

    def layer_norm(x):
        gamma = b.const("ln_gamma", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
        beta = b.const("ln_beta", (0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
        return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def linear(x, cin, cout):
        return b.op("Add", [b.op("MatMul", [x, b.weight("w", [cin, cout])]), b.weight("b", [cout], 0.1)])

    split_shape = b.const("split_shape", np.array([1, seq, heads, head], dtype=np.int64))
    merge_shape = b.const("merge_shape", np.array([1, seq, hidden], dtype=np.int64))

    def to_heads(x, perm):
        return b.op("Transpose", [b.op("Reshape", [x, split_shape])], perm=perm)

    h = layer_norm("tokens")
    q = to_heads(linear(h, hidden, hidden), [0, 2, 1, 3])
    k = to_heads(linear(h, hidden, hidden), [0, 2, 3, 1])
    v = to_heads(linear(h, hidden, hidden), [0, 2, 1, 3])
    scale = b.const("scale", np.float32(1.0 / np.sqrt(head)))
    scores = b.op("Mul", [b.op("MatMul", [q, k]), scale])
    attn = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    attn = b.op("Reshape", [b.op("Transpose", [attn], perm=[0, 2, 1, 3]), merge_shape])
    x = b.op("Add", ["tokens", linear(attn, hidden, hidden)])
    h = layer_norm(x)
    h = linear(h, hidden, 4 * hidden)
    # GELU written out: 0.5 * h * (1 + erf(h / sqrt(2)))
    half, one, root2 = b.const("half", np.float32(0.5)), b.const("one", np.float32(1.0)), b.const("root2", np.float32(np.sqrt(2.0)))
    gelu = b.op("Mul", [b.op("Mul", [h, half]), b.op("Add", [b.op("Erf", [b.op("Div", [h, root2])]), one])])
    b.op("Add", [x, linear(gelu, 4 * hidden, hidden)], out="encoded")
    return b.model("transformer_block", [f32("tokens", [1, seq, hidden])], [f32("encoded", [1, seq, hidden])])


def symbolic_batch():
    b = Builder(6)
    x = b.op("Relu", [b.conv("image", 3, 8)])
    x = b.op("Relu", [b.conv(x, 8, 8, stride=2)])
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1)
    b.op("Gemm", [x, b.weight("fc_w", [4, 8]), b.weight("fc_b", [4], 0.1)], out="scores", transB=1)
    return b.model("symbolic_batch", [f32("image", ["N", 3, 16, 16])], [f32("scores", ["N", 4])])


def concat_block():
    """Inception-like block whose concat can be done in place, plus concats
    that must stay copies: one over a graph input, one holding the same
    tensor twice, one along an inner axis, and one whose output is
    overwritten in place while an input is still read later. A branch
    output is also read after its (in-place) concat: its slice must survive."""
    b = Builder(7)
    seed = b.op("Relu", [b.conv("image", 3, 1)])
    x = b.op("Concat", ["image", seed], axis=1)  # holds a graph input: copy
    b1 = b.op("Relu", [b.conv(x, 4, 8, k=1)])
    b2 = b.op("Relu", [b.conv(b.op("Relu", [b.conv(x, 4, 4, k=1)]), 4, 8)])
    pooled = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b3 = b.op("Relu", [b.conv(pooled, 4, 8)])
    joined = b.op("Concat", [b1, b2, b3], axis=1)  # in place
    y = b.op("Relu", [b.conv(joined, 24, 8)])
    gated = b.op("Mul", [b1, y])  # b1 read after its concat
    twice = b.op("Concat", [gated, gated], axis=1)  # the same tensor twice: copy
    b.op("GlobalAveragePool", [twice], out="pooled")
    c1 = b.op("Relu", [b.conv(gated, 8, 4)])
    c2 = b.op("Relu", [b.conv(gated, 8, 4)])
    squashed = b.op("Sigmoid", [b.op("Concat", [c1, c2], axis=1)])  # written over its concat
    gate = b.conv(squashed, 8, 4)
    b.op("GlobalAveragePool", [b.op("Mul", [c1, gate])], out="side")  # c1 still read
    left = b.op("Relu", [b.conv(gate, 4, 2)])
    wide = b.op("Concat", [left, b.op("Relu", [b.conv(gate, 4, 2)])], axis=3)  # inner axis: copy
    b.op("GlobalAveragePool", [wide], out="wide")
    return b.model("concat_block", [f32("image", [1, 3, 16, 16])],
                   [f32("pooled", [1, 16, 1, 1]), f32("side", [1, 4, 1, 1]), f32("wide", [1, 2, 1, 1])])


def upsample_block():
    """Encoder-decoder step as segmentation heads do it: downsample, upsample
    by linear interpolation (half-pixel), add the skip, upsample again by
    nearest neighbour (asymmetric, floor), classify every pixel."""
    b = Builder(8)
    skip = b.op("Relu", [b.conv("image", 3, 8)])
    low = b.op("Relu", [b.conv(skip, 8, 8, stride=2)])
    scales = b.const("scales", np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32))
    up = b.op("Resize", [low, "", scales], mode="linear", coordinate_transformation_mode="half_pixel")
    x = b.op("Relu", [b.conv(b.op("Add", [up, skip]), 8, 4)])
    big = b.op("Resize", [x, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
               nearest_mode="floor")
    b.op("Conv", [big, b.weight("head_w", [3, 4, 1, 1]), b.weight("head_b", [3], 0.1)], out="classes",
         kernel_shape=[1, 1])
    return b.model("upsample_block", [f32("image", [1, 3, 12, 12])], [f32("classes", [1, 3, 24, 24])])


def depthwise_block():
    """Depthwise convolutions (batch 2) that run in place and ones that may
    not, in this order: on the graph input (the caller's bytes); stride 1
    over a dead input (in place); stride 2 with dilation 2 at the peak (in
    place: a smaller output); a 1×1 convolution (not depthwise); an input
    an Add reads again; an output plane larger than the input's (1×1
    kernel with padding); stride 2 away from the peak (in place would hold
    its input's bytes longer for nothing); a channel multiplier; two
    groups."""
    b = Builder(9)

    def dw(x, c, k=3, stride=1, pad=None, dilation=1):
        pad = (k // 2) * dilation if pad is None else pad
        return b.op("Conv", [x, b.weight("dw_w", [c, 1, k, k]), b.weight("dw_b", [c], 0.1)],
                    kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                    dilations=[dilation, dilation], group=c)

    x = dw("image", 8)
    x = b.op("Resize", [x, "", b.const("scales", np.array([1, 1, 4, 4], np.float32))], mode="nearest")
    x = dw(b.op("Relu", [x]), 8)
    x = dw(x, 8, stride=2, dilation=2)
    x = b.op("Conv", [x, b.weight("reduce_w", [2, 8, 1, 1])], kernel_shape=[1, 1])
    x = b.op("Add", [dw(x, 2), x])
    x = dw(x, 2, k=1, pad=1)
    x = dw(x, 2, stride=2)
    x = b.op("Conv", [x, b.weight("mult_w", [4, 1, 3, 3])], kernel_shape=[3, 3], pads=[1] * 4, group=2)
    b.op("Conv", [x, b.weight("group_w", [4, 2, 3, 3])], out="features", kernel_shape=[3, 3], pads=[1] * 4,
         group=2)
    return b.model("depthwise_block", [f32("image", [2, 8, 4, 4])], [f32("features", [2, 4, 5, 5])])


def patch_chain():
    """A stage of every operator kind patch-based execution runs in bands
    of rows, from the image to `features`: a 3×3 convolution with padding,
    Clip, max pool 3×3 stride 2 (padded), a dilated 5×5 convolution with
    asymmetric padding, a strided 1×1 convolution (a strided slice in
    tract), an average pool excluding padding, a depthwise 3×3 stride 2, a
    residual addition and a row-constant bias; then a global pool after
    the stage. Large early activations, a small stage output."""
    b = Builder(11)

    def conv(x, cin, cout, k, stride=1, pads=None, dilation=1, group=1):
        pads = [(k // 2) * dilation] * 4 if pads is None else pads
        return b.op("Conv", [x, b.weight("w", [cout, cin // group, k, k]), b.weight("b", [cout], 0.1)],
                    kernel_shape=[k, k], strides=[stride, stride], pads=pads,
                    dilations=[dilation, dilation], group=group)

    x = conv("image", 3, 16, 3)
    x = b.op("Clip", [x, b.const("lo", np.array(0, np.float32)), b.const("hi", np.array(6, np.float32))])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = conv(x, 16, 16, 5, pads=[3, 4, 5, 4], dilation=2)
    x = b.op("Relu", [x])
    x = conv(x, 16, 24, 1, stride=2, pads=[0, 0, 0, 0])
    y = b.op("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)
    x = b.op("Add", [x, conv(y, 24, 24, 3, group=24)])
    x = b.op("Mul", [x, b.const("scale", np.linspace(0.5, 1.5, 24, dtype=np.float32).reshape(1, 24, 1, 1))])
    x = conv(x, 24, 24, 3, stride=2, group=24)
    x = b.op("Relu", [x], out="stage_out")
    b.op("GlobalAveragePool", [x], out="features")
    return b.model("patch_chain", [f32("image", [1, 3, 128, 24])], [f32("features", [1, 24, 1, 1])])


def patch_se():
    """Two peaks a squeeze-and-excitation block separates: a wide
    convolution on the image, a depthwise stride 2 and a narrow projection;
    a channel gate computed from the whole narrow tensor (GlobalAveragePool,
    1×1 convolution, Sigmoid, Mul); then a wide expansion, a depthwise and
    a narrow projection. A stage crosses the gate only by computing what
    comes before it twice (most of this model's multiply-adds), so within
    the default budget a small capacity takes one stage before the gate and
    one after."""
    b = Builder(12)

    def conv(x, cin, cout, k, stride=1, group=1):
        return b.op("Conv", [x, b.weight("w", [cout, cin // group, k, k]), b.weight("b", [cout], 0.1)],
                    kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)

    x = b.op("Relu", [conv("image", 3, 24, 3)])
    x = conv(b.op("Relu", [conv(x, 24, 24, 3, stride=2, group=24)]), 24, 8, 1)
    gate = b.op("Sigmoid", [conv(b.op("GlobalAveragePool", [x]), 8, 8, 1)])
    x = b.op("Mul", [x, gate])
    x = b.op("Relu", [conv(x, 8, 48, 1)])
    x = b.op("Relu", [conv(x, 48, 48, 3, group=48)])
    b.op("Conv", [x, b.weight("w", [8, 48, 1, 1])], out="features", kernel_shape=[1, 1])
    return b.model("patch_se", [f32("image", [1, 3, 64, 32])], [f32("features", [1, 8, 32, 16])])


def patch_pad():
    """A channels-last image as a TensorFlow export leaves it: transposed
    for a convolution, back to channels last for a Relu and forward again,
    then paddings of the rows (edge, reflecting, constant), a max pool, a
    parametric Relu and a convolution without padding. The moves around
    the Relu cancel; every operator after the first move runs in bands."""
    b = Builder(13)
    x = b.op("Transpose", ["image"], perm=[0, 3, 1, 2])
    x = b.conv(x, 3, 32, 3, stride=2)
    x = b.op("Transpose", [x], perm=[0, 2, 3, 1])
    x = b.op("Relu", [x])
    x = b.op("Transpose", [x], perm=[0, 3, 1, 2])
    x = b.op("Pad", [x, b.const("pads", np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64))], mode="edge")
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    x = b.op("PRelu", [x, b.weight("slope", [32, 1, 1], 0.2)])
    x = b.op("Pad", [x, b.const("pads", np.array([0, 0, 2, 0, 0, 0, 2, 0], np.int64))], mode="reflect")
    x = b.conv(x, 32, 16, 1)
    x = b.op("Pad", [x, b.const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
                     b.const("value", np.array(0.5, np.float32))])
    b.op("Conv", [x, b.weight("w", [8, 16, 3, 3])], out="features", kernel_shape=[3, 3])
    return b.model("patch_pad", [f32("image", [1, 96, 40, 3])], [f32("features", [1, 8, 28, 10])])


MODELS = [residual_cnn, two_branch, mobilenet_block, mlp, transformer_block, symbolic_batch, concat_block,
          upsample_block, depthwise_block, patch_chain, patch_se, patch_pad]


def run_once(path, model):
    try:
        import onnxruntime as ort
    except ImportError:
        return
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) else 2 for d in inp.shape]
        feeds[inp.name] = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    session.run(None, feeds)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "testdata"), help="output directory")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="generate only this model (repeatable), e.g. --only concat_block")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    known = {make.__name__ for make in MODELS}
    for name in args.only or []:
        if name not in known:
            parser.error(f"no model named {name} (models: {', '.join(sorted(known))})")
    for make in MODELS:
        if args.only and make.__name__ not in args.only:
            continue
        model = make()
        path = os.path.join(args.out, make.__name__ + ".onnx")
        onnx.save(model, path)
        run_once(path, model)
        print(f"{path}: {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
