#!/usr/bin/env python3
"""Quantize small float models with onnxruntime.quantization and compare Stowage with onnxruntime's own int8 run.

The float models are built here (seeded random weights): a small CNN
(convolution, depthwise convolution, a residual Add, global average
pooling, a dense head) and an MLP (MatMul + bias + Relu). Each is
quantized the usual ways: static QDQ with per-tensor and with
per-channel weights, the QOperator format (QLinearConv, QLinearMatMul,
QLinearAdd, ...), and dynamic quantization (DynamicQuantizeLinear +
MatMulInteger / ConvInteger). Calibration uses seeded random inputs.

For every quantized model: `stow compile`, `stow run` on seeded inputs,
onnxruntime on the same inputs, and the outputs compared. Where a graph
output comes out of a DequantizeLinear, the error is also given in
quantisation steps of that output (|ours - ort| / its scale); a
difference of at most one step is a rounding difference, more is wrong.
The table also gives the arena of the quantized bundle against the
float model's (an int8 model should need about a quarter).

    cargo build --release -p stow-cli
    python tools/quant_models.py [--stow BIN] [--work DIR] [--only SUBSTR] [--json FILE]
                                 [--exported [DIR]]

With --exported, the models of tools/export_models.py found in DIR
(default ~/.cache/stowage/models) are quantized too, the way their users
would: mobilenet_v2 and resnet50 static QDQ per channel (u8 activations,
i8 weights) after onnxruntime's `quant_pre_process`, calibrated on four
seeded random images; bert_base dynamically (i8 weights). The quantized
models stay in --work for tools/bench_runtime.py.

The Python environment needs numpy, onnx and onnxruntime. Exits 1 when
any model runs and differs by more than one step, or, where no step is
known, by more than 1e-2 of the output's scale while also being further
from the float model than onnxruntime's int8 run is (by more than a
tenth: after many dynamically quantized layers two right implementations
drift apart, onnxruntime's own with and without its graph optimizations
among them); refusals do not fail it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OPSET = 13


# --------------------------------------------------------------- models --


def initializer(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def cnn(rng):
    """conv 3→16 + Relu, depthwise 3×3 + Relu, pointwise 16→16, residual Add,
    global average pool, flatten, dense 16→10."""
    w = lambda *shape: rng.normal(0, 0.3, shape).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
        helper.make_node("Add", ["c3", "r1"], ["s"]),
        helper.make_node("GlobalAveragePool", ["s"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], transB=1),
    ]
    inits = [
        initializer("w1", w(16, 3, 3, 3)), initializer("b1", w(16)),
        initializer("w2", w(16, 1, 3, 3)), initializer("b2", w(16)),
        initializer("w3", w(16, 16, 1, 1)), initializer("b3", w(16)),
        initializer("w4", w(10, 16)), initializer("b4", w(10)),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits)
    return graph, {"x": (1, 3, 32, 32)}


def mlp(rng):
    """MatMul 64→128 + bias + Relu, MatMul 128→32 + bias."""
    w = lambda *shape: rng.normal(0, 0.2, shape).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["y"]),
    ]
    inits = [initializer("w1", w(64, 128)), initializer("b1", w(128)),
             initializer("w2", w(128, 32)), initializer("b2", w(32))]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        inits)
    return graph, {"x": (4, 64)}


MODELS = {"cnn": cnn, "mlp": mlp}

# Models of tools/export_models.py and how each is quantized.
EXPORTED = {"mobilenet_v2": "qdq_per_channel", "resnet50": "qdq_per_channel", "efficientnet_b0": "qdq_per_channel",
            "bert_base": "dynamic"}
EXPORTED_DIR = os.path.expanduser("~/.cache/stowage/models")


def float_model(name):
    graph, shapes = MODELS[name](np.random.default_rng(7))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, shapes


def exported_model(path):
    """An exported model and its inputs: name -> (shape, numpy type)."""
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    shapes = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dtype = np.int64 if t.elem_type == TensorProto.INT64 else np.float32
        shapes[i.name] = ([d.dim_value for d in t.shape.dim], dtype)
    return model, shapes


def feeds_for(shapes, seed):
    """Seeded inputs: floats in [-1, 1); int64 inputs are token ids (BERT's
    vocabulary) and an attention mask of ones."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for k, s in shapes.items():
        # The built models give shapes, exported ones (shape list, type).
        s, dtype = s if isinstance(s[0], list) else (s, np.float32)
        if dtype == np.int64:
            feeds[k] = (np.ones(s, np.int64) if "mask" in k else rng.integers(0, 30522, s, dtype=np.int64))
        else:
            feeds[k] = rng.uniform(-1, 1, s).astype(np.float32)
    return feeds


# ------------------------------------------------------------- variants --


def quantize(variant, src, dst, shapes, batches=16, preprocess=False):
    from onnxruntime import quantization as q

    class Calibration(q.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([feeds_for(shapes, 100 + i) for i in range(batches)])

        def get_next(self):
            return next(self.batches, None)

    if variant == "dynamic":
        q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8)
        return
    if preprocess:
        from onnxruntime.quantization.shape_inference import quant_pre_process
        pre = dst[:-len(".onnx")] + "_pre.onnx"
        # The exported shapes are static: no symbolic inference (sympy).
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        src = pre
    q.quantize_static(
        src, dst, Calibration(),
        quant_format=q.QuantFormat.QOperator if variant == "qoperator" else q.QuantFormat.QDQ,
        per_channel=variant == "qdq_per_channel",
        activation_type=q.QuantType.QUInt8,
        weight_type=q.QuantType.QInt8)


VARIANTS = ["qdq_per_tensor", "qdq_per_channel", "qoperator", "dynamic"]


# ---------------------------------------------------------------- stow --


def stow(args, *cmd):
    p = subprocess.run([args.stow, *cmd], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, RUST_BACKTRACE="0"))
    return p.returncode, p.stdout, p.stderr


def first_error_line(stderr):
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    text = " ".join(lines[:3])
    return text if len(text) <= 240 else text[:237] + "..."


def arena_bytes(args, bundle):
    code, out, _ = stow(args, "inspect", "--json", bundle)
    return json.loads(out)["arena_bytes"] if code == 0 else None


def run_bundle(args, bundle, feeds, work):
    inputs = os.path.join(work, "inputs.npz")
    out_dir = os.path.join(work, "out")
    shutil.rmtree(out_dir, ignore_errors=True)
    np.savez(inputs, **feeds)
    code, _, err = stow(args, "run", bundle, "--inputs", inputs, "--out", out_dir)
    if code != 0:
        return None, err
    outputs = {}
    for name in sorted(os.listdir(out_dir)):
        proto = onnx.TensorProto()
        with open(os.path.join(out_dir, name), "rb") as f:
            proto.ParseFromString(f.read())
        outputs[proto.name] = numpy_helper.to_array(proto)
    return outputs, None


def output_steps(model):
    """Scale of each graph output that a DequantizeLinear makes (per-tensor)."""
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    steps = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[1] in consts:
            scale = consts[node.input[1]]
            if scale.size == 1:
                steps[node.output[0]] = float(scale.reshape(-1)[0])
    return {o.name: steps[o.name] for o in model.graph.output if o.name in steps}


def check(args, name, variant, work, exported=None):
    import onnxruntime as ort
    qpath = os.path.join(work, f"{name}_{variant}.onnx")
    if exported:
        fpath = exported
        _, shapes = exported_model(fpath)
        quantize(variant, fpath, qpath, shapes, batches=4, preprocess=True)
    else:
        model, shapes = float_model(name)
        fpath = os.path.join(work, f"{name}.onnx")
        onnx.save(model, fpath)
        quantize(variant, fpath, qpath, shapes)
    row = {"model": name, "variant": variant}
    ops = sorted({n.op_type for n in onnx.load(qpath).graph.node})
    row["operators"] = ops

    fbundle = os.path.join(work, f"{name}.stow")
    code, _, err = stow(args, "compile", fpath, "-o", fbundle)
    row["float_arena"] = arena_bytes(args, fbundle) if code == 0 else None

    qbundle = os.path.join(work, f"{name}_{variant}.stow")
    code, _, err = stow(args, "compile", qpath, "-o", qbundle)
    if code != 0:
        row.update(status="compile error", error=first_error_line(err))
        return row
    row["arena"] = arena_bytes(args, qbundle)
    feeds = feeds_for(shapes, 1)
    session = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    ref = dict(zip(names, session.run(None, feeds)))
    ours, err = run_bundle(args, qbundle, feeds, work)
    if ours is None:
        row.update(status="run error", error=first_error_line(err))
        return row
    steps = output_steps(onnx.load(qpath))
    worst_steps, worst_rel, wrong = 0.0, 0.0, False
    noisy = []
    for out in names:
        a, b = ours.get(out), ref[out]
        if a is None or a.shape != b.shape:
            row.update(status="wrong", error=f"output {out}: missing or of another shape")
            return row
        diff = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())
        scale = float(np.abs(b).max()) or 1.0
        worst_rel = max(worst_rel, diff / scale)
        if out in steps:
            s = diff / steps[out]
            worst_steps = max(worst_steps, s)
            wrong |= s > 1.0 + 1e-3
        elif diff / scale > 1e-2:
            noisy.append(out)
    if noisy and not wrong:
        # A float output after many dynamically quantized layers: one
        # rounding that differs early moves every later scale, so the
        # outputs of two right implementations drift apart (onnxruntime's
        # own, with and without its graph optimizations, do). Such an
        # output is judged against the float model instead: no further
        # from it than onnxruntime's int8 run is, within a tenth.
        judged = against_float(ours, ref, fpath, qpath, feeds, noisy)
        row["note"] = judged["note"]
        wrong = not judged["ok"]
    row.update(status="wrong" if wrong else "ok", rel_error=worst_rel,
               steps=worst_steps if steps else None)
    return row


def against_float(ours, ref, fpath, qpath, feeds, outputs):
    """Whether `ours` is as close to the float model's outputs as
    onnxruntime's int8 run (`ref`) is, on `outputs`; the note says how
    close each is and how far onnxruntime's int8 run moves with its graph
    optimizations turned off."""
    import onnxruntime as ort
    float_out = dict(zip([o.name for o in ort.InferenceSession(fpath).get_outputs()],
                         ort.InferenceSession(fpath).run(None, feeds)))
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unoptimized = ort.InferenceSession(qpath, plain, providers=["CPUExecutionProvider"])
    unopt = dict(zip([o.name for o in unoptimized.get_outputs()], unoptimized.run(None, feeds)))
    ok, notes = True, []
    for out in outputs:
        if out not in float_out:
            return {"ok": False, "note": f"output {out}: no float output to judge it by"}
        f = float_out[out].astype(np.float64)
        scale = float(np.abs(f).max()) or 1.0
        err = lambda x: float(np.abs(x.astype(np.float64) - f).max()) / scale
        e_ours, e_ort = err(ours[out]), err(ref[out])
        self_diff = float(np.abs(ref[out].astype(np.float64) - unopt[out]).max()) / scale
        ok &= e_ours <= 1.1 * e_ort
        notes.append(f"{out}: from the float model {e_ours:.2e} (onnxruntime int8 {e_ort:.2e}; "
                     f"onnxruntime optimized against unoptimized {self_diff:.2e})")
    return {"ok": ok, "note": "; ".join(notes)}


def table(rows):
    print("| model | variant | status | max rel. error | steps | arena (float) | note |")
    print("|---|---|---|---:|---:|---:|---|")
    for r in rows:
        rel = f"{r['rel_error']:.2e}" if "rel_error" in r else ""
        steps = f"{r['steps']:.2f}" if r.get("steps") is not None else ""
        arena = f"{r.get('arena') or ''} ({r.get('float_arena') or '?'})" if r.get("arena") else ""
        note = r.get("error", r.get("note", ""))
        print(f"| {r['model']} | {r['variant']} | {r['status']} | {rel} | {steps} | {arena} | {note} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_stow = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")),
                                "release", "stow")
    p.add_argument("--stow", default=default_stow, help="the stow binary (default: %(default)s)")
    p.add_argument("--work", help="keep models, bundles and outputs here (default: a temporary directory)")
    p.add_argument("--only", help="only the model/variant pairs whose name contains this")
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--exported", nargs="?", const=EXPORTED_DIR, metavar="DIR",
                   help="also quantize the exported models found in DIR (default: %(const)s)")
    args = p.parse_args()
    if not os.path.exists(args.stow):
        sys.exit(f"{args.stow}: no such binary (cargo build --release -p stow-cli, or --stow)")
    work = args.work or tempfile.mkdtemp(prefix="stow-quant-")
    os.makedirs(work, exist_ok=True)
    rows = []
    for name in MODELS:
        for variant in VARIANTS:
            if args.only and args.only not in f"{name}_{variant}":
                continue
            case = os.path.join(work, f"{name}_{variant}")
            os.makedirs(case, exist_ok=True)
            rows.append(check(args, name, variant, case))
    for name, variant in EXPORTED.items() if args.exported else []:
        src = os.path.join(args.exported, f"{name}.onnx")
        if not os.path.exists(src) or (args.only and args.only not in f"{name}_{variant}"):
            continue
        case = os.path.join(work, f"{name}_{variant}")
        os.makedirs(case, exist_ok=True)
        rows.append(check(args, name, variant, case, exported=src))
    table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("\n" + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if counts.get("wrong") else 0)


if __name__ == "__main__":
    main()
