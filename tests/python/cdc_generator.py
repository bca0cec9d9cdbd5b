"""An independent generator of change streams, following the documented envelopes:

- Debezium (https://debezium.io/documentation/reference/stable/connectors/postgresql.html,
  "Data change events"): `before`/`after`/`op`/`source`/`ts_ms`, op c/u/d/r, a Kafka tombstone
  (null value, same key) after each delete, op t (truncate: no key, no row images); with the JSON converter's `schema`+`payload`
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
from decimal import Decimal
from typing import Any, Callable

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
    """One source change: the key (None for a truncate), the row after it (None for a delete),
    its position."""
    key: tuple | None
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
        if op == "t":
            self.rows.clear()
            change = Change(None, None, self.lsn, op)
        elif op == "d":
            del self.rows[key]
            change = Change(key, None, self.lsn, op)
        else:
            row = self.new_row(key)
            self.rows[key] = row
            change = Change(key, dict(row), self.lsn, op)
        self.changes.append(change)
        return change

    def run(self, keys: int, changes: int, truncates: int = 0) -> None:
        tenants = ["acme", "globex", "initech", "umbrella"]
        all_keys = [(tenants[i % 4], 10**10 + i * 7) for i in range(keys)]
        for key in all_keys[: keys // 2]:
            self.step("r", key)  # snapshot reads
        truncate_at = {changes * (j + 1) // (truncates + 1) for j in range(truncates)}
        for i in range(changes):
            if i in truncate_at:
                self.step("t", None)  # TRUNCATE orders
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
    if change.op == "t":
        payload["before"] = payload["after"] = None
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


def key_bytes(key: tuple | None) -> bytes | None:
    if key is None:
        return None  # a truncate's record has no key
    return json.dumps({"tenant": key[0], "order_id": key[1]}).encode()


def row_value(change: Change) -> bytes | None:
    if change.row is None:
        return None
    v = _debezium_value(change.row, with_schema=False)
    v["born"] = change.row["born"].isoformat()
    return json.dumps(v).encode()


# ---------- delivery ----------

def messages(source: Source, envelope: str, rng: random.Random,
             encode: Callable[[Change, dict[str, Any] | None], bytes | None] | None = None,
             encode_key: Callable[[tuple], bytes] | None = None) -> list[Message]:
    """The change stream as Kafka records, made hostile: spread over partitions (all of a key's
    changes in one partition for `row`, whose order is the offset), stale re-deliveries of old
    changes after deletes, 2% re-sent. `encode(change, before)`: another serializer's value (for
    Debezium, the JSON converter alternately with and without its schema by default; for `row`,
    a JSON row; None deletes); `encode_key`: another record key serializer (JSON by default)."""
    out: list[Message] = []
    last_row: dict[tuple, dict[str, Any]] = {}
    for i, change in enumerate(source.changes):
        k = encode_key(change.key) if encode_key and change.key is not None else key_bytes(change.key)
        if envelope == "debezium":
            before = last_row.get(change.key)
            out.append(Message(k, encode(change, before) if encode else debezium(change, before, with_schema=i % 2 == 0)))
            if change.op == "d":
                out.append(Message(k, None))  # the Kafka tombstone
        elif envelope == "dms":
            out.append(Message(k, dms(change)))
        else:
            out.append(Message(k, encode(change, None) if encode else row_value(change)))
        if change.row is not None:
            last_row[change.key] = change.row
        if change.op == "d" and envelope != "row" and rng.random() < 0.5:
            # A stale re-delivery of an older change of the deleted key.
            older = [c for c in source.changes[:i] if c.key == change.key and c.row is not None]
            if older:
                stale = rng.choice(older)
                if envelope == "dms":
                    value = dms(stale)
                else:
                    value = encode(stale, None) if encode else debezium(stale, None, with_schema=False)
                out.append(Message(k, value))
        if change.op == "t":
            # Stale re-deliveries of changes the truncate emptied.
            older = [c for c in source.changes[:i] if c.row is not None]
            for stale in rng.sample(older, min(3, len(older))):
                value = encode(stale, None) if encode else debezium(stale, None, with_schema=False)
                out.append(Message(key_bytes(stale.key), value))
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


# ---------- typed keys and values (Debezium's representations) ----------
#
# Debezium's documented encodings (PostgreSQL connector, "Data type mappings"): decimals per
# `decimal.handling.mode` (precise: org.apache.kafka.connect.data.Decimal, base64 of the
# unscaled big-endian two's-complement bytes with the `scale` parameter; string: the plain text;
# double: a JSON number), dates io.debezium.time.Date (days), `time` MicroTime (µs of the day)
# and `timestamp` MicroTimestamp (µs) with time.precision.mode = adaptive_time_microseconds, or
# Connect's Time/Timestamp (ms) with `connect`; `timestamptz` ZonedTimestamp (ISO-8601 with an
# offset), `uuid` io.debezium.data.Uuid (text).

TYPED_SCALES = {"ref": 3, "amount": 2}
LOCAL_EPOCH = dt.datetime(1970, 1, 1)


def typed_row(rng: random.Random, key: tuple, micros: bool) -> dict[str, Any]:
    """A row of the typed table; times are whole milliseconds when the connector writes
    Connect's millisecond types (`micros` False)."""
    unit = 1 if micros else 1000
    tz = dt.timezone(dt.timedelta(minutes=rng.choice([0, 60, -330, 840])))
    return {
        "ref": key[0], "at": key[1],
        "amount": Decimal(rng.randrange(-10**10 + 1, 10**10)).scaleb(-2),
        "born": EPOCH + dt.timedelta(days=rng.randrange(-30000, 30000)),
        "opens": (dt.datetime.min + dt.timedelta(microseconds=rng.randrange(0, 86_400_000_000, unit))).time(),
        "local": LOCAL_EPOCH + dt.timedelta(microseconds=rng.randrange(-10**16, 10**16, unit)),
        "seen": (dt.datetime(2026, 11, 30, tzinfo=UTC) + dt.timedelta(microseconds=rng.randrange(-10**15, 10**15))).astimezone(tz),
        "uid": uuid.UUID(int=rng.getrandbits(128)),
    }


def typed_changes(rng: random.Random, keys: int, changes: int, micros: bool) -> tuple[list[Change], dict[tuple, dict]]:
    """Snapshot reads, inserts, updates and deletes over keys (decimal `ref`, timestamp `at`);
    returns the changes and the table after them."""
    all_keys = [(Decimal(rng.randrange(-10**12 + 1, 10**12)).scaleb(-3),
                 LOCAL_EPOCH + dt.timedelta(microseconds=rng.randrange(-10**16, 10**16, 1 if micros else 1000)))
                for _ in range(keys)]
    rows: dict[tuple, dict] = {}
    out: list[Change] = []
    lsn = 5000
    plan = [("r", k) for k in all_keys[: keys // 2]] + [(None, rng.choice(all_keys)) for _ in range(changes)]
    for op, key in plan:
        lsn += rng.randrange(1, 9)
        op = op or ("c" if key not in rows else rng.choice("uud"))
        if op == "d":
            del rows[key]
            out.append(Change(key, None, lsn, op))
        else:
            rows[key] = typed_row(rng, key, micros)
            out.append(Change(key, dict(rows[key]), lsn, op))
    return out, rows


def _decimal_value(d: Decimal, scale: int, mode: str) -> Any:
    if mode == "double":
        return float(d)
    if mode == "string":
        return format(d, "f")
    unscaled = int(d.scaleb(scale))
    return base64.b64encode(unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)).decode()


def _typed_value(row: dict[str, Any], mode: str, micros: bool) -> dict[str, Any]:
    unit = dt.timedelta(microseconds=1 if micros else 1000)
    out: dict[str, Any] = {name: _decimal_value(row[name], scale, mode) for name, scale in TYPED_SCALES.items() if name in row}
    out["at"] = (row["at"] - LOCAL_EPOCH) // unit
    if "amount" in row:
        out["born"] = (row["born"] - EPOCH).days
        out["opens"] = (dt.datetime.combine(EPOCH, row["opens"]) - dt.datetime.combine(EPOCH, dt.time())) // unit
        out["local"] = (row["local"] - LOCAL_EPOCH) // unit
        out["seen"] = row["seen"].isoformat()
        out["uid"] = str(row["uid"])
    return out


def _typed_schema(mode: str, micros: bool) -> dict[str, Any]:
    def decimal(name: str, optional: bool) -> dict[str, Any]:
        if mode == "precise":
            return {"type": "bytes", "optional": optional, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                    "parameters": {"scale": str(TYPED_SCALES[name]), "connect.decimal.precision": "12"}, "field": name}
        return {"type": "double" if mode == "double" else "string", "optional": optional, "field": name}
    time, stamp = ("io.debezium.time.MicroTime", "io.debezium.time.MicroTimestamp") if micros else \
        ("org.apache.kafka.connect.data.Time", "org.apache.kafka.connect.data.Timestamp")
    return {"type": "struct", "optional": True, "name": "db.public.prices.Value", "fields": [
        decimal("ref", False),
        {"type": "int64", "optional": False, "name": stamp, "version": 1, "field": "at"},
        decimal("amount", True),
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "born"},
        {"type": "int64" if micros else "int32", "optional": True, "name": time, "version": 1, "field": "opens"},
        {"type": "int64", "optional": True, "name": stamp, "version": 1, "field": "local"},
        {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1, "field": "seen"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Uuid", "version": 1, "field": "uid"},
    ]}


def typed_debezium(change: Change, mode: str, micros: bool, with_schema: bool) -> bytes:
    """One Debezium record of the typed table (a delete's `before` holds the key columns)."""
    image = _typed_value(change.row if change.row is not None else {"ref": change.key[0], "at": change.key[1]}, mode, micros)
    payload = {"before": image if change.op == "d" else None, "after": None if change.op == "d" else image,
               "source": {"connector": "postgresql", "name": "db", "lsn": change.lsn, "snapshot": str(change.op == "r").lower()},
               "op": change.op, "ts_ms": 1764460800000}
    if not with_schema:
        return json.dumps(payload).encode()
    row = _typed_schema(mode, micros)
    schema = {"type": "struct", "name": "db.public.prices.Envelope", "optional": False, "fields": [
        dict(row, field="before"), dict(row, field="after"),
        {"type": "struct", "field": "source", "fields": []}, {"type": "string", "optional": False, "field": "op"}]}
    return json.dumps({"schema": schema, "payload": payload}).encode()


def typed_messages(changes: list[Change], mode: str, micros: bool, with_schema: bool, rng: random.Random) -> list[Message]:
    """The typed changes as Kafka records over the partitions, a tombstone after each delete."""
    out = []
    for change in changes:
        key = json.dumps(_typed_value({"ref": change.key[0], "at": change.key[1]}, "string", micros)).encode()
        partition = rng.randrange(PARTITIONS)
        out.append(Message(key, typed_debezium(change, mode, micros, with_schema), partition))
        if change.op == "d":
            out.append(Message(key, None, partition))
    return out
