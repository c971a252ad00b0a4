#!/usr/bin/env python3
"""Stowage's planner against omnimalloc's allocators, side by side in one run.

Instances: the MiniMalloc challenging traces in testdata/planning, and the
planning problems of the exported models (`stow compile --dump-problem`,
sizes rounded up to the 64-byte alignment so that every planner solves the
same problem with alignment 1). For each instance the script runs
`stow plan` (auto and greedy-size, and search within the capacity for the
MiniMalloc traces) and every omnimalloc allocator under the same time
limit, validates every layout pairwise (numpy, independent of both), and
prints Markdown tables: arena and time per planner, and ours against the
best of omnimalloc.

    cargo build --release -p stow-cli
    python3 tools/export_models.py              # once, for the model rows
    python3 tools/bench_planner.py --stow target/release/stow [--time-limit 3]

omnimalloc comes from the Python package index; when it is not importable
the script installs it into a virtual environment under
~/.cache/stowage/plannerenv and re-runs itself there.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

VENV = os.path.expanduser("~/.cache/stowage/plannerenv")
ALIGN = 64

OMNI_ALLOCATORS = [
    "naive", "greedy_by_size", "greedy_by_area", "greedy_by_duration", "greedy_by_conflict",
    "greedy_by_conflict_size", "greedy_by_start", "greedy_by_all", "best_fit",
    "hill_climb", "simulated_annealing", "tabu_search", "genetic", "telamalloc",
    "supermalloc", "omni",
]


def ensure_omnimalloc():
    try:
        import omnimalloc  # noqa: F401
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("STOW_BENCH_REEXEC"):
        sys.exit("omnimalloc is still not importable after installing it")
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "omnimalloc[all]", "numpy"], check=True)
    env = dict(os.environ, STOW_BENCH_REEXEC="1")
    os.execve(py, [py] + sys.argv, env)


def read_trace(path):
    rows = []
    with open(path) as f:
        header = None
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if header is None:
                header = line.split(",")
                if header != ["id", "lower", "upper", "size"]:
                    return None
                continue
            i, lo, hi, size = line.split(",")
            rows.append((int(i), int(lo), int(hi), int(size)))
    return rows


def write_trace(path, rows):
    with open(path, "w") as f:
        f.write("id,lower,upper,size\n")
        for r in rows:
            f.write("%d,%d,%d,%d\n" % r)


def check_layout(rows, offsets):
    """Pairwise: no two buffers live together share a byte. Returns the arena."""
    import numpy as np
    lo = np.array([r[1] for r in rows]); hi = np.array([r[2] for r in rows])
    size = np.array([r[3] for r in rows]); off = np.array(offsets)
    for i in range(len(rows)):
        t = (lo[i] < hi) & (lo < hi[i]) & (size > 0) & (size[i] > 0)
        s = (off[i] < off + size) & (off < off[i] + size[i])
        both = t & s
        both[i] = False
        if both.any():
            j = int(np.argmax(both))
            raise AssertionError(f"buffers {rows[i][0]} and {rows[j][0]} overlap")
    return int((off + size).max()) if len(rows) else 0


def max_live(rows):
    events = {}
    for _, lo, hi, size in rows:
        if lo < hi:
            events[lo] = events.get(lo, 0) + size
            events[hi] = events.get(hi, 0) - size
    live = best = 0
    for t in sorted(events):
        live += events[t]
        best = max(best, live)
    return best


def run_stow(stow, path, rows, strategy, time_limit, capacity=None):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.csv")
        cmd = [stow, "plan", path, "--strategy", strategy, "--time-limit", str(time_limit), "-o", out]
        if capacity:
            cmd += ["--capacity", str(capacity)]
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            return None, wall, p.stderr.strip().splitlines()[-1]
        offsets = {}
        with open(out) as f:
            next(f)
            for line in f:
                fields = line.strip().split(",")
                offsets[int(fields[0])] = int(fields[-1])
        arena = check_layout(rows, [offsets[r[0]] for r in rows])
        m = re.search(r"strategy ([a-z-]+)", p.stdout)
        return arena, wall, m.group(1) if m else ""


def run_omni(name, rows, time_limit):
    import omnimalloc
    from omnimalloc.allocators import BaseAllocator
    allocs = [omnimalloc.Allocation(id=r[0], size=r[3], start=r[1], end=r[2]) for r in rows]
    t = time.perf_counter()
    try:
        cls = BaseAllocator.resolve(name)
        try:
            allocator = cls(timeout=time_limit) if isinstance(cls, type) else cls
        except TypeError:
            allocator = cls() if isinstance(cls, type) else cls
        t = time.perf_counter()
        placed = omnimalloc.allocate(allocs, allocator)
    except Exception as e:  # a failed competitor is reported, not fatal
        return None, time.perf_counter() - t, f"{type(e).__name__}: {e}"[:60]
    wall = time.perf_counter() - t
    by_id = {a.id: a.offset for a in placed}
    arena = check_layout(rows, [by_id[r[0]] for r in rows])
    return arena, wall, ""


def instances(args, tmp):
    for path in sorted(glob.glob(os.path.join(args.traces, "minimalloc-challenging", "*.csv"))):
        name = "minimalloc " + os.path.basename(path).split(".")[0]
        yield name, path, read_trace(path), 1048576
    models = sorted(glob.glob(os.path.join(args.models, "*.onnx")))
    for model in models:
        base = os.path.basename(model)[:-5]
        dump = os.path.join(tmp, base + ".raw.csv")
        p = subprocess.run([args.stow, "compile", model, "-o", os.path.join(tmp, base + ".stow"),
                            "--strategy", "naive", "--dump-problem", dump],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"<!-- {base}: compile failed: {p.stderr.strip()} -->")
            continue
        rows = read_trace(dump)
        if rows is None:
            continue
        rows = [(i, lo, hi, -(-size // ALIGN) * ALIGN) for i, lo, hi, size in rows]
        path = os.path.join(tmp, base + ".csv")
        write_trace(path, rows)
        yield base, path, rows, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stow", default="target/release/stow")
    parser.add_argument("--time-limit", type=float, default=3.0)
    parser.add_argument("--traces", default=os.path.join(os.path.dirname(__file__), "../testdata/planning"))
    parser.add_argument("--models", default=os.environ.get("STOW_MODELS_DIR", os.path.expanduser("~/.cache/stowage/models")))
    parser.add_argument("--allocators", default=",".join(OMNI_ALLOCATORS))
    args = parser.parse_args()
    ensure_omnimalloc()
    import omnimalloc
    omni = [a for a in args.allocators.split(",") if a in omnimalloc.available_allocators()]
    summary = []
    print(f"omnimalloc {omnimalloc.__version__}; time limit {args.time_limit} s per planner; "
          f"arena in bytes, time in seconds (wall, including process start for stow)\n")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, rows, capacity in instances(args, tmp):
            bound = max_live(rows)
            results = []
            ours = [("stow auto", "auto", None), ("stow greedy-size", "greedy-size", None)]
            if capacity:
                ours.append((f"stow search --capacity {capacity}", "search", capacity))
            for label, strategy, cap in ours:
                limit = 60 if cap else args.time_limit
                arena, wall, note = run_stow(args.stow, path, rows, strategy, limit, cap)
                results.append((label, arena, wall, note, True))
            for a in omni:
                arena, wall, note = run_omni(a, rows, args.time_limit)
                results.append(("omnimalloc " + a, arena, wall, note, False))
            print(f"### {name}: {len(rows)} buffers, lower bound {bound:,}\n")
            print("| planner | arena | / bound | time s | note |")
            print("|---|---:|---:|---:|---|")
            for label, arena, wall, note, _ in sorted(results, key=lambda r: (r[1] is None, r[1] or 0, r[2])):
                shown = f"{arena:,}" if arena is not None else "failed"
                ratio = f"{arena / bound:.4f}" if arena and bound else ""
                print(f"| {label} | {shown} | {ratio} | {wall:.3f} | {note} |")
            print()
            auto = next(r for r in results if r[0] == "stow auto")
            theirs = [r for r in results if not r[4] and r[1] is not None]
            best = min(theirs, key=lambda r: (r[1], r[2])) if theirs else None
            summary.append((name, bound, auto, best))
    print("### Summary: stow auto against the best omnimalloc allocator\n")
    print("| instance | lower bound | stow auto | time s | best omnimalloc | its arena | time s | ours / theirs |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for name, bound, auto, best in summary:
        if best is None or auto[1] is None:
            print(f"| {name} | {bound:,} | {auto[1]} | {auto[2]:.3f} | none | | | |")
            continue
        print(f"| {name} | {bound:,} | {auto[1]:,} | {auto[2]:.3f} | {best[0].split()[-1]} | "
              f"{best[1]:,} | {best[2]:.3f} | {auto[1] / best[1]:.4f} |")


if __name__ == "__main__":
    main()
