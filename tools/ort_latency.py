#!/usr/bin/env python3
"""The onnxruntime side of the runtime benchmark (tools/bench_runtime.py).

Runs MODEL with onnxruntime on constant inputs (floats 0.5, integers 1:
valid token ids and mask values) with the input shapes of BUNDLE's
`stow inspect --json`, REPEAT times after one warm-up, and prints the
median and fastest latency in the form the other two runners use.

    python3 tools/ort_latency.py MODEL.onnx INPUTS.json REPEAT THREADS
"""
import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    model, inputs_json, repeat, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    specs = json.load(open(inputs_json))
    feeds = {}
    for meta, spec in zip(sess.get_inputs(), specs):
        shape = spec["shape"]
        if "int" in meta.type:
            feeds[meta.name] = np.ones(shape, dtype=np.int64)
        else:
            feeds[meta.name] = np.full(shape, 0.5, dtype=np.float32)
    sess.run(None, feeds)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    print(f"onnxruntime {ort.__version__}: {statistics.median(times) * 1e3:.3f} ms "
          f"(median of {repeat} runs, fastest {min(times) * 1e3:.3f} ms, {threads} threads)")


if __name__ == "__main__":
    main()
