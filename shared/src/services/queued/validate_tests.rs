//! The forged and replayed requests of issue 52 against the committer, on a local catalog:
//! each is refused (a failure, no commit, no watermark moved, nothing it names deleted) while
//! the real requests around them commit.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use iceberg::spec::{DataFile, NestedField, PrimitiveType, Schema, Type, UnboundPartitionSpec};
use iceberg::table::Table;

use super::super::batch::commit_batch;
use super::super::report::BatchReport;
use super::is_configured;
use crate::engine::catalog::Catalogs;
use crate::engine::commit::Watermarks;
use crate::engine::commit::staged::write_staged_manifest;
use crate::engine::queue::{CommitRequest, Message, OffsetRange, REQUEST_VERSION};
use crate::model::config::Config;
use crate::model::event::TopicPartition;
use crate::model::tables::{TableDef, lineage};

const TOPIC: &str = "telemetry";

struct Fixture {
    _dir: tempfile::TempDir,
    config: Config,
    catalogs: Catalogs,
}

impl Fixture {
    /// Tables `t` (configured: the `table` knob) and `u` (not), of lineage columns only.
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_args([format!("warehouse={}", dir.path().display()), "table=t".into()]).unwrap();
        let catalogs = Catalogs::connect(&config).await.unwrap();
        for name in ["t", "u"] {
            let schema = Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, lineage::TOPIC, Type::Primitive(PrimitiveType::String)).into(),
                    NestedField::required(2, lineage::PARTITION, Type::Primitive(PrimitiveType::Int)).into(),
                    NestedField::required(3, lineage::OFFSET, Type::Primitive(PrimitiveType::Long)).into(),
                ])
                .build()
                .unwrap();
            let def = TableDef {
                name: name.into(),
                schema,
                partition_spec: UnboundPartitionSpec::builder().build(),
                properties: Default::default(),
                sort_order: None,
                format_version: None,
            };
            catalogs.ensure_table(&def).await.unwrap();
        }
        Self { _dir: dir, config, catalogs }
    }

    async fn table(&self, name: &str) -> Table {
        self.catalogs.catalog().load_table(&self.catalogs.ident(name)).await.unwrap()
    }

    /// Data files of `table` holding partition 0's `offsets`.
    async fn files(&self, table: &str, offsets: std::ops::RangeInclusive<i64>) -> Vec<DataFile> {
        let table = self.table(table).await;
        let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap());
        let n = offsets.clone().count();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![TOPIC; n])),
            Arc::new(Int32Array::from(vec![0; n])),
            Arc::new(Int64Array::from_iter_values(offsets)),
        ];
        crate::engine::writer::write_data_files(&table, &[RecordBatch::try_new(schema, columns).unwrap()], "zstd", 1 << 30).await.unwrap()
    }

    /// A request for `table` covering `first..=last` of partition 0 with `files`, and its
    /// manifest staged as a writer stages it (named for the request).
    async fn stage(&self, table: &str, (first, last): (i64, i64), files: &[DataFile]) -> CommitRequest {
        let mut request = CommitRequest {
            version: REQUEST_VERSION,
            namespace: self.config.namespace.clone(),
            table: table.into(),
            manifest: None,
            ranges: vec![OffsetRange { topic: TOPIC.into(), partition: 0, first, last }],
            records: files.iter().map(DataFile::record_count).sum(),
            files: files.len() as u64,
            bytes: files.iter().map(DataFile::file_size_in_bytes).sum(),
            oldest_record_ms: None,
            deduped: Vec::new(),
        };
        let name = request.manifest_uuid(files.iter().map(DataFile::file_path));
        request.manifest = Some(write_staged_manifest(&self.table(table).await, files, &name).await.unwrap());
        request
    }

    async fn commit(&self, requests: &[(&str, &CommitRequest)]) -> BatchReport {
        let messages: Vec<Message> = requests
            .iter()
            .map(|(id, r)| Message { id: id.to_string(), body: serde_json::to_string(r).unwrap(), receive_count: 1, receipt: None })
            .collect();
        commit_batch(&self.catalogs, &self.config, &messages, Instant::now() + Duration::from_secs(60)).await
    }

    async fn watermark(&self) -> Option<i64> {
        Watermarks::from_properties(self.table("t").await.metadata().properties())
            .get(&TopicPartition { topic: TOPIC.into(), partition: 0 })
    }

    async fn rows(&self) -> u64 {
        crate::services::audit::offsets::HeldOffsets::read(&self.table("t").await).await.unwrap().rows()
    }

    async fn exists(&self, path: &str) -> bool {
        self.table("t").await.file_io().exists(path).await.unwrap()
    }
}

fn failed(report: &BatchReport) -> Vec<&str> {
    let mut ids: Vec<&str> = report.batch_item_failures.iter().map(String::as_str).collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn forged_and_replayed_requests_are_refused_and_real_ones_commit() {
    let f = Fixture::new().await;
    let first = f.files("t", 0..=99).await;
    let r1 = f.stage("t", (0, 99), &first).await;
    let report = f.commit(&[("r1", &r1)]).await;
    assert!(report.batch_item_failures.is_empty(), "{report:?}");
    assert_eq!((f.watermark().await, f.rows().await), (Some(99), 100));
    assert!(!f.exists(r1.manifest.as_deref().unwrap()).await, "a committed request's manifest is removed");

    // The next real request, staged and not sent yet; forgeries around it.
    let next = f.files("t", 100..=199).await;
    let r2 = f.stage("t", (100, 199), &next).await;
    // A committed request replayed with a made-up range (its manifest is gone).
    let replayed = CommitRequest { ranges: vec![OffsetRange { topic: TOPIC.into(), partition: 0, first: 100, last: 250 }], ..r1.clone() };
    // The pending request's manifest claimed for a made-up range reaching far ahead.
    let far = CommitRequest {
        ranges: vec![OffsetRange { topic: TOPIC.into(), partition: 0, first: 100, last: 9_000_000_000_000_000_000 }],
        ..r2.clone()
    };
    // No manifest, a range to 9e18 (only watermarks would move).
    let null = CommitRequest {
        manifest: None,
        records: 0,
        files: 0,
        bytes: 0,
        ranges: vec![OffsetRange { topic: TOPIC.into(), partition: 0, first: 100, last: 9_000_000_000_000_000_000 }],
        ..r2.clone()
    };
    // A manifest named for its request, as only a writer can stage it, listing files outside
    // the table's data directory (another table's).
    let elsewhere = f.files("u", 100..=199).await;
    let outside = f.stage("t", (100, 199), &elsewhere).await;
    // A bound manifest whose files hold offsets its ranges do not cover.
    let stale = f.files("t", 0..=99).await;
    let uncovered = f.stage("t", (100, 199), &stale).await;
    // A table the committer's configuration does not write.
    let other = f.stage("u", (0, 99), &f.files("u", 0..=99).await).await;
    let batch = [
        ("a-replayed", &replayed),
        ("b-far", &far),
        ("c-null", &null),
        ("d-outside", &outside),
        ("e-uncovered", &uncovered),
        ("f-other", &other),
        ("r2", &r2),
    ];
    let report = f.commit(&batch).await;
    assert_eq!(failed(&report), ["a-replayed", "b-far", "c-null", "d-outside", "e-uncovered", "f-other"], "{report:?}");
    let t = report.tables.iter().find(|t| t.table.ends_with(".t")).unwrap();
    assert_eq!((t.committed, t.rows), (1, 100), "{report:?}");
    assert_eq!((f.watermark().await, f.rows().await), (Some(199), 200), "only the real request moved the watermark");
    for kept in [&outside, &uncovered] {
        assert!(f.exists(kept.manifest.as_deref().unwrap()).await, "a refused request's manifest is left alone");
    }
    assert!(!f.exists(r2.manifest.as_deref().unwrap()).await);

    // A request below the watermark naming a pending request's manifest is dropped, and the
    // manifest (not bound to it) stays for its own request, which then commits.
    let third = f.files("t", 200..=299).await;
    let r3 = f.stage("t", (200, 299), &third).await;
    let dropper = CommitRequest { ranges: vec![OffsetRange { topic: TOPIC.into(), partition: 0, first: 0, last: 50 }], ..r3.clone() };
    let report = f.commit(&[("dropper", &dropper)]).await;
    assert!(report.batch_item_failures.is_empty() && report.tables[0].dropped == 1, "{report:?}");
    assert!(f.exists(r3.manifest.as_deref().unwrap()).await, "a forged drop removed a pending manifest");
    let report = f.commit(&[("r3", &r3)]).await;
    assert!(report.batch_item_failures.is_empty(), "{report:?}");
    assert_eq!((f.watermark().await, f.rows().await), (Some(299), 300));
}

/// What the refusal says, per rule.
#[tokio::test]
async fn a_refusal_names_the_rule_broken() {
    let f = Fixture::new().await;
    let admission = super::Admission::new(&f.config);
    let table = f.table("t").await;
    let files = f.files("t", 0..=9).await;
    let real = f.stage("t", (0, 9), &files).await;
    assert_eq!(admission.staged_files(&table, &real).await.unwrap().len(), files.len());
    let elsewhere = f.files("u", 0..=9).await;
    let cases = [
        (CommitRequest { records: 11, ..real.clone() }, "was not staged for this request"),
        (CommitRequest { manifest: Some(format!("{}/staged/../../u/staged/x.avro", table.metadata().location())), ..real.clone() }, "`..`"),
        (
            CommitRequest {
                manifest: Some(format!("{}/other/{}.avro", table.metadata().location(), uuid::Uuid::new_v4())),
                ..real.clone()
            },
            "not a staged manifest",
        ),
        (f.stage("t", (0, 9), &elsewhere).await, "not a data file under the table's data directory"),
        (f.stage("t", (5, 9), &files).await, "outside the request's range 5..=9"),
        (CommitRequest { table: "u".into(), ..real.clone() }, "not a table this committer's configuration writes"),
    ];
    for (request, says) in cases {
        let err = admission.staged_files(&table, &request).await.unwrap_err().to_string();
        assert!(err.contains(says) && err.contains("refused"), "{says}: {err}");
    }
}

#[test]
fn a_template_covers_its_tables_and_their_dead_letters_only() {
    let tables: BTreeSet<String> = ["bigdata.orders".to_string(), "bigdata.raw_{topic}".into()].into_iter().collect();
    for (table, ok) in
        [("orders", true), ("raw_shop_a", true), ("raw_shop_a_dead_letter", true), ("raw_", false), ("other", false), ("raw_Shop", false)]
    {
        assert_eq!(is_configured(&tables, "bigdata", table), ok, "{table}");
    }
    assert!(!is_configured(&tables, "other", "raw_shop_a"), "another namespace");
}
