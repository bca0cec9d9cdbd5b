//! Where the touched keys live in an upsert table: which data files can hold them (bucket of
//! each bucketed key column, then each key column's bounds), and their live rows there (key and
//! order columns only, of the row groups whose bloom filters may hold a touched key, position
//! deletes applied). What was read is counted, so the cost of a batch is visible per
//! invocation.

use std::collections::{BTreeSet, HashMap};

use arrow_array::{ArrayRef, Int64Array};
use arrow_array::cast::AsArray;
use arrow_schema::DataType;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataFile, Datum, Literal, PrimitiveLiteral, Transform};
use iceberg::table::Table;
use iceberg::transform::create_transform_function;

use super::keys::{KeyCodec, datum_at};
use crate::columns::Columns;
use super::key_reader::{TouchedKeys, read_key_rows};
use crate::commit::row_delta::{LiveFiles, deleted_positions};
use crate::error::Result;

/// Where a key's live row is.
#[derive(Debug, Clone, Copy)]
pub struct LiveRow {
    /// Index into the candidate files.
    pub file: usize,
    pub pos: i64,
    pub order: i64,
}

/// What reading cost.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadCost {
    pub files: usize,
    pub bytes: u64,
}

/// Data files that may hold a touched key: for each key column with a bucket partition, the
/// right buckets; for each key column, bounds that overlap the touched values.
/// `touched`: the key columns of every change of the batch.
pub fn candidate_files<'a>(table: &Table, live: &'a LiveFiles, codec: &KeyCodec, touched: &[ArrayRef]) -> Vec<&'a DataFile> {
    let spec = table.metadata().default_partition_spec();
    let schema = table.metadata().current_schema();
    let mut bucket_sets: Vec<(usize, BTreeSet<i32>)> = Vec::new();
    let mut ranges: Vec<(i32, Datum, Datum)> = Vec::new();
    for (name, column) in codec.names().zip(touched) {
        let Some(field_id) = schema.field_by_name(name).map(|f| f.id) else { continue };
        for (index, pf) in spec.fields().iter().enumerate() {
            if pf.source_id != field_id || !matches!(pf.transform, Transform::Bucket(_)) {
                continue;
            }
            // A transform that cannot take the column just prunes nothing.
            let buckets = create_transform_function(&pf.transform).and_then(|f| f.transform(column.clone()));
            if let Ok(buckets) = buckets
                && let Some(ints) = buckets.as_primitive_opt::<arrow_array::types::Int32Type>()
            {
                bucket_sets.push((index, ints.iter().flatten().collect()));
            }
        }
        let datums: Vec<Datum> = (0..column.len()).filter_map(|i| datum_at(column, i)).collect();
        if datums.len() == column.len()
            && let (Some(lo), Some(hi)) = (min(&datums), max(&datums))
        {
            ranges.push((field_id, lo.clone(), hi.clone()));
        }
    }
    live.data
        .iter()
        .filter(|f| {
            bucket_sets.iter().all(|(index, set)| match f.partition().fields().get(*index) {
                Some(Some(Literal::Primitive(PrimitiveLiteral::Int(b)))) => set.contains(b),
                _ => true,
            })
        })
        .filter(|f| {
            ranges.iter().all(|(id, lo, hi)| {
                let below = f.upper_bounds().get(id).is_some_and(|upper| upper < lo);
                let above = f.lower_bounds().get(id).is_some_and(|lower| lower > hi);
                !(below || above)
            })
        })
        .collect()
}

fn min(datums: &[Datum]) -> Option<&Datum> {
    datums.iter().reduce(|a, b| if b < a { b } else { a })
}

fn max(datums: &[Datum]) -> Option<&Datum> {
    datums.iter().reduce(|a, b| if b > a { b } else { a })
}

/// The order column of `batch` as longs (ints, dates and timestamps are whole numbers).
pub fn order_values(columns: &Columns<'_>, order: &str) -> Result<Int64Array> {
    let array = columns.array(order)?;
    let longs = match array.data_type() {
        DataType::Int64 => array.clone(),
        _ => arrow_cast::cast(array, &DataType::Int64)?,
    };
    Ok(longs.as_primitive::<arrow_array::types::Int64Type>().clone())
}

/// The live rows of the touched keys in one data file, its live row count, and the bytes read.
async fn live_rows_in(
    table: &Table,
    live: &LiveFiles,
    index: usize,
    file: &DataFile,
    probe: &Probe<'_>,
) -> Result<(Vec<(Vec<u8>, LiveRow)>, usize, u64)> {
    let deletes = live.deletes_for(file.file_path());
    let delete_bytes: u64 = deletes.iter().map(|d| d.file_size_in_bytes()).sum();
    let deleted = deleted_positions(table, file.file_path(), &deletes).await?;
    let mut names: Vec<&str> = probe.codec.names().collect();
    if !names.contains(&probe.order) {
        names.push(probe.order);
    }
    let read = read_key_rows(table, file, &probe.touched, &names, &deleted).await?;
    let schema = table.metadata().current_schema();
    let mut out = Vec::new();
    let mut row = 0;
    for batch in read.batches {
        let found = probe.codec.rows(&batch, file.file_path(), Some(schema))?;
        let orders = order_values(&Columns::new(&batch, file.file_path()).with_schema(schema), probe.order)?;
        for i in 0..batch.num_rows() {
            let key = found.row(i).data();
            if probe.keys.contains(key) {
                out.push((key.to_vec(), LiveRow { file: index, pos: read.positions[row], order: orders.value(i) }));
            }
            row += 1;
        }
    }
    // The file's live rows: its rows minus those deleted (each position deleted once).
    let live_count = (file.record_count() as usize).saturating_sub(deleted.len());
    Ok((out, live_count, read.bytes + delete_bytes))
}

/// What a batch looks for: its keys (encoded, and as columns and in key order for pruning).
pub struct Probe<'a> {
    pub codec: &'a KeyCodec,
    pub order: &'a str,
    pub keys: &'a std::collections::HashSet<Vec<u8>>,
    pub touched: TouchedKeys<'a>,
}

impl<'a> Probe<'a> {
    /// `touched`: the key columns of every change, row by row; `keys`: the same keys, encoded.
    pub fn new(codec: &'a KeyCodec, order: &'a str, keys: &'a std::collections::HashSet<Vec<u8>>, touched: &'a [ArrayRef]) -> Self {
        Self { codec, order, keys, touched: TouchedKeys::new(codec, touched, keys.iter().map(Vec::as_slice)) }
    }
}

/// The live rows of the touched keys, by key (more than one only if an invariant was broken
/// elsewhere), the live row count of each file, and what reading cost.
pub async fn live_rows_of(
    table: &Table,
    live: &LiveFiles,
    files: &[&DataFile],
    probe: &Probe<'_>,
) -> Result<(HashMap<Vec<u8>, Vec<LiveRow>>, Vec<usize>, ReadCost)> {
    let reads: Vec<_> = files.iter().enumerate().map(|(index, file)| live_rows_in(table, live, index, file, probe)).collect();
    // `buffered` keeps the files' order, so the counts line up with `files`.
    let found: Vec<_> = futures::stream::iter(reads).buffered(4).try_collect().await?;
    let mut by_key: HashMap<Vec<u8>, Vec<LiveRow>> = HashMap::new();
    let mut live_counts = Vec::with_capacity(found.len());
    let mut cost = ReadCost { files: files.len(), bytes: 0 };
    for (rows, count, bytes) in found {
        live_counts.push(count);
        cost.bytes += bytes;
        for (k, row) in rows {
            by_key.entry(k).or_default().push(row);
        }
    }
    Ok((by_key, live_counts, cost))
}
