//! The metadata-pointer swap: each catalog's own compare-and-set of "current metadata file".
//! This is the only place that knows how a catalog makes a commit atomic.

use std::str::FromStr;
use std::time::Duration;

use iceberg::TableIdent;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use crate::base::error::{Error, Result};

/// Outcome of a swap attempt that did not succeed.
#[derive(Debug)]
pub enum SwapError {
    /// The pointer was not at the expected location: someone else committed first.
    Conflict(String),
    /// We do not know whether the swap happened (timeout, lost response, busy database).
    Ambiguous(Error),
}

/// How one catalog swaps the metadata pointer of a table: a compare-and-set of "current
/// metadata file". A trait so tests can inject the faults a real catalog shows rarely
/// (see [`super::fault`]).
#[async_trait::async_trait]
pub trait PointerSwap: std::fmt::Debug + Send + Sync {
    /// Point `ident` at `new_location` if and only if it still points at `expected`.
    async fn swap(&self, ident: &TableIdent, expected: &str, new_location: &str) -> Result<(), SwapError>;

    /// Calls a swap of `ident` from `expected` makes one after another when it lands: what the
    /// invocation's sequential round trips count for it.
    fn round_trips(&self, _ident: &TableIdent, _expected: &str) -> u64 {
        1
    }

    /// This catalog's table load, when the pointer does it itself (`None`: the catalog's). Glue's
    /// and S3 Tables' keep the version they read, so the swap after it need not read it again.
    async fn load(&self, _ident: &TableIdent) -> Option<iceberg::Result<iceberg::table::Table>> {
        None
    }
}

/// Iceberg SQL catalog (JDBC layout) in SQLite: a conditional `UPDATE`.
#[derive(Debug, Clone)]
pub struct SqlPointer {
    pool: SqlitePool,
    catalog_name: String,
}

impl SqlPointer {
    /// A pointer over the SQLite catalog database at `uri` (`sqlite:<path>?mode=rwc`).
    pub async fn connect(uri: &str, catalog_name: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(uri)?
            .create_if_missing(true)
            // Concurrent writers from several processes wait for the lock instead of failing.
            .busy_timeout(Duration::from_secs(30))
            .journal_mode(SqliteJournalMode::Wal);
        // Sixteen writer processes starting at once on a new catalog once failed here with
        // SQLITE_BUSY despite the busy timeout (SQLite returns it without waiting in some WAL
        // cases, e.g. while another connection recovers or switches the journal): they retry
        // for a few seconds instead.
        let mut attempt = 0u64;
        let pool = loop {
            match SqlitePoolOptions::new().max_connections(2).connect_with(options.clone()).await {
                Err(e) if is_busy(&e) && attempt < 40 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(25 * attempt.min(8))).await;
                }
                connected => break connected?,
            }
        };
        Ok(Self { pool, catalog_name: catalog_name.to_string() })
    }
}

/// SQLite's `SQLITE_BUSY` (any of its extended codes): another connection holds the lock.
fn is_busy(error: &sqlx::Error) -> bool {
    let code = match error {
        sqlx::Error::Database(e) => e.code().and_then(|c| c.parse::<i32>().ok()),
        _ => None,
    };
    code.is_some_and(|c| c & 0xff == 5)
}

#[async_trait::async_trait]
impl PointerSwap for SqlPointer {
    async fn swap(&self, ident: &TableIdent, expected: &str, new_location: &str) -> Result<(), SwapError> {
        let result = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
             WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = ?",
        )
        .bind(new_location)
        .bind(expected)
        .bind(&self.catalog_name)
        .bind(ident.namespace().join("."))
        .bind(ident.name())
        .bind(expected)
        .execute(&self.pool)
        .await
        .map_err(|e| SwapError::Ambiguous(e.into()))?;
        if result.rows_affected() == 1 { Ok(()) } else { Err(SwapError::Conflict(format!("{ident} no longer at {expected}"))) }
    }
}

/// AWS Glue: `UpdateTable` with the `VersionId` read together with the current location.
/// `SkipArchive` keeps Glue from storing a table version per commit (100,000 max per table).
/// Tables are loaded here too: the `GetTable` of a load is kept (per table, the last), and a swap
/// from the location it saw sends its `VersionId` without reading the table again; Glue refuses
/// the update if any other has landed since, as it would after a fresh read.
#[cfg(feature = "aws")]
#[derive(Debug)]
pub struct GluePointer {
    pub client: aws_sdk_glue::Client,
    /// Reads the metadata files the loads name.
    file_io: iceberg::io::FileIO,
    /// What each load's `GetTable` returned (its `VersionId` and the table input the update keeps).
    seen: LoadedVersions<aws_sdk_glue::types::Table>,
}

#[cfg(feature = "aws")]
impl GluePointer {
    pub fn new(client: aws_sdk_glue::Client, file_io: iceberg::io::FileIO) -> Self {
        Self { client, file_io, seen: LoadedVersions::default() }
    }
}

#[cfg(feature = "aws")]
#[async_trait::async_trait]
impl PointerSwap for GluePointer {
    async fn swap(&self, ident: &TableIdent, expected: &str, new_location: &str) -> Result<(), SwapError> {
        glue_swap(&self.client, ident, expected, new_location, self.seen.take_at(ident, expected)).await
    }

    /// `UpdateTable` with the `VersionId` the load read; `GetTable` first when the swap is not
    /// from the location the last load saw.
    fn round_trips(&self, ident: &TableIdent, expected: &str) -> u64 {
        self.seen.round_trips(ident, expected)
    }

    async fn load(&self, ident: &TableIdent) -> Option<iceberg::Result<iceberg::table::Table>> {
        Some(self.load_table(ident).await)
    }
}

#[cfg(feature = "aws")]
impl GluePointer {
    /// `GetTable`, then the metadata file its `metadata_location` names, as iceberg-rust's Glue
    /// catalog loads; what `GetTable` returned is kept for the swap.
    async fn load_table(&self, ident: &TableIdent) -> iceberg::Result<iceberg::table::Table> {
        use aws_sdk_glue::operation::get_table::GetTableError;
        use iceberg::ErrorKind;
        let database = ident.namespace().join(".");
        let out = self.client.get_table().database_name(&database).name(ident.name()).send().await.map_err(|e| {
            let kind = match e.as_service_error() {
                Some(GetTableError::EntityNotFoundException(_)) => ErrorKind::TableNotFound,
                _ => ErrorKind::Unexpected,
            };
            iceberg::Error::new(kind, crate::base::aws::error("glue:GetTable", &format!("{database}.{}", ident.name()), e).to_string())
        })?;
        let Some(glue_table) = out.table else {
            return Err(iceberg::Error::new(ErrorKind::TableNotFound, format!("Glue returned no table for {ident}")));
        };
        let Some(location) = glue_table.parameters().and_then(|p| p.get(GLUE_METADATA_LOCATION)).cloned() else {
            return Err(iceberg::Error::new(
                ErrorKind::DataInvalid,
                format!("Glue table {ident} has no `{GLUE_METADATA_LOCATION}` parameter: not an Iceberg table"),
            ));
        };
        let table = loaded_table(&self.file_io, ident, &location).await?;
        self.seen.keep(ident, location, glue_table);
        Ok(table)
    }
}

/// Amazon S3 Tables: `UpdateTableMetadataLocation` with the table's version token. Tables are
/// loaded here too (`GetTableMetadataLocation`, then the metadata file): the token a load read is
/// kept, and a swap from the location it saw sends it without reading it again; S3 Tables refuses
/// it if any other update landed since.
#[cfg(feature = "aws")]
#[derive(Debug)]
pub struct S3TablesPointer {
    pub client: aws_sdk_s3tables::Client,
    pub table_bucket_arn: String,
    /// Reads the metadata files the loads name.
    file_io: iceberg::io::FileIO,
    /// The version token each load read.
    seen: LoadedVersions<String>,
}

#[cfg(feature = "aws")]
impl S3TablesPointer {
    pub fn new(client: aws_sdk_s3tables::Client, table_bucket_arn: String, file_io: iceberg::io::FileIO) -> Self {
        Self { client, table_bucket_arn, file_io, seen: LoadedVersions::default() }
    }

    async fn load_table(&self, ident: &TableIdent) -> iceberg::Result<iceberg::table::Table> {
        use aws_sdk_s3tables::operation::get_table_metadata_location::GetTableMetadataLocationError;
        use iceberg::ErrorKind;
        let namespace = ident.namespace().join(".");
        let resource = format!("{}/{namespace}/{}", self.table_bucket_arn, ident.name());
        let current = self
            .client
            .get_table_metadata_location()
            .table_bucket_arn(&self.table_bucket_arn)
            .namespace(&namespace)
            .name(ident.name())
            .send()
            .await
            .map_err(|e| {
                let kind = match e.as_service_error() {
                    Some(GetTableMetadataLocationError::NotFoundException(_)) => ErrorKind::TableNotFound,
                    _ => ErrorKind::Unexpected,
                };
                iceberg::Error::new(kind, crate::base::aws::error("s3tables:GetTableMetadataLocation", &resource, e).to_string())
            })?;
        let Some(location) = current.metadata_location().map(str::to_string) else {
            return Err(iceberg::Error::new(ErrorKind::DataInvalid, format!("S3 Tables table {ident} has no metadata location yet")));
        };
        let table = loaded_table(&self.file_io, ident, &location).await?;
        self.seen.keep(ident, location, current.version_token().to_string());
        Ok(table)
    }
}

#[cfg(feature = "aws")]
#[async_trait::async_trait]
impl PointerSwap for S3TablesPointer {
    async fn swap(&self, ident: &TableIdent, expected: &str, new_location: &str) -> Result<(), SwapError> {
        s3tables_swap(&self.client, &self.table_bucket_arn, ident, expected, new_location, self.seen.take_at(ident, expected)).await
    }

    /// `UpdateTableMetadataLocation` with the token the load read; `GetTableMetadataLocation`
    /// first when the swap is not from the location the last load saw.
    fn round_trips(&self, ident: &TableIdent, expected: &str) -> u64 {
        self.seen.round_trips(ident, expected)
    }

    async fn load(&self, ident: &TableIdent) -> Option<iceberg::Result<iceberg::table::Table>> {
        Some(self.load_table(ident).await)
    }
}

/// Per table, the metadata location the last load saw and the catalog's version of it (what a
/// conditional update sends): a swap from that location uses it, once; any other swap reads the
/// version again first.
#[cfg(feature = "aws")]
#[derive(Debug)]
struct LoadedVersions<V>(std::sync::Mutex<std::collections::HashMap<TableIdent, (String, V)>>);

#[cfg(feature = "aws")]
impl<V> Default for LoadedVersions<V> {
    fn default() -> Self {
        Self(Default::default())
    }
}

#[cfg(feature = "aws")]
impl<V> LoadedVersions<V> {
    fn entries(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<TableIdent, (String, V)>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keep(&self, ident: &TableIdent, location: String, version: V) {
        self.entries().insert(ident.clone(), (location, version));
    }

    /// The version a load read at `location`, taken (a landed or lost swap makes it stale).
    fn take_at(&self, ident: &TableIdent, location: &str) -> Option<V> {
        let (seen, version) = self.entries().remove(ident)?;
        (seen == location).then_some(version)
    }

    /// Calls in turn of a swap from `location`: the update alone, or the version read first.
    fn round_trips(&self, ident: &TableIdent, location: &str) -> u64 {
        if self.entries().get(ident).is_some_and(|(seen, _)| seen == location) { 1 } else { 2 }
    }
}

/// The table whose metadata file is `location`, read with `file_io` (as iceberg-rust's catalogs
/// build it after their lookup).
#[cfg(feature = "aws")]
async fn loaded_table(file_io: &iceberg::io::FileIO, ident: &TableIdent, location: &str) -> iceberg::Result<iceberg::table::Table> {
    let metadata = iceberg::spec::TableMetadata::read_from(file_io, location).await?;
    iceberg::table::Table::builder()
        .metadata(metadata)
        .metadata_location(location)
        .identifier(ident.clone())
        .file_io(file_io.clone())
        .runtime(iceberg::Runtime::try_current()?)
        .build()
}

#[cfg(feature = "aws")]
const GLUE_METADATA_LOCATION: &str = "metadata_location";
#[cfg(feature = "aws")]
const GLUE_PREVIOUS_METADATA_LOCATION: &str = "previous_metadata_location";

/// `seen`: what a load's `GetTable` returned at `expected`, whose `VersionId` the update sends;
/// without it the table is read first.
#[cfg(feature = "aws")]
async fn glue_swap(
    client: &aws_sdk_glue::Client,
    ident: &TableIdent,
    expected: &str,
    new_location: &str,
    seen: Option<aws_sdk_glue::types::Table>,
) -> Result<(), SwapError> {
    use aws_sdk_glue::operation::update_table::UpdateTableError;
    use aws_sdk_glue::types::TableInput;
    let database = ident.namespace().join(".");
    let table = match seen {
        Some(table) => table,
        None => client
            .get_table()
            .database_name(&database)
            .name(ident.name())
            .send()
            .await
            .map_err(|e| SwapError::Ambiguous(crate::base::aws::error("glue:GetTable", &format!("{database}.{}", ident.name()), e)))?
            .table
            .ok_or_else(|| SwapError::Ambiguous(Error::Invariant(format!("Glue returned no table for {ident}"))))?,
    };
    let mut parameters = table.parameters().cloned().unwrap_or_default();
    if parameters.get(GLUE_METADATA_LOCATION).map(String::as_str) != Some(expected) {
        return Err(SwapError::Conflict(format!("{ident} no longer at {expected}")));
    }
    parameters.insert(GLUE_METADATA_LOCATION.into(), new_location.into());
    parameters.insert(GLUE_PREVIOUS_METADATA_LOCATION.into(), expected.into());
    // Same table, new pointer: keep the columns and location Glue already has.
    let input = TableInput::builder()
        .name(table.name())
        .set_description(table.description().map(str::to_string))
        .set_table_type(table.table_type().map(str::to_string))
        .set_storage_descriptor(table.storage_descriptor().cloned())
        .set_parameters(Some(parameters))
        .build()
        .map_err(|e| SwapError::Ambiguous(Error::Invariant(format!("Glue table input for {ident}: {e}"))))?;
    let mut update = client.update_table().database_name(&database).table_input(input).skip_archive(true);
    if let Some(version) = table.version_id() {
        update = update.version_id(version);
    }
    // One request, no SDK retry: a retry after a lost response would be refused as a
    // concurrent modification of the update that landed. The committer owns the retries and
    // settles every non-success by reloading the table.
    let no_retry = aws_sdk_glue::config::Builder::default().retry_config(aws_sdk_glue::config::retry::RetryConfig::disabled());
    match update.customize().config_override(no_retry).send().await {
        Ok(_) => Ok(()),
        Err(e) => match e.as_service_error() {
            Some(UpdateTableError::ConcurrentModificationException(_)) => {
                Err(SwapError::Conflict(format!("{ident}: Glue table version changed")))
            }
            _ => Err(SwapError::Ambiguous(crate::base::aws::error("glue:UpdateTable", &format!("{database}.{}", ident.name()), e))),
        },
    }
}

#[cfg(feature = "aws")]
/// `seen_token`: the version token a load read at `expected`; without it the location and its
/// token are read first.
async fn s3tables_swap(
    client: &aws_sdk_s3tables::Client,
    bucket: &str,
    ident: &TableIdent,
    expected: &str,
    new_location: &str,
    seen_token: Option<String>,
) -> Result<(), SwapError> {
    use aws_sdk_s3tables::operation::update_table_metadata_location::UpdateTableMetadataLocationError;
    let namespace = ident.namespace().join(".");
    let resource = format!("{bucket}/{namespace}/{}", ident.name());
    let token = match seen_token {
        Some(token) => token,
        None => {
            let current = client
                .get_table_metadata_location()
                .table_bucket_arn(bucket)
                .namespace(&namespace)
                .name(ident.name())
                .send()
                .await
                .map_err(|e| SwapError::Ambiguous(crate::base::aws::error("s3tables:GetTableMetadataLocation", &resource, e)))?;
            if current.metadata_location() != Some(expected) {
                return Err(SwapError::Conflict(format!("{ident} no longer at {expected}")));
            }
            current.version_token().to_string()
        }
    };
    let result = client
        .update_table_metadata_location()
        .table_bucket_arn(bucket)
        .namespace(&namespace)
        .name(ident.name())
        .version_token(token)
        .metadata_location(new_location)
        // No SDK retry, as for Glue's `UpdateTable` (see `glue_swap`).
        .customize()
        .config_override(
            aws_sdk_s3tables::config::Builder::default().retry_config(aws_sdk_s3tables::config::retry::RetryConfig::disabled()),
        )
        .send()
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(e) => match e.as_service_error() {
            Some(UpdateTableMetadataLocationError::ConflictException(_)) => {
                Err(SwapError::Conflict(format!("{ident}: S3 Tables version token changed")))
            }
            _ => Err(SwapError::Ambiguous(crate::base::aws::error("s3tables:UpdateTableMetadataLocation", &resource, e))),
        },
    }
}

#[cfg(all(test, feature = "aws"))]
mod tests {
    use iceberg::NamespaceIdent;

    use super::*;

    #[test]
    fn a_loaded_version_serves_one_swap_from_the_location_it_was_read_at() {
        let (t, other) =
            (TableIdent::new(NamespaceIdent::new("ns".into()), "t".into()), TableIdent::new(NamespaceIdent::new("ns".into()), "u".into()));
        let versions = LoadedVersions::default();
        versions.keep(&t, "m1".into(), 7);
        assert_eq!((versions.round_trips(&t, "m1"), versions.round_trips(&t, "m2"), versions.round_trips(&other, "m1")), (1, 2, 2));
        assert_eq!(versions.take_at(&t, "m1"), Some(7));
        // Used once: the next swap reads the version again.
        assert_eq!((versions.take_at(&t, "m1"), versions.round_trips(&t, "m1")), (None, 2));
        // A swap from another location gets nothing and drops what it found.
        versions.keep(&t, "m1".into(), 8);
        assert_eq!((versions.take_at(&t, "m2"), versions.take_at(&t, "m1")), (None, None));
    }
}
