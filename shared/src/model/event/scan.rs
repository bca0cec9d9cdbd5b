//! The fast path of [`super::parse_event`]: the event as the event source mapping writes it
//! (strings without escapes, plain integers), read in one forward scan straight into the
//! records; JSON white space between tokens is skipped, so a pretty-printed event or a file
//! ending in a newline reads as fast as the compact form. Anything else (an escape, a fraction
//! or exponent, a field of an unexpected type, a duplicate field, `valueSchemaMetadata`, a value
//! serde would refuse) makes it return `None`, and the whole event goes to the serde path, which
//! reads it or names what is wrong. So an event gives the same records, or the same error, either
//! way: unit tests, property tests and `make fuzz` check the two against each other, white space
//! inserted between every pair of tokens included ([`white_spaced`]).
//!
//! Why not serde alone: its generic visitors cost ~9k instructions a record of this shape, a
//! header's 13 signed bytes (`[105,99,...]`, one JSON number each) 3.9k of them (callgrind); SIMD
//! parsers through serde (sonic-rs) or their tape (simd-json) measured slower still on this text.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{Arena, Filing, Headers, KafkaEvent, RawRecord, Records, Text, TimestampType};

/// The event, when it is in the mapping's own form; `None` sends it to the serde path.
pub(super) fn scan_event(text: &str) -> Option<KafkaEvent> {
    // A control character other than white space between tokens is serde's error to name: the
    // scan skips only JSON's four white space bytes between its tokens, and a string ends at its
    // first control character (`string_end`), so any other refuses the text.
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
    c.white_space();
    (c.i == text.len()).then_some(event)
}

/// `json` (valid JSON) with white space between its tokens: before and after each of `{}[],:`
/// outside its strings and at both ends, `space(n)` giving the n-th run. For the equivalence
/// tests and fuzzing: the scan must take the result exactly when it takes `json`.
pub fn white_spaced<'s>(json: &str, mut space: impl FnMut(usize) -> &'s str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut runs = 0;
    let mut put = |out: &mut String| {
        out.push_str(space(runs));
        runs += 1;
    };
    let (mut in_string, mut escaped) = (false, false);
    put(&mut out);
    for ch in json.chars() {
        let structural = !in_string && matches!(ch, '{' | '}' | '[' | ']' | ',' | ':');
        if structural {
            put(&mut out);
        }
        out.push(ch);
        if structural {
            put(&mut out);
        }
        if in_string {
            (in_string, escaped) = (escaped || ch != '"', !escaped && ch == '\\');
        } else {
            in_string = ch == '"';
        }
    }
    put(&mut out);
    out
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
    let (mut topic, mut partition, mut offset, mut timestamp, mut timestamp_type) = (None, None, None, None, None);
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
        // `timestampType` as serde reads it: a known name, else absent (any other value ignored).
        // (A string only: an integer's reading looks one byte past it, so its text cannot repeat.)
        Name::Known(field::TIMESTAMP_TYPE) if c.rest().first() == Some(&b'"') => {
            once(&mut timestamp_type, c.repeated(&mut last.timestamp_type, Cursor::string).map(TimestampType::parse)?)
        }
        // Whatever else the mapping adds: ignored, as serde ignores it.
        _ => c.scalar(),
    })?;
    let text = |s: Option<Option<&'a str>>| s.flatten().map(|s| Text(Cow::Borrowed(s)));
    Some(RawRecord {
        topic: text(topic),
        partition: partition?,
        offset: offset?,
        timestamp: timestamp?,
        timestamp_type: timestamp_type.flatten().map(|t| super::ReadTimestampType(Some(t))),
        key: text(key),
        value: text(value),
        headers: super::ReadHeaders { headers: headers.unwrap_or_default(), problem: None },
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

    /// JSON's insignificant white space (space, tab, line feed, carriage return), skipped. One
    /// comparison where there is none, as in the mapping's compact form.
    #[inline]
    fn white_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.rest().first() {
            self.i += 1;
        }
    }

    /// The byte `byte` after any white space (looked for only when `byte` is not next).
    #[inline]
    fn eat(&mut self, byte: u8) -> bool {
        let mut hit = self.rest().first() == Some(&byte);
        if !hit && self.rest().first().is_some_and(|b| *b <= b' ') {
            self.white_space();
            hit = self.rest().first() == Some(&byte);
        }
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
                c.white_space();
                let rest = c.rest();
                let guess = last.map_or(order.first, |l| order.after[l]);
                let hit = std::iter::once(guess).chain((0..N).filter(|&k| k != guess)).find(|&k| starts_with(rest, known[k]));
                let k = match hit {
                    Some(k) => {
                        c.i += known[k].len();
                        k
                    }
                    None => {
                        let name = c.string()?.as_bytes();
                        if !c.eat(b':') {
                            return None;
                        }
                        // A known name with white space before its colon is still that field.
                        let named = |k: &usize| known[*k].strip_prefix(b"\"").and_then(|n| n.strip_suffix(b"\":")) == Some(name);
                        let Some(k) = (0..N).find(named) else { return Some(Name::Other) };
                        k
                    }
                };
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
    fn object_named<N>(
        &mut self,
        mut name: impl FnMut(&mut Self) -> Option<N>,
        mut member: impl FnMut(&mut Self, N) -> Option<()>,
    ) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let name = name(self)?;
            // A value starts at its first byte: what `repeated` compares, and the peek at it.
            self.white_space();
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
        self.white_space();
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
        self.white_space();
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
        self.white_space();
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
        self.white_space();
        match self.rest().first()? {
            b'"' => self.string().map(drop),
            b'n' => self.null().then_some(()),
            _ => self.integer().map(drop),
        }
    }
}

#[cfg(test)]
mod tests;
