#!/usr/bin/env bash
# Instructions of one warm `icestream ingest` event of the reference proto pipeline, counted by
# callgrind (the same for the same binary and input, whatever else runs on the machine): one
# process ingests two events, another the first alone; the difference is the warm event. Also
# prints the inclusive count of the functions matching PATTERN (default: the partition split).
#
# Usage: scripts/profile/callgrind_ingest.sh ICESTREAM_BIN [records=10000] [pattern]
set -euo pipefail
command -v valgrind >/dev/null || { echo "callgrind_ingest: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
bin=$1
records=${2:-10000}
pattern=${3:-split_by_partition|RecordBatchPartitionSplitter.*split|take_record_batch}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Fixed event times (the generator's default is two hours ago, and where the hours fall moves the
# partition split), and no backtraces: Lambda sets no RUST_BACKTRACE, and with it iceberg-rust's
# errors built and dropped on the commit's happy path each capture one.
start_ms=1780000000000
unset RUST_BACKTRACE RUST_LIB_BACKTRACE
"$bin" gen-event records="$records" seed=1 start_ms="$start_ms" out="$tmp/e1.json" >/dev/null
"$bin" gen-event records="$records" seed=2 start_ms="$start_ms" start_offset="$records" out="$tmp/e2.json" >/dev/null

count() { # out-file, events...
  local out=$1; shift
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" ingest "$@" warehouse="$tmp/wh-$(basename "$out")" >/dev/null 2>"$tmp/err" \
    || { cat "$tmp/err"; exit 1; }
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}
one=$(count "$tmp/one.out" "$tmp/e1.json")
two=$(count "$tmp/two.out" "$tmp/e1.json" "$tmp/e2.json")
echo "one warm event of $records records: $((two - one)) instructions ($(( (two - one) / records )) per record)"
# Inclusive cost of the split in the two-event run (both events), summed over matching functions.
callgrind_annotate --inclusive=yes --threshold=100 "$tmp/two.out" 2>/dev/null | grep -E "$pattern" | grep -v "{closure}" |
  awk '{ gsub(",", "", $1); s += $1 } END { printf "partition split, both events: %d instructions\n", s }'
