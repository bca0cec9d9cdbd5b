//! Building the configured catalog once per process (outside the Lambda handler), and creating
//! namespace and tables on first use.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::io::StorageFactory;
use iceberg::table::Table;
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_glue::{GLUE_CATALOG_PROP_URI, GLUE_CATALOG_PROP_WAREHOUSE, GlueCatalogBuilder};
use iceberg_catalog_s3tables::{
    S3TABLES_CATALOG_PROP_ENDPOINT_URL, S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN, S3TablesCatalogBuilder,
};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use iceberg::io::{S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION};

use crate::commit::{Committer, MetadataPointer};
use crate::config::{CatalogKind, Config};
use crate::error::{Error, Result};
use crate::tables::TableDef;

/// Name of the embedded SQL catalog, as PyIceberg's SqlCatalog must be told.
pub const LOCAL_CATALOG_NAME: &str = "icestream";

/// File IO by URI scheme: `file://` locally, `s3://` for Glue and S3 Tables warehouses.
fn storage_factory() -> Arc<dyn StorageFactory> {
    Arc::new(OpenDalResolvingStorageFactory::new())
}

/// An endpoint override for one service: `AWS_ENDPOINT_URL_<SERVICE>`, else `AWS_ENDPOINT_URL`
/// (the SDK's own convention, applied here to the clients iceberg-rust builds itself).
fn service_endpoint(sdk: &aws_config::SdkConfig, service: &str) -> Option<String> {
    std::env::var(format!("AWS_ENDPOINT_URL_{service}"))
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| sdk.endpoint_url().map(str::to_string))
}

/// S3 file IO settings from the standard AWS configuration: region, endpoint override and
/// addressing style. Credentials come from the default chain inside the S3 client.
fn s3_file_io_props(sdk: &aws_config::SdkConfig, config: &Config) -> HashMap<String, String> {
    let mut props = HashMap::new();
    if let Some(region) = sdk.region() {
        props.insert(S3_REGION.to_string(), region.to_string());
    }
    if let Some(endpoint) = service_endpoint(sdk, "S3") {
        props.insert(S3_ENDPOINT.to_string(), endpoint);
    }
    props.insert(S3_PATH_STYLE_ACCESS.to_string(), config.s3_path_style.to_string());
    props
}

/// A catalog and the committer over it, built once and reused across invocations.
#[derive(Clone, Debug)]
pub struct Catalogs {
    pub committer: Committer,
    pub namespace: NamespaceIdent,
}

impl Catalogs {
    pub async fn connect(config: &Config) -> Result<Self> {
        let namespace = NamespaceIdent::new(config.namespace.clone());
        let committer = match config.catalog {
            CatalogKind::Local => {
                let dir = config.local_warehouse_dir()?;
                let uri = format!("sqlite:{}?mode=rwc", dir.join("catalog.db").display());
                // Our pointer opens the database first: it switches it to WAL, so concurrent
                // writer processes wait on each other instead of failing.
                let pointer = MetadataPointer::sqlite(&uri, LOCAL_CATALOG_NAME).await?;
                let catalog = SqlCatalogBuilder::default()
                    .uri(uri)
                    .warehouse_location(format!("file://{}", dir.display()))
                    .sql_bind_style(SqlBindStyle::QMark)
                    .with_storage_factory(storage_factory())
                    .load(LOCAL_CATALOG_NAME, HashMap::new())
                    .await?;
                Committer::new(Arc::new(catalog), pointer)
            }
            CatalogKind::Glue => {
                let sdk = crate::aws::sdk_config().await;
                let mut props = s3_file_io_props(&sdk, config);
                props.insert(GLUE_CATALOG_PROP_WAREHOUSE.to_string(), config.warehouse.trim_end_matches('/').to_string());
                if let Some(endpoint) = service_endpoint(&sdk, "GLUE") {
                    props.insert(GLUE_CATALOG_PROP_URI.to_string(), endpoint);
                }
                let catalog = GlueCatalogBuilder::default()
                    .with_storage_factory(storage_factory())
                    .load("glue", props)
                    .await?;
                let client = aws_sdk_glue::Client::new(&sdk);
                Committer::new(Arc::new(catalog), MetadataPointer::Glue { client })
            }
            CatalogKind::S3Tables => {
                let sdk = crate::aws::sdk_config().await;
                let mut props = s3_file_io_props(&sdk, config);
                props.insert(S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN.to_string(), config.warehouse.clone());
                if let Some(endpoint) = service_endpoint(&sdk, "S3TABLES") {
                    props.insert(S3TABLES_CATALOG_PROP_ENDPOINT_URL.to_string(), endpoint);
                }
                let catalog = S3TablesCatalogBuilder::default()
                    .with_storage_factory(storage_factory())
                    .load("s3tables", props)
                    .await?;
                let client = aws_sdk_s3tables::Client::new(&sdk);
                Committer::new(
                    Arc::new(catalog),
                    MetadataPointer::S3Tables { client, table_bucket_arn: config.warehouse.clone() },
                )
            }
        };
        Ok(Self { committer, namespace })
    }

    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        self.committer.catalog()
    }

    pub fn ident(&self, table: &str) -> TableIdent {
        TableIdent::new(self.namespace.clone(), table.to_string())
    }

    /// Load `def`'s table, creating namespace and table if missing. Safe under races: a
    /// concurrent creator wins and we load its table.
    pub async fn ensure_table(&self, def: &TableDef) -> Result<Table> {
        let catalog = self.catalog();
        let ident = self.ident(&def.name);
        if let Ok(table) = catalog.load_table(&ident).await {
            return Ok(table);
        }
        if !catalog.namespace_exists(&self.namespace).await? {
            if let Err(e) = catalog.create_namespace(&self.namespace, HashMap::new()).await
                && !catalog.namespace_exists(&self.namespace).await?
            {
                return Err(e.into());
            }
        }
        let creation = TableCreation::builder()
            .name(def.name.clone())
            .schema(def.schema.clone())
            .partition_spec(def.partition_spec.clone())
            .properties(def.properties.clone())
            .build();
        match catalog.create_table(&self.namespace, creation).await {
            Ok(table) => Ok(table),
            Err(create_error) => catalog.load_table(&ident).await.map_err(|_| {
                Error::Config(format!("cannot create table {ident}: {create_error}"))
            }),
        }
    }
}
