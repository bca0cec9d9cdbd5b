#!/usr/bin/env bash
# Build every Lambda of the workspace as a provided.al2023 zip with cargo-lambda (from the venv,
# which also brings zig as the cross-linker), then copy the zips to target/lambda/<name>/ where
# infra/terraform looks for them. arm64 by default; ARCH=x86_64 when the arm64 target cannot be
# had on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${ARCH:-arm64}"
if [[ "$arch" == arm64 ]] && ! rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1; then
  echo "build-lambdas: the aarch64 target cannot be installed here; building x86_64 instead" >&2
  arch=x86_64
fi
flag="--arm64"; [[ "$arch" == x86_64 ]] && flag="--x86-64"
functions=(); for dir in functions/*/; do functions+=("$(basename "$dir")"); done
args=(); for f in "${functions[@]}"; do args+=(--bin "$f"); done
cargo lambda build --release "$flag" --output-format zip "${args[@]}"
target="${CARGO_TARGET_DIR:-target}"
for f in "${functions[@]}"; do
  mkdir -p "target/lambda/$f"
  if [[ "$target/lambda/$f/bootstrap.zip" != "target/lambda/$f/bootstrap.zip" ]]; then
    cp "$target/lambda/$f/bootstrap.zip" "target/lambda/$f/bootstrap.zip"
  fi
  echo "target/lambda/$f/bootstrap.zip ($arch)"
done
