#!/usr/bin/env python3
"""Several pools: fast-pool fill and traffic share, per placement policy.

For each model, compiles it with `--pool sram=BYTES --pool dram` under
each placement of `--placements` (default `gain,first-use`: the default
policy and the baseline; `threshold` and `threshold=N` are method M3's
layer-group threshold), reads the pool lines `stow compile` prints, and
prints one markdown row per model and placement. BYTES is either fixed
(`--sram 524288`) or a fraction of the model's single-arena size
(`--fraction 0.25`).

    python3 tools/bench_pools.py --stow target/release/stow --fraction 0.25 \
        --placements gain,first-use,threshold \
        testdata/residual_cnn.onnx testdata/transformer_block.onnx
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

POOL = re.compile(
    r"^\s+(\S+)\s+([\d,]+) B.* of (.+?), ([\d.]+) % full at its peak, (\d+) buffers, "
    r"traffic ([\d,]+) B.*\(([\d.]+) %\)$"
)
ARENA = re.compile(r"^\s+arena\s+([\d,]+) B")


def compile_(stow, model, out, flags):
    p = subprocess.run(
        [stow, "compile", str(model), "-o", str(out), *flags],
        capture_output=True, text=True,
    )
    if p.returncode != 0:
        sys.exit(f"stow compile {model} {' '.join(flags)} failed:\n{p.stderr}")
    return p.stdout


def pools(text):
    rows = {}
    for line in text.splitlines():
        m = POOL.match(line)
        if m:
            rows[m.group(1)] = {
                "bytes": int(m.group(2).replace(",", "")),
                "fill": float(m.group(4)),
                "traffic": int(m.group(6).replace(",", "")),
                "share": float(m.group(7)),
            }
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stow", default="target/release/stow")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--sram", type=int)
    g.add_argument("--fraction", type=float)
    ap.add_argument("--flag", action="append", default=[],
                    help="extra stow compile flag (repeatable, e.g. --flag=--threads=0)")
    ap.add_argument("--placements", default="gain,first-use",
                    help="comma-separated --placement values to compare")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    print("| model | arena B | sram B | placement | sram used B | sram full at peak | "
          "traffic B | sram share | dram B |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for model in a.models:
            model = Path(model)
            single = compile_(a.stow, model, Path(d) / "one.stow", a.flag)
            arena = int(next(ARENA.match(l).group(1) for l in single.splitlines()
                             if ARENA.match(l)).replace(",", ""))
            sram = a.sram if a.sram else max(64, int(arena * a.fraction) // 64 * 64)
            for placement in a.placements.split(","):
                text = compile_(a.stow, model, Path(d) / "pooled.stow",
                                [*a.flag, "--pool", f"sram={sram}", "--pool", "dram",
                                 "--placement", placement])
                p = pools(text)
                total = p["sram"]["traffic"] + p["dram"]["traffic"]
                print(f"| {model.stem} | {arena:,} | {sram:,} | {placement} | "
                      f"{p['sram']['bytes']:,} | {p['sram']['fill']:.1f} % | {total:,} | "
                      f"{p['sram']['share']:.1f} % | {p['dram']['bytes']:,} |")


if __name__ == "__main__":
    main()
