#!/usr/bin/env bash
# Fuzz every target in fuzz/src/bin/ for FUZZ_SECONDS each (default 60), with cargo-fuzz on
# nightly. A crash stops the run: its input is in fuzz/artifacts/<target>/; keep it as a
# regression unit test next to the code it broke. Targets are found by file name, so adding
# one is adding fuzz/src/bin/<name>.rs.
set -euo pipefail
cd "$(dirname "$0")/../.."

CARGO_FUZZ_VERSION=0.13.1
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
# Nightly + sanitizer builds share nothing with the normal ones: their own target dir.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/icestream-fuzz-target}

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
    exit 1
fi
if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

targets=${FUZZ_TARGETS:-$(basename -s .rs fuzz/src/bin/*.rs)}
for target in $targets; do
    corpus=fuzz/corpus/$target
    mkdir -p "$corpus"
    seeds=()
    [ -d "fuzz/seeds/$target" ] && seeds=("fuzz/seeds/$target")
    echo "fuzz: $target for ${FUZZ_SECONDS}s"
    (cd fuzz && cargo +nightly fuzz run "$target" "../$corpus" "${seeds[@]/#/../}" -- \
        -max_total_time="$FUZZ_SECONDS" -max_len=65536 -print_final_stats=1)
done
echo "fuzz: no crash in $(echo "$targets" | wc -w) target(s)"
