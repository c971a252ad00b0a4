#!/usr/bin/env python3
"""Latency and peak resident memory of `stow run` vs tract vs onnxruntime.

For each model and thread count, the three runners are started in turn,
ROUNDS times (interleaved, so that drift of the machine's speed hits all
three alike); each process loads the model, runs it once to warm up, then
REPEAT times, and prints its median latency. Peak resident memory is the
process's maximum RSS from GNU time (`/usr/bin/time -v`): the whole
process, binary and inputs included. The table gives the median over the
rounds of each runner's median, and ratios to tract.

    python3 tools/export_models.py --only mobilenet_v2,resnet50,bert_base
    cargo build --release --workspace --all-targets
    python3 tools/bench_runtime.py [--rounds 3] [--repeat 10] [--python PY]

PY must have onnxruntime and numpy (default: ~/.venvs/stow-export/bin/python).

Quantized models (tools/quant_models.py --exported --work W keeps them):
`--runners stow,onnxruntime` leaves tract out, and `--stow-base BIN` adds a
second stow binary (a build before a change) to the same interleaved
rounds, each binary running the bundle it compiled itself:

    python3 tools/bench_runtime.py --models DIR --only mobilenet_v2_qdq_per_channel \
        --runners stow,onnxruntime --stow-base /path/to/old/stow
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

LATENCY = re.compile(r"([0-9.]+) ms \(median")
RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def timed(cmd):
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return float(LATENCY.search(p.stdout).group(1)), int(RSS.search(p.stderr).group(1)) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=os.environ.get("STOW_MODELS_DIR", os.path.expanduser("~/.cache/stowage/models")))
    parser.add_argument("--only", default="mobilenet_v2,resnet50,bert_base")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--stow", default="target/release/stow")
    parser.add_argument("--tract", default="target/release/examples/tract_latency")
    parser.add_argument("--python", default=os.path.expanduser("~/.venvs/stow-export/bin/python"))
    parser.add_argument("--runners", default="stow,tract,onnxruntime")
    parser.add_argument("--stow-base", help="a second stow binary, measured in the same rounds as `stow base`")
    args = parser.parse_args()
    runners = args.runners.split(",") + (["stow base"] if args.stow_base else [])
    here = os.path.dirname(os.path.abspath(__file__))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            model = os.path.join(args.models, f"{name}.onnx")
            bundle = os.path.join(tmp, f"{name}.stow")
            subprocess.run([args.stow, "compile", model, "-o", bundle], check=True, capture_output=True)
            base_bundle = os.path.join(tmp, f"{name}.base.stow")
            if args.stow_base:
                subprocess.run([args.stow_base, "compile", model, "-o", base_bundle], check=True,
                               capture_output=True)
            info = json.loads(subprocess.run([args.stow, "inspect", "--json", bundle], check=True,
                                             capture_output=True, text=True).stdout)
            by_name = {t["name"]: t for t in info["tensors"] if t["kind"] == "input"}
            specs = [by_name[n] for n in info["inputs"]]
            inputs_json = os.path.join(tmp, f"{name}.inputs.json")
            json.dump(specs, open(inputs_json, "w"))
            for threads in [int(t) for t in args.threads.split(",")]:
                commands = {
                    "stow": [args.stow, "run", bundle, "--threads", str(threads), "--repeat", str(args.repeat)],
                    "stow base": [args.stow_base, "run", base_bundle, "--threads", str(threads),
                                  "--repeat", str(args.repeat)],
                    "tract": [args.tract, model, bundle, str(args.repeat), str(threads)],
                    "onnxruntime": [args.python, os.path.join(here, "ort_latency.py"), model, inputs_json,
                                    str(args.repeat), str(threads)],
                }
                got = {r: [] for r in runners}
                for _ in range(args.rounds):
                    for r in runners:
                        got[r].append(timed(commands[r]))
                med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
                       for k, v in got.items()}
                rows.append((name, threads, info["arena_bytes"], med))
                print(f"{name} x{threads}: " + ", ".join(f"{k} {v[0]:.1f} ms {v[1]:.0f} MiB" for k, v in med.items()),
                      file=sys.stderr)
    if runners != ["stow", "tract", "onnxruntime"]:
        print("| model | threads | " + " | ".join(runners) + " | stow / onnxruntime |")
        print("|---|---:|" + "---:|" * (len(runners) + 1))
        for name, threads, arena, m in rows:
            ratio = (f"{m['stow'][0] / m['onnxruntime'][0]:.2f}×"
                     if "stow" in m and "onnxruntime" in m else "")
            print(f"| {name} | {threads} | " + " | ".join(f"{m[r][0]:.2f} ms" for r in runners) + f" | {ratio} |")
        return
    print("| model | threads | stow run | tract | onnxruntime | stow / tract | peak RSS stow | tract | onnxruntime |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, threads, arena, m in rows:
        print(f"| {name} | {threads} | {m['stow'][0]:.1f} ms | {m['tract'][0]:.1f} ms | {m['onnxruntime'][0]:.1f} ms "
              f"| {m['stow'][0] / m['tract'][0]:.2f}× | {m['stow'][1]:.0f} MiB | {m['tract'][1]:.0f} MiB "
              f"| {m['onnxruntime'][1]:.0f} MiB |")


if __name__ == "__main__":
    main()
