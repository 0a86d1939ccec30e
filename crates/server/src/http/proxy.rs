//! The load balancer in front of this server (`--trust-proxy-header`, `--trusted-proxy`):
//! the header it writes the client's address in, and the peers allowed to write it.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

/// Whose header names the client.
#[derive(Debug, Clone)]
pub struct TrustedProxy {
    header: HeaderName,
    /// The proxies' networks; empty: any peer (the replicas must then be reachable only
    /// through the proxy, or a client reaching one directly names itself anyone).
    peers: Vec<IpNet>,
}

impl TrustedProxy {
    /// `header`, written by a peer in `peers` (any peer when empty).
    pub fn new(header: HeaderName, peers: Vec<IpNet>) -> TrustedProxy {
        TrustedProxy { header, peers }
    }

    /// Whether any peer's header is believed.
    pub fn trusts_any_peer(&self) -> bool {
        self.peers.is_empty()
    }

    /// Whether `peer` may name the client.
    fn trusts(&self, peer: Option<IpAddr>) -> bool {
        self.peers.is_empty()
            || peer.is_some_and(|peer| {
                let peer = peer.to_canonical();
                self.peers.iter().any(|net| net.contains(&peer))
            })
    }

    /// Who sent a request from `peer` with `headers`.
    pub fn sender(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Sender {
        if !self.trusts(peer) {
            return Sender::direct(peer);
        }
        let forwarded = forwarded_address(headers, &self.header);
        Sender {
            client: forwarded.or(peer),
            carried: headers.contains_key(&self.header),
            unforwarded: forwarded.is_none(),
        }
    }

    /// Warns that a request from `peer`, a proxy, came without a usable client address,
    /// at most once a minute: a proxy misconfigured would otherwise write a line per
    /// request.
    pub fn warn_unforwarded(&self, peer: Option<IpAddr>) {
        static LAST_MINUTE: AtomicU64 = AtomicU64::new(u64::MAX);
        let minute = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() / 60);
        if LAST_MINUTE.swap(minute, Ordering::Relaxed) != minute {
            tracing::warn!(
                header = %self.header,
                ?peer,
                "a request without a client address in the trusted proxy header: counted as \
                 its peer's (behind a balancer that does not set it, every client shares one \
                 pace)"
            );
        }
    }
}

/// Who sent a request, as the proxy rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sender {
    /// The client: the address the proxy appended last to its header, when the peer is a
    /// proxy; otherwise, or when the header holds no address, the peer itself (never no
    /// one, whom no limit counts). `None` only for a request that came through no
    /// listener.
    pub client: Option<IpAddr>,
    /// Whether the request came through the proxy (a trusted peer's, carrying the
    /// header): its connection carries many clients' requests.
    pub carried: bool,
    /// Whether a trusted peer's request came without a usable address: the proxy does
    /// not set it, and every client would share one pace.
    pub unforwarded: bool,
}

impl Sender {
    /// A request straight from `peer`, no proxy between.
    pub fn direct(peer: Option<IpAddr>) -> Sender {
        Sender {
            client: peer,
            carried: false,
            unforwarded: false,
        }
    }
}

/// A `--trusted-proxy` value: a network (`10.0.0.0/8`, `fd00::/8`) or one address.
pub fn parse_network(text: &str) -> Result<IpNet, String> {
    let net = text
        .parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map(|net| net.trunc())
        .map_err(|_| format!("'{text}' is neither an address nor a network such as 10.0.0.0/8"))?;
    // Peers are compared in their canonical form (an IPv4-mapped address as IPv4): a
    // mapped network would never match one.
    match net {
        IpNet::V6(v6) if v6.addr().to_ipv4_mapped().is_some() => Err(format!(
            "'{text}' is an IPv4-mapped network: write it as IPv4 (such as {}/{})",
            v6.addr()
                .to_ipv4_mapped()
                .map_or_else(String::new, |a| a.to_string()),
            v6.prefix_len().saturating_sub(96)
        )),
        net => Ok(net),
    }
}

/// The last address in the last `header` line (the one the nearest proxy wrote): `ip`,
/// `ip:port` or `[ipv6]:port`.
fn forwarded_address(headers: &HeaderMap, header: &HeaderName) -> Option<IpAddr> {
    let line = headers.get_all(header).iter().next_back()?;
    let last = line.as_bytes().rsplit(|byte| *byte == b',').next()?;
    let text = std::str::from_utf8(last).ok()?.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|address| address.ip()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn xff() -> HeaderName {
        HeaderName::from_static("x-forwarded-for")
    }

    fn forwarded(lines: &[&[u8]]) -> Option<IpAddr> {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(xff(), axum::http::HeaderValue::from_bytes(line).unwrap());
        }
        forwarded_address(&headers, &xff())
    }

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn the_client_is_the_last_address_the_nearest_proxy_wrote() {
        assert_eq!(forwarded(&[b"10.0.0.1"]), ip("10.0.0.1"));
        assert_eq!(forwarded(&[b"6.6.6.6, 10.0.0.1"]), ip("10.0.0.1"));
        // Proxies that write the port too.
        assert_eq!(forwarded(&[b"10.0.0.1:51234"]), ip("10.0.0.1"));
        assert_eq!(forwarded(&[b"[2001:db8::7]:443"]), ip("2001:db8::7"));
        assert_eq!(forwarded(&[b" 2001:db8::7 "]), ip("2001:db8::7"));
        // A line the client wrote comes first; the proxy's own line counts.
        assert_eq!(forwarded(&[b"6.6.6.6", b"10.0.0.1"]), ip("10.0.0.1"));
        // A byte the client put before the proxy's address does not hide it.
        assert_eq!(forwarded(&[b"\xff\xfe, 10.0.0.1"]), ip("10.0.0.1"));
        assert_eq!(forwarded(&[b"10.0.0.1", b"\xff"]), None);
        assert_eq!(forwarded(&[]), None);
        assert_eq!(forwarded(&[b"unknown"]), None);
        assert_eq!(forwarded(&[b"10.0.0.1,"]), None);
    }

    #[test]
    fn without_a_forwarded_address_the_client_is_its_peer_never_no_one() {
        let any = TrustedProxy::new(xff(), Vec::new());
        let peer = ip("192.0.2.9");
        let mut headers = HeaderMap::new();
        headers.insert(xff(), axum::http::HeaderValue::from_static("10.0.0.1"));
        let forwarded = Sender {
            client: ip("10.0.0.1"),
            carried: true,
            unforwarded: false,
        };
        assert_eq!(any.sender(&headers, peer), forwarded);
        for unusable in ["", "unknown", "for=10.0.0.1"] {
            headers.insert(xff(), axum::http::HeaderValue::from_static(unusable));
            let unforwarded = Sender {
                client: peer,
                carried: true,
                unforwarded: true,
            };
            assert_eq!(any.sender(&headers, peer), unforwarded, "{unusable:?}");
        }
        let without = Sender {
            client: peer,
            carried: false,
            unforwarded: true,
        };
        assert_eq!(any.sender(&HeaderMap::new(), peer), without);
    }

    #[test]
    fn only_the_named_proxies_name_the_client() {
        let nets = ["127.0.0.1", "10.1.0.0/16", "fd00::/8"]
            .map(|text| parse_network(text).unwrap())
            .to_vec();
        let proxy = TrustedProxy::new(xff(), nets);
        assert!(!proxy.trusts_any_peer());
        let mut headers = HeaderMap::new();
        headers.insert(xff(), axum::http::HeaderValue::from_static("203.0.113.5"));
        for trusted in ["127.0.0.1", "10.1.200.3", "fd12::1", "::ffff:10.1.0.9"] {
            let sender = proxy.sender(&headers, ip(trusted));
            assert_eq!(sender.client, ip("203.0.113.5"), "{trusted}");
            assert!(sender.carried && !sender.unforwarded, "{trusted}");
        }
        // Anyone else is its own address, whatever it wrote, and its connection its own.
        for direct in ["127.0.0.2", "10.2.0.1", "2001:db8::1", "::ffff:192.0.2.1"] {
            let direct = ip(direct);
            assert_eq!(proxy.sender(&headers, direct), Sender::direct(direct));
        }
        assert_eq!(proxy.sender(&headers, None), Sender::direct(None));
    }

    #[test]
    fn networks_are_addresses_or_prefixes() {
        assert_eq!(
            parse_network("10.0.0.7").unwrap().to_string(),
            "10.0.0.7/32"
        );
        assert_eq!(
            parse_network("10.0.0.7/8").unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(parse_network("::1").unwrap().to_string(), "::1/128");
        for bad in [
            "",
            "10.0.0.0/33",
            "example.com",
            "10.0.0.1:80",
            "::ffff:10.0.0.0/104",
        ] {
            assert!(parse_network(bad).is_err(), "{bad}");
        }
    }
}
