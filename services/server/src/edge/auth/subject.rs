//! The subject common name (CN) of a client certificate, which names the
//! caller under mTLS.
//!
//! rustls has already verified the chain against `--tls-client-ca` before
//! this runs; all that is left is to read one field. A full X.509 crate
//! would add more code than this small, bounds-checked DER walk, which
//! answers `None` for anything it does not understand rather than
//! guessing. A certificate with no CN, or with more than one, names nobody.

/// DER tags used on the way to the subject.
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const VERSION: u8 = 0xa0;
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;
const IA5_STRING: u8 = 0x16;
/// 2.5.4.3, id-at-commonName.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// One DER element: its tag, its contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // multi-byte tags never occur on this path
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The contents of an element with `tag`, and what follows it.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, content, rest) = element(input)?;
    (t == tag).then_some((content, rest))
}

/// The subject CN of a DER-encoded X.509 certificate.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.2;
    }
    // serialNumber, signature, issuer, validity; then the subject.
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (mut name, _) = expect(rest, SEQUENCE)?;
    let mut found: Option<String> = None;
    while !name.is_empty() {
        let (mut rdn, next) = expect(name, SET)?;
        name = next;
        while !rdn.is_empty() {
            let (attribute, next) = expect(rdn, SEQUENCE)?;
            rdn = next;
            let (oid, value) = expect(attribute, OID)?;
            if oid != COMMON_NAME {
                continue;
            }
            let (tag, text, _) = element(value)?;
            if !matches!(tag, UTF8_STRING | PRINTABLE_STRING | IA5_STRING) {
                return None;
            }
            let text = std::str::from_utf8(text).ok()?;
            if found.is_some() || text.is_empty() || text.chars().any(char::is_control) {
                return None;
            }
            found = Some(text.to_string());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn cert(cn: &[&str], org: Option<&str>) -> Vec<u8> {
        let mut params = CertificateParams::new(vec!["client.test".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        for c in cn {
            params.distinguished_name.push(DnType::CommonName, *c);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn reads_the_common_name() {
        assert_eq!(
            common_name(&cert(&["worker-7"], Some("tally"))).as_deref(),
            Some("worker-7")
        );
        assert_eq!(
            common_name(&cert(&["ünïcode"], None)).as_deref(),
            Some("ünïcode")
        );
    }

    #[test]
    fn no_cn_or_two_cns_name_nobody() {
        assert_eq!(common_name(&cert(&[], Some("tally"))), None);
        // rcgen keeps one value per type, so build the two-CN case by hand.
        let der = cert(&["a"], None);
        let cn = [
            0x31, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x01, b'b',
        ];
        let patched = append_rdn(&der, &cn);
        assert_eq!(common_name(&patched), None);
    }

    #[test]
    fn truncated_or_garbage_input_never_panics() {
        let der = cert(&["worker-7"], Some("tally"));
        for end in 0..der.len() {
            let _ = common_name(&der[..end]);
        }
        let mut flipped = der.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xff;
            let _ = common_name(&flipped);
            flipped[i] ^= 0xff;
        }
        assert_eq!(common_name(b""), None);
        assert_eq!(common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
    }

    /// Re-encodes `der` with `rdn` appended to the subject, fixing the
    /// lengths of the enclosing elements (test helper; long-form lengths).
    fn append_rdn(der: &[u8], rdn: &[u8]) -> Vec<u8> {
        fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
            let mut out = vec![tag];
            let len = content.len();
            if len < 0x80 {
                out.push(len as u8);
            } else {
                out.extend([0x82, (len >> 8) as u8, len as u8]);
            }
            out.extend_from_slice(content);
            out
        }
        let (cert, _) = expect(der, SEQUENCE).unwrap();
        let (tbs, after_tbs) = expect(cert, SEQUENCE).unwrap();
        let mut parts = Vec::new();
        let mut rest = tbs;
        let mut index = 0;
        while !rest.is_empty() {
            let (tag, content, next) = element(rest).unwrap();
            let start = tbs.len() - rest.len();
            let whole = &tbs[start..tbs.len() - next.len()];
            // version, serial, signature, issuer, validity, subject
            if index == 5 {
                let mut subject = content.to_vec();
                subject.extend_from_slice(rdn);
                parts.extend(encode(tag, &subject));
            } else {
                parts.extend_from_slice(whole);
            }
            index += 1;
            rest = next;
        }
        let mut cert_content = encode(SEQUENCE, &parts);
        cert_content.extend_from_slice(after_tbs);
        encode(SEQUENCE, &cert_content)
    }
}
