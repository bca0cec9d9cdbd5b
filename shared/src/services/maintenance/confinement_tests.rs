//! Orphan removal stays inside the table's own directories ([`crate::engine::confine`]) and
//! honours `gc.enabled = false`.

use super::MaintenanceSettings;
use super::orphans::remove_orphans;
use crate::engine::confine::GC_ENABLED;

/// Settings whose clock is two days ahead: every file just written is past the margin.
fn later() -> MaintenanceSettings {
    let mut settings = MaintenanceSettings::from(&crate::model::config::Config::from_args(["orphan_margin_hours=1"]).unwrap());
    settings.clock = crate::base::clock::Clock::Fixed(std::time::SystemTime::now() + std::time::Duration::from_secs(48 * 3600));
    settings
}

/// A table created with its namespace directory as location (metadata says so): orphan
/// removal of it lists the sibling table's files and selects none of them.
#[tokio::test]
async fn orphans_of_a_table_located_at_its_namespace_spare_the_sibling() {
    let fixture = crate::testkit::LocalTable::new().await;
    let sibling = fixture.load().await;
    let sibling_location = sibling.metadata().location().trim_end_matches('/').to_string();
    let namespace_dir = sibling_location.rsplit_once('/').unwrap().0.to_string();
    let sibling_data = format!("{sibling_location}/data/old.parquet");
    sibling.file_io().new_output(&sibling_data).unwrap().write(bytes::Bytes::from_static(b"x")).await.unwrap();
    let wide = fixture.sibling("wide", Some(namespace_dir), &[]).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let report = remove_orphans(&fixture.catalogs, &wide, &later(), true, deadline).await.unwrap();
    assert!(report.not_the_tables >= 2, "{report:?}");
    assert_eq!(report.deleted, 0, "{report:?}");
    assert!(report.sample.iter().all(|p| !p.contains(&sibling_location)), "{report:?}");
    // Not a dry run either: the sibling's files stay.
    remove_orphans(&fixture.catalogs, &wide, &later(), false, deadline).await.unwrap();
    assert!(sibling.file_io().exists(&sibling_data).await.unwrap());
    assert!(sibling.file_io().exists(sibling.metadata_location().unwrap()).await.unwrap());
}

/// `gc.enabled = false`: orphan removal refuses, naming the property.
#[tokio::test]
async fn orphan_removal_refuses_a_table_without_gc() {
    let fixture = crate::testkit::LocalTable::new().await;
    let nogc = fixture.sibling("nogc", None, &[(GC_ENABLED, "false")]).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let err = remove_orphans(&fixture.catalogs, &nogc, &later(), true, deadline).await.unwrap_err();
    assert!(err.to_string().contains("gc.enabled = false"), "{err}");
}
