//! The library's error type. Input problems never reach it: bad records become dead-letter
//! rows. What does reach it fails the invocation, so the event source mapping retries.

/// Everything that can fail an invocation or stop start-up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration key or value is wrong; the message names the key and allowed values.
    #[error("configuration: {0}")]
    Config(String),
    /// A record's topic is claimed by no pipeline (or by two): fails the invocation so the
    /// mapping retries and alarms; nothing is dropped.
    #[error("routing: {0}")]
    Routing(String),
    /// A source schema (Avro, Protobuf, JSON Schema) cannot be used, or does not fit the table;
    /// the message names the file or field and what is allowed.
    #[error("schema: {0}")]
    Schema(String),
    /// Data we read back (a table file, a staged manifest, a scan) is not what it must be; the
    /// message names the file or column. Not retryable: the same data fails the same way.
    #[error("data: {0}")]
    Data(String),
    /// Something that must hold does not (a bug, or a table changed outside icestream).
    #[error("invariant violated: {0}")]
    Invariant(String),
    /// A command named a table the catalog does not have.
    #[error(
        "table `{table}` not found: the catalog has no table `{table}` in namespace `{namespace}` of warehouse {warehouse} (check the table name, `namespace=` or a `namespace.table` name, and `warehouse=`)"
    )]
    TableNotFound { namespace: String, table: String, warehouse: String },
    /// A catalog call failed (not a commit conflict); says what was being done.
    #[error("catalog: {what}: {source}")]
    Catalog { what: String, source: iceberg::Error },
    /// A file could not be read or written; names the path.
    #[error("storage: {path}: {source}")]
    Storage { path: String, source: iceberg::Error },
    /// A schema registry could not be reached or does not know a record's writer schema: fails
    /// the invocation before anything is written, so the mapping retries it.
    #[error("schema registry: {0}")]
    Registry(String),
    /// The registry answered that it has no schema under a record's id (Confluent HTTP 404,
    /// Glue `EntityNotFoundException`): an answer, not an outage, so that writer's records are
    /// dead letters naming the id (an outage or a 5xx stays [`Error::Registry`]).
    #[error("schema registry: {0}")]
    RegistryNotFound(String),
    /// The Lambda event itself is malformed (not records with per-record errors).
    #[error("malformed event: {0}")]
    Event(String),
    /// The catalog refused the commit because the table changed; retry after reload.
    #[error("commit conflict on {table}: {reason}")]
    CommitConflict { table: String, reason: String },
    /// The pointer swap's outcome was unknown and the reloaded table does not hold our commit:
    /// safe to plan again (a late landing shows up as a conflict or a covered watermark).
    #[error("commit to {table} did not land after an unclear swap: {source}")]
    CommitNotLanded { table: String, source: Box<Error> },
    /// Commit retries ran out of time.
    #[error("commit to {table} gave up after {attempts} attempts: {last}")]
    CommitGaveUp { table: String, attempts: u32, last: String },
    #[error(transparent)]
    Iceberg(#[from] iceberg::Error),
    #[error(transparent)]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error(transparent)]
    Parquet(#[from] parquet::errors::ParquetError),
    /// An AWS API call failed; the message names the action and the resource.
    #[error("{message}")]
    Aws { message: String, retryable: bool },
    #[error("catalog database: {0}")]
    Sql(#[from] sqlx::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether trying the same commit again after a reload can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::CommitConflict { .. } => true,
            Error::CommitNotLanded { source, .. } => source.is_retryable(),
            Error::Aws { retryable, .. } => *retryable,
            Error::Catalog { source: e, .. } | Error::Storage { source: e, .. } | Error::Iceberg(e) => {
                e.retryable() || e.kind() == iceberg::ErrorKind::CatalogCommitConflicts
            }
            // SQLite answers "database is locked" under concurrent writers.
            Error::Sql(e) => e.to_string().contains("locked") || e.to_string().contains("busy"),
            _ => false,
        }
    }

    /// `what` needs the cargo feature `feature`, which this build left out (`make demo` builds
    /// the CLI without the AWS clients and the Kafka client): say so, and which build has it.
    pub fn not_built(what: &str, feature: &str) -> Error {
        Error::Config(not_built_message(what, feature))
    }
}

/// The message of [`Error::not_built`], for callers with errors of their own.
pub fn not_built_message(what: &str, feature: &str) -> String {
    format!(
        "{what} needs the `{feature}` cargo feature, which this build leaves out (`make demo` builds the CLI with only \
         the embedded catalog and a local warehouse); the default build has it: `cargo build --bin icestream` (`make build-cli`)"
    )
}
