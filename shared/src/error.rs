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
    /// The Lambda event itself is malformed (not records with per-record errors).
    #[error("malformed event: {0}")]
    Event(String),
    /// The catalog refused the commit because the table changed; retry after reload.
    #[error("commit conflict on {table}: {reason}")]
    CommitConflict { table: String, reason: String },
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
            Error::Aws { retryable, .. } => *retryable,
            Error::Iceberg(e) => {
                e.retryable() || e.kind() == iceberg::ErrorKind::CatalogCommitConflicts
            }
            // SQLite answers "database is locked" under concurrent writers.
            Error::Sql(e) => e.to_string().contains("locked") || e.to_string().contains("busy"),
            _ => false,
        }
    }
}
