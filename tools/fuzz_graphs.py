#!/usr/bin/env python3
"""Differential fuzzing: random valid ONNX graphs, Stowage against onnxruntime.

Each graph is a small random DAG (opset 17, built with onnx.helper, checked
with onnx.checker and strict onnx.shape_inference) over the operators
Stowage supports: element-wise unary and binary ops with numpy broadcasting,
comparisons feeding Where, boolean logic, MatMul/Gemm/Einsum products,
Conv/ConvTranspose (1-d and 2-d), pools, normalisations, reductions, Cast,
and layout ops between them (see OPS below and docs/FUZZING.md). A value
may feed several later nodes; a graph may have several outputs. Shapes have
at most 4 dimensions of sizes 1-7 (many 1s, for broadcasting); element
types are f32 mostly, f64, i64, i32 and bool where the operator allows.
Weights are initializers or graph inputs at random.

For each graph: save the model and seeded inputs (.npz keyed by input
name), run onnxruntime (CPUExecutionProvider, no graph optimisation; a graph
ort rejects is skipped and counted), `stow compile`, `stow run --inputs
--out`, and compare every output: floats by max|ours - ort| / max|ort| <=
1e-4 (absolute when ort's output is all zero; NaN and infinity positions
must match), integers and bools exactly, and the same shapes, element types
and output names. Each graph lands in one class:

    match     every output agrees
    refused   `stow compile` or `stow run` fails with a reason (counted per
              normalised error message; "no kernel" refusals per operator)
    unstable  an output differs, but the first diverging node, fed Stowage's
              own (slightly different, within tolerance) inputs, gives the
              same answer in onnxruntime: upstream rounding amplified by a
              discontinuous or ill-conditioned op (Floor, a comparison,
              ArgMax, normalising a constant row...), not a kernel bug
    disputed  the first diverging node, run alone on onnxruntime's inputs,
              still differs, but the spec sides with Stowage: onnx.reference
              computes Stowage's values, ONNX shape inference gives
              Stowage's output shape where onnxruntime's contradicts it, or
              (SAME_* pools and convolutions) onnxruntime computes
              Stowage's values with the SAME padding written out as pads
    WRONG     an output differs otherwise, a crash (panic, signal, timeout),
              or a run that fails without a reason

A WRONG case is diagnosed by re-running the graph with every intermediate
value as an output: the first node whose value diverges is run alone
(Stowage against onnxruntime, onnx.reference and tract through `stow run
--check`); if it fails alone the single-node model is the reproducer,
otherwise the graph is cut down with onnx.utils.extract_model to the
diverging value (and its inputs moved as far down as it keeps failing).
Every WRONG and disputed case (model.onnx, inputs.npz, ort_outputs.npz,
stow_outputs.npz, note.txt and reduced/) is saved under --save DIR
(default ~/.cache/stowage/fuzz-failures; disputed ones under DIR/disputed),
at most --keep per cause.

    python3 tools/fuzz_graphs.py --count 200                  # release build, seed 1
    nice -n 19 python3 tools/fuzz_graphs.py --minutes 60 --seed 7 [--stow target/release/stow]
        [--save DIR] [--ops Conv,MaxPool,Reshape] [--max-nodes 12] [-v]
    python3 tools/fuzz_graphs.py --seed 7 --start 1234 --count 1 -v    # replay graph 1234 of seed 7
    python3 tools/fuzz_graphs.py --list-ops

Prints `N graphs: M match, R refused (top reasons...), W wrong` (and the
disputed, unstable and ort-rejected counts); exit status 1 iff any graph
is WRONG.
Needs numpy, onnx and onnxruntime (the venv of tools/conformance.sh).
`--ops` restricts the operators drawn; helper nodes (Reshape to reach a
rank, Abs/Add to make a value positive, Mul by a power of two to bound
magnitudes) are still inserted where an operator needs them.
"""
import argparse
import collections
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
TOLERANCE = 1e-4
TIMEOUT = 120          # seconds for one stow command
MAX_ELEMS = 6000       # no value larger than this

DTYPES = {
    "f32": (TensorProto.FLOAT, np.float32),
    "f64": (TensorProto.DOUBLE, np.float64),
    "i64": (TensorProto.INT64, np.int64),
    "i32": (TensorProto.INT32, np.int32),
    "bool": (TensorProto.BOOL, np.bool_),
}
ELEM_TO_DT = {v[0]: k for k, v in DTYPES.items()}
FLOATS = ("f32", "f64")
INTS = ("i64", "i32")
NUM = FLOATS + INTS


class Reject(Exception):
    """The builder could not make this node here (a generator decision, not
    an error): the graph is rolled back to before it."""


# ------------------------------------------------------------------ values --

class V:
    """A value of the graph being built, with what the generator knows of it."""
    __slots__ = ("name", "dt", "shape", "exact", "mag", "pos", "kind", "uses")

    def __init__(self, name, dt, shape, exact=True, mag=1.0, pos=False, kind="node"):
        self.name, self.dt, self.shape = name, dt, tuple(shape)
        # exact: computed without rounding that may differ between
        # implementations (inputs, layout, Relu, Max, Add...). Discontinuous
        # ops (Floor, comparisons, ArgMax) prefer exact inputs.
        self.exact = exact
        self.mag = min(float(mag), 1e30) if mag == mag else 1e30   # rough bound of |value|
        self.pos = pos             # every element >= ~0.1 (safe for Log, Div)
        self.kind = kind           # input, init, node
        self.uses = 0

    @property
    def rank(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape)) if self.shape else 1


def rand_dim(rng, lo=1, hi=7, p_one=0.25):
    return 1 if rng.random() < p_one else int(rng.integers(lo, hi + 1))


def rand_shape(rng, rank, p_one=0.25):
    return tuple(rand_dim(rng, p_one=p_one) for _ in range(rank))


def bcast_partner(rng, shape):
    """A shape that broadcasts with `shape` (either may grow the other)."""
    r = len(shape)
    rb = int(rng.choice([max(0, r - 2), max(0, r - 1), r, r, r, min(4, r + 1)]))
    out = []
    for i in range(1, rb + 1):
        if i <= r:
            d = shape[-i]
            if d == 1:
                out.append(1 if rng.random() < 0.5 else rand_dim(rng, 2, 5, 0))
            else:
                out.append(d if rng.random() < 0.7 else 1)
        else:
            out.append(rand_dim(rng, 1, 4))
    return tuple(reversed(out))


def broadcasts(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def factor(rng, n, r):
    """`r` positive dims whose product is n."""
    dims = []
    rem = n
    for _ in range(r - 1):
        divs = [d for d in range(1, rem + 1) if rem % d == 0]
        small = [d for d in divs if d <= 8]
        d = int(rng.choice(small if small and rng.random() < 0.8 else divs))
        dims.append(d)
        rem //= d
    dims.append(rem)
    rng.shuffle(dims)
    return [int(d) for d in dims]


def random_data(rng, dt, shape, kind=None):
    if dt == "bool":
        return np.asarray(rng.random(shape) < 0.5), "bool"
    if dt in INTS:
        kind = kind or "int"
        if kind == "pos":
            a = rng.integers(1, 6, shape)
        else:
            a = rng.integers(-9, 10, shape)
        return np.asarray(a).astype(DTYPES[dt][1]), kind
    kind = kind or str(rng.choice(["normal", "normal", "grid", "pos", "wide"]))
    if kind == "normal":
        a = rng.standard_normal(shape)
    elif kind == "wide":
        a = rng.standard_normal(shape) * 3
    elif kind == "grid":   # halves and integers: exercises Round's ties, Equal
        a = rng.integers(-6, 7, shape) / 2.0
    elif kind == "pos":
        a = rng.uniform(0.1, 3.0, shape)
    elif kind == "small":
        a = rng.uniform(-1, 1, shape)
    else:
        raise ValueError(kind)
    return np.asarray(a).astype(DTYPES[dt][1]), kind


# ----------------------------------------------------------------- builder --

class Builder:
    def __init__(self, rng, max_nodes):
        self.rng = rng
        self.max_nodes = max_nodes
        self.nodes = []
        self.inits = []
        self.inputs = []      # ValueInfoProto
        self.feeds = {}       # graph input name -> array
        self.values = []
        self.counter = 0
        self.main_ops = 0

    # -- names and bookkeeping
    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def checkpoint(self):
        return (len(self.nodes), len(self.inits), len(self.inputs), len(self.values),
                dict(self.feeds), [v.uses for v in self.values])

    def rollback(self, cp):
        n, i, g, v, feeds, uses = cp
        del self.nodes[n:]
        del self.inits[i:]
        del self.inputs[g:]
        del self.values[v:]
        self.feeds = feeds
        for val, u in zip(self.values, uses):
            val.uses = u

    # -- leaves
    def add_input(self, dt, shape, kind=None, prefix="x"):
        data, kind = random_data(self.rng, dt, shape, kind)
        return self.input_of(data, dt, prefix, kind)

    def input_of(self, data, dt, prefix, kind=None):
        name = self.fresh(prefix)
        self.inputs.append(helper.make_tensor_value_info(name, DTYPES[dt][0], list(data.shape)))
        self.feeds[name] = data
        v = V(name, dt, data.shape, True, self.mag_of(data), self.pos_of(data), "input")
        self.values.append(v)
        return v

    @staticmethod
    def mag_of(data):
        if data.size == 0 or data.dtype == np.bool_:
            return 1.0
        return float(np.abs(data.astype(np.float64)).max()) or 1.0

    @staticmethod
    def pos_of(data):
        if data.dtype == np.bool_ or data.size == 0:
            return False
        return bool((data.astype(np.float64) >= 0.1).all())

    def const(self, data, prefix="c", as_input=0.0, pool=False):
        """A constant: an initializer, sometimes a Constant node, or (with
        probability `as_input`) a graph input fed the same data."""
        data = np.asarray(data)
        dt = {np.float32: "f32", np.float64: "f64", np.int64: "i64", np.int32: "i32",
              np.bool_: "bool"}[data.dtype.type]
        if as_input and self.rng.random() < as_input:
            v = self.input_of(data, dt, "w")
            if not pool:
                self.values.remove(v)
            return v
        name = self.fresh(prefix)
        if self.rng.random() < 0.1:
            self.nodes.append(helper.make_node("Constant", [], [name],
                                               value=numpy_helper.from_array(data, name)))
        else:
            self.inits.append(numpy_helper.from_array(data, name))
        v = V(name, dt, data.shape, True, self.mag_of(data), self.pos_of(data), "init")
        if pool:
            self.values.append(v)
        return v

    def i64(self, values, prefix="k"):
        return self.const(np.array(values, dtype=np.int64), prefix)

    def weight(self, dt, shape, kind=None, as_input=0.25, scale=1.0):
        data, _ = random_data(self.rng, dt, shape, kind)
        if dt in FLOATS and scale != 1.0:
            data = (data * scale).astype(data.dtype)
        return self.const(data, "w", as_input=as_input)

    # -- picking from the pool
    def pick(self, dts=NUM, ranks=range(0, 6), pred=None, discont=False, new_p=0.06):
        cands = [v for v in self.values if v.dt in dts and v.rank in ranks
                 and (pred is None or pred(v))]
        if discont and cands and self.rng.random() < 0.75:
            exact = [v for v in cands if v.exact]
            cands = exact or cands
        if not cands or self.rng.random() < new_p:
            dt = self.pick_dt(dts)
            rs = [r for r in ranks if r <= 4]
            if not rs:
                raise Reject("no rank")
            r = int(self.rng.choice(rs))
            for _ in range(20):
                shape = rand_shape(self.rng, r)
                if pred is None:
                    break
                v = V("?", dt, shape)
                if pred(v):
                    break
            else:
                raise Reject("no input fits")
            return self.add_input(dt, shape)
        w = np.array([1.0 + 2.0 * (v.uses == 0) + 2.0 * i / len(cands)
                      for i, v in enumerate(cands)])
        return cands[int(self.rng.choice(len(cands), p=w / w.sum()))]

    def pick_dt(self, dts):
        weights = {"f32": 10, "f64": 1, "i64": 1.5, "i32": 1, "bool": 1}
        dts = list(dts)
        w = np.array([weights[d] for d in dts], dtype=float)
        return dts[int(self.rng.choice(len(dts), p=w / w.sum()))]

    # -- adding a node
    def node(self, op, inputs, n_out=1, exact=True, mag=1.0, pos=False, **attrs):
        names = []
        for x in inputs:
            if isinstance(x, V):
                x.uses += 1
                names.append(x.name)
            else:
                names.append(x)   # "" for an absent optional input
        outs = [self.fresh(op[:4].lower() + "_") for _ in range(n_out)]
        node = helper.make_node(op, names, outs, name=self.fresh("n_" + op + "_"), **attrs)
        self.nodes.append(node)
        types = self.infer(outs)
        vals = []
        for name, (dt, shape) in zip(outs, types):
            v = V(name, dt, shape, exact, mag, pos)
            if v.size > MAX_ELEMS or v.size == 0:
                raise Reject("size")
            vals.append(v)
            self.values.append(v)
        return vals

    def infer(self, names):
        graph = helper.make_graph(self.nodes, "fuzz", self.inputs, [], initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        except Exception as e:
            raise Reject(f"inference: {str(e)[:200]}")
        vi = {v.name: v for v in inferred.graph.value_info}
        out = []
        for n in names:
            if n not in vi:
                raise Reject(f"no type for {n}")
            tt = vi[n].type.tensor_type
            if tt.elem_type not in ELEM_TO_DT or not tt.HasField("shape"):
                raise Reject("type")
            dims = []
            for d in tt.shape.dim:
                if not d.HasField("dim_value"):
                    raise Reject("symbolic dim")
                dims.append(d.dim_value)
            out.append((ELEM_TO_DT[tt.elem_type], tuple(dims)))
        return out

    # -- helpers that adapt a value
    def make_pos(self, v):
        """v with every element >= c > 0: Abs then Add c (ints: >= 1)."""
        if v.pos:
            return v
        a = self.node("Abs", [v], exact=v.exact, mag=v.mag)[0]
        if v.dt in INTS:
            c = self.const(np.array(1, dtype=DTYPES[v.dt][1]))
            return self.node("Add", [a, c], exact=v.exact, mag=v.mag + 1, pos=True)[0]
        c = float(self.rng.choice([0.1, 0.25, 0.5, 1.0]))
        cv = self.const(np.array(c, dtype=DTYPES[v.dt][1]))
        return self.node("Add", [a, cv], exact=v.exact, mag=v.mag + c, pos=True)[0]

    def tame(self, v, limit):
        """v scaled by a power of two so that |v| <= limit (exact)."""
        if v.mag <= limit:
            return v
        if v.dt not in FLOATS:
            raise Reject("int magnitude")
        k = min(math.ceil(math.log2(v.mag / limit)), 120)
        cv = self.const(np.array(2.0 ** -k, dtype=DTYPES[v.dt][1]))
        return self.node("Mul", [v, cv], exact=v.exact, mag=v.mag * 2.0 ** -k, pos=v.pos)[0]

    def to_rank(self, v, ranks):
        """v reshaped to one of `ranks` (same elements)."""
        if v.rank in ranks:
            return v
        r = int(self.rng.choice(list(ranks)))
        dims = factor(self.rng, v.size, r)
        return self.node("Reshape", [v, self.i64(dims)], exact=v.exact, mag=v.mag, pos=v.pos)[0]

    def to_nchw(self, v, spatial_ranks=(1, 2)):
        """v as [N, C, spatial...] with 1 or 2 spatial axes."""
        if v.rank - 2 in spatial_ranks:
            return v
        r = 2 + int(self.rng.choice(list(spatial_ranks)))
        n = v.size
        dims = factor(self.rng, n, r)
        # keep the batch small
        if dims[0] > 2:
            dims = [1] + factor(self.rng, n, r - 1)
        return self.node("Reshape", [v, self.i64(dims)], exact=v.exact, mag=v.mag, pos=v.pos)[0]

    def other_operand(self, a, dts=None, p_pool=0.45, kind=None, as_input=0.3):
        """A second operand broadcasting with a: from the pool or new."""
        dts = dts or (a.dt,)
        if self.rng.random() < p_pool:
            cands = [v for v in self.values if v.dt in dts and broadcasts(v.shape, a.shape)
                     and np.prod(np.broadcast_shapes(v.shape, a.shape)) <= MAX_ELEMS]
            if cands:
                return cands[int(self.rng.integers(len(cands)))]
        shape = bcast_partner(self.rng, a.shape)
        dt = dts[0] if a.dt in dts else self.pick_dt(dts)
        if self.rng.random() < as_input:
            return self.add_input(dt, shape, kind, prefix="y")
        return self.weight(dt, shape, kind, as_input=0)


# -------------------------------------------------------------- operators --

UNARY = {
    # op: (dtypes, exact, domain)
    "Relu": (NUM, True, None), "Sigmoid": (FLOATS, False, None), "Tanh": (FLOATS, False, None),
    "Exp": (FLOATS, False, "tame"), "Log": (FLOATS, False, "pos"), "Sqrt": (FLOATS, False, "nonneg"),
    "Abs": (NUM, True, None), "Neg": (("f32", "f64", "i64", "i32"), True, None),
    "Erf": (("f32",), False, None), "Softplus": (FLOATS, False, None),
    "HardSigmoid": (FLOATS, False, None), "HardSwish": (("f32",), False, None),
    "LeakyRelu": (FLOATS, True, None), "Elu": (FLOATS, False, None), "Clip": (NUM, True, None),
    "Floor": (FLOATS, True, None), "Ceil": (FLOATS, True, None), "Round": (FLOATS, True, None),
    "Sign": (NUM, True, None), "Reciprocal": (FLOATS, False, "pos"),
}
DISCONT = {"Floor", "Ceil", "Round", "Sign"}


def op_unary(b, op):
    dts, exact, domain = UNARY[op]
    rng = b.rng
    v = b.pick(dts, discont=op in DISCONT)
    if domain == "pos":
        v = b.tame(b.make_pos(v), 1e3)
    elif domain == "nonneg":
        v = v if v.pos else b.node("Abs", [v], exact=v.exact, mag=v.mag)[0]
    elif domain == "tame":
        v = b.tame(v, 8.0)
    attrs, inputs = {}, [v]
    mag = v.mag
    if op == "HardSigmoid":
        attrs = dict(alpha=float(rng.uniform(0.1, 0.5)), beta=float(rng.uniform(0.2, 0.8)))
        mag = 1.0
    elif op == "LeakyRelu":
        attrs = dict(alpha=float(rng.choice([0.01, 0.1, 0.2, 0.5, 1.5])))
    elif op == "Elu":
        attrs = dict(alpha=float(rng.choice([1.0, 0.5, 2.0])))
    elif op == "Clip":
        npdt = DTYPES[v.dt][1]
        if v.dt in INTS:
            lo, hi = int(rng.integers(-6, 1)), int(rng.integers(1, 7))
        else:
            lo, hi = float(rng.uniform(-2, 0)), float(rng.uniform(0, 2))
        which = rng.integers(3)   # both, min only, max only
        mn = b.const(np.array(lo, dtype=npdt), as_input=0.15) if which != 2 else ""
        mx = b.const(np.array(hi, dtype=npdt), as_input=0.15) if which != 1 else ""
        inputs = [v, mn] + ([mx] if mx != "" else [])
    elif op in ("Sigmoid", "Tanh", "Erf"):
        mag = 1.0
    elif op == "Exp":
        mag = math.exp(min(v.mag, 80))
    elif op == "Log":
        mag = abs(math.log(max(v.mag, 1.0))) + 3
    elif op == "Sqrt":
        mag = math.sqrt(v.mag)
    elif op == "Reciprocal":
        mag = 12.0
    elif op == "Sign":
        mag = 1.0
    elif op in ("Softplus", "HardSwish", "Elu"):
        mag = v.mag + 1
    pos = op in ("Exp",) or (op in ("Sqrt", "Reciprocal") and v.pos)
    b.node(op, inputs, exact=exact and v.exact, mag=mag, pos=pos, **attrs)


def op_binary(b, op):
    rng = b.rng
    dts = ("f32",) if op == "Pow" else NUM
    a = b.pick(dts)
    if op == "Pow":
        base = b.tame(b.make_pos(a), 8.0)
        if rng.random() < 0.6:
            shape = bcast_partner(rng, base.shape)
            e = b.const((rng.integers(-4, 7, shape) / 2.0).astype(np.float32), as_input=0.2)
            e.mag = 3.0
        else:
            e = b.tame(b.other_operand(base, ("f32",)), 2.0)
        args = [base, e]
        mag = max(base.mag, 10.0) ** 3
        b.node("Pow", args, exact=False, mag=min(mag, 1e9))
        return
    other = b.other_operand(a)
    if op == "Div":
        if rng.random() < 0.5:
            a, other = other, a
        other = b.tame(b.make_pos(other), 1e3) if other.dt in FLOATS else b.make_pos(other)
        mag = a.mag * 10
        exact = False
    else:
        if rng.random() < 0.5:
            a, other = other, a
        mag = {"Add": a.mag + other.mag, "Sub": a.mag + other.mag,
               "Mul": a.mag * other.mag}.get(op, max(a.mag, other.mag))
        exact = a.exact and other.exact
        if a.dt in INTS and mag > 1e4:
            raise Reject("int overflow risk")
    args = [a, other]
    if op in ("Max", "Min") and rng.random() < 0.25:
        third = b.other_operand(a)
        if broadcasts(np.broadcast_shapes(a.shape, other.shape), third.shape):
            args.append(third)
    b.node(op, args, exact=exact, mag=mag, pos=a.pos and other.pos and op in ("Add", "Max", "Min", "Mul"))


def op_mod(b, op):
    """Mod by a divisor kept away from 0, of either sign; fmod=1 for floats
    (ONNX requires it), either for integers."""
    rng = b.rng
    a = b.pick(NUM, discont=True)
    d = b.make_pos(b.other_operand(a))
    if rng.random() < 0.5:
        d = b.node("Neg", [d], exact=d.exact, mag=d.mag)[0]
    fmod = 1 if a.dt in FLOATS else int(rng.integers(0, 2))
    b.node("Mod", [a, d], exact=a.exact and d.exact, mag=d.mag, fmod=fmod)


def op_compare(b, op):
    rng = b.rng
    dts = NUM + ("bool",) if op == "Equal" else NUM
    a = b.pick(dts, discont=True)
    other = b.other_operand(a, kind="grid" if rng.random() < 0.5 else None)
    if rng.random() < 0.5:
        a, other = other, a
    cond = b.node(op, [a, other])[0]
    if rng.random() < 0.75:
        where_from(b, cond)


def where_from(b, cond):
    rng = b.rng
    x = b.other_operand(cond, dts=NUM, p_pool=0.6)
    y = b.other_operand(x if rng.random() < 0.5 else cond, dts=(x.dt,), p_pool=0.5)
    if not broadcasts(np.broadcast_shapes(cond.shape, x.shape), y.shape):
        raise Reject("where shapes")
    b.node("Where", [cond, x, y], exact=x.exact and y.exact, mag=max(x.mag, y.mag))


def op_where(b, op):
    cond = b.pick(("bool",), new_p=0.2)
    where_from(b, cond)


def op_logic(b, op):
    a = b.pick(("bool",), new_p=0.2)
    if op == "Not":
        b.node("Not", [a])
        return
    other = b.other_operand(a, dts=("bool",))
    b.node(op, [a, other])


def matmul_operand(b, a_shape, dt, want_shape, p_pool=0.3):
    """A value of exactly `want_shape` from the pool, or a new weight."""
    if b.rng.random() < p_pool:
        cands = [v for v in b.values if v.dt == dt and v.shape == tuple(want_shape)]
        if cands:
            return cands[int(b.rng.integers(len(cands)))]
    return b.weight(dt, tuple(want_shape), "small", as_input=0.3)


def op_matmul(b, op):
    rng = b.rng
    a = b.pick(("f32", "f32", "f32", "f64", "i64", "i32"), ranks=range(1, 5))
    if a.dt in INTS and a.mag > 50:
        raise Reject("int magnitude")
    if a.rank == 1:
        k = a.shape[0]
        bshape = [k, rand_dim(rng)] if rng.random() < 0.7 else [rand_dim(rng, 1, 3), k, rand_dim(rng)]
    else:
        k = a.shape[-1]
        if rng.random() < 0.15:
            bshape = [k]
        else:
            batch = list(a.shape[:-2])
            nb = int(rng.integers(0, len(batch) + 2))
            bb = []
            for i in range(1, nb + 1):
                if i <= len(batch):
                    d = batch[-i]
                    bb.append(d if d != 1 and rng.random() < 0.8 else (1 if d != 1 else rand_dim(rng, 1, 3)))
                else:
                    bb.append(rand_dim(rng, 1, 3))
            bshape = list(reversed(bb)) + [k, rand_dim(rng)]
    if len(bshape) > 4:
        raise Reject("rank")
    other = matmul_operand(b, a.shape, a.dt, bshape)
    args = [a, other]
    if rng.random() < 0.3 and a.rank >= 2 and len(bshape) >= 2:
        # the pool value as the right operand: A' @ a
        m = rand_dim(rng)
        lshape = list(a.shape[:-2]) + [m, a.shape[-2]]
        left = matmul_operand(b, a.shape, a.dt, lshape)
        args = [left, a]
    b.node("MatMul", args, exact=False, mag=a.mag * max(other.mag, 1) * k)


def op_gemm(b, op):
    rng = b.rng
    a = b.pick(("f32",), ranks=range(1, 5), pred=lambda v: v.size <= 400)
    if a.rank != 2:
        if rng.random() < 0.5 and a.rank >= 1:
            a = b.node("Flatten", [a], axis=int(rng.integers(0, a.rank + 1)), exact=a.exact, mag=a.mag)[0]
        else:
            a = b.to_rank(a, [2])
    trans_a = int(rng.random() < 0.3)
    trans_b = int(rng.random() < 0.4)
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = rand_dim(rng)
    bm = b.weight("f32", (n, k) if trans_b else (k, n), "small", as_input=0.2)
    attrs = dict(transA=trans_a, transB=trans_b)
    if rng.random() < 0.5:
        attrs["alpha"] = float(rng.choice([0.5, -1.0, 2.0, 0.3]))
    args = [a, bm]
    if rng.random() < 0.7:
        cshape = [(), (n,), (1, n), (m, 1), (m, n), (1, 1)][int(rng.integers(6))]
        args.append(b.weight("f32", cshape, "small", as_input=0.2))
        if rng.random() < 0.5:
            attrs["beta"] = float(rng.choice([0.5, -1.0, 2.0, 0.0]))
    b.node("Gemm", args, exact=False, mag=a.mag * k * 2, **attrs)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def op_conv(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(1, 5), pred=lambda v: v.size <= 2000)
    x = b.to_nchw(x)
    c = x.shape[1]
    spatial = x.shape[2:]
    nd = len(spatial)
    if rng.random() < 0.25:
        g = c
    else:
        g = int(rng.choice(divisors(c)))
    mult = int(rng.integers(1, 3))
    m = g * mult if g == c else g * int(rng.integers(1, 4))
    strides = [int(rng.choice([1, 1, 2, 3])) for _ in range(nd)]
    dil = [int(rng.choice([1, 1, 1, 2])) for _ in range(nd)]
    auto_pad = str(rng.choice(["NOTSET"] * 6 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
    kern, pads_b, pads_e = [], [], []
    if auto_pad.startswith("SAME"):
        dil = [1] * nd   # onnxruntime: no dilation with SAME_*
    for i, h in enumerate(spatial):
        pb = pe = 0
        if auto_pad == "NOTSET":
            pb, pe = int(rng.integers(0, 3)), int(rng.integers(0, 3))
            if rng.random() < 0.3:
                pb = pe = 0
        room = h + pb + pe
        if auto_pad.startswith("SAME"):
            room = max(h, 1) + 4
        ks = [k for k in range(1, 6) if dil[i] * (k - 1) + 1 <= room]
        if not ks:
            dil[i] = 1
            ks = [k for k in range(1, 6) if k <= room] or [1]
        kern.append(int(rng.choice(ks)))
        pads_b.append(pb)
        pads_e.append(pe)
    attrs = dict(kernel_shape=kern, group=g)
    if rng.random() < 0.8 or any(s != 1 for s in strides):
        attrs["strides"] = strides
    if any(d != 1 for d in dil) or rng.random() < 0.2:
        attrs["dilations"] = dil
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    elif any(pads_b + pads_e) or rng.random() < 0.3:
        attrs["pads"] = pads_b + pads_e
    w = b.weight("f32", (m, c // g) + tuple(kern), "small", as_input=0.1)
    args = [x, w]
    if rng.random() < 0.6:
        args.append(b.weight("f32", (m,), "small", as_input=0.1))
    b.node("Conv", args, exact=False, mag=x.mag * (c // g) * int(np.prod(kern)), **attrs)


def op_convtranspose(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(1, 5), pred=lambda v: v.size <= 600)
    x = b.to_nchw(x)
    c = x.shape[1]
    spatial = x.shape[2:]
    nd = len(spatial)
    g = int(rng.choice(divisors(c))) if rng.random() < 0.4 else 1
    mg = int(rng.integers(1, 4))
    strides = [int(rng.choice([1, 2, 2, 3])) for _ in range(nd)]
    dil = [int(rng.choice([1, 1, 2])) for _ in range(nd)]
    kern = [int(rng.integers(1, 5)) for _ in range(nd)]
    attrs = dict(kernel_shape=kern, strides=strides)
    if g != 1:
        attrs["group"] = g
    if any(d != 1 for d in dil):
        attrs["dilations"] = dil
    mode = rng.random()
    if mode < 0.1:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER"]))
    elif mode < 0.2:
        # total padding = stride*(in-1) + dil*(k-1) + 1 - output_shape >= 0
        attrs["output_shape"] = [int(max(1, strides[i] * (spatial[i] - 1) + dil[i] * (kern[i] - 1) + 1
                                         - rng.integers(0, dil[i] * (kern[i] - 1) + 1))) for i in range(nd)]
    else:
        pads = []
        for i in range(nd):
            full = dil[i] * (kern[i] - 1)
            pads.append([int(rng.integers(0, full // 2 + 1)), int(rng.integers(0, full // 2 + 1))])
        if any(p for pp in pads for p in pp) or rng.random() < 0.3:
            attrs["pads"] = [p[0] for p in pads] + [p[1] for p in pads]
        if rng.random() < 0.3:
            attrs["output_padding"] = [int(rng.integers(0, max(strides[i], dil[i]))) for i in range(nd)]
    w = b.weight("f32", (c, mg) + tuple(kern), "small", as_input=0.1)
    args = [x, w]
    if rng.random() < 0.5:
        args.append(b.weight("f32", (mg * g,), "small", as_input=0.1))
    b.node("ConvTranspose", args, exact=False, mag=x.mag * c * int(np.prod(kern)), **attrs)


def op_pool(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(1, 5), pred=lambda v: v.size <= 3000)
    x = b.to_nchw(x)
    spatial = x.shape[2:]
    nd = len(spatial)
    auto_pad = str(rng.choice(["NOTSET"] * 7 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
    kern, strides, dil, pb, pe = [], [], [], [], []
    for h in spatial:
        d = int(rng.choice([1, 1, 1, 2])) if op == "MaxPool" else 1
        k = int(rng.integers(1, 5))
        p0 = p1 = 0
        if auto_pad == "NOTSET" and rng.random() < 0.6:
            p0, p1 = int(rng.integers(0, k)), int(rng.integers(0, k))
        while d * (k - 1) + 1 > h + p0 + p1 and (k > 1 or d > 1):
            if d > 1:
                d = 1
            else:
                k -= 1
            p0, p1 = min(p0, k - 1), min(p1, k - 1)
        kern.append(k)
        dil.append(d)
        strides.append(int(rng.choice([1, 1, 2, 3])))
        pb.append(p0)
        pe.append(p1)
    attrs = dict(kernel_shape=kern)
    if rng.random() < 0.8:
        attrs["strides"] = strides
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    elif any(pb + pe) or rng.random() < 0.2:
        attrs["pads"] = pb + pe
    if rng.random() < 0.35:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and rng.random() < 0.5:
        attrs["count_include_pad"] = 1
    if op == "MaxPool" and any(d != 1 for d in dil):
        attrs["dilations"] = dil
    b.node(op, [x], exact=op == "MaxPool" and x.exact, mag=x.mag, **attrs)


def op_global_pool(b, op):
    x = b.pick(("f32",), ranks=range(1, 5))
    x = b.to_nchw(x)
    b.node(op, [x], exact=op == "GlobalMaxPool" and x.exact, mag=x.mag)


def op_batchnorm(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(0, 5))
    x = b.to_rank(x, [2, 3, 4]) if x.rank < 2 else x
    c = x.shape[1]
    args = [x, b.weight("f32", (c,), "normal", as_input=0.1), b.weight("f32", (c,), "small", as_input=0.1),
            b.weight("f32", (c,), "small", as_input=0.1), b.weight("f32", (c,), "pos", as_input=0.1)]
    b.node("BatchNormalization", args, exact=False, mag=x.mag * 15 + 2,
           epsilon=float(rng.choice([1e-5, 1e-3, 0.1])))


def op_instancenorm(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(1, 5))
    x = b.to_nchw(x) if x.rank < 3 else x
    c = x.shape[1]
    args = [x, b.weight("f32", (c,), "normal", as_input=0.1), b.weight("f32", (c,), "small", as_input=0.1)]
    b.node("InstanceNormalization", args, exact=False, mag=10.0,
           epsilon=float(rng.choice([1e-5, 1e-3, 0.1])))


def op_layernorm(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(1, 5))
    axis = int(rng.integers(-x.rank, x.rank))
    norm_shape = x.shape[axis:]
    args = [x, b.weight("f32", norm_shape, "normal", as_input=0.1)]
    if rng.random() < 0.6:
        args.append(b.weight("f32", norm_shape, "small", as_input=0.1))
    b.node("LayerNormalization", args, exact=False, mag=10.0, axis=axis,
           epsilon=float(rng.choice([1e-5, 1e-3, 0.1])))


def op_softmax(b, op):
    rng = b.rng
    x = b.pick(FLOATS, ranks=range(1, 5))
    axis = int(rng.integers(-x.rank, x.rank))
    attrs = {} if rng.random() < 0.15 else dict(axis=axis)
    b.node(op, [x], exact=False, mag=1.0 if op == "Softmax" else x.mag * 2 + 10, **attrs)


REDUCE_DTS = {"ReduceSum": NUM, "ReduceMean": FLOATS + INTS, "ReduceMax": NUM, "ReduceMin": NUM,
              "ReduceProd": NUM, "ReduceL2": FLOATS, "ReduceL1": NUM, "ReduceSumSquare": NUM,
              "ReduceLogSumExp": FLOATS}


def op_reduce(b, op):
    rng = b.rng
    x = b.pick(REDUCE_DTS[op], ranks=range(1, 5))
    if op == "ReduceProd":
        x = b.tame(x, 1.5)
        if x.dt in INTS and x.mag > 3:
            raise Reject("int prod")
    if op == "ReduceLogSumExp":
        x = b.tame(x, 20.0)
    if x.dt in INTS and op in ("ReduceSumSquare",) and x.mag > 100:
        raise Reject("int")
    r = x.rank
    attrs = {}
    axes = None
    if rng.random() < 0.85:
        n = int(rng.integers(1, r + 1))
        axes = sorted(int(a) for a in rng.choice(r, n, replace=False))
        axes = [a - r if rng.random() < 0.3 else a for a in axes]
    keep = int(rng.integers(0, 2))
    if keep == 0 or rng.random() < 0.5:
        attrs["keepdims"] = keep
    exact = op in ("ReduceMax", "ReduceMin") and x.exact
    n_red = x.size if axes is None else int(np.prod([x.shape[a] for a in axes]))
    mag = {"ReduceSum": x.mag * n_red, "ReduceProd": x.mag ** min(n_red, 60), "ReduceL1": x.mag * n_red,
           "ReduceSumSquare": min(x.mag, 1e15) ** 2 * n_red, "ReduceL2": x.mag * math.sqrt(n_red),
           "ReduceLogSumExp": x.mag + math.log(n_red) + 1}.get(op, x.mag)
    if x.dt in INTS and mag > 1e6:
        raise Reject("int overflow")
    if op == "ReduceSum":
        args = [x]
        if axes is not None:
            args.append(b.i64(axes))
        elif rng.random() < 0.2:
            attrs["noop_with_empty_axes"] = 0
        b.node(op, args, exact=exact, mag=min(mag, 1e30), **attrs)
    else:
        if axes is not None:
            attrs["axes"] = axes
        b.node(op, [x], exact=exact, mag=min(mag, 1e30), **attrs)


def op_cast(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), discont=True)
    to = str(rng.choice([d for d in DTYPES if d != x.dt]))
    if x.dt in FLOATS and to in INTS and x.mag > 1e6:
        x = b.tame(x, 1e4)
    exact = x.exact
    b.node("Cast", [x], to=DTYPES[to][0], exact=exact, mag=x.mag)


def op_transpose(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(1, 6))
    attrs = {}
    if rng.random() < 0.85:
        attrs["perm"] = [int(p) for p in rng.permutation(x.rank)]
    b.node("Transpose", [x], exact=x.exact, mag=x.mag, pos=x.pos, **attrs)


def op_reshape(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",))
    r = int(rng.integers(0 if x.size == 1 else 1, 5))
    dims = factor(rng, x.size, r) if r else []
    spec = list(dims)
    for i, d in enumerate(dims):
        if i < x.rank and x.shape[i] == d and rng.random() < 0.3:
            spec[i] = 0
    if spec and rng.random() < 0.5:
        cand = [i for i in range(len(spec)) if spec[i] != 0]
        if cand:
            spec[int(rng.choice(cand))] = -1
    b.node("Reshape", [x, b.i64(spec)], exact=x.exact, mag=x.mag, pos=x.pos)


def op_flatten(b, op):
    x = b.pick(NUM + ("bool",), ranks=range(1, 6))
    axis = int(b.rng.integers(-x.rank, x.rank + 1))
    b.node("Flatten", [x], axis=axis, exact=x.exact, mag=x.mag, pos=x.pos)


def op_squeeze(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(1, 6), pred=lambda v: 1 in v.shape, new_p=0.02)
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    args = [x]
    if rng.random() < 0.8:
        n = int(rng.integers(1, len(ones) + 1))
        axes = sorted(int(a) for a in rng.choice(ones, n, replace=False))
        axes = [a - x.rank if rng.random() < 0.3 else a for a in axes]
        args.append(b.i64(axes))
    b.node("Squeeze", args, exact=x.exact, mag=x.mag, pos=x.pos)


def op_unsqueeze(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(0, 4))
    n = int(rng.integers(1, 3))
    out_rank = x.rank + n
    axes = sorted(int(a) for a in rng.choice(out_rank, n, replace=False))
    axes = [a - out_rank if rng.random() < 0.3 else a for a in axes]
    b.node("Unsqueeze", [x, b.i64(axes)], exact=x.exact, mag=x.mag, pos=x.pos)


def op_slice(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(1, 6))
    r = x.rank
    n = int(rng.integers(1, r + 1))
    axes = [int(a) for a in rng.choice(r, n, replace=False)]
    starts, ends, steps = [], [], []
    for a in axes:
        d = x.shape[a]
        for _ in range(30):
            step = int(rng.choice([1, 1, 1, 2, 3, -1, -1, -2]))
            s = int(rng.integers(-d - 2, d + 2))
            e = int(rng.integers(-d - 2, d + 3))
            if rng.random() < 0.15:
                e = (2 ** 63 - 1) if step > 0 else -(2 ** 63)
            if rng.random() < 0.1:
                s = 0 if step > 0 else d - 1
            if len(range(*slice(s, e, step).indices(d))) >= 1:
                break
        else:
            s, e, step = 0, d, 1
        starts.append(s)
        ends.append(e)
        steps.append(step)
    args = [x, b.i64(starts), b.i64(ends)]
    all_ones = all(s == 1 for s in steps)
    if not (all_ones and axes == list(range(r)) and rng.random() < 0.5):
        axes = [a - r if rng.random() < 0.3 else a for a in axes]
        args.append(b.i64(axes))
        if not (all_ones and rng.random() < 0.5):
            args.append(b.i64(steps))
    b.node("Slice", args, exact=x.exact, mag=x.mag, pos=x.pos)


def op_concat(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(1, 6))
    axis = int(rng.integers(0, x.rank))
    parts = [x]
    for _ in range(int(rng.integers(1, 3))):
        u = rng.random()
        if u < 0.2:
            parts.append(x)
            continue
        cands = [v for v in b.values if v.dt == x.dt and v.rank == x.rank and v is not x
                 and all(v.shape[i] == x.shape[i] for i in range(x.rank) if i != axis)]
        if u < 0.55 and cands:
            parts.append(cands[int(rng.integers(len(cands)))])
            continue
        shape = list(x.shape)
        shape[axis] = rand_dim(rng, 1, 5)
        if rng.random() < 0.3:
            parts.append(b.add_input(x.dt, tuple(shape), prefix="y"))
        else:
            parts.append(b.weight(x.dt, tuple(shape), as_input=0))
    rng.shuffle(parts)
    if rng.random() < 0.3:
        axis -= x.rank
    b.node("Concat", parts, axis=axis, exact=all(p.exact for p in parts),
           mag=max(p.mag for p in parts), pos=all(p.pos for p in parts))


def op_split(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(1, 6), pred=lambda v: max(v.shape) >= 2)
    axes = [i for i, d in enumerate(x.shape) if d >= 2]
    axis = int(rng.choice(axes))
    d = x.shape[axis]
    attrs = {}
    if axis != 0 or rng.random() < 0.5:
        attrs["axis"] = axis - x.rank if rng.random() < 0.3 else axis
    if rng.random() < 0.65:
        n = int(rng.integers(2, min(4, d) + 1))
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, d), n - 1, replace=False))
        sizes = [b_ - a_ for a_, b_ in zip([0] + cuts, cuts + [d])]
        b.node("Split", [x, b.i64(sizes)], n_out=n, exact=x.exact, mag=x.mag, pos=x.pos, **attrs)
    else:
        ns = [n for n in range(2, 5) if d % n == 0]
        if not ns:
            raise Reject("split")
        n = int(rng.choice(ns))
        b.node("Split", [x], n_out=n, exact=x.exact, mag=x.mag, pos=x.pos, **attrs)


def op_gather(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(1, 5))
    axis = int(rng.integers(-x.rank, x.rank))
    d = x.shape[axis]
    ishape = rand_shape(rng, int(rng.choice([0, 1, 1, 2])), p_one=0.2)
    ishape = tuple(min(s, 4) for s in ishape)
    idx = rng.integers(-d, d, ishape).astype(np.int64 if rng.random() < 0.85 else np.int32)
    iv = b.const(idx, "idx", as_input=0.2)
    attrs = {} if axis == 0 and rng.random() < 0.5 else dict(axis=axis)
    b.node("Gather", [x, iv], exact=x.exact, mag=x.mag, pos=x.pos, **attrs)


def op_pad(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",) if rng.random() < 0.1 else NUM, ranks=range(1, 5))
    mode = str(rng.choice(["constant", "constant", "reflect", "edge"]))
    pads_b, pads_e = [], []
    for d in x.shape:
        hi = min(3, d - 1) if mode == "reflect" else 3
        p0, p1 = (int(rng.integers(0, hi + 1)), int(rng.integers(0, hi + 1))) if rng.random() < 0.7 else (0, 0)
        if mode == "constant" and rng.random() < 0.08 and d > 1:
            p0 = -1
        pads_b.append(p0)
        pads_e.append(p1)
    args = [x, b.i64(pads_b + pads_e)]
    mag = x.mag
    if mode == "constant" and rng.random() < 0.6:
        cvalue = rng.integers(-3, 4) if x.dt in INTS else rng.uniform(-2, 2)
        if x.dt == "bool":
            cvalue = True
        args.append(b.const(np.array(cvalue, dtype=DTYPES[x.dt][1])))
        mag = max(mag, 2.0)
    attrs = {} if mode == "constant" and rng.random() < 0.5 else dict(mode=mode)
    b.node("Pad", args, exact=x.exact, mag=mag, **attrs)


def op_tile(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(1, 5), pred=lambda v: v.size <= 500)
    reps = [int(rng.choice([1, 1, 2, 3])) for _ in range(x.rank)]
    b.node("Tile", [x, b.i64(reps)], exact=x.exact, mag=x.mag, pos=x.pos)


def op_expand(b, op):
    rng = b.rng
    x = b.pick(NUM + ("bool",), ranks=range(0, 4), pred=lambda v: v.size <= 300)
    shape = []
    for d in x.shape:
        if d == 1:
            shape.append(rand_dim(rng, 1, 5, 0.2))
        else:
            shape.append(d if rng.random() < 0.8 else 1)
    if rng.random() < 0.4:
        shape = [rand_dim(rng, 1, 4)] + shape
    if rng.random() < 0.2 and len(shape) > 1:
        shape = shape[1:]   # a shorter shape: x's own dims broadcast it
    b.node("Expand", [x, b.i64(shape)], exact=x.exact, mag=x.mag, pos=x.pos)


def op_resize(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(1, 5), pred=lambda v: v.size <= 800)
    x = b.to_nchw(x)
    mode = str(rng.choice(["nearest", "linear"]))
    ctms = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
    attrs = dict(mode=mode)
    ctm = str(rng.choice(ctms))
    if ctm != "half_pixel" or rng.random() < 0.5:
        attrs["coordinate_transformation_mode"] = ctm
    if mode == "nearest" and rng.random() < 0.8:
        attrs["nearest_mode"] = str(rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
    spatial = x.shape[2:]
    if rng.random() < 0.6:
        sc = [1.0, 1.0] + [float(rng.choice([0.5, 0.75, 1.0, 1.5, 2.0, 3.0])) for _ in spatial]
        if any(int(math.floor(d * s)) < 1 for d, s in zip(x.shape, sc)):
            raise Reject("resize empty")
        args = [x, "", b.const(np.array(sc, dtype=np.float32))]
    else:
        sizes = list(x.shape[:2]) + [int(rng.integers(1, 2 * d + 3)) for d in spatial]
        args = [x, "", "", b.i64(sizes)]
    b.node("Resize", args, exact=mode == "nearest" and x.exact, mag=x.mag * 1.5, **attrs)


def op_einsum(b, op):
    rng = b.rng
    x = b.pick(("f32",), ranks=range(1, 4), pred=lambda v: v.size <= 500)
    letters = list("abcdefgh")
    rng.shuffle(letters)
    roles = []
    for _ in range(x.rank):
        roles.append(str(rng.choice(["batch", "m", "k", "k"])))
    if "k" not in roles:
        roles[int(rng.integers(x.rank))] = "k"
    a_letters = letters[:x.rank]
    sizes = dict(zip(a_letters, x.shape))
    n_new = int(rng.integers(0, 3))
    n_letters = letters[x.rank:x.rank + n_new]
    for l in n_letters:
        sizes[l] = rand_dim(rng, 1, 5)
    b_letters = [l for l, r in zip(a_letters, roles) if r in ("batch", "k")] + n_letters
    rng.shuffle(b_letters)
    if len(b_letters) > 4:
        raise Reject("rank")
    out = [l for l, r in zip(a_letters, roles) if r in ("batch", "m")] + n_letters
    if rng.random() < 0.6:
        # batch first, then m, then n: the classic order
        out = ([l for l, r in zip(a_letters, roles) if r == "batch"]
               + [l for l, r in zip(a_letters, roles) if r == "m"] + n_letters)
    else:
        rng.shuffle(out)
    w = matmul_operand(b, x.shape, "f32", [sizes[l] for l in b_letters], p_pool=0.2)
    eq = "".join(a_letters) + "," + "".join(b_letters) + "->" + "".join(out)
    args = [x, w]
    if rng.random() < 0.3:
        eq = "".join(b_letters) + "," + "".join(a_letters) + "->" + "".join(out)
        args = [w, x]
    k = int(np.prod([sizes[l] for l, r in zip(a_letters, roles) if r == "k"]))
    b.node("Einsum", args, equation=eq, exact=False, mag=x.mag * k)


def op_cumsum(b, op):
    rng = b.rng
    x = b.pick(("f32", "f32", "f64", "i64", "i32"), ranks=range(1, 5))
    axis = int(rng.integers(-x.rank, x.rank))
    av = b.const(np.array(axis, dtype=np.int64 if rng.random() < 0.8 else np.int32))
    attrs = {}
    if rng.random() < 0.4:
        attrs["exclusive"] = 1
    if rng.random() < 0.4:
        attrs["reverse"] = 1
    b.node("CumSum", [x, av], exact=x.exact and x.dt in INTS, mag=x.mag * x.shape[axis], **attrs)


def op_argmax(b, op):
    rng = b.rng
    x = b.pick(("f32", "f32", "i64", "i32", "f64"), ranks=range(1, 5), discont=True)
    attrs = {}
    if rng.random() < 0.8:
        attrs["axis"] = int(rng.integers(-x.rank, x.rank))
    if rng.random() < 0.5:
        attrs["keepdims"] = int(rng.integers(0, 2))
    if rng.random() < 0.4:
        attrs["select_last_index"] = 1
    b.node(op, [x], mag=7, **attrs)


def op_topk(b, op):
    rng = b.rng
    x = b.pick(("f32", "f32", "i64", "f64"), ranks=range(1, 5), discont=True)
    axis = int(rng.integers(-x.rank, x.rank))
    k = int(rng.integers(1, x.shape[axis] + 1))
    attrs = {}
    if axis != -1 or rng.random() < 0.5:
        attrs["axis"] = axis
    if rng.random() < 0.4:
        attrs["largest"] = 0
    b.node("TopK", [x, b.i64([k])], n_out=2, exact=x.exact, mag=x.mag, **attrs)


OPS = {}
for _op in UNARY:
    OPS[_op] = (op_unary, 1.0)
for _op in ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"):
    OPS[_op] = (op_binary, 1.5)
for _op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
    OPS[_op] = (op_compare, 0.8)
OPS["Where"] = (op_where, 0.5)
OPS["Mod"] = (op_mod, 0.6)
for _op in ("And", "Or", "Xor", "Not"):
    OPS[_op] = (op_logic, 0.4)
OPS.update({
    "MatMul": (op_matmul, 3.0), "Gemm": (op_gemm, 2.0), "Einsum": (op_einsum, 1.5),
    "Conv": (op_conv, 4.0), "ConvTranspose": (op_convtranspose, 2.0),
    "MaxPool": (op_pool, 2.0), "AveragePool": (op_pool, 2.0),
    "GlobalAveragePool": (op_global_pool, 1.0), "GlobalMaxPool": (op_global_pool, 0.5),
    "BatchNormalization": (op_batchnorm, 1.0), "InstanceNormalization": (op_instancenorm, 1.0),
    "LayerNormalization": (op_layernorm, 1.0),
    "Softmax": (op_softmax, 1.2), "LogSoftmax": (op_softmax, 1.0),
    "Cast": (op_cast, 1.5), "Transpose": (op_transpose, 2.5), "Reshape": (op_reshape, 2.5),
    "Flatten": (op_flatten, 1.0), "Squeeze": (op_squeeze, 1.0), "Unsqueeze": (op_unsqueeze, 1.0),
    "Slice": (op_slice, 2.5), "Concat": (op_concat, 2.5), "Split": (op_split, 1.5),
    "Gather": (op_gather, 1.5), "Pad": (op_pad, 1.5), "Tile": (op_tile, 1.0),
    "Expand": (op_expand, 1.0), "Resize": (op_resize, 1.5),
    "CumSum": (op_cumsum, 1.0), "ArgMax": (op_argmax, 0.6), "ArgMin": (op_argmax, 0.4),
    "TopK": (op_topk, 0.6),
})
for _op in REDUCE_DTS:
    OPS[_op] = (op_reduce, 0.6 if _op in ("ReduceL1", "ReduceSumSquare", "ReduceLogSumExp") else 1.0)


def generate(rng, ops, max_nodes):
    """(model, feeds, stats) for one random graph."""
    b = Builder(rng, max_nodes)
    n_inputs = int(rng.choice([1, 1, 2, 2, 3]))
    for _ in range(n_inputs):
        dt = b.pick_dt(("f32", "f32", "f32", "f64", "i64", "i32", "bool"))
        if dt == "f32" and rng.random() < 0.5:
            r = 4
        else:
            r = int(rng.choice([0, 1, 2, 2, 3, 3, 4, 4])) if dt == "f32" else int(rng.integers(1, 4))
        b.add_input(dt, rand_shape(rng, r))
    target = int(rng.integers(1, max_nodes + 1))
    names = list(ops)
    weights = np.array([OPS[o][1] for o in names])
    weights = weights / weights.sum()
    rejects = collections.Counter()
    tries = 0
    while b.main_ops < target and tries < target * 8:
        tries += 1
        op = names[int(rng.choice(len(names), p=weights))]
        cp = b.checkpoint()
        try:
            OPS[op][0](b, op)
            b.main_ops += 1
        except Reject as e:
            rejects[f"{op}: {str(e)[:80]}"] += 1
            b.rollback(cp)
    # Graph inputs nothing reads: dropped, but for a few (valid ONNX too).
    read = {x for n in b.nodes for x in n.input}
    for vi in list(b.inputs):
        if vi.name not in read and rng.random() < 0.97:
            b.inputs.remove(vi)
            del b.feeds[vi.name]
            b.values[:] = [v for v in b.values if v.name != vi.name]
    node_values = [v for v in b.values if v.kind == "node"]
    if not node_values:
        return None, None, rejects
    leaves = [v for v in node_values if v.uses == 0]
    outs = list(leaves)
    if len(outs) > 1 and rng.random() < 0.02:
        outs.pop(int(rng.integers(len(outs))))   # dead code (valid ONNX too)
    extra = [v for v in node_values if v not in outs]
    while extra and len(outs) < 5 and rng.random() < 0.25:
        outs.append(extra.pop(int(rng.integers(len(extra)))))
    if rng.random() < 0.02 and b.inputs:
        first = b.inputs[0].name   # a graph input that is also an output
        outs.append(next(v for v in b.values if v.name == first))
    if not b.inputs:
        return None, None, rejects
    if not outs:
        outs = [node_values[-1]]
    outputs = [helper.make_tensor_value_info(v.name, DTYPES[v.dt][0], list(v.shape)) for v in outs]
    graph = helper.make_graph(b.nodes, "fuzz", b.inputs, outputs, initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="stowage-fuzz")
    model.ir_version = IR_VERSION
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model, b.feeds, rejects


# ---------------------------------------------------------------- running --

def ort_run(model, feeds, outputs=None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = outputs or [o.name for o in model.graph.output]
    inames = {i.name for i in sess.get_inputs()}
    return sess.run(names, {k: v for k, v in feeds.items() if k in inames})


def run_cmd(cmd):
    # The binary may be missing for a moment while it is rebuilt: wait.
    for _ in range(120):
        if os.path.exists(cmd[0]):
            break
        time.sleep(5)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                           env=dict(os.environ, RUST_BACKTRACE="0"))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {TIMEOUT} s"
    except FileNotFoundError:
        time.sleep(10)
        return run_cmd(cmd)


NO_KERNEL = re.compile(r"operator\(s\) cannot run")
UNSUPPORTED_OP = re.compile(r"^\s*step \d+ `.*` \((.*?)\): (.*)$", re.M)


def normalise(msg):
    msg = re.sub(r"`[^`]*`", "`_`", msg)
    msg = re.sub(r"/\S+", "PATH", msg)
    msg = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", msg)
    msg = re.sub(r"\[[N, ]*\]", "[shape]", msg)
    msg = re.sub(r"#N", "#N", msg)
    return msg[:160]


def error_text(stderr):
    text = stderr.strip()
    m = re.search(r"panicked at ([^\n]*)\n([^\n]*)", text)
    if m:
        return f"panic at {m.group(1)} {m.group(2)}"[:300]
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    if not lines:
        return ""
    head = re.sub(r"^error: (compiling|loading|opening|running) \S+: ", "", lines[0])
    head = re.sub(r"^error: ", "", head)
    causes = []
    if "Caused by:" in lines:
        for l in lines[lines.index("Caused by:") + 1:]:
            if l.startswith("Stack backtrace") or l.startswith("note:"):
                break
            causes.append(re.sub(r"^\d+: ", "", l))
    return ": ".join([head] + causes)[:300]


# `--capacity-fraction`: judge bundles compiled under that fraction of
# their bound (stages in bands of rows), and how many were.
CAPACITY_FRACTION = None
PATCHED = [0]


def is_crash(code, stderr):
    return code is None or code < 0 or code == 101 or "panicked at" in stderr


def stow_pipeline(stow, model, feeds, work, tag="g"):
    """Compile and run `model` with Stowage. Returns a dict: status ok /
    refused / crash / silent; reason; outputs [(name, array)]."""
    os.makedirs(work, exist_ok=True)
    mpath = os.path.join(work, f"{tag}.onnx")
    onnx.save(model, mpath)
    npz = os.path.join(work, f"{tag}.npz")
    inames = [i.name for i in model.graph.input]
    np.savez(npz, **{k: feeds[k] for k in inames})
    bundle = os.path.join(work, f"{tag}.stow")
    code, out, err = run_cmd([stow, "compile", mpath, "-o", bundle])
    if code != 0:
        return stage_failure("compile", code, err)
    if CAPACITY_FRACTION is not None:
        # Compile again under a fraction of the bound: where a stage can
        # run in bands of rows, that bundle is the one judged.
        bound = re.search(r"lower bound +([0-9,]+) B", out)
        capacity = int(int(bound.group(1).replace(",", "")) * CAPACITY_FRACTION) if bound else 0
        patched = os.path.join(work, f"{tag}.patched.stow")
        code, out2, err = run_cmd([stow, "compile", mpath, "-o", patched, "--capacity", str(capacity)])
        if code == 0 and "patched stage" in out2:
            bundle = patched
            PATCHED[0] += 1
        elif is_crash(code, err):
            return stage_failure("compile", code, err)
    odir = os.path.join(work, f"{tag}.out")
    shutil.rmtree(odir, ignore_errors=True)
    code, out, err = run_cmd([stow, "run", bundle, "--inputs", npz, "--out", odir])
    if code != 0:
        return stage_failure("run", code, err)
    files = sorted((f for f in os.listdir(odir) if re.fullmatch(r"output_\d+\.pb", f)),
                   key=lambda f: int(re.findall(r"\d+", f)[0])) if os.path.isdir(odir) else []
    outputs = []
    for f in files:
        p = onnx.TensorProto()
        with open(os.path.join(odir, f), "rb") as fh:
            p.ParseFromString(fh.read())
        outputs.append((p.name, numpy_helper.to_array(p)))
    return dict(status="ok", outputs=outputs, bundle=bundle, model_path=mpath, npz=npz)


def stage_failure(stage, code, err):
    if is_crash(code, err):
        return dict(status="crash", reason=f"{stage}: " + (error_text(err) or f"exit {code}"), stderr=err)
    msg = error_text(err)
    if not msg:
        return dict(status="silent", reason=f"{stage}: exit {code} with no message", stderr=err)
    if stage == "run" and NO_KERNEL.search(err):
        found = UNSUPPORTED_OP.findall(err)
        ops = sorted({f"{op}: {normalise(why)}" for op, why in found})
        return dict(status="refused", reason="no kernel: " + "; ".join(ops)[:200], no_kernel=ops, stderr=err)
    return dict(status="refused", reason=f"{stage}: {normalise(msg)}", stderr=err)


def compare(ours, want):
    """(ok, error measure, note)."""
    if ours.dtype != want.dtype:
        return False, None, f"dtype {ours.dtype} but ort {want.dtype}"
    if ours.shape != want.shape:
        return False, None, f"shape {list(ours.shape)} but ort {list(want.shape)}"
    if want.size == 0:
        return True, 0.0, ""
    if want.dtype.kind == "f":
        a, b = ours.astype(np.float64), want.astype(np.float64)
        na, nb = np.isnan(a), np.isnan(b)
        if (na != nb).any():
            return False, float("inf"), f"NaN at {int((na != nb).sum())} position(s) where the other has none"
        inf_b = np.isinf(b)
        if (a[inf_b] != b[inf_b]).any():
            return False, float("inf"), "an infinity differs"
        fin = np.isfinite(b)
        if (~np.isfinite(a[fin])).any():
            return False, float("inf"), "non-finite value where ort's is finite"
        if not fin.any():
            return True, 0.0, ""
        diff = float(np.abs(a[fin] - b[fin]).max())
        scale = float(np.abs(b[fin]).max())
        # Outputs wholly below the smallest normal number (denormals, where
        # flushing to zero is a legitimate choice) are compared absolutely.
        tiny = float(np.finfo(want.dtype).tiny)
        err = diff / scale if scale > tiny else diff
        return err <= TOLERANCE, err, f"error {err:.3g} (max abs diff {diff:.3g}, max |ort| {scale:.3g})"
    same = ours == want
    if same.all():
        return True, 0.0, ""
    n = int((~same).sum())
    return False, float(n), f"{n} of {want.size} elements differ"


def compare_all(names, ref, ours):
    """Problems (list of strings) between ort's outputs and Stowage's."""
    probs = []
    if len(ours) != len(ref):
        probs.append(f"{len(ours)} outputs, the graph has {len(ref)}")
    for i, (name, want) in enumerate(zip(names, ref)):
        if i >= len(ours):
            break
        oname, arr = ours[i]
        if oname != name:
            probs.append(f"output {i} named {oname!r}, the graph's is {name!r}")
        ok, err, note = compare(arr, np.asarray(want))
        if not ok:
            probs.append(f"output {i} `{name}`: {note}")
    return probs


# -------------------------------------------------------------- diagnosis --

def with_all_outputs(model):
    """The model with every node output (and its original outputs first)
    as graph outputs."""
    m = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    vi = {v.name: v for v in list(m.graph.value_info) + list(m.graph.output)}
    outs = [o.name for o in m.graph.output]
    for n in m.graph.node:
        for o in n.output:
            if o and o not in outs and o in vi:
                outs.append(o)
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    del m2.graph.output[:]
    m2.graph.output.extend([vi[o] for o in outs])
    return m2, outs


def single_node_model(model, node, values):
    """`node` alone; its computed inputs become graph inputs fed `values`."""
    inits = {i.name: i for i in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input}
    consts = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    nodes, ginputs, ginits, feeds = [], [], [], {}
    for x in node.input:
        if not x or x in feeds or any(i.name == x for i in ginits):
            continue
        if x in inits:
            ginits.append(inits[x])
        elif x in consts:
            nodes.append(consts[x])
        else:
            arr = np.asarray(values[x])
            ginputs.append(helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(arr.dtype),
                                                         list(arr.shape)))
            feeds[x] = arr
    nodes.append(node)
    m = helper.make_model(helper.make_graph(nodes, "fuzz_node", ginputs, [], initializer=ginits),
                          opset_imports=[helper.make_opsetid("", OPSET)], producer_name="stowage-fuzz")
    m.ir_version = IR_VERSION
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    vi = {v.name: v for v in m.graph.value_info}
    m.graph.output.extend([vi[o] for o in node.output if o])
    del m.graph.value_info[:]
    onnx.checker.check_model(m, full_check=True)
    return m, feeds


def reference_run(model, feeds):
    try:
        from onnx.reference import ReferenceEvaluator
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:120]}"


def describe_node(node, values):
    attrs = []
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        if isinstance(v, TensorProto):
            v = numpy_helper.to_array(v).tolist()
        attrs.append(f"{a.name}={v}")
    ins = []
    for x in node.input:
        if not x:
            ins.append("-")
        elif x in values:
            arr = np.asarray(values[x])
            ins.append(f"{arr.dtype}{list(arr.shape)}")
        else:
            ins.append(x)
    return f"{node.op_type}({', '.join(ins)}{'; ' if attrs else ''}{', '.join(attrs)})"


class Judge:
    """Runs the pipeline on a model and tells whether it is WRONG."""

    def __init__(self, stow, work):
        self.stow, self.work = stow, work
        self.n = 0

    def check(self, model, feeds):
        """('match'|'refused'|'wrong'|'ort', detail, ref, stow_result)."""
        self.n += 1
        try:
            ref = ort_run(model, feeds)
        except Exception as e:
            return "ort", str(e)[:200], None, None
        res = stow_pipeline(self.stow, model, feeds, self.work, f"c{self.n}")
        if res["status"] in ("crash", "silent"):
            return "wrong", res["reason"], ref, res
        if res["status"] == "refused":
            return "refused", res["reason"], ref, res
        probs = compare_all([o.name for o in model.graph.output], ref, res["outputs"])
        return ("wrong" if probs else "match"), "; ".join(probs), ref, res


def topo_values(model):
    return [o for n in model.graph.node for o in n.output if o]


def dynamic_values(model):
    """Names of the node outputs that depend on a graph input (the rest fold
    to constants at compile time)."""
    dyn = {i.name for i in model.graph.input}
    for n in model.graph.node:
        if any(x in dyn for x in n.input if x):
            dyn.update(o for o in n.output if o)
    return dyn


def single_check(judge, model, node, values, notes):
    """Run `node` alone on ort's values: (status, detail, single, feeds, ref,
    Stowage's result)."""
    try:
        single, sfeeds = single_node_model(model, node, values)
    except Exception as e:
        notes.append(f"single-node model of {node.name} failed: {e}")
        return None, "", None, None, None, None
    st, det, sref, sres = judge.check(single, sfeeds)
    return st, det, single, sfeeds, sref, sres


def reference_note(single, sfeeds, sref, sres):
    """(note, Stowage agrees with onnx.reference while ort does not)."""
    refv = reference_run(single, sfeeds)
    if isinstance(refv, str):
        return f"onnx.reference: {refv}", False
    names = [o.name for o in single.graph.output]
    refv = [np.asarray(r).astype(np.asarray(s).dtype) for r, s in zip(refv, sref)]
    vs_ort = compare_all(names, sref, list(zip(names, refv)))
    note = "onnx.reference agrees with ort" if not vs_ort else \
        f"onnx.reference differs from ort ({'; '.join(vs_ort)[:160]})"
    stow_ok = False
    if sres is not None and sres.get("outputs"):
        vs_stow = compare_all(names, refv, sres["outputs"])
        stow_ok = not vs_stow
        note += "; Stowage " + ("agrees with onnx.reference" if stow_ok else
                                f"differs from onnx.reference too ({'; '.join(vs_stow)[:160]})")
    return note, stow_ok and bool(vs_ort)


def explicit_same_pads(single, sfeeds):
    """The single-node `single` (a pool or convolution with auto_pad
    SAME_*) with the pads the operator's text gives SAME written out
    (output ceil(L/s), extra padding at the end for SAME_UPPER, at the
    start for SAME_LOWER), or None. onnxruntime runs explicit pads
    without the SAME_* special cases it gets wrong."""
    node = single.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if node.op_type not in ("MaxPool", "AveragePool", "LpPool", "Conv") or \
            not auto_pad.startswith("SAME"):
        return None
    x = np.asarray(sfeeds.get(node.input[0]))
    if x.ndim < 3 or "kernel_shape" not in attrs:
        return None
    spatial = x.shape[2:]
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * len(spatial))
    dilations = attrs.get("dilations", [1] * len(spatial))
    before, after = [], []
    for length, k, st, d in zip(spatial, kernel, strides, dilations):
        out = -(-length // st)
        total = max((out - 1) * st + (k - 1) * d + 1 - length, 0)
        small, large = total // 2, total - total // 2
        before.append(large if auto_pad == "SAME_LOWER" else small)
        after.append(small if auto_pad == "SAME_LOWER" else large)
    explicit = onnx.ModelProto()
    explicit.CopyFrom(single)
    n = explicit.graph.node[0]
    keep = [a for a in n.attribute if a.name not in ("auto_pad", "pads", "ceil_mode")]
    del n.attribute[:]
    n.attribute.extend(keep)
    n.attribute.append(helper.make_attribute("pads", before + after))
    return explicit


def diagnose(judge, model, feeds, first):
    """Find the first diverging node; return (klass, signature, note lines,
    reduced (model, feeds) or None)."""
    notes = []
    status, detail, ref, res = first
    if detail and all(" named " in p or re.match(r"\d+ outputs, the graph has", p)
                      for p in detail.split("; ")):
        red = reduce_by_prefix(judge, model, feeds, lambda st, det: st == "wrong")
        return "wrong", "output names", ["only the output names (or count) differ"], red
    if res is not None and res["status"] in ("crash", "silent"):
        red = reduce_by_prefix(judge, model, feeds,
                               lambda st, det: st == "wrong" and det.startswith(("compile:", "run:")))
        sig = f"crash {normalise(res['reason'])[:80]}"
        return "wrong", sig, [f"crash: {res['reason']}"], red
    try:
        full, names = with_all_outputs(model)
        ort_vals = dict(zip(names, ort_run(full, feeds)))
    except Exception as e:
        return "wrong", "diagnosis failed", [f"intermediate ort run failed: {e}"], None
    values = dict(feeds)
    values.update({i.name: numpy_helper.to_array(i) for i in model.graph.initializer})
    values.update(ort_vals)
    # Stowage with every input-dependent intermediate as an output.
    dyn = dynamic_values(model)
    keep = [o.name for o in model.graph.output] + [n for n in names[len(model.graph.output):] if n in dyn]
    full2 = onnx.ModelProto()
    full2.CopyFrom(full)
    vi = {o.name: o for o in full.graph.output}
    del full2.graph.output[:]
    full2.graph.output.extend([vi[n] for n in keep])
    sres = stow_pipeline(judge.stow, full2, feeds, judge.work, "all")
    div_node, stow_vals = None, {}
    nodes = [n for n in model.graph.node if n.op_type != "Constant"]
    if sres["status"] == "ok" and len(sres["outputs"]) == len(keep):
        stow_vals = {n: a for n, (_, a) in zip(keep, sres["outputs"])}
        for node in nodes:
            bad = [o for o in node.output if o in stow_vals
                   and not compare(stow_vals[o], np.asarray(ort_vals[o]))[0]]
            if bad:
                div_node = node
                break
        if div_node is None:
            notes.append("with every intermediate as an output the graph matches: the divergence "
                         "depends on the plan (buffer sharing, in-place, views)")
    else:
        notes.append(f"the all-outputs model did not run ({sres.get('reason')}): "
                     "each node is tried alone instead")
    if div_node is not None:
        notes.append(f"first diverging node: {div_node.name}: {describe_node(div_node, values)}")
        for o in div_node.output:
            if o in stow_vals:
                notes.append(f"  {o}: {compare(stow_vals[o], np.asarray(ort_vals[o]))[2]}")
        ins = [x for x in div_node.input if x and x in stow_vals]
        bitexact = all(np.array_equal(stow_vals[x], np.asarray(ort_vals[x]),
                                      equal_nan=stow_vals[x].dtype.kind == "f") for x in ins)
        notes.append(f"  its computed inputs are "
                     f"{'bit-identical to' if bitexact else 'within tolerance of (not bit-identical to)'} ort's")
        candidates = [div_node]
    else:
        bitexact = True
        candidates = nodes if sres["status"] != "ok" else []
    for node in candidates:
        st, det, single, sfeeds, sref, sres1 = single_check(judge, model, node, values, notes)
        if st == "wrong":
            if node is not div_node:
                notes.append(f"first node wrong alone: {node.name}: {describe_node(node, values)}")
            notes.append(f"alone on ort's inputs it is still wrong: {det}")
            note, ref_sides_with_stow = reference_note(single, sfeeds, sref, sres1)
            notes.append(note)
            sig = f"{node.op_type} alone: {mismatch_kind(det)}"
            if ref_sides_with_stow:
                sig += " (Stowage = onnx.reference)"
            declared = [tuple(d.dim_value for d in o.type.tensor_type.shape.dim)
                        for o in single.graph.output]
            for o, r, want in zip(single.graph.output, sref, declared):
                if np.asarray(r).shape != want:
                    notes.append(f"ort's output shape {list(np.asarray(r).shape)} contradicts the "
                                 f"model's (ONNX shape inference) {list(want)}")
                    sig += " (ort shape != ONNX inference)"
                    break
            stow_shapes = [np.asarray(a).shape for _, a in (sres1 or {}).get("outputs") or []]
            ort_shape_wrong = "(ort shape != ONNX inference)" in sig and stow_shapes == declared
            explicit = explicit_same_pads(single, sfeeds)
            if explicit is not None and not ref_sides_with_stow and sres1 and sres1.get("outputs"):
                try:
                    r = ort_run(explicit, sfeeds)
                    if not compare_all([o.name for o in single.graph.output], r, sres1["outputs"]):
                        notes.append("onnxruntime on the same node with the SAME_* pads written "
                                     "out computes Stowage's values")
                        sig += " (Stowage = ort with explicit SAME pads)"
                        ref_sides_with_stow = True
                except Exception as e:
                    notes.append(f"ort with explicit SAME pads failed: {e}")
            # The spec sides with Stowage: ONNX's own reference computes
            # Stowage's values, or ONNX's own shape inference gives the
            # shapes Stowage gives and ort does not.
            klass = "disputed" if ref_sides_with_stow or ort_shape_wrong else "wrong"
            return klass, sig, notes, (single, sfeeds)
        if node is div_node:
            notes.append(f"alone it is refused: {det}" if st == "refused" else
                         "alone on ort's inputs it matches")
            if not bitexact and st == "match":
                # ort fed Stowage's own inputs: does it give Stowage's answer?
                sfeeds2 = {k: stow_vals.get(k, v) for k, v in sfeeds.items()}
                try:
                    r2 = ort_run(single, sfeeds2)
                    probs = compare_all([o.name for o in single.graph.output], r2,
                                        [(o, stow_vals[o]) for o in div_node.output if o])
                    if not probs:
                        notes.append("ort fed Stowage's inputs gives Stowage's output: rounding "
                                     "upstream, amplified by this node")
                        return "unstable", f"{div_node.op_type} amplifies rounding", notes, (single, sfeeds2)
                    notes.append(f"ort fed Stowage's inputs still differs: {'; '.join(probs)[:200]}")
                except Exception as e:
                    notes.append(f"ort on Stowage's inputs failed: {e}")
    # In-context failure: cut the graph down to the diverging value.
    red = None
    if div_node is not None:
        try:
            sub = extract(model, [i.name for i in model.graph.input if i.name in feeds],
                          [o for o in div_node.output if o])
            if judge.check(sub, feeds)[0] == "wrong":
                red = (sub, feeds)
        except Exception as e:
            notes.append(f"extract failed: {e}")
    if red is None:
        red = reduce_by_prefix(judge, model, feeds, lambda st, det: st == "wrong")
    red = reduce_by_cut(judge, red, values)
    what = div_node.op_type if div_node is not None else "plan"
    return "wrong", f"{what} in context: {mismatch_kind(detail)}", notes, red


def mismatch_kind(detail):
    if "shape [" in detail:
        return "shape"
    if "dtype " in detail:
        return "dtype"
    if "NaN" in detail or "non-finite" in detail or "infinity" in detail:
        return "non-finite"
    if "elements differ" in detail:
        return "int/bool values"
    return "values"


def extract(model, inputs, outputs):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "m.onnx"), os.path.join(d, "e.onnx")
        onnx.save(model, src)
        onnx.utils.extract_model(src, dst, inputs, outputs)
        m = onnx.load(dst)
    # Graph inputs the cut graph no longer reads are dropped (Stowage refuses
    # unused inputs, which would hide the failure being reduced).
    used = {x for n in m.graph.node for x in n.input} | {o.name for o in m.graph.output}
    keep = [i for i in m.graph.input if i.name in used]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


def reduce_by_prefix(judge, model, feeds, still):
    """The shortest prefix (graph cut after node i, its outputs the graph
    outputs) that still fails."""
    inputs = [i.name for i in model.graph.input]
    graph_outs = {o.name for o in model.graph.output}
    seen = []
    for node in model.graph.node:
        seen += [o for o in node.output if o]
        if node.op_type == "Constant":
            continue
        outs = [o for o in seen if o in graph_outs]
        outs += [o for o in node.output if o and o not in outs]
        try:
            sub = extract(model, inputs, outs)
        except Exception:
            continue
        st, det, _, _ = judge.check(sub, feeds)
        if still(st, det):
            return (sub, feeds)
    return (model, feeds)


def reduce_by_cut(judge, red, values):
    """Move graph inputs down: replace the graph's inputs by intermediate
    values (fed ort's values) while it still fails."""
    model, feeds = red
    changed = True
    while changed:
        changed = False
        produced = [o for n in model.graph.node if n.op_type != "Constant" for o in n.output if o]
        outs = [o.name for o in model.graph.output]
        for v in produced:
            if v in outs or v not in values:
                continue
            cur_inputs = [i.name for i in model.graph.input]
            try:
                sub = extract(model, cur_inputs + [v], outs)
            except Exception:
                continue
            if len(sub.graph.node) >= len(model.graph.node):
                continue
            f2 = {i.name: np.asarray(values[i.name]) for i in sub.graph.input if i.name in values}
            if len(f2) != len(sub.graph.input):
                continue
            if judge.check(sub, f2)[0] == "wrong":
                model, feeds, changed = sub, f2, True
                break
    return (model, feeds)


def save_case(root, case_id, sig, model, feeds, ref, res, notes, reduced, judge):
    slug = re.sub(r"[^A-Za-z0-9]+", "-", sig).strip("-")[:60] or "wrong"
    d = os.path.join(root, slug, case_id)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    onnx.save(model, os.path.join(d, "model.onnx"))
    np.savez(os.path.join(d, "inputs.npz"), **feeds)
    if ref is not None:
        np.savez(os.path.join(d, "ort_outputs.npz"),
                 **{o.name: np.asarray(r) for o, r in zip(model.graph.output, ref)})
    if res is not None and res.get("outputs"):
        np.savez(os.path.join(d, "stow_outputs.npz"), **{f"output_{i}": a for i, (_, a) in enumerate(res["outputs"])})
    lines = [f"case {case_id}", f"cause: {sig}"] + notes
    if reduced is not None:
        rm, rf = reduced
        rd = os.path.join(d, "reduced")
        os.makedirs(rd)
        onnx.save(rm, os.path.join(rd, "model.onnx"))
        np.savez(os.path.join(rd, "inputs.npz"), **rf)
        st, det, rref, rres = judge.check(rm, rf)
        if rref is not None:
            np.savez(os.path.join(rd, "ort_outputs.npz"),
                     **{o.name: np.asarray(r) for o, r in zip(rm.graph.output, rref)})
        if rres is not None and rres.get("outputs"):
            np.savez(os.path.join(rd, "stow_outputs.npz"),
                     **{f"output_{i}": a for i, (_, a) in enumerate(rres["outputs"])})
        lines.append(f"reduced: {len([n for n in rm.graph.node if n.op_type != 'Constant'])} node(s): "
                     + ", ".join(n.op_type for n in rm.graph.node) + f" -> {st}: {det}")
        if rres is not None and rres.get("bundle"):
            code, out, err = run_cmd([judge.stow, "run", rres["bundle"], "--inputs", rres["npz"],
                                      "--check", rres["model_path"], "--tolerance", str(TOLERANCE)])
            lines.append("stow run --check (tract): " + ("matches tract: tract reads the ONNX op the same way"
                                                         if code == 0 else "differs from tract: "
                                                         + (error_text(err) or out.strip().splitlines()[-1:] and out.strip().splitlines()[-1])[:200]))
        lines.append(f"replay: stow compile {rd}/model.onnx -o /tmp/r.stow && stow run /tmp/r.stow "
                     f"--inputs {rd}/inputs.npz --out /tmp/r.out")
    with open(os.path.join(d, "note.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return d


# ------------------------------------------------------------------- main --

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int)
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--start", type=int, default=0, help="index of the first graph (replay)")
    ap.add_argument("--stow", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "target", "release", "stow"))
    ap.add_argument("--save", default=os.path.expanduser("~/.cache/stowage/fuzz-failures"))
    ap.add_argument("--ops", help="comma-separated operator list to draw from")
    ap.add_argument("--max-nodes", type=int, default=10)
    ap.add_argument("--keep", type=int, default=3, help="saved WRONG cases per cause")
    ap.add_argument("--json", help="write the counts and cases to this file")
    ap.add_argument("--list-ops", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--capacity-fraction", type=float, metavar="F",
                    help="judge each graph's bundle compiled with --capacity F x its bound where a stage "
                         "then runs in bands of rows (docs/PATCHES.md)")
    args = ap.parse_args()
    if args.list_ops:
        print(" ".join(sorted(OPS)))
        return 0
    ops = list(OPS)
    if args.ops:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = [o for o in ops if o not in OPS]
        if unknown:
            sys.exit(f"unknown ops: {', '.join(unknown)} (see --list-ops)")
    if args.count is None and args.minutes is None:
        args.count = 100
    stow = os.path.abspath(args.stow)
    global CAPACITY_FRACTION
    CAPACITY_FRACTION = args.capacity_fraction
    os.makedirs(args.save, exist_ok=True)
    work = tempfile.mkdtemp(prefix="stow-fuzz-")
    judge = Judge(stow, work)
    counts = collections.Counter()
    refusals = collections.Counter()
    examples = {}
    no_kernel = collections.Counter()
    ort_reasons = collections.Counter()
    gen_rejects = collections.Counter()
    causes = collections.Counter()
    unstable = collections.Counter()
    disputed = collections.Counter()
    cases = []
    started = time.time()
    deadline = started + args.minutes * 60 if args.minutes else None
    i = args.start
    onnx_ops = collections.Counter()
    try:
        while True:
            if args.count is not None and i >= args.start + args.count:
                break
            if deadline and time.time() >= deadline:
                break
            case_id = f"s{args.seed}-{i}"
            rng = np.random.default_rng([args.seed, i])
            i += 1
            with np.errstate(all="ignore"):
                try:
                    model, feeds, rej = generate(rng, ops, args.max_nodes)
                except Exception as e:
                    counts["invalid"] += 1
                    ort_reasons[f"generator: {type(e).__name__}: {str(e)[:120]}"] += 1
                    if args.verbose:
                        print(f"{case_id}: generator made an invalid graph: {e}")
                    continue
            gen_rejects.update(rej)
            if model is None:
                counts["empty"] += 1
                continue
            counts["graphs"] += 1
            onnx_ops.update({n.op_type for n in model.graph.node})
            with np.errstate(all="ignore"):
                first = judge.check(model, feeds)
            status, detail, ref, res = first
            if status == "ort":
                counts["ort rejected"] += 1
                ort_reasons[normalise(detail.split("\n")[0])] += 1
                if args.verbose:
                    print(f"{case_id}: ort rejected: {detail[:200]}")
                continue
            if status == "match":
                counts["match"] += 1
                if args.verbose:
                    print(f"{case_id}: match ({len(model.graph.node)} nodes)")
                continue
            if status == "refused":
                counts["refused"] += 1
                refusals[detail] += 1
                for nk in res.get("no_kernel", []):
                    no_kernel[nk] += 1
                    examples.setdefault(nk, case_id)
                if detail not in examples:
                    raw = res.get("stderr", "").strip().splitlines()
                    examples[detail] = f"{case_id}: " + " | ".join(raw[:6])[:400]
                if args.verbose:
                    print(f"{case_id}: refused: {detail}")
                continue
            # A mismatch or a crash: diagnose.
            try:
                with np.errstate(all="ignore"):
                    klass, sig, notes, reduced = diagnose(judge, model, feeds, first)
            except Exception as e:
                klass, sig, notes, reduced = "wrong", "diagnosis failed", [traceback.format_exc()[-800:]], None
            notes.insert(0, f"mismatch: {detail}")
            if klass == "unstable":
                counts["unstable"] += 1
                unstable[sig] += 1
                if unstable[sig] <= 2:
                    save_case(os.path.join(args.save, "unstable"), case_id, sig, model, feeds, ref, res,
                              notes, reduced, judge)
                if args.verbose:
                    print(f"{case_id}: unstable: {sig}")
                continue
            if klass == "disputed":
                counts["disputed"] += 1
                disputed[sig] += 1
                if disputed[sig] <= args.keep:
                    save_case(os.path.join(args.save, "disputed"), case_id, sig, model, feeds, ref,
                              res, notes, reduced, judge)
                print(f"{case_id}: disputed: {sig}", flush=True)
                continue
            counts["wrong"] += 1
            causes[sig] += 1
            path = None
            if causes[sig] <= args.keep:
                path = save_case(args.save, case_id, sig, model, feeds, ref, res, notes, reduced, judge)
            cases.append(dict(case=case_id, cause=sig, detail=detail, path=path))
            print(f"{case_id}: WRONG: {sig}: {detail[:200]}" + (f"\n    saved {path}" if path else ""),
                  flush=True)
            if counts["graphs"] % 50 == 0 and args.verbose:
                print(f"... {counts['graphs']} graphs", flush=True)
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.time() - started
    n = counts["graphs"] - counts["ort rejected"]
    top = ", ".join(f"{c}× {r}" for r, c in refusals.most_common(5))
    print(f"\n{n} graphs: {counts['match']} match, {counts['refused']} refused ({top}), "
          f"{counts['wrong']} wrong")
    print(f"also: {counts['disputed']} disputed (ort differs from the spec, Stowage does not; "
          f"not counted wrong), {counts['unstable']} unstable (rounding amplified, not counted wrong), "
          f"{counts['ort rejected']} rejected by onnxruntime, {counts['invalid']} invalid from the "
          f"generator; {elapsed / 60:.1f} min, seed {args.seed}, graphs {args.start}..{i - 1}")
    if CAPACITY_FRACTION is not None:
        print(f"{PATCHED[0]} bundles judged with stages in bands of rows "
              f"(--capacity {CAPACITY_FRACTION} x the bound)")
    if causes:
        print("WRONG causes:")
        for c, k in causes.most_common():
            print(f"  {k}× {c}")
    if disputed:
        print("disputed causes:")
        for c, k in disputed.most_common():
            print(f"  {k}× {c}")
    if unstable:
        print("unstable: " + ", ".join(f"{k}× {c}" for c, k in unstable.most_common()))
    if no_kernel:
        print("no kernel (per graph): " + "; ".join(f"{k}× {c}" for c, k in no_kernel.most_common(8)))
    if args.verbose and ort_reasons:
        print("ort rejections: " + "; ".join(f"{k}× {c}" for c, k in ort_reasons.most_common(8)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(seed=args.seed, start=args.start, end=i - 1, seconds=round(elapsed, 1),
                           counts=counts, refusals=refusals, no_kernel=no_kernel,
                           refusal_examples=examples,
                           ort_rejected=ort_reasons, causes=causes, disputed=disputed, unstable=unstable, cases=cases,
                           generator_rejects=dict(gen_rejects.most_common(40)),
                           onnx_ops=onnx_ops), f, indent=1)
    return 1 if counts["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
