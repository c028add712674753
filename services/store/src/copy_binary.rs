//! PostgreSQL's binary `COPY … FROM STDIN (FORMAT binary)` stream, written
//! field by field (the format: the `COPY` reference page, "Binary Format").
//! Binary, not text: no value needs escaping, and integers and `bytea`
//! travel as they are stored.

/// `PGCOPY\n\377\r\n\0`, then the flags and the header extension length.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// One `COPY` stream's bytes. Each row is [`CopyRows::row`] with its field
/// count, then exactly that many fields, in the column order of the `COPY`
/// statement.
pub(crate) struct CopyRows {
    buf: Vec<u8>,
}

impl CopyRows {
    /// A stream with room for about `bytes` of fields.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(HEADER.len() + bytes + 2);
        buf.extend_from_slice(HEADER);
        CopyRows { buf }
    }

    pub(crate) fn row(&mut self, fields: i16) -> &mut Self {
        self.buf.extend_from_slice(&fields.to_be_bytes());
        self
    }

    fn field(&mut self, bytes: &[u8]) -> &mut Self {
        let len = i32::try_from(bytes.len()).expect("a COPY field over 2 GiB");
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(bytes);
        self
    }

    pub(crate) fn int2(&mut self, v: i16) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    pub(crate) fn int8(&mut self, v: i64) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    /// `text` (UTF-8, as the database's encoding) or `bytea`.
    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.field(v)
    }

    /// The stream with its trailer.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_header_rows_of_length_prefixed_fields_and_trailer() {
        let mut rows = CopyRows::with_capacity(0);
        rows.row(3).int2(-2).int8(1 << 40).bytes(b"ab");
        let bytes = rows.finish();
        let mut expected = b"PGCOPY\n\xff\r\n\0".to_vec();
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]); // flags, extension
        expected.extend_from_slice(&[0, 3]); // fields
        expected.extend_from_slice(&[0, 0, 0, 2, 0xff, 0xfe]);
        expected.extend_from_slice(&[0, 0, 0, 8, 0, 0, 1, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[0, 0, 0, 2, b'a', b'b']);
        expected.extend_from_slice(&[0xff, 0xff]); // trailer
        assert_eq!(bytes, expected);
    }
}
