#!/usr/bin/env bash
# Build every Lambda of the workspace as a provided.al2023 zip with cargo-lambda (from the venv,
# which also brings zig as the cross-linker), then copy the zips to target/lambda/<name>/ where
# infra/terraform looks for them. arm64 by default (the module's `architecture` default);
# ARCH=x86_64 builds for x86_64 Lambdas (set `architecture = "x86_64"` in the module to match).
# PROFILE=zip-check (what `make test` uses) builds the same zips unoptimised, in a third of the
# CPU time: for testing packaging and start-up, never for deploying.
set -euo pipefail
cd "$(dirname "$0")/../.."
arch="${ARCH:-arm64}"
profile="${PROFILE:-release}"
case "$profile" in
  release|zip-check) ;;
  *) echo "build-lambdas: bad PROFILE=$profile: allowed are release, zip-check" >&2; exit 2 ;;
esac
case "$arch" in
  arm64)
    if ! rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1; then
      echo "build-lambdas: rustup cannot install aarch64-unknown-linux-gnu here; build x86_64 zips with ARCH=x86_64 make build and deploy them with architecture = \"x86_64\"" >&2
      exit 1
    fi
    flag=--arm64 ;;
  x86_64) flag=--x86-64 ;;
  *) echo "build-lambdas: bad ARCH=$arch: allowed are arm64, x86_64" >&2; exit 2 ;;
esac
functions=(); for dir in functions/*/; do functions+=("$(basename "$dir")"); done
args=(); for f in "${functions[@]}"; do args+=(--bin "$f"); done
cargo lambda build --profile "$profile" "$flag" --output-format zip "${args[@]}"
target="${CARGO_TARGET_DIR:-target}"
for f in "${functions[@]}"; do
  mkdir -p "target/lambda/$f"
  if [[ "$target/lambda/$f/bootstrap.zip" -ef "target/lambda/$f/bootstrap.zip" ]]; then :; else
    cp "$target/lambda/$f/bootstrap.zip" "target/lambda/$f/bootstrap.zip"
  fi
  echo "target/lambda/$f/bootstrap.zip ($arch, $profile, $(stat -c %s "target/lambda/$f/bootstrap.zip") bytes)"
done
