//! A record's headers in one `Bytes`: each header as its name's length (u32, little-endian),
//! the name, its value's length and the value, in the order sent (a name may repeat, as Kafka
//! allows). A parsed event writes them into its arena beside the key and value, so a record's
//! headers cost no allocation of their own: a list and a name `String` per record were 4% of a
//! 10k-record event's instructions (callgrind), and the esm's clone of every batch it invokes
//! in process copied both again.

use bytes::{BufMut, Bytes, BytesMut};

/// A record's headers, in order. Equal lists have equal encodings.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(Bytes);

impl Headers {
    /// Headers from `(name, value)` pairs, written into an empty `buf` and split off it, its
    /// spare capacity left for what follows (a record's parts can share one allocation: reserve
    /// [`Headers::encoded_len`] of each).
    pub fn from_buffer<N: AsRef<str>, V: AsRef<[u8]>>(buf: &mut BytesMut, pairs: impl IntoIterator<Item = (N, V)>) -> Self {
        debug_assert!(buf.is_empty(), "headers start an empty buffer");
        for (name, value) in pairs {
            write(buf, name.as_ref(), value.as_ref());
        }
        Headers(buf.split().freeze())
    }

    /// The bytes one header takes.
    pub fn encoded_len(name: &str, value: &[u8]) -> usize {
        4 + name.len() + 4 + value.len()
    }

    /// Headers already encoded by [`write`] or [`begin`]/[`end`] (one field of a buffer).
    pub(crate) fn from_encoded(bytes: Bytes) -> Self {
        Headers(bytes)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `(name, value)` in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        let mut rest: &[u8] = &self.0;
        std::iter::from_fn(move || {
            let name = field(&mut rest)?;
            let value = field(&mut rest)?;
            // Names are written from `&str` only; an invalid one cannot be here.
            Some((std::str::from_utf8(name).unwrap_or_default(), value))
        })
    }

    /// `(name, value)` in order, each value a slice sharing this list's buffer (no copy).
    pub fn iter_shared(&self) -> impl Iterator<Item = (&str, Bytes)> {
        self.iter().map(|(name, value)| (name, self.0.slice_ref(value)))
    }
}

/// Headers from `(name, value)` pairs, in one allocation.
impl<N: AsRef<str>, V: AsRef<[u8]>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        Self::from_buffer(&mut BytesMut::new(), pairs)
    }
}

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter_shared()).finish()
    }
}

/// One length-prefixed field off the front of `rest`.
fn field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, tail) = rest.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    let (field, tail) = tail.split_at_checked(len)?;
    *rest = tail;
    Some(field)
}

/// A length as written: Kafka caps a record far below 4 GiB, so it fits.
fn length(len: usize) -> [u8; 4] {
    u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes()
}

/// Appends one header to `buf`.
pub(crate) fn write(buf: &mut BytesMut, name: &str, value: &[u8]) {
    let at = begin(buf, name);
    buf.put_slice(value);
    end(buf, at);
}

/// Starts a header whose value is then appended to `buf` byte by byte; returns where its
/// length goes, for [`end`].
pub(crate) fn begin(buf: &mut BytesMut, name: &str) -> usize {
    buf.put_slice(&length(name.len()));
    buf.put_slice(name.as_bytes());
    let at = buf.len();
    buf.put_slice(&[0; 4]);
    at
}

/// Ends the header [`begin`] started at `at`: its value is everything after the length.
pub(crate) fn end(buf: &mut BytesMut, at: usize) {
    let len = length(buf.len() - at - 4);
    buf[at..at + 4].copy_from_slice(&len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_come_back_in_order_with_repeats_and_empties() {
        let pairs: Vec<(String, Vec<u8>)> =
            vec![("trace".into(), vec![1, 2]), ("".into(), vec![]), ("trace".into(), vec![255]), ("é".into(), vec![0; 300])];
        let headers = Headers::from_iter(pairs.iter().map(|(n, v)| (n, v)));
        assert_eq!(headers.iter().count(), 4);
        let back: Vec<(String, Vec<u8>)> = headers.iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
        assert_eq!(back, pairs);
        let shared: Vec<Bytes> = headers.iter_shared().map(|(_, v)| v).collect();
        assert_eq!(shared[3], Bytes::from(vec![0; 300]));
        assert_eq!(headers, Headers::from_iter(pairs.clone()));
        assert_ne!(headers, Headers::from_iter(pairs[..3].iter().map(|(n, v)| (n, v))));
        assert!(Headers::default().is_empty() && Headers::from_iter(Vec::<(&str, &[u8])>::new()).is_empty());
        assert_eq!(format!("{:?}", Headers::from_iter([("a", b"x")])), r#"[("a", b"x")]"#);
    }

    #[test]
    fn a_value_written_byte_by_byte_ends_where_it_ends() {
        let mut buf = BytesMut::new();
        let at = begin(&mut buf, "h");
        for b in [7u8, 8, 9] {
            buf.put_u8(b);
        }
        end(&mut buf, at);
        write(&mut buf, "k", b"");
        let headers = Headers::from_encoded(buf.split().freeze());
        assert_eq!(headers.iter().collect::<Vec<_>>(), vec![("h", &[7u8, 8, 9][..]), ("k", &[][..])]);
    }

    #[test]
    fn a_cut_encoding_stops_without_panicking() {
        let whole = Headers::from_iter([("name", b"value")]).0;
        for cut in 0..whole.len() {
            assert_eq!(Headers(whole.slice(..cut)).iter().count(), 0);
        }
    }
}
