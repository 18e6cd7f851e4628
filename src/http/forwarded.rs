//! The client's address behind trusted proxies: `Forwarded` (RFC 7239) and `X-Forwarded-For`.
//!
//! Each proxy appends the address of the peer it received the request from, so the list reads
//! left to right from the client toward this server, and only the entries appended by proxies
//! we trust are true: anything left of them was written by someone else — possibly the client,
//! forging. [`client_address`] therefore starts from the peer (the last hop, which no header
//! can forge) and walks the list from the right while the hop it stands on is a trusted proxy;
//! the first address it reaches that is not a trusted proxy is the client. A client that
//! prepends forged entries only adds entries left of the one its first trusted proxy wrote,
//! which the walk never reaches.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};
use ipnet::IpNet;

/// Which header a trusted proxy writes the client chain into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// `Forwarded: for=...` (RFC 7239).
    Forwarded,
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
}

/// `X-Forwarded-For`.
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The networks whose hosts are trusted to report the address of the peer they forward for.
#[derive(Clone, Default)]
pub(crate) struct TrustedProxies {
    nets: Vec<IpNet>,
    /// The IPv4 networks as (network, mask) and the IPv6 ones likewise: a membership test is
    /// a mask and a compare per network, where `IpNet::contains` rebuilt both from the
    /// prefix length each time (a tenth of the key extraction's cost).
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl TrustedProxies {
    pub(crate) fn new(nets: Vec<IpNet>) -> Self {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for net in &nets {
            match net {
                IpNet::V4(n) => v4.push((u32::from(n.network()), u32::from(n.netmask()))),
                IpNet::V6(n) => v6.push((u128::from(n.network()), u128::from(n.netmask()))),
            }
        }
        TrustedProxies { nets, v4, v6 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip`, which must be [`canonical`], is in a trusted network.
    fn contains_canonical(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.iter().any(|&(net, mask)| a & mask == net)
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.iter().any(|&(net, mask)| a & mask == net)
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.contains_canonical(canonical(ip))
    }
}

impl core::fmt::Debug for TrustedProxies {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("TrustedProxies").field(&self.nets).finish()
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack socket reports for an
/// IPv4 peer) as the IPv4 address it is; any other address unchanged. Without this an IPv4
/// client would have two keys and an IPv4 proxy list would not match its own proxies.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// `ip` with all but its first `v4` (IPv4) or `v6` (IPv6) bits cleared: the key of every
/// address in its network.
pub(crate) fn prefix(ip: IpAddr, v4: u8, v6: u8) -> IpAddr {
    match canonical(ip) {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let mask = u32::MAX
                .checked_shl(32 - u32::from(v4.min(32)))
                .unwrap_or(0);
            IpAddr::V4((bits & mask).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let mask = u128::MAX
                .checked_shl(128 - u32::from(v6.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & mask))
        }
    }
}

/// The client address for a request whose peer is `peer`: `peer` itself unless it is a
/// trusted proxy, else the nearest address in `header`'s chain that is not a trusted proxy
/// (see the module documentation). A chain entry that names no address (`unknown`, an
/// obfuscated identifier, an element without `for=`, or text that does not parse) ends the
/// walk at the trusted hop that wrote it: that proxy could not say who its client was, so
/// its own address is the key.
pub(crate) fn client_address(
    peer: IpAddr,
    headers: &HeaderMap,
    header: ProxyHeader,
    trusted: &TrustedProxies,
) -> IpAddr {
    let mut client = canonical(peer);
    if trusted.is_empty() || !trusted.contains_canonical(client) {
        return client;
    }
    // Field lines of one name form one list, in order (RFC 9110 §5.3): walk the last line
    // first, and each line from its right end.
    let name = match header {
        ProxyHeader::Forwarded => FORWARDED,
        ProxyHeader::XForwardedFor => X_FORWARDED_FOR,
    };
    for line in headers.get_all(name).iter().rev() {
        let line = line.as_bytes();
        let hops = match header {
            // No quoting in X-Forwarded-For: split in place, without a list.
            ProxyHeader::XForwardedFor => walk(
                line.rsplit(|&b| b == b','),
                parse_node_trimmed,
                trusted,
                &mut client,
            ),
            ProxyHeader::Forwarded => walk(
                split_list(line).into_iter().rev(),
                forwarded_for,
                trusted,
                &mut client,
            ),
        };
        if hops == Walk::Stop {
            return client;
        }
    }
    // Every hop is a trusted proxy: the leftmost is the nearest thing to a client there is.
    client
}

#[derive(PartialEq, Eq)]
enum Walk {
    /// `client` is the answer.
    Stop,
    /// Every hop was a trusted proxy; `client` is the leftmost.
    Continue,
}

/// Walks `hops` (right to left) while they are trusted proxies, leaving in `client` the
/// last address reached.
fn walk<'a>(
    hops: impl Iterator<Item = &'a [u8]>,
    parse: impl Fn(&[u8]) -> Option<IpAddr>,
    trusted: &TrustedProxies,
    client: &mut IpAddr,
) -> Walk {
    for hop in hops {
        let Some(ip) = parse(hop) else {
            return Walk::Stop;
        };
        *client = canonical(ip);
        if !trusted.contains_canonical(*client) {
            return Walk::Stop;
        }
    }
    Walk::Continue
}

fn parse_node_trimmed(node: &[u8]) -> Option<IpAddr> {
    parse_node(trim(node))
}

/// The elements of a comma-separated list, commas inside quoted strings not splitting.
fn split_list(line: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in line.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == b',' && !quoted {
            out.push(&line[start..i]);
            start = i + 1;
        }
    }
    out.push(&line[start..]);
    out
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// The address in the `for` parameter of one `Forwarded` element (`for=192.0.2.1;proto=http`,
/// `for="[2001:db8::1]:4711"`), `None` if it has none or it names no address.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    let mut value = None;
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    let mut pairs = Vec::new();
    for (i, &b) in element.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == b';' && !quoted {
            pairs.push(&element[start..i]);
            start = i + 1;
        }
    }
    pairs.push(&element[start..]);
    for pair in pairs {
        let pair = trim(pair);
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            continue;
        };
        if pair[..eq].trim_ascii().eq_ignore_ascii_case(b"for") {
            // A second `for` in one element is malformed: trust neither.
            if value.is_some() {
                return None;
            }
            value = Some(unquote(trim(&pair[eq + 1..]))?);
        }
    }
    parse_node(&value?)
}

/// A token or a quoted-string's content, backslash escapes resolved.
fn unquote(v: &[u8]) -> Option<Vec<u8>> {
    let Some(inner) = v.strip_prefix(b"\"") else {
        return Some(v.to_vec());
    };
    let inner = inner.strip_suffix(b"\"")?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        out.push(if b == b'\\' { *bytes.next()? } else { b });
    }
    Some(out)
}

/// An address as a proxy writes it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:443`. `None` for anything else (`unknown`, `_hidden`).
pub(crate) fn parse_node(node: &[u8]) -> Option<IpAddr> {
    if let Some(v4) = parse_ipv4(node) {
        return Some(IpAddr::V4(v4));
    }
    let node = core::str::from_utf8(node).ok()?;
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = node.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    let inner = node.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

/// A dotted quad (`192.0.2.1`) read in one pass, the common case; `None` for anything else,
/// which [`parse_node`] hands to the standard library's parsers. Accepts exactly the dotted
/// quads `Ipv4Addr::from_str` does (four decimal octets up to 255, no leading zeros), which
/// a property test holds it to; the general path cost as much as the rest of the key
/// extraction.
fn parse_ipv4(s: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (k, octet) in octets.iter_mut().enumerate() {
        if k > 0 {
            if s.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut value = 0u32;
        while let Some(d) = s.get(i).filter(|b| b.is_ascii_digit() && i - start < 3) {
            value = value * 10 + u32::from(d - b'0');
            i += 1;
        }
        let digits = i - start;
        if digits == 0 || value > 255 || (digits > 1 && s[start] == b'0') {
            return None;
        }
        *octet = value as u8;
    }
    (i == s.len()).then_some(Ipv4Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted(nets: &[&str]) -> TrustedProxies {
        TrustedProxies::new(nets.iter().map(|n| n.parse().unwrap()).collect())
    }

    fn headers(name: HeaderName, lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(name.clone(), HeaderValue::from_str(l).unwrap());
        }
        h
    }

    fn xff(peer: &str, lines: &[&str], nets: &[&str]) -> IpAddr {
        let h = headers(X_FORWARDED_FOR, lines);
        client_address(ip(peer), &h, ProxyHeader::XForwardedFor, &trusted(nets))
    }

    fn fwd(peer: &str, lines: &[&str], nets: &[&str]) -> IpAddr {
        let h = headers(FORWARDED, lines);
        client_address(ip(peer), &h, ProxyHeader::Forwarded, &trusted(nets))
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_the_header_says() {
        assert_eq!(
            xff("198.51.100.9", &["203.0.113.1"], &[]),
            ip("198.51.100.9")
        );
        assert_eq!(
            xff("198.51.100.9", &["203.0.113.1"], &["10.0.0.0/8"]),
            ip("198.51.100.9")
        );
    }

    #[test]
    fn walks_from_the_right_past_trusted_hops() {
        let nets = ["10.0.0.0/8"];
        // client 203.0.113.7 → proxy 10.0.0.2 → proxy 10.0.0.1 (peer)
        assert_eq!(
            xff("10.0.0.1", &["203.0.113.7, 10.0.0.2"], &nets),
            ip("203.0.113.7")
        );
        // A forged hop left of what the first proxy wrote is never reached.
        assert_eq!(
            xff("10.0.0.1", &["6.6.6.6, 203.0.113.7, 10.0.0.2"], &nets),
            ip("203.0.113.7")
        );
        // Field lines are one list: the last line holds the nearest hops.
        assert_eq!(
            xff("10.0.0.1", &["6.6.6.6", "203.0.113.7, 10.0.0.2"], &nets),
            ip("203.0.113.7")
        );
        assert_eq!(
            xff("10.0.0.1", &["203.0.113.7", "10.0.0.2"], &nets),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn all_trusted_or_no_header_keys_the_leftmost_trusted_hop() {
        let nets = ["10.0.0.0/8"];
        assert_eq!(xff("10.0.0.1", &[], &nets), ip("10.0.0.1"));
        assert_eq!(
            xff("10.0.0.1", &["10.0.0.3, 10.0.0.2"], &nets),
            ip("10.0.0.3")
        );
    }

    #[test]
    fn an_entry_that_is_no_address_stops_at_the_proxy_that_wrote_it() {
        let nets = ["10.0.0.0/8"];
        assert_eq!(
            xff("10.0.0.1", &["203.0.113.7, garbage"], &nets),
            ip("10.0.0.1")
        );
        assert_eq!(
            xff("10.0.0.1", &["203.0.113.7, garbage, 10.0.0.2"], &nets),
            ip("10.0.0.2")
        );
        assert_eq!(xff("10.0.0.1", &[""], &nets), ip("10.0.0.1"));
        assert_eq!(fwd("10.0.0.1", &["for=unknown"], &nets), ip("10.0.0.1"));
        assert_eq!(
            fwd("10.0.0.1", &["for=_hidden, for=10.0.0.2"], &nets),
            ip("10.0.0.2")
        );
        assert_eq!(fwd("10.0.0.1", &["proto=https"], &nets), ip("10.0.0.1"));
        assert_eq!(
            fwd("10.0.0.1", &["for=1.2.3.4;for=5.6.7.8"], &nets),
            ip("10.0.0.1")
        );
        assert_eq!(
            fwd("10.0.0.1", &["for=\"unterminated"], &nets),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn xff_entries_with_ports_and_brackets() {
        let nets = ["10.0.0.0/8"];
        assert_eq!(
            xff("10.0.0.1", &[" 203.0.113.7:5555 "], &nets),
            ip("203.0.113.7")
        );
        assert_eq!(xff("10.0.0.1", &["2001:db8::1"], &nets), ip("2001:db8::1"));
        assert_eq!(
            xff("10.0.0.1", &["[2001:db8::1]"], &nets),
            ip("2001:db8::1")
        );
        assert_eq!(
            xff("10.0.0.1", &["[2001:db8::1]:443"], &nets),
            ip("2001:db8::1")
        );
    }

    #[test]
    fn forwarded_syntax() {
        let nets = ["10.0.0.0/8", "2001:db8:ffff::/48"];
        assert_eq!(
            fwd(
                "10.0.0.1",
                &["for=192.0.2.60;proto=http;by=203.0.113.43"],
                &nets
            ),
            ip("192.0.2.60")
        );
        assert_eq!(
            fwd("10.0.0.1", &["For=\"[2001:db8:cafe::17]:4711\""], &nets),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            fwd(
                "10.0.0.1",
                &["for=192.0.2.43, for=\"[2001:db8:ffff::1]\""],
                &nets
            ),
            ip("192.0.2.43")
        );
        // A comma or semicolon inside a quoted value splits nothing.
        assert_eq!(
            fwd(
                "10.0.0.1",
                &["for=192.0.2.43;ext=\"a,b;c\", for=10.0.0.9"],
                &nets
            ),
            ip("192.0.2.43")
        );
        assert_eq!(
            fwd("10.0.0.1", &["for=\"192.0.2.\\44\""], &nets),
            ip("192.0.2.44")
        );
        assert_eq!(
            fwd("10.0.0.1", &["for = 192.0.2.5 ; proto=http"], &nets),
            ip("192.0.2.5")
        );
    }

    #[test]
    fn ipv4_mapped_addresses_are_ipv4() {
        assert_eq!(canonical(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        assert!(trusted(&["192.0.2.0/24"]).contains(ip("::ffff:192.0.2.1")));
        assert_eq!(
            xff("::ffff:10.0.0.1", &["203.0.113.7"], &["10.0.0.0/8"]),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn ipv4_fast_path_edges() {
        for s in ["0.0.0.0", "255.255.255.255", "10.1.3.231", "1.22.133.4"] {
            assert_eq!(parse_ipv4(s.as_bytes()), Some(s.parse().unwrap()), "{s}");
        }
        for s in [
            "",
            "1.2.3",
            "1.2.3.4.",
            "1.2.3.4.5",
            "256.1.1.1",
            "01.1.1.1",
            "1.1.1.00",
            "1234.1.1.1",
            "1..2.3",
            " 1.2.3.4",
            "1.2.3.4:80",
            "+1.2.3.4",
            "1.2.3.a",
        ] {
            assert_eq!(parse_ipv4(s.as_bytes()), None, "{s}");
            assert_eq!(parse_ipv4(s.as_bytes()), s.parse().ok(), "{s}");
        }
    }

    #[test]
    fn prefixes() {
        assert_eq!(
            prefix(ip("2001:db8:1:2:aaaa::1"), 32, 64),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            prefix(ip("2001:db8:1:2:aaaa::1"), 32, 128),
            ip("2001:db8:1:2:aaaa::1")
        );
        assert_eq!(prefix(ip("2001:db8:1:2:aaaa::1"), 32, 0), ip("::"));
        assert_eq!(
            prefix(ip("2001:db8:1:2:aaaa::1"), 32, 48),
            ip("2001:db8:1::")
        );
        assert_eq!(prefix(ip("192.0.2.77"), 32, 64), ip("192.0.2.77"));
        assert_eq!(prefix(ip("192.0.2.77"), 24, 64), ip("192.0.2.0"));
        assert_eq!(prefix(ip("192.0.2.77"), 0, 64), ip("0.0.0.0"));
        assert_eq!(prefix(ip("::ffff:192.0.2.77"), 32, 64), ip("192.0.2.77"));
    }

    proptest::proptest! {
        /// The dotted-quad fast path reads what the standard library reads: the same address
        /// when it answers, and an answer for every dotted quad the standard library accepts.
        #[test]
        fn ipv4_fast_path_agrees_with_std(
            s in "[0-9.]{0,20}|(25[0-9]|2[0-4][0-9]|1?[0-9]{1,2}|0[0-9]{1,2})(\\.(25[0-9]|2[0-4][0-9]|1?[0-9]{1,2}|0[0-9]{1,2})){3}[.:0-9 ]{0,2}",
        ) {
            let std = s.parse::<Ipv4Addr>().ok();
            proptest::prop_assert_eq!(parse_ipv4(s.as_bytes()), std);
        }

        /// The precomputed masks test membership as ipnet does.
        #[test]
        fn trusted_masks_agree_with_ipnet(
            net in proptest::array::uniform16(proptest::prelude::any::<u8>()),
            len in 0u8..=128,
            addr in proptest::array::uniform16(proptest::prelude::any::<u8>()),
            v4 in proptest::prelude::any::<bool>(),
        ) {
            let (net, addr): (IpNet, IpAddr) = if v4 {
                let n = core::net::Ipv4Addr::new(net[0], net[1], net[2], net[3]);
                let a = IpAddr::from([addr[0], addr[1], addr[2], addr[3]]);
                (ipnet::Ipv4Net::new(n, len % 33).unwrap().into(), a)
            } else {
                (ipnet::Ipv6Net::new(Ipv6Addr::from(net), len).unwrap().into(), IpAddr::from(addr))
            };
            // The same address inside the net, to exercise both answers.
            let inside = match (net, addr) {
                (IpNet::V4(n), IpAddr::V4(a)) => IpAddr::V4((u32::from(n.network()) | (u32::from(a) & !u32::from(n.netmask()))).into()),
                (IpNet::V6(n), IpAddr::V6(a)) => IpAddr::V6((u128::from(n.network()) | (u128::from(a) & !u128::from(n.netmask()))).into()),
                _ => unreachable!(),
            };
            let trusted = TrustedProxies::new(vec![net]);
            for a in [addr, inside] {
                proptest::prop_assert_eq!(trusted.contains_canonical(canonical(a)), net.contains(&canonical(a)));
            }
        }

        /// Whatever a client writes into either header, the walk never panics and never
        /// returns a trusted proxy's address past an untrusted hop; with an untrusted peer
        /// it returns the peer.
        #[test]
        fn any_header_bytes(bytes in proptest::collection::vec(0x20u8..0x7f, 0..80), last in 0u8..255) {
            let Ok(value) = HeaderValue::from_bytes(&bytes) else { return Ok(()) };
            for (name, kind) in [(X_FORWARDED_FOR, ProxyHeader::XForwardedFor), (FORWARDED, ProxyHeader::Forwarded)] {
                let mut h = HeaderMap::new();
                h.append(name, value.clone());
                let nets = trusted(&["10.0.0.0/8"]);
                let peer = IpAddr::from([198, 51, 100, last]);
                proptest::prop_assert_eq!(client_address(peer, &h, kind, &nets), peer);
                let _ = client_address(ip("10.0.0.1"), &h, kind, &nets);
            }
        }
    }
}
