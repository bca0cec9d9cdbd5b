//! Where a table's files may be, and which of them icestream may delete (issue 52).
//!
//! Table metadata is not trusted for what it names: a location set to a namespace directory, a
//! `write.data.path` pointing at another table, or a manifest naming any path would otherwise
//! make maintenance or the committer delete what is not the table's. So every deleting path
//! (expiry, orphan removal, compaction's clean-up, the committer's staged manifests) asks
//! [`deletable`] first, and data files of a commit request must be under [`data_dir`].
//!
//! A table's own files are under its data, metadata and staged directories, each only when it
//! sits inside the table location: a sibling table under the same directory is under none of
//! them. Paths are compared in one spelling ([`normalize`]); a path with `..` is refused
//! outright (object stores keep `..` as a key, local file systems resolve it).

use iceberg::spec::TableMetadata;

/// Directory under the table location that holds staged manifests of queued commits.
pub const STAGED_DIR: &str = "staged";

/// Table property that turns garbage collection off (Iceberg's `gc.enabled`): files may be
/// shared with another table, so nothing that only metadata says is unreferenced is deleted.
pub const GC_ENABLED: &str = "gc.enabled";

const WRITE_DATA_PATH: &str = "write.data.path";
const WRITE_FOLDER_STORAGE_PATH: &str = "write.folder-storage.path";
const WRITE_METADATA_PATH: &str = "write.metadata.path";

/// One spelling of a file URI for comparison: `file:/x`, `file:///x` and `/x` are `/x`,
/// `s3a://` is `s3://`, empty and `.` segments are dropped. `Err` names what is wrong: a `..`
/// segment, or nothing to name.
pub fn normalize(path: &str) -> Result<String, String> {
    let (root, rest) = if let Some(rest) = path.strip_prefix("file:") {
        (String::from("/"), rest)
    } else if path.starts_with('/') {
        (String::from("/"), path)
    } else if let Some((scheme, rest)) = path.split_once("://") {
        let scheme = if scheme == "s3a" || scheme == "s3n" { "s3" } else { scheme };
        let (authority, rest) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(format!("{path:?} names no bucket or host"));
        }
        (format!("{scheme}://{authority}/"), rest)
    } else {
        return Err(format!("{path:?} is not an absolute path or URI"));
    };
    let mut segments = Vec::new();
    for segment in rest.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(format!("{path:?} has a `..` segment")),
            s => segments.push(s),
        }
    }
    Ok(root + &segments.join("/"))
}

/// Whether `path` is strictly inside directory `dir` (both normalized; `false` if either is not
/// a valid path).
pub fn within(dir: &str, path: &str) -> bool {
    match (normalize(dir), normalize(path)) {
        (Ok(dir), Ok(path)) => {
            let dir = if dir.ends_with('/') { dir } else { dir + "/" };
            path.len() > dir.len() && path.starts_with(&dir)
        }
        _ => false,
    }
}

/// The table's data directory as its metadata spells it (`write.data.path`, else
/// `<location>/data`, as iceberg's writers place files), no trailing `/`. Unchecked: see
/// [`data_dir`].
pub fn data_location(metadata: &TableMetadata) -> String {
    let props = metadata.properties();
    let dir = props.get(WRITE_DATA_PATH).or(props.get(WRITE_FOLDER_STORAGE_PATH)).cloned();
    dir.unwrap_or_else(|| format!("{}/data", metadata.location().trim_end_matches('/'))).trim_end_matches('/').to_string()
}

/// The table's data directory ([`data_location`]), normalized, only if it is inside the table
/// location.
pub fn data_dir(metadata: &TableMetadata) -> Result<String, String> {
    own_dir(metadata, data_location(metadata), "data")
}

/// The table's metadata directory (`write.metadata.path`, else `<location>/metadata`), only if
/// it is inside the table location.
pub fn metadata_dir(metadata: &TableMetadata) -> Result<String, String> {
    let dir = metadata.properties().get(WRITE_METADATA_PATH).cloned();
    own_dir(metadata, dir.unwrap_or_else(|| format!("{}/metadata", metadata.location().trim_end_matches('/'))), "metadata")
}

/// The directory of the table's staged manifests (queued commits).
pub fn staged_dir(metadata: &TableMetadata) -> Result<String, String> {
    let dir = format!("{}/{}", metadata.location().trim_end_matches('/'), STAGED_DIR);
    own_dir(metadata, dir, "staged")
}

fn own_dir(metadata: &TableMetadata, dir: String, what: &str) -> Result<String, String> {
    let location = metadata.location();
    if !within(location, &dir) {
        return Err(format!("the table's {what} directory {dir} is not inside its location {location}"));
    }
    normalize(&dir)
}

/// Whether icestream may delete `path` of the table `metadata` describes: it must be inside the
/// table's own data, metadata or staged directory. The one rule of every deleting path; `Err`
/// says why not.
pub fn deletable(metadata: &TableMetadata, path: &str) -> Result<(), String> {
    normalize(path)?;
    // `<location>/metadata` also when `write.metadata.path` moves new metadata elsewhere: the
    // commit path writes its manifests and metadata there.
    let default_metadata = format!("{}/metadata", metadata.location().trim_end_matches('/'));
    let dirs = [data_dir(metadata), metadata_dir(metadata), own_dir(metadata, default_metadata, "metadata"), staged_dir(metadata)];
    if dirs.iter().flatten().any(|dir| within(dir, path)) {
        return Ok(());
    }
    Err(format!("{path} is not under the table's own data, metadata or staged directory (location {}); not deleted", metadata.location()))
}

/// Whether the table allows deleting files its metadata no longer references (`gc.enabled`,
/// true unless set to `false`).
pub fn gc_enabled(metadata: &TableMetadata) -> bool {
    !metadata.properties().get(GC_ENABLED).is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling_and_no_parent_segments() {
        assert_eq!(normalize("file:///w/t/data/x").unwrap(), "/w/t/data/x");
        assert_eq!(normalize("file:/w//t/./x").unwrap(), "/w/t/x");
        assert_eq!(normalize("s3a://b/w/t/").unwrap(), "s3://b/w/t");
        assert!(normalize("/w/t/staged/../../x").unwrap_err().contains("`..`"));
        assert!(normalize("relative/x").is_err() && normalize("s3:///k").is_err());
    }

    #[test]
    fn within_is_strictly_below_the_directory() {
        assert!(within("file:///w/t", "/w/t/data/x.parquet"));
        assert!(within("s3://b/w/t/", "s3a://b/w/t/metadata/m.avro"));
        assert!(!within("/w/t", "/w/t"));
        assert!(!within("/w/t", "/w/tt/data/x"));
        assert!(!within("/w/t", "/w/t/../u/x"));
        assert!(!within("s3://b/w/t", "s3://c/w/t/x"));
    }

    fn metadata(location: &str, props: &[(&str, &str)]) -> TableMetadata {
        let schema = iceberg::spec::Schema::builder().build().unwrap();
        let creation = iceberg::TableCreation::builder()
            .name("t".into())
            .location(location.into())
            .schema(schema)
            .properties(props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>())
            .build();
        iceberg::spec::TableMetadataBuilder::from_table_creation(creation).unwrap().build().unwrap().metadata
    }

    #[test]
    fn only_the_tables_own_directories_are_deletable() {
        let m = metadata("file:///w/ns", &[]);
        assert!(deletable(&m, "file:///w/ns/data/a=1/x.parquet").is_ok());
        assert!(deletable(&m, "/w/ns/metadata/snap-1.avro").is_ok());
        assert!(deletable(&m, "/w/ns/staged/u.avro").is_ok());
        // A sibling table under the same (namespace) directory, and paths that climb out.
        for path in ["/w/ns/sibling/data/x.parquet", "/w/ns/sibling/metadata/v1.metadata.json", "/w/ns/data/../../x", "/w/other/data/x"] {
            assert!(deletable(&m, path).is_err(), "{path}");
        }
        // A metadata path elsewhere inside the location adds to `<location>/metadata`.
        let m = metadata("/w/t", &[(WRITE_METADATA_PATH, "/w/t/meta")]);
        assert!(deletable(&m, "/w/t/meta/v2.metadata.json").is_ok() && deletable(&m, "/w/t/metadata/snap-1.avro").is_ok());
        // A data path outside the location does not count as the table's.
        let m = metadata("/w/ns/t", &[(WRITE_DATA_PATH, "/w/ns/victim/data")]);
        assert!(deletable(&m, "/w/ns/victim/data/x.parquet").is_err());
        assert!(data_dir(&m).unwrap_err().contains("not inside"));
    }

    #[test]
    fn gc_is_on_unless_switched_off() {
        assert!(gc_enabled(&metadata("/w/t", &[])));
        assert!(gc_enabled(&metadata("/w/t", &[(GC_ENABLED, "true")])));
        assert!(!gc_enabled(&metadata("/w/t", &[(GC_ENABLED, "FALSE")])));
    }
}
