#!/usr/bin/env python3
"""Compile and run the ONNX backend test cases with Stowage's own kernels.

Two kinds of suites:

* the model suites the `onnx` package ships as files
  (onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}),
  every test_data_set_N of each;
* the node suite: `onnx.backend.test.case.node.collect_testcases()` builds
  ~1,900 one-operator models with their inputs and expected outputs in
  memory (the wheel does not ship their data); each is written out in the
  same layout (model.onnx, test_data_set_0/{input,output}_N.pb) under a
  temporary directory.

For each case: `stow compile` the model (an input whose shape is symbolic
gets `--input NAME=AxB` with its data's shape), `stow run BUNDLE --inputs
SET --out DIR` on every data set, and compare each output with the
expected one: the same count, dtype and shape; floats by
max|ours - expected| / max|expected| <= TOLERANCE (the absolute error when
the expected output is all zeros; f16 outputs: F16_TOLERANCE, one f16
rounding step at the output's scale) with NaN and infinity positions equal;
integers and bools exactly. Model-suite cases also run `stow verify` (the
model inside the planned arena, bit for bit against tract's own run).

Every case lands in one category:

    pass               every output matches
    refused by tract   compile fails: tract cannot parse / infer / declutter
                       the model, or has no such operator
    refused at compile any other compile refusal (the reason is recorded)
    no kernel          `stow run` refuses at session setup: an operator has
                       no kernel (the operator types are recorded)
    run failed         any other `stow run` error, or a crash or timeout of
                       `stow compile` or `stow run`
    wrong              an output differs (the error measure is recorded),
                       or `stow verify` finds the arena run differs from tract

Exit status: non-zero when a case is `no kernel`, `run failed` or `wrong`
and not listed with that same category in the known list
(tools/conformance-known.txt: `SUITE/CASE | CATEGORY | reason` a line).
Listed cases that now pass (or moved to a harmless category) are printed so
the list can be shrunk; `--update-known` rewrites it from this run (entries
of suites or cases not run this time are kept).

    tools/conformance.sh                      # venv with onnx, release build, all suites
    python3 tools/conformance.py --stow target/release/stow [--suite node|model|all]
        [--only SUBSTR] [--json FILE] [--jobs 2] [--update-known] [-v]
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

MODEL_SUITES = ["pytorch-converted", "pytorch-operator", "simple"]
CATEGORIES = ["pass", "refused by tract", "refused at compile", "no kernel", "run failed", "wrong"]
# The categories the goal is to bring to zero: each case in one of them must
# be in the known list (with the same category) or the run fails.
BAD = ["no kernel", "run failed", "wrong"]

# Largest accepted error of a float output, relative to its scale:
# max|ours - expected| / max|expected| (absolute when max|expected| is 0).
TOLERANCE = 1e-4
# An f16 output is judged at f16's own resolution: one rounding step at the
# output's scale, 2^-10 of it (an operator computed in f32 and rounded once,
# as Stowage does, may round one step away from numpy, whose Softmax, say,
# rounds to f16 after each of its own steps).
F16_TOLERANCE = 2.0 ** -10
# Cases that need more, and why. Keys are `suite/case` names.
TOLERANCE_OVERRIDES = {
    # The expected output is typed into onnx's node/averagepool.py rounded
    # to 4 decimals (0.1511, 0.2841, 0.3572): error 1.6e-4 of the scale,
    # while Stowage's values equal onnxruntime's to 1e-6.
    "node/test_averagepool_2d_ceil_last_window_starts_on_pad":
        (1e-3, "expected values rounded to 4 decimals in onnx's test"),
}

# Errors that come from tract itself (the model cannot be loaded by the
# reference), as opposed to Stowage's planning, bundling or arena run.
TRACT_STAGES = re.compile(
    r"(parse|shape inference|declutter) failed|unsupported operator|running tract's reference"
    r"|cannot read .*input|is not a valid ONNX model")
# `stow run` refusing at session setup: "N operator(s) cannot run:" then one
# "  step S `NAME` (OP_TYPE): REASON" line per operator.
NO_KERNEL = re.compile(r"operator\(s\) cannot run")
UNSUPPORTED_OP = re.compile(r"^\s*step \d+ `.*` \((.*?)\): (.*)$", re.M)
TIMEOUT = 120  # seconds for one stow command


def first_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    line = lines[0] if lines else ""
    # Drop "error: compiling /long/path/model.onnx: ": the row names the case.
    line = re.sub(r"^error: (compiling|loading|opening|running) \S+: ", "", line)
    line = re.sub(r"^error: ", "", line)
    return line


def error_text(stderr):
    """The error of a failed stow command: its `error:` line and the
    `Caused by:` chain, or a panic's message, on one line."""
    text = stderr.strip()
    m = re.search(r"panicked at ([^\n]*)\n([^\n]*)", text)
    if m:
        return f"panic at {m.group(1)} {m.group(2)}"[:2000]
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    if not lines:
        return ""
    head = first_line(lines[0])
    causes = []
    if "Caused by:" in lines:
        for l in lines[lines.index("Caused by:") + 1:]:
            if l.startswith("Stack backtrace") or l.startswith("note:"):
                break
            causes.append(re.sub(r"^\d+: ", "", l))
    return ": ".join([head] + causes)[:2000]


def run_stow(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                           env=dict(os.environ, RUST_BACKTRACE="0"))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {TIMEOUT} s"


# ---------------------------------------------------------------- cases --

def model_suite_cases(data, only):
    cases = []
    for suite in MODEL_SUITES:
        root = os.path.join(data, suite)
        if not os.path.isdir(root):
            continue
        for name in sorted(os.listdir(root)):
            full = f"{suite}/{name}"
            if only and only not in full:
                continue
            if os.path.exists(os.path.join(root, name, "model.onnx")):
                cases.append({"name": full, "suite": suite, "dir": os.path.join(root, name),
                              "verify": True})
    return cases


def collect_node_cases():
    import numpy as np
    from onnx.backend.test.case import node
    # The generators divide by zero on purpose (ReduceMax of empty sets…).
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return node.collect_testcases()


def write_value(path, value, value_info):
    """One input or output as onnx's own data generator writes it
    (onnx/backend/test/cmd_tools.py)."""
    from onnx import TensorProto, numpy_helper
    t = value_info.type
    if t.HasField("map_type"):
        proto = numpy_helper.from_dict(value, value_info.name)
    elif t.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, value_info.name)
    elif t.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, value_info.name)
    elif isinstance(value, TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(value, value_info.name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def node_suite_cases(tmp, only):
    cases = []
    root = os.path.join(tmp, "node")
    for case in sorted(collect_node_cases(), key=lambda c: c.name):
        full = f"node/{case.name}"
        if only and only not in full:
            continue
        d = os.path.join(root, case.name)
        os.makedirs(d)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            s = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(s)
            for j, value in enumerate(inputs):
                write_value(os.path.join(s, f"input_{j}.pb"), value, graph.input[j])
            for j, value in enumerate(outputs):
                write_value(os.path.join(s, f"output_{j}.pb"), value, graph.output[j])
        cases.append({"name": full, "suite": "node", "dir": d, "verify": False})
    return cases


# ------------------------------------------------------------ comparing --

def read_tensor(path):
    import onnx
    from onnx import numpy_helper
    proto = onnx.TensorProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto, numpy_helper.to_array(proto)


def numbered(dir, prefix):
    files = [f for f in os.listdir(dir) if re.fullmatch(prefix + r"_\d+\.pb", f)]
    return [os.path.join(dir, f) for f in sorted(files, key=lambda f: int(re.findall(r"\d+", f)[0]))]


def compare(ours, want):
    """(ok, measure, note) for one output; measure is the scaled float error
    or the count of differing elements."""
    import numpy as np
    if ours.dtype != want.dtype:
        return False, None, f"dtype {ours.dtype} but expected {want.dtype}"
    if ours.shape != want.shape:
        return False, None, f"shape {list(ours.shape)} but expected {list(want.shape)}"
    if ours.size == 0:
        return True, 0.0, ""
    if want.dtype.kind in "fc":
        a = ours.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        b = want.astype(a.dtype)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if (nan_a != nan_b).any():
            n = int((nan_a != nan_b).sum())
            return False, float("inf"), f"NaN at {n} position(s) where the other has none"
        # Infinities must match exactly (inf - inf is NaN, not an error of 0).
        fin_b = np.isfinite(b) | nan_b
        if (a[~fin_b] != b[~fin_b]).any():
            return False, float("inf"), "an infinity differs"
        fin = np.isfinite(b)
        if (~np.isfinite(a[fin])).any():
            return False, float("inf"), "non-finite value where a finite one is expected"
        if not fin.any():
            return True, 0.0, ""
        diff = float(np.abs(a[fin] - b[fin]).max())
        scale = float(np.abs(b[fin]).max())
        err = diff / scale if scale > 0 else diff
        return err <= 0, err, f"max abs diff {diff:.3g}, max abs expected {scale:.3g}"
    same = ours == want
    if same.all():
        return True, 0, ""
    n = int((~same).sum())
    note = f"{n} of {want.size} elements differ"
    if want.dtype.kind in "iu":
        note += f" (max abs diff {int(np.abs(ours.astype(np.int64) - want.astype(np.int64)).max())})"
    return False, n, note


# ------------------------------------------------------------- one case --

def symbolic_input_args(model_path, set_dir):
    """`--input NAME=AxB` for every graph input whose declared shape is not
    fully fixed, from the shape of the data set's tensor."""
    import onnx
    model = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    files = numbered(set_dir, "input")
    args = []
    for vi, path in zip(inputs, files):
        t = vi.type
        if not t.HasField("tensor_type"):
            continue
        tt = t.tensor_type
        fixed = tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)
        if fixed:
            continue
        proto = onnx.TensorProto()
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
        if len(proto.dims) == 0:
            continue  # a scalar: nothing to fix, and `NAME=` does not parse
        args += ["--input", f"{vi.name}=" + "x".join(str(d) for d in proto.dims)]
    return args, [n.op_type for n in model.graph.node]


def run_case(case, stow, tmp_root, force_verify):
    name = case["name"]
    started = time.time()
    result = {"name": name, "suite": case["suite"], "category": None, "detail": "",
              "error": None, "ops": [], "onnx_ops": [], "seconds": 0.0}
    model = os.path.join(case["dir"], "model.onnx")
    sets = sorted((d for d in os.listdir(case["dir"]) if d.startswith("test_data_set_")),
                  key=lambda d: int(d.rsplit("_", 1)[1]))
    work = tempfile.mkdtemp(dir=tmp_root)
    try:
        shape_args, onnx_ops = symbolic_input_args(model, os.path.join(case["dir"], sets[0])) if sets else ([], [])
        result["onnx_ops"] = sorted(set(onnx_ops))
        result["input_args"] = shape_args
        bundle = os.path.join(work, "case.stow")
        code, out, err = run_stow([stow, "compile", model, "-o", bundle] + shape_args)
        if code != 0:
            msg = error_text(err) or f"exit status {code}"
            if code is None or code < 0 or "panicked at" in err:
                # A crash is no refusal: count it with the failures.
                result.update(category="run failed", detail="stow compile crashed: " + msg)
            elif TRACT_STAGES.search(err):
                result.update(category="refused by tract", detail=msg)
            else:
                result.update(category="refused at compile", detail=msg)
            return result
        if case["verify"] or force_verify:
            # Inputs alone: verify would also compare tract with the
            # expected outputs, which is not what is measured here.
            vdir = os.path.join(work, "verify_inputs")
            os.makedirs(vdir)
            for f in numbered(os.path.join(case["dir"], sets[0]), "input"):
                os.symlink(f, os.path.join(vdir, os.path.basename(f)))
            code, out, err = run_stow([stow, "verify", model, bundle, "--inputs", vdir])
            if code != 0:
                msg = error_text(err) or f"exit status {code}"
                if code is None or code < 0 or "panicked at" in err:
                    result.update(category="run failed", detail="stow verify crashed: " + msg)
                elif TRACT_STAGES.search(err):
                    result.update(category="refused by tract", detail="verify: " + msg)
                else:
                    result.update(category="wrong", detail="verify: " + msg)
                return result
        worst = 0.0
        for s in sets:
            set_dir = os.path.join(case["dir"], s)
            out_dir = os.path.join(work, "out_" + s)
            code, out, err = run_stow([stow, "run", bundle, "--inputs", set_dir, "--out", out_dir])
            if code != 0:
                if code is not None and NO_KERNEL.search(err):
                    found = UNSUPPORTED_OP.findall(err)
                    ops = sorted({op for op, _ in found})
                    reasons = sorted({f"{op}: {why}" for op, why in found})
                    result.update(category="no kernel", ops=ops, reasons=reasons,
                                  detail="; ".join(reasons))
                else:
                    result.update(category="run failed", detail=error_text(err) or f"exit status {code}")
                return result
            expected = numbered(set_dir, "output")
            got = numbered(out_dir, "output") if os.path.isdir(out_dir) else []
            if len(got) != len(expected):
                result.update(category="wrong", detail=f"{len(got)} outputs, expected {len(expected)}")
                return result
            for ix, (g, w) in enumerate(zip(got, expected)):
                try:
                    _, want = read_tensor(w)
                except Exception as e:  # a sequence, an optional, a map
                    result.update(category="wrong", detail=f"output {ix}: expected value is not a tensor ({e})")
                    return result
                _, ours = read_tensor(g)
                ok, measure, note = compare(ours, want)
                if isinstance(measure, float):
                    default = F16_TOLERANCE if want.dtype == "float16" else TOLERANCE
                    limit, _why = TOLERANCE_OVERRIDES.get(name, (default, ""))
                    ok = ok or (measure <= limit)
                    worst = max(worst, measure)
                if not ok:
                    where = f"{s} output {ix}" if len(sets) > 1 else f"output {ix}"
                    result.update(category="wrong", error=measure, detail=f"{where}: {note}".strip())
                    if isinstance(measure, float):
                        result["detail"] = f"{where}: error {measure:.3g} ({note})"
                    # Whose mistake: when Stowage's run matches tract's own
                    # run of the model, the bundle holds tract's reading of
                    # the ONNX operator, which is where the error is.
                    code, _, _ = run_stow([stow, "run", bundle, "--inputs", set_dir, "--check", model])
                    result["matches_tract"] = code == 0
                    result["detail"] += "; same as tract's run" if code == 0 else "; differs from tract's run too"
                    return result
        result.update(category="pass", error=worst, detail=f"max error {worst:.2e}" if worst else "exact")
        return result
    except Exception as e:  # keep one broken case from stopping the suite
        result.update(category="run failed", detail=f"conformance script: {type(e).__name__}: {e}")
        return result
    finally:
        # The full message stays in the JSON; rows and the known list get
        # its first 300 characters.
        result["message"] = result["detail"]
        result["detail"] = result["detail"][:300]
        result["seconds"] = round(time.time() - started, 3)
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------- known list --

def read_known(path):
    known = {}
    if not os.path.exists(path):
        return known
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split("|", 2)]
            if len(parts) < 2 or parts[1] not in BAD:
                sys.exit(f"{path}:{n}: expected `SUITE/CASE | {' or '.join(BAD)} | reason`")
            known[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return known


KNOWN_HEADER = """\
# Conformance cases known to fail (tools/conformance.py): one line each,
#     SUITE/CASE | CATEGORY | reason
# with CATEGORY one of: no kernel, run failed, wrong. A case in one of these
# categories that is not listed here with the same category fails the run;
# a listed case that now passes is reported so that its line can go.
# `python3 tools/conformance.py --update-known` rewrites this file.
"""


def short_reason(r):
    return r["detail"].replace("|", "/")[:160]


def write_known(path, known, results):
    ran = {r["name"] for r in results}
    merged = {k: v for k, v in known.items() if k not in ran}
    for r in results:
        if r["category"] in BAD:
            merged[r["name"]] = (r["category"], short_reason(r))
    with open(path, "w") as f:
        f.write(KNOWN_HEADER)
        for name in sorted(merged):
            cat, why = merged[name]
            f.write(f"{name} | {cat} | {why}\n")
    return len(merged)


# ------------------------------------------------------------------ main --

def default_stow():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(here, "target")
    for profile in ("release", "debug"):
        path = os.path.join(target, profile, "stow")
        if os.path.exists(path):
            return path
    return os.path.join(target, "release", "stow")


def summary_line(label, rows):
    counts = {c: sum(1 for r in rows if r["category"] == c) for c in CATEGORIES}
    return (f"{label}: {len(rows)} cases: {counts['pass']} pass, {counts['refused by tract']} refused by tract, "
            f"{counts['refused at compile']} refused at compile, {counts['no kernel']} no kernel, "
            f"{counts['run failed']} run failed, {counts['wrong']} wrong")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--stow", default=None, help="the stow binary (default: target/release/stow, else debug)")
    parser.add_argument("--data", help="onnx/backend/test/data (default: from the installed onnx package)")
    parser.add_argument("--suite", default="all", choices=["all", "node", "model"] + MODEL_SUITES)
    parser.add_argument("--only", help="only the cases whose SUITE/CASE name contains this")
    parser.add_argument("--json", help="write every case's result to this file")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument("--known", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                        "conformance-known.txt"))
    parser.add_argument("--update-known", action="store_true",
                        help="rewrite the known list from this run's no kernel / run failed / wrong cases")
    parser.add_argument("--verify", action="store_true",
                        help="also `stow verify` node cases (model-suite cases always are)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print a row for passing cases too")
    args = parser.parse_args()
    stow = os.path.abspath(args.stow or default_stow())
    if not os.path.exists(stow):
        sys.exit(f"{stow} does not exist: build it with `cargo build --release -p stow-cli`")
    started = time.time()
    import onnx
    data = args.data or os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    with tempfile.TemporaryDirectory(prefix="stow-conformance-") as tmp:
        runs = os.path.join(tmp, "runs")
        os.makedirs(runs)
        cases, futures = [], []
        with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            def submit(batch):
                cases.extend(batch)
                futures.extend(pool.submit(run_case, c, stow, runs, args.verify) for c in batch)
            if args.suite in ("all", "model") or args.suite in MODEL_SUITES:
                submit([c for c in model_suite_cases(data, args.only)
                        if args.suite in ("all", "model", c["suite"])])
            # The model suites run while the node cases are generated (the
            # slowest part of preparing).
            if args.suite in ("all", "node"):
                submit(node_suite_cases(tmp, args.only))
            prepared = time.time() - started
            results = [f.result() for f in futures]
    elapsed = time.time() - started

    known = read_known(args.known)
    new_bad, fixed, moved = [], [], []
    for r in results:
        k = known.get(r["name"])
        if r["category"] in BAD:
            if k is None or k[0] != r["category"]:
                new_bad.append((r, k))
        elif k is not None:
            fixed.append((r, k))

    width = max((len(r["name"]) for r in results), default=10)
    for r in results:
        if r["category"] == "pass" and not args.verbose:
            continue
        k = known.get(r["name"])
        mark = "" if r["category"] not in BAD or (k and k[0] == r["category"]) else "  [NOT KNOWN]"
        print(f"{r['name']:<{width}}  {r['category']:<18}  {r['seconds']:5.2f}s  {r['detail']}{mark}")
    print()
    print(f"onnx {onnx.__version__}, {stow}, {len(cases)} cases in {elapsed:.1f} s "
          f"({prepared:.1f} s preparing, {args.jobs} at a time)")
    model_rows = [r for r in results if r["suite"] in MODEL_SUITES]
    node_rows = [r for r in results if r["suite"] == "node"]
    if model_rows:
        print(summary_line("model suites", model_rows))
    if node_rows:
        print(summary_line("node suite", node_rows))
    if model_rows and node_rows:
        print(summary_line("all suites", results))
    if fixed:
        print(f"\n{len(fixed)} case(s) in {os.path.basename(args.known)} no longer fail "
              f"(drop their lines, or run with --update-known):")
        for r, k in fixed:
            print(f"  {r['name']}: was {k[0]}, now {r['category']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"onnx": onnx.__version__, "stow": stow, "seconds": round(elapsed, 1),
                       "tolerance": TOLERANCE, "cases": results}, f, indent=1)
    if args.update_known:
        n = write_known(args.known, known, results)
        print(f"\nwrote {n} known case(s) to {args.known}")
        return 0
    if new_bad:
        print(f"\n{len(new_bad)} case(s) fail and are not in {os.path.basename(args.known)} "
              f"with that category:")
        for r, k in new_bad:
            was = f" (listed as {k[0]})" if k else ""
            print(f"  {r['name']}: {r['category']}{was}: {r['detail']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
