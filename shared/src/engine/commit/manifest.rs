//! Manifest files, written with apache-avro's schema-aware serializer.
//!
//! iceberg-rust's `ManifestWriter` turns each entry into an Avro `Value` and resolves it against
//! the manifest schema: 575k instructions an entry, a tenth of a 10k-record event's whole ingest.
//! Here each entry is serialized straight into the block (64k), after the header iceberg-rust
//! itself writes for the same schema, spec, format and content (made once in memory and kept);
//! `make bench` writes a 10,000-entry manifest both ways. The file is the one iceberg-rust writes, byte for byte but the random sync marker
//! (the tests compare them). Format v1 and partitions on decimal, uuid or fixed values go through
//! iceberg-rust's writer.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use apache_avro::Schema as AvroSchema;
use bytes::Bytes;
use iceberg::io::{FileIO, OutputFile};
use iceberg::spec::{
    DataContentType, DataFile, Datum, FieldSummary, FormatVersion, Literal, ManifestContentType, ManifestFile, ManifestStatus,
    ManifestWriter, ManifestWriterBuilder, PartitionSpec, PrimitiveLiteral, PrimitiveType, SchemaRef, StructType,
    UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::table::Table;
use serde::ser::{Error as _, Serialize, SerializeSeq, SerializeStruct, Serializer};

use crate::base::error::{Error, Result};

mod spec;
pub use spec::spec_of;
use spec::widened;
pub(crate) use spec::with_first_row_id;

/// A manifest being written: entries are added, then [`ManifestFileWriter::write_manifest_file`]
/// uploads it in one write and returns its manifest-list entry.
pub struct ManifestFileWriter {
    inner: Inner,
    /// The manifest's spec and partition type, which every entry's values are put in.
    spec_id: i32,
    partition_type: StructType,
}

enum Inner {
    Serde(SerdeManifest),
    Library(ManifestWriter),
}

/// A manifest written by [`ManifestFileWriter`]'s own path.
struct SerdeManifest {
    output: OutputFile,
    path: String,
    snapshot_id: Option<i64>,
    format: FormatVersion,
    content: ManifestContentType,
    schema: SchemaRef,
    spec: PartitionSpec,
    partition_type: StructType,
    entries: Vec<Entry>,
}

struct Entry {
    status: ManifestStatus,
    snapshot_id: Option<i64>,
    sequence_number: Option<i64>,
    file_sequence_number: Option<i64>,
    data_file: DataFile,
}

impl ManifestFileWriter {
    /// A writer for `schema` and `table`'s default spec, the spec of every file icestream writes
    /// (`snapshot_id` None: staged, owned by no snapshot yet).
    pub fn new(table: &Table, schema: &SchemaRef, path: String, snapshot_id: Option<i64>, content: ManifestContentType) -> Result<Self> {
        Self::for_spec(table, schema, table.metadata().default_partition_spec(), path, snapshot_id, content)
    }

    /// A writer for entries partitioned by `spec`: a manifest's header, partition type and
    /// manifest-list entry must name the spec its entries' partition tuples were computed with,
    /// which for a file written before the spec evolved is not the default one.
    pub fn for_spec(
        table: &Table,
        schema: &SchemaRef,
        spec: &PartitionSpec,
        path: String,
        snapshot_id: Option<i64>,
        content: ManifestContentType,
    ) -> Result<Self> {
        let metadata = table.metadata();
        let spec = spec.clone();
        let format = metadata.format_version();
        let output = table.file_io().new_output(&path)?;
        let partition_type = spec.partition_type(schema)?;
        if format == FormatVersion::V1 || !serde_writes(&partition_type) {
            let spec_id = spec.spec_id();
            let builder = ManifestWriterBuilder::new(output, snapshot_id, schema.clone(), spec);
            return Ok(Self { inner: Inner::Library(library_writer(builder, format, content)), spec_id, partition_type });
        }
        let (spec_id, kept_type) = (spec.spec_id(), partition_type.clone());
        let inner = Inner::Serde(SerdeManifest {
            output,
            path,
            snapshot_id,
            format,
            content,
            schema: schema.clone(),
            spec,
            partition_type,
            entries: Vec::new(),
        });
        Ok(Self { inner, spec_id, partition_type: kept_type })
    }

    /// Add `data_file` as added by this manifest's snapshot; a negative `sequence_number` is
    /// inherited from the manifest list at commit.
    pub fn add_file(&mut self, data_file: DataFile, sequence_number: i64) -> Result<()> {
        let data_file = self.widened(data_file)?;
        match &mut self.inner {
            Inner::Library(w) => Ok(w.add_file(data_file, sequence_number)?),
            Inner::Serde(m) => m.push(Entry {
                status: ManifestStatus::Added,
                snapshot_id: m.snapshot_id,
                sequence_number: (sequence_number >= 0).then_some(sequence_number),
                file_sequence_number: None,
                data_file,
            }),
        }
    }

    /// Add `data_file` as still live, with the snapshot and sequence numbers it was added with.
    pub fn add_existing_file(
        &mut self,
        data_file: DataFile,
        snapshot_id: i64,
        sequence_number: i64,
        file_sequence_number: Option<i64>,
    ) -> Result<()> {
        let data_file = self.widened(data_file)?;
        match &mut self.inner {
            Inner::Library(w) => Ok(w.add_existing_file(data_file, snapshot_id, sequence_number, file_sequence_number)?),
            Inner::Serde(m) => m.push(Entry {
                status: ManifestStatus::Existing,
                snapshot_id: Some(snapshot_id),
                sequence_number: Some(sequence_number),
                file_sequence_number,
                data_file,
            }),
        }
    }

    /// Add `data_file` as removed by this manifest's snapshot, keeping its sequence numbers.
    pub fn add_delete_file(&mut self, data_file: DataFile, sequence_number: i64, file_sequence_number: Option<i64>) -> Result<()> {
        let data_file = self.widened(data_file)?;
        match &mut self.inner {
            Inner::Library(w) => Ok(w.add_delete_file(data_file, sequence_number, file_sequence_number)?),
            Inner::Serde(m) => m.push(Entry {
                status: ManifestStatus::Deleted,
                snapshot_id: m.snapshot_id,
                sequence_number: Some(sequence_number),
                file_sequence_number,
                data_file,
            }),
        }
    }

    /// `data_file`'s partition values as this manifest's partition type holds them (what
    /// the add methods write; iceberg-rust's summary collector panics on a value of another
    /// type, so it is given this too).
    pub fn widened(&self, data_file: DataFile) -> Result<DataFile> {
        widened(data_file, self.spec_id, &self.partition_type)
    }

    /// Upload the manifest and return its manifest-list entry (sequence numbers still unassigned).
    pub async fn write_manifest_file(self) -> Result<ManifestFile> {
        match self.inner {
            Inner::Library(w) => Ok(w.write_manifest_file().await?),
            Inner::Serde(m) => m.write().await,
        }
    }
}

/// iceberg-rust's writer for `format` and `content`.
fn library_writer(builder: ManifestWriterBuilder, format: FormatVersion, content: ManifestContentType) -> ManifestWriter {
    match (format, content) {
        (FormatVersion::V1, _) => builder.build_v1(),
        (FormatVersion::V2, ManifestContentType::Data) => builder.build_v2_data(),
        (FormatVersion::V2, ManifestContentType::Deletes) => builder.build_v2_deletes(),
        (FormatVersion::V3, ManifestContentType::Data) => builder.build_v3_data(),
        (FormatVersion::V3, ManifestContentType::Deletes) => builder.build_v3_deletes(),
    }
}

impl SerdeManifest {
    /// The checks iceberg-rust's writer makes on every entry.
    fn push(&mut self, entry: Entry) -> Result<()> {
        let file = &entry.data_file;
        let fits = match self.content {
            ManifestContentType::Data => file.content_type() == DataContentType::Data,
            ManifestContentType::Deletes => {
                matches!(file.content_type(), DataContentType::EqualityDeletes | DataContentType::PositionDeletes)
            }
        };
        if !fits {
            return Err(Error::Invariant(format!(
                "{} is {:?}, not for a {} manifest",
                file.file_path(),
                file.content_type(),
                self.content
            )));
        }
        if entry.status != ManifestStatus::Added && (entry.sequence_number.is_none() || entry.file_sequence_number.is_none()) {
            return Err(Error::Invariant(format!(
                "{}: an existing or deleted manifest entry needs both sequence numbers",
                file.file_path()
            )));
        }
        self.entries.push(entry);
        Ok(())
    }

    async fn write(self) -> Result<ManifestFile> {
        let header = header(self.format, self.content, &self.schema, &self.spec).await?;
        let partitions = partition_summaries(&self.partition_type, &self.entries)?;
        let invalid = |e: apache_avro::Error| Error::Invariant(format!("manifest {}: {e}", self.path));
        let mut avro = apache_avro::Writer::append_to(&header.avro, header.bytes.clone(), header.marker);
        for entry in &self.entries {
            avro.append_ser(EntryRecord { entry, partition_names: &header.partition_names }).map_err(invalid)?;
        }
        let bytes = avro.into_inner().map_err(invalid)?;
        let manifest_length = bytes.len() as i64;
        self.output.write(Bytes::from(bytes)).await.map_err(|e| Error::Storage { path: self.path.clone(), source: e })?;

        let count = |status: ManifestStatus| {
            let of_status = self.entries.iter().filter(|e| e.status == status);
            let files = of_status.clone().count() as u32;
            (files, of_status.map(|e| e.data_file.record_count()).sum::<u64>())
        };
        let (added_files, added_rows) = count(ManifestStatus::Added);
        let (existing_files, existing_rows) = count(ManifestStatus::Existing);
        let (deleted_files, deleted_rows) = count(ManifestStatus::Deleted);
        let min_sequence_number = self
            .entries
            .iter()
            .filter(|e| e.status != ManifestStatus::Deleted)
            .filter_map(|e| e.sequence_number)
            .min()
            .unwrap_or(UNASSIGNED_SEQUENCE_NUMBER);
        Ok(ManifestFile {
            manifest_path: self.path,
            manifest_length,
            partition_spec_id: self.spec.spec_id(),
            content: self.content,
            // Assigned by the manifest list writer.
            sequence_number: UNASSIGNED_SEQUENCE_NUMBER,
            min_sequence_number,
            // iceberg-rust's unassigned snapshot id (a staged manifest).
            added_snapshot_id: self.snapshot_id.unwrap_or(-1),
            added_files_count: Some(added_files),
            existing_files_count: Some(existing_files),
            deleted_files_count: Some(deleted_files),
            added_rows_count: Some(added_rows),
            existing_rows_count: Some(existing_rows),
            deleted_rows_count: Some(deleted_rows),
            partitions: Some(partitions),
            key_metadata: None,
            // Assigned by the manifest list writer (format v3).
            first_row_id: None,
        })
    }
}

/// Whether every partition value of `partition_type` has a serializer here.
fn serde_writes(partition_type: &StructType) -> bool {
    partition_type.fields().iter().all(|f| {
        f.field_type.as_primitive_type().is_some_and(|t| {
            matches!(
                t,
                PrimitiveType::Boolean
                    | PrimitiveType::Int
                    | PrimitiveType::Long
                    | PrimitiveType::Float
                    | PrimitiveType::Double
                    | PrimitiveType::Date
                    | PrimitiveType::Time
                    | PrimitiveType::Timestamp
                    | PrimitiveType::Timestamptz
                    | PrimitiveType::TimestampNs
                    | PrimitiveType::TimestamptzNs
                    | PrimitiveType::String
                    | PrimitiveType::Binary
            )
        })
    })
}

/// `literal` of `ty` as a datum (for its single-value bytes); only the types [`serde_writes`] takes.
fn datum(ty: &PrimitiveType, literal: &PrimitiveLiteral) -> Result<Datum> {
    Ok(match (ty, literal) {
        (PrimitiveType::Boolean, PrimitiveLiteral::Boolean(v)) => Datum::bool(*v),
        (PrimitiveType::Int, PrimitiveLiteral::Int(v)) => Datum::int(*v),
        (PrimitiveType::Long, PrimitiveLiteral::Long(v)) => Datum::long(*v),
        (PrimitiveType::Float, PrimitiveLiteral::Float(v)) => Datum::float(v.0),
        (PrimitiveType::Double, PrimitiveLiteral::Double(v)) => Datum::double(v.0),
        (PrimitiveType::Date, PrimitiveLiteral::Int(v)) => Datum::date(*v),
        (PrimitiveType::Time, PrimitiveLiteral::Long(v)) => Datum::time_micros(*v)?,
        (PrimitiveType::Timestamp, PrimitiveLiteral::Long(v)) => Datum::timestamp_micros(*v),
        (PrimitiveType::Timestamptz, PrimitiveLiteral::Long(v)) => Datum::timestamptz_micros(*v),
        (PrimitiveType::TimestampNs, PrimitiveLiteral::Long(v)) => Datum::timestamp_nanos(*v),
        (PrimitiveType::TimestamptzNs, PrimitiveLiteral::Long(v)) => Datum::timestamptz_nanos(*v),
        (PrimitiveType::String, PrimitiveLiteral::String(v)) => Datum::string(v),
        (PrimitiveType::Binary, PrimitiveLiteral::Binary(v)) => Datum::binary(v.iter().copied()),
        (ty, literal) => return Err(Error::Invariant(format!("partition value {literal:?} is not a {ty}"))),
    })
}

/// Per partition field: nulls, NaNs, and the bounds of the other values, over every entry (as
/// iceberg-rust's writer counts them).
fn partition_summaries(partition_type: &StructType, entries: &[Entry]) -> Result<Vec<FieldSummary>> {
    let fields = partition_type.fields();
    let mut summaries = Vec::with_capacity(fields.len());
    for (i, field) in fields.iter().enumerate() {
        let Some(ty) = field.field_type.as_primitive_type() else {
            return Err(Error::Invariant(format!("partition field {} is not primitive", field.name)));
        };
        let (mut contains_null, mut contains_nan) = (false, false);
        let mut bounds: Option<(&PrimitiveLiteral, &PrimitiveLiteral)> = None;
        for entry in entries {
            let partition = entry.data_file.partition();
            if partition.fields().len() != fields.len() {
                return Err(Error::Invariant(format!(
                    "{} has {} partition values, the spec {}",
                    entry.data_file.file_path(),
                    partition.fields().len(),
                    fields.len()
                )));
            }
            let value = match &partition.fields()[i] {
                None => {
                    contains_null = true;
                    continue;
                }
                Some(Literal::Primitive(value)) if ty.compatible(value) => value,
                Some(other) => {
                    return Err(Error::Invariant(format!("partition value {other:?} is not a {ty}")));
                }
            };
            if matches!(value, PrimitiveLiteral::Float(v) if v.is_nan()) || matches!(value, PrimitiveLiteral::Double(v) if v.is_nan()) {
                contains_nan = true;
                continue;
            }
            bounds = Some(match bounds {
                None => (value, value),
                Some((lower, upper)) => (
                    if value.partial_cmp(lower) == Some(Ordering::Less) { value } else { lower },
                    if value.partial_cmp(upper) == Some(Ordering::Greater) { value } else { upper },
                ),
            });
        }
        let bytes = |v: &PrimitiveLiteral| -> Result<_> { Ok(datum(ty, v)?.to_bytes()?) };
        summaries.push(FieldSummary {
            contains_null,
            contains_nan: Some(contains_nan),
            lower_bound: bounds.map(|(lower, _)| bytes(lower)).transpose()?,
            upper_bound: bounds.map(|(_, upper)| bytes(upper)).transpose()?,
        });
    }
    Ok(summaries)
}

/// The Avro header iceberg-rust writes for one schema, spec, format and content.
struct Header {
    avro: AvroSchema,
    /// The header's bytes, ending with its sync marker.
    bytes: Vec<u8>,
    marker: [u8; 16],
    /// The partition record's field names, as the serializer looks them up.
    partition_names: Vec<&'static str>,
    key: (FormatVersion, ManifestContentType, SchemaRef, PartitionSpec),
}

/// Headers kept across a warm process's commits: a table's schema and spec rarely change.
static HEADERS: LazyLock<Mutex<Vec<Arc<Header>>>> = LazyLock::new(Mutex::default);
const HEADERS_KEPT: usize = 16;

async fn header(format: FormatVersion, content: ManifestContentType, schema: &SchemaRef, spec: &PartitionSpec) -> Result<Arc<Header>> {
    let same = |h: &&Arc<Header>| h.key.0 == format && h.key.1 == content && *h.key.2 == **schema && h.key.3 == *spec;
    if let Some(found) = HEADERS.lock().map_err(|_| poisoned())?.iter().find(same) {
        return Ok(found.clone());
    }
    // An empty manifest from iceberg-rust is its header alone.
    let io = FileIO::new_with_memory();
    let path = "memory:///manifest-header.avro";
    let builder = ManifestWriterBuilder::new(io.new_output(path)?, None, schema.clone(), spec.clone());
    library_writer(builder, format, content).write_manifest_file().await?;
    let bytes = io.new_input(path)?.read().await?.to_vec();
    let unexpected = |what: &str| Error::Invariant(format!("iceberg-rust's empty manifest: {what}"));
    let avro = apache_avro::Reader::new(&bytes[..]).map_err(|e| unexpected(&e.to_string()))?.writer_schema().clone();
    let marker: [u8; 16] = bytes
        .len()
        .checked_sub(16)
        .and_then(|start| bytes[start..].try_into().ok())
        .ok_or_else(|| unexpected("shorter than a sync marker"))?;
    let partition_names = partition_field_names(&avro).ok_or_else(|| unexpected("no data_file.partition record"))?;
    let key = (format, content, schema.clone(), spec.clone());
    let header = Arc::new(Header { avro, bytes, marker, partition_names, key });
    let mut kept = HEADERS.lock().map_err(|_| poisoned())?;
    if kept.len() == HEADERS_KEPT {
        kept.remove(0);
    }
    kept.push(header.clone());
    Ok(header)
}

fn poisoned() -> Error {
    Error::Invariant("the manifest header cache's lock is poisoned".into())
}

/// `manifest_entry.data_file.partition`'s field names, interned.
fn partition_field_names(avro: &AvroSchema) -> Option<Vec<&'static str>> {
    let field = |schema: &AvroSchema, name: &str| match schema {
        AvroSchema::Record(record) => record.lookup.get(name).map(|&i| record.fields[i].schema.clone()),
        _ => None,
    };
    let partition = field(&field(avro, "data_file")?, "partition")?;
    match partition {
        AvroSchema::Record(record) => Some(record.fields.iter().map(|f| intern(&f.name)).collect()),
        _ => None,
    }
}

/// apache-avro's serializer takes record field names as `&'static str`: partition field names
/// are leaked once per distinct name in the process (a handful).
fn intern(name: &str) -> &'static str {
    static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Mutex::default);
    let mut names = NAMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match names.get(name) {
        Some(&kept) => kept,
        None => {
            let kept: &'static str = Box::leak(name.to_owned().into_boxed_str());
            names.insert(kept);
            kept
        }
    }
}

/// One `manifest_entry` record, fields in the schema's order (the serializer writes them as
/// they come).
struct EntryRecord<'a> {
    entry: &'a Entry,
    partition_names: &'a [&'static str],
}

impl Serialize for EntryRecord<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let e = self.entry;
        let mut record = serializer.serialize_struct("manifest_entry", 5)?;
        record.serialize_field("status", &(e.status as i32))?;
        record.serialize_field("snapshot_id", &e.snapshot_id)?;
        record.serialize_field("sequence_number", &e.sequence_number)?;
        record.serialize_field("file_sequence_number", &e.file_sequence_number)?;
        record.serialize_field("data_file", &DataFileRecord { file: &e.data_file, partition_names: self.partition_names })?;
        record.end()
    }
}

struct DataFileRecord<'a> {
    file: &'a DataFile,
    partition_names: &'a [&'static str],
}

impl Serialize for DataFileRecord<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let f = self.file;
        let long = |v: u64| avro_long(&v).map_err(S::Error::custom);
        let mut record = serializer.serialize_struct("r2", 20)?;
        record.serialize_field("content", &(f.content_type() as i32))?;
        record.serialize_field("file_path", f.file_path())?;
        record.serialize_field("file_format", &f.file_format().to_string().to_ascii_uppercase())?;
        record.serialize_field("partition", &PartitionRecord { file: f, names: self.partition_names })?;
        record.serialize_field("record_count", &long(f.record_count())?)?;
        record.serialize_field("file_size_in_bytes", &long(f.file_size_in_bytes())?)?;
        record.serialize_field("column_sizes", &Some(KeyValues(f.column_sizes(), avro_long)))?;
        record.serialize_field("value_counts", &Some(KeyValues(f.value_counts(), avro_long)))?;
        record.serialize_field("null_value_counts", &Some(KeyValues(f.null_value_counts(), avro_long)))?;
        record.serialize_field("nan_value_counts", &Some(KeyValues(f.nan_value_counts(), avro_long)))?;
        record.serialize_field("lower_bounds", &Some(KeyValues(f.lower_bounds(), bound_bytes)))?;
        record.serialize_field("upper_bounds", &Some(KeyValues(f.upper_bounds(), bound_bytes)))?;
        record.serialize_field("key_metadata", &f.key_metadata().map(AvroBytes))?;
        record.serialize_field("split_offsets", &f.split_offsets())?;
        record.serialize_field("equality_ids", &f.equality_ids())?;
        record.serialize_field("sort_order_id", &f.sort_order_id())?;
        record.serialize_field("first_row_id", &f.first_row_id())?;
        record.serialize_field("referenced_data_file", &f.referenced_data_file())?;
        record.serialize_field("content_offset", &f.content_offset())?;
        record.serialize_field("content_size_in_bytes", &f.content_size_in_bytes())?;
        record.end()
    }
}

/// The partition record: one optional value per partition field.
struct PartitionRecord<'a> {
    file: &'a DataFile,
    names: &'a [&'static str],
}

impl Serialize for PartitionRecord<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let values = self.file.partition().fields();
        if values.len() != self.names.len() {
            return Err(S::Error::custom(format!(
                "{} has {} partition values, the spec {}",
                self.file.file_path(),
                values.len(),
                self.names.len()
            )));
        }
        let mut record = serializer.serialize_struct("r102", values.len())?;
        for (name, value) in self.names.iter().zip(values) {
            record.serialize_field(name, &value.as_ref().map(PartitionValue))?;
        }
        record.end()
    }
}

struct PartitionValue<'a>(&'a Literal);

impl Serialize for PartitionValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            Literal::Primitive(PrimitiveLiteral::Boolean(v)) => serializer.serialize_bool(*v),
            Literal::Primitive(PrimitiveLiteral::Int(v)) => serializer.serialize_i32(*v),
            Literal::Primitive(PrimitiveLiteral::Long(v)) => serializer.serialize_i64(*v),
            Literal::Primitive(PrimitiveLiteral::Float(v)) => serializer.serialize_f32(v.0),
            Literal::Primitive(PrimitiveLiteral::Double(v)) => serializer.serialize_f64(v.0),
            Literal::Primitive(PrimitiveLiteral::String(v)) => serializer.serialize_str(v),
            Literal::Primitive(PrimitiveLiteral::Binary(v)) => serializer.serialize_bytes(v),
            other => Err(S::Error::custom(format!("no Avro form here for partition value {other:?}"))),
        }
    }
}

/// A field-id → value map as Avro's array of key/value records, each value made by its function
/// (a count as a long, a bound as its single-value bytes).
struct KeyValues<'a, V, F>(&'a HashMap<i32, V>, F);

impl<V, T: Serialize, F: Fn(&V) -> std::result::Result<T, String>> Serialize for KeyValues<'_, V, F> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for (&key, value) in self.0 {
            let value = (self.1)(value).map_err(|e| S::Error::custom(format!("field {key}: {e}")))?;
            seq.serialize_element(&KeyValue { key, value })?;
        }
        seq.end()
    }
}

fn avro_long(v: &u64) -> std::result::Result<i64, String> {
    i64::try_from(*v).map_err(|_| format!("{v} does not fit an Avro long"))
}

fn bound_bytes(bound: &Datum) -> std::result::Result<AvroBytes<Vec<u8>>, String> {
    bound.to_bytes().map(|bytes| AvroBytes(bytes.into_vec())).map_err(|e| e.to_string())
}

struct KeyValue<V> {
    key: i32,
    value: V,
}

impl<V: Serialize> Serialize for KeyValue<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut record = serializer.serialize_struct("key_value", 2)?;
        record.serialize_field("key", &self.key)?;
        record.serialize_field("value", &self.value)?;
        record.end()
    }
}

/// Bytes as Avro `bytes` (serde would make a sequence of numbers of a slice).
struct AvroBytes<B>(B);

impl<B: AsRef<[u8]>> Serialize for AvroBytes<B> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0.as_ref())
    }
}

#[cfg(test)]
mod tests;
