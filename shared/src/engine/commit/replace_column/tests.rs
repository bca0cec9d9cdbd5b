use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use iceberg::spec::Operation;

use super::*;
use crate::engine::commit::live_rows::LiveFiles;
use crate::testkit::{FixedChange, LocalTable, TestResult, soon};

async fn append(f: &LocalTable, ids: &[i64]) -> TestResult {
    let table = f.load().await;
    let schema = Arc::new(schema_to_arrow_schema(table.metadata().current_schema())?);
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef])?;
    let files = write_data_files_as(&table, table.metadata().current_schema().clone(), &[batch], "zstd", 64 << 20).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files))).await?;
    Ok(())
}

#[tokio::test]
async fn a_v3_table_keeps_its_row_ids_and_sequence_numbers_when_a_column_is_replaced() -> TestResult {
    let f = LocalTable::v3().await;
    append(&f, &[1, 2, 3]).await?;
    append(&f, &[4, 5]).await?;
    let table = f.load().await;
    let mut last = table.metadata().last_column_id();
    let target: SchemaRef = Arc::new(replace_columns(table.metadata().current_schema(), &["id".into()], &mut last)?.expect("id is long"));
    let mut change = ChangeSet::new(Operation::Overwrite);
    change.schema = Some((*target).clone());
    Rewrite::new("zstd", 64 << 20).apply(&table, &target, &["id".into()], &mut change).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(change)).await?;

    let table = f.load().await;
    let live = LiveFiles::of(&table).await?;
    let schema = Arc::new(schema_to_arrow_schema(&with_lineage_columns(table.metadata().current_schema())?)?);
    let mut got: Vec<(i64, i64, i64)> = Vec::new();
    for file in &live.data {
        let path = file.file_path();
        for b in read_with_lineage(&table, path, &[], &schema, live.lineage[path]).await? {
            let (ids, row_ids, seqs) = (
                b.column(0).as_primitive::<Float64Type>(),
                b.column(1).as_primitive::<Int64Type>(),
                b.column(2).as_primitive::<Int64Type>(),
            );
            got.extend((0..b.num_rows()).map(|i| (ids.value(i) as i64, row_ids.value(i), seqs.value(i))));
        }
    }
    got.sort_unstable();
    assert_eq!(got, vec![(1, 0, 1), (2, 1, 1), (3, 2, 1), (4, 3, 2), (5, 4, 2)], "(id, _row_id, _last_updated_sequence_number) as before");
    Ok(())
}

#[test]
fn only_long_columns_are_replaced_at_their_place_with_a_new_id() {
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "a", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "b", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap();
    let mut last = 2;
    let replaced = replace_columns(&schema, &["a".into(), "b".into()], &mut last).unwrap().unwrap();
    let fields: Vec<_> = replaced.as_struct().fields().iter().map(|f| (f.id, f.name.clone(), f.field_type.to_string())).collect();
    assert_eq!(fields, [(3, "a".to_string(), "double".to_string()), (2, "b".into(), "string".into())]);
    assert_eq!(last, 3);
    assert!(replace_columns(&replaced, &["a".into()], &mut last).unwrap().is_none(), "a double stays");
}
