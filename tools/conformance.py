#!/usr/bin/env python3
"""Compile, verify and run every ONNX backend test case the `onnx` package ships.

For each case under onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}:
`stow compile` the model, then `stow verify` it on the case's
test_data_set_0 inputs, which runs it inside the planned arena, compares it
bit for bit with tract's own run, and compares it with the shipped expected
outputs (relative tolerance 1e-4). Then `stow run --check` executes the
bundle with Stowage's own kernels on the same inputs and compares the
outputs with tract's (1e-5 of each output's scale). Prints a table and a
summary; exits non-zero if any case that tract runs fails either check
(a case whose operators have no kernel yet is counted as "no kernel").

    tools/conformance.sh            # makes a throw-away venv with onnx, then runs this
    python3 tools/conformance.py --stow target/debug/stow [--data DIR]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

SUITES = ["pytorch-converted", "pytorch-operator", "simple"]
# Errors that come from tract itself (the model cannot be loaded or run by
# the reference), as opposed to Stowage's planning, bundling or arena run.
TRACT_STAGES = re.compile(r"(parse|shape inference|declutter) failed|unsupported operator|running tract's reference|cannot read .*input|is not a valid ONNX model")


def first_line(text):
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    # Drop "error: compiling /long/path/model.onnx: ": the row names the case.
    line = re.sub(r"^error: (compiling|loading) \S+: ", "", line)
    return line[:160]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stow", default="target/debug/stow")
    parser.add_argument("--data", help="onnx/backend/test/data (default: from the installed onnx package)")
    args = parser.parse_args()
    data = args.data
    if data is None:
        import onnx
        data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    cases = []
    for suite in SUITES:
        root = os.path.join(data, suite)
        for name in sorted(os.listdir(root)):
            if os.path.exists(os.path.join(root, name, "model.onnx")):
                cases.append((suite, name, os.path.join(root, name)))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for suite, name, case in cases:
            bundle = os.path.join(tmp, "case.stow")
            started = time.time()
            c = subprocess.run([args.stow, "compile", os.path.join(case, "model.onnx"), "-o", bundle],
                               capture_output=True, text=True)
            if c.returncode != 0:
                status = "unsupported" if TRACT_STAGES.search(c.stderr) else "FAILED"
                rows.append((suite, name, status, first_line(c.stderr), time.time() - started))
                continue
            data_set = os.path.join(case, "test_data_set_0")
            v = subprocess.run([args.stow, "verify", os.path.join(case, "model.onnx"), bundle, "--inputs", data_set],
                               capture_output=True, text=True)
            if v.returncode == 0:
                m = re.search(r"max relative error ([0-9.e+-]+)", v.stdout)
                note = f"max rel err {m.group(1) if m else '-'}"
                r = subprocess.run([args.stow, "run", bundle, "--inputs", data_set,
                                    "--check", os.path.join(case, "model.onnx")],
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    m = re.search(r"max relative error ([0-9.e+-]+)", r.stdout)
                    rows.append((suite, name, "passed", f"{note}; run {m.group(1) if m else '-'}", time.time() - started))
                elif "cannot run" in r.stderr:
                    kinds = sorted(set(re.findall(r"\(([^()]*)\): ", r.stderr)))
                    rows.append((suite, name, "no kernel", f"{note}; run: no kernel for {', '.join(kinds)}", time.time() - started))
                else:
                    rows.append((suite, name, "FAILED", "run: " + first_line(r.stderr + r.stdout), time.time() - started))
            else:
                status = "unsupported" if TRACT_STAGES.search(v.stderr) else "FAILED"
                rows.append((suite, name, status, first_line(v.stderr), time.time() - started))
    width = max(len(f"{s}/{n}") for s, n, *_ in rows)
    for suite, name, status, note, secs in rows:
        print(f"{suite + '/' + name:<{width}}  {status:<11}  {secs:5.2f}s  {note}")
    counts = {s: sum(1 for r in rows if r[2] == s) for s in ["passed", "FAILED", "unsupported", "no kernel"]}
    print(f"\n{len(rows)} cases: {counts['passed']} passed, {counts['FAILED']} failed, "
          f"{counts['unsupported']} unsupported by tract, {counts['no kernel']} without a runtime kernel")
    sys.exit(1 if counts["FAILED"] else 0)


if __name__ == "__main__":
    main()
