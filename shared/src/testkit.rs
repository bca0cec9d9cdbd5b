//! Unit-test fixtures: the embedded SQLite catalog in a tempdir, with one small table.

use std::collections::HashMap;

use std::str::FromStr;

use iceberg::spec::TableMetadataBuilder;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::{MetadataLocation, TableIdent};

use crate::engine::catalog::Catalogs;
use crate::model::tables::TableDef;

/// What a test returns: its failures travel with `?` instead of `unwrap`.
pub(crate) type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A local catalog in a tempdir (removed on drop) holding table `t` (one `long` column `id`,
/// unpartitioned).
pub struct LocalTable {
    /// Held so the warehouse lives as long as the fixture.
    _dir: tempfile::TempDir,
    pub catalogs: Catalogs,
    pub ident: TableIdent,
}

impl LocalTable {
    pub async fn new() -> Self {
        Self::with(HashMap::new(), false, UnboundPartitionSpec::builder().build()).await
    }

    /// Table `t` of format version 3.
    pub async fn v3() -> Self {
        let f = Self::new().await;
        f.upgrade_to_v3().await;
        f
    }

    /// Table `t` as an upsert table keyed by `id`, of format version 3.
    pub async fn keyed_v3() -> Self {
        let f = Self::keyed().await;
        f.upgrade_to_v3().await;
        f
    }

    async fn upgrade_to_v3(&self) {
        self.other_engine_commit(|b| b.upgrade_format_version(iceberg::spec::FormatVersion::V3)).await.unwrap();
    }

    /// Table `t` as an upsert table keyed by `id`: its properties and sort order.
    pub async fn keyed() -> Self {
        Self::keyed_in(UnboundPartitionSpec::builder().build()).await
    }

    /// Table `t` as an upsert table keyed by `id`, partitioned by `bucket(buckets, id)`.
    pub async fn keyed_in_buckets(buckets: u32) -> Self {
        let spec = UnboundPartitionSpec::builder().add_partition_field(1, "id_bucket", Transform::Bucket(buckets)).unwrap().build();
        Self::keyed_in(spec).await
    }

    /// Table `t` partitioned by `transform` of `id`.
    pub async fn partitioned_by(transform: Transform) -> Self {
        let spec = UnboundPartitionSpec::builder().add_partition_field(1, "id_part", transform).unwrap().build();
        Self::with(HashMap::new(), false, spec).await
    }

    async fn keyed_in(partition_spec: UnboundPartitionSpec) -> Self {
        let mut properties = HashMap::new();
        crate::model::tables::add_upsert_properties(&mut properties, &["id"]);
        Self::with(properties, true, partition_spec).await
    }

    async fn with(properties: HashMap<String, String>, sorted: bool, partition_spec: UnboundPartitionSpec) -> Self {
        let schema = Schema::builder()
            .with_fields(vec![NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into()])
            .build()
            .unwrap();
        Self::of(schema, properties, sorted, partition_spec).await
    }

    /// Table `t` of `schema`, partitioned by `partition_spec`.
    pub async fn of_schema(schema: Schema, partition_spec: UnboundPartitionSpec) -> Self {
        Self::of(schema, HashMap::new(), false, partition_spec).await
    }

    async fn of(schema: Schema, properties: HashMap<String, String>, sorted: bool, partition_spec: UnboundPartitionSpec) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::model::config::Config::from_args([format!("warehouse={}", dir.path().display())]).unwrap();
        let catalogs = Catalogs::connect(&config).await.unwrap();
        let sort_order = sorted.then(|| crate::model::sort_order::by_key(&schema, &["id".into()]).unwrap());
        let def = TableDef { name: "t".into(), schema, partition_spec, properties, sort_order, format_version: None };
        catalogs.ensure_table(&def).await.unwrap();
        let ident = catalogs.ident("t");
        Self { _dir: dir, catalogs, ident }
    }

    pub async fn load(&self) -> Table {
        self.catalogs.catalog().load_table(&self.ident).await.unwrap()
    }

    /// Another engine's metadata-only commit (PyIceberg's `update_spec`, `update_schema`):
    /// `edit` on the current metadata, written as the next metadata file and swapped in.
    pub async fn other_engine_commit(
        &self,
        edit: impl FnOnce(TableMetadataBuilder) -> iceberg::Result<TableMetadataBuilder>,
    ) -> TestResult<Table> {
        let table = self.load().await;
        let current = table.metadata_location_result()?;
        let build = edit(table.metadata().clone().into_builder(Some(current.to_string())))?.build()?;
        let next = MetadataLocation::from_str(current)?.with_next_version().with_new_metadata(&build.metadata);
        build.metadata.write_to(table.file_io(), &next).await?;
        self.catalogs.committer.pointer().swap(&self.ident, current, &next.to_string()).await.map_err(|e| format!("{e:?}"))?;
        Ok(self.load().await)
    }

    /// Another table `name` of `t`'s schema in `t`'s namespace, with `properties`, at
    /// `location` (`None`: the catalog's choice).
    pub async fn sibling(&self, name: &str, location: Option<String>, properties: &[(&str, &str)]) -> TableIdent {
        let schema = self.load().await.metadata().current_schema().as_ref().clone();
        let properties = properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let creation =
            iceberg::TableCreation::builder().name(name.into()).location_opt(location).schema(schema).properties(properties).build();
        self.catalogs.catalog().create_table(self.ident.namespace(), creation).await.unwrap();
        TableIdent::new(self.ident.namespace().clone(), name.into())
    }
}

/// A data file entry named `name` under the table's data directory (the file itself is not
/// written: commits only need the entry).
pub fn data_file(table: &Table, name: &str) -> DataFile {
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(format!("{}/data/{name}.parquet", table.metadata().location()))
        .file_format(DataFileFormat::Parquet)
        .partition_spec_id(table.metadata().default_partition_spec_id())
        .record_count(1)
        .file_size_in_bytes(10)
        .build()
        .unwrap()
}

/// A planner that commits one fixed change on every attempt.
pub struct FixedChange(pub crate::engine::commit::ChangeSet);

impl crate::engine::commit::Planner for FixedChange {
    async fn plan(&mut self, _table: &Table, _attempt: u32) -> crate::base::error::Result<Option<crate::engine::commit::ChangeSet>> {
        Ok(Some(self.0.clone()))
    }
}

/// A commit deadline far enough for any test.
pub fn soon() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(60)
}

/// Runs a future to completion on a fresh current-thread runtime (for sync tests).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a test runtime").block_on(future)
}

/// `n` finite doubles (seeded: the same list every run) with the shortest text that reads back
/// as each, as a conforming producer (Python's `json.dumps`, Jackson, ryu) writes them: random
/// bit patterns over every exponent, subnormals, -0.0, the extremes, and the value issue 46
/// found one ulp off.
pub fn shortest_doubles(n: usize) -> Vec<(f64, String)> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(46);
    let mut values =
        vec![-928694.4390802345, -0.0, 0.0, f64::MIN_POSITIVE, 5e-324, -5e-324, f64::MAX, f64::MIN, 0.1, 1e23, 9007199254740993.0];
    while values.len() < n {
        let bits: u64 = rng.random();
        let v = match values.len() % 4 {
            // Everyday magnitudes, where producers' values mostly are.
            0 => (rng.random::<f64>() - 0.5) * 10f64.powi(rng.random_range(-8..=12)),
            1 => f64::from_bits(bits & 0x800F_FFFF_FFFF_FFFF), // subnormal (or zero)
            _ => f64::from_bits(bits),
        };
        if v.is_finite() {
            values.push(v);
        }
    }
    // Rust's `{:e}` and `{}` are both the shortest round-trip digits; alternate the two forms.
    values.iter().enumerate().map(|(i, v)| (*v, if i % 2 == 0 { format!("{v:e}") } else { format!("{v:?}") })).collect()
}
