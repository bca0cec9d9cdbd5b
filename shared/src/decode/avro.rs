//! Raw Avro binary datums (no container header, no registry prefix) read field by field
//! straight into columns, guided by the writer schema. Every length and block count is checked
//! against the bytes left before use, so a corrupt prefix cannot make a large allocation.

use arrow_schema::{DataType, Fields};

use super::column::Col;
use super::{DecodeError, check_utf8, element_type, millis_to_micros, utf8, uuid_bytes};
use crate::base::varint::{self, VarintError};
use crate::model::schema::avro::{AvroSchema, AvroType};

pub(crate) struct AvroReader {
    row: Plan,
}

/// How one Avro value is read and where it lands.
enum Plan {
    /// A source field the table does not have: read past it.
    Skip(AvroType),
    Leaf(AvroType),
    /// Source fields in writer order, each with its target child; then the target children the
    /// source lacks (nullable, checked at construction).
    Record {
        fields: Vec<(String, Option<usize>, Plan)>,
        absent: Vec<usize>,
    },
    Array(Box<Plan>),
    Map(Box<Plan>),
    Nullable {
        null_index: u8,
        inner: Box<Plan>,
    },
}

impl AvroReader {
    pub fn new(schema: &AvroSchema, target: &Fields) -> Self {
        AvroReader { row: plan(&schema.root, &DataType::Struct(target.clone())) }
    }

    pub fn append(&self, value: &[u8], row: &mut Col) -> Result<(), DecodeError> {
        let mut input = Input(value);
        read(&self.row, &mut input, row)?;
        if !input.0.is_empty() {
            return Err(DecodeError::new(format!("{} bytes left over after the record", input.0.len())));
        }
        Ok(())
    }
}

fn plan(t: &AvroType, target: &DataType) -> Plan {
    match (t, target) {
        (AvroType::Record(fields), DataType::Struct(columns)) => {
            let fields: Vec<_> = fields
                .iter()
                .map(|(name, t)| match columns.find(name) {
                    Some((i, column)) => (name.clone(), Some(i), plan(t, column.data_type())),
                    None => (name.clone(), None, Plan::Skip(t.clone())),
                })
                .collect();
            let absent = (0..columns.len()).filter(|i| !fields.iter().any(|(_, c, _)| *c == Some(*i))).collect();
            Plan::Record { fields, absent }
        }
        (AvroType::Array(items), _) => Plan::Array(Box::new(plan(items, &element_type(target, 0)))),
        (AvroType::Map(values), _) => Plan::Map(Box::new(plan(values, &element_type(target, 1)))),
        (AvroType::Nullable { null_index, inner }, _) => Plan::Nullable { null_index: *null_index, inner: Box::new(plan(inner, target)) },
        (leaf, _) => Plan::Leaf(leaf.clone()),
    }
}

/// The unread rest of a datum.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn long(&mut self) -> Result<i64, DecodeError> {
        let value = varint::read(&mut self.0).map_err(|e| {
            DecodeError::new(match e {
                VarintError::Truncated => "truncated: the value ends inside a number",
                VarintError::TooLong => "a varint longer than 10 bytes",
            })
        })?;
        Ok((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    fn int(&mut self) -> Result<i32, DecodeError> {
        let v = self.long()?;
        i32::try_from(v).map_err(|_| DecodeError::new(format!("int {v} out of range")))
    }

    /// The next `N` bytes as an array (fixed-width float and double).
    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or_else(|| DecodeError::new(format!("truncated: {N} bytes declared, {} left", self.0.len())))?;
        self.0 = rest;
        Ok(*head)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::new(format!("truncated: {n} bytes declared, {} left", self.0.len())));
        }
        let all: &'a [u8] = self.0;
        let (head, rest) = all.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// A length or block count, at most the bytes left (every item takes at least one byte,
    /// except empty records, which no Iceberg column holds).
    fn count(&mut self) -> Result<usize, DecodeError> {
        let n = self.long()?;
        let n = usize::try_from(n).map_err(|_| DecodeError::new(format!("negative length {n}")))?;
        if n > self.0.len() {
            return Err(DecodeError::new(format!("truncated: {n} declared, {} bytes left", self.0.len())));
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.count()?;
        self.take(n)
    }

    /// The next block's item count of an array or map; 0 ends it. A negative count is followed
    /// by the block's byte size, which we do not need.
    fn block(&mut self) -> Result<usize, DecodeError> {
        let n = self.long()?;
        if n < 0 {
            self.long()?;
            let n = n.checked_neg().ok_or_else(|| DecodeError::new("block count out of range"))?;
            return usize::try_from(n).ok().filter(|n| *n <= self.0.len()).ok_or_else(|| DecodeError::new("truncated block"));
        }
        let n = n as usize;
        if n > self.0.len() {
            return Err(DecodeError::new(format!("truncated: {n} items declared, {} bytes left", self.0.len())));
        }
        Ok(n)
    }
}

fn read(plan: &Plan, input: &mut Input, col: &mut Col) -> Result<(), DecodeError> {
    match plan {
        Plan::Skip(t) => skip(t, input),
        Plan::Leaf(t) => read_leaf(t, input, col),
        Plan::Record { fields, absent } => {
            let children = col.children()?;
            for (name, target, field) in fields {
                let read = match target {
                    Some(i) => read(field, input, &mut children[*i]),
                    None => skip_plan(field, input),
                };
                read.map_err(|e| e.at(name.as_str()))?;
            }
            for i in absent {
                children[*i].push_missing()?;
            }
            col.close_row();
            Ok(())
        }
        Plan::Array(items) => {
            let element = col.element()?;
            let mut index = 0;
            loop {
                let n = input.block()?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    read(items, input, element).map_err(|e| e.at(format!("[{index}]")))?;
                    index += 1;
                }
            }
            col.close_row();
            Ok(())
        }
        Plan::Map(values) => {
            let (keys, value_col) = col.entries()?;
            loop {
                let n = input.block()?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    let key = utf8(input.bytes()?)?;
                    keys.push_bytes(key.as_bytes())?;
                    read(values, input, value_col).map_err(|e| e.at(key))?;
                }
            }
            col.close_row();
            Ok(())
        }
        Plan::Nullable { null_index, inner } => match input.long()? {
            i if i == i64::from(*null_index) => col.push_missing(),
            i if i == i64::from(1 - *null_index) => read(inner, input, col),
            i => Err(DecodeError::new(format!("union branch {i} does not exist (the union has 2)"))),
        },
    }
}

fn skip_plan(plan: &Plan, input: &mut Input) -> Result<(), DecodeError> {
    match plan {
        Plan::Skip(t) => skip(t, input),
        _ => Err(DecodeError::new("internal: a mapped field planned as skipped")),
    }
}

fn read_leaf(t: &AvroType, input: &mut Input, col: &mut Col) -> Result<(), DecodeError> {
    match t {
        AvroType::Boolean => match input.take(1)?[0] {
            0 => col.push_bool(false),
            1 => col.push_bool(true),
            b => Err(DecodeError::new(format!("boolean byte {b} is neither 0 nor 1"))),
        },
        AvroType::Int | AvroType::Date => col.push_i32(input.int()?),
        AvroType::Long | AvroType::TimeMicros | AvroType::TimestampMicros { .. } => col.push_i64(input.long()?),
        AvroType::TimeMillis => col.push_i64(i64::from(input.int()?) * 1000),
        AvroType::TimestampMillis { .. } => col.push_i64(millis_to_micros(input.long()?)?),
        AvroType::Float => col.push_f32(f32::from_le_bytes(input.take_array()?)),
        AvroType::Double => col.push_f64(f64::from_le_bytes(input.take_array()?)),
        AvroType::Bytes => col.push_bytes(input.bytes()?),
        AvroType::String => {
            let bytes = input.bytes()?;
            check_utf8(bytes)?;
            col.push_bytes(bytes)
        }
        AvroType::Fixed(n) => col.push_fixed(input.take(*n)?),
        AvroType::Uuid => col.push_fixed(&uuid_bytes(utf8(input.bytes()?)?)?),
        AvroType::Enum(symbols) => {
            let i = input.int()?;
            let symbol = usize::try_from(i).ok().and_then(|i| symbols.get(i));
            let symbol = symbol.ok_or_else(|| DecodeError::new(format!("enum index {i} out of range (the enum has {})", symbols.len())))?;
            col.push_bytes(symbol.as_bytes())
        }
        AvroType::Decimal { fixed, precision, .. } => {
            let bytes = match fixed {
                Some(n) => input.take(*n)?,
                None => input.bytes()?,
            };
            col.push_decimal(decimal(bytes, *precision)?)
        }
        AvroType::Null | AvroType::Record(_) | AvroType::Array(_) | AvroType::Map(_) | AvroType::Nullable { .. } => {
            Err(DecodeError::new("internal: not a leaf type"))
        }
    }
}

/// Big-endian two's complement, at most `precision` digits.
fn decimal(bytes: &[u8], precision: u32) -> Result<i128, DecodeError> {
    if bytes.len() > 16 {
        return Err(DecodeError::new(format!("a decimal of {} bytes does not fit 128 bits", bytes.len())));
    }
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    let v = i128::from_be_bytes(wide);
    if v.unsigned_abs() >= 10u128.pow(precision) {
        return Err(DecodeError::new(format!("decimal {v} (unscaled) has more than {precision} digits")));
    }
    Ok(v)
}

/// Reads past a value of `t`.
fn skip(t: &AvroType, input: &mut Input) -> Result<(), DecodeError> {
    match t {
        AvroType::Null => Ok(()),
        AvroType::Boolean => input.take(1).map(drop),
        AvroType::Int | AvroType::Long | AvroType::Enum(_) | AvroType::Date | AvroType::TimeMillis | AvroType::TimeMicros => {
            input.long().map(drop)
        }
        AvroType::TimestampMillis { .. } | AvroType::TimestampMicros { .. } => input.long().map(drop),
        AvroType::Float => input.take(4).map(drop),
        AvroType::Double => input.take(8).map(drop),
        AvroType::Bytes | AvroType::String | AvroType::Uuid | AvroType::Decimal { fixed: None, .. } => input.bytes().map(drop),
        AvroType::Fixed(n) | AvroType::Decimal { fixed: Some(n), .. } => input.take(*n).map(drop),
        AvroType::Record(fields) => fields.iter().try_for_each(|(_, t)| skip(t, input)),
        AvroType::Array(items) => loop {
            match input.block()? {
                0 => return Ok(()),
                n => (0..n).try_for_each(|_| skip(items, input))?,
            }
        },
        AvroType::Map(values) => loop {
            match input.block()? {
                0 => return Ok(()),
                n => (0..n).try_for_each(|_| input.bytes().map(drop).and_then(|_| skip(values, input)))?,
            }
        },
        AvroType::Nullable { null_index, inner } => match input.long()? {
            i if i == i64::from(*null_index) => Ok(()),
            i if i == i64::from(1 - *null_index) => skip(inner, input),
            i => Err(DecodeError::new(format!("union branch {i} does not exist (the union has 2)"))),
        },
    }
}
