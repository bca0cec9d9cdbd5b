//! Deletion vectors (format v3): the deleted positions of one data file as a `deletion-vector-v1`
//! blob in a Puffin file, referenced from a delete manifest by the data file, the blob's offset
//! and its length. iceberg-rust 0.10.1 models them (`DataFile::content_offset`, the Puffin
//! blocks) but writes none; this is the writer, and the reader every delete-applying path here
//! uses ([`super::live_rows::deleted_positions`]).
//!
//! The blob (Iceberg spec, "Deletion Vectors"): a 4-byte big-endian length of magic + bitmap,
//! the magic `D1 D3 39 64`, the bitmap in the portable 64-bit Roaring format (a little-endian
//! count of 32-bit-keyed bitmaps, each a little-endian key and a portable 32-bit Roaring
//! bitmap: what `RoaringTreemap::serialize_into` writes), and a big-endian CRC-32 of magic +
//! bitmap. Uncompressed, as the spec requires.
//!
//! One Puffin file holds one DV: a DV is replaced (merged with a later batch's positions, or
//! dropped with its data file) by removing its file, which must then hold nothing else live.

use std::collections::HashMap;

use iceberg::puffin::{Blob, BlobMetadata, CompressionCodec, DELETION_VECTOR_V1, FileMetadata, PuffinWriter};
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat};
use iceberg::table::Table;
use roaring::RoaringTreemap;

use super::manifest::spec_of;
use crate::base::error::{Error, Result};

/// The DV blob's magic bytes.
const MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];
/// Blob properties the spec requires.
pub const REFERENCED_DATA_FILE: &str = "referenced-data-file";
pub const CARDINALITY: &str = "cardinality";
/// `_pos`, the metadata column a DV is computed from (the blob's `fields`, as Java writes it).
const ROW_POSITION_FIELD_ID: i32 = 2_147_483_545;
/// Puffin's header magic ("PFA1"); its footer is magic, payload, length, flags, magic.
const PUFFIN_MAGIC_LEN: u64 = 4;
const PUFFIN_FOOTER_FIXED_LEN: u64 = 4 + 4 + 4 + 4;
/// Readers hold keys as Java ints: the high 32 bits of a position stay below 2^31.
const MAX_KEY: u64 = i32::MAX as u64;

/// Positions of `data_path` (non-negative row positions) as a bitmap.
pub fn bitmap_of(positions: impl IntoIterator<Item = i64>, data_path: &str) -> Result<RoaringTreemap> {
    let mut out = RoaringTreemap::new();
    for pos in positions {
        // Any non-negative i64 keeps its high 32 bits within a Java int.
        let pos = u64::try_from(pos).map_err(|_| Error::Invariant(format!("negative row position {pos} of {data_path}")))?;
        out.insert(pos);
    }
    Ok(out)
}

/// The `deletion-vector-v1` blob of `positions`.
pub fn encode(positions: &RoaringTreemap) -> Result<Vec<u8>> {
    if positions.max().is_some_and(|p| p >> 32 > MAX_KEY) {
        return Err(Error::Invariant("a row position is beyond what a deletion vector holds".into()));
    }
    let mut body = Vec::with_capacity(MAGIC.len() + positions.serialized_size());
    body.extend_from_slice(&MAGIC);
    positions.serialize_into(&mut body).map_err(|e| Error::Invariant(format!("deletion vector bitmap: {e}")))?;
    let length = u32::try_from(body.len()).map_err(|_| Error::Invariant(format!("deletion vector of {} bytes", body.len())))?;
    let mut blob = Vec::with_capacity(body.len() + 8);
    blob.extend_from_slice(&length.to_be_bytes());
    blob.extend_from_slice(&body);
    blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    Ok(blob)
}

/// The positions of a `deletion-vector-v1` blob; `what` names it in errors.
pub fn decode(blob: &[u8], what: &str) -> Result<RoaringTreemap> {
    let bad = |why: String| Error::Data(format!("deletion vector {what}: {why}"));
    if blob.len() < 12 {
        return Err(bad(format!("{} bytes, shorter than its framing", blob.len())));
    }
    // Twelve bytes at least (checked above): both four-byte fields are there.
    let (Some(length), Some(crc)) = (blob.first_chunk::<4>(), blob.last_chunk::<4>()) else {
        return Err(bad("no framing".into()));
    };
    let (length, crc) = (u32::from_be_bytes(*length) as usize, u32::from_be_bytes(*crc));
    if length + 8 != blob.len() {
        return Err(bad(format!("its length field says {length} bytes of magic and bitmap, the blob holds {}", blob.len() - 8)));
    }
    let body = &blob[4..4 + length];
    if body[..4] != MAGIC {
        return Err(bad(format!("magic {:02X?}, expected {MAGIC:02X?}", &body[..4])));
    }
    if crc != crc32fast::hash(body) {
        return Err(bad("CRC-32 does not match its bitmap".into()));
    }
    let mut bitmap = &body[4..];
    let positions = RoaringTreemap::deserialize_from(&mut bitmap).map_err(|e| bad(format!("bitmap: {e}")))?;
    if !bitmap.is_empty() {
        return Err(bad(format!("{} bytes after the bitmap", bitmap.len())));
    }
    if positions.max().is_some_and(|p| p >> 32 > MAX_KEY) {
        return Err(bad("a bitmap key is beyond 2^31 - 1".into()));
    }
    Ok(positions)
}

/// The positions a DV delete file (a manifest entry of format Puffin) deletes from its data file.
pub async fn read(table: &Table, delete: &DataFile) -> Result<RoaringTreemap> {
    let path = delete.file_path();
    let (Some(offset), Some(size)) = (delete.content_offset(), delete.content_size_in_bytes()) else {
        return Err(Error::Data(format!("deletion vector {path} has no content_offset / content_size_in_bytes")));
    };
    let (Ok(offset), Ok(size)) = (u64::try_from(offset), u64::try_from(size)) else {
        return Err(Error::Data(format!("deletion vector {path}: offset {offset}, size {size}")));
    };
    let reader = table.file_io().new_input(path)?.reader().await?;
    let blob = reader.read(offset..offset + size).await?;
    let what = format!("{path} at {offset}");
    let positions = decode(&blob, &what)?;
    if positions.len() != delete.record_count() {
        return Err(Error::Data(format!(
            "deletion vector {what}: {} positions, its manifest entry says {}",
            positions.len(),
            delete.record_count()
        )));
    }
    Ok(positions)
}

/// Write one Puffin file next to `data_file` holding the DV `positions` of it, and return its
/// delete-manifest entry (the snapshot and sequence numbers are inherited at commit).
pub async fn write(table: &Table, data_file: &DataFile, positions: &RoaringTreemap) -> Result<DataFile> {
    let data_path = data_file.file_path();
    let dir = data_path.rsplit_once('/').map(|(d, _)| d).unwrap_or(data_path);
    let path = format!("{dir}/{}-dv.puffin", uuid::Uuid::new_v4());
    let data = encode(positions)?;
    let length = data.len() as u64;
    let properties =
        HashMap::from([(REFERENCED_DATA_FILE.to_string(), data_path.to_string()), (CARDINALITY.to_string(), positions.len().to_string())]);
    let file_properties =
        HashMap::from([(iceberg::puffin::CREATED_BY_PROPERTY.to_string(), format!("icestream {}", env!("CARGO_PKG_VERSION")))]);
    // The writer reports neither offsets nor size: the first blob follows the header magic, and
    // the footer is the same payload serialized again (checked against the file in tests).
    let footer = footer_len(&properties, &file_properties, length)?;
    let blob = Blob::builder()
        .r#type(DELETION_VECTOR_V1.to_string())
        .fields(vec![ROW_POSITION_FIELD_ID])
        // -1: a DV is written before its snapshot exists; readers take the manifest entry's.
        .snapshot_id(-1)
        .sequence_number(-1)
        .data(data)
        .properties(properties)
        .build();
    let output = table.file_io().new_output(&path)?;
    let mut writer = PuffinWriter::new(&output, file_properties, false).await?;
    writer.add(blob, CompressionCodec::None).await?;
    writer.close().await?;
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(path)
        .file_format(DataFileFormat::Puffin)
        .partition(data_file.partition().clone())
        .partition_spec_id(spec_of(data_file, table.metadata())?.spec_id())
        .record_count(positions.len())
        .file_size_in_bytes(PUFFIN_MAGIC_LEN + length + footer)
        .referenced_data_file(Some(data_path.to_string()))
        .content_offset(Some(PUFFIN_MAGIC_LEN as i64))
        .content_size_in_bytes(Some(length as i64))
        .build()
        .map_err(|e| Error::Invariant(format!("deletion vector for {data_path}: {e}")))
}

/// Bytes of the Puffin footer `PuffinWriter` writes for one uncompressed DV blob.
fn footer_len(properties: &HashMap<String, String>, file_properties: &HashMap<String, String>, length: u64) -> Result<u64> {
    let blob: BlobMetadata = serde_json::from_value(serde_json::json!({
        "type": DELETION_VECTOR_V1,
        "fields": [ROW_POSITION_FIELD_ID],
        "snapshot-id": -1,
        "sequence-number": -1,
        "offset": PUFFIN_MAGIC_LEN,
        "length": length,
        "properties": properties,
    }))?;
    let payload = serde_json::to_string(&FileMetadata::new(vec![blob], file_properties.clone()))?;
    Ok(PUFFIN_FOOTER_FIXED_LEN + payload.len() as u64)
}

#[cfg(test)]
mod tests;
