//! Where the touched keys live in an upsert table: which data files can hold them (partition
//! values of the key columns' transforms, then each key column's bounds), and their live rows
//! there (key, order and lineage columns only, of the row groups and pages that may hold one of the keys
//! that file's partition can hold, position deletes applied). What was read is counted, so the cost of a batch is visible per
//! invocation.

use std::collections::HashMap;

use arrow_array::{ArrayRef, UInt32Array};
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataFile, Datum, Literal, PrimitiveLiteral};
use iceberg::table::Table;
use iceberg::transform::create_transform_function;

use super::key_index::KeyIndexCache;
use super::key_reader::{TouchedKeys, read_key_rows};
use super::keys::{KeyCodec, datum_at};
use super::rank::{Rank, RankColumns};
use crate::base::error::Result;
use crate::engine::columns::Columns;
use crate::engine::commit::live_rows::{LiveFiles, deleted_positions};
use crate::model::tables::lineage;

/// Where a key's live row is, and its rank.
#[derive(Debug, Clone)]
pub struct LiveRow {
    /// Index into the candidate files.
    pub file: usize,
    pub pos: i64,
    pub rank: Rank,
}

/// What reading cost.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadCost {
    pub files: usize,
    /// Bytes transferred from storage, and the requests that fetched them.
    pub bytes: u64,
    pub requests: u64,
    /// Live rows decoded from the pages read.
    pub rows: u64,
}

/// The touched keys one group of data files can hold, and their bounds per key column.
pub struct KeySet<'a> {
    pub touched: TouchedKeys<'a>,
    /// Per key column, the least and greatest touched value (`None`: not comparable).
    bounds: Vec<Option<(i32, Datum, Datum)>>,
}

impl<'a> KeySet<'a> {
    fn new(table: &Table, codec: &'a KeyCodec, columns: Vec<ArrayRef>) -> Result<Self> {
        let schema = table.metadata().current_schema();
        let bounds = codec
            .names()
            .zip(&columns)
            .map(|(name, column)| {
                let id = schema.field_by_name(name)?.id;
                let datums: Option<Vec<Datum>> = (0..column.len()).map(|i| datum_at(column, i)).collect();
                let datums = datums?;
                Some((id, min(&datums)?.clone(), max(&datums)?.clone()))
            })
            .collect();
        Ok(Self { touched: TouchedKeys::new(codec, columns)?, bounds })
    }

    /// Whether `file`'s column bounds overlap the keys'.
    fn overlaps(&self, file: &DataFile) -> bool {
        !self.touched.is_empty()
            && self.bounds.iter().flatten().all(|(id, lo, hi)| {
                let below = file.upper_bounds().get(id).is_some_and(|upper| upper < lo);
                let above = file.lower_bounds().get(id).is_some_and(|lower| lower > hi);
                !(below || above)
            })
    }
}

/// One partition spec's fields on key columns (bucket, identity, truncate, time transforms):
/// their positions in a file's partition tuple, and which key set each tuple of values holds.
struct SpecKeys {
    positions: Vec<usize>,
    sets: HashMap<Vec<PrimitiveLiteral>, usize>,
}

/// The touched keys by the partitions that can hold them. A file is probed for the keys its
/// partition can hold only: with `bucket(16, id)` a page's key bounds span sixteen times the
/// keys it holds, so probing a file with every touched key would select most of its pages.
pub struct KeyPartitions<'a> {
    all: KeySet<'a>,
    by_spec: HashMap<i32, SpecKeys>,
    sets: Vec<KeySet<'a>>,
}

impl<'a> KeyPartitions<'a> {
    /// `touched`: the key columns of every change of the batch.
    pub fn new(table: &Table, codec: &'a KeyCodec, touched: &[ArrayRef]) -> Result<Self> {
        let schema = table.metadata().current_schema();
        let rows = touched.first().map_or(0, |c| c.len());
        let mut by_spec = HashMap::new();
        let mut sets = Vec::new();
        for spec in table.metadata().partition_specs_iter() {
            let (mut positions, mut values) = (Vec::new(), Vec::new());
            for (position, field) in spec.fields().iter().enumerate() {
                let column =
                    codec.names().zip(touched).find(|(name, _)| schema.field_by_name(name).is_some_and(|f| f.id == field.source_id));
                let Some((_, column)) = column else { continue };
                // A transform that cannot take the column, or values we cannot compare, prune nothing.
                let Ok(transformed) = create_transform_function(&field.transform).and_then(|f| f.transform(column.clone())) else {
                    continue;
                };
                let literals: Option<Vec<PrimitiveLiteral>> =
                    (0..rows).map(|i| datum_at(&transformed, i).map(|d| d.literal().clone())).collect();
                if let Some(literals) = literals {
                    positions.push(position);
                    values.push(literals);
                }
            }
            if positions.is_empty() {
                continue;
            }
            let mut groups: HashMap<Vec<PrimitiveLiteral>, Vec<u32>> = HashMap::new();
            for row in 0..rows {
                groups.entry(values.iter().map(|v| v[row].clone()).collect()).or_default().push(row as u32);
            }
            let mut spec_sets = HashMap::with_capacity(groups.len());
            for (tuple, rows) in groups {
                let indices = UInt32Array::from(rows);
                let columns =
                    touched.iter().map(|c| arrow_select::take::take(c, &indices, None)).collect::<std::result::Result<Vec<_>, _>>()?;
                spec_sets.insert(tuple, sets.len());
                sets.push(KeySet::new(table, codec, columns)?);
            }
            by_spec.insert(spec.spec_id(), SpecKeys { positions, sets: spec_sets });
        }
        Ok(Self { all: KeySet::new(table, codec, touched.to_vec())?, by_spec, sets })
    }

    /// The touched keys `file` (of partition spec `spec_id`) can hold, by its partition values
    /// (`None`: none), or every key when they cannot be compared (unknown spec, a value of
    /// another kind).
    pub fn keys_for(&self, file: &DataFile, spec_id: Option<i32>) -> Option<&KeySet<'a>> {
        let Some(spec) = spec_id.and_then(|id| self.by_spec.get(&id)) else { return Some(&self.all) };
        let mut tuple = Vec::with_capacity(spec.positions.len());
        for &position in &spec.positions {
            match file.partition().fields().get(position) {
                Some(Some(Literal::Primitive(value))) => tuple.push(value.clone()),
                _ => return Some(&self.all),
            }
        }
        let comparable = spec
            .sets
            .keys()
            .next()
            .is_none_or(|sample| sample.iter().zip(&tuple).all(|(a, b)| std::mem::discriminant(a) == std::mem::discriminant(b)));
        if !comparable {
            return Some(&self.all);
        }
        spec.sets.get(&tuple).map(|&i| &self.sets[i])
    }
}

/// Data files that may hold a touched key: their partition can hold one, and their bounds on
/// every key column overlap those keys'.
pub fn candidate_files<'a>(live: &'a LiveFiles, partitions: &KeyPartitions<'_>) -> Vec<&'a DataFile> {
    live.data
        .iter()
        .filter(|f| partitions.keys_for(f, live.spec_ids.get(f.file_path()).copied()).is_some_and(|keys| keys.overlaps(f)))
        .collect()
}

fn min(datums: &[Datum]) -> Option<&Datum> {
    datums.iter().reduce(|a, b| if b < a { b } else { a })
}

fn max(datums: &[Datum]) -> Option<&Datum> {
    datums.iter().reduce(|a, b| if b > a { b } else { a })
}

/// The live rows of the touched keys in one data file, its live row count, and the bytes read.
async fn live_rows_in(
    table: &Table,
    live: &LiveFiles,
    index: usize,
    file: &DataFile,
    probe: &Probe<'_>,
) -> Result<(Vec<(Vec<u8>, LiveRow)>, usize, ReadCost)> {
    let deletes = live.deletes_for(file.file_path());
    // Each delete file is read whole, by one request.
    let mut cost =
        ReadCost { files: 1, bytes: deletes.iter().map(|d| d.file_size_in_bytes()).sum(), requests: deletes.len() as u64, rows: 0 };
    let deleted = deleted_positions(table, file.file_path(), &deletes).await?;
    // The file's live rows: its rows minus those deleted (each position deleted once).
    // The lineage ranks rows of equal order values.
    let mut names: Vec<&str> = probe.codec.names().collect();
    for column in [probe.order, lineage::TOPIC, lineage::PARTITION, lineage::OFFSET] {
        if !names.contains(&column) {
            names.push(column);
        }
    }
    let live_count = (file.record_count() as usize).saturating_sub(deleted.len());
    let Some(keys) = probe.partitions.keys_for(file, live.spec_ids.get(file.file_path()).copied()) else {
        return Ok((Vec::new(), live_count, cost));
    };
    let read = read_key_rows(table, file, &keys.touched, &names, &deleted, probe.index_cache).await?;
    cost.bytes += read.bytes;
    cost.requests += read.requests;
    cost.rows += read.positions.len() as u64;
    let schema = table.metadata().current_schema();
    let mut out = Vec::new();
    let mut row = 0;
    for batch in read.batches {
        let found = probe.codec.rows(&batch, file.file_path(), Some(schema))?;
        let ranks = RankColumns::new(&Columns::new(&batch, file.file_path()).with_schema(schema), probe.order)?;
        for i in 0..batch.num_rows() {
            let key = found.row(i).data();
            if probe.keys.contains(key) {
                out.push((key.to_vec(), LiveRow { file: index, pos: read.positions[row], rank: ranks.rank(i) }));
            }
            row += 1;
        }
    }
    Ok((out, live_count, cost))
}

/// What a batch looks for: its keys (encoded, and by the partitions that can hold them).
pub struct Probe<'a> {
    pub codec: &'a KeyCodec,
    pub order: &'a str,
    pub keys: &'a std::collections::HashSet<Vec<u8>>,
    pub partitions: &'a KeyPartitions<'a>,
    /// Footers and key page indexes kept from earlier batches.
    pub index_cache: &'a KeyIndexCache,
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
    let mut cost = ReadCost { files: files.len(), ..ReadCost::default() };
    for (rows, count, read) in found {
        live_counts.push(count);
        cost.bytes += read.bytes;
        cost.requests += read.requests;
        cost.rows += read.rows;
        for (k, row) in rows {
            by_key.entry(k).or_default().push(row);
        }
    }
    Ok((by_key, live_counts, cost))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use arrow_array::Int64Array;
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    use std::sync::Arc;

    use arrow_array::{BooleanArray, Int32Array, RecordBatch};
    use arrow_schema::{Field, FieldRef};
    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Struct, Transform};
    use parquet::arrow::ArrowWriter;

    use super::*;
    use crate::testkit::LocalTable;

    const IDS: i64 = 200_000;

    fn bucket_of(ids: &Int64Array) -> Int32Array {
        let buckets = create_transform_function(&Transform::Bucket(4)).unwrap().transform(Arc::new(ids.clone())).unwrap();
        buckets.as_primitive::<arrow_array::types::Int32Type>().clone()
    }

    fn in_bucket(ids: &Int64Array, bucket: i32) -> Int64Array {
        let keep: BooleanArray = bucket_of(ids).iter().map(|b| Some(b == Some(bucket))).collect();
        arrow_select::filter::filter(ids, &keep).unwrap().as_primitive::<arrow_array::types::Int64Type>().clone()
    }

    /// The ids of bucket `bucket` (sorted, with their order column) written as one data file
    /// of the table, with the writer properties of upsert tables.
    async fn bucket_file(table: &Table, bucket: i32) -> DataFile {
        let ids = in_bucket(&Int64Array::from_iter_values(0..IDS), bucket);
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(ids.clone()) as ArrayRef),
            ("seq", Arc::new(ids.clone()) as ArrayRef),
            (lineage::TOPIC, Arc::new(arrow_array::StringArray::from_iter_values(ids.iter().map(|_| "t"))) as ArrayRef),
            (lineage::PARTITION, Arc::new(Int32Array::from_iter_values(ids.iter().map(|_| 0))) as ArrayRef),
            (lineage::OFFSET, Arc::new(ids.clone()) as ArrayRef),
        ])
        .unwrap();
        let props = crate::engine::writer::table_writer_properties("zstd", table.metadata().properties(), &[&batch]).unwrap();
        let mut buffer = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut buffer, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let path = format!("{}/data/bucket-{bucket}.parquet", table.metadata().location());
        let size = buffer.len() as u64;
        table.file_io().new_output(&path).unwrap().write(buffer.into()).await.unwrap();
        let bounds = |v: i64| std::collections::HashMap::from([(1, Datum::long(v))]);
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path)
            .file_format(DataFileFormat::Parquet)
            .partition_spec_id(table.metadata().default_partition_spec_id())
            .partition(Struct::from_iter([Some(Literal::int(bucket))]))
            .record_count(ids.len() as u64)
            .file_size_in_bytes(size)
            .lower_bounds(bounds(ids.value(0)))
            .upper_bounds(bounds(ids.value(ids.len() - 1)))
            .build()
            .unwrap()
    }

    /// The rows found and the bytes read when `live`'s files are probed for `touched`.
    async fn probe(table: &Table, live: &LiveFiles, codec: &KeyCodec, touched: Int64Array) -> (usize, Vec<String>, ReadCost) {
        let touched: Vec<ArrayRef> = vec![Arc::new(touched)];
        let encoded = codec.encode(&touched).unwrap();
        let keys: HashSet<Vec<u8>> = encoded.iter().map(|r| r.data().to_vec()).collect();
        let partitions = KeyPartitions::new(table, codec, &touched).unwrap();
        let files = candidate_files(live, &partitions);
        let none = KeyIndexCache::new(0);
        let probe = Probe { codec, order: "seq", keys: &keys, partitions: &partitions, index_cache: &none };
        let (rows, _, cost) = live_rows_of(table, live, &files, &probe).await.unwrap();
        (rows.len(), files.iter().map(|f| f.file_path().to_string()).collect(), cost)
    }

    #[tokio::test]
    async fn a_file_is_probed_for_the_keys_its_partition_can_hold_only() {
        let fixture = LocalTable::keyed_in_buckets(4).await;
        let table = fixture.load().await;
        let (one, two) = (bucket_file(&table, 1).await, bucket_file(&table, 2).await);
        let spec_id = table.metadata().default_partition_spec_id();
        let live = LiveFiles {
            data: vec![one.clone(), two.clone()],
            spec_ids: [one.file_path(), two.file_path()].into_iter().map(|p| (p.to_string(), spec_id)).collect(),
            ..Default::default()
        };
        let codec = KeyCodec::of_fields(vec![FieldRef::new(Field::new("id", DataType::Int64, false))]).unwrap();
        // 64 keys spread over the whole id range, in every bucket.
        let touched = Int64Array::from_iter_values((0..64).map(|i| i * 3119 + 7));
        let of_one = in_bucket(&touched, 1);
        let of_other_buckets = in_bucket(&touched, 0);
        assert!(!of_one.is_empty() && !of_other_buckets.is_empty());

        let (found, files, cost) = probe(&table, &live, &codec, touched.clone()).await;
        assert_eq!(found, of_one.len() + in_bucket(&touched, 2).len(), "every touched key of the two files is found");
        assert_eq!(files.len(), 2);
        // Probing bucket 1's file with every key would select the pages the other buckets' keys
        // fall between (each bucket's ids span the whole id range): it is probed with its own
        // keys, whatever keys the batch holds. (Rows, not bytes: the pages of this small file lie
        // close enough together to be fetched by the same requests either way.)
        let only_one = LiveFiles { data: vec![one.clone()], spec_ids: live.spec_ids.clone(), ..Default::default() };
        let (_, _, all_keys) = probe(&table, &only_one, &codec, touched.clone()).await;
        let (found, _, own_keys) = probe(&table, &only_one, &codec, of_one.clone()).await;
        assert_eq!(found, of_one.len());
        assert_eq!(all_keys.rows, own_keys.rows, "rows read with every key vs with bucket 1's keys");
        assert!(own_keys.rows <= 2 * 256 * of_one.len() as u64, "{} rows: the keys' pages", own_keys.rows);
        // Keys of bucket 0 only: neither file can hold them.
        let (found, files, none) = probe(&table, &live, &codec, of_other_buckets).await;
        assert_eq!((found, files.len(), none.bytes, none.rows), (0, 0, 0, 0));
        assert!(cost.bytes > 0 && cost.rows > 0);

        // A file whose spec is unknown, or whose partition value is of another kind, is probed
        // with every key.
        let touched: Vec<ArrayRef> = vec![Arc::new(touched)];
        let partitions = KeyPartitions::new(&table, &codec, &touched).unwrap();
        let every = |keys: Option<&KeySet<'_>>| keys.is_some_and(|k| k.touched.columns[0].len() == 64);
        assert!(every(partitions.keys_for(&one, None)));
        let long_valued = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(one.file_path().to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::from_iter([Some(Literal::long(1))]))
            .record_count(1)
            .file_size_in_bytes(1)
            .build()
            .unwrap();
        assert!(every(partitions.keys_for(&long_valued, Some(spec_id))));
        assert!(!every(partitions.keys_for(&one, Some(spec_id))));
    }
}
