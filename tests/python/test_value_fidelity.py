"""Differential test of every value, per format: seeded random schemas (every supported type,
nested structs, lists and maps, optional fields) and values at the edges (any finite double bit
pattern, subnormals, -0.0, int64 extremes, decimals at full precision, timestamps from year 1 to
9999, empty and Unicode strings, empty lists and maps), encoded by independent encoders
(`json.dumps`, fastavro, Python protobuf compiled by grpcio-tools' protoc), ingested by
`icestream ingest` from one big event per format, and read back by PyIceberg and by DuckDB:
every value must come back bit for bit (doubles compared by their bits).

ICESTREAM_FIDELITY_SEED picks another seed (the default is fixed, so `make test` is repeatable);
a failure names the seed, the column path, the type and examples.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import os
import random
import struct
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import readers

BIN = os.environ.get("ICESTREAM_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="set ICESTREAM_BIN to the icestream binary (make test does)")
SEED = int(os.environ.get("ICESTREAM_FIDELITY_SEED", "46"))
NAMESPACE = "fidelity"
TABLES = 2            # schemas (tables) per format
RECORDS = 2200        # records per table
MIN_VALUES = 100_000  # leaf values per format the test must have checked

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_DAY = dt.date(1970, 1, 1).toordinal()
US = 1_000_000
# Year 1 to 9999: what RFC 3339 text, Python and both readers can all express.
MIN_US = int((dt.datetime(1, 1, 1, tzinfo=UTC) - EPOCH).total_seconds()) * US
MAX_US = int((dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - EPOCH).total_seconds()) * US + 999_999
MIN_DAY, MAX_DAY = dt.date(1, 1, 1).toordinal() - EPOCH_DAY, dt.date(9999, 12, 31).toordinal() - EPOCH_DAY
DAY_US = 86_400 * US
STRINGS = ["", " ", "é", "日本語", "🚗💨", "a\"b\\c\nd\te", "\u0000", "Zoë", "ℵ₀ ≠ ∞", "\u200b", "x" * 300]


# ---------- the type model ----------

@dataclass
class T:
    """One column type. `kind` decides the value and its comparison; `wire` the encoding
    (Avro logical type or base, protobuf scalar kind, JSON form)."""
    kind: str
    wire: str = ""
    size: int = 0          # fixed
    precision: int = 0     # decimal
    scale: int = 0
    symbols: list[str] = field(default_factory=list)  # enum
    fields: list["F"] = field(default_factory=list)   # struct
    item: "T | None" = None                           # list element, map value
    item_optional: bool = False
    name: str = ""         # Avro named type / protobuf message or enum


@dataclass
class F:
    name: str
    type: T
    optional: bool


PRIMS: dict[str, list[tuple[str, str]]] = {
    "json": [("long", ""), ("int", "int32"), ("double", ""), ("boolean", ""), ("string", ""), ("enum", ""),
             ("decimal", ""), ("uuid", ""), ("date", ""), ("time", ""), ("timestamp", ""),
             ("timestamptz", "string"), ("timestamptz", "millis")],
    "avro": [("long", ""), ("int", ""), ("double", ""), ("float", ""), ("boolean", ""), ("string", ""), ("binary", ""),
             ("fixed", ""), ("enum", ""), ("decimal", "bytes"), ("decimal", "fixed"), ("uuid", ""), ("date", ""),
             ("time", "millis"), ("time", "micros"), ("timestamp", "millis"), ("timestamp", "micros"),
             ("timestamptz", "millis"), ("timestamptz", "micros")],
    "protobuf": [("long", "int64"), ("long", "sint64"), ("long", "sfixed64"), ("long", "uint32"), ("long", "fixed32"),
                 ("long", "uint64"), ("long", "fixed64"), ("int", "int32"), ("int", "sint32"), ("int", "sfixed32"),
                 ("double", "double"), ("float", "float"), ("boolean", "bool"), ("string", "string"), ("binary", "bytes"),
                 ("enum", ""), ("timestamptz", "Timestamp"),
                 ("double", "DoubleValue"), ("float", "FloatValue"), ("long", "Int64Value"), ("long", "UInt64Value"),
                 ("long", "UInt32Value"), ("int", "Int32Value"), ("boolean", "BoolValue"), ("string", "StringValue"),
                 ("binary", "BytesValue")],
}
PROTO_MESSAGE_WIRES = {"Timestamp", "DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "UInt32Value",
                       "Int32Value", "BoolValue", "StringValue", "BytesValue"}


class Namer:
    def __init__(self, prefix: str) -> None:
        self.prefix, self.n = prefix, 0

    def __call__(self, what: str) -> str:
        self.n += 1
        return f"{what}{self.prefix}{self.n}"


def prim(rng: random.Random, fmt: str, kind: str, wire: str, names: Namer) -> T:
    t = T(kind, wire)
    if kind == "fixed":
        t.size, t.name = rng.choice([1, 4, 16]), names("Fx")
    elif kind == "decimal":
        t.precision = rng.choice([1, 9, 18, 19, 38, rng.randint(1, 38)])
        t.scale = rng.choice([0, t.precision, rng.randint(0, t.precision)])
        if wire == "fixed":
            t.name, t.size = names("Dx"), next(n for n in range(1, 17) if 2 ** (8 * n - 1) > 10 ** t.precision)
    elif kind == "enum":
        t.name = names("E")
        t.symbols = [f"{t.name}_{s}" for s in ["ZERO", "PAID", "SHIPPED", "LOST"][: rng.randint(1, 4)]]
    return t


def draw_struct(rng: random.Random, fmt: str, names: Namer, depth: int, every_prim: bool) -> T:
    """A struct: every primitive of the format once (at the top), or a few random ones, plus
    nested structs, lists and maps while `depth` allows."""
    prims = PRIMS[fmt] if every_prim else rng.sample(PRIMS[fmt], rng.randint(1, 4))
    fields = []
    for i, (kind, wire) in enumerate(prims):
        fields.append(F(f"f{i}_{kind}{'_' + wire.lower() if wire else ''}", prim(rng, fmt, kind, wire, names), rng.random() < 0.5))
    if depth > 0:
        for what in ["struct", "list", "map"] * (2 if every_prim else 1):
            if not every_prim and rng.random() < 0.5:
                continue
            n = len(fields)
            if what == "struct":
                fields.append(F(f"s{n}", draw_struct(rng, fmt, names, depth - 1, False), rng.random() < 0.5))
            else:
                # Protobuf elements are scalars or messages of our own (a repeated wrapper is no column).
                scalars = [p for p in PRIMS[fmt] if p[1] not in PROTO_MESSAGE_WIRES]
                item = draw_struct(rng, fmt, names, depth - 1, False) if rng.random() < 0.4 else prim(rng, fmt, *rng.choice(scalars), names)
                fields.append(F(f"{what[0]}{n}", T(what, item=item, item_optional=rng.random() < 0.3), rng.random() < 0.5))
    t = T("struct", fields=fields, name=names("R"))
    if fmt == "protobuf":
        adjust_for_protobuf(t)
    return t


def adjust_for_protobuf(t: T) -> None:
    """Protobuf's presence rules: messages (Timestamp and wrappers too) are optional, repeated
    and map fields required with required elements (map values are never null)."""
    for f in t.fields:
        if f.type.kind in ("struct", "list", "map"):
            f.optional = f.type.kind == "struct"
            f.type.item_optional = False
        elif f.type.wire in PROTO_MESSAGE_WIRES:
            f.optional = True


# ---------- values ----------

def f64(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.15:
        return rng.choice([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
                           -1.7976931348623157e308, 0.1, 1e23, -928694.4390802345, 9007199254740993.0, 1 / 3])
    if r < 0.35:
        return (rng.random() - 0.5) * 10.0 ** rng.randint(-8, 12)
    while True:
        bits = rng.getrandbits(64)
        if r < 0.45:
            bits &= 0x800F_FFFF_FFFF_FFFF  # subnormal
        v = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if v == v and abs(v) != float("inf"):
            return v


def f32(rng: random.Random) -> float:
    if rng.random() < 0.15:
        v = rng.choice([0.0, -0.0, 1e-45, -1e-45, 3.4028234663852886e38, 1.1754943508222875e-38, 0.1, -928694.44])
        return struct.unpack("<f", struct.pack("<f", v))[0]
    while True:
        bits = rng.getrandbits(32)
        if rng.random() < 0.1:
            bits &= 0x807F_FFFF
        v = struct.unpack("<f", struct.pack("<I", bits))[0]
        if v == v and abs(v) != float("inf"):
            return v


def integer(rng: random.Random, lo: int, hi: int) -> int:
    r = rng.random()
    if r < 0.2:
        return rng.choice([lo, hi, 0, 1, max(lo, -1), min(hi, 2 ** 53 + 1), max(lo, -(2 ** 53) - 1)])
    if r < 0.5:
        return rng.randint(max(lo, -1000), min(hi, 1000))
    return rng.randint(lo, hi)


def temporal(rng: random.Random, lo: int, hi: int, step: int) -> int:
    r = rng.random()
    if r < 0.2:
        v = rng.choice([lo, hi, 0, -step, step, -DAY_US, 1_700_000_000 * US + 123_456])
    elif r < 0.6:
        v = rng.randint(-3_000_000_000 * US, 5_000_000_000 * US)  # ~1875 to ~2128
    else:
        v = rng.randint(lo, hi)
    v = max(lo, min(hi, v))
    return v - v % step


def value(rng: random.Random, t: T) -> Any:
    k = t.kind
    if k == "long":
        lo, hi = {"uint32": (0, 2 ** 32 - 1), "fixed32": (0, 2 ** 32 - 1), "UInt32Value": (0, 2 ** 32 - 1),
                  "uint64": (0, 2 ** 63 - 1), "fixed64": (0, 2 ** 63 - 1), "UInt64Value": (0, 2 ** 63 - 1)}.get(t.wire, (-(2 ** 63), 2 ** 63 - 1))
        return integer(rng, lo, hi)
    if k == "int":
        return integer(rng, -(2 ** 31), 2 ** 31 - 1)
    if k == "double":
        return f64(rng)
    if k == "float":
        return f32(rng)
    if k == "boolean":
        return rng.random() < 0.5
    if k == "string":
        if rng.random() < 0.4:
            return rng.choice(STRINGS)
        return "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0xA0, 0xD7FF), rng.randint(0x10000, 0x10FFFF)])) for _ in range(rng.randint(0, 12)))
    if k == "binary":
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, rng.randint(0, 24)])))
    if k == "fixed":
        return bytes(rng.getrandbits(8) for _ in range(t.size))
    if k == "enum":
        return rng.choice(t.symbols)
    if k == "decimal":
        top = 10 ** t.precision - 1
        unscaled = integer(rng, -top, top) if rng.random() < 0.5 else rng.choice([-top, top, 0, rng.randint(-top, top)])
        return Decimal(unscaled).scaleb(-t.scale, decimal.Context(prec=100))
    if k == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if k == "date":
        return temporal(rng, MIN_DAY * DAY_US, MAX_DAY * DAY_US, DAY_US) // DAY_US
    if k == "time":
        step = 1000 if t.wire == "millis" else 1
        return rng.choice([0, DAY_US - step, rng.randint(0, DAY_US - 1)]) // step * step
    if k in ("timestamp", "timestamptz"):
        return temporal(rng, MIN_US, MAX_US, 1000 if t.wire == "millis" else 1)
    if k == "struct":
        return {f.name: None if f.optional and rng.random() < 0.2 else value(rng, f.type) for f in t.fields}
    if k == "list":
        assert t.item is not None
        return [None if t.item_optional and rng.random() < 0.15 else value(rng, t.item) for _ in range(rng.choice([0, 1, rng.randint(0, 4)]))]
    if k == "map":
        assert t.item is not None
        keys = {value(rng, T("string")) for _ in range(rng.choice([0, 1, rng.randint(0, 3)]))}
        return {key: None if t.item_optional and rng.random() < 0.15 else value(rng, t.item) for key in keys}
    raise AssertionError(k)


def leaves(t: T, v: Any) -> int:
    """How many values `v` holds (each null, scalar, list or map entry counted once)."""
    if v is None or t.kind not in ("struct", "list", "map"):
        return 1
    if t.kind == "struct":
        return sum(leaves(f.type, v[f.name]) for f in t.fields)
    assert t.item is not None
    items = v.values() if t.kind == "map" else v
    return max(1, sum(leaves(t.item, x) for x in items))


# ---------- canonical form: what both sides are compared in ----------

def canon(t: T, v: Any) -> Any:
    if v is None:
        return None
    k = t.kind
    if k in ("double", "float"):
        return ("bits", struct.pack("<d", v).hex())
    if k == "decimal":
        with decimal.localcontext(decimal.Context(prec=100)):
            return ("unscaled", int(Decimal(v).scaleb(t.scale)))
    if k == "uuid":
        if isinstance(v, (bytes, bytearray)):
            return uuid.UUID(bytes=bytes(v))
        return uuid.UUID(str(v))
    if k in ("binary", "fixed"):
        return bytes(v)
    if k == "struct":
        return {f.name: canon(f.type, v.get(f.name)) for f in t.fields}
    if k == "list":
        assert t.item is not None
        return [canon(t.item, x) for x in v]
    if k == "map":
        assert t.item is not None
        pairs = v.items() if isinstance(v, dict) else v
        return {key: canon(t.item, x) for key, x in pairs}
    return v


def diff(t: T, want: Any, got: Any, path: str, out: list[tuple[str, str, Any, Any]]) -> None:
    """Every leaf where `got` differs from `want` (both canonical), as (path, kind, want, got)."""
    if want == got:
        return
    if want is not None and got is not None:
        if t.kind == "struct":
            for f in t.fields:
                diff(f.type, want[f.name], got.get(f.name), f"{path}.{f.name}", out)
            return
        if t.kind == "list" and len(want) == len(got):
            for i, (w, g) in enumerate(zip(want, got)):
                diff(t.item, w, g, f"{path}[]", out)  # type: ignore[arg-type]
            return
        if t.kind == "map" and set(want) == set(got):
            for key in want:
                diff(t.item, want[key], got[key], f"{path}{{}}", out)  # type: ignore[arg-type]
            return
    label = f"{t.kind}<{t.item.kind}>" if t.item else t.kind + (f"({t.wire})" if t.wire else "")
    out.append((path, label, want, got))


def reader_limitation(reader: str, kind: str, want: Any, got: Any) -> bool:
    """A difference of the reader's own making, not of the table: PyIceberg (0.12) rebuilds a
    list or map of structs without its validity (pyiceberg/io/pyarrow.py, `ArrowProjectionVisitor`
    `list` and `map`, `from_arrays(offsets, ...)` without a mask), so a null one reads as empty
    there. DuckDB reads it null, and so does pyarrow from the same Parquet file."""
    return reader == "pyiceberg" and kind in ("list<struct>", "map<struct>") and want is None and got in ([], {})


# ---------- encoders: schemas and values per format ----------

def avro_type(t: T, defined: set[str]) -> Any:
    k = t.kind
    if t.name and t.name in defined:
        return t.name
    if t.name:
        defined.add(t.name)
    base = {"long": "long", "int": "int", "double": "double", "float": "float", "boolean": "boolean", "string": "string", "binary": "bytes"}
    if k in base:
        return base[k]
    if k == "fixed":
        return {"type": "fixed", "name": t.name, "size": t.size}
    if k == "enum":
        return {"type": "enum", "name": t.name, "symbols": t.symbols}
    if k == "decimal":
        if t.wire == "fixed":
            return {"type": "fixed", "name": t.name, "size": t.size, "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    if k == "uuid":
        return {"type": "string", "logicalType": "uuid"}
    if k == "date":
        return {"type": "int", "logicalType": "date"}
    if k == "time":
        return {"type": "int", "logicalType": "time-millis"} if t.wire == "millis" else {"type": "long", "logicalType": "time-micros"}
    if k in ("timestamp", "timestamptz"):
        local = "local-" if k == "timestamp" else ""
        return {"type": "long", "logicalType": f"{local}timestamp-{t.wire}"}
    if k == "struct":
        return {"type": "record", "name": t.name, "fields": [
            {"name": f.name, "type": optional_avro(avro_type(f.type, defined), f.optional, f.name)} for f in t.fields]}
    if k == "list":
        return {"type": "array", "items": optional_avro(avro_type(t.item, defined), t.item_optional, "item")}  # type: ignore[arg-type]
    if k == "map":
        return {"type": "map", "values": optional_avro(avro_type(t.item, defined), t.item_optional, "value")}  # type: ignore[arg-type]
    raise AssertionError(k)


def optional_avro(schema: Any, optional: bool, name: str) -> Any:
    if not optional:
        return schema
    # Both union orders are allowed; pick by the name so the choice is stable per schema.
    return ["null", schema] if len(name) % 2 else [schema, "null"]


def avro_value(t: T, v: Any) -> Any:
    """fastavro's input: raw integers for dates, times and timestamps (the logical types'
    own units), Decimals, UUID strings."""
    if v is None:
        return None
    k = t.kind
    if k == "time" and t.wire == "millis":
        return v // 1000
    if k in ("timestamp", "timestamptz") and t.wire == "millis":
        return v // 1000
    if k == "uuid":
        return str(v)
    if k == "struct":
        return {f.name: avro_value(f.type, v[f.name]) for f in t.fields}
    if k == "list":
        return [avro_value(t.item, x) for x in v]  # type: ignore[arg-type]
    if k == "map":
        return {key: avro_value(t.item, x) for key, x in v.items()}  # type: ignore[arg-type]
    return v


def json_schema_of(t: T) -> Any:
    k = t.kind
    simple = {"long": {"type": "integer"}, "int": {"type": "integer", "format": "int32"}, "double": {"type": "number"},
              "boolean": {"type": "boolean"}, "string": {"type": "string"}, "uuid": {"type": "string", "format": "uuid"},
              "date": {"type": "string", "format": "date"}, "time": {"type": "string", "format": "time"},
              "timestamp": {"type": "string", "format": "local-date-time"}}
    if k in simple:
        return dict(simple[k])
    if k == "enum":
        return {"enum": t.symbols}
    if k == "decimal":
        return {"type": "string", "format": "decimal", "precision": t.precision, "scale": t.scale}
    if k == "timestamptz":
        return {"type": "integer" if t.wire == "millis" else "string", "format": "date-time"}
    if k == "struct":
        props = {}
        for f in t.fields:
            s = json_schema_of(f.type)
            if f.optional and "type" in s and len(f.name) % 2:
                s["type"] = [s["type"], "null"]
            props[f.name] = s
        return {"type": "object", "properties": props, "required": [f.name for f in t.fields if not f.optional]}
    if k == "list":
        s = json_schema_of(t.item)  # type: ignore[arg-type]
        if t.item_optional:
            s["type"] = [s.get("type", "string"), "null"]
        return {"type": "array", "items": s}
    if k == "map":
        s = json_schema_of(t.item)  # type: ignore[arg-type]
        if t.item_optional:
            s["type"] = [s.get("type", "string"), "null"]
        return {"type": "object", "additionalProperties": s}
    raise AssertionError(k)


def json_value(rng: random.Random, t: T, v: Any) -> Any:
    if v is None:
        return None
    k = t.kind
    if k == "decimal":
        unscaled = canon(t, v)[1]
        digits = str(abs(unscaled)).rjust(t.scale + 1, "0")
        text = digits if t.scale == 0 else f"{digits[:-t.scale]}.{digits[-t.scale:]}"
        return ("-" if unscaled < 0 else "") + text
    if k == "uuid":
        return str(v) if rng.random() < 0.8 else str(v).upper()
    if k == "date":
        return dt.date.fromordinal(EPOCH_DAY + v).isoformat()
    if k == "time":
        return (dt.datetime.min + dt.timedelta(microseconds=v)).time().isoformat()
    if k == "timestamp":
        return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=v)).isoformat()
    if k == "timestamptz":
        if t.wire == "millis":
            return v // 1000
        at = EPOCH + dt.timedelta(microseconds=v)
        # Another offset names the same instant, unless it would leave years 1 to 9999.
        hours = rng.choice([0, 0, 2, -5, 14, -12])
        if MIN_US + 2 * DAY_US < v < MAX_US - 2 * DAY_US:
            at = at.astimezone(dt.timezone(dt.timedelta(hours=hours, minutes=30 if hours == 2 else 0)))
        text = at.isoformat()
        return text.replace("+00:00", "Z") if rng.random() < 0.5 else text
    if k == "struct":
        out = {}
        for f in t.fields:
            if v[f.name] is None and rng.random() < 0.5:
                continue  # absent rather than null
            out[f.name] = json_value(rng, f.type, v[f.name])
        return out
    if k == "list":
        return [json_value(rng, t.item, x) for x in v]  # type: ignore[arg-type]
    if k == "map":
        return {key: json_value(rng, t.item, x) for key, x in v.items()}  # type: ignore[arg-type]
    return v


def proto_source(t: T, package: str) -> str:
    lines = [f'syntax = "proto3";', f"package {package};", 'import "google/protobuf/timestamp.proto";',
             'import "google/protobuf/wrappers.proto";']
    done: set[str] = set()

    def scalar(x: T) -> str:
        if x.kind == "enum":
            declare_enum(x)
            return x.name
        if x.wire == "Timestamp":
            return "google.protobuf.Timestamp"
        if x.wire in PROTO_MESSAGE_WIRES:
            return f"google.protobuf.{x.wire}"
        if x.kind == "struct":
            declare(x)
            return x.name
        return x.wire

    def declare_enum(x: T) -> None:
        if x.name not in done:
            done.add(x.name)
            lines.append(f"enum {x.name} {{ " + " ".join(f"{s} = {i};" for i, s in enumerate(x.symbols)) + " }")

    def declare(x: T) -> None:
        if x.name in done:
            return
        done.add(x.name)
        body = []
        for n, f in enumerate(x.fields, start=1):
            if f.type.kind == "list":
                body.append(f"repeated {scalar(f.type.item)} {f.name} = {n};")  # type: ignore[arg-type]
            elif f.type.kind == "map":
                body.append(f"map<string, {scalar(f.type.item)}> {f.name} = {n};")  # type: ignore[arg-type]
            else:
                opt = "optional " if f.optional and f.type.kind != "struct" and f.type.wire not in PROTO_MESSAGE_WIRES else ""
                body.append(f"{opt}{scalar(f.type)} {f.name} = {n};")
        lines.append(f"message {x.name} {{ " + " ".join(body) + " }")

    declare(t)
    return "\n".join(lines) + "\n"


def proto_fill(msg: Any, t: T, v: dict) -> None:
    for f in t.fields:
        x = v[f.name]
        if x is None:
            continue
        ft = f.type
        if ft.kind == "struct":
            sub = getattr(msg, f.name)
            sub.SetInParent()
            proto_fill(sub, ft, x)
        elif ft.kind == "list":
            target = getattr(msg, f.name)
            for item in x:
                if ft.item.kind == "struct":  # type: ignore[union-attr]
                    proto_fill(target.add(), ft.item, item)  # type: ignore[arg-type]
                else:
                    target.append(proto_scalar(ft.item, item))  # type: ignore[arg-type]
        elif ft.kind == "map":
            target = getattr(msg, f.name)
            for key, item in x.items():
                if ft.item.kind == "struct":  # type: ignore[union-attr]
                    sub = target[key]
                    sub.SetInParent()
                    proto_fill(sub, ft.item, item)  # type: ignore[arg-type]
                else:
                    target[key] = proto_scalar(ft.item, item)  # type: ignore[arg-type]
        elif ft.wire == "Timestamp":
            seconds, micros = divmod(x, US)
            getattr(msg, f.name).seconds = seconds
            getattr(msg, f.name).nanos = micros * 1000
        elif ft.wire in PROTO_MESSAGE_WIRES:
            getattr(msg, f.name).value = x
        else:
            setattr(msg, f.name, proto_scalar(ft, x))


def proto_scalar(t: T, v: Any) -> Any:
    return t.symbols.index(v) if t.kind == "enum" else v


# ---------- one format end to end ----------

def icestream(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICESTREAM_")}
    env["RUST_LOG"] = "warn"
    out = subprocess.run([BIN, *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise AssertionError(f"icestream {' '.join(args)} failed ({out.returncode}): {out.stderr[-3000:]}")
    return out


def msk_event(topics: dict[str, list[bytes]]) -> dict:
    records = {
        f"{topic}-0": [{"topic": topic, "partition": 0, "offset": i, "timestamp": 1714564800000 + i, "timestampType": "CREATE_TIME",
                        "key": None, "value": base64.b64encode(v).decode(), "headers": []} for i, v in enumerate(values)]
        for topic, values in topics.items()
    }
    return {"eventSource": "aws:kafka", "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/c/1",
            "bootstrapServers": "127.0.0.1:9092", "records": records}


def encoder(fmt: str, t: T, tmp: Path, table: str, rng: random.Random) -> tuple[str, Any]:
    """(the pipeline's schema lines, value -> bytes)."""
    if fmt == "json":
        path = tmp / f"{table}.schema.json"
        path.write_text(json.dumps(json_schema_of(t), indent=1))
        return f'format = "json"\nschema = "{path}"', lambda v: json.dumps(json_value(rng, t, v), ensure_ascii=rng.random() < 0.5).encode()
    if fmt == "avro":
        import fastavro

        schema = avro_type(t, set())
        path = tmp / f"{table}.avsc"
        path.write_text(json.dumps(schema, indent=1))
        parsed = fastavro.parse_schema(schema)

        def encode_avro(v: Any) -> bytes:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, avro_value(t, v))
            return buf.getvalue()

        return f'format = "avro"\nschema = "{path}"', encode_avro
    from grpc_tools import protoc
    import grpc_tools
    import importlib

    path = tmp / f"{table}.proto"
    path.write_text(proto_source(t, table))
    include = Path(grpc_tools.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{tmp}", f"-I{include}", f"--python_out={tmp}", str(path)]) == 0, "protoc failed"
    sys.path.insert(0, str(tmp))
    try:
        module = importlib.import_module(f"{table}_pb2")
    finally:
        sys.path.remove(str(tmp))
    cls = getattr(module, t.name)

    def encode_proto(v: Any) -> bytes:
        m = cls()
        proto_fill(m, t, v)
        return m.SerializeToString()

    return f'format = "protobuf"\nschema = "{path}"\nmessage = "{table}.{t.name}"', encode_proto


def as_integers(table: Any) -> Any:
    """The read table with dates, times and timestamps as their integers (days, microseconds),
    at every depth: what was written, with no calendar conversion in between."""
    import pyarrow as pa

    def plain(ty: Any) -> Any:
        if pa.types.is_timestamp(ty) or pa.types.is_time(ty):
            return pa.int64()
        if pa.types.is_date32(ty):
            return pa.int32()
        if pa.types.is_struct(ty):
            return pa.struct([pa.field(f.name, plain(f.type), f.nullable) for f in ty])
        if pa.types.is_map(ty):
            return pa.map_(plain(ty.key_type), pa.field(ty.item_field.name, plain(ty.item_type), ty.item_field.nullable))
        if pa.types.is_list(ty) or pa.types.is_large_list(ty):
            return pa.list_(pa.field(ty.value_field.name, plain(ty.value_type), ty.value_field.nullable))
        return ty

    columns = [table.column(f.name).cast(plain(f.type)) for f in table.schema]
    return pa.table(columns, names=table.schema.names)


def check_format(fmt: str, tmp: Path) -> None:
    rng = random.Random(f"{SEED}-{fmt}")
    names = Namer(fmt[0].upper())
    pipelines = [f'namespace = "{NAMESPACE}"']
    topics, expected, types = {}, {}, {}
    counted = 0
    for n in range(TABLES):
        table = f"{fmt}_{n}"
        t = draw_struct(rng, fmt, names, depth=2, every_prim=True)
        lines, encode = encoder(fmt, t, tmp, table, rng)
        pipelines.append(f'[[pipeline]]\ntable = "{table}"\ntopics = ["fidelity.{table}"]\n{lines}\n')
        rows = [value(rng, t) for _ in range(RECORDS)]
        counted += sum(leaves(t, r) for r in rows)
        topics[f"fidelity.{table}"] = [encode(r) for r in rows]
        expected[table], types[table] = rows, t
    assert counted >= MIN_VALUES, f"only {counted} values drawn"
    (tmp / "pipelines.toml").write_text("\n".join(pipelines))
    (tmp / "event.json").write_text(json.dumps(msk_event(topics)))
    warehouse = tmp / "wh"
    out = icestream("ingest", str(tmp / "event.json"), f"pipelines={tmp / 'pipelines.toml'}", f"warehouse={warehouse}")
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    total = TABLES * RECORDS
    if summary["dead_letter"]:
        reasons = Counter()
        for n in range(TABLES):
            dead = readers.pyiceberg_sql_table(warehouse, NAMESPACE, f"{fmt}_{n}_dead_letter").scan().to_arrow().to_pylist()
            reasons.update(r["error"] for r in dead)
        raise AssertionError(f"seed {SEED}, {fmt}: {summary['dead_letter']} of {total} records are dead letters: {reasons.most_common(8)}")
    assert summary["written"] == total, summary

    wrong: dict[tuple[str, str, str], list[tuple[Any, Any]]] = defaultdict(list)
    for table, rows in expected.items():
        t = types[table]
        read = {
            "pyiceberg": readers.pyiceberg_sql_table(warehouse, NAMESPACE, table).scan().to_arrow(),
            "duckdb": readers.duckdb_scan(readers.metadata_location_sql(warehouse, NAMESPACE, table)),
        }
        for reader, arrow in read.items():
            got_rows = sorted(as_integers(arrow).to_pylist(), key=lambda r: r["kafka_offset"])
            assert [r["kafka_offset"] for r in got_rows] == list(range(len(rows))), f"{reader} {table}: offsets"
            for want, got in zip(rows, got_rows):
                found: list[tuple[str, str, Any, Any]] = []
                diff(t, canon(t, want), canon(t, got), table, found)
                for path, kind, w, g in found:
                    if not reader_limitation(reader, kind, w, g):
                        wrong[(reader, path, kind)].append((w, g))
    if wrong:
        lines = [f"{reader} {path} [{kind}]: {len(v)} wrong, e.g. {v[:3]}" for (reader, path, kind), v in sorted(wrong.items())]
        raise AssertionError(f"seed {SEED}, {fmt}: values read back differ from those written:\n" + "\n".join(lines[:40]))


@pytest.mark.parametrize("fmt", ["json", "avro", "protobuf"])
def test_every_value_reads_back_bit_for_bit(fmt: str, tmp_path: Path) -> None:
    check_format(fmt, tmp_path)
