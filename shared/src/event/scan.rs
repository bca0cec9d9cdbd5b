//! The fast path of [`super::parse_event`]: the event as the event source mapping writes it
//! (compact JSON, strings without escapes, plain integers), read in one forward scan straight
//! into the records. Anything else (white space, an escape, a fraction or exponent, a field of an
//! unexpected type, a duplicate field, `valueSchemaMetadata`, a value serde would refuse) makes
//! it return `None`, and the whole event goes to the serde path, which reads it or names what is
//! wrong. So an event gives the same records, or the same error, either way: unit tests,
//! property tests and `make fuzz` check the two against each other.
//!
//! Why not serde alone: its generic visitors cost ~9k instructions a record of this shape, a
//! header's 13 signed bytes (`[105,99,...]`, one JSON number each) 3.9k of them (callgrind); SIMD
//! parsers through serde (sonic-rs) or their tape (simd-json) measured slower still on this text.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{Arena, Filing, Headers, KafkaEvent, RawRecord, Records, Text};

/// The event, when it is in the mapping's own form; `None` sends it to the serde path.
pub(super) fn scan_event(text: &str) -> Option<KafkaEvent> {
    // A control character is white space between tokens or serde's error to name in a string:
    // either way not the mapping's form. The scan takes only its own tokens between strings,
    // and a string ends at its first control character (`string_end`), so any refuses the text.
    let mut c = Cursor { text, i: 0 };
    let mut event = KafkaEvent::default();
    let mut seen = [false; 4];
    c.object_of(&EVENT_FIELDS, &mut FieldOrder::new(), |c, name| {
        // An unknown field at the top: serde's to name or ignore.
        let Name::Known(field) = name else { return None };
        if std::mem::replace(&mut seen[field], true) {
            return None;
        }
        match field {
            0 => event.event_source = c.nullable_string()?.map(str::to_owned),
            1 => event.event_source_arn = c.nullable_string()?.map(str::to_owned),
            2 => event.bootstrap_servers = c.nullable_string()?.map(str::to_owned),
            _ => event.records = if c.null() { None } else { Some(records(c)?) },
        }
        Some(())
    })?;
    (c.i == text.len()).then_some(event)
}

/// `{"topic-partition": [record, ...], ...}`, each group filed as the serde path files it.
fn records(c: &mut Cursor) -> Option<Records> {
    let (mut out, mut arena, mut order, mut last) = (BTreeMap::new(), Arena::new(), FieldOrder::new(), Repeats::default());
    c.object(|c, key| {
        let mut filing = Filing::new(key, &mut out, &mut arena);
        // A record the filing refuses (partition out of range, no topic): serde names it.
        c.array(|c| {
            let raw = record(c, filing.arena, &mut order, &mut last)?;
            filing.push(raw).ok()
        })?;
        filing.finish();
        Some(())
    })?;
    Some(Records(out))
}

fn record<'a>(c: &mut Cursor<'a>, arena: &mut Arena, order: &mut FieldOrder<9>, last: &mut Repeats<'a>) -> Option<RawRecord<'a>> {
    let (mut topic, mut partition, mut offset, mut timestamp) = (None, None, None, None);
    let (mut key, mut value, mut headers) = (None, None, None);
    c.object_of(&RECORD_FIELDS, order, |c, name| match name {
        Name::Known(field::TOPIC) => once(&mut topic, c.repeated(&mut last.topic, Cursor::nullable_string)?),
        Name::Known(field::PARTITION) => once(&mut partition, c.integer()?),
        Name::Known(field::OFFSET) => once(&mut offset, c.integer()?),
        Name::Known(field::TIMESTAMP) => once(&mut timestamp, c.integer()?),
        Name::Known(field::KEY) => once(&mut key, c.nullable_string()?),
        Name::Known(field::VALUE) => once(&mut value, c.nullable_string()?),
        Name::Known(field::HEADERS) => once(&mut headers, c.repeated(&mut last.headers, |c| header_list(c, arena))?),
        Name::Known(field::VALUE_SCHEMA_METADATA) => None,
        // `timestampType` and whatever else the mapping adds: ignored, as serde ignores them.
        // (A string only: an integer's reading looks one byte past it, so its text cannot repeat.)
        Name::Known(field::TIMESTAMP_TYPE) if c.rest().first() == Some(&b'"') => c.repeated(&mut last.timestamp_type, Cursor::string).map(drop),
        _ => c.scalar(),
    })?;
    let text = |s: Option<Option<&'a str>>| s.flatten().map(|s| Text(Cow::Borrowed(s)));
    Some(RawRecord {
        topic: text(topic),
        partition: partition?,
        offset: offset?,
        timestamp: timestamp?,
        key: text(key),
        value: text(value),
        headers: headers.unwrap_or_default(),
        value_schema_metadata: None,
    })
}

/// What the last record held in the fields that usually repeat from one record to the next (a
/// producer stamps every record with the same headers; a group's records share a topic), read
/// through [`Cursor::repeated`]. The reference events' one header (13 signed bytes) was 1.4k
/// instructions a record to read (callgrind).
#[derive(Default)]
struct Repeats<'a> {
    topic: Option<Last<'a, Option<&'a str>>>,
    timestamp_type: Option<Last<'a, &'a str>>,
    headers: Option<Last<'a, Headers>>,
}

/// The text of a field's last value, and what it read to.
struct Last<'a, T> {
    text: &'a [u8],
    value: T,
}

/// `[{"name": [signed bytes], ...}, ...]`, the whole list one field of the arena.
fn header_list(c: &mut Cursor, arena: &mut Arena) -> Option<Headers> {
    let listed = c.array(|c| {
        c.object(|c, name| {
            let at = arena.begin_header(name);
            c.array(|c| {
                arena.push(c.signed_byte()?);
                Some(())
            })?;
            arena.end_header(at);
            Some(())
        })
    });
    // Taken either way: a list the scan refuses leaves nothing behind for the next field.
    let list = arena.take_headers();
    listed.map(|()| Headers::from_encoded(list))
}

/// The position of the first `"`, `\` or control character (below 0x20) in `bytes`: where a
/// string without escapes ends, or is not one. The event's strings are short (field names, a
/// topic, base64 of tens of bytes), where `memchr2`'s dispatch and set-up cost more than the
/// search (~53 instructions a call, half of the string's cost): compared a word at a time, the
/// bytes equal to either found with the carry trick of `has_zero_byte`, the bytes below 0x20
/// with its `has_less` form. A false mark only follows a true one (the borrow runs upwards, to
/// later bytes), so the lowest mark is exact. Finding control characters here, in the strings,
/// replaced a pass over the whole text (61 instructions a reference record, callgrind).
fn string_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    let less_than = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGHS;
    let mut at = 0;
    while let Some(word) = bytes[at..].first_chunk::<8>() {
        let word = u64::from_le_bytes(*word);
        let marks = less_than(word ^ (ONES * u64::from(b'"')), 1) | less_than(word ^ (ONES * u64::from(b'\\')), 1) | less_than(word, 0x20);
        if marks != 0 {
            return Some(at + marks.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    bytes[at..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).map(|p| at + p)
}

/// Whether `text` starts with `prefix`, compared 8 bytes at a time (the last 8 overlapping the
/// ones before). What is compared here (a field name, the last topic or header list) is short,
/// where `<[u8]>::starts_with` spends ~20 instructions calling `memcmp` before comparing a byte.
#[inline]
fn starts_with(text: &[u8], prefix: &[u8]) -> bool {
    let n = prefix.len();
    let Some(text) = text.get(..n) else { return false };
    if n < 4 {
        return text.iter().zip(prefix).all(|(a, b)| a == b);
    }
    // Differences of whole words OR-ed together, with one overlapping word (or two halves)
    // for the end: no branch per word.
    let w4 = |s: &[u8]| s.first_chunk().map_or(0, |w| u32::from_le_bytes(*w));
    let w8 = |s: &[u8]| s.first_chunk().map_or(0, |w| u64::from_le_bytes(*w));
    if n < 8 {
        return (w4(text) ^ w4(prefix)) | (w4(&text[n - 4..]) ^ w4(&prefix[n - 4..])) == 0;
    }
    let words = text.chunks_exact(8).zip(prefix.chunks_exact(8)).fold(0, |d, (a, b)| d | (w8(a) ^ w8(b)));
    words | (w8(&text[n - 8..]) ^ w8(&prefix[n - 8..])) == 0
}

/// The event's fields, each as it is written before its value.
const EVENT_FIELDS: [&[u8]; 4] = [br#""eventSource":"#, br#""eventSourceArn":"#, br#""bootstrapServers":"#, br#""records":"#];

/// A record's fields, in the order AWS documents them (their indices in [`field`]).
const RECORD_FIELDS: [&[u8]; 9] = [
    br#""topic":"#,
    br#""partition":"#,
    br#""offset":"#,
    br#""timestamp":"#,
    br#""timestampType":"#,
    br#""key":"#,
    br#""value":"#,
    br#""headers":"#,
    br#""valueSchemaMetadata":"#,
];

/// The index of each of [`RECORD_FIELDS`].
mod field {
    pub const TOPIC: usize = 0;
    pub const PARTITION: usize = 1;
    pub const OFFSET: usize = 2;
    pub const TIMESTAMP: usize = 3;
    pub const TIMESTAMP_TYPE: usize = 4;
    pub const KEY: usize = 5;
    pub const VALUE: usize = 6;
    pub const HEADERS: usize = 7;
    pub const VALUE_SCHEMA_METADATA: usize = 8;
}

/// Which known name came first in the last object read, and which followed each: an event
/// lists every record's fields in one order (AWS's, or sorted as the esm and the generator
/// write them), so from the second record on each name is found at the first comparison.
struct FieldOrder<const N: usize> {
    first: usize,
    after: [usize; N],
}

impl<const N: usize> FieldOrder<N> {
    /// The order of the list itself until an object shows another.
    fn new() -> Self {
        FieldOrder { first: 0, after: std::array::from_fn(|k| (k + 1) % N) }
    }
}

/// A member's name: the index of one the caller knows, or another (read, not kept).
enum Name {
    Known(usize),
    Other,
}

/// A field seen twice is serde's error to name.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.replace(value).is_none().then_some(())
}

/// A position in the event text.
struct Cursor<'a> {
    text: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.text.as_bytes()[self.i..]
    }

    fn eat(&mut self, byte: u8) -> bool {
        let hit = self.rest().first() == Some(&byte);
        self.i += usize::from(hit);
        hit
    }

    /// `{"name": value, ...}`, `member` reading each value.
    fn object(&mut self, member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.object_named(
            |c| {
                let name = c.string()?;
                c.eat(b':').then_some(name)
            },
            member,
        )
    }

    /// `{"name": value, ...}` whose names are mostly in `known` (each written `"name":`): a known
    /// name is recognised where it stands, trying first the one `order` says came next last
    /// time, so only another name is searched for its closing quote.
    fn object_of<const N: usize>(
        &mut self,
        known: &[&[u8]; N],
        order: &mut FieldOrder<N>,
        mut member: impl FnMut(&mut Self, Name) -> Option<()>,
    ) -> Option<()> {
        let mut last: Option<usize> = None;
        self.object_named(
            |c| {
                let rest = c.rest();
                let guess = last.map_or(order.first, |l| order.after[l]);
                let hit = std::iter::once(guess).chain((0..N).filter(|&k| k != guess)).find(|&k| starts_with(rest, known[k]));
                let Some(k) = hit else {
                    c.string()?;
                    return c.eat(b':').then_some(Name::Other);
                };
                c.i += known[k].len();
                match last {
                    Some(l) => order.after[l] = k,
                    None => order.first = k,
                }
                last = Some(k);
                Some(Name::Known(k))
            },
            &mut member,
        )
    }

    /// `{name value, ...}`: `name` reads a member's name and its colon, `member` its value.
    fn object_named<N>(&mut self, mut name: impl FnMut(&mut Self) -> Option<N>, mut member: impl FnMut(&mut Self, N) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let name = name(self)?;
            member(self, name)?;
            if !self.eat(b',') {
                return self.eat(b'}').then_some(());
            }
        }
    }

    /// `[element, ...]`, `element` reading each.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(());
        }
        loop {
            element(self)?;
            if !self.eat(b',') {
                return self.eat(b']').then_some(());
            }
        }
    }

    /// A string without escapes or control characters, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        if !self.eat(b'"') {
            return None;
        }
        // Ended by its first quote; a backslash (an escape) or a control character is serde's.
        let len = string_end(self.rest())?;
        if self.rest()[len] != b'"' {
            return None;
        }
        // Both ends are ASCII quotes, so both are char boundaries.
        let s = &self.text[self.i..self.i + len];
        self.i += len + 1;
        Some(s)
    }

    fn null(&mut self) -> bool {
        let hit = self.rest().starts_with(b"null");
        self.i += if hit { 4 } else { 0 };
        hit
    }

    fn nullable_string(&mut self) -> Option<Option<&'a str>> {
        if self.null() { Some(None) } else { self.string().map(Some) }
    }

    /// The value `read` reads here, or `last`'s when the text here starts with `last`'s: a value
    /// whose reading ends at its closing `"`, `]` or `null` and looks at no byte past it reads
    /// the same text to the same value, so a repeat is compared whole, not read again (a
    /// repeated header list shares the last one's bytes). A value `read` refuses is not kept.
    fn repeated<T: Clone>(&mut self, last: &mut Option<Last<'a, T>>, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        if let Some(last) = last.as_ref()
            && starts_with(self.rest(), last.text)
        {
            self.i += last.text.len();
            return Some(last.value.clone());
        }
        let start = self.i;
        let value = read(self)?;
        *last = Some(Last { text: &self.text.as_bytes()[start..self.i], value: value.clone() });
        Some(value)
    }

    /// A JSON integer in the i64 range: no fraction, exponent, leading zero or `-0`.
    fn integer(&mut self) -> Option<i64> {
        let rest = self.rest();
        let sign = usize::from(rest.first() == Some(&b'-'));
        // Up to 19 digits: that many cannot overflow a u64.
        let (mut digits, mut magnitude) = (0, 0u64);
        while let Some(d) = rest.get(sign + digits).map(|b| b.wrapping_sub(b'0')).filter(|d| *d <= 9) {
            if digits == 19 {
                return None;
            }
            magnitude = magnitude * 10 + u64::from(d);
            digits += 1;
        }
        let leading_zero = digits > 1 && rest[sign] == b'0';
        if digits == 0 || leading_zero || matches!(rest.get(sign + digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let value = match sign {
            0 => i64::try_from(magnitude).ok()?,
            _ if magnitude == 0 || magnitude > i64::MIN.unsigned_abs() => return None,
            _ => 0i64.wrapping_sub_unsigned(magnitude),
        };
        self.i += sign + digits;
        Some(value)
    }

    /// A header byte: what [`Self::integer`] reads, from -128 to 127, as its two's complement.
    /// Headers are most of an event's integers (one per byte), and at most three digits make
    /// a shorter loop than the general one.
    fn signed_byte(&mut self) -> Option<u8> {
        let rest = self.rest();
        let sign = usize::from(rest.first() == Some(&b'-'));
        let digit = |at: usize| rest.get(sign + at).map(|b| b.wrapping_sub(b'0')).filter(|d| *d <= 9);
        let (mut magnitude, mut digits) = (i16::from(digit(0)?), 1);
        // No digit after a leading zero; a fourth digit is out of range either way.
        while magnitude != 0 && digits < 3 {
            let Some(d) = digit(digits) else { break };
            magnitude = magnitude * 10 + i16::from(d);
            digits += 1;
        }
        if digit(digits).is_some() || matches!(rest.get(sign + digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let value = match sign {
            0 => magnitude,
            _ if magnitude == 0 => return None,
            _ => -magnitude,
        };
        let byte = i8::try_from(value).ok()?;
        self.i += sign + digits;
        Some(byte as u8)
    }

    /// A string, integer or null, skipped.
    fn scalar(&mut self) -> Option<()> {
        match self.rest().first()? {
            b'"' => self.string().map(drop),
            b'n' => self.null().then_some(()),
            _ => self.integer().map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{event_json, parse_event, parse_event_with_serde};
    use super::*;
    use crate::event::{KafkaRecordIn, TopicPartition};
    use bytes::Bytes;

    /// The scan's reading of `text`, checked against serde's: `Some` only with the same records.
    fn scanned(text: &str) -> Option<crate::event::ParsedEvent> {
        let event = scan_event(text)?;
        let scanned = crate::event::from_kafka_event(event).unwrap();
        let serde = parse_event_with_serde(text.as_bytes()).unwrap();
        assert_eq!((&scanned.event_source, &scanned.partitions), (&serde.event_source, &serde.partitions), "{text}");
        Some(scanned)
    }

    /// AWS's example MSK event (Lambda developer guide, "Using Lambda with Amazon MSK").
    const AWS_EXAMPLE: &str = r#"{"eventSource":"aws:kafka","eventSourceArn":"arn:aws:kafka:us-east-1:123456789012:cluster/vpc-2priv-2pub/751d2973-a626-431c-9d4e-d7975eb44dd7-2","bootstrapServers":"b-2.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092,b-1.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092","records":{"mytopic-0":[{"topic":"mytopic","partition":0,"offset":15,"timestamp":1545084650987,"timestampType":"CREATE_TIME","key":"abcDEFghiJKLmnoPQRstuVWXyz1234==","value":"SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==","headers":[{"headerKey":[104,101,97,100,101,114,86,97,108,117,101]}]}]}}"#;

    #[test]
    fn the_mappings_own_events_take_the_scan() {
        let parsed = scanned(AWS_EXAMPLE).expect("AWS's example is in the mapping's form");
        let r = &parsed.partitions[&TopicPartition { topic: "mytopic".into(), partition: 0 }][0];
        assert_eq!(r.headers, Headers::from_iter([("headerKey", b"headerValue")]));
        assert_eq!(r.value.as_deref(), Some(&b"Hello, this is a test."[..]));
        // What the generator and the esm render (keys sorted, nulls, empty lists, negative bytes).
        let text = r#"{"bootstrapServers":null,"eventSource":"SelfManagedKafka","records":{"a-b-3":[{"headers":[],"key":null,"offset":-5,"partition":3,"timestamp":0,"value":"%%"},{"headers":[{"h":[-128,0,127]},{"h":[]}],"offset":9223372036854775807,"partition":3,"timestamp":-9223372036854775808,"topic":"a-b"}],"x-1":[]}}"#;
        let parsed = scanned(text).expect("a rendered event takes the scan");
        let rs = &parsed.partitions[&TopicPartition { topic: "a-b".into(), partition: 3 }];
        assert!(rs[0].value_error.as_deref().is_some_and(|e| e.contains("not base64")), "{rs:?}");
        assert_eq!(rs[1].headers, Headers::from_iter([("h", &[128, 0, 127][..]), ("h", &[])]));
    }

    #[test]
    fn records_whose_fields_change_order_read_as_serde_reads_them() -> Result<(), String> {
        // AWS's order, then sorted (the esm's), then shuffled with fields the scan ignores
        // among them, and a name that only starts like a known one: each record read right
        // whatever the order the one before it taught.
        let records = [
            r#"{"topic":"t","partition":0,"offset":1,"timestamp":5,"timestampType":"CREATE_TIME","key":"YQ==","value":"Yg==","headers":[]}"#,
            r#"{"headers":[{"h":[1]}],"key":null,"offset":2,"partition":0,"timestamp":6,"timestampType":"LOG_APPEND_TIME","topic":"t","value":"Yw=="}"#,
            r#"{"value":"ZA==","extra":7,"offset":3,"timestampTypeX":"x","topic":"t","timestamp":7,"partition":0,"key":"ZQ==","headers":[]}"#,
            r#"{"offset":4,"partition":0,"timestamp":8,"topic":"t"}"#,
            r#"{"topic":"t","partition":0,"offset":5,"timestamp":9,"timestampType":"CREATE_TIME","key":"YQ==","value":"Yg==","headers":[]}"#,
        ];
        let text = format!(r#"{{"eventSource":"aws:kafka","records":{{"t-0":[{}]}}}}"#, records.join(","));
        let parsed = scanned(&text).ok_or("every record is in the mapping's form")?;
        let rs = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }];
        assert_eq!(rs.iter().map(|r| r.offset).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert_eq!(rs[2].value.as_deref(), Some(&b"d"[..]));
        assert_eq!(rs[2].key.as_deref(), Some(&b"e"[..]));
        assert_eq!(rs[3].value, None);
        // A known field twice is still serde's to name, in any order.
        let twice = text.replace(r#""offset":4,"#, r#""offset":4,"topic":"t","#);
        assert!(scan_event(&twice).is_none());
        Ok(())
    }

    #[test]
    fn a_repeated_header_list_is_shared_and_reads_as_serde_reads_it() -> Result<(), String> {
        // The same list twice, then lists that start like it (a longer value, another header
        // after it), an empty one, a refused one in between (serde's), and the first again.
        let lists = [
            r#"[{"p":[105,99]}]"#,
            r#"[{"p":[105,99]}]"#,
            r#"[{"p":[105,99,1]}]"#,
            r#"[{"p":[105,99]},{"q":[]}]"#,
            r#"[]"#,
            r#"[]"#,
            r#"[{"p":[105,99]}]"#,
        ];
        let record = |offset: usize, headers: &str| format!(r#"{{"offset":{offset},"partition":0,"timestamp":1,"topic":"t","headers":{headers}}}"#);
        let text = |lists: &[&str]| {
            let records: Vec<String> = lists.iter().enumerate().map(|(i, h)| record(i, h)).collect();
            format!(r#"{{"eventSource":"aws:kafka","records":{{"t-0":[{}]}}}}"#, records.join(","))
        };
        let parsed = scanned(&text(&lists)).ok_or("every record is in the mapping's form")?;
        let rs = &parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }];
        let value = |i: usize| rs[i].headers.iter().next().map(|(_, v)| v.as_ptr());
        assert_eq!(value(0), value(1), "a repeat shares the list read before it");
        assert_ne!(value(1), value(2));
        assert_ne!(value(0), value(6), "only the last list is remembered");
        assert_eq!(rs[3].headers, Headers::from_iter([("p", &[105, 99][..]), ("q", &[])]));
        assert!(rs[4].headers.is_empty() && rs[5].headers.is_empty());
        // A list the scan refuses is not remembered: the event goes to serde, which names it.
        let refused = text(&[lists[0], r#"[{"p":[300]}]"#, r#"[{"p":[300]}]"#]);
        assert!(scan_event(&refused).is_none());
        Ok(())
    }

    #[test]
    fn a_repeated_topic_or_timestamp_type_reads_as_serde_reads_it() -> Result<(), String> {
        // Each field the same as the record before, then one that starts like it, one it
        // starts like, an empty one, null, and (the timestamp type) a number.
        let fields = [("t", r#""CREATE_TIME""#), ("t", r#""CREATE_TIME""#), ("tx", r#""CREATE_TIMEX""#), ("t", r#""CREATE""#),
            ("t", r#""""#), ("t", "null"), ("t", "7"), ("t", r#""CREATE_TIME""#)];
        let records: Vec<String> = fields.iter().enumerate()
            .map(|(i, (topic, kind))| format!(r#"{{"offset":{i},"partition":0,"timestamp":1,"timestampType":{kind},"topic":"{topic}"}}"#))
            .collect();
        let text = format!(r#"{{"eventSource":"aws:kafka","records":{{"t-0":[{}]}}}}"#, records.join(","));
        let parsed = scanned(&text).ok_or("every record is in the mapping's form")?;
        assert_eq!(parsed.partitions[&TopicPartition { topic: "t".into(), partition: 0 }].len(), 7);
        assert_eq!(parsed.partitions[&TopicPartition { topic: "tx".into(), partition: 0 }][0].offset, 2);
        // An empty topic after "t" is the group's; a topic with an escape, or a timestamp type
        // after the one before it that is not a string, goes to serde.
        let empty = text.replace(r#""topic":"tx""#, r#""topic":"""#);
        assert_eq!(scanned(&empty).ok_or("an empty topic takes the scan")?.partitions.len(), 1);
        for (field, other) in [(r#""topic":"tx""#, r#""topic":"t\u0078""#), (r#""timestampType":"CREATE_TIMEX""#, r#""timestampType":{"a":1}"#)] {
            let changed = text.replacen(field, other, 1);
            assert!(changed != text && scan_event(&changed).is_none(), "{changed}");
        }
        Ok(())
    }

    #[test]
    fn anything_else_goes_to_serde_with_the_same_result() {
        let mut serde_only = vec![
            // White space, an escape, a fraction, an exponent, a leading zero, `-0`.
            AWS_EXAMPLE.replace(r#""offset":15,"#, r#""offset": 15,"#),
            // Control characters: white space between tokens, raw inside a key, a value, a
            // header's name, an unknown field's name (serde refuses those in strings).
            AWS_EXAMPLE.replace(r#""offset":15,"#, "\"offset\":15,\n"),
            AWS_EXAMPLE.replace(r#""partition":0,"#, "\"partition\":0\r,"),
            AWS_EXAMPLE.replace("abcDEF", "abc\u{1}DEF"),
            AWS_EXAMPLE.replace("SGVsbG8s", "SGVsbG8s\u{1f}"),
            AWS_EXAMPLE.replace("headerKey", "header\tKey"),
            AWS_EXAMPLE.replace(r#""timestampType""#, "\"timestamp\u{0}Type\""),
            AWS_EXAMPLE.replace(r#""topic":"mytopic""#, r#""topic":"my\u0074opic""#),
            AWS_EXAMPLE.replace("1545084650987", "1545084650987.0"),
            AWS_EXAMPLE.replace("1545084650987", "1.5e12"),
            AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":015"#),
            AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":-0"#),
            // A duplicate field, an unknown top-level field, an object where a scalar is ignored.
            AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":15,"offset":16"#),
            AWS_EXAMPLE.replace(r#""eventSource""#, r#""extra":1,"eventSource""#),
            AWS_EXAMPLE.replace(r#""timestampType":"CREATE_TIME""#, r#""timestampType":{"a":1}"#),
            AWS_EXAMPLE.replace(r#""headers""#, r#""valueSchemaMetadata":{"dataFormat":"AVRO","schemaId":"1"},"headers""#),
            // Values serde refuses: a trailing comma in a header, a partition out of range, no
            // partition, a string partition, trailing text (header bytes out of range or not
            // written as JSON writes an integer: below).
            AWS_EXAMPLE.replace(",117,101]", ",117,101,]"),
            AWS_EXAMPLE.replace(r#""partition":0"#, r#""partition":4294967296"#),
            AWS_EXAMPLE.replace(r#""partition":0,"#, ""),
            AWS_EXAMPLE.replace(r#""partition":0"#, r#""partition":"0""#),
            AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":9223372036854775808"#),
            AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":-9223372036854775809"#),
            AWS_EXAMPLE.replace(r#""offset":15"#, r#""offset":123456789012345678901"#),
            AWS_EXAMPLE.replace(r#""topic":"mytopic""#, "\"topic\":\"my\ttopic\""),
            format!("{AWS_EXAMPLE} "),
            format!("{AWS_EXAMPLE}x"),
        ];
        let header_bytes = ["[300,", "[-129,", "[0104,", "[-0,", "[1.0,", "[,", "[1000,", "[00,", "[+1,", "[--1,", "[1e2,", "[[104],", r#"["h","#];
        serde_only.extend(header_bytes.map(|first| AWS_EXAMPLE.replace("[104,", first)));
        for text in &serde_only {
            assert!(scan_event(text).is_none(), "the scan took {text}");
            let fast = parse_event(text.as_bytes()).map(|p| p.partitions).map_err(|e| e.to_string());
            let serde = parse_event_with_serde(text.as_bytes()).map(|p| p.partitions).map_err(|e| e.to_string());
            assert_eq!(fast, serde, "{text}");
        }
        assert!(parse_event(serde_only[0].as_bytes()).is_ok() && parse_event(serde_only[1].as_bytes()).is_ok());
    }

    fn record_strategy() -> impl proptest::strategy::Strategy<Value = KafkaRecordIn> {
        use proptest::prelude::*;
        let bytes = || proptest::collection::vec(any::<u8>(), 0..24);
        (any::<i64>(), any::<i64>(), proptest::option::of(bytes()), proptest::option::of(bytes()),
         proptest::collection::vec(("[a-z\"\\\\é]{0,4}", bytes()), 0..3))
            .prop_map(|(offset, timestamp_ms, key, value, headers)| KafkaRecordIn {
                offset, timestamp_ms, key: key.map(Bytes::from), value: value.map(Bytes::from), value_error: None,
                headers: Headers::from_iter(headers), value_schema: None,
            })
    }

    #[test]
    fn a_string_ends_at_its_first_quote_backslash_or_control_character() {
        // Every length and position across words, among bytes just above and below each and
        // with the high bit set (what a borrow or a missing `& !v` would mark falsely), with more
        // quotes after the first.
        for len in 0..40 {
            for at in 0..=len {
                for end in [b'"', b'\\', 0x00, b'\t', 0x1f] {
                    let mut bytes: Vec<u8> = (0..len).map(|i| [b'!', b'#', b']', b'[', 0xa2, 0xdc, b'a', b' ', 0x7f][i % 9]).collect();
                    if at < len {
                        bytes[at] = end;
                        bytes.iter_mut().skip(at + 1).step_by(3).for_each(|b| *b = b'"');
                    }
                    let naive = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
                    assert_eq!(string_end(&bytes), naive, "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn starts_with_agrees_with_the_slice_method() {
        // Every prefix length across words, against texts equal to it, one byte off at each
        // position, and shorter or longer.
        let bytes: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..bytes.len() {
            let prefix = &bytes[..n];
            for text_len in [n.saturating_sub(1), n, n + 1] {
                let text = &bytes[..text_len];
                assert_eq!(starts_with(text, prefix), text.starts_with(prefix), "{n} {text_len}");
            }
            for at in 0..n {
                let mut text = bytes.clone();
                text[at] ^= 0x20;
                assert!(!starts_with(&text, prefix), "{n} {at}");
            }
        }
    }

    #[test]
    fn an_integer_reads_as_serde_reads_it_at_every_length() -> Result<(), String> {
        // 1 to 21 digits each way, the i64 limits and past them, leading zeros; at the end of
        // the text, before a comma or a brace, or before a fraction or an exponent.
        let mut numbers: Vec<String> = (1..=21).flat_map(|n| ["9876543210".repeat(3)[..n].to_string(), format!("-{}", &"1234567890".repeat(3)[..n])]).collect();
        numbers.extend(["0", "-0", "00", "01", "-01", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809"].map(String::from));
        for number in &numbers {
            for tail in ["", ",", "}", ",\"offset\":123456789", ".5", "e1", "E1"] {
                let text = format!("{number}{tail}");
                let mut c = Cursor { text: &text, i: 0 };
                let fraction = tail.starts_with(['.', 'e', 'E']);
                let expected = if fraction || number == "-0" { None } else { serde_json::from_str::<i64>(number).ok() };
                if c.integer() != expected {
                    return Err(format!("{text:?}: expected {expected:?}"));
                }
                if expected.is_some() && c.i != number.len() {
                    return Err(format!("{text:?}: stopped at {}", c.i));
                }
            }
        }
        Ok(())
    }

    #[test]
    fn a_header_byte_is_what_the_integer_reads_in_the_i8_range() {
        // Every number from -1000 to 1000 as written, with leading zeros, `-0`, a fraction, an
        // exponent or more digits after it, and bare signs and empty text.
        let mut texts: Vec<String> = (-1000..=1000).map(|n: i32| n.to_string()).collect();
        for n in ["0", "00", "01", "007", "-0", "-00", "-01", "1", "12", "127", "128", "-128", "-129"] {
            texts.push(n.to_string());
            texts.extend(["]", ",", ".5", "e1", "E1", "0", "9"].iter().map(|tail| format!("{n}{tail}")));
        }
        texts.extend(["", "-", "--1", "+1", "a", " 1"].map(String::from));
        for text in &texts {
            let (mut general, mut byte) = (Cursor { text, i: 0 }, Cursor { text, i: 0 });
            let expected = general.integer().and_then(|v| i8::try_from(v).ok()).map(|v| v as u8);
            assert_eq!(byte.signed_byte(), expected, "{text:?}");
            if expected.is_some() {
                assert_eq!(byte.i, general.i, "{text:?}: where the cursor stops");
            }
        }
    }

    proptest::proptest! {
        /// Rendered compactly, any event takes the scan to serde's records; pretty-printed, it
        /// goes to serde, to the same records.
        #[test]
        fn the_scan_reads_what_serde_reads(
            groups in proptest::collection::btree_map(("[a-z.\"é-]{1,8}", 0i32..4), proptest::collection::vec(record_strategy(), 0..4), 0..4),
        ) {
            let partitions = groups.into_iter().map(|((topic, partition), rs)| (TopicPartition { topic, partition }, rs)).collect();
            let json = event_json("aws:kafka", "arn", "b-1:9092", &partitions);
            let compact = json.to_string();
            if !compact.contains('\\') {
                proptest::prop_assert!(scanned(&compact).is_some(), "{}", compact);
            }
            let pretty = serde_json::to_string_pretty(&json).unwrap();
            let fast = parse_event(pretty.as_bytes()).unwrap();
            let via_scan = parse_event(compact.as_bytes()).unwrap();
            proptest::prop_assert_eq!(&fast.partitions, &via_scan.partitions);
        }
    }
}
