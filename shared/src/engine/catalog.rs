//! Building the configured catalog once per process (outside the Lambda handler), and creating
//! namespace and tables on first use.

use std::collections::HashMap;
use std::sync::Arc;

#[cfg(feature = "aws")]
use iceberg::MetadataLocation;
use iceberg::io::StorageFactory;
#[cfg(feature = "aws")]
use iceberg::io::{FileIO, FileIOBuilder, S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION};
use iceberg::spec::FormatVersion;
#[cfg(feature = "aws")]
use iceberg::spec::TableMetadataBuilder;
use iceberg::table::Table;
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
#[cfg(feature = "aws")]
use iceberg_catalog_glue::{GLUE_CATALOG_PROP_URI, GLUE_CATALOG_PROP_WAREHOUSE, GlueCatalogBuilder};
#[cfg(feature = "aws")]
use iceberg_catalog_s3tables::{S3TABLES_CATALOG_PROP_ENDPOINT_URL, S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN, S3TablesCatalogBuilder};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};

#[cfg(feature = "aws")]
use crate::base::aws::service_endpoint;
use crate::base::error::{Error, Result};
use crate::engine::catalog_calls::{CallCounter, CatalogCalls, CountingCatalog, CountingPointer};
use crate::engine::commit::{Committer, SqlPointer};
#[cfg(feature = "aws")]
use crate::engine::commit::{GluePointer, S3TablesPointer};
use crate::engine::storage_calls::CountingStorageFactory;
use crate::model::config::{CatalogKind, Config};
use crate::model::tables::TableDef;

/// Name of the embedded SQL catalog, as PyIceberg's SqlCatalog must be told.
pub const LOCAL_CATALOG_NAME: &str = "icestream";
/// The local catalog's SQLite file in the warehouse directory.
pub const LOCAL_CATALOG_FILE: &str = "catalog.db";

/// IAM actions of the Glue catalog: iceberg's Glue catalog (namespace_exists/create_namespace,
/// load_table), our table creation below and the metadata pointer swap (commit/pointer.rs).
/// On the catalog, the namespace's database and each table. Read by [`crate::services::deployment`].
pub const GLUE_ACTIONS: &[&str] = &["glue:GetDatabase", "glue:CreateDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"];
/// The Glue warehouse preflight: HeadBucket is authorised by s3:ListBucket on the bucket.
pub const WAREHOUSE_PREFLIGHT_ACTIONS: &[&str] = &["s3:ListBucket"];
/// IAM actions of the S3 Tables catalog on the table bucket (GetTableBucket below; iceberg's
/// S3 Tables catalog for namespaces, table creation and listing).
pub const S3TABLES_BUCKET_ACTIONS: &[&str] =
    &["s3tables:GetTableBucket", "s3tables:GetNamespace", "s3tables:CreateNamespace", "s3tables:CreateTable", "s3tables:ListTables"];
/// ... and on its tables (load, and the metadata pointer swap in commit/pointer.rs).
pub const S3TABLES_ACTIONS: &[&str] = &["s3tables:GetTable", "s3tables:GetTableMetadataLocation", "s3tables:UpdateTableMetadataLocation"];
/// The AWS-managed table maintenance, reported here and set by maintenance/managed.rs.
pub const S3TABLES_MAINTENANCE_ACTIONS: &[&str] =
    &["s3tables:GetTableMaintenanceConfiguration", "s3tables:PutTableMaintenanceConfiguration"];

/// File IO by URI scheme: `file://` locally, `s3://` for Glue and S3 Tables warehouses; every
/// call counted in `calls`.
fn storage_factory(calls: &Arc<CallCounter>) -> Arc<dyn StorageFactory> {
    Arc::new(CountingStorageFactory::new(calls.clone()))
}

/// S3 file IO settings from the standard AWS configuration: region, endpoint override and
/// addressing style. Credentials come from the default chain inside the S3 client.
#[cfg(feature = "aws")]
fn s3_file_io_props(sdk: &aws_config::SdkConfig, config: &Config) -> HashMap<String, String> {
    let mut props = HashMap::new();
    if let Some(region) = sdk.region() {
        props.insert(S3_REGION.to_string(), region.to_string());
    }
    let endpoint = service_endpoint(sdk, "S3");
    let path_style = crate::base::aws::s3_path_style(config.s3_path_style, endpoint.as_deref());
    if let Some(endpoint) = endpoint {
        props.insert(S3_ENDPOINT.to_string(), endpoint);
    }
    props.insert(S3_PATH_STYLE_ACCESS.to_string(), path_style.to_string());
    props
}

/// S3 file IO with those settings, its calls counted: what our own table loads and creations use.
#[cfg(feature = "aws")]
fn s3_file_io(calls: &Arc<CallCounter>, sdk: &aws_config::SdkConfig, config: &Config) -> FileIO {
    FileIOBuilder::new(storage_factory(calls)).with_props(s3_file_io_props(sdk, config)).build()
}

/// The Glue warehouse's S3 bucket must exist (the deployment creates it): say so at start.
#[cfg(feature = "aws")]
async fn preflight_warehouse_bucket(sdk: &aws_config::SdkConfig, config: &Config) -> Result<()> {
    let warehouse = &config.warehouse;
    let bucket = warehouse.trim_start_matches("s3://").split('/').next().unwrap_or_default();
    let client = aws_sdk_s3::Client::from_conf(crate::base::aws::s3_config(sdk, config.s3_path_style));
    client.head_bucket().bucket(bucket).send().await.map_err(|e| crate::base::aws::error("s3:ListBucket", &format!("s3://{bucket}"), e))?;
    Ok(())
}

/// A catalog and the committer over it, built once and reused across invocations.
#[derive(Clone, Debug)]
pub struct Catalogs {
    pub committer: Committer,
    pub namespace: NamespaceIdent,
    /// As configured: what a missing table's error names.
    warehouse: String,
    /// Glue only: tables are created by us (see [`glue_create_table`]).
    #[cfg(feature = "aws")]
    glue: Option<GlueCreate>,
    /// S3 Tables only: the client and table bucket, for the managed maintenance settings.
    #[cfg(feature = "aws")]
    s3tables: Option<(aws_sdk_s3tables::Client, String)>,
    calls: Arc<CallCounter>,
}

/// What creating a Glue table ourselves needs.
#[cfg(feature = "aws")]
#[derive(Clone, Debug)]
struct GlueCreate {
    client: aws_sdk_glue::Client,
    warehouse: String,
    file_io: FileIO,
}

impl Catalogs {
    /// The configured catalog, for commands that write: a local warehouse and its catalog are
    /// created when missing.
    pub async fn connect(config: &Config) -> Result<Self> {
        Self::open(config, false).await
    }

    /// The configured catalog, for commands that only read (`report`, `status`, `audit`): a
    /// local warehouse without a catalog is an error naming it, and nothing is created.
    pub async fn connect_read_only(config: &Config) -> Result<Self> {
        Self::open(config, true).await
    }

    async fn open(config: &Config, read_only: bool) -> Result<Self> {
        let namespace = NamespaceIdent::new(config.namespace.clone());
        // Every catalog and storage call goes through the counters (see [`Self::calls`]).
        let calls = Arc::new(CallCounter::default());
        calls.simulate_latency(config.simulated_latency);
        #[cfg(feature = "aws")]
        let (mut glue, mut s3tables) = (None, None);
        let committer = match config.catalog {
            CatalogKind::Local => {
                let dir = if read_only { existing_local_warehouse(config)? } else { config.local_warehouse_dir()? };
                let uri = format!("sqlite:{}?mode=rwc", dir.join(LOCAL_CATALOG_FILE).display());
                // Our pointer opens the database first: it switches it to WAL, so concurrent
                // writer processes wait on each other instead of failing.
                let pointer = SqlPointer::connect(&uri, LOCAL_CATALOG_NAME).await?;
                let catalog = SqlCatalogBuilder::default()
                    .uri(uri)
                    .warehouse_location(format!("file://{}", dir.display()))
                    .sql_bind_style(SqlBindStyle::QMark)
                    .with_storage_factory(storage_factory(&calls))
                    .load(LOCAL_CATALOG_NAME, HashMap::new())
                    .await?;
                Committer::new(Arc::new(catalog), Arc::new(pointer))
            }
            #[cfg(not(feature = "aws"))]
            CatalogKind::Glue => return Err(Error::not_built("catalog=glue", "aws")),
            #[cfg(not(feature = "aws"))]
            CatalogKind::S3Tables => return Err(Error::not_built("catalog=s3tables", "aws")),
            #[cfg(feature = "aws")]
            CatalogKind::Glue => {
                let sdk = crate::base::aws::sdk_config().await;
                let mut props = s3_file_io_props(&sdk, config);
                props.insert(GLUE_CATALOG_PROP_WAREHOUSE.to_string(), config.warehouse.trim_end_matches('/').to_string());
                if let Some(endpoint) = service_endpoint(&sdk, "GLUE") {
                    props.insert(GLUE_CATALOG_PROP_URI.to_string(), endpoint);
                }
                let catalog = GlueCatalogBuilder::default().with_storage_factory(storage_factory(&calls)).load("glue", props).await?;
                let client = aws_sdk_glue::Client::new(&sdk);
                preflight_warehouse_bucket(&sdk, config).await?;
                let file_io = s3_file_io(&calls, &sdk, config);
                glue = Some(GlueCreate {
                    client: client.clone(),
                    warehouse: config.warehouse.trim_end_matches('/').to_string(),
                    file_io: file_io.clone(),
                });
                Committer::new(Arc::new(catalog), Arc::new(GluePointer::new(client, file_io)))
            }
            #[cfg(feature = "aws")]
            CatalogKind::S3Tables => {
                let sdk = crate::base::aws::sdk_config().await;
                let mut props = s3_file_io_props(&sdk, config);
                props.insert(S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN.to_string(), config.warehouse.clone());
                if let Some(endpoint) = service_endpoint(&sdk, "S3TABLES") {
                    props.insert(S3TABLES_CATALOG_PROP_ENDPOINT_URL.to_string(), endpoint);
                }
                let catalog =
                    S3TablesCatalogBuilder::default().with_storage_factory(storage_factory(&calls)).load("s3tables", props).await?;
                let client = aws_sdk_s3tables::Client::new(&sdk);
                // Fail at start with the resource and action named, not deep in a commit.
                client
                    .get_table_bucket()
                    .table_bucket_arn(&config.warehouse)
                    .send()
                    .await
                    .map_err(|e| crate::base::aws::error("s3tables:GetTableBucket", &config.warehouse, e))?;
                s3tables = Some((client.clone(), config.warehouse.clone()));
                Committer::new(
                    Arc::new(catalog),
                    Arc::new(S3TablesPointer::new(client, config.warehouse.clone(), s3_file_io(&calls, &sdk, config))),
                )
            }
        };
        let committer = Committer::new(
            Arc::new(CountingCatalog { inner: committer.catalog().clone(), pointer: committer.pointer().clone(), counter: calls.clone() }),
            Arc::new(CountingPointer { inner: committer.pointer().clone(), counter: calls.clone() }),
        );
        Ok(Self {
            committer,
            namespace,
            warehouse: config.warehouse.clone(),
            #[cfg(feature = "aws")]
            glue,
            #[cfg(feature = "aws")]
            s3tables,
            calls,
        })
    }

    /// On S3 Tables, the maintenance AWS runs for `table` (compaction, snapshot management) and
    /// for its bucket (unreferenced-file removal): `None` on other catalogs.
    #[cfg(not(feature = "aws"))]
    pub async fn managed_maintenance(&self, _table: &str) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }

    /// On S3 Tables, the maintenance AWS runs for `table` (compaction, snapshot management) and
    /// for its bucket (unreferenced-file removal): `None` on other catalogs.
    #[cfg(feature = "aws")]
    pub async fn managed_maintenance(&self, table: &str) -> Result<Option<serde_json::Value>> {
        let Some((client, bucket)) = &self.s3tables else { return Ok(None) };
        let namespace = self.namespace.join(".");
        let resource = format!("{bucket}/{namespace}/{table}");
        let table_config = client
            .get_table_maintenance_configuration()
            .table_bucket_arn(bucket)
            .namespace(&namespace)
            .name(table)
            .send()
            .await
            .map_err(|e| crate::base::aws::error("s3tables:GetTableMaintenanceConfiguration", &resource, e))?;
        let bucket_config = client
            .get_table_bucket_maintenance_configuration()
            .table_bucket_arn(bucket)
            .send()
            .await
            .map_err(|e| crate::base::aws::error("s3tables:GetTableBucketMaintenanceConfiguration", bucket, e))?;
        let describe = |status: Option<String>, settings: Option<String>| serde_json::json!({ "status": status, "settings": settings });
        let mut out = serde_json::Map::new();
        for (kind, value) in table_config.configuration() {
            out.insert(
                kind.as_str().to_string(),
                describe(value.status().map(|s| s.as_str().to_string()), value.settings().map(|s| format!("{s:?}"))),
            );
        }
        for (kind, value) in bucket_config.configuration() {
            out.insert(
                kind.as_str().to_string(),
                describe(value.status().map(|s| s.as_str().to_string()), value.settings().map(|s| format!("{s:?}"))),
            );
        }
        Ok(Some(serde_json::Value::Object(out)))
    }

    /// Glue only: the Glue client the catalog was built with (maintenance's table optimizers).
    #[cfg(feature = "aws")]
    pub fn glue_client(&self) -> Option<&aws_sdk_glue::Client> {
        self.glue.as_ref().map(|g| &g.client)
    }

    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        self.committer.catalog()
    }

    /// Catalog and storage calls made through these catalogs so far.
    pub fn calls(&self) -> CatalogCalls {
        self.calls.snapshot()
    }

    /// The counters themselves, for calls made outside the catalogs (the commit queue).
    pub fn call_counter(&self) -> &CallCounter {
        &self.calls
    }

    /// `table` in the configured namespace, or `namespace.table` as written (table names have
    /// no dot, so one separates the namespace).
    pub fn ident(&self, table: &str) -> TableIdent {
        match table.rsplit_once('.').and_then(|(namespace, name)| Some((NamespaceIdent::from_strs(namespace.split('.')).ok()?, name))) {
            Some((namespace, name)) => TableIdent::new(namespace, name.to_string()),
            None => TableIdent::new(self.namespace.clone(), table.to_string()),
        }
    }

    /// Load `ident`; a missing table (or namespace) is [`Error::TableNotFound`], naming the
    /// namespace, the table and the warehouse.
    pub async fn load(&self, ident: &TableIdent) -> Result<Table> {
        self.catalog().load_table(ident).await.map_err(|e| match e.kind() {
            iceberg::ErrorKind::TableNotFound | iceberg::ErrorKind::NamespaceNotFound => Error::TableNotFound {
                namespace: ident.namespace().join("."),
                table: ident.name().to_string(),
                warehouse: self.warehouse.clone(),
            },
            _ => Error::Catalog { what: format!("loading table {}.{}", ident.namespace().join("."), ident.name()), source: e },
        })
    }

    /// Load `def`'s table, creating namespace and table if missing. Safe under races: a
    /// concurrent creator wins and we load its table.
    pub async fn ensure_table(&self, def: &TableDef) -> Result<Table> {
        let catalog = self.catalog();
        let ident = self.ident(&def.name);
        match catalog.load_table(&ident).await {
            Ok(table) => return declared_format(def, table),
            Err(e) if table_missing(catalog.as_ref(), &ident, &e).await => {}
            // The table exists: a concurrent writer may have created it since our load (Glue
            // reports its not-found as "unexpected"), or it cannot be read. One more load tells.
            Err(e) => {
                let table =
                    catalog.load_table(&ident).await.map_err(|_| Error::Catalog { what: format!("loading table {ident}"), source: e })?;
                return declared_format(def, table);
            }
        }
        if !catalog.namespace_exists(&self.namespace).await?
            && let Err(e) = catalog.create_namespace(&self.namespace, HashMap::new()).await
            && !catalog.namespace_exists(&self.namespace).await?
        {
            return Err(e.into());
        }
        let creation = TableCreation::builder()
            .name(def.name.clone())
            .schema(def.schema.clone())
            .partition_spec(def.partition_spec.clone())
            .properties(def.properties.clone())
            .sort_order_opt(def.sort_order.clone())
            .format_version(def.format_version.unwrap_or(FormatVersion::V2))
            .build();
        #[cfg(feature = "aws")]
        let created = match &self.glue {
            Some(glue) => glue_create_table(glue, &ident, creation).await,
            None => catalog.create_table(&self.namespace, creation).await.map(drop).map_err(Error::from),
        };
        #[cfg(not(feature = "aws"))]
        let created = catalog.create_table(&self.namespace, creation).await.map(drop).map_err(Error::from);
        match created {
            Ok(()) => Ok(catalog.load_table(&ident).await?),
            // Lost a creation race: the winner's table is as good as ours (if of our version).
            Err(create_error) => declared_format(def, catalog.load_table(&ident).await.map_err(|_| create_error)?),
        }
    }
}

/// `table` if its format version is the one `def` declares (or `def` declares none): a table is
/// never upgraded or read as another version behind the user's back.
fn declared_format(def: &TableDef, table: Table) -> Result<Table> {
    let found = table.metadata().format_version();
    match def.format_version {
        Some(declared) if declared != found => Err(Error::Config(format!(
            "table {}: format_version = {} is declared, the table is format version {}: {}",
            table.identifier(),
            declared as u8,
            found as u8,
            if declared > found {
                "upgrade it (`icestream maintain action=upgrade`) or declare its version"
            } else {
                "declare its version (a table is never downgraded)"
            }
        ))),
        _ => Ok(table),
    }
}

/// The local warehouse of a read-only command: it must hold a catalog already (a typo in
/// `warehouse=` must not leave an empty warehouse behind).
fn existing_local_warehouse(config: &Config) -> Result<std::path::PathBuf> {
    let dir = std::path::PathBuf::from(&config.warehouse);
    let db = dir.join(LOCAL_CATALOG_FILE);
    if !db.is_file() {
        return Err(Error::Config(format!(
            "warehouse {}: there is no catalog ({} does not exist): nothing was written to this warehouse; check `warehouse=` (ICESTREAM_WAREHOUSE)",
            config.warehouse,
            db.display()
        )));
    }
    dir.canonicalize().map_err(|e| Error::Config(format!("warehouse directory {}: {e}", dir.display())))
}

/// Whether a failed load means the table does not exist. Only the catalog's own not-found
/// counts (Glue's library reports it as "unexpected", so its `table_exists` is asked): access
/// denied, throttling or an unreadable metadata file must fail, never lead to a create.
async fn table_missing(catalog: &dyn Catalog, ident: &TableIdent, load_error: &iceberg::Error) -> bool {
    use iceberg::ErrorKind;
    match load_error.kind() {
        ErrorKind::TableNotFound | ErrorKind::NamespaceNotFound => true,
        _ => matches!(catalog.table_exists(ident).await, Ok(false)),
    }
}

/// Glue column type names for Iceberg types (what Athena and Spark write). iceberg-rust 0.10's
/// Glue catalog refuses `timestamptz` when it creates a table, so we create Glue tables here:
/// metadata file first, then `CreateTable` pointing at it, as the library would.
#[cfg(feature = "aws")]
fn glue_column_type(t: &iceberg::spec::Type) -> String {
    use iceberg::spec::{PrimitiveType as P, Type};
    match t {
        Type::Primitive(P::Boolean) => "boolean".into(),
        Type::Primitive(P::Int) => "int".into(),
        Type::Primitive(P::Long) => "bigint".into(),
        Type::Primitive(P::Float) => "float".into(),
        Type::Primitive(P::Double) => "double".into(),
        Type::Primitive(P::Date) => "date".into(),
        Type::Primitive(P::Timestamp | P::Timestamptz | P::TimestampNs | P::TimestamptzNs) => "timestamp".into(),
        Type::Primitive(P::String | P::Uuid) => "string".into(),
        Type::Primitive(P::Binary | P::Fixed(_)) => "binary".into(),
        Type::Primitive(P::Decimal { precision, scale }) => format!("decimal({precision},{scale})"),
        Type::Primitive(P::Time) => "string".into(),
        Type::Struct(s) => {
            let fields: Vec<String> = s.fields().iter().map(|f| format!("{}:{}", f.name, glue_column_type(&f.field_type))).collect();
            format!("struct<{}>", fields.join(","))
        }
        Type::List(l) => format!("array<{}>", glue_column_type(&l.element_field.field_type)),
        Type::Map(m) => format!("map<{},{}>", glue_column_type(&m.key_field.field_type), glue_column_type(&m.value_field.field_type)),
    }
}

#[cfg(feature = "aws")]
async fn glue_create_table(glue: &GlueCreate, ident: &TableIdent, mut creation: TableCreation) -> Result<()> {
    use aws_sdk_glue::types::{Column, StorageDescriptor, TableInput};
    let database = ident.namespace().join(".");
    let location = format!("{}/{database}.db/{}", glue.warehouse, ident.name());
    creation.location = Some(location.clone());
    let metadata = TableMetadataBuilder::from_table_creation(creation)?.build()?.metadata;
    let metadata_location = MetadataLocation::new_with_metadata(location.clone(), &metadata);
    metadata.write_to(&glue.file_io, &metadata_location).await?;
    let columns = metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| Column::builder().name(&f.name).r#type(glue_column_type(&f.field_type)).build())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Invariant(format!("Glue columns for {ident}: {e}")))?;
    let input = TableInput::builder()
        .name(ident.name())
        .table_type("EXTERNAL_TABLE")
        .parameters("table_type", "ICEBERG")
        .parameters("metadata_location", metadata_location.to_string())
        .storage_descriptor(StorageDescriptor::builder().set_columns(Some(columns)).location(location).build())
        .build()
        .map_err(|e| Error::Invariant(format!("Glue table input for {ident}: {e}")))?;
    glue.client
        .create_table()
        .database_name(&database)
        .table_input(input)
        .send()
        .await
        .map_err(|e| crate::base::aws::error("glue:CreateTable", &format!("{database}.{}", ident.name()), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tables::vehicle_telemetry;

    async fn local(dir: &tempfile::TempDir) -> (Catalogs, TableDef) {
        let config = Config::from_args([format!("warehouse={}", dir.path().display())]).unwrap();
        (Catalogs::connect(&config).await.unwrap(), vehicle_telemetry("t", "zstd", 1 << 20).unwrap())
    }

    #[tokio::test]
    async fn a_table_that_exists_but_cannot_be_loaded_fails_with_the_load_error_and_is_not_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let (catalogs, def) = local(&dir).await;
        let table = catalogs.ensure_table(&def).await.unwrap();
        let location = table.metadata_location().unwrap().to_string();
        std::fs::remove_file(location.trim_start_matches("file://")).unwrap();
        let err = catalogs.ensure_table(&def).await.unwrap_err();
        assert!(matches!(err, Error::Catalog { .. }), "{err}");
        assert!(err.to_string().contains("loading table"), "{err}");
        assert!(!err.to_string().contains("already exists"), "{err}");
    }

    #[tokio::test]
    async fn a_declared_format_version_creates_the_table_so_and_refuses_an_existing_table_of_another() {
        let dir = tempfile::tempdir().unwrap();
        let (catalogs, mut def) = local(&dir).await;
        def.format_version = Some(FormatVersion::V3);
        assert_eq!(catalogs.ensure_table(&def).await.unwrap().metadata().format_version(), FormatVersion::V3);
        def.format_version = Some(FormatVersion::V2);
        let err = catalogs.ensure_table(&def).await.unwrap_err().to_string();
        assert!(err.contains("format_version = 2 is declared, the table is format version 3"), "{err}");
        // Undeclared: the table's own version wins.
        def.format_version = None;
        assert_eq!(catalogs.ensure_table(&def).await.unwrap().metadata().format_version(), FormatVersion::V3);
        def.name = "other".into();
        assert_eq!(catalogs.ensure_table(&def).await.unwrap().metadata().format_version(), FormatVersion::V2);
        def.format_version = Some(FormatVersion::V3);
        let err = catalogs.ensure_table(&def).await.unwrap_err().to_string();
        assert!(err.contains("format_version = 3 is declared, the table is format version 2") && err.contains("action=upgrade"), "{err}");
    }

    #[tokio::test]
    async fn a_missing_table_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let (catalogs, def) = local(&dir).await;
        let created = catalogs.ensure_table(&def).await.unwrap();
        let loaded = catalogs.ensure_table(&def).await.unwrap();
        assert_eq!(created.metadata_location(), loaded.metadata_location());
    }
}
