"""An independent generator of change streams, following the documented envelopes:

- Debezium (https://debezium.io/documentation/reference/stable/connectors/postgresql.html,
  "Data change events"): `before`/`after`/`op`/`source`/`ts_ms`, op c/u/d/r, a Kafka tombstone
  (null value, same key) after each delete; with the JSON converter's `schema`+`payload`
  wrapper or without it; dates as int days (io.debezium.time.Date), timestamps as
  MicroTimestamp ints (with the schema) or ZonedTimestamp strings (without).
- AWS DMS Kafka target: `{"data": {...}, "metadata": {"operation": ..., "record-type": "data"}}`.
- row: a keyed (compacted) topic whose value is the row and whose null value deletes the key.

A simulated source table (composite key) goes through snapshot reads, inserts, updates and
deletes; the stream is then made hostile the way Kafka delivers it: spread over 4 partitions,
2% re-sent, stale re-deliveries of old changes after deletes. `oracle()` is the pure answer:
the newest change per key by source position.

No code is shared with the Rust side.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

UTC = dt.timezone.utc
EPOCH = dt.date(1970, 1, 1)
PARTITIONS = 4


@dataclass
class Message:
    """One Kafka record to deliver."""
    key: bytes | None
    value: bytes | None
    partition: int = 0


@dataclass
class Change:
    """One source change: the key, the row after it (None for a delete), its position."""
    key: tuple
    row: dict[str, Any] | None
    lsn: int
    op: str


@dataclass
class Source:
    """A simulated database table with a composite key (tenant, order_id)."""
    rng: random.Random
    rows: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    lsn: int = 1000
    changes: list[Change] = field(default_factory=list)

    def new_row(self, key: tuple) -> dict[str, Any]:
        r = self.rng
        return {
            "tenant": key[0], "order_id": key[1],
            "note": r.choice([None, f"note {r.randrange(1000)}", "ünïcode ✓"]),
            "amount": r.randrange(-10**12, 10**12),
            "updated_at": dt.datetime(2026, 11, 30, tzinfo=UTC) + dt.timedelta(microseconds=r.randrange(10**12)),
            "born": EPOCH + dt.timedelta(days=r.randrange(-3000, 30000)),
            "uid": uuid.UUID(int=r.getrandbits(128)),
        }

    def step(self, op: str, key: tuple) -> Change:
        self.lsn += self.rng.randrange(1, 50)
        if op == "d":
            del self.rows[key]
            change = Change(key, None, self.lsn, op)
        else:
            row = self.new_row(key)
            self.rows[key] = row
            change = Change(key, dict(row), self.lsn, op)
        self.changes.append(change)
        return change

    def run(self, keys: int, changes: int) -> None:
        tenants = ["acme", "globex", "initech", "umbrella"]
        all_keys = [(tenants[i % 4], 10**10 + i * 7) for i in range(keys)]
        for key in all_keys[: keys // 2]:
            self.step("r", key)  # snapshot reads
        for _ in range(changes):
            key = self.rng.choice(all_keys)
            if key not in self.rows:
                self.step("c", key)
            else:
                self.step(self.rng.choice(["u", "u", "d"]), key)


# ---------- envelopes ----------

def _debezium_value(row: dict[str, Any], with_schema: bool) -> dict[str, Any]:
    out = dict(row)
    out["born"] = (row["born"] - EPOCH).days
    out["uid"] = str(row["uid"])
    t = row["updated_at"]
    if with_schema:
        out["updated_at"] = (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    else:
        out["updated_at"] = t.isoformat().replace("+00:00", "Z")
    return out


ROW_SCHEMA = {"type": "struct", "optional": True, "fields": [
    {"type": "string", "optional": False, "field": "tenant"},
    {"type": "int64", "optional": False, "field": "order_id"},
    {"type": "string", "optional": True, "field": "note"},
    {"type": "int64", "optional": True, "field": "amount"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "updated_at"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "born"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Uuid", "version": 1, "field": "uid"},
]}


def debezium(change: Change, before: dict[str, Any] | None, with_schema: bool) -> bytes:
    payload = {
        "before": None if before is None else _debezium_value(before, with_schema),
        "after": None if change.row is None else _debezium_value(change.row, with_schema),
        "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "db", "ts_ms": 1764460800000,
                   "snapshot": "true" if change.op == "r" else "false", "db": "shop", "schema": "public",
                   "table": "orders", "txId": change.lsn // 10, "lsn": change.lsn},
        "op": change.op,
        "ts_ms": 1764460800000,
    }
    if change.op == "d":
        # Default REPLICA IDENTITY: `before` holds the key columns only.
        payload["before"] = {"tenant": change.key[0], "order_id": change.key[1]}
    if not with_schema:
        return json.dumps(payload).encode()
    schema = {"type": "struct", "name": "db.public.orders.Envelope", "optional": False, "fields": [
        dict(ROW_SCHEMA, field="before", name="db.public.orders.Value"),
        dict(ROW_SCHEMA, field="after", name="db.public.orders.Value"),
        {"type": "struct", "field": "source", "fields": []},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ]}
    return json.dumps({"schema": schema, "payload": payload}).encode()


def dms(change: Change) -> bytes:
    operation = {"r": "load", "c": "insert", "u": "update", "d": "delete"}[change.op]
    if change.row is None:
        data = {"tenant": change.key[0], "order_id": change.key[1], "seq": change.lsn}
    else:
        data = _debezium_value(change.row, with_schema=False)
        data["born"] = change.row["born"].isoformat()
        data["seq"] = change.lsn
    return json.dumps({"data": data, "metadata": {
        "timestamp": "2026-11-30T00:00:00.000000Z", "record-type": "data", "operation": operation,
        "partition-key-type": "primary-key", "schema-name": "shop", "table-name": "orders"}}).encode()


def key_bytes(key: tuple) -> bytes:
    return json.dumps({"tenant": key[0], "order_id": key[1]}).encode()


def row_value(change: Change) -> bytes | None:
    if change.row is None:
        return None
    v = _debezium_value(change.row, with_schema=False)
    v["born"] = change.row["born"].isoformat()
    return json.dumps(v).encode()


# ---------- delivery ----------

def messages(source: Source, envelope: str, rng: random.Random) -> list[Message]:
    """The change stream as Kafka records, made hostile: spread over partitions (all of a key's
    changes in one partition for `row`, whose order is the offset), stale re-deliveries of old
    changes after deletes, 2% re-sent."""
    out: list[Message] = []
    last_row: dict[tuple, dict[str, Any]] = {}
    for i, change in enumerate(source.changes):
        k = key_bytes(change.key)
        if envelope == "debezium":
            out.append(Message(k, debezium(change, last_row.get(change.key), with_schema=i % 2 == 0)))
            if change.op == "d":
                out.append(Message(k, None))  # the Kafka tombstone
        elif envelope == "dms":
            out.append(Message(k, dms(change)))
        else:
            out.append(Message(k, row_value(change)))
        if change.row is not None:
            last_row[change.key] = change.row
        if change.op == "d" and envelope != "row" and rng.random() < 0.5:
            # A stale re-delivery of an older change of the deleted key.
            older = [c for c in source.changes[:i] if c.key == change.key and c.row is not None]
            if older:
                stale = rng.choice(older)
                value = debezium(stale, None, with_schema=False) if envelope == "debezium" else dms(stale)
                out.append(Message(k, value))
    for m in out:
        m.partition = hash_partition(m.key) if envelope == "row" else rng.randrange(PARTITIONS)
    resent = []
    for m in out:
        if rng.random() < 0.02:
            if envelope == "row":
                # A producer retry: the same record again right after it (a later copy of an
                # older value would be a newer change by Kafka's own semantics).
                resent.append((m, Message(m.key, m.value, m.partition)))
            else:
                resent.append((m, Message(m.key, m.value, rng.randrange(PARTITIONS))))
    for after, copy in resent:
        out.insert(out.index(after) + 1, copy)
    return out


def hash_partition(key: bytes | None) -> int:
    return sum(key or b"") % PARTITIONS


def oracle(source: Source) -> dict[tuple, dict[str, Any]]:
    """The current state: the source table itself (its last change per key by position)."""
    return {k: dict(v) for k, v in source.rows.items()}


def events(msgs: list[Message], topic: str, rng: random.Random, replays: bool = True) -> list[dict]:
    """MSK events over the messages: random cuts per partition, and replays of earlier
    ranges (re-cut) as the event source mapping does after a failure."""
    per_partition: dict[int, list[Message]] = {p: [] for p in range(PARTITIONS)}
    for m in msgs:
        per_partition[m.partition].append(m)
    pos = {p: 0 for p in range(PARTITIONS)}
    out = []
    while any(pos[p] < len(per_partition[p]) for p in per_partition):
        records: dict[str, list[dict]] = {}
        for p, ms in per_partition.items():
            start = pos[p]
            if replays and start > 0 and rng.random() < 0.3:
                start = max(0, start - rng.randrange(1, 20))
            end = min(len(ms), pos[p] + rng.randrange(0, 60))
            if end <= start:
                continue
            records[f"{topic}-{p}"] = [
                {"topic": topic, "partition": p, "offset": o, "timestamp": 1764460800000 + o,
                 "timestampType": "CREATE_TIME",
                 "key": None if ms[o].key is None else base64.b64encode(ms[o].key).decode(),
                 "value": None if ms[o].value is None else base64.b64encode(ms[o].value).decode(),
                 "headers": []}
                for o in range(start, end)
            ]
            pos[p] = max(pos[p], end)
        if records:
            out.append({"eventSource": "aws:kafka", "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/c/1",
                        "bootstrapServers": "127.0.0.1:9092", "records": records})
    return out
