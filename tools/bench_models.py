#!/usr/bin/env python3
"""Compile and verify every exported model; print a Markdown table.

Columns: compile time (wall, whole `stow compile`), arena, lower bound,
naive (no reuse), arena / lower bound, verify time (wall, whole `stow verify`).

    python3 tools/export_models.py            # once, into $STOW_MODELS_DIR
    cargo build --release -p stow-cli
    python3 tools/bench_models.py --stow target/release/stow [--strategy greedy-size]
"""
import argparse
import glob
import json
import re
import os
import subprocess
import sys
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stow", default="target/release/stow")
    parser.add_argument("--models", default=os.environ.get("STOW_MODELS_DIR", os.path.expanduser("~/.cache/stowage/models")))
    parser.add_argument("--strategy", default=None, help="passed to stow compile")
    parser.add_argument("--threads", default="0",
                        help="stow compile --threads: kernel scratch planned for N threads (default 0: the model's tensors only, as recorded in BENCHMARKS.md)")
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--reuse-table", action="store_true",
                        help="instead: arena with all reuse, without in-place, without views, lifetimes only")
    args = parser.parse_args()
    models = sorted(glob.glob(os.path.join(args.models, "*.onnx")))
    if not models:
        sys.exit(f"no models in {args.models}; run tools/export_models.py first")
    if args.reuse_table:
        return reuse_table(args, models)
    print("| model | compile s | arena B | lower bound B | naive B | arena/bound | verify s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            name = os.path.basename(model)[:-5]
            bundle = os.path.join(tmp, name + ".stow")
            cmd = [args.stow, "compile", model, "-o", bundle, "--threads", args.threads] + (["--strategy", args.strategy] if args.strategy else [])
            started = time.time()
            subprocess.run(cmd, check=True, capture_output=True)
            compile_s = time.time() - started
            j = json.loads(subprocess.run([args.stow, "inspect", "--json", bundle], check=True, capture_output=True).stdout)
            verify_s = "-"
            if not args.no_verify:
                started = time.time()
                v = subprocess.run([args.stow, "verify", model, bundle], capture_output=True, text=True)
                verify_s = f"{time.time() - started:.2f}" if v.returncode == 0 else "FAIL: " + v.stderr.strip()[:80]
            arena, bound, naive = j["arena_bytes"], j["lower_bound_bytes"], j["naive_bytes"]
            print(f"| {name} | {compile_s:.2f} | {arena:,} | {bound:,} | {naive:,} | {arena / bound:.3f} | {verify_s} |", flush=True)


def reuse_table(args, models):
    configs = [("all reuse", []), ("no in-place", ["--no-inplace"]), ("no views", ["--no-views"]),
               ("no concat in place", ["--no-concat-inplace"]),
               ("no depthwise in place", ["--no-depthwise-inplace"]),
               ("lifetimes only", ["--no-inplace", "--no-views", "--no-concat-inplace",
                                   "--no-depthwise-inplace"]),
               ("concurrent branches", ["--concurrent-branches"])]
    print("| model | " + " | ".join(f"{c} B" for c, _ in configs) + " | saved vs lifetimes | bound per order |")
    print("|---|" + "---:|" * (len(configs) + 1) + "---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            bundle = os.path.join(tmp, "m.stow")
            arenas = []
            for _, flags in configs:
                subprocess.run([args.stow, "compile", model, "-o", bundle, "--threads", args.threads] + flags, check=True, capture_output=True)
                j = json.loads(subprocess.run([args.stow, "inspect", "--json", bundle], check=True, capture_output=True).stdout)
                arenas.append(j["arena_bytes"])
            saved = 1 - arenas[0] / arenas[4]
            name = os.path.basename(model)[:-5]
            # Lower bound under each execution order tried (default flags).
            out = subprocess.run([args.stow, "compile", model, "-o", bundle, "--threads", args.threads], check=True,
                                 capture_output=True, text=True).stdout
            orders = next((l.split("bounds:")[1] for l in out.splitlines() if "bounds:" in l), "")
            orders = re.sub(r" B \([^)]*\)", "", orders).strip(" )")
            print(f"| {name} | " + " | ".join(f"{a:,}" for a in arenas) + f" | {saved:.1%} | {orders} |", flush=True)


if __name__ == "__main__":
    main()
