//! Rows in a table's sort order. Every data-file writer honours the table's default sort order
//! (its identity fields; a field with another transform ends the sort there), so an upsert
//! table, sorted by its key, keeps each key in one page of one row group of a file, and a batch
//! reads only those pages.

use arrow_array::RecordBatch;
use arrow_ord::sort::{SortColumn, SortOptions, lexsort_to_indices};
use arrow_select::concat::concat_batches;
use arrow_select::take::take_record_batch;
use iceberg::spec::{NullOrder, Schema, SortDirection, SortField, SortOrder, Transform};

use crate::base::error::{Error, Result};

/// Ascending by `key`, in key order: the sort order of an upsert table.
pub fn by_key(schema: &Schema, key: &[String]) -> Result<SortOrder> {
    let mut builder = SortOrder::builder();
    builder.with_order_id(1);
    for name in key {
        let field = schema.field_by_name(name).ok_or_else(|| Error::Config(format!("the table has no key column {name:?}")))?;
        builder.with_sort_field(
            SortField::builder()
                .source_id(field.id)
                .transform(Transform::Identity)
                .direction(SortDirection::Ascending)
                .null_order(NullOrder::First)
                .build(),
        );
    }
    Ok(builder.build(schema)?)
}

/// `batches` as one batch in `order`, or `None` when the order sorts nothing (unsorted tables,
/// no rows) or names a column the rows do not have.
pub fn sorted(schema: &Schema, order: &SortOrder, batches: &[RecordBatch]) -> Result<Option<RecordBatch>> {
    let Some(first) = batches.first() else { return Ok(None) };
    let mut fields = Vec::new();
    for field in &order.fields {
        if field.transform != Transform::Identity {
            break;
        }
        let Some(name) = schema.field_by_id(field.source_id).map(|f| f.name.clone()) else { return Ok(None) };
        let Ok(index) = first.schema().index_of(&name) else { return Ok(None) };
        let options =
            SortOptions { descending: field.direction == SortDirection::Descending, nulls_first: field.null_order == NullOrder::First };
        fields.push((index, options));
    }
    if fields.is_empty() {
        return Ok(None);
    }
    let all = concat_batches(&first.schema(), batches)?;
    let columns: Vec<SortColumn> =
        fields.iter().map(|(i, options)| SortColumn { values: all.column(*i).clone(), options: Some(*options) }).collect();
    let indices = lexsort_to_indices(&columns, None)?;
    Ok(Some(take_record_batch(&all, &indices)?))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use iceberg::spec::{NestedField, PrimitiveType, Type};

    use super::*;

    #[test]
    fn rows_sort_by_the_key_across_batches() {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "tenant", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::required(2, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(3, "amount", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        let order = by_key(&schema, &["tenant".into(), "id".into()]).unwrap();
        let batch = |t: Vec<&str>, id: Vec<i64>| {
            let n = id.len() as i64;
            RecordBatch::try_from_iter([
                ("tenant", Arc::new(StringArray::from(t)) as ArrayRef),
                ("id", Arc::new(Int64Array::from(id)) as ArrayRef),
                ("amount", Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef),
            ])
            .unwrap()
        };
        let out = sorted(&schema, &order, &[batch(vec!["b", "a"], vec![1, 9]), batch(vec!["a", "b"], vec![2, 0])]).unwrap().unwrap();
        let ids: Vec<i64> = out.column(1).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec();
        assert_eq!(ids, [2, 9, 0, 1]);
        assert!(sorted(&schema, &SortOrder::unsorted_order(), &[out]).unwrap().is_none());
        assert!(by_key(&schema, &["nope".into()]).is_err());
    }

    #[tokio::test]
    async fn an_upsert_tables_files_are_sorted_by_key_in_small_pages() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::Int64Type;
        use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};

        let fixture = crate::testkit::LocalTable::keyed().await;
        let table = fixture.load().await;
        let batch = |ids: Vec<i64>| {
            RecordBatch::try_new(
                Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap()),
                vec![Arc::new(Int64Array::from(ids)) as ArrayRef],
            )
            .unwrap()
        };
        let rows = 3000i64;
        let scrambled = |offset: i64| (0..rows).map(|i| (i * 7919 + offset) % (2 * rows)).collect::<Vec<_>>();
        let files =
            crate::engine::writer::write_data_files(&table, &[batch(scrambled(0)), batch(scrambled(1))], "zstd", 1 << 30).await.unwrap();
        assert_eq!(files.len(), 1);
        let bytes = table.file_io().new_input(files[0].file_path()).unwrap().read().await.unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new_with_options(
            bytes,
            ArrowReaderOptions::new().with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required),
        )
        .unwrap();
        let pages = reader.metadata().offset_index().unwrap()[0][0].page_locations().len();
        assert!(
            pages >= (2 * rows as usize) / crate::model::tables::UPSERT_PAGE_ROWS,
            "{pages} pages: at most {} rows each",
            crate::model::tables::UPSERT_PAGE_ROWS
        );
        let ids: Vec<i64> =
            reader.build().unwrap().flat_map(|b| b.unwrap().column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
        assert_eq!(ids.len(), 2 * rows as usize);
        assert!(ids.windows(2).all(|w| w[0] <= w[1]), "rows of both batches are in key order");
    }
}
