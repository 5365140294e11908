//! Which addresses a keeper fetches from, and for how long: a result or input URL is chosen by
//! a stranger (a provider, a client), so without a policy every verifier would make requests
//! into its own network on their behalf (blind SSRF). By default only globally routable
//! addresses are fetched; loopback and private ranges must be allowed explicitly (tests allow
//! loopback; a private cluster allows private).

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

/// What remote fetches may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchPolicy {
    /// Fetch from loopback addresses (127.0.0.0/8, ::1).
    pub allow_loopback: bool,
    /// Fetch from private, link-local, shared and other non-global ranges (implies loopback).
    pub allow_private: bool,
    /// Longest a whole request may take, body included (a slow body is cut off).
    pub timeout: Duration,
    /// Longest a connection may take to open.
    pub connect_timeout: Duration,
    /// Redirects followed (each checked like the first URL).
    pub max_redirects: usize,
    /// Least transfer rate a large result is given time for, bytes per second: a fetch of
    /// `n` bytes may take `timeout + n / min_rate` (within the check's own deadline).
    pub min_rate: u64,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        FetchPolicy {
            allow_loopback: false,
            allow_private: false,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_redirects: 3,
            min_rate: 8 << 20,
        }
    }
}

impl FetchPolicy {
    /// The default policy with loopback allowed (tests, a single-machine cluster).
    pub fn loopback() -> Self {
        FetchPolicy {
            allow_loopback: true,
            ..Default::default()
        }
    }

    /// The default policy with loopback and private addresses allowed when `allow` (a local
    /// cluster: `--allow-private-urls`).
    pub fn private(allow: bool) -> Self {
        FetchPolicy {
            allow_loopback: allow,
            allow_private: allow,
            ..Default::default()
        }
    }

    /// How long a fetch of `bytes` may take.
    pub fn time_for(&self, bytes: u64) -> Duration {
        self.timeout + Duration::from_secs_f64(bytes as f64 / self.min_rate.max(1) as f64)
    }

    /// `None` when `ip` may be fetched from; else the range it falls in.
    pub fn refuses(&self, ip: IpAddr) -> Option<&'static str> {
        let class = classify(ip)?;
        match class {
            "loopback" if self.allow_loopback || self.allow_private => None,
            _ if self.allow_private => None,
            c => Some(c),
        }
    }
}

/// The non-global range `ip` falls in, or `None` for a global address.
pub fn classify(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return classify_v4(v4);
            }
            classify_v6(v6)
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match () {
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_unspecified() || a == 0 => "unspecified",
        _ if ip.is_private() => "private",
        _ if ip.is_link_local() => "link-local",
        _ if a == 100 && (64..128).contains(&b) => "shared (CGNAT)",
        _ if a == 198 && (b == 18 || b == 19) => "benchmarking",
        _ if ip.is_multicast() => "multicast",
        _ if a >= 240 => "reserved",
        _ if ip.is_documentation() => "documentation",
        _ if a == 192 && b == 0 && ip.octets()[2] == 0 => "IETF protocol assignments",
        _ => return None,
    })
}

fn v4_at(hi: u16, lo: u16) -> Ipv4Addr {
    Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)
}

fn classify_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    Some(match () {
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_unspecified() => "unspecified",
        _ if (s[0] & 0xfe00) == 0xfc00 => "unique local",
        _ if (s[0] & 0xffc0) == 0xfe80 => "link-local",
        _ if (s[0] & 0xffc0) == 0xfec0 => "site-local",
        _ if ip.is_multicast() => "multicast",
        _ if s[0] == 0x2001 && s[1] == 0x0db8 => "documentation",
        // Teredo tunnels reach hosts behind NATs: never a result server
        _ if s[0] == 0x2001 && s[1] == 0 => "Teredo",
        _ if s[..4] == [0x100, 0, 0, 0] => "discard-only",
        // NAT64 (well-known and local-use prefixes), IPv4-compatible and IPv4-translated forms
        // reach IPv4 addresses: judged by those
        _ if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
            || s[..3] == [0x64, 0xff9b, 1]
            || s[..6] == [0; 6]
            || s[..6] == [0, 0, 0, 0, 0xffff, 0] =>
        {
            return classify_v4(v4_at(s[6], s[7]));
        }
        // 6to4 embeds an IPv4 address after its prefix
        _ if s[0] == 0x2002 => return classify_v4(v4_at(s[1], s[2])),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_refused_unless_allowed() {
        let deny = FetchPolicy::default();
        let lo = FetchPolicy::loopback();
        let private = FetchPolicy {
            allow_private: true,
            ..Default::default()
        };
        for (ip, class) in [
            ("127.0.0.1", Some("loopback")),
            ("::1", Some("loopback")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("192.168.1.1", Some("private")),
            ("169.254.169.254", Some("link-local")),
            ("100.64.0.1", Some("shared (CGNAT)")),
            ("0.0.0.0", Some("unspecified")),
            ("fd00::1", Some("unique local")),
            ("fe80::1", Some("link-local")),
            ("64:ff9b::a00:1", Some("private")),
            ("64:ff9b:1::a00:1", Some("private")),
            ("2002:7f00:1::1", Some("loopback")),
            ("2002:a00:1::1", Some("private")),
            ("2001:0:4136:e378::1", Some("Teredo")),
            ("fec0::1", Some("site-local")),
            ("::ffff:0:a00:1", Some("private")),
            ("8.8.8.8", None),
            ("2606:4700::1111", None),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(classify(ip), class, "{ip}");
            assert_eq!(deny.refuses(ip), class, "{ip}");
            assert_eq!(
                lo.refuses(ip).is_none(),
                class.is_none() || class == Some("loopback"),
                "{ip}"
            );
            assert!(private.refuses(ip).is_none(), "{ip}");
        }
    }
}
