//! Reading columns of scanned batches whatever physical type their writer chose: files written
//! by Spark, PyIceberg or Trino may hold a long as Int32, a string as LargeUtf8, Utf8View or a
//! dictionary. Values are cast to one representation; anything that cannot be is an error that
//! names the column, never a panic.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use crate::error::{Error, Result};

fn cast(array: &ArrayRef, to: &DataType, column: &str) -> Result<ArrayRef> {
    arrow_cast::cast(array, to).map_err(|e| Error::Config(format!("column {column:?} of type {} cannot be read as {to}: {e}", array.data_type())))
}

/// An integer column as i64 values (null = `None`).
pub fn i64_values(array: &ArrayRef, column: &str) -> Result<Vec<Option<i64>>> {
    if !(array.data_type().is_integer() || matches!(array.data_type(), DataType::Dictionary(_, v) if v.is_integer())) {
        return Err(Error::Config(format!("column {column:?} is {}, not an integer", array.data_type())));
    }
    let cast = cast(array, &DataType::Int64, column)?;
    Ok(cast.as_primitive::<Int64Type>().iter().collect())
}

/// A string column as owned values (null = `None`).
pub fn string_values(array: &ArrayRef, column: &str) -> Result<Vec<Option<String>>> {
    let cast = cast(array, &DataType::Utf8, column)?;
    Ok(cast.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{DictionaryArray, Int32Array, LargeStringArray, StringArray};
    use arrow_array::types::Int8Type;

    use super::*;

    #[test]
    fn equivalent_representations_read_alike_and_others_are_named() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None]));
        assert_eq!(i64_values(&ints, "p").unwrap(), [Some(1), None]);
        let large: ArrayRef = Arc::new(LargeStringArray::from(vec!["a"]));
        assert_eq!(string_values(&large, "t").unwrap(), [Some("a".to_string())]);
        let dict: ArrayRef = Arc::new(DictionaryArray::<Int8Type>::from_iter(["x", "x"]));
        assert_eq!(string_values(&dict, "t").unwrap(), [Some("x".to_string()), Some("x".to_string())]);
        let text: ArrayRef = Arc::new(StringArray::from(vec!["1"]));
        assert!(i64_values(&text, "offset").unwrap_err().to_string().contains("\"offset\""));
    }
}
