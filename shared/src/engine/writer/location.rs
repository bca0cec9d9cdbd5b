//! Where data files go: `<data dir>/<field>=<value>/…/<file>`, each partition value escaped as
//! Iceberg's Java writer escapes it (`URLEncoder`: letters, digits and `.-*_` as they are, space
//! as `+`, every other byte of the UTF-8 as `%XX`) and each directory bounded in length.
//!
//! iceberg-rust's default generator puts values in paths as they are: a `/`, a newline or `..`
//! in a string value made directories of their own or climbed out of the table, and a long
//! value failed the whole batch ("File name too long"). Escaped, a value is one directory
//! inside the data directory whatever it holds (every directory has its `<field>=`, so it is
//! never `.` or `..`); bounded, every value can be written. The path is only a place: readers
//! take partition values from the manifests, never from paths.

use iceberg::spec::{PartitionKey, StructType, TableMetadata};
use iceberg::writer::file_writer::location_generator::LocationGenerator;

use crate::engine::confine;

/// Longest partition directory name, in bytes (file systems allow 255; S3 keys 1024 in all).
pub const MAX_PARTITION_DIR: usize = 128;

/// Bytes of the value's digest that make a cut directory name unique.
const DIGEST_HEX: usize = 16;

/// Data file locations of one table: its data directory and escaped partition directories.
#[derive(Clone, Debug)]
pub struct DataLocations {
    data_dir: String,
    partition_type: StructType,
}

impl DataLocations {
    /// Locations for files of `metadata`'s table partitioned as `partition_type` says. The data
    /// directory must be inside the table location ([`confine::data_dir`]).
    pub fn new(metadata: &TableMetadata, partition_type: StructType) -> crate::base::error::Result<Self> {
        confine::data_dir(metadata).map_err(crate::base::error::Error::Config)?;
        // The spelling the table uses (not the normalized one), as iceberg's writers do.
        Ok(Self { data_dir: confine::data_location(metadata), partition_type })
    }
}

impl LocationGenerator for DataLocations {
    fn generate_location(&self, partition_key: Option<&PartitionKey>, file_name: &str) -> String {
        let Some(key) = partition_key.filter(|k| !k.spec().is_unpartitioned()) else {
            return format!("{}/{file_name}", self.data_dir);
        };
        let dirs: Vec<String> = key
            .spec()
            .fields()
            .iter()
            .zip(self.partition_type.fields())
            .enumerate()
            .map(|(i, (field, typed))| {
                let value = field.transform.to_human_string(&typed.field_type, key.data()[i].as_ref());
                partition_dir(&field.name, &value)
            })
            .collect();
        format!("{}/{}/{file_name}", self.data_dir, dirs.join("/"))
    }
}

/// `<name>=<value>`, both escaped; longer than [`MAX_PARTITION_DIR`], cut at a whole escaped
/// character and ended by a digest of the whole name and value (two long values sharing a
/// beginning stay apart).
pub fn partition_dir(name: &str, value: &str) -> String {
    let dir = format!("{}={}", escape(name), escape(value));
    if dir.len() <= MAX_PARTITION_DIR {
        return dir;
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{name}={value}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect::<String>()[..DIGEST_HEX].to_string();
    let keep = MAX_PARTITION_DIR - DIGEST_HEX - 1;
    // Never cut inside a `%XX`.
    let mut cut = keep;
    while let Some(p) = dir[..cut].rfind('%').filter(|p| cut - p < 3) {
        cut = p;
    }
    format!("{}-{hex}", &dir[..cut])
}

/// Java's `URLEncoder.encode(s, UTF_8)`, as Iceberg's `PartitionSpec.partitionToPath` applies it.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'*' | b'_' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_javas_url_encoder_does() {
        assert_eq!(escape("a b/c"), "a+b%2Fc");
        assert_eq!(escape("../../x"), "..%2F..%2Fx");
        assert_eq!(escape("line\nbreak"), "line%0Abreak");
        assert_eq!(escape("é*_-."), "%C3%A9*_-.");
        assert_eq!(partition_dir("city", "New York"), "city=New+York");
    }

    /// An identity(string) partition's values of 300 bytes, `../../x`, `/` and a newline: every
    /// row is written, each file one directory deep under the table's data directory.
    #[tokio::test]
    async fn any_string_partition_value_is_written_inside_the_data_directory() {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, RecordBatch, StringArray};
        use iceberg::spec::{Literal, NestedField, PrimitiveLiteral, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};

        let dir = tempfile::tempdir().unwrap();
        let config = crate::model::config::Config::from_args([format!("warehouse={}", dir.path().display())]).unwrap();
        let catalogs = crate::engine::catalog::Catalogs::connect(&config).await.unwrap();
        let schema = Schema::builder()
            .with_fields(vec![NestedField::optional(1, "city", Type::Primitive(PrimitiveType::String)).into()])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder().add_partition_field(1, "city", Transform::Identity).unwrap().build();
        let def = crate::model::tables::TableDef {
            name: "t".into(),
            schema,
            partition_spec: spec,
            properties: Default::default(),
            sort_order: None,
            format_version: None,
        };
        let table = catalogs.ensure_table(&def).await.unwrap();
        let values = ["x".repeat(300), "../../x".into(), "a/b".into(), "line\nbreak".into(), "/".into()];
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap());
        let batch = RecordBatch::try_new(arrow, vec![Arc::new(StringArray::from_iter_values(&values)) as ArrayRef]).unwrap();
        let files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 1 << 30).await.unwrap();
        assert_eq!(files.len(), values.len());
        let data_dir = confine::data_dir(table.metadata()).unwrap();
        for file in &files {
            let normalized = confine::normalize(file.file_path()).unwrap();
            let rest =
                normalized.strip_prefix(&format!("{data_dir}/")).unwrap_or_else(|| panic!("{} is outside {data_dir}", file.file_path()));
            let (partition, name) = rest.split_once('/').unwrap();
            assert!(!name.contains('/') && partition.len() <= MAX_PARTITION_DIR && !partition.contains('\n'), "{rest}");
            assert!(table.file_io().exists(file.file_path()).await.unwrap());
            // The value itself is whole in the metadata.
            let Some(Literal::Primitive(PrimitiveLiteral::String(value))) = &file.partition()[0] else { panic!("{:?}", file.partition()) };
            assert!(values.contains(value), "{value}");
        }
    }

    #[test]
    fn long_directories_are_cut_with_a_digest_and_stay_apart() {
        let a = partition_dir("s", &"é".repeat(150));
        let b = partition_dir("s", &format!("{}x", "é".repeat(150)));
        assert!(a.len() <= MAX_PARTITION_DIR && b.len() <= MAX_PARTITION_DIR, "{a}");
        assert_ne!(a, b);
        // The cut part is whole escapes: no `%` within the last two characters before the digest.
        let cut = &a[..a.len() - DIGEST_HEX - 1];
        assert!(!cut[cut.len().saturating_sub(2)..].contains('%'), "{a}");
    }
}
