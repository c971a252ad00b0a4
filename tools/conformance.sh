#!/usr/bin/env bash
# Installs the `onnx` package into a throw-away venv and runs
# tools/conformance.py against a freshly built `stow`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet onnx
cd "$root"
cargo build -q -p stow-cli
target="${CARGO_TARGET_DIR:-$root/target}"
"$venv/bin/python" tools/conformance.py --stow "$target/debug/stow" "$@"
