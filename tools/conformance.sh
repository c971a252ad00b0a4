#!/usr/bin/env bash
# Builds `stow` (release), installs the `onnx` package into a throw-away
# venv and runs tools/conformance.py: the model suites the onnx wheel ships
# and the generated node suite. Arguments go to conformance.py
# (`--suite node`, `--only SUBSTR`, `--json FILE`, `--update-known`, ...).
#
# onnx is pinned: the node suite's cases (and so tools/conformance-known.txt)
# change with its version. STOW_CONFORMANCE_PYTHON=/path/to/python skips the
# venv and uses that interpreter (it needs onnx and numpy).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
onnx_version="1.23.2"
python="${STOW_CONFORMANCE_PYTHON:-}"
if [ -z "$python" ]; then
  venv="$(mktemp -d)/venv"
  trap 'rm -rf "$(dirname "$venv")"' EXIT
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "onnx==$onnx_version" numpy
  python="$venv/bin/python"
fi
cd "$root"
# The same selection as the README's `cargo test --workspace --release`:
# cargo resolves features per selection, so building one package alone
# would build tract a second time with other features.
cargo build -q --release --workspace --all-targets
target="${CARGO_TARGET_DIR:-$root/target}"
"$python" tools/conformance.py --stow "$target/release/stow" "$@"
