#!/usr/bin/env bash
# Builds and installs the Python package `stowage` (crates/stow-py, through
# maturin: `pip install .` at the repository root) into a venv and runs its
# tests (python/tests) with pytest, which compare Session.run with
# onnxruntime on the testdata models.
#
# The venv is kept between runs (STOW_VENV, default
# ~/.cache/stowage/py-venv) so the Python packages are installed once; the
# extension is rebuilt each time in the shared cargo target directory
# ($CARGO_TARGET_DIR or target/), whose release dependencies the rest of CI
# has built already. Arguments go to pytest (`-k inspect`, `-x`, ...).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${STOW_VENV:-$HOME/.cache/stowage/py-venv}"
# Pinned so that a kept venv and a fresh one test the same thing.
packages=(
  "maturin==1.16.0"
  "numpy==2.3.5"
  "onnx==1.23.2"
  "onnxruntime==1.31.1"
  "pytest==8.4.2"
)
stamp="$venv/.stowage-packages"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "${packages[*]}" ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
  echo "${packages[*]}" >"$stamp"
fi
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
# The same selection as the README's `cargo test --workspace --release`:
# cargo resolves features per selection, so building one package alone
# would build tract a second time with other features.
cargo build -q --release --workspace --all-targets
export STOW_BIN="$CARGO_TARGET_DIR/release/stow"
# maturin comes from the venv (the build backend runs it from PATH), so no
# isolated build environment is needed.
export PATH="$venv/bin:$PATH"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
"$venv/bin/python" -m pytest -q python/tests "$@"
