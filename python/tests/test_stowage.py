"""Tests of the Python package `stowage` (crates/stow-py).

Every testdata model is compiled, saved, reopened and run with Stowage's
kernels, and the outputs are compared with onnxruntime on the same random
inputs; the regression cases (testdata/regress) run on their own inputs.
`inspect()` and `to_html()` are compared with `stow inspect --json` and
`--html` of the same bundle file, and the error messages with the ones the
`stow` binary prints. `tools/python_test.sh` builds the package and the
binary (STOW_BIN) and runs this file.
"""

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

import stowage

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = ROOT / "testdata"
REGRESS = TESTDATA / "regress"

# Largest error accepted, relative to the output's scale (as
# crates/stow-cli/tests/regress.rs).
TOLERANCE = 1e-4
# An f16 output is judged to one rounding step of f16 at the output's scale:
# each runtime rounds its f16 intermediate results at different points.
F16_TOLERANCE = 2.0**-10


def tolerance(want):
    return F16_TOLERANCE if want.dtype == np.float16 else TOLERANCE

# Compile arguments some models need (their inputs have symbolic sizes).
MODEL_ARGS = {"symbolic_batch": {"dims": {"N": 2}}}


def stow_bin():
    """The `stow` binary: STOW_BIN, or a build in the cargo target dir."""
    if os.environ.get("STOW_BIN"):
        return os.environ["STOW_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("release", "debug"):
        if (target / profile / "stow").is_file():
            return str(target / profile / "stow")
    found = shutil.which("stow")
    assert found, "no stow binary: set STOW_BIN or cargo build -p stow-cli"
    return found


def stow(*args):
    return subprocess.run([stow_bin(), *map(str, args)], capture_output=True, text=True)


def cli_error(*args):
    """What `stow ARGS` prints after `error: ` (it must fail)."""
    done = stow(*args)
    assert done.returncode != 0, done.stdout
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), done.stderr
    return line[len("error: "):]


def model_names():
    return sorted(p.stem for p in TESTDATA.glob("*.onnx"))


def case_names():
    return sorted(p.name for p in REGRESS.iterdir() if (p / "model.onnx").is_file())


def random_inputs(specs, seed):
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        if dtype == np.bool_:
            value = rng.random(spec.shape) < 0.5
        elif dtype.kind in "iu":
            value = rng.integers(0, 8, size=spec.shape).astype(dtype)
        else:
            value = rng.standard_normal(spec.shape).astype(dtype)
        arrays[spec.name] = np.asarray(value, dtype=dtype)
    return arrays


def scaled_error(got, want):
    """max|got - want| / max|want| (NaNs must match; exact for ints, bools)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (
        f"{got.dtype} {got.shape}, expected {want.dtype} {want.shape}"
    )
    if want.dtype.kind in "biu":
        return 0.0 if np.array_equal(got, want) else float("inf")
    got, want = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaNs differ"
    both = ~np.isnan(want)
    same = got[both] == want[both]  # equal infinities give no error
    diff = np.abs(got[both] - want[both])
    diff = np.where(same, 0.0, diff)
    finite = want[both][np.isfinite(want[both])]
    scale = np.abs(finite).max() if finite.size else 0.0
    worst = diff.max() if diff.size else 0.0
    return float(worst / scale) if scale > 0 else float(worst)


def onnxruntime_outputs(model, inputs):
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def within_steps(got, want, steps):
    """Quantized (u8/i8) outputs may differ by `steps` integer steps where
    onnxruntime rounds in fixed point (the case's q_steps.txt)."""
    if steps and want.dtype in (np.uint8, np.int8) and got.dtype == want.dtype \
            and got.shape == want.shape:
        return int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max(initial=0)) <= steps
    return False


def assert_match(got, want, q_steps=0):
    assert list(got) == list(want), f"outputs {list(got)}, onnxruntime {list(want)}"
    for name in want:
        want_array = np.asarray(want[name])
        if within_steps(got[name], want_array, q_steps):
            continue
        error = scaled_error(got[name], want_array)
        assert error <= tolerance(want_array), f"output {name} differs by {error:.3e} of its scale"


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """The mlp model compiled and saved once: (bundle, path)."""
    path = tmp_path_factory.mktemp("mlp") / "mlp.stow"
    bundle = stowage.compile(TESTDATA / "mlp.onnx")
    bundle.save(path)
    return bundle, path


# --- compile, save, open, run -------------------------------------------


@pytest.mark.parametrize("name", model_names())
def test_model_runs_like_onnxruntime(name, tmp_path):
    model = TESTDATA / f"{name}.onnx"
    compiled = stowage.compile(model, **MODEL_ARGS.get(name, {}))
    report = compiled.report
    assert report["lower_bound_bytes"] <= report["arena_bytes"] <= report["naive_bytes"]
    assert report["ops"] > 0 and report["bundle_bytes"] > 0

    path = tmp_path / f"{name}.stow"
    compiled.save(path)
    assert path.read_bytes() == compiled.to_bytes()
    opened = stowage.Bundle.open(path)
    assert opened.path == path and opened.report is None
    assert opened.inputs == compiled.inputs and opened.outputs == compiled.outputs
    assert opened.arena_bytes == report["arena_bytes"]

    for seed in (1, 2):
        inputs = random_inputs(opened.inputs, seed)
        ours = stowage.Session(opened).run(inputs)
        assert_match(ours, onnxruntime_outputs(model, inputs))
        # Two threads and the in-memory bundle give the same bytes.
        again = stowage.Session(compiled, threads=2).run(inputs)
        for out in ours:
            assert ours[out].tobytes() == again[out].tobytes(), out
        # Weights kept row-major give the same bytes as packed ones.
        row_major = stowage.compile(model, pack_weights=False, **MODEL_ARGS.get(name, {}))
        plain = stowage.Session(row_major).run(inputs)
        for out in ours:
            assert ours[out].tobytes() == plain[out].tobytes(), out


@pytest.mark.parametrize("name", ["patch_chain", "patch_se", "patch_pad"])
def test_a_capacity_runs_stages_in_bands_like_onnxruntime(name):
    model = TESTDATA / f"{name}.onnx"
    whole = stowage.compile(model).report
    capacity = whole["arena_bytes"] // 2
    compiled = stowage.compile(model, capacity=capacity)
    report = compiled.report
    assert report["arena_bytes"] <= capacity
    assert report["stages"] and report["bound_without_stages"] == whole["lower_bound_bytes"]
    # A stage from the image reads it in bands of rows, which Session.run
    # copies in (patch_pad's stage starts after a move of its axes).
    image = next(t for t in compiled.inspect()["tensors"] if t["name"] == "image")
    from_image = any(s.startswith("image:") for s in report["stages"])
    assert image["region"] == ("rows" if from_image else "arena")
    assert from_image or name == "patch_pad"
    inputs = random_inputs(compiled.inputs, 3)
    assert_match(stowage.Session(compiled).run(inputs), onnxruntime_outputs(model, inputs))
    given = stowage.compile(model, patch=report["stages"])
    assert given.report["stages"] == report["stages"]
    assert given.report["bound_without_stages"] is None
    with pytest.raises(stowage.OptionError, match="FROM:TO:ROWS"):
        stowage.compile(model, patch=["image:features"])


def test_a_stage_through_a_gate_computes_twice_within_the_budget_like_onnxruntime():
    model = TESTDATA / "patch_se.onnx"
    whole = stowage.compile(model).report
    capacity = whole["arena_bytes"] // 3
    compiled = stowage.compile(model, capacity=capacity, max_extra_macs=100)
    report = compiled.report
    assert report["arena_bytes"] <= capacity and len(report["stages"]) == 1
    assert whole["multiply_adds"] == whole["multiply_adds_without_stages"]
    assert report["multiply_adds_without_stages"] == whole["multiply_adds"]
    assert whole["multiply_adds"] < report["multiply_adds"] <= 2 * whole["multiply_adds"]
    inputs = random_inputs(compiled.inputs, 5)
    assert_match(stowage.Session(compiled).run(inputs), onnxruntime_outputs(model, inputs))
    # The default budget (15 %) takes two stages around the gate instead.
    default = stowage.compile(model, capacity=capacity).report
    assert len(default["stages"]) == 2
    assert default["multiply_adds"] == whole["multiply_adds"]
    with pytest.raises(stowage.OptionError, match="max_extra_macs"):
        stowage.compile(model, capacity=capacity, max_extra_macs=-1)


def case_options(case):
    """`stow compile` flags of a regression case (args.txt) as keywords."""
    args = (REGRESS / case / "args.txt")
    lines = [l for l in args.read_text().splitlines() if l] if args.exists() else []
    options = {}
    for flag, value in zip(lines[::2], lines[1::2]):
        key, _, text = value.partition("=")
        if flag == "--set":
            options.setdefault("set", {})[key] = text.split(",")
        elif flag == "--input":
            options.setdefault("inputs", {})[key] = [int(d) for d in text.split("x")]
        elif flag == "--dim":
            options.setdefault("dims", {})[key] = int(text)
        else:
            raise AssertionError(f"{case}: flag {flag} not handled here")
    return options


def case_tensors(case, prefix):
    files = sorted(
        (REGRESS / case).glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1])
    )
    return [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in files]


@pytest.mark.parametrize("case", case_names())
def test_regression_case_runs_like_onnxruntime(case):
    model = REGRESS / case / "model.onnx"
    options = case_options(case)
    bundle = stowage.compile(model, **options)
    # Inputs made constants are not inputs of the bundle.
    graph = onnx.load(str(model)).graph
    initializers = {t.name for t in graph.initializer}
    names = [i.name for i in graph.input if i.name not in initializers]
    fixed = set(options.get("set", {}))
    assert [i.name for i in bundle.inputs] == [n for n in names if n not in fixed]

    arrays = dict(zip(names, case_tensors(case, "input")))
    ours = stowage.Session(bundle).run({n: arrays[n] for n in names if n not in fixed})
    # onnxruntime takes the constants as ordinary inputs.
    for key, values in options.get("set", {}).items():
        declared = next(i for i in graph.input if i.name == key).type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(declared.elem_type)
        shape = [d.dim_value for d in declared.shape.dim]
        arrays[key] = np.array(values, dtype=dtype).reshape(shape)
    steps_file = REGRESS / case / "q_steps.txt"
    q_steps = int(steps_file.read_text()) if steps_file.exists() else 0
    expected = case_tensors(case, "output")

    def close(got, want):
        return within_steps(got, want, q_steps) or scaled_error(got, want) <= tolerance(want)

    theirs = onnxruntime_outputs(model, arrays)
    # The recorded outputs are onnxruntime's on a CPU where its integer
    # products are exact. On one with AVX2 but not VNNI its u8×s8 kernels
    # add pairs of products in saturating 16-bit lanes, so its quantized
    # outputs there are off (qdq_cnn: 45 steps); then the recorded ones
    # are the only third party to compare with.
    if all(close(t, w) for t, w in zip(theirs.values(), expected)):
        assert_match(ours, theirs, q_steps)
    assert len(expected) == len(ours)
    for got, want in zip(ours.values(), expected):
        assert close(got, want)


def test_outputs_keep_their_dtypes():
    # Bool in, bool out (Pad of bool with `true`), compared bit for bit.
    bundle = stowage.compile(REGRESS / "pad_bool_with_true" / "model.onnx")
    (spec,) = bundle.inputs
    assert spec.dtype == "bool"
    inputs = random_inputs(bundle.inputs, 3)
    ours = stowage.Session(bundle).run(inputs)
    want = onnxruntime_outputs(REGRESS / "pad_bool_with_true" / "model.onnx", inputs)
    for name, value in ours.items():
        assert value.dtype == np.bool_
        assert np.array_equal(value, want[name])


def test_set_makes_an_input_a_constant():
    model = REGRESS / "if_on_a_set_input" / "model.onnx"
    with_input = stowage.compile(model)
    folded = stowage.compile(model, set={"sr": 16000})
    assert "sr" in [i.name for i in with_input.inputs]
    assert "sr" not in [i.name for i in folded.inputs]
    assert folded.report["ops"] < with_input.report["ops"]


def test_from_bytes_is_the_same_bundle(mlp):
    bundle, path = mlp
    copy = stowage.Bundle.from_bytes(path.read_bytes())
    assert copy.inspect() == bundle.inspect()
    copy.verify_weights()
    inputs = random_inputs(copy.inputs, 4)
    a, b = stowage.Session(copy).run(inputs), stowage.Session(bundle).run(inputs)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_inputs_in_any_layout_and_lists(mlp):
    bundle, _ = mlp
    (spec,) = bundle.inputs
    session = stowage.Session(bundle)
    value = random_inputs(bundle.inputs, 5)[spec.name]
    want = session.run({spec.name: value})
    # A Fortran-ordered copy and a nested list give the same result.
    fortran = np.asfortranarray(value)
    got = session.run({spec.name: fortran})
    assert all(np.array_equal(want[k], got[k]) for k in want)
    got = session.run({spec.name: value.tolist()})
    assert all(np.array_equal(want[k], got[k]) for k in want)


# --- inspect and the picture: the same as `stow inspect` -------------------


def test_inspect_is_stow_inspect_json(mlp):
    bundle, path = mlp
    done = stow("inspect", path, "--json")
    assert done.returncode == 0, done.stderr
    cli = json.loads(done.stdout)
    ours = bundle.inspect()
    assert ours == cli
    assert stowage.Bundle.open(path).inspect() == cli
    for key in ("arena_bytes", "lower_bound_bytes", "naive_bytes"):
        assert ours[key] == bundle.report[key], key
    assert ours["strategy"] == bundle.report["strategy"]
    assert ours["inputs"] == [i.name for i in bundle.inputs]
    assert {"id", "name", "kind", "offset", "size"} <= set(ours["tensors"][0])


def test_html_is_stow_inspect_html(mlp, tmp_path):
    bundle, path = mlp
    page = tmp_path / "mlp.html"
    done = stow("inspect", path, "--html", page)
    assert done.returncode == 0, done.stderr
    assert bundle.to_html() == page.read_text()
    assert bundle._repr_html_() == bundle.to_html()
    assert bundle.to_html().lstrip().lower().startswith("<!doctype html>")


def test_reports_strategy_and_comparison():
    bundle = stowage.compile(TESTDATA / "residual_cnn.onnx", strategy="greedy-size", compare=True)
    report = bundle.report
    assert report["strategy"] == "greedy-size" and not report["chosen_by_auto"]
    strategies = {row["strategy"] for row in report["comparison"]}
    assert {"naive", "greedy-size", "auto"} <= strategies
    naive = stowage.compile(TESTDATA / "residual_cnn.onnx", strategy="naive")
    assert naive.report["arena_bytes"] == naive.report["naive_bytes"]
    assert naive.report["arena_bytes"] > report["arena_bytes"]


# --- errors: the messages `stow` prints --------------------------------------


def test_missing_model_names_the_file(tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(stowage.MissingFileError) as caught:
        stowage.compile(missing)
    assert isinstance(caught.value, FileNotFoundError)
    assert isinstance(caught.value, stowage.StowageError)
    assert caught.value.filename == str(missing)
    assert caught.value.errno == errno.ENOENT
    assert str(caught.value) == cli_error("compile", missing, "-o", tmp_path / "m.stow")
    assert str(missing) in str(caught.value)


def test_missing_bundle_names_the_file(tmp_path):
    missing = tmp_path / "missing.stow"
    with pytest.raises(FileNotFoundError) as caught:
        stowage.Bundle.open(missing)
    assert caught.value.filename == str(missing)
    assert str(caught.value) == cli_error("inspect", missing)


def test_save_into_a_missing_folder(mlp, tmp_path):
    bundle, _ = mlp
    target = tmp_path / "nowhere" / "m.stow"
    with pytest.raises(stowage.MissingFileError) as caught:
        bundle.save(target)
    assert str(caught.value) == cli_error("compile", TESTDATA / "mlp.onnx", "-o", target)
    assert not target.parent.exists()


def test_not_a_bundle(tmp_path):
    bogus = tmp_path / "bogus.stow"
    bogus.write_bytes(b"not a bundle at all, just some bytes" * 4)
    with pytest.raises(stowage.BundleError) as caught:
        stowage.Bundle.open(bogus)
    assert str(caught.value) == cli_error("inspect", bogus)
    with pytest.raises(stowage.BundleError, match="is not a valid bundle"):
        stowage.Bundle.from_bytes(b"")


def test_compile_errors_are_the_cli_messages(tmp_path):
    model = TESTDATA / "mlp.onnx"
    with pytest.raises(stowage.CompileError) as caught:
        stowage.compile(model, inputs={"nope": [1, 2]})
    assert str(caught.value) == cli_error(
        "compile", model, "-o", tmp_path / "m.stow", "--input", "nope=1x2"
    )
    with pytest.raises(stowage.CompileError) as caught:
        stowage.compile(model, capacity=64)
    assert str(caught.value) == cli_error(
        "compile", model, "-o", tmp_path / "m.stow", "--capacity", "64"
    )
    assert "short" in str(caught.value) or "capacity" in str(caught.value)


def test_bad_options_are_value_errors():
    model = TESTDATA / "mlp.onnx"
    cases = [
        ({"strategy": "fastest"}, "fastest"),
        ({"align": 3}, "alignment 3 is not a power of two"),
        ({"time_limit": 0}, "not between 0 and 86400 seconds"),
        ({"dims": {"N": 0}}, "value must be positive"),
        ({"inputs": {"x": [1, -3]}}, "`-3` is not a dimension"),
        ({"set": {"x": []}}, "set `x`: no value given"),
    ]
    for options, words in cases:
        with pytest.raises(stowage.OptionError) as caught:
            stowage.compile(model, **options)
        assert isinstance(caught.value, ValueError)
        assert words in str(caught.value), (options, str(caught.value))


def test_wrong_input_name(mlp):
    bundle, _ = mlp
    (spec,) = bundle.inputs
    session = stowage.Session(bundle)
    value = random_inputs(bundle.inputs, 6)[spec.name]
    with pytest.raises(stowage.InputError) as caught:
        session.run({spec.name: value, "imagee": value})
    message = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert "no input named `imagee`" in message and f"`{spec.name}`" in message
    with pytest.raises(stowage.InputError, match=f"input `{spec.name}` .* is missing"):
        session.run({})


def test_wrong_dtype(mlp):
    bundle, _ = mlp
    (spec,) = bundle.inputs
    value = random_inputs(bundle.inputs, 7)[spec.name].astype(np.float64)
    with pytest.raises(stowage.InputError) as caught:
        stowage.Session(bundle).run({spec.name: value})
    assert str(caught.value) == (
        f"input `{spec.name}`: expected dtype float32, given float64"
    )


def test_wrong_shape(mlp):
    bundle, _ = mlp
    (spec,) = bundle.inputs
    value = np.zeros([d + 1 for d in spec.shape], dtype=np.float32)
    with pytest.raises(stowage.InputError) as caught:
        stowage.Session(bundle).run({spec.name: value})
    expected = "(" + ", ".join(str(d) for d in spec.shape) + ")"
    given = "(" + ", ".join(str(d + 1) for d in spec.shape) + ")"
    assert str(caught.value) == (
        f"input `{spec.name}`: expected shape {expected}, given {given}"
    )


def test_a_failed_run_leaves_the_session_usable(mlp):
    bundle, _ = mlp
    session = stowage.Session(bundle)
    inputs = random_inputs(bundle.inputs, 8)
    want = session.run(inputs)
    with pytest.raises(stowage.InputError):
        session.run({k: v[..., :1] for k, v in inputs.items()})
    got = session.run(inputs)
    assert all(np.array_equal(want[k], got[k]) for k in want)


# --- memory pools ------------------------------------------------------


def test_pooled_bundle_runs_bit_for_bit_like_one_arena(tmp_path):
    model = TESTDATA / "residual_cnn.onnx"
    single = stowage.compile(model)
    sram = single.arena_bytes // 4 // 64 * 64
    pooled = stowage.compile(model, pools={"sram": sram, "dram": None})
    assert [p["name"] for p in pooled.pools] == ["sram", "dram"]
    assert pooled.pools[0]["bytes"] <= sram and pooled.pools[0]["align"] == 64
    assert single.pools == [{"name": "arena", "bytes": single.arena_bytes, "align": 64}]
    report = pooled.report
    assert report["placement"] == "gain"
    assert [p["name"] for p in report["pools"]] == ["sram", "dram"]
    assert report["pools"][0]["capacity"] == sram and report["pools"][1]["capacity"] is None
    assert abs(sum(p["traffic_share"] for p in report["pools"]) - 1.0) < 1e-9
    assert 0 < report["pools"][0]["fill"] <= 1.0
    assert [p["bytes"] for p in report["pools"]] == [p["bytes"] for p in pooled.pools]
    # Each arena tensor names its pool in `inspect`, as the CLI prints it.
    tensors = [t for t in pooled.inspect()["tensors"] if t["region"] == "arena"]
    assert {t["pool"] for t in tensors} == {0, 1}

    path = tmp_path / "pooled.stow"
    pooled.save(path)
    opened = stowage.Bundle.open(path)
    assert opened.pools == pooled.pools
    inputs = random_inputs(single.inputs, 7)
    want = stowage.Session(single).run(inputs)
    for bundle in (pooled, opened):
        got = stowage.Session(bundle).run(inputs)
        for name in want:
            assert got[name].tobytes() == want[name].tobytes(), name
    assert_match(want, onnxruntime_outputs(model, inputs))
    # The picture draws one panel per pool.
    assert pooled.to_html().count('<section class="pool-panel"') == 2


def test_pools_as_pairs_pins_and_placements():
    model = TESTDATA / "residual_cnn.onnx"
    single = stowage.compile(model)
    arena = single.arena_bytes
    # Threshold placement: with room for everything in sram, only the
    # operands of steps above the threshold go to dram.
    threshold = stowage.compile(
        model, pools=[("sram", arena), ("dram", None)], placement="threshold=16384"
    )
    assert threshold.report["placement"] == "threshold=16384"
    in_dram = threshold.report["pools"][1]["buffers"]
    assert 0 < in_dram < sum(p["buffers"] for p in threshold.report["pools"])
    inputs = random_inputs(single.inputs, 8)
    want = stowage.Session(single).run(inputs)
    got = stowage.Session(threshold).run(inputs)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name
    first = stowage.compile(
        model, pools=[("sram", arena // 4 // 64 * 64), ("dram", None)], placement="first-use"
    )
    assert first.report["placement"] == "first-use"
    # A pin puts the graph output into sram.
    out = single.outputs[0].name
    pinned = stowage.compile(
        model, pools={"sram": arena, "dram": None}, pins={out: "sram"},
        placement="threshold=1",
    )
    pool_of = {t["name"]: t["pool"] for t in pinned.inspect()["tensors"]}
    assert pool_of[out] == 0


def test_bad_pools_are_value_errors():
    model = TESTDATA / "mlp.onnx"
    cases = [
        ({"pools": {"sram": None, "dram": 1024}}, "only the last may be unbounded"),
        ({"pools": [("sram", 1024), ("sram", None)]}, "must be 1 to 16 bytes"),
        ({"pools": {"sram": -1, "dram": None}}, "pool `sram`: bytes must be"),
        ({"pools": [("sram",)]}, "(name, bytes or None) pair"),
        ({"pools": "sram=1024"}, "a dict {name: bytes or None}"),
        ({"pins": {"x": "sram"}}, "no pools declared"),
        ({"pools": {"sram": 1024, "dram": None}, "placement": "fastest"}, "not a placement"),
        ({"pools": {"sram": 1024, "dram": None}, "placement": "threshold=x"}, "not a number of bytes"),
    ]
    for options, words in cases:
        with pytest.raises(stowage.OptionError) as caught:
            stowage.compile(model, **options)
        assert words in str(caught.value), (options, str(caught.value))
    # A pin to an unknown pool is the CLI's compile error.
    with pytest.raises(stowage.CompileError) as caught:
        stowage.compile(model, pools={"sram": 1024, "dram": None}, pins={"x": "tcm"})
    assert "there is no pool `tcm`" in str(caught.value)
