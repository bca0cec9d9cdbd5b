//! The names of the files one attempt writes, and the list of them: the orphans to clean up if
//! the swap loses.

use iceberg::spec::{DataFileFormat, TableMetadata};
use uuid::Uuid;

pub(super) struct AttemptFiles {
    meta_dir: String,
    commit_id: Uuid,
    manifests: usize,
    /// Every file written so far (manifests, manifest list).
    pub written: Vec<String>,
}

impl AttemptFiles {
    pub fn new(metadata: &TableMetadata) -> Self {
        Self { meta_dir: format!("{}/metadata", metadata.location()), commit_id: Uuid::new_v4(), manifests: 0, written: Vec::new() }
    }

    /// The path of the attempt's next manifest, recorded as written.
    pub fn next_manifest(&mut self) -> String {
        self.manifests += 1;
        let path = format!("{}/{}-m{}.{}", self.meta_dir, self.commit_id, self.manifests, DataFileFormat::Avro);
        self.written.push(path.clone());
        path
    }

    /// The path of the snapshot's manifest list, recorded as written.
    pub fn manifest_list(&mut self, snapshot_id: i64) -> String {
        let path = format!("{}/snap-{snapshot_id}-1-{}.{}", self.meta_dir, self.commit_id, DataFileFormat::Avro);
        self.written.push(path.clone());
        path
    }
}
