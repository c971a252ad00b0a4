#!/usr/bin/env python3
"""Open `stow inspect --html` pages in headless Chromium and check them.

For each bundle (or ONNX model, compiled first) the script writes the HTML
picture, then with Debian's `chromium` package:

1. takes a screenshot of the whole arena and one zoomed on the peak step
   (`page.html#peak`), and checks that each shows the tensors' colours
   (the page drew something, not a blank or an error page);
2. reads back the page's own timing of 30 redraws at several zoom levels
   (`page.html#bench`) and fails if one redraw takes longer than a frame
   budget (default 50 ms), so pages of thousands of tensors stay usable.

`--synthetic N` also builds an N-node ONNX chain with branches (needs the
`onnx` package) to try a page of several thousand tensors.

Not run in CI (it needs chromium: `apt-get install chromium`).

    python3 tools/check_html.py [--out DIR] [--stow BIN] [--synthetic 3000] [MODEL.onnx|BUNDLE.stow ...]

With no inputs it uses testdata/residual_cnn.onnx and
testdata/transformer_block.onnx.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Fill colours of the op kinds (crates/stow-cli/src/picture/layout.rs).
KIND_COLOURS = {
    (0x8C, 0x8C, 0x8C), (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C),
    (0x94, 0x67, 0xBD), (0x17, 0xBE, 0xCF), (0xE3, 0x77, 0xC2), (0xBC, 0xBD, 0x22),
}


def fail(msg):
    print(f"check_html: {msg}", file=sys.stderr)
    sys.exit(1)


def stow_binary(given):
    if given:
        return given
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "stow-cli"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "stow")


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    fail("no chromium found (Debian: apt-get install chromium)")


def run_chromium(browser, url, *extra):
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--virtual-time-budget=5000", "--window-size=1400,850", *extra, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def read_png(path):
    """Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium
    writes) into (width, height, rows of bytes, bytes per pixel)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace:
                fail(f"{path}: unsupported PNG (depth {depth}, colour {colour})")
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def kind_pixels(path):
    """Pixels of the screenshot that have an op kind's exact colour."""
    width, height, rows, bpp = read_png(path)
    count = 0
    for row in rows:
        for x in range(0, width * bpp, bpp * 2):
            if (row[x], row[x + 1], row[x + 2]) in KIND_COLOURS:
                count += 1
    return count


def synthetic_model(path, n):
    """An N-node chain with a skip connection every few nodes, so lifetimes
    differ and the planner has reuse to find."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width = 64
    nodes, inits = [], []
    prev, skip = "x", "x"
    for i in range(n):
        out = f"t{i}"
        if i % 5 == 4:
            nodes.append(helper.make_node("Add", [prev, skip], [out], name=f"add{i}"))
            skip = out
        elif i % 5 == 0:
            w = f"w{i}"
            inits.append(numpy_helper.from_array(np.full((width, width), 0.01, np.float32), w))
            nodes.append(helper.make_node("MatMul", [prev, w], [out], name=f"mm{i}"))
        else:
            nodes.append(helper.make_node("Relu" if i % 2 else "Sigmoid", [prev], [out], name=f"act{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8 + n % 7, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="*")
    ap.add_argument("--out", help="folder for pages and screenshots (default: a temporary one)")
    ap.add_argument("--synthetic", type=int, default=0, metavar="N",
                    help="also check an N-node synthetic chain")
    ap.add_argument("--stow", help="the stow binary to use (default: build target/release/stow)")
    ap.add_argument("--max-draw-ms", type=float, default=50.0)
    args = ap.parse_args()

    out = args.out or tempfile.mkdtemp(prefix="stow-html-")
    os.makedirs(out, exist_ok=True)
    inputs = args.inputs or [os.path.join(ROOT, "testdata", m)
                             for m in ("residual_cnn.onnx", "transformer_block.onnx")]
    if args.synthetic:
        model = os.path.join(out, f"chain{args.synthetic}.onnx")
        synthetic_model(model, args.synthetic)
        inputs.append(model)
    stow, browser = stow_binary(args.stow), chromium()

    for item in inputs:
        name = os.path.splitext(os.path.basename(item))[0]
        bundle = item
        if item.endswith(".onnx"):
            bundle = os.path.join(out, name + ".stow")
            subprocess.run([stow, "compile", item, "-o", bundle], check=True,
                           stdout=subprocess.DEVNULL)
        page = os.path.join(out, name + ".html")
        subprocess.run([stow, "inspect", bundle, "--html", page], check=True)
        url = "file://" + os.path.abspath(page)
        for suffix, hash_ in (("", ""), ("-peak", "#peak")):
            shot = os.path.join(out, f"{name}{suffix}.png")
            r = run_chromium(browser, url + hash_, f"--screenshot={shot}")
            if not os.path.exists(shot):
                fail(f"{name}: chromium wrote no screenshot: {r.stderr.strip()[-500:]}")
            coloured = kind_pixels(shot)
            if coloured < 500:
                fail(f"{name}{hash_}: only {coloured} tensor-coloured pixels in {shot}")
            print(f"{name}{hash_}: screenshot {shot} ({coloured} tensor pixels)")
        dom = run_chromium(browser, url + "#bench", "--dump-dom").stdout
        ready = re.search(r'data-ready="1"', dom)
        bench = re.search(r'data-bench-ms="([0-9.]+)"', dom)
        if not ready or not bench:
            fail(f"{name}: the page's script did not finish (no data-ready / data-bench-ms)")
        ms = float(bench.group(1))
        embedded = dom.split('type="application/json">', 1)[-1].split("</script>", 1)[0]
        tensors = len(json.loads(embedded)["blocks"])
        print(f"{name}: {tensors} arena tensors, {ms:.2f} ms per redraw")
        if ms > args.max_draw_ms:
            fail(f"{name}: {ms:.1f} ms per redraw is over {args.max_draw_ms} ms")
    print(f"check_html: ok ({out})")


if __name__ == "__main__":
    main()
