//! Column builders that can be truncated back to a row count, so a record that fails halfway
//! through (a bad nested value, a missing required field) leaves no trace. Arrow's own builders
//! cannot un-append; these are plain vectors turned into Arrow arrays at [`Col::finish`].

use std::mem::take;
use std::sync::Arc;

use arrow_array::types::Decimal128Type;
use arrow_array::*;
use arrow_buffer::{BooleanBuffer, Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, FieldRef, TimeUnit};

use super::DecodeError;

type R = Result<(), DecodeError>;

pub(crate) struct Col {
    field: FieldRef,
    /// Which rows are valid: a count until the first null (arrow-rs's builder), not a `bool`
    /// pushed per value and scanned again at the end.
    valid: NullBufferBuilder,
    data: Data,
}

enum Data {
    Bool(Vec<bool>),
    /// int, date
    I32(Vec<i32>),
    /// long, time, timestamp(tz)
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Decimal(Vec<i128>),
    /// string, binary: each row's end offset into `bytes`.
    Bytes {
        ends: Vec<usize>,
        bytes: Vec<u8>,
    },
    Fixed {
        width: usize,
        bytes: Vec<u8>,
    },
    Struct(Vec<Col>),
    List {
        ends: Vec<usize>,
        child: Box<Col>,
    },
    Map {
        ends: Vec<usize>,
        keys: Box<Col>,
        values: Box<Col>,
    },
}

impl Col {
    /// Storage for `field`; `None` for an Arrow type no Iceberg column has.
    pub fn new(field: &FieldRef) -> Option<Col> {
        let data = match field.data_type() {
            DataType::Boolean => Data::Bool(Vec::new()),
            DataType::Int32 | DataType::Date32 => Data::I32(Vec::new()),
            DataType::Int64 | DataType::Time64(TimeUnit::Microsecond) | DataType::Timestamp(TimeUnit::Microsecond, _) => {
                Data::I64(Vec::new())
            }
            DataType::Float32 => Data::F32(Vec::new()),
            DataType::Float64 => Data::F64(Vec::new()),
            DataType::Decimal128(..) => Data::Decimal(Vec::new()),
            DataType::Utf8 | DataType::Binary | DataType::LargeBinary => Data::Bytes { ends: Vec::new(), bytes: Vec::new() },
            DataType::FixedSizeBinary(w) => Data::Fixed { width: usize::try_from(*w).ok()?, bytes: Vec::new() },
            DataType::Struct(fields) => Data::Struct(fields.iter().map(Col::new).collect::<Option<_>>()?),
            DataType::List(element) => Data::List { ends: Vec::new(), child: Box::new(Col::new(element)?) },
            DataType::Map(entries, _) => {
                let DataType::Struct(kv) = entries.data_type() else { return None };
                if kv.len() != 2 {
                    return None;
                }
                Data::Map { ends: Vec::new(), keys: Box::new(Col::new(&kv[0])?), values: Box::new(Col::new(&kv[1])?) }
            }
            _ => return None,
        };
        Some(Col { field: field.clone(), valid: NullBufferBuilder::new(0), data })
    }

    pub fn name(&self) -> &str {
        self.field.name()
    }

    /// Room for `rows` more rows, a struct's columns included, so a batch's vectors grow once
    /// instead of doubling with a copy each time. How many items a list, map or string holds
    /// is not known: only their row ends are reserved.
    pub fn reserve(&mut self, rows: usize) {
        match &mut self.data {
            Data::Bool(x) => x.reserve(rows),
            Data::I32(x) => x.reserve(rows),
            Data::I64(x) => x.reserve(rows),
            Data::F32(x) => x.reserve(rows),
            Data::F64(x) => x.reserve(rows),
            Data::Decimal(x) => x.reserve(rows),
            Data::Fixed { width, bytes } => bytes.reserve(width.saturating_mul(rows)),
            Data::Bytes { ends, .. } | Data::List { ends, .. } | Data::Map { ends, .. } => ends.reserve(rows),
            Data::Struct(children) => children.iter_mut().for_each(|c| c.reserve(rows)),
        }
    }

    pub fn len(&self) -> usize {
        self.valid.len()
    }

    #[cold]
    fn mismatch(&self, what: &str) -> DecodeError {
        mismatch(&self.field, what)
    }

    #[inline(always)]
    pub fn push_bool(&mut self, v: bool) -> R {
        match &mut self.data {
            Data::Bool(x) => x.push(v),
            _ => return Err(self.mismatch("boolean")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    /// Into an int (or date) column, or widened into a long one.
    #[inline(always)]
    pub fn push_i32(&mut self, v: i32) -> R {
        match &mut self.data {
            Data::I32(x) => x.push(v),
            Data::I64(x) => x.push(i64::from(v)),
            _ => return Err(self.mismatch("int")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    #[inline(always)]
    pub fn push_i64(&mut self, v: i64) -> R {
        match &mut self.data {
            Data::I64(x) => x.push(v),
            _ => return Err(self.mismatch("long")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    #[inline(always)]
    pub fn push_f32(&mut self, v: f32) -> R {
        match &mut self.data {
            Data::F32(x) => x.push(v),
            Data::F64(x) => x.push(f64::from(v)),
            _ => return Err(self.mismatch("float")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    #[inline(always)]
    pub fn push_f64(&mut self, v: f64) -> R {
        match &mut self.data {
            Data::F64(x) => x.push(v),
            _ => return Err(self.mismatch("double")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    /// The unscaled value; source and column scales are equal (checked at construction).
    pub fn push_decimal(&mut self, v: i128) -> R {
        match &mut self.data {
            Data::Decimal(x) => x.push(v),
            _ => return Err(self.mismatch("decimal")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    /// String (already valid UTF-8) or binary bytes.
    #[inline(always)]
    pub fn push_bytes(&mut self, v: &[u8]) -> R {
        match &mut self.data {
            Data::Bytes { ends, bytes } => {
                bytes.extend_from_slice(v);
                ends.push(bytes.len());
            }
            _ => return Err(self.mismatch("string or binary")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    pub fn push_fixed(&mut self, v: &[u8]) -> R {
        match &mut self.data {
            Data::Fixed { width, bytes } if *width == v.len() => bytes.extend_from_slice(v),
            Data::Fixed { width, .. } => return Err(DecodeError::new(format!("expected {width} bytes, got {}", v.len()))),
            _ => return Err(self.mismatch("fixed")),
        }
        self.valid.append_non_null();
        Ok(())
    }

    /// The value is null or absent: a null row, or an error for a required column.
    pub fn push_missing(&mut self) -> R {
        if !self.field.is_nullable() {
            return Err(DecodeError::new("required but missing"));
        }
        self.push_placeholder();
        Ok(())
    }

    /// A row that reads as null where nullable, else as a default value (for the children of a
    /// null struct, which the struct's own null masks).
    fn push_placeholder(&mut self) {
        match &mut self.data {
            Data::Bool(x) => x.push(false),
            Data::I32(x) => x.push(0),
            Data::I64(x) => x.push(0),
            Data::F32(x) => x.push(0.0),
            Data::F64(x) => x.push(0.0),
            Data::Decimal(x) => x.push(0),
            Data::Bytes { ends, bytes } => ends.push(bytes.len()),
            Data::Fixed { width, bytes } => bytes.resize(bytes.len() + *width, 0),
            Data::Struct(children) => children.iter_mut().for_each(Col::push_placeholder),
            Data::List { ends, child } => ends.push(child.len()),
            Data::Map { ends, keys, .. } => ends.push(keys.len()),
        }
        self.valid.append(!self.field.is_nullable());
    }

    /// A struct column's children, to push one row into each before [`Self::close_row`].
    pub fn children(&mut self) -> Result<&mut [Col], DecodeError> {
        match &mut self.data {
            Data::Struct(children) => Ok(children),
            _ => Err(mismatch(&self.field, "struct")),
        }
    }

    /// How many elements the open (not yet closed) row of a list column has so far.
    pub fn open_items(&self) -> usize {
        match &self.data {
            Data::List { ends, child } => child.len() - ends.last().copied().unwrap_or(0),
            _ => 0,
        }
    }

    /// A list column's element column, to push this row's elements into.
    pub fn element(&mut self) -> Result<&mut Col, DecodeError> {
        match &mut self.data {
            Data::List { child, .. } => Ok(child),
            _ => Err(mismatch(&self.field, "list")),
        }
    }

    /// A map column's key and value columns, to push this row's entries into.
    pub fn entries(&mut self) -> Result<(&mut Col, &mut Col), DecodeError> {
        match &mut self.data {
            Data::Map { keys, values, .. } => Ok((keys, values)),
            _ => Err(mismatch(&self.field, "map")),
        }
    }

    /// Ends a non-null struct, list or map row whose parts were pushed.
    pub fn close_row(&mut self) {
        match &mut self.data {
            Data::List { ends, child } => ends.push(child.len()),
            Data::Map { ends, keys, .. } => ends.push(keys.len()),
            _ => {}
        }
        self.valid.append_non_null();
    }

    /// Drops rows from `rows` on, nested parts included: also the parts of a row that failed
    /// before it was closed (children pushed, the row itself not yet).
    pub fn truncate(&mut self, rows: usize) {
        self.valid.truncate(rows);
        let end = |ends: &Vec<usize>| if rows == 0 { 0 } else { ends[rows - 1] };
        match &mut self.data {
            Data::Bool(x) => x.truncate(rows),
            Data::I32(x) => x.truncate(rows),
            Data::I64(x) => x.truncate(rows),
            Data::F32(x) => x.truncate(rows),
            Data::F64(x) => x.truncate(rows),
            Data::Decimal(x) => x.truncate(rows),
            Data::Bytes { ends, bytes } => {
                bytes.truncate(end(ends));
                ends.truncate(rows);
            }
            Data::Fixed { width, bytes } => bytes.truncate(rows * *width),
            Data::Struct(children) => children.iter_mut().for_each(|c| c.truncate(rows)),
            Data::List { ends, child } => {
                child.truncate(end(ends));
                ends.truncate(rows);
            }
            Data::Map { ends, keys, values } => {
                let n = end(ends);
                keys.truncate(n);
                values.truncate(n);
                ends.truncate(rows);
            }
        }
    }

    /// A struct column's children as arrays; empties the column.
    pub fn finish_children(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        self.valid = NullBufferBuilder::new(0);
        match &mut self.data {
            Data::Struct(children) => children.iter_mut().map(Col::finish).collect(),
            _ => Err(ArrowError::SchemaError(format!("{} is not a struct column", self.field.name()))),
        }
    }

    /// The rows so far as one array of the column's type; empties the column.
    pub fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        // A bitmap made for a null that a truncate dropped may be all valid: no nulls then.
        let nulls = self.valid.finish().filter(|nulls| nulls.null_count() > 0);
        let dt = self.field.data_type().clone();
        Ok(match &mut self.data {
            Data::Bool(x) => Arc::new(BooleanArray::new(BooleanBuffer::from(take(x)), nulls)),
            Data::I32(x) => {
                let values = ScalarBuffer::from(take(x));
                match dt {
                    DataType::Date32 => Arc::new(Date32Array::new(values, nulls)),
                    _ => Arc::new(Int32Array::new(values, nulls)),
                }
            }
            Data::I64(x) => {
                let values = ScalarBuffer::from(take(x));
                match dt {
                    DataType::Time64(_) => Arc::new(Time64MicrosecondArray::new(values, nulls)),
                    DataType::Timestamp(_, tz) => Arc::new(TimestampMicrosecondArray::new(values, nulls).with_timezone_opt(tz)),
                    _ => Arc::new(Int64Array::new(values, nulls)),
                }
            }
            Data::F32(x) => Arc::new(Float32Array::new(ScalarBuffer::from(take(x)), nulls)),
            Data::F64(x) => Arc::new(Float64Array::new(ScalarBuffer::from(take(x)), nulls)),
            Data::Decimal(x) => {
                let DataType::Decimal128(p, s) = dt else { unreachable!("Data::Decimal is made for Decimal128") };
                Arc::new(PrimitiveArray::<Decimal128Type>::new(ScalarBuffer::from(take(x)), nulls).with_precision_and_scale(p, s)?)
            }
            Data::Bytes { ends, bytes } => {
                let (ends, bytes) = (take(ends), Buffer::from_vec(take(bytes)));
                match dt {
                    DataType::Utf8 => Arc::new(StringArray::try_new(offsets(&ends)?, bytes, nulls)?),
                    DataType::Binary => Arc::new(BinaryArray::try_new(offsets(&ends)?, bytes, nulls)?),
                    _ => Arc::new(LargeBinaryArray::try_new(offsets(&ends)?, bytes, nulls)?),
                }
            }
            Data::Fixed { width, bytes } => Arc::new(FixedSizeBinaryArray::try_new(*width as i32, Buffer::from_vec(take(bytes)), nulls)?),
            Data::Struct(children) => {
                let DataType::Struct(fields) = dt else { unreachable!("Data::Struct is made for Struct") };
                let arrays = children.iter_mut().map(Col::finish).collect::<Result<_, _>>()?;
                Arc::new(StructArray::try_new(fields, arrays, nulls)?)
            }
            Data::List { ends, child } => {
                let DataType::List(element) = dt else { unreachable!("Data::List is made for List") };
                Arc::new(ListArray::try_new(element, offsets(&take(ends))?, child.finish()?, nulls)?)
            }
            Data::Map { ends, keys, values } => {
                let DataType::Map(entries, sorted) = dt else { unreachable!("Data::Map is made for Map") };
                let DataType::Struct(kv) = entries.data_type() else { unreachable!("a map's entries are a struct") };
                let pairs = StructArray::try_new(kv.clone(), vec![keys.finish()?, values.finish()?], None)?;
                Arc::new(MapArray::try_new(entries, offsets(&take(ends))?, pairs, nulls, sorted)?)
            }
        })
    }
}

/// Only a bug can get here: plans are built from the same target as the columns.
fn mismatch(field: &FieldRef, what: &str) -> DecodeError {
    DecodeError::new(format!("a {what} value cannot go into a {} column", field.data_type()))
}

fn offsets<O: OffsetSizeTrait>(ends: &[usize]) -> Result<OffsetBuffer<O>, ArrowError> {
    let too_big = || ArrowError::ComputeError("column too large for its offset type: flush smaller batches".into());
    let mut out = Vec::with_capacity(ends.len() + 1);
    out.push(O::usize_as(0));
    for &e in ends {
        out.push(O::from_usize(e).ok_or_else(too_big)?);
    }
    Ok(OffsetBuffer::new(ScalarBuffer::from(out)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;

    /// Where the vectors of a `{n: long, s: string, l: list<int>}` row keep their values (the
    /// validity is a count until the first null).
    fn addresses(row: &Col) -> Option<[*const u8; 3]> {
        let Data::Struct(columns) = &row.data else { return None };
        let (Data::I64(n), Data::Bytes { ends, .. }, Data::List { ends: list_ends, .. }) =
            (&columns[0].data, &columns[1].data, &columns[2].data)
        else {
            return None;
        };
        Some([n.as_ptr().cast(), ends.as_ptr().cast(), list_ends.as_ptr().cast()])
    }

    #[test]
    fn reserved_rows_are_pushed_without_moving_the_vectors() -> Result<(), String> {
        let fields = vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("l", DataType::List(Arc::new(Field::new("item", DataType::Int32, true))), true),
        ];
        let root = Arc::new(Field::new("", DataType::Struct(fields.into()), false));
        let mut row = Col::new(&root).ok_or("no column for the row")?;
        row.reserve(100);
        let before = addresses(&row);
        assert!(before.is_some());
        for i in 0..100 {
            let Data::Struct(columns) = &mut row.data else { return Err("not a struct".into()) };
            columns[0].push_i64(i).map_err(|e| e.to_string())?;
            columns[1].push_bytes(b"x").map_err(|e| e.to_string())?;
            columns[2].close_row();
            row.close_row();
        }
        assert_eq!(addresses(&row), before);
        assert_eq!(row.len(), 100);
        Ok(())
    }

    #[test]
    fn nulls_follow_truncates_and_a_dropped_null_leaves_none() -> Result<(), String> {
        let field = Arc::new(Field::new("n", DataType::Int64, true));
        let mut col = Col::new(&field).ok_or("no column")?;
        col.push_i64(1).map_err(|e| e.to_string())?;
        col.push_missing().map_err(|e| e.to_string())?;
        col.push_i64(3).map_err(|e| e.to_string())?;
        col.truncate(2);
        col.push_i64(4).map_err(|e| e.to_string())?;
        let kept = col.finish().map_err(|e| e.to_string())?;
        assert_eq!(kept.as_ref(), &Int64Array::from(vec![Some(1), None, Some(4)]) as &dyn Array);
        // The null made a bitmap; the truncate drops the null, not the bitmap.
        col.push_i64(1).map_err(|e| e.to_string())?;
        col.push_missing().map_err(|e| e.to_string())?;
        col.truncate(1);
        let all_valid = col.finish().map_err(|e| e.to_string())?;
        assert_eq!(all_valid.len(), 1);
        assert!(all_valid.nulls().is_none(), "no null buffer without nulls");
        // A required column refuses a missing value and keeps its rows.
        let mut required = Col::new(&Arc::new(Field::new("r", DataType::Int64, false))).ok_or("no column")?;
        required.push_i64(1).map_err(|e| e.to_string())?;
        assert!(required.push_missing().is_err());
        assert_eq!(required.len(), 1);
        Ok(())
    }
}
