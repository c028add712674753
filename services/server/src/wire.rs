//! A walk over the top level of an encoded protobuf message, without
//! decoding it: how many times a repeated field occurs. Used to refuse a
//! request with too many rows before its rows are decoded (an empty row is
//! 2 bytes on the wire and over 100 in memory).

/// Occurrences of length-delimited field `field` at the top level of
/// `message`; `None` when the bytes are not a well-formed message (the
/// decoder then reports it).
pub fn count_field(message: &[u8], field: u32) -> Option<usize> {
    let mut at = 0;
    let mut count = 0;
    while at < message.len() {
        let tag = varint(message, &mut at)?;
        let number = u32::try_from(tag >> 3).ok()?;
        match tag & 7 {
            0 => {
                varint(message, &mut at)?;
            }
            1 => at = at.checked_add(8)?,
            2 => {
                let len = usize::try_from(varint(message, &mut at)?).ok()?;
                at = at.checked_add(len)?;
                if number == field {
                    count += 1;
                }
            }
            5 => at = at.checked_add(4)?,
            _ => return None,
        }
        if at > message.len() {
            return None;
        }
    }
    Some(count)
}

fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tally_proto::v1 as pb;

    /// The count is the number of entries prost decodes, whatever the other
    /// fields around them.
    #[test]
    fn counts_what_prost_decodes() {
        let req = pb::EnrollRowsRequest {
            parent: "ledgers/l".into(),
            rows: vec![
                pb::RowInput::default(),
                pb::RowInput {
                    key: "k".into(),
                    payload: "{}".into(),
                    ..Default::default()
                },
                pb::RowInput::default(),
            ],
        };
        let bytes = req.encode_to_vec();
        assert_eq!(count_field(&bytes, 2), Some(3));
        assert_eq!(count_field(&bytes, 1), Some(1));
        assert_eq!(count_field(&[], 2), Some(0));
    }

    /// Truncated or malformed bytes give None, never a wrong count or a
    /// panic.
    #[test]
    fn malformed_bytes_are_not_counted() {
        let bytes = pb::EnrollRowsRequest {
            parent: "ledgers/l".into(),
            rows: vec![],
        }
        .encode_to_vec();
        assert_eq!(count_field(&bytes[..bytes.len() - 1], 2), None);
        assert_eq!(count_field(&[0x12, 0xff], 2), None);
        assert_eq!(count_field(&[0x0b], 2), None); // wire type 3
        assert_eq!(count_field(&[0x12; 11], 2), None);
        assert_eq!(count_field(&[0x80; 20], 2), None);
    }
}
