//! Protobuf values read straight from the wire into columns, guided by a plan built from the
//! message descriptor (prost-reflect): no `DynamicMessage` per record. Wire semantics kept:
//! fields in any order, the last value of a singular field wins, a repeated singular message
//! merges, repeated scalars packed or not, unknown fields skipped. Every length prefix is
//! checked against the bytes left.

use arrow_schema::{DataType, Fields};
use prost_reflect::{EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor};

use super::column::Col;
use super::{DecodeError, check_utf8, element_type};
use crate::base::varint::{self, VarintError};
use crate::model::pipeline::TimestampPrecision;
use crate::model::schema::protobuf::{ProtoSchema, WellKnown, well_known};

mod timestamp;

use timestamp::{timestamp_as_written, timestamp_fields, timestamp_micros};

type R = Result<(), DecodeError>;

pub(crate) struct ProtoReader {
    row: MessagePlan,
}

impl ProtoReader {
    pub fn new(schema: &ProtoSchema, target: &Fields, precision: TimestampPrecision) -> Self {
        ProtoReader { row: MessagePlan::new(&schema.message, target, precision) }
    }

    pub fn append(&self, value: &[u8], row: &mut Col) -> R {
        if self.row.one_pass {
            let rows = row.len();
            if let Ok(true) = decode_one_pass(value, &self.row, row) {
                return Ok(());
            }
            // A field seen twice, or an error: undone and read again by `decode_message`, which
            // merges repeats and names errors as it always has (rare: both cost a second read).
            row.truncate(rows);
        }
        decode_message(value, &self.row, row)
    }
}

/// A message into a struct column.
struct MessagePlan {
    /// Per target child: the field that fills it, if the message has one.
    columns: Vec<Option<FieldPlan>>,
    /// `(field number, column index)`, sorted by number.
    by_number: Vec<(u32, usize)>,
    /// The column of each field number below [`DIRECT`] (`usize::MAX`: none), without a search.
    direct: Vec<usize>,
    /// Every field singular and at most 64 columns: a record may take [`decode_one_pass`].
    one_pass: bool,
}

/// Field numbers looked up by index rather than searched: most messages number their fields
/// from 1 up.
const DIRECT: u32 = 64;

struct FieldPlan {
    name: String,
    shape: Shape,
}

enum Shape {
    /// Absent: null with `presence`, else the type's zero value (proto3 default).
    Single {
        value: ValuePlan,
        presence: bool,
    },
    List(ValuePlan),
    Map {
        key: ValuePlan,
        value: ValuePlan,
    },
}

enum ValuePlan {
    Scalar(Scalar),
    Enum(EnumDescriptor),
    Message(Box<MessagePlan>),
    /// A `google.protobuf.Timestamp`, its nanos as the pipeline's `timestamp_precision` says.
    Timestamp(TimestampPrecision),
    /// A `google.protobuf.*Value`: the wrapped scalar is field 1.
    Wrapper(Scalar),
}

#[derive(Debug, Clone, Copy)]
enum Scalar {
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Float,
    Double,
    Bool,
    String,
    Bytes,
}

impl MessagePlan {
    fn new(m: &MessageDescriptor, target: &Fields, precision: TimestampPrecision) -> Self {
        let columns: Vec<Option<FieldPlan>> = target
            .iter()
            .map(|column| {
                let fd = m.get_field_by_name(column.name())?;
                Some(FieldPlan { name: fd.name().to_string(), shape: shape(&fd, column.data_type(), precision) })
            })
            .collect();
        let mut by_number: Vec<(u32, usize)> =
            target.iter().enumerate().filter_map(|(i, column)| Some((m.get_field_by_name(column.name())?.number(), i))).collect();
        by_number.sort_unstable();
        Self::indexed(columns, by_number)
    }

    fn indexed(columns: Vec<Option<FieldPlan>>, by_number: Vec<(u32, usize)>) -> Self {
        let below = by_number.iter().map(|(n, _)| *n).filter(|n| *n < DIRECT).max().map_or(0, |n| n as usize + 1);
        let mut direct = vec![usize::MAX; below];
        for &(n, i) in by_number.iter().filter(|(n, _)| *n < DIRECT) {
            direct[n as usize] = i;
        }
        let one_pass = columns.len() <= 64 && columns.iter().flatten().all(|field| matches!(field.shape, Shape::Single { .. }));
        MessagePlan { columns, by_number, direct, one_pass }
    }

    /// No fields: a message read for nothing (an unknown well-known type, a non-struct target).
    fn empty() -> Self {
        Self::indexed(Vec::new(), Vec::new())
    }

    fn column_of(&self, number: u32) -> Option<usize> {
        if number < DIRECT {
            return self.direct.get(number as usize).copied().filter(|i| *i != usize::MAX);
        }
        self.by_number.binary_search_by_key(&number, |(n, _)| *n).ok().map(|i| self.by_number[i].1)
    }
}

fn shape(fd: &FieldDescriptor, target: &DataType, precision: TimestampPrecision) -> Shape {
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else { unreachable!("a map field's kind is its entry message") };
        return Shape::Map {
            key: value_plan(&entry.map_entry_key_field().kind(), &element_type(target, 0), precision),
            value: value_plan(&entry.map_entry_value_field().kind(), &element_type(target, 1), precision),
        };
    }
    if fd.is_list() {
        return Shape::List(value_plan(&fd.kind(), &element_type(target, 0), precision));
    }
    Shape::Single { value: value_plan(&fd.kind(), target, precision), presence: fd.supports_presence() }
}

fn value_plan(kind: &Kind, target: &DataType, precision: TimestampPrecision) -> ValuePlan {
    let scalar = match kind {
        Kind::Int32 => Scalar::Int32,
        Kind::Int64 => Scalar::Int64,
        Kind::Uint32 => Scalar::Uint32,
        Kind::Uint64 => Scalar::Uint64,
        Kind::Sint32 => Scalar::Sint32,
        Kind::Sint64 => Scalar::Sint64,
        Kind::Fixed32 => Scalar::Fixed32,
        Kind::Fixed64 => Scalar::Fixed64,
        Kind::Sfixed32 => Scalar::Sfixed32,
        Kind::Sfixed64 => Scalar::Sfixed64,
        Kind::Float => Scalar::Float,
        Kind::Double => Scalar::Double,
        Kind::Bool => Scalar::Bool,
        Kind::String => Scalar::String,
        Kind::Bytes => Scalar::Bytes,
        Kind::Enum(e) => return ValuePlan::Enum(e.clone()),
        Kind::Message(m) => {
            return match (well_known(m), target) {
                (Some(WellKnown::Timestamp), _) => ValuePlan::Timestamp(precision),
                (Some(WellKnown::Wrapper(_)), _) => {
                    let inner = m.get_field(1).map(|f| value_plan(&f.kind(), target, precision));
                    match inner {
                        Some(ValuePlan::Scalar(s)) => ValuePlan::Wrapper(s),
                        _ => ValuePlan::Message(Box::new(MessagePlan::empty())),
                    }
                }
                (None, DataType::Struct(columns)) => ValuePlan::Message(Box::new(MessagePlan::new(m, columns, precision))),
                (None, _) => ValuePlan::Message(Box::new(MessagePlan::empty())),
            };
        }
    };
    ValuePlan::Scalar(scalar)
}

/// One field's value as it is on the wire.
#[derive(Clone, Copy)]
enum Raw<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64(u64),
    Len(&'a [u8]),
}

impl Raw<'_> {
    fn wire_name(&self) -> &'static str {
        match self {
            Raw::Varint(_) => "varint",
            Raw::Fixed32(_) => "fixed32",
            Raw::Fixed64(_) => "fixed64",
            Raw::Len(_) => "length-delimited",
        }
    }
}

#[inline(always)]
fn varint(input: &mut &[u8]) -> Result<u64, DecodeError> {
    varint::read(input).map_err(|e| {
        DecodeError::new(match e {
            VarintError::Truncated => "truncated varint",
            VarintError::TooLong => "a varint longer than 10 bytes",
        })
    })
}

/// The next `N` bytes as an array (fixed32/fixed64 values).
fn take_array<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], DecodeError> {
    let (head, rest) =
        input.split_first_chunk::<N>().ok_or_else(|| DecodeError::new(format!("truncated: {N} bytes declared, {} left", input.len())))?;
    *input = rest;
    Ok(*head)
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if n > input.len() {
        return Err(DecodeError::new(format!("truncated: {n} bytes declared, {} left", input.len())));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

/// The next field of a message, groups (deprecated, never in our schemas) skipped. Inlined into
/// its loops: as a call it cost ~20 instructions a field in moving its result through memory.
#[inline(always)]
fn next_field<'a>(input: &mut &'a [u8]) -> Result<Option<(u32, Raw<'a>)>, DecodeError> {
    loop {
        if input.is_empty() {
            return Ok(None);
        }
        let tag = varint(input)?;
        let number =
            u32::try_from(tag >> 3).ok().filter(|n| *n != 0).ok_or_else(|| DecodeError::new(format!("invalid field tag {tag}")))?;
        let raw = match tag & 7 {
            0 => Raw::Varint(varint(input)?),
            1 => Raw::Fixed64(u64::from_le_bytes(take_array(input)?)),
            2 => {
                let n = usize::try_from(varint(input)?).map_err(|_| DecodeError::new("length out of range"))?;
                Raw::Len(take(input, n)?)
            }
            3 => {
                skip_group(input, number, 0)?;
                continue;
            }
            5 => Raw::Fixed32(u32::from_le_bytes(take_array(input)?)),
            w => return Err(DecodeError::new(format!("invalid wire type {w} (field {number})"))),
        };
        return Ok(Some((number, raw)));
    }
}

fn skip_group(input: &mut &[u8], number: u32, depth: usize) -> R {
    if depth > 64 {
        return Err(DecodeError::new("groups nested too deep"));
    }
    loop {
        let tag = varint(input)?;
        match tag & 7 {
            0 => drop(varint(input)?),
            1 => drop(take(input, 8)?),
            2 => {
                let n = usize::try_from(varint(input)?).map_err(|_| DecodeError::new("length out of range"))?;
                take(input, n)?;
            }
            3 => skip_group(input, (tag >> 3) as u32, depth + 1)?,
            4 if tag >> 3 == u64::from(number) => return Ok(()),
            5 => drop(take(input, 4)?),
            _ => return Err(DecodeError::new(format!("invalid wire type in group {number}"))),
        }
    }
}

/// A singular field's value so far: the last one wins; a message seen twice merges (the
/// concatenation of two encodings is their merge). What a merge or a map gathers is kept in
/// [`Gathered`], so a slot is a plain value: a record's slots need no drop, which was a call per
/// field and a pass over every slot at the end of each record.
#[derive(Clone, Copy)]
enum Slot<'a> {
    Empty,
    Raw(Raw<'a>),
    /// The merged encodings of a message seen more than once: `Gathered::merged[k]`.
    Merged(usize),
    /// A map's entries: `Gathered::entries[k]`.
    Entries(usize),
}

/// What a record's slots gather beyond one value; empty (no allocation) for most records.
#[derive(Default)]
struct Gathered<'a> {
    merged: Vec<Vec<u8>>,
    /// A map's `(key, value)` entries in wire order; a repeated key keeps its last value.
    entries: Vec<Vec<(Raw<'a>, Raw<'a>)>>,
}

fn decode_message(mut input: &[u8], plan: &MessagePlan, col: &mut Col) -> R {
    let columns = col.children()?;
    // Most messages are small: their slots live on the stack, no allocation per record.
    let mut on_stack = [Slot::Empty; 16];
    let mut on_heap: Vec<Slot> = Vec::new();
    let slots: &mut [Slot] = if plan.columns.len() <= on_stack.len() {
        &mut on_stack[..plan.columns.len()]
    } else {
        on_heap.resize(plan.columns.len(), Slot::Empty);
        &mut on_heap
    };
    let mut gathered = Gathered::default();
    while let Some((number, raw)) = next_field(&mut input)? {
        let Some(i) = plan.column_of(number) else { continue };
        let Some(field) = &plan.columns[i] else { continue };
        let read = match &field.shape {
            // A scalar: the last one wins, nothing to merge.
            Shape::Single { value: ValuePlan::Scalar(_) | ValuePlan::Enum(_), .. } => {
                slots[i] = Slot::Raw(raw);
                Ok(())
            }
            Shape::Single { value, .. } => {
                slots[i] = match (slots[i], raw, value) {
                    (Slot::Raw(Raw::Len(a)), Raw::Len(b), ValuePlan::Message(_) | ValuePlan::Timestamp(_) | ValuePlan::Wrapper(_)) => {
                        gathered.merged.push([a, b].concat());
                        Slot::Merged(gathered.merged.len() - 1)
                    }
                    (Slot::Merged(k), Raw::Len(b), ValuePlan::Message(_) | ValuePlan::Timestamp(_) | ValuePlan::Wrapper(_)) => {
                        gathered.merged[k].extend_from_slice(b);
                        Slot::Merged(k)
                    }
                    (_, raw, _) => Slot::Raw(raw),
                };
                Ok(())
            }
            Shape::List(element) => push_items(raw, element, &mut columns[i]),
            Shape::Map { key, value } => read_entry(raw, key, value).map(|entry| match slots[i] {
                Slot::Entries(k) => gathered.entries[k].push(entry),
                _ => {
                    gathered.entries.push(vec![entry]);
                    slots[i] = Slot::Entries(gathered.entries.len() - 1);
                }
            }),
        };
        read.map_err(|e| e.at(field.name.as_str()))?;
    }
    for ((column, field), slot) in columns.iter_mut().zip(&plan.columns).zip(slots.iter()) {
        let Some(field) = field else {
            column.push_missing()?;
            continue;
        };
        let pushed = match (&field.shape, *slot) {
            (Shape::Single { presence: true, .. }, Slot::Empty) => column.push_missing(),
            (Shape::Single { value, .. }, Slot::Empty) => push_value(zero(value), value, column),
            // A scalar, the most common field, without the call through `push_value`.
            (Shape::Single { value: ValuePlan::Scalar(s), .. }, Slot::Raw(raw)) => push_scalar(raw, *s, column),
            (Shape::Single { value, .. }, Slot::Raw(raw)) => push_value(raw, value, column),
            (Shape::Single { value, .. }, Slot::Merged(k)) => push_value(Raw::Len(&gathered.merged[k]), value, column),
            (Shape::Single { .. }, Slot::Entries(_)) => Err(DecodeError::new("internal: map entries for a singular field")),
            (Shape::Map { key, value }, Slot::Entries(k)) => push_map(&gathered.entries[k], key, value, column),
            (Shape::List(_) | Shape::Map { .. }, _) => {
                column.close_row();
                Ok(())
            }
        };
        pushed.map_err(|e| e.at(field.name.as_str()))?;
    }
    col.close_row();
    Ok(())
}

/// A message whose fields are all singular, in one pass: each value pushed into its column as
/// it is read, then the columns of absent fields filled. [`decode_message`] keeps every field's
/// value in a slot until the message ends, for the merges a field seen twice needs: a slot per
/// column written and read back, and a second pass over all columns (~250 instructions a
/// reference record, callgrind). `Ok(false)` at a field seen twice: the caller undoes the row.
fn decode_one_pass(mut input: &[u8], plan: &MessagePlan, col: &mut Col) -> Result<bool, DecodeError> {
    let columns = col.children()?;
    let mut seen = 0u64;
    while let Some((number, raw)) = next_field(&mut input)? {
        let Some(i) = plan.column_of(number) else { continue };
        let Some(field) = &plan.columns[i] else { continue };
        // At most 64 columns (`MessagePlan::one_pass`), so every column has its bit.
        let bit = 1u64.checked_shl(i as u32).unwrap_or(0);
        if bit == 0 || seen & bit != 0 {
            return Ok(false);
        }
        seen |= bit;
        match &field.shape {
            Shape::Single { value: ValuePlan::Scalar(s), .. } => push_scalar(raw, *s, &mut columns[i])?,
            Shape::Single { value, .. } => push_value(raw, value, &mut columns[i])?,
            Shape::List(_) | Shape::Map { .. } => return Ok(false),
        }
    }
    // The columns no field filled, lowest first.
    let all = u64::MAX.checked_shr(64 - columns.len().min(64) as u32).unwrap_or(0);
    let mut unseen = !seen & all;
    while unseen != 0 {
        let i = unseen.trailing_zeros() as usize;
        unseen &= unseen - 1;
        match &plan.columns[i] {
            None | Some(FieldPlan { shape: Shape::Single { presence: true, .. }, .. }) => columns[i].push_missing()?,
            Some(FieldPlan { shape: Shape::Single { value, .. }, .. }) => push_value(zero(value), value, &mut columns[i])?,
            Some(_) => return Ok(false),
        }
    }
    col.close_row();
    Ok(true)
}

/// A repeated field's occurrence: one element, or a packed run of scalars.
fn push_items(raw: Raw, element: &ValuePlan, list: &mut Col) -> R {
    let first = list.open_items();
    let items = list.element()?;
    let at = |e: DecodeError, items: &Col| e.at(format!("[{}]", items.len() - first));
    match (raw, element) {
        (Raw::Len(mut packed), ValuePlan::Scalar(s)) if !matches!(s, Scalar::String | Scalar::Bytes) => {
            while !packed.is_empty() {
                let raw = match s {
                    Scalar::Fixed32 | Scalar::Sfixed32 | Scalar::Float => Raw::Fixed32(u32::from_le_bytes(take_array(&mut packed)?)),
                    Scalar::Fixed64 | Scalar::Sfixed64 | Scalar::Double => Raw::Fixed64(u64::from_le_bytes(take_array(&mut packed)?)),
                    _ => Raw::Varint(varint(&mut packed)?),
                };
                push_value(raw, element, items).map_err(|e| at(e, items))?;
            }
            Ok(())
        }
        (Raw::Len(mut packed), ValuePlan::Enum(_)) => {
            while !packed.is_empty() {
                let raw = Raw::Varint(varint(&mut packed)?);
                push_value(raw, element, items).map_err(|e| at(e, items))?;
            }
            Ok(())
        }
        _ => push_value(raw, element, items).map_err(|e| at(e, items)),
    }
}

/// One map entry (a message: key 1, value 2; absent parts are their zero values).
fn read_entry<'a>(raw: Raw<'a>, key_plan: &ValuePlan, value_plan: &ValuePlan) -> Result<(Raw<'a>, Raw<'a>), DecodeError> {
    let Raw::Len(mut entry) = raw else { return Err(wire_mismatch(raw, "a map entry")) };
    let (mut key, mut value) = (zero(key_plan), zero(value_plan));
    while let Some((number, raw)) = next_field(&mut entry)? {
        match number {
            1 => key = raw,
            2 => value = raw,
            _ => {}
        }
    }
    Ok((key, value))
}

/// A map row: each key once, with its last value, in first-seen order.
fn push_map<'a>(entries: &[(Raw<'a>, Raw<'a>)], key_plan: &ValuePlan, value_plan: &ValuePlan, map: &mut Col) -> R {
    #[derive(PartialEq, Eq, Hash)]
    enum Key<'a> {
        Number(u64),
        Bytes(&'a [u8]),
    }
    fn key_of<'a>(raw: &Raw<'a>) -> Key<'a> {
        match *raw {
            Raw::Varint(v) | Raw::Fixed64(v) => Key::Number(v),
            Raw::Fixed32(v) => Key::Number(u64::from(v)),
            Raw::Len(b) => Key::Bytes(b),
        }
    }
    let mut first: std::collections::HashMap<Key, usize> = std::collections::HashMap::with_capacity(entries.len());
    let mut kept: Vec<(Raw<'a>, Raw<'a>)> = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        match first.entry(key_of(k)) {
            std::collections::hash_map::Entry::Occupied(at) => kept[*at.get()].1 = *v,
            std::collections::hash_map::Entry::Vacant(at) => {
                at.insert(kept.len());
                kept.push((*k, *v));
            }
        }
    }
    let (keys, values) = map.entries()?;
    for (key, value) in kept {
        push_value(key, key_plan, keys)?;
        let text = match key {
            Raw::Len(k) => String::from_utf8_lossy(k).into_owned(),
            Raw::Varint(v) | Raw::Fixed64(v) => v.to_string(),
            Raw::Fixed32(v) => v.to_string(),
        };
        push_value(value, value_plan, values).map_err(|e| e.at(text))?;
    }
    map.close_row();
    Ok(())
}

/// The zero value on the wire of a value of `plan` (an empty message for messages).
fn zero(plan: &ValuePlan) -> Raw<'static> {
    match plan {
        ValuePlan::Scalar(s) => zero_scalar(*s),
        ValuePlan::Message(_) | ValuePlan::Timestamp(_) | ValuePlan::Wrapper(_) => Raw::Len(&[]),
        ValuePlan::Enum(_) => Raw::Varint(0),
    }
}

fn zero_scalar(s: Scalar) -> Raw<'static> {
    match s {
        Scalar::Fixed32 | Scalar::Sfixed32 | Scalar::Float => Raw::Fixed32(0),
        Scalar::Fixed64 | Scalar::Sfixed64 | Scalar::Double => Raw::Fixed64(0),
        Scalar::String | Scalar::Bytes => Raw::Len(&[]),
        _ => Raw::Varint(0),
    }
}

fn wire_mismatch(raw: Raw, what: &str) -> DecodeError {
    DecodeError::new(format!("a {} value where the schema has {what}", raw.wire_name()))
}

fn push_value(raw: Raw, plan: &ValuePlan, col: &mut Col) -> R {
    match (plan, raw) {
        (ValuePlan::Scalar(s), raw) => push_scalar(raw, *s, col),
        (ValuePlan::Enum(e), Raw::Varint(v)) => {
            let n = v as i32;
            match e.get_value(n) {
                Some(known) => col.push_bytes(known.name().as_bytes()),
                None => col.push_bytes(n.to_string().as_bytes()),
            }
        }
        (ValuePlan::Message(m), Raw::Len(bytes)) => decode_message(bytes, m, col),
        (ValuePlan::Timestamp(precision), Raw::Len(bytes)) => {
            let (seconds, nanos) = match timestamp_as_written(bytes) {
                Some(fields) => fields,
                None => timestamp_fields(bytes)?,
            };
            col.push_i64(timestamp_micros(seconds, nanos, *precision)?)
        }
        (ValuePlan::Wrapper(s), Raw::Len(mut bytes)) => {
            let mut inner = zero_scalar(*s);
            while let Some((number, raw)) = next_field(&mut bytes)? {
                if number == 1 {
                    inner = raw;
                }
            }
            push_scalar(inner, *s, col)
        }
        (ValuePlan::Enum(_), raw) => Err(wire_mismatch(raw, "an enum")),
        (_, raw) => Err(wire_mismatch(raw, "a message")),
    }
}

/// Inlined where it is called (a field at a time: a call's saves and restores were half its
/// cost); its errors are made apart, in cold functions.
#[inline(always)]
fn push_scalar(raw: Raw, s: Scalar, col: &mut Col) -> R {
    let zigzag = |v: u64| (v >> 1) as i64 ^ -((v & 1) as i64);
    match (s, raw) {
        (Scalar::Int32, Raw::Varint(v)) => col.push_i32(v as i32),
        (Scalar::Int64, Raw::Varint(v)) => col.push_i64(v as i64),
        (Scalar::Uint32, Raw::Varint(v)) => col.push_i64(i64::from(v as u32)),
        (Scalar::Uint64, Raw::Varint(v)) | (Scalar::Fixed64, Raw::Fixed64(v)) => col.push_i64(i64::try_from(v).map_err(|_| above_long(v))?),
        (Scalar::Sint32, Raw::Varint(v)) => col.push_i32(zigzag(u64::from(v as u32)) as i32),
        (Scalar::Sint64, Raw::Varint(v)) => col.push_i64(zigzag(v)),
        (Scalar::Bool, Raw::Varint(v)) => col.push_bool(v != 0),
        (Scalar::Fixed32, Raw::Fixed32(v)) => col.push_i64(i64::from(v)),
        (Scalar::Sfixed32, Raw::Fixed32(v)) => col.push_i32(v as i32),
        (Scalar::Sfixed64, Raw::Fixed64(v)) => col.push_i64(v as i64),
        (Scalar::Float, Raw::Fixed32(v)) => col.push_f32(f32::from_bits(v)),
        (Scalar::Double, Raw::Fixed64(v)) => col.push_f64(f64::from_bits(v)),
        (Scalar::String, Raw::Len(b)) => {
            check_utf8(b)?;
            col.push_bytes(b)
        }
        (Scalar::Bytes, Raw::Len(b)) => col.push_bytes(b),
        (s, raw) => Err(scalar_mismatch(raw, s)),
    }
}

#[cold]
fn above_long(v: u64) -> DecodeError {
    DecodeError::new(format!("{v} exceeds the long range (uint64 above 2^63-1)"))
}

#[cold]
fn scalar_mismatch(raw: Raw, s: Scalar) -> DecodeError {
    wire_mismatch(raw, &format!("{s:?}").to_lowercase())
}

#[cfg(test)]
mod tests;
