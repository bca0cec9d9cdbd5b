#!/usr/bin/env python3
"""Registry framing against a fixed-schema pipeline, on the whole ingest path (`make bench`).

The same Avro records (the v1 `orders` schema of tests/python/registry_writers.py) are ingested
twice by one warm `icestream ingest` process per mode, 10k-record events as the MSK mapping
delivers them: once plain with the schema in the pipeline file, once framed by a Confluent
registry (the test stand-in) with no schema in the file. Prints records/s of the pipeline itself
(the summaries' `duration_ms`) per mode, the ratio, and the registry calls per event (cold
first event, warm after).

With `callgrind=true` it counts instructions instead (valgrind; the same for the same binary
and input whatever else runs): one event and two events per mode, the difference being one warm
10k-record event, printed per record.

Usage: scripts/bench/bench_registry.py [ICESTREAM_BIN] [events=10] [records=10000] [callgrind=true]
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "python"))

from confluent_registry import ConfluentRegistry  # noqa: E402
from registry_writers import avro_datum, avro_schema, record  # noqa: E402

TOPIC = "bench.orders"


def write_events(tmp: Path, name: str, events: int, per_event: int, frame: bytes) -> list[str]:
    paths = []
    for e in range(events):
        records = [{"topic": TOPIC, "partition": 0, "offset": e * per_event + i, "timestamp": 1714564800000 + i,
                    "timestampType": "CREATE_TIME",
                    "value": base64.b64encode(frame + avro_datum("v1", record("v1", e * per_event + i))).decode(),
                    "headers": []} for i in range(per_event)]
        path = tmp / f"{name}-{e}.json"
        path.write_text(json.dumps({"eventSource": "aws:kafka", "records": {f"{TOPIC}-0": records}}))
        paths.append(str(path))
    return paths


def run(binary: str, files: list[str], pipeline: Path, warehouse: Path) -> list[dict]:
    out = subprocess.run([binary, "ingest", *files, f"pipelines={pipeline}", f"warehouse={warehouse}"],
                         capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.strip().splitlines()]


def instructions(binary: str, files: list[str], pipeline: Path, warehouse: Path) -> int:
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", binary, "ingest", *files,
                          f"pipelines={pipeline}", f"warehouse={warehouse}"], capture_output=True, text=True, check=True)
    return int([line for line in out.stderr.splitlines() if "Collected" in line][-1].split()[-1])


def main() -> None:
    args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    binary = next((a for a in sys.argv[1:] if "=" not in a), str(Path.home() / ".cache/icestream-target/release/icestream"))
    events, per_event = int(args.get("events", 10)), int(args.get("records", 10000))
    registry = ConfluentRegistry().start()
    try:
        schema_id = registry.register(f"{TOPIC}-value", avro_schema("v1"))
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            (tmp / "v1.avsc").write_text(avro_schema("v1"))
            head = f'[[pipeline]]\ntable = "orders"\ntopics = ["{TOPIC}"]\nformat = "avro"\n'
            (tmp / "plain.toml").write_text(head + 'schema = "v1.avsc"\n')
            (tmp / "framed.toml").write_text(head + f'registry = "confluent"\nregistry_url = "{registry.url}"\n')
            plain_files = write_events(tmp, "plain", events, per_event, b"")
            framed_files = write_events(tmp, "framed", events, per_event, b"\0" + schema_id.to_bytes(4, "big"))
            if args.get("callgrind") == "true":
                for mode, files in (("fixed schema", plain_files), ("registry framing", framed_files)):
                    toml = tmp / ("plain.toml" if files is plain_files else "framed.toml")
                    one = instructions(binary, files[:1], toml, tmp / f"cg1-{len(mode)}")
                    two = instructions(binary, files[:2], toml, tmp / f"cg2-{len(mode)}")
                    print(f"  {mode:<17}: {(two - one) / per_event:>10,.0f} instructions per record (one warm event)")
                return
            plain = run(binary, plain_files, tmp / "plain.toml", tmp / "wh-plain")
            framed = run(binary, framed_files, tmp / "framed.toml", tmp / "wh-framed")
    finally:
        registry.stop()
    # The first event pays table creation and cold caches in both modes: rates are over the rest.
    rate = lambda s: sum(x["written"] for x in s[1:]) / max(1, sum(x["duration_ms"] for x in s[1:])) * 1000  # noqa: E731
    print(f"{events} events x {per_event} avro records, one warm instance per mode ({binary})")
    print(f"  fixed schema      : {rate(plain):>10,.0f} records/s")
    print(f"  registry framing  : {rate(framed):>10,.0f} records/s  (ratio {rate(framed) / rate(plain):.2f})")
    print(f"  registry calls per event: {[s['registry_calls'] for s in framed]} (cold first event, then cached)")


if __name__ == "__main__":
    main()
