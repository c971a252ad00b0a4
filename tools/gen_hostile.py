#!/usr/bin/env python3
"""Generate the hostile-input models of testdata/hostile/ (external data).

Each model is y = x + w for x: float[4], with w stored as external data:

- external_ok.onnx: w in external_ok.weights beside the model (valid);
- external_escape.onnx: location ../../etc/passwd;
- external_absolute.onnx: location /etc/passwd;
- external_past_end.onnx: offset and length beyond the side file's end;
- external_missing.onnx: a side file that does not exist.

    python3 tools/gen_hostile.py [--out testdata/hostile]

Needs the `onnx` Python package.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper


def model(location, offset=None, length=None):
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([4])
    w.data_location = TensorProto.EXTERNAL
    for key, value in [("location", location), ("offset", offset), ("length", length)]:
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, str(value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[w],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "testdata", "hostile"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    weights = np.array([1.0, 2.0, 3.0, 4.0], dtype="<f4").tobytes()
    with open(os.path.join(args.out, "external_ok.weights"), "wb") as f:
        f.write(b"\0" * 16 + weights)
    cases = {
        "external_ok": model("external_ok.weights", 16, 16),
        "external_escape": model("../../etc/passwd", 0, 16),
        "external_absolute": model("/etc/passwd", 0, 16),
        "external_past_end": model("external_ok.weights", 24, 16),
        "external_missing": model("no_such_file.weights", 0, 16),
    }
    for name, m in cases.items():
        # No onnx.checker here: the hostile ones are meant to be wrong.
        with open(os.path.join(args.out, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())


if __name__ == "__main__":
    main()
