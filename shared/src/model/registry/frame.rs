//! The framing a registry serializer puts in front of a record value: which writer schema
//! wrote it, then the payload.
//!
//! - Confluent: magic byte `0`, the schema id (4 bytes, big-endian); for Protobuf then the
//!   message-index path (zigzag varints: a count, then the indexes; a lone `0` means `[0]`).
//! - AWS Glue Schema Registry: header version `3`, compression (`0` none, `5` zlib), the schema
//!   version id (16-byte UUID); for Protobuf the payload starts with the message's index (an
//!   unsigned varint) among all messages of the schema, nested ones included, sorted by full name.

use std::borrow::Cow;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::varint::{self, VarintError};
use crate::model::schema::Format;

/// Which writer schema a record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriterId {
    Confluent(u32),
    Glue(uuid::Uuid),
}

impl WriterId {
    /// An id as the event source mapping writes it in `valueSchemaMetadata.schemaId`: a number
    /// (Confluent) or a UUID (a Glue schema version).
    pub fn parse(id: &str) -> Option<WriterId> {
        let id = id.trim();
        id.parse::<u32>().ok().map(WriterId::Confluent).or_else(|| uuid::Uuid::parse_str(id).ok().map(WriterId::Glue))
    }
}

impl std::fmt::Display for WriterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriterId::Confluent(id) => write!(f, "schema id {id}"),
            WriterId::Glue(id) => write!(f, "schema version {id}"),
        }
    }
}

/// Which message of a Protobuf schema the payload is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MessageIndex {
    /// Confluent: indexes from the file's top-level messages down through nested ones.
    Path(Vec<i32>),
    /// Glue: position among all messages, sorted by full name.
    Sorted(u32),
}

/// A framed value: the writer schema, the message (Protobuf), and the payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    pub writer: WriterId,
    pub message: Option<MessageIndex>,
    pub payload: Cow<'a, [u8]>,
}

/// Glue compression byte values.
const GLUE_NONE: u8 = 0;
const GLUE_ZLIB: u8 = 5;
const GLUE_HEADER_VERSION: u8 = 3;
/// A decompressed payload larger than this is refused (a 6 MB event cannot hold a sane one).
const MAX_INFLATED: u64 = 64 << 20;
/// What the zlib payloads of one batch may inflate to in all: a 6 MB event of ~90 records of
/// 64 MiB each would otherwise hold gigabytes. Records past it are dead letters.
pub const BATCH_INFLATED: u64 = 256 << 20;

/// The longest LEB128 varint of a `u64`: all a Protobuf message index can take.
const VARINT_MAX_LEN: usize = 10;

/// What is left of one batch's inflation budget ([`BATCH_INFLATED`]).
#[derive(Debug)]
pub struct InflateBudget(AtomicU64);

impl InflateBudget {
    pub fn new(bytes: u64) -> Self {
        Self(AtomicU64::new(bytes))
    }

    /// A batch's budget.
    pub fn per_batch() -> Self {
        Self::new(BATCH_INFLATED)
    }
}

/// The writer a Confluent frame names, and the bytes after its schema id.
fn confluent_header(value: &[u8]) -> Result<(WriterId, &[u8]), String> {
    let (&magic, rest) = value.split_first().ok_or("empty value: no Confluent schema-registry frame")?;
    if magic != 0 {
        return Err(format!("not Confluent schema-registry framed: first byte is {magic}, expected 0"));
    }
    let (id, rest) = rest.split_first_chunk::<4>().ok_or("Confluent frame cut short: fewer than 4 schema-id bytes")?;
    Ok((WriterId::Confluent(u32::from_be_bytes(*id)), rest))
}

/// The writer a Glue frame names, its compression byte, and the (compressed) payload.
fn glue_header(value: &[u8]) -> Result<(WriterId, u8, &[u8]), String> {
    let [version, compression, rest @ ..] = value else {
        return Err("value too short for a Glue schema-registry frame".into());
    };
    if *version != GLUE_HEADER_VERSION {
        return Err(format!("not Glue schema-registry framed: header version byte is {version}, expected {GLUE_HEADER_VERSION}"));
    }
    let (id, rest) = rest.split_first_chunk::<16>().ok_or("Glue frame cut short: fewer than 16 schema-version-id bytes")?;
    Ok((WriterId::Glue(uuid::Uuid::from_bytes(*id)), *compression, rest))
}

/// For a value a pipeline without `registry` could not decode: the registry frame it starts
/// with, as a sentence saying what to set, when it looks framed (the reason a registry
/// serializer's records are dead letters is then the frame, not the field the bytes hit).
pub fn unexpected_frame_hint(value: &[u8]) -> Option<String> {
    match value {
        [0, id @ .., _] if id.len() >= 4 => {
            let id = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
            Some(format!(
                "the value starts like a Confluent schema-registry frame (magic byte 0, schema id {id}): if a registry serializer wrote it, set `registry = \"confluent\"` (and `registry_url`) on the pipeline"
            ))
        }
        [GLUE_HEADER_VERSION, GLUE_NONE | GLUE_ZLIB, rest @ ..] if rest.len() >= 16 => {
            let id = uuid::Uuid::from_slice(&rest[..16]).ok()?;
            Some(format!(
                "the value starts like a Glue schema-registry frame (schema version {id}): if a registry serializer wrote it, set `registry = \"glue\"` on the pipeline"
            ))
        }
        _ => None,
    }
}

/// The writer `value`'s frame names, from its header alone (nothing inflated): enough to plan a
/// batch's writers whose records carry no message index (Avro, JSON Schema).
pub fn writer(value: &[u8], glue: bool) -> Result<WriterId, String> {
    if glue { glue_header(value).map(|(w, _, _)| w) } else { confluent_header(value).map(|(w, _)| w) }
}

/// Reads the Confluent frame of `value`; `format` says whether message indexes follow.
pub fn confluent(value: &[u8], format: Format) -> Result<Frame<'_>, String> {
    let (writer, mut rest) = confluent_header(value)?;
    let message = if format == Format::Protobuf {
        let count = zigzag(read_varint(&mut rest)?);
        if !(0..=64).contains(&count) {
            return Err(format!("Confluent protobuf frame: {count} message indexes"));
        }
        let path = if count == 0 { vec![0] } else { (0..count).map(|_| read_varint(&mut rest).map(zigzag)).collect::<Result<_, _>>()? };
        let path: Vec<i32> =
            path.into_iter().map(|i| i32::try_from(i).map_err(|_| format!("message index {i} out of range"))).collect::<Result<_, _>>()?;
        Some(MessageIndex::Path(path))
    } else {
        None
    };
    Ok(Frame { writer, message, payload: Cow::Borrowed(rest) })
}

/// Reads the Glue frame of `value`, inflating a zlib payload (one record's bound only).
pub fn glue(value: &[u8], format: Format) -> Result<Frame<'_>, String> {
    glue_within(value, format, &InflateBudget::new(u64::MAX))
}

/// [`glue`], the inflated bytes taken from `budget` (a batch's): a payload that would inflate
/// past what is left is refused.
pub fn glue_within<'a>(value: &'a [u8], format: Format, budget: &InflateBudget) -> Result<Frame<'a>, String> {
    let (writer, compression, rest) = glue_header(value)?;
    let mut payload = match compression {
        GLUE_NONE => Cow::Borrowed(rest),
        GLUE_ZLIB => {
            let left = budget.0.load(Ordering::Relaxed);
            let limit = MAX_INFLATED.min(left);
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(rest)
                .take(limit + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("Glue frame: zlib payload does not inflate: {e}"))?;
            if out.len() as u64 > limit {
                return Err(if limit < MAX_INFLATED {
                    format!("Glue frame: payload inflates past the {left} bytes left of the batch's {BATCH_INFLATED}-byte inflation budget")
                } else {
                    format!("Glue frame: payload inflates past {MAX_INFLATED} bytes")
                });
            }
            budget.0.fetch_sub(out.len() as u64, Ordering::Relaxed);
            Cow::Owned(out)
        }
        other => return Err(format!("Glue frame: unknown compression byte {other} (0 none, 5 zlib)")),
    };
    let message = if format == Format::Protobuf {
        let mut bytes: &[u8] = &payload;
        let index = read_varint(&mut bytes)?;
        let index = u32::try_from(index).map_err(|_| format!("Glue protobuf frame: message index {index} out of range"))?;
        let consumed = payload.len() - bytes.len();
        payload = match payload {
            Cow::Borrowed(b) => Cow::Borrowed(&b[consumed..]),
            Cow::Owned(mut v) => {
                v.drain(..consumed);
                Cow::Owned(v)
            }
        };
        Some(MessageIndex::Sorted(index))
    } else {
        None
    };
    Ok(Frame { writer, message, payload })
}

/// The writer and message a Glue frame names, inflating no more of a zlib payload than its
/// Protobuf message index (planning a batch needs only these; the payload is inflated once,
/// when it is decoded).
pub fn glue_key(value: &[u8], format: Format) -> Result<(WriterId, Option<MessageIndex>), String> {
    let (writer, compression, rest) = glue_header(value)?;
    if format != Format::Protobuf {
        return Ok((writer, None));
    }
    let head = match compression {
        GLUE_NONE => Cow::Borrowed(rest),
        GLUE_ZLIB => {
            let mut out = Vec::with_capacity(VARINT_MAX_LEN);
            flate2::read::ZlibDecoder::new(rest)
                .take(VARINT_MAX_LEN as u64)
                .read_to_end(&mut out)
                .map_err(|e| format!("Glue frame: zlib payload does not inflate: {e}"))?;
            Cow::Owned(out)
        }
        other => return Err(format!("Glue frame: unknown compression byte {other} (0 none, 5 zlib)")),
    };
    let index = read_varint(&mut &head[..])?;
    let index = u32::try_from(index).map_err(|_| format!("Glue protobuf frame: message index {index} out of range"))?;
    Ok((writer, Some(MessageIndex::Sorted(index))))
}

/// An unsigned LEB128 varint (at most 10 bytes), advancing `input`.
fn read_varint(input: &mut &[u8]) -> Result<u64, String> {
    varint::read(input).map_err(|e| match e {
        VarintError::Truncated => "frame cut short inside a varint".into(),
        VarintError::TooLong => "frame has a varint longer than 10 bytes".into(),
    })
}

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Issue 46: a framed value in a pipeline without `registry` said "expected a UUID".
    #[test]
    fn a_frame_where_no_registry_is_set_is_named() {
        let hint = unexpected_frame_hint(&[0, 0, 0, 1, 2, b'{', b'}']).unwrap();
        assert!(
            hint.contains("Confluent schema-registry frame (magic byte 0, schema id 258)") && hint.contains("registry = \"confluent\""),
            "{hint}"
        );
        let mut glue = vec![3, 0];
        glue.extend_from_slice(uuid::Uuid::nil().as_bytes());
        glue.push(7);
        assert!(unexpected_frame_hint(&glue).unwrap().contains("registry = \"glue\""));
        assert_eq!(unexpected_frame_hint(br#"{"id": 1}"#), None);
        assert_eq!(unexpected_frame_hint(&[0, 1]), None, "too short to hold a schema id and a payload");
    }

    #[test]
    fn confluent_avro_and_protobuf_frames() {
        let f = confluent(&[0, 0, 0, 1, 2, 9, 9], Format::Avro).unwrap();
        assert_eq!(f.writer, WriterId::Confluent(258));
        assert_eq!(&*f.payload, &[9, 9]);
        assert_eq!(f.message, None);
        // A lone 0: the first message.
        let f = confluent(&[0, 0, 0, 0, 7, 0, 8], Format::Protobuf).unwrap();
        assert_eq!(f.message, Some(MessageIndex::Path(vec![0])));
        assert_eq!(&*f.payload, &[8]);
        // Two indexes [1, 2]: count 2 → zigzag 4; 1 → 2; 2 → 4.
        let f = confluent(&[0, 0, 0, 0, 7, 4, 2, 4, 8], Format::Protobuf).unwrap();
        assert_eq!(f.message, Some(MessageIndex::Path(vec![1, 2])));
        assert_eq!(&*f.payload, &[8]);
    }

    #[test]
    fn glue_frames_plain_and_zlib() {
        let id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let mut value = vec![3, 0];
        value.extend_from_slice(id.as_bytes());
        value.extend_from_slice(b"payload");
        let f = glue(&value, Format::Json).unwrap();
        assert_eq!((f.writer, &*f.payload), (WriterId::Glue(id), &b"payload"[..]));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&[2, 8, 1]).unwrap();
        let mut value = vec![3, 5];
        value.extend_from_slice(id.as_bytes());
        value.extend_from_slice(&z.finish().unwrap());
        let f = glue(&value, Format::Protobuf).unwrap();
        assert_eq!(f.message, Some(MessageIndex::Sorted(2)));
        assert_eq!(&*f.payload, &[8, 1]);
        // The header alone names the writer, without inflating the payload: a cut zlib stream
        // still names it (reading the record then says what is wrong).
        assert_eq!(writer(&value, true).unwrap(), WriterId::Glue(id));
        let cut = &value[..value.len() - 3];
        assert_eq!(writer(cut, true).unwrap(), WriterId::Glue(id));
        assert!(glue(cut, Format::Avro).unwrap_err().contains("does not inflate"));
        assert_eq!(writer(&[0, 0, 0, 1, 2, 9], false).unwrap(), WriterId::Confluent(258));
        assert!(writer(&value, false).unwrap_err().contains("first byte is 3"));
    }

    /// A Glue zlib frame of `inflated` zero bytes after the Protobuf message index 2.
    fn zlib_frame(inflated: usize) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&[2]).unwrap();
        z.write_all(&vec![0; inflated]).unwrap();
        let mut value = vec![3, 5];
        value.extend_from_slice(uuid::Uuid::nil().as_bytes());
        value.extend_from_slice(&z.finish().unwrap());
        value
    }

    /// A batch's payloads inflate within one budget: past it a record is refused, saying so;
    /// the record before it took what it inflated.
    #[test]
    fn a_batch_inflates_within_its_budget() {
        let budget = InflateBudget::new(5 << 20);
        let value = zlib_frame(2 << 20);
        for _ in 0..2 {
            assert_eq!(glue_within(&value, Format::Protobuf, &budget).unwrap().payload.len(), 2 << 20);
        }
        let err = glue_within(&value, Format::Protobuf, &budget).unwrap_err();
        assert!(err.contains("inflation budget"), "{err}");
        // A small one still fits what is left.
        assert!(glue_within(&zlib_frame(1000), Format::Protobuf, &budget).is_ok());
    }

    /// Planning reads the message index only: a payload cut after it still names its writer
    /// and message, where the full read says it does not inflate.
    #[test]
    fn the_key_inflates_no_more_than_the_message_index() {
        let value = zlib_frame(1 << 20);
        assert_eq!(glue_key(&value, Format::Protobuf).unwrap(), (WriterId::Glue(uuid::Uuid::nil()), Some(MessageIndex::Sorted(2))));
        let cut = &value[..value.len() - 3];
        assert_eq!(glue_key(cut, Format::Protobuf).unwrap().1, Some(MessageIndex::Sorted(2)));
        assert!(glue(cut, Format::Protobuf).unwrap_err().contains("does not inflate"));
        assert_eq!(glue_key(cut, Format::Avro).unwrap(), (WriterId::Glue(uuid::Uuid::nil()), None));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            for format in [Format::Avro, Format::Protobuf, Format::Json] {
                if let Ok(frame) = confluent(&bytes, format) {
                    proptest::prop_assert!(frame.payload.len() + 5 <= bytes.len());
                }
                let _ = glue(&bytes, format);
            }
        }
    }

    #[test]
    fn malformed_frames_say_what_is_wrong() {
        assert!(confluent(&[], Format::Avro).unwrap_err().contains("empty"));
        assert!(confluent(&[1, 0, 0, 0, 1], Format::Avro).unwrap_err().contains("first byte is 1"));
        assert!(confluent(&[0, 0, 1], Format::Avro).unwrap_err().contains("cut short"));
        assert!(confluent(&[0, 0, 0, 0, 1, 0xff], Format::Protobuf).unwrap_err().contains("varint"));
        assert!(glue(&[3], Format::Avro).unwrap_err().contains("too short"));
        assert!(glue(&[2, 0, 1], Format::Avro).unwrap_err().contains("header version byte is 2"));
        let mut v = vec![3, 9];
        v.extend_from_slice(&[0; 16]);
        assert!(glue(&v, Format::Avro).unwrap_err().contains("compression byte 9"));
        let mut v = vec![3, 5];
        v.extend_from_slice(&[0; 16]);
        v.extend_from_slice(b"not zlib");
        assert!(glue(&v, Format::Avro).unwrap_err().contains("inflate"));
    }
}
