#!/usr/bin/env bash
# Where the wall time of warm `icestream ingest` events goes, sampled by `perf` (callgrind counts
# instructions, and misses what costs time without many: a `cpuid` VM exit, page faults, thread
# wake-ups). EVENTS events of RECORDS reference proto records are ingested by one process pinned
# to one core, the warehouse in a temporary directory (TMPDIR=/dev/shm keeps disk waits out);
# prints the share of the samples in zstd's context set-up (the `cpuid` parquet-rs's codecs run),
# the kernel (reading the event files too), libc, and the event parse's and Protobuf decoding's
# own symbols (self time: what they call in libc or the bytes and base64 crates counts there),
# then the top symbols.
#
# Usage: scripts/profile/perf_ingest.sh ICESTREAM_BIN [records=10000] [events=40]
set -euo pipefail
command -v perf >/dev/null || { echo "perf_ingest: needs perf (apt-get install linux-perf)" >&2; exit 1; }
bin=$1
records=${2:-10000}
events=${3:-40}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Fixed event times, as scripts/profile/callgrind_ingest.sh and `make bench` have them.
start_ms=1780000000000
unset RUST_BACKTRACE RUST_LIB_BACKTRACE
files=()
for i in $(seq 1 "$events"); do
  "$bin" gen-event records="$records" seed="$i" start_ms="$start_ms" start_offset=$(( (i - 1) * records )) out="$tmp/e$i.json" >/dev/null
  files+=("$tmp/e$i.json")
done
RUST_LOG=warn perf record -q -F 20000 -o "$tmp/perf.data" -- taskset -c 0 "$bin" ingest "${files[@]}" warehouse="$tmp/wh" >/dev/null 2>"$tmp/err" \
  || { cat "$tmp/err"; exit 1; }
perf report -i "$tmp/perf.data" --no-children --sort dso,symbol 2>/dev/null | grep -v '^#' | grep -v '^$' >"$tmp/report"
share() { # label, awk condition on the dso ($2) and the symbol ($4...)
  awk -v label="$1" "$2 { gsub(\"%\", \"\", \$1); s += \$1 } END { printf \"%-44s %5.1f%%\\n\", label, s }" "$tmp/report"
}
echo "$events events of $records records in one process (the first cold), pinned; share of perf samples:"
share "zstd contexts (ZSTD_createCCtx/DCtx: cpuid)" '$4 ~ /^ZSTD_create[CD]Ctx$/'
share "kernel" '$2 ~ /kernel/'
share "libc (allocation, copies)" '$2 ~ /^libc/'
share "event parse, self (icestream::event)" '$4 ~ /^icestream::event::/'
share "decoding, self (icestream::decode)" '$4 ~ /^icestream::decode::/'
echo "top symbols:"
head -15 "$tmp/report" | cut -c1-120
