//! S3 Tables runs compaction and snapshot management per table and unreferenced-file removal
//! per bucket. With `s3tables_maintenance=set` the function writes the table's settings from
//! our knobs (target file size, snapshot age and count) so there is one place to tune them;
//! with `report` it only reads them (see `Catalogs::managed_maintenance`).

#[cfg(feature = "aws")]
use aws_sdk_s3tables::types::{
    IcebergCompactionSettings, IcebergSnapshotManagementSettings, MaintenanceStatus, TableMaintenanceConfigurationValue,
    TableMaintenanceSettings, TableMaintenanceType,
};

use super::MaintenanceSettings;
use crate::base::error::Result;

/// S3 Tables accepts target file sizes from 64 to 512 MB.
#[cfg(feature = "aws")]
const S3TABLES_TARGET_MB: std::ops::RangeInclusive<i32> = 64..=512;

/// The two table-level configurations our knobs describe.
#[cfg(feature = "aws")]
fn desired(settings: &MaintenanceSettings) -> [(TableMaintenanceType, TableMaintenanceConfigurationValue); 2] {
    let target_mb = i32::try_from(settings.target_file_size_bytes / (1024 * 1024))
        .unwrap_or(*S3TABLES_TARGET_MB.end())
        .clamp(*S3TABLES_TARGET_MB.start(), *S3TABLES_TARGET_MB.end());
    let compaction =
        TableMaintenanceSettings::IcebergCompaction(IcebergCompactionSettings::builder().target_file_size_mb(target_mb).build());
    let snapshots = TableMaintenanceSettings::IcebergSnapshotManagement(
        IcebergSnapshotManagementSettings::builder()
            .min_snapshots_to_keep(i32::try_from(settings.min_snapshots_to_keep).unwrap_or(i32::MAX))
            .max_snapshot_age_hours(i32::try_from(settings.snapshot_max_age_hours.max(1)).unwrap_or(i32::MAX))
            .build(),
    );
    let enabled = |s| TableMaintenanceConfigurationValue::builder().status(MaintenanceStatus::Enabled).settings(s).build();
    [(TableMaintenanceType::IcebergCompaction, enabled(compaction)), (TableMaintenanceType::IcebergSnapshotManagement, enabled(snapshots))]
}

/// Write `table`'s managed maintenance settings from the knobs. Idempotent (a put, not a diff).
#[cfg(feature = "aws")]
pub async fn set_table_maintenance(table_bucket_arn: &str, namespace: &str, table: &str, settings: &MaintenanceSettings) -> Result<()> {
    let sdk = crate::base::aws::sdk_config().await;
    let mut conf = aws_sdk_s3tables::config::Builder::from(&sdk);
    // The same endpoint override the catalog uses (local AWS emulators).
    if let Some(endpoint) = std::env::var("AWS_ENDPOINT_URL_S3TABLES").ok().filter(|v| !v.is_empty()) {
        conf = conf.endpoint_url(endpoint);
    }
    let client = aws_sdk_s3tables::Client::from_conf(conf.build());
    let resource = format!("{table_bucket_arn}/{namespace}/{table}");
    for (kind, value) in desired(settings) {
        client
            .put_table_maintenance_configuration()
            .table_bucket_arn(table_bucket_arn)
            .namespace(namespace)
            .name(table)
            .r#type(kind)
            .value(value)
            .send()
            .await
            .map_err(|e| crate::base::aws::error("s3tables:PutTableMaintenanceConfiguration", &resource, e))?;
    }
    Ok(())
}

/// Without the AWS clients there is no S3 Tables catalog to reach this through.
#[cfg(not(feature = "aws"))]
pub async fn set_table_maintenance(_table_bucket_arn: &str, _namespace: &str, _table: &str, _settings: &MaintenanceSettings) -> Result<()> {
    Err(crate::base::error::Error::not_built("s3tables_maintenance=set", "aws"))
}

#[cfg(all(test, feature = "aws"))]
mod tests {
    use super::*;

    #[test]
    fn knobs_map_to_s3tables_settings_within_its_limits() {
        let config = crate::model::config::Config::from_args([
            "target_file_size_bytes=1048576",
            "min_snapshots_to_keep=3",
            "snapshot_max_age_hours=48",
        ])
        .unwrap();
        let [(_, compaction), (_, snapshots)] = desired(&MaintenanceSettings::from(&config));
        let c = compaction.settings().unwrap().as_iceberg_compaction().unwrap();
        assert_eq!(c.target_file_size_mb(), Some(64));
        let s = snapshots.settings().unwrap().as_iceberg_snapshot_management().unwrap();
        assert_eq!((s.min_snapshots_to_keep(), s.max_snapshot_age_hours()), (Some(3), Some(48)));
    }
}
