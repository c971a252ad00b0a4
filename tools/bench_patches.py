#!/usr/bin/env python3
"""Patch-based execution, measured: each model compiled whole and under a
capacity (`stow compile --capacity`), side by side.

For each model: the whole bundle's arena (its layer-wise bound), the
capacity asked for (a fraction of that bound unless given), the stage the
compiler chose, the patched bundle's arena and bound, the multiply-adds of
convolutions and products in both bundles (counted from the bundles' own
operators, so "extra MACs" is measured, not assumed), and the latency of
both, `stow run --repeat N` interleaved over several rounds (fastest of
each), with the ratio. `stow verify` must pass on every patched bundle.

    python3 tools/bench_patches.py --stow target/release/stow \
        --models ~/.cache/stowage/models --only mobilenet_v2,resnet50 \
        [--fraction 0.5] [--capacity mobilenet_v2=1572864] [--rounds 3] [--repeat 10]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p.stdout


def macs(stow, bundle):
    """Multiply-adds of Conv and EinSum steps: output elements times the
    depth each sums over (weights' elements per output channel)."""
    d = json.loads(run([stow, "inspect", "--json", bundle]))
    tensors = d["tensors"]
    total = 0
    for op in d["ops"]:
        if op["op_type"] not in ("Conv", "EinSum") or len(op["inputs"]) < 2:
            continue
        out = tensors[op["outputs"][0]]["shape"]
        w = tensors[op["inputs"][1]]["shape"]
        n_out = 1
        for x in out:
            n_out *= x
        w_elems = 1
        for x in w:
            w_elems *= x
        # Depth per output: weight elements per output channel (the
        # weight's first axis for a convolution, its `o` axis for a 1x1
        # product written `oi`).
        channels = w[0] if w else 1
        total += n_out * (w_elems // max(channels, 1))
    return total


def fastest(stow, bundle, repeat):
    out = run([stow, "run", bundle, "--repeat", str(repeat)])
    m = re.search(r"fastest ([0-9.]+) ms", out)
    return float(m.group(1))


def compile_report(stow, model, out, extra):
    text = run([stow, "compile", model, "-o", out] + extra)
    arena = int(re.search(r"arena +([0-9,]+) B", text).group(1).replace(",", ""))
    bound = int(re.search(r"lower bound +([0-9,]+) B", text).group(1).replace(",", ""))
    stage = re.search(r"patched stage +(.*)", text)
    return arena, bound, stage.group(1) if stage else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stow", required=True)
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/stowage/models"))
    ap.add_argument("--only", default="mobilenet_v2,mnasnet1_0,efficientnet_b0,mobilenet_v3_small,resnet50")
    ap.add_argument("--fraction", type=float, default=0.5, help="capacity as a fraction of the whole bundle's bound")
    ap.add_argument("--capacity", action="append", default=[], metavar="MODEL=BYTES")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    given = dict(c.split("=") for c in args.capacity)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            model = os.path.join(args.models, name + ".onnx")
            if not os.path.exists(model):
                print(f"{name}: no {model}, skipped", file=sys.stderr)
                continue
            whole = os.path.join(tmp, name + ".stow")
            arena_w, bound_w, _ = compile_report(args.stow, model, whole, [])
            capacity = int(given.get(name, int(bound_w * args.fraction)))
            patched = os.path.join(tmp, name + ".patched.stow")
            try:
                arena_p, bound_p, stage = compile_report(
                    args.stow, model, patched, ["--capacity", str(capacity)])
            except RuntimeError as e:
                rows.append((name, bound_w, capacity, None, None, None, None, None, None, str(e).splitlines()[-1]))
                continue
            verify = run([args.stow, "verify", model, patched]).strip().splitlines()[-1]
            if not verify.startswith("PASS"):
                raise RuntimeError(f"{name}: verify: {verify}")
            mw, mp = macs(args.stow, whole), macs(args.stow, patched)
            tw, tp = [], []
            for _ in range(args.rounds):
                tw.append(fastest(args.stow, whole, args.repeat))
                tp.append(fastest(args.stow, patched, args.repeat))
            rows.append((name, bound_w, capacity, arena_p, bound_p, mw, mp, min(tw), min(tp), stage))
    print("| model | layer-wise bound | capacity | patched arena | patched bound | arena / bound whole | MACs whole | extra MACs | latency whole | latency patched | ratio | stage |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, bw, cap, ap_, bp, mw, mp, tw, tp, stage in rows:
        if ap_ is None:
            print(f"| {name} | {bw:,} | {cap:,} | — | — | — | — | — | — | — | — | {stage} |")
            continue
        extra = (mp - mw) / mw * 100 if mw else 0.0
        print(f"| {name} | {bw:,} | {cap:,} | {ap_:,} | {bp:,} | {bw / ap_:.2f}× | {mw / 1e6:.0f} M | {extra:+.1f} % "
              f"| {tw:.1f} ms | {tp:.1f} ms | {tp / tw:.2f}× | {stage} |")


if __name__ == "__main__":
    main()
