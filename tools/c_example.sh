#!/usr/bin/env bash
# Runs a bundle from C the way a device would, and checks it against
# onnxruntime: builds the C API (crates/stow-capi, release static library)
# and `stow`, compiles testdata/residual_cnn.onnx into a bundle, builds
# examples/c/run.c with the system C compiler against libstow_capi.a and
# include/stowage.h (the static arena sized to the bundle's exact arena),
# and runs it twice: on the mapped file, and on the file's bytes opened in
# place; then the same for a bundle split across two memory pools
# (--pool sram=... --pool dram: one buffer per pool). The output must
# match testdata/c_example/residual_cnn.expected.f32 (onnxruntime's,
# tools/gen_c_example.py). Exit 0 on match.
#
# $CC picks the compiler (default cc); $CARGO_TARGET_DIR is respected.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
cc="${CC:-cc}"
cd "$root"

# The same selection as the README's `cargo test --workspace --release`:
# cargo resolves features per selection, so building one package alone
# would build tract a second time with other features.
cargo build -q --release --workspace --all-targets
lib="$target/release/libstow_capi.a"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bundle="$work/residual_cnn.stow"
"$target/release/stow" compile testdata/residual_cnn.onnx -o "$bundle" >/dev/null
arena_bytes="$("$target/release/stow" inspect --json "$bundle" |
  sed -n 's/^ *"arena_bytes": *\([0-9]*\),*$/\1/p')"
if [ -z "$arena_bytes" ]; then
  echo "c_example: cannot read the arena size of $bundle" >&2
  exit 1
fi

"$cc" -std=c11 -Wall -Wextra -Werror -pedantic -O2 \
  -I crates/stow-capi/include -DRUN_ARENA_BYTES="$arena_bytes" \
  examples/c/run.c "$lib" -lpthread -ldl -lm -o "$work/run"

data=testdata/c_example
echo "libstow_capi.a $(wc -c <"$lib") bytes, run $(wc -c <"$work/run") bytes"
"$work/run" "$bundle" "$data/residual_cnn.input.f32" "$data/residual_cnn.expected.f32"
"$work/run" --from-bytes "$bundle" "$data/residual_cnn.input.f32" "$data/residual_cnn.expected.f32"
# The same model with its arena split across a fast pool of a quarter of
# the arena (pool 0, in the static buffer) and a slow one (the heap):
# stow_session_create_in_pools, checked against the same expected output.
pooled="$work/residual_cnn_pools.stow"
"$target/release/stow" compile testdata/residual_cnn.onnx -o "$pooled" \
  --pool "sram=$((arena_bytes / 4 / 64 * 64))" --pool dram >/dev/null
"$work/run" "$pooled" "$data/residual_cnn.input.f32" "$data/residual_cnn.expected.f32"
"$work/run" --from-bytes "$pooled" "$data/residual_cnn.input.f32" "$data/residual_cnn.expected.f32"
