//! What an upsert table keeps so a batch's read cost stays bounded: the key sort order and the
//! Parquet properties of `tables::add_upsert_properties`. Tables icestream creates have both;
//! an existing table an upsert pipeline takes over (made by another engine, or by an icestream
//! without them) gets them at start, in a commit of their own: the sort order when it has none
//! (a sort order of its owner's is kept), and each property it does not set itself. Files
//! written from then on, by ingest and by compaction, follow them.

use std::collections::HashMap;

use iceberg::spec::Operation;
use iceberg::table::Table;

use crate::base::error::Result;
use crate::engine::commit::{ChangeSet, Planner};
use crate::model::sort_order::by_key;
use crate::model::tables::add_upsert_properties;

/// A commit of the layout an upsert table keyed by `key` lacks.
pub struct KeyedLayout<'a> {
    pub key: &'a [String],
}

impl Planner for KeyedLayout<'_> {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> Result<Option<ChangeSet>> {
        let metadata = table.metadata();
        let mut wanted = HashMap::new();
        add_upsert_properties(&mut wanted, &self.key.iter().map(String::as_str).collect::<Vec<_>>());
        let properties: HashMap<String, String> =
            wanted.into_iter().filter(|(name, _)| !metadata.properties().contains_key(name)).collect();
        let sort_order = match metadata.default_sort_order().is_unsorted() {
            true => Some(by_key(metadata.current_schema(), self.key)?),
            false => None,
        };
        if properties.is_empty() && sort_order.is_none() {
            return Ok(None);
        }
        tracing::info!(table = %table.identifier(), sort_order = sort_order.is_some(), properties = ?properties.keys().collect::<Vec<_>>(), "upsert table takes the key layout");
        Ok(Some(ChangeSet { properties, sort_order, ..ChangeSet::new(Operation::Append) }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::model::tables::PAGE_ROW_LIMIT_PROPERTY;
    use crate::testkit::LocalTable;

    #[tokio::test]
    async fn a_table_without_the_key_layout_gets_it_and_keeps_its_own_settings() {
        let fixture = LocalTable::new().await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let key = ["id".to_string()];
        let table = fixture.load().await;
        assert!(table.metadata().default_sort_order().is_unsorted());
        // The owner's own page size stays.
        let mut own = ChangeSet::new(Operation::Append);
        own.properties.insert(PAGE_ROW_LIMIT_PROPERTY.into(), "1000".into());
        struct Once(Option<ChangeSet>);
        impl Planner for Once {
            async fn plan(&mut self, _: &Table, _: u32) -> Result<Option<ChangeSet>> {
                Ok(self.0.take())
            }
        }
        let table = fixture.catalogs.committer.commit_to(table, deadline, &mut Once(Some(own))).await.unwrap().table;

        let table = fixture.catalogs.committer.commit_to(table, deadline, &mut KeyedLayout { key: &key }).await.unwrap().table;
        let reloaded = fixture.load().await;
        for t in [&table, &reloaded] {
            let order = t.metadata().default_sort_order();
            assert_eq!(order.fields.len(), 1);
            assert_eq!(order.fields[0].source_id, 1, "sorted by the key column");
            let properties = t.metadata().properties();
            assert_eq!(properties.get(PAGE_ROW_LIMIT_PROPERTY).map(String::as_str), Some("1000"), "the owner's setting is kept");
            assert_eq!(properties.get("write.parquet.bloom-filter-enabled.column.id").map(String::as_str), Some("true"));
            assert_eq!(properties.get("write.delete.mode").map(String::as_str), Some("merge-on-read"));
        }
        // Once it has them, nothing more is committed.
        assert!(KeyedLayout { key: &key }.plan(&reloaded, 0).await.unwrap().is_none());
    }
}
