use iceberg::puffin::{DELETION_VECTOR_V1, PuffinReader};
use iceberg::spec::DataFileFormat;
use roaring::RoaringTreemap;

use super::*;
use crate::testkit::{LocalTable, TestResult, data_file};

/// Positions {0, 5, 196609} under key 0 and {7} under key 1, framed: the blob pyroaring
/// (PyIceberg's bitmap library) and zlib's CRC-32 make for them, byte for byte.
const PYROARING_BLOB: &str = "00000044d1d339640200000000000000000000003a300000020000000000010003000000180000001c000000000005000100010000003a30000001000000000000001000000007008b870b10";

fn positions() -> RoaringTreemap {
    [0u64, 5, 196_609, (1 << 32) | 7].into_iter().collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_blob_is_the_portable_format_another_implementation_writes() -> TestResult {
    let blob = encode(&positions())?;
    assert_eq!(hex(&blob), PYROARING_BLOB);
    assert_eq!(decode(&blob, "golden")?, positions());
    Ok(())
}

#[test]
fn encode_and_decode_round_trip() -> TestResult {
    for set in [RoaringTreemap::new(), (0..100_000u64).step_by(3).collect(), [u32::MAX as u64, 1 << 40].into_iter().collect()] {
        assert_eq!(decode(&encode(&set)?, "roundtrip")?, set);
    }
    Ok(())
}

#[test]
fn damaged_blobs_are_refused_naming_what_is_wrong() -> TestResult {
    let blob = encode(&positions())?;
    let mut crc = blob.clone();
    *crc.last_mut().ok_or("empty")? ^= 1;
    let mut magic = blob.clone();
    magic[4] = 0;
    let mut length = blob.clone();
    length[3] += 1;
    for (damaged, says) in [(crc, "CRC-32"), (magic, "magic"), (length, "length field"), (blob[..6].to_vec(), "shorter")] {
        let err = decode(&damaged, "x.puffin").expect_err(says).to_string();
        assert!(err.contains(says) && err.contains("x.puffin"), "{err}");
    }
    Ok(())
}

#[test]
fn positions_past_what_readers_hold_are_refused() {
    let err = bitmap_of([-1i64], "f.parquet").unwrap_err().to_string();
    assert!(err.contains("f.parquet"), "{err}");
    assert!(encode(&[1u64 << 63].into_iter().collect()).is_err());
    assert!(encode(&[i64::MAX as u64].into_iter().collect()).is_ok());
}

#[tokio::test]
async fn the_puffin_file_holds_the_blob_its_manifest_entry_points_at() -> TestResult {
    let f = LocalTable::new().await;
    let table = f.load().await;
    let target = data_file(&table, "a");
    let dv = write(&table, &target, &positions()).await?;
    assert_eq!(dv.file_format(), DataFileFormat::Puffin);
    assert_eq!(dv.record_count(), 4);
    assert_eq!(dv.referenced_data_file().as_deref(), Some(target.file_path()));
    let input = table.file_io().new_input(dv.file_path())?;
    assert_eq!(input.metadata().await?.size, dv.file_size_in_bytes(), "the size computed without reading the file back");
    // The library's own reader finds the blob where the entry says, with the spec's properties.
    let reader = PuffinReader::new(input);
    let blobs = reader.file_metadata().await?.blobs().to_vec();
    assert_eq!(blobs.len(), 1);
    let meta = &blobs[0];
    assert_eq!(meta.blob_type(), DELETION_VECTOR_V1);
    assert_eq!(
        (meta.offset() as i64, meta.length() as i64),
        (dv.content_offset().ok_or("offset")?, dv.content_size_in_bytes().ok_or("size")?)
    );
    assert_eq!(meta.properties().get(REFERENCED_DATA_FILE).map(String::as_str), Some(target.file_path()));
    assert_eq!(meta.properties().get(CARDINALITY).map(String::as_str), Some("4"));
    assert_eq!((meta.snapshot_id(), meta.sequence_number()), (-1, -1));
    assert_eq!(decode(reader.blob(meta).await?.data(), "blob")?, positions());
    assert_eq!(read(&table, &dv).await?, positions());
    Ok(())
}
