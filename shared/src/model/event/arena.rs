//! Where a parsed event's record bytes live: keys, values and headers written one after
//! another into shared chunks and handed out as `Bytes` slices, rather than three allocations a
//! record; a chunk holds ~1,500 records' bytes and is freed when its last record goes (freeing
//! two 10k-record events: 14.7M instructions before, 8.6M after).
//!
//! Keys and values go into an open chunk as ranges; the chunk is frozen once and sliced for the
//! records that wrote into it ([`Arena::freeze_values`]): a slice of a frozen chunk costs a third
//! of splitting a `BytesMut` per field, and base64 decodes into the chunk's spare capacity with no
//! zero-fill first. Headers, which the scan needs as it goes, are split off their own buffer.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

/// The size of a chunk of keys and values, and of header lists (`BytesMut` allocates the next
/// one of this size, its "original capacity", or larger for a larger list).
const CHUNK: usize = 64 * 1024;

pub(super) struct Arena {
    /// Keys and values of the records not yet handed their slices.
    values: Vec<u8>,
    /// Headers, split off one list at a time.
    headers: BytesMut,
}

/// A key or value as written: its range in the open chunk, or bytes of its own.
pub(super) enum Field {
    Absent,
    InChunk(Range<usize>),
    Owned(Bytes),
}

impl Field {
    /// The field's bytes, `chunk` being the frozen chunk it was written into.
    pub(super) fn resolve(self, chunk: &Bytes) -> Option<Bytes> {
        match self {
            Field::Absent => None,
            Field::InChunk(range) => Some(chunk.slice(range)),
            Field::Owned(bytes) => Some(bytes),
        }
    }
}

impl Arena {
    pub(super) fn new() -> Self {
        Arena { values: Vec::with_capacity(CHUNK), headers: BytesMut::with_capacity(CHUNK) }
    }

    /// Whether `bytes` more fit the open chunk without growing it (growing copies what it holds).
    pub(super) fn has_room(&self, bytes: usize) -> bool {
        self.values.is_empty() || self.values.len() + bytes <= self.values.capacity()
    }

    /// Whether the open chunk is full enough to freeze.
    pub(super) fn is_full(&self) -> bool {
        self.values.len() >= CHUNK
    }

    /// Standard base64 with padding, decoded into the open chunk: SIMD first; whatever it
    /// refuses goes to the `base64` crate, which accepts what it always did and names the
    /// offending symbol.
    pub(super) fn base64(&mut self, text: &str) -> Result<Field, base64::DecodeError> {
        use base64::Engine;
        let start = self.values.len();
        match base64_simd::STANDARD.decode_append(text.as_bytes(), &mut self.values) {
            Ok(()) => Ok(Field::InChunk(start..self.values.len())),
            Err(_) => {
                self.values.truncate(start);
                base64::engine::general_purpose::STANDARD.decode(text).map(|bytes| Field::Owned(Bytes::from(bytes)))
            }
        }
    }

    /// The open chunk, frozen for slicing; a new one opens. A chunk frozen mostly empty (at the
    /// end of a topic-partition's few records) gives its spare capacity back: an event of many
    /// small partitions would otherwise hold 64 KiB for each.
    pub(super) fn freeze_values(&mut self) -> Bytes {
        let mut chunk = std::mem::replace(&mut self.values, Vec::with_capacity(CHUNK));
        if chunk.len() < chunk.capacity() / 2 {
            chunk.shrink_to_fit();
        }
        Bytes::from(chunk)
    }

    /// Appends a byte to the header list being written (ended by [`Arena::take_headers`]).
    /// Inlined: it runs once per header byte, 13 times a record in the reference events.
    #[inline]
    pub(super) fn push(&mut self, byte: u8) {
        self.headers.put_u8(byte);
    }

    /// Starts a header (name and a length to fill in) in the list being written; its value's
    /// bytes follow by [`Arena::push`] until [`Arena::end_header`] with what this returned.
    pub(super) fn begin_header(&mut self, name: &str) -> usize {
        super::headers::begin(&mut self.headers, name)
    }

    pub(super) fn end_header(&mut self, at: usize) {
        super::headers::end(&mut self.headers, at);
    }

    /// The header list written since the last `take_headers`.
    pub(super) fn take_headers(&mut self) -> Bytes {
        self.headers.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_their_bytes_across_chunks() -> Result<(), base64::DecodeError> {
        let mut arena = Arena::new();
        let (mut fields, mut written) = (Vec::new(), Vec::new());
        // Past several chunks, with fields that straddle a chunk's end, frozen as a reader
        // would: when full, or when the next field does not fit.
        for i in 0..20_000u32 {
            let raw = i.to_le_bytes().repeat(1 + i as usize % 7);
            let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &raw);
            if !arena.has_room(raw.len()) {
                let chunk = arena.freeze_values();
                fields.extend(written.drain(..).map(|(raw, field): (Vec<u8>, Field)| (raw, field.resolve(&chunk))));
            }
            written.push((raw, arena.base64(&text)?));
            for b in i.to_be_bytes() {
                arena.push(b);
            }
            fields.push((i.to_be_bytes().to_vec(), Some(arena.take_headers())));
            if arena.is_full() {
                let chunk = arena.freeze_values();
                fields.extend(written.drain(..).map(|(raw, field)| (raw, field.resolve(&chunk))));
            }
        }
        let chunk = arena.freeze_values();
        fields.extend(written.drain(..).map(|(raw, field)| (raw, field.resolve(&chunk))));
        assert_eq!(fields.len(), 40_000);
        assert!(fields.iter().all(|(raw, field)| field.as_deref() == Some(&raw[..])));
        assert!(matches!(arena.base64(""), Ok(Field::InChunk(r)) if r.is_empty()));
        // A field that is not base64 leaves nothing behind for the next.
        let before = arena.values.len();
        assert!(arena.base64("a*b=").err().map(|e| e.to_string()).unwrap_or_default().contains("Invalid symbol"));
        assert_eq!(arena.values.len(), before);
        let hi = arena.base64("aGk=")?;
        assert_eq!(hi.resolve(&arena.freeze_values()), Some(Bytes::from_static(b"hi")));
        Ok(())
    }
}
