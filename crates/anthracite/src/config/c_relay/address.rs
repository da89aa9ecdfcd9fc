//! Addresses as carbon-c-relay reads them (`router_validate_address`): `host`, `host:port`,
//! `[v6]`, `[v6]:port` or `:port`, the port after the *last* colon (so an unbracketed IPv6
//! address loses its last group to the port), resolved first as a numeric address and then
//! through the resolver (`getaddrinfo`, the C library's order of results).

use std::ffi::{CStr, CString};
use std::net::{IpAddr, SocketAddr};

use crate::router::c_relay::ring::strtol_whole;

/// carbon-c-relay's default port (`GRAPHITE_PORT`).
pub(crate) const GRAPHITE_PORT: u16 = 2003;

/// TCP or UDP, for the resolver's hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SockKind {
    Stream,
    Datagram,
}

/// A parsed address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Address {
    /// The host as written without brackets (`None`: any interface).
    pub ip: Option<String>,
    pub port: u16,
    /// What it resolved to, in the resolver's order (empty: it did not resolve).
    pub addrs: Vec<SocketAddr>,
    /// It is a numeric address (no name to resolve again later).
    pub numeric: bool,
}

/// `router_validate_address` on `text`; `Err` carries carbon-c-relay's message. `offline`
/// resolves numeric addresses only (no name service: the fuzz target's mode).
pub(crate) fn parse(text: &str, kind: SockKind, offline: bool) -> Result<Address, String> {
    let mut ip = text;
    let mut port = GRAPHITE_PORT;
    let mut lastcolon = text.rfind(':');
    if text.ends_with(']') {
        lastcolon = None;
    }
    if let Some(c) = lastcolon {
        let p = &text[c + 1..];
        let lport = strtol_whole(p);
        match lport {
            Some(v) if (1..=i64::from(u16::MAX)).contains(&v) => port = v as u16,
            _ => return Err(format!("invalid port number '{}'", truncate(p, 20))),
        }
        ip = &text[..c];
    }
    if let Some(inner) = ip.strip_prefix('[') {
        if let Some(host) = inner.strip_suffix(']') {
            ip = host;
        } else {
            return Err("expected ']'".into());
        }
    }
    // `:port`: any interface.
    let ip = (lastcolon != Some(0)).then(|| ip.to_string());
    let (addrs, numeric) = resolve(ip.as_deref(), port, kind, offline);
    Ok(Address {
        ip,
        port,
        addrs,
        numeric,
    })
}

/// The error text of carbon-c-relay's fixed 40-byte buffer, roughly: long ports are cut.
fn truncate(s: &str, max: usize) -> &str {
    let mut cut = s.len().min(max);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// `getaddrinfo` as carbon-c-relay calls it: numeric first (`AI_NUMERICHOST`, passive for
/// the any address), then through the resolver.
fn resolve(ip: Option<&str>, port: u16, kind: SockKind, offline: bool) -> (Vec<SocketAddr>, bool) {
    let numeric = getaddrinfo(
        ip,
        port,
        kind,
        libc::AI_NUMERICHOST | libc::AI_NUMERICSERV | libc::AI_PASSIVE,
    );
    if !numeric.is_empty() || offline {
        return (numeric, true);
    }
    (getaddrinfo(ip, port, kind, libc::AI_NUMERICSERV), false)
}

fn getaddrinfo(ip: Option<&str>, port: u16, kind: SockKind, flags: libc::c_int) -> Vec<SocketAddr> {
    let Ok(service) = CString::new(port.to_string()) else {
        return Vec::new();
    };
    let node = match ip.map(CString::new) {
        Some(Ok(c)) => Some(c),
        Some(Err(_)) => return Vec::new(),
        None => None,
    };
    // SAFETY: an all-zero addrinfo is a valid "no hints" value, the fields are set below.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = libc::AF_UNSPEC;
    (hints.ai_socktype, hints.ai_protocol) = match kind {
        SockKind::Stream => (libc::SOCK_STREAM, libc::IPPROTO_TCP),
        SockKind::Datagram => (libc::SOCK_DGRAM, libc::IPPROTO_UDP),
    };
    hints.ai_flags = flags;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: node and service are NUL-terminated strings that outlive the call, hints is
    // initialised, res receives a list we free below.
    let rc = unsafe {
        libc::getaddrinfo(
            node.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            service.as_ptr(),
            &hints,
            &mut res,
        )
    };
    if rc != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = res;
    while !cur.is_null() {
        // SAFETY: `cur` is an element of the list getaddrinfo returned, not yet freed.
        let ai = unsafe { &*cur };
        if let Some(addr) = sockaddr(ai) {
            out.push(addr);
        }
        cur = ai.ai_next;
    }
    // SAFETY: `res` is the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(res) };
    out
}

fn sockaddr(ai: &libc::addrinfo) -> Option<SocketAddr> {
    if ai.ai_addr.is_null() {
        return None;
    }
    match ai.ai_family {
        libc::AF_INET => {
            // SAFETY: an AF_INET entry's address is a sockaddr_in.
            let sin = unsafe { &*ai.ai_addr.cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 entry's address is a sockaddr_in6.
            let sin6 = unsafe { &*ai.ai_addr.cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(
                IpAddr::V6(ip),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

/// `saddr_ntop`: the address as text (`inet_ntop`).
pub(crate) fn ntop(addr: &SocketAddr) -> String {
    addr.ip().to_string()
}

/// The C library's `glob(3)` (sorted, as carbon-c-relay calls it without flags): the paths
/// `pattern` matches, or `None` when it matches nothing or fails.
pub(crate) fn glob(pattern: &str) -> Option<Vec<String>> {
    let pat = CString::new(pattern).ok()?;
    // SAFETY: an all-zero glob_t is how glob(3) expects a fresh one.
    let mut g: libc::glob_t = unsafe { std::mem::zeroed() };
    // SAFETY: pat is NUL-terminated, g is a fresh glob_t freed below.
    let rc = unsafe { libc::glob(pat.as_ptr(), 0, None, &mut g) };
    let mut out = Vec::new();
    if rc == 0 {
        for i in 0..g.gl_pathc {
            // SAFETY: glob filled gl_pathv with gl_pathc NUL-terminated strings.
            let p = unsafe { CStr::from_ptr(*g.gl_pathv.add(i)) };
            out.push(p.to_string_lossy().into_owned());
        }
    }
    // SAFETY: g was filled by glob (or left zeroed on failure, which globfree accepts).
    unsafe { libc::globfree(&mut g) };
    (rc == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_the_last_colon_and_brackets_hold_v6() {
        let a = parse("127.0.0.1:2004", SockKind::Stream, false).expect("ok");
        assert_eq!(
            (a.ip.as_deref(), a.port, a.numeric),
            (Some("127.0.0.1"), 2004, true)
        );
        let a = parse("[::1]:5", SockKind::Stream, false).expect("ok");
        assert_eq!((a.ip.as_deref(), a.port), (Some("::1"), 5));
        let a = parse("[::1]", SockKind::Stream, false).expect("ok");
        assert_eq!((a.ip.as_deref(), a.port), (Some("::1"), GRAPHITE_PORT));
        // An unbracketed v6 address: the last group is the port.
        let a = parse("::1", SockKind::Stream, false).expect("ok");
        assert_eq!((a.ip.as_deref(), a.port), (Some(":"), 1));
        let a = parse(":2003", SockKind::Datagram, false).expect("ok");
        assert_eq!((a.ip, a.port), (None, 2003));
        assert!(!a.addrs.is_empty());
        assert_eq!(
            parse("h:70000", SockKind::Stream, false).expect_err("range"),
            "invalid port number '70000'"
        );
        assert_eq!(
            parse("[::1:5", SockKind::Stream, false).expect_err("bracket"),
            "expected ']'"
        );
    }
}
