#!/usr/bin/env bash
# Runs the README's first command in a scratch directory and checks that the
# bundle it writes can be inspected as JSON.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$root"
# The binary of the README's test build (the same cargo selection, so
# nothing is built twice); the command's `cargo run` part is cargo's.
cargo build -q --release --workspace --all-targets
stow="${CARGO_TARGET_DIR:-$root/target}/release/stow"
cmd="$(grep -m1 '^cargo run .* compile testdata/' README.md)"
cmd="${cmd//residual_cnn.stow/$scratch/residual_cnn.stow}"
cmd="${cmd//cargo run --release -q -p stow-cli --/$stow}"
echo "+ $cmd"
eval "$cmd" > "$scratch/out.txt"
grep -q "tensors" "$scratch/out.txt"
"$stow" inspect --json "$scratch/residual_cnn.stow" > "$scratch/out.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["arena_bytes"] >= j["lower_bound_bytes"] > 0' "$scratch/out.json"
echo "smoke: ok"
