//! Two of the world's actors: a queued writer's invocation, and another engine's schema and
//! partition-spec changes.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use iceberg::MetadataLocation;
use iceberg::spec::{NestedField, PrimitiveType, Schema, TableMetadataBuilder, Transform, Type, UnboundPartitionSpec};
use icestream::engine::commit::Watermarks;
use icestream::engine::commit::append::rows_not_held;
use icestream::engine::commit::gaps::TakenGaps;
use icestream::engine::commit::staged::write_staged_manifest;
use icestream::engine::queue::{CommitRequest, OffsetRange, REQUEST_VERSION};
use icestream::engine::writer::write_data_files;
use icestream::model::event::TopicPartition;
use rand::Rng;

use super::{APPENDS, EVOLUTIONS, ORDERS, Outcome, TABLE, TOPIC, World};

impl World {
    /// Another engine (as PyIceberg would: new metadata written, the pointer swapped through the
    /// catalog) evolves a table between steps: a column added to the append table, or the upsert
    /// table's partition spec changed from bucket(4) to bucket(8) of its key.
    pub async fn evolve(&mut self) {
        let (name, what) = if self.rng.random_range(0..2) == 0 { (APPENDS, "adds a column") } else { (ORDERS, "re-buckets by 8") };
        let table = self.load(name).await;
        let metadata = table.metadata();
        let current = table.metadata_location().unwrap().to_string();
        let builder = TableMetadataBuilder::new_from_metadata(metadata.clone(), Some(current.clone()));
        let builder = if name == APPENDS {
            let fields = metadata.current_schema().as_struct().fields();
            let column = format!("other_{}", fields.len());
            if fields.iter().any(|f| f.name == column) {
                return;
            }
            let mut fields: Vec<_> = fields.to_vec();
            fields.push(NestedField::optional(metadata.last_column_id() + 1, &column, Type::Primitive(PrimitiveType::Long)).into());
            let schema = Schema::builder()
                .with_fields(fields)
                .with_identifier_field_ids(metadata.current_schema().identifier_field_ids())
                .build()
                .unwrap();
            builder.add_schema(schema).unwrap().set_current_schema(-1).unwrap()
        } else {
            let id = metadata.current_schema().field_by_name("id").unwrap().id;
            if metadata.default_partition_spec().fields().iter().any(|f| f.transform == Transform::Bucket(8)) {
                return;
            }
            let spec = UnboundPartitionSpec::builder().add_partition_field(id, "id_bucket_8", Transform::Bucket(8)).unwrap().build();
            builder.add_partition_spec(spec).unwrap().set_default_partition_spec(-1).unwrap()
        };
        let next_metadata = builder.build().unwrap().metadata;
        let next = MetadataLocation::from_str(&current).unwrap().with_next_version().with_new_metadata(&next_metadata).to_string();
        next_metadata.write_to(table.file_io(), &MetadataLocation::from_str(&next).unwrap()).await.unwrap();
        let landed = self.pointer.inner.swap(table.identifier(), &current, &next).await.is_ok();
        self.touched.insert(name);
        EVOLUTIONS.fetch_add(u64::from(landed), Ordering::Relaxed);
        self.note(format!("another engine {what} on {name}: landed {landed}"));
    }

    /// A queued writer's invocation of records `start..end` of partition `p`: the rows the table
    /// does not hold yet written, staged and requested; the mapping moves on only when all of
    /// it succeeded.
    pub(super) async fn write_batch(&self, p: usize, start: usize, end: usize, fate: u32) -> Outcome {
        let nothing = Outcome::Writer { send: None, advance: None };
        if start == end {
            return nothing;
        }
        let offsets: Vec<i64> = self.partitions[p].offsets[start..end].to_vec();
        let Ok(table) = self.catalogs.catalog().load_table(&self.ident).await else { return nothing };
        let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap());
        let n = offsets.len();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(offsets.iter().map(|o| o * 10 + p as i64).collect::<Vec<_>>())),
            Arc::new(StringArray::from(vec![TOPIC; n])),
            Arc::new(Int32Array::from(vec![p as i32; n])),
            Arc::new(Int64Array::from(offsets.clone())),
        ];
        let batch = RecordBatch::try_new(schema, columns).unwrap();
        // As the queued writer does: the rows the table does not hold yet (at or below its
        // watermarks, but for the committer's open gaps), the request claiming the whole batch.
        let props = table.metadata().properties();
        let (marks, gaps) = (Watermarks::from_properties(props), TakenGaps::from_properties(props));
        let tp = TopicPartition { topic: TOPIC.into(), partition: p as i32 };
        let (first, last) = (offsets[0], offsets[n - 1]);
        if marks.covers(&tp, last) && !gaps.overlaps(&tp, first, last) {
            return Outcome::Writer { send: None, advance: Some(end) };
        }
        let ranges = BTreeMap::from([(tp, (first, last))]);
        let rows = rows_not_held(&batch, &ranges, &marks, &gaps).unwrap();
        let files = if rows.num_rows() > 0 {
            match write_data_files(&table, std::slice::from_ref(&rows), "zstd", 1 << 20).await {
                Ok(files) => files,
                Err(_) => return nothing,
            }
        } else {
            vec![]
        };
        if fate == 0 {
            return nothing; // crashed after writing files
        }
        let mut request = CommitRequest {
            version: REQUEST_VERSION,
            namespace: self.ident.namespace().join("."),
            table: TABLE.into(),
            manifest: None,
            ranges: vec![OffsetRange { topic: TOPIC.into(), partition: p as i32, first, last }],
            records: rows.num_rows() as u64,
            files: files.len() as u64,
            bytes: files.iter().map(|f| f.file_size_in_bytes()).sum(),
            oldest_record_ms: None,
            deduped: Vec::new(),
        };
        // Staged under the name that binds it to the request (an empty one when no row is left).
        let name = request.manifest_uuid(files.iter().map(|f| f.file_path()));
        match write_staged_manifest(&table, &files, &name).await {
            Ok(path) => request.manifest = Some(path),
            Err(_) => return nothing,
        }
        let send = (fate != 1).then(|| serde_json::to_string(&request).unwrap());
        // fate 2: sent, crashed before the mapping heard.
        Outcome::Writer { send, advance: (fate > 2).then_some(end) }
    }
}
