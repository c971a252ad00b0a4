#!/usr/bin/env python3
"""Write testdata/two_branch.inputs.npz: a seeded input for two_branch.onnx,
used by the `stow verify --inputs FILE.npz` tests. Needs numpy.

    python3 tools/gen_inputs.py
"""
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "..", "testdata", "two_branch.inputs.npz")
image = np.random.default_rng(7).standard_normal((1, 3, 24, 24)).astype(np.float32)
np.savez(path, image=image)
print(f"{path}: {os.path.getsize(path):,} bytes")
