//! Where tally may send requests of its own (alerts, webhook consumers):
//! which addresses are off limits, and which URLs are acceptable as
//! targets.
//!
//! An alert URL is chosen by whoever sets a ledger's policy, and the
//! server POSTs to it from inside its own network. Without a filter that is
//! a server-side request forgery: the caller makes tally reach its own
//! loopback services, the cloud metadata endpoint (169.254.169.254) or
//! private ranges. So unless the operator allows private hosts, every
//! address tally would connect to is checked here: when the policy is set
//! (for literal IPs) and again, after resolving the host, when sending.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not a public destination, if it is not.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        // 169.254.0.0/16, where cloud metadata services answer.
        Some("link-local")
    } else if ip.is_private() {
        Some("private")
    } else if a == 100 && (b & 0xc0) == 64 {
        Some("shared address space (100.64.0.0/10)")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast()
        || a >= 240
        || ip.is_documentation()
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
    {
        Some("reserved")
    } else if a == 198 && (b & 0xfe) == 18 {
        Some("reserved (benchmarking)")
    } else {
        None
    }
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    // IPv4 inside IPv6: mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96) and
    // the deprecated compatible form (::a.b.c.d) reach the IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    let s = ip.segments();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || (s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified())
    {
        let [.., a, b, c, d] = ip.octets();
        return forbidden_v4(Ipv4Addr::new(a, b, c, d));
    }
    if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unicast_link_local() {
        Some("link-local")
    } else if (s[0] & 0xfe00) == 0xfc00 {
        Some("private (unique local, fc00::/7)")
    } else if (s[0] & 0xffc0) == 0xfec0 {
        Some("private (site-local)")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if s[0] == 0x2001 && s[1] == 0xdb8 {
        Some("reserved (documentation)")
    } else {
        None
    }
}

/// What an alert URL's host is, once parsed as reqwest parses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A literal address: checked as it stands.
    Ip(IpAddr),
    /// A name: checked after resolving, by the sender.
    Name(String),
}

/// Parses an alert URL: only `http` and `https`, with a host. `Err` says
/// what is wrong, for a field violation.
pub fn parse_target(text: &str) -> Result<Host, String> {
    let url = url::Url::parse(text).map_err(|e| format!("is not a valid URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http:// or https:// URL".into());
    }
    match url.host() {
        Some(url::Host::Ipv4(ip)) => Ok(Host::Ip(IpAddr::V4(ip))),
        Some(url::Host::Ipv6(ip)) => Ok(Host::Ip(IpAddr::V6(ip))),
        Some(url::Host::Domain(name)) => Ok(Host::Name(name.to_string())),
        None => Err("must name a host".into()),
    }
}

/// Which destinations the server may reach (`--alerts-allow-private-hosts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reach {
    /// Public addresses only: the default.
    #[default]
    PublicOnly,
    /// Any address, private and loopback included (a receiver on the same
    /// host or network, and tests).
    AnyHost,
}

impl Reach {
    /// Why tally may not connect to `ip`, if it may not.
    pub fn refuses(self, ip: IpAddr) -> Option<String> {
        match self {
            Reach::AnyHost => None,
            Reach::PublicOnly => forbidden(ip).map(|why| refusal(ip, why)),
        }
    }
}

/// Checks an alert URL as a policy is set: its form, and that a literal
/// address is one `reach` allows. Names are checked when sending (they may
/// resolve differently by then).
pub fn check_target(text: &str, reach: Reach) -> Result<(), String> {
    match parse_target(text)? {
        Host::Ip(ip) => reach.refuses(ip).map_or(Ok(()), Err),
        Host::Name(_) => Ok(()),
    }
}

/// The message for a refused address: what it is, and the way out.
pub fn refusal(ip: IpAddr, why: &str) -> String {
    format!(
        "{ip} is a {why} address; alerts and webhook consumers may reach it only when the \
         server runs with --alerts-allow-private-hosts"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn every_non_public_class_is_forbidden() {
        // Invariant: loopback, link-local (metadata), private, CGNAT,
        // unspecified, multicast and reserved addresses are refused, in
        // IPv4, IPv6 and every IPv6 form that carries an IPv4 address.
        for (addr, class) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("fd00::1", "private"),
            ("fc00::1", "private"),
            ("100.64.0.1", "shared"),
            ("100.127.255.254", "shared"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("::7f00:1", "loopback"),
        ] {
            let why = forbidden(ip(addr)).unwrap_or_else(|| panic!("{addr} allowed"));
            assert!(why.starts_with(class), "{addr}: {why}");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        // Invariant: ordinary public unicast addresses pass, including the
        // neighbours of forbidden ranges.
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "169.253.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(forbidden(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn literal_targets_are_checked_as_reqwest_would_read_them() {
        // Invariant: a URL whose host is a forbidden address in any
        // spelling the URL parser accepts is refused, unless allowed.
        for url in [
            "http://127.0.0.1/alerts",
            "http://[::1]:8080/",
            "https://10.0.0.7/x",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:127.0.0.1]/",
            "http://0x7f.1/",
            "http://2130706433/",
            "http://0/",
        ] {
            let err = check_target(url, Reach::PublicOnly).unwrap_err();
            assert!(err.contains("--alerts-allow-private-hosts"), "{url}: {err}");
            assert_eq!(check_target(url, Reach::AnyHost), Ok(()), "{url}");
        }
        assert_eq!(
            check_target("https://hooks.example.com/a", Reach::PublicOnly),
            Ok(())
        );
        assert_eq!(
            check_target("http://localhost:1/", Reach::PublicOnly),
            Ok(())
        );
        assert!(
            check_target("ftp://example.com/", Reach::AnyHost)
                .unwrap_err()
                .contains("http")
        );
        assert!(check_target("http://", Reach::AnyHost).is_err());
        assert!(check_target("not a url", Reach::AnyHost).is_err());
        assert_eq!(
            parse_target("http://LOCALHOST./"),
            Ok(Host::Name("localhost.".into()))
        );
    }
}
