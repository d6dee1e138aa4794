//! The URL guard of the browser: which URLs a page may load.
//!
//! One [`UrlPolicy`] is compiled from the `browser_navigate` rule's
//! parameters (`url_allow`, `url_deny`, `block_private_networks`) and decides
//! every request the browser makes, not only the URL given to `navigate`:
//! redirects, sub-resources, `fetch()` from scripts. Deciding a host name
//! takes its addresses, so the caller resolves the name first
//! ([`UrlPolicy::check`] then [`UrlPolicy::check_addresses`]) and a name
//! that points at a private address is caught too.
//!
//! The rules, in the reference's order and with its codes:
//! - with any parameter set, only `http(s)` URLs (`url_not_allowed`);
//! - a URL matching a `url_deny` pattern (`url_not_allowed`), or none of a
//!   non-empty `url_allow` (`url_not_allowed`); patterns are shell globs on
//!   the whole URL, as Python's `fnmatchcase`;
//! - a malformed URL (`url_invalid`, 400; `navigate`'s input only);
//! - a loopback, link-local or private address, written in the URL or
//!   resolved from its host name (`url_denied`); with
//!   `block_private_networks: true` a resolved one is `url_not_allowed`, as
//!   in the reference. `block_private_networks: false`, set explicitly, lets
//!   the browser reach such addresses (the reference has no way to: its
//!   literal-address check always applies).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use abx_wire::api::Fault;
use abx_wire::endpoints::Param;
use globset::{Glob, GlobBuilder, GlobMatcher};

use super::super::rules::AuditMode;
use super::super::{Denial, EffectiveRule, ParamValue};

/// Why a URL is refused: the denial to answer with and the rule that decided.
#[derive(Debug, Clone, PartialEq)]
pub struct UrlRefusal {
    /// The refusal, with the reference's code, status and message.
    pub denial: Denial,
    /// Which rule decided: `url_deny:<pattern>`, `url_allow`, `scheme`,
    /// `private_address` or `block_private_networks`.
    pub rule: String,
}

impl UrlRefusal {
    fn new(fault: Fault, message: impl Into<String>, rule: impl Into<String>) -> Self {
        UrlRefusal { denial: Denial::new(fault, message), rule: rule.into() }
    }

    fn invalid() -> Self {
        UrlRefusal { denial: Denial::new(Fault::UrlInvalid, "Invalid URL"), rule: "url".into() }
    }

    /// A connection that carries neither TLS nor HTTP (the browser's proxy
    /// cannot tell what it would reach).
    pub fn unknown_protocol() -> Self {
        UrlRefusal::new(Fault::UrlNotAllowed, "Only http(s) and ws(s) connections are allowed", "scheme")
    }
}

/// A URL whose text passed the policy; its host still has to be decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// Not a network request (`data:`, `blob:`, `about:`): nothing to decide.
    None,
    /// An address written in the URL, already decided.
    Address(IpAddr),
    /// A name to resolve, with the port to resolve it for.
    Name(String, u16),
}

/// The compiled URL rules of the browser.
#[derive(Debug, Clone)]
pub struct UrlPolicy {
    allow: Vec<GlobMatcher>,
    /// The origin part of each allow pattern (`https://*.example.com` of
    /// `https://*.example.com/docs/*`): what a TLS tunnel is decided by.
    allow_origins: Vec<GlobMatcher>,
    deny: Vec<(String, GlobMatcher)>,
    block_private: Option<bool>,
    /// Whether refusals are written to the audit log (the rule's `audit` is not `off`).
    audit: bool,
}

/// The origin part of an allow pattern: up to the first `/` after `://`
/// (the whole pattern when it names no path); `None` without a `://`.
fn origin_part(pattern: &str) -> Option<&str> {
    let (_, rest) = pattern.split_once("://")?;
    let end = pattern.len() - rest.len() + rest.find('/').unwrap_or(rest.len());
    Some(&pattern[..end])
}

impl Default for UrlPolicy {
    /// No patterns, private addresses refused, refusals audited.
    fn default() -> Self {
        UrlPolicy::new(&[], &[], None)
    }
}

fn fnmatch(pattern: &str) -> Option<GlobMatcher> {
    // fnmatchcase: `*` crosses `/`, no brace alternatives, case-sensitive.
    let glob = GlobBuilder::new(pattern).literal_separator(false).backslash_escape(false).build();
    glob.or_else(|_| Glob::new(&globset::escape(pattern))).ok().map(|g| g.compile_matcher())
}

impl UrlPolicy {
    /// The policy of `rule` (the `browser_navigate` endpoint's).
    pub fn from_rule(rule: &EffectiveRule) -> Self {
        let strings = |key| match rule.param(key) {
            Some(ParamValue::Strings(values)) => values.clone(),
            _ => Vec::new(),
        };
        let block_private = match rule.param(Param::BlockPrivateNetworks) {
            Some(ParamValue::Bool(on)) => Some(*on),
            _ => None,
        };
        let mut policy = Self::new(&strings(Param::UrlAllow), &strings(Param::UrlDeny), block_private);
        policy.audit = rule.audit != AuditMode::Off;
        policy
    }

    /// A policy from its parameters (`None`: `block_private_networks` unset).
    pub fn new(allow: &[String], deny: &[String], block_private: Option<bool>) -> Self {
        UrlPolicy {
            allow: allow.iter().filter_map(|p| fnmatch(p)).collect(),
            allow_origins: allow.iter().filter_map(|p| fnmatch(origin_part(p).unwrap_or(p))).collect(),
            deny: deny.iter().filter_map(|p| fnmatch(p).map(|m| (p.clone(), m))).collect(),
            block_private,
            audit: true,
        }
    }

    /// Whether refusals are written to the audit log.
    pub fn audits(&self) -> bool {
        self.audit
    }

    /// Whether any parameter is set (the reference then insists on http(s)).
    fn configured(&self) -> bool {
        !self.allow.is_empty() || !self.deny.is_empty() || self.block_private.is_some()
    }

    /// Whether private and loopback addresses are allowed (`block_private_networks: false`).
    pub fn allows_private(&self) -> bool {
        self.block_private == Some(false)
    }

    /// Decides the text of `url` as `navigate` was given it: the reference's
    /// syntax checks (`url_invalid`, 400) on top of [`UrlPolicy::check`].
    ///
    /// # Errors
    /// The refusal and the rule that decided.
    pub fn check_requested(&self, url: &str) -> Result<Host, UrlRefusal> {
        if self.configured() {
            let host = self.check(url)?;
            well_formed(url)?;
            return Ok(host);
        }
        well_formed(url)?;
        self.check(url)
    }

    /// Decides the text of a URL the browser is about to load; what is left
    /// to decide is the host's addresses.
    ///
    /// # Errors
    /// The refusal and the rule that decided.
    pub fn check(&self, url: &str) -> Result<Host, UrlRefusal> {
        let parsed = url::Url::parse(url);
        let scheme = parsed.as_ref().map(url::Url::scheme).unwrap_or("");
        if !matches!(scheme, "http" | "https" | "ws" | "wss") {
            let local = matches!(scheme, "data" | "blob" | "about");
            if local && !self.configured() {
                return Ok(Host::None);
            }
            let message = if local || scheme.is_empty() || self.configured() {
                "Only http(s) URLs are allowed".to_string()
            } else {
                format!("The {scheme}: scheme is not allowed")
            };
            return Err(UrlRefusal::new(Fault::UrlNotAllowed, message, "scheme"));
        }
        if let Some((pattern, _)) = self.deny.iter().find(|(_, m)| m.is_match(url)) {
            return Err(UrlRefusal::new(
                Fault::UrlNotAllowed,
                "URL is denied by policy",
                format!("url_deny:{pattern}"),
            ));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|m| m.is_match(url)) {
            return Err(UrlRefusal::new(Fault::UrlNotAllowed, "URL is not in the allow-list", "url_allow"));
        }
        let Ok(parsed) = parsed else { return Err(UrlRefusal::invalid()) };
        let port = parsed.port_or_known_default().unwrap_or(80);
        match parsed.host() {
            None => Err(UrlRefusal::invalid()),
            Some(host) => self.host(host, port),
        }
    }

    /// Decides a TLS tunnel to `host` (`name`, `1.2.3.4` or `[::1]`) and
    /// `port`, whose URL the encryption hides: by its origin, as
    /// `https://host[:port]/` and `wss://host[:port]/`. A deny pattern that
    /// matches the origin refuses it; with allow patterns, the origin part
    /// of one (`https://*.example.com` of `https://*.example.com/docs/*`)
    /// must match. The whole URL of each request the page makes is decided
    /// by the request interception, which sees it.
    ///
    /// # Errors
    /// The refusal and the rule that decided.
    pub fn check_origin(&self, host: &str, port: u16) -> Result<Host, UrlRefusal> {
        let parsed = url::Host::parse(host).map_err(|_| UrlRefusal::invalid())?;
        let authority = if port == 443 { parsed.to_string() } else { format!("{parsed}:{port}") };
        let origins = [format!("https://{authority}"), format!("wss://{authority}")];
        let with_slash = origins.clone().map(|o| o + "/");
        if let Some((pattern, _)) = self.deny.iter().find(|(_, m)| with_slash.iter().any(|o| m.is_match(o))) {
            return Err(UrlRefusal::new(
                Fault::UrlNotAllowed,
                "URL is denied by policy",
                format!("url_deny:{pattern}"),
            ));
        }
        let allowed = |m: &GlobMatcher| origins.iter().chain(&with_slash).any(|o| m.is_match(o));
        if !self.allow.is_empty() && !self.allow_origins.iter().any(allowed) {
            return Err(UrlRefusal::new(Fault::UrlNotAllowed, "URL is not in the allow-list", "url_allow"));
        }
        match &parsed {
            url::Host::Domain(name) => self.host(url::Host::Domain(name.as_str()), port),
            url::Host::Ipv4(ip) => self.host(url::Host::Ipv4(*ip), port),
            url::Host::Ipv6(ip) => self.host(url::Host::Ipv6(*ip), port),
        }
    }

    /// Decides a URL's host: an address written in it now, a name later by
    /// what it resolves to.
    fn host(&self, host: url::Host<&str>, port: u16) -> Result<Host, UrlRefusal> {
        let host = match host {
            url::Host::Ipv4(ip) => Host::Address(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => Host::Address(IpAddr::V6(ip)),
            url::Host::Domain(name) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                if name == "localhost" || name.ends_with(".localhost") {
                    Host::Address(IpAddr::V4(Ipv4Addr::LOCALHOST))
                } else {
                    Host::Name(name, port)
                }
            }
        };
        if let Host::Address(ip) = host {
            if !self.allows_private() && !is_public(ip) {
                return Err(literal_refusal());
            }
        }
        Ok(host)
    }

    /// Decides the addresses a host name resolved to.
    ///
    /// # Errors
    /// `url_denied` (or `url_not_allowed` under `block_private_networks:
    /// true`) when one of them is not a public address.
    pub fn check_addresses(&self, name: &str, addresses: &[IpAddr]) -> Result<(), UrlRefusal> {
        if self.allows_private() {
            return Ok(());
        }
        match addresses.iter().find(|ip| !is_public(**ip)) {
            None => Ok(()),
            Some(_) if self.block_private == Some(true) => Err(UrlRefusal::new(
                Fault::UrlNotAllowed,
                "URL resolves to a private network",
                "block_private_networks",
            )),
            Some(ip) => Err(UrlRefusal::new(
                Fault::UrlDenied,
                format!("{name} resolves to {ip}: loopback, link-local and private addresses are not allowed"),
                "private_address",
            )),
        }
    }
}

/// The reference's syntax checks of a URL given to `navigate`: no control
/// characters or spaces, `http(s)`, a host, no port 0.
fn well_formed(url: &str) -> Result<(), UrlRefusal> {
    let controls = url.chars().any(|c| (c as u32) < 33 || c as u32 == 127);
    match url::Url::parse(url) {
        Ok(parsed)
            if !controls
                && matches!(parsed.scheme(), "http" | "https")
                && parsed.host().is_some()
                && parsed.port() != Some(0) =>
        {
            Ok(())
        }
        _ => Err(UrlRefusal::invalid()),
    }
}

fn literal_refusal() -> UrlRefusal {
    UrlRefusal::new(Fault::UrlDenied, "Loopback, link-local and private addresses are not allowed", "private_address")
}

/// Whether `ip` is a public unicast address: not loopback, link-local,
/// private, shared, reserved, documentation, multicast or unspecified
/// (IPv4-mapped and NAT64 IPv6 forms are decided by their IPv4 address).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let segments = ip.segments();
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [a, b] = segments[6].to_be_bytes();
        let [c, d] = segments[7].to_be_bytes();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    if segments[0] == 0x2002 {
        // 6to4: the IPv4 address it tunnels to is in the next 32 bits (2002:7f00:1:: is 127.0.0.1).
        let [a, b] = segments[1].to_be_bytes();
        let [c, d] = segments[2].to_be_bytes();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
        || segments[0] == 0xfec0
        || (segments[0] == 0x2001 && segments[1] == 0xdb8)
        || segments[..6] == [0, 0, 0, 0, 0, 0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn refusal(result: Result<Host, UrlRefusal>) -> (&'static str, u16, String, String) {
        let r = result.expect_err("refused");
        (r.denial.code(), r.denial.status(), r.denial.to_string(), r.rule)
    }

    #[test]
    fn without_parameters_only_malformed_and_private_urls_are_refused() {
        let policy = UrlPolicy::default();
        assert_eq!(policy.check_requested("https://example.com/x"), Ok(Host::Name("example.com".into(), 443)));
        assert_eq!(refusal(policy.check_requested("ftp://x")).0, "url_invalid");
        assert_eq!(refusal(UrlPolicy::new(&[], &[], Some(true)).check_requested("ftp://x")).0, "url_not_allowed");
        assert_eq!(refusal(policy.check_requested("http://")).1, 400);
        assert_eq!(refusal(policy.check_requested("http://a b/")).0, "url_invalid");
        assert_eq!(refusal(policy.check_requested("http://x:0/")).0, "url_invalid");
        let (code, status, message, rule) = refusal(policy.check_requested("http://127.0.0.1:8080/"));
        assert_eq!((code, status, rule.as_str()), ("url_denied", 403, "private_address"));
        assert_eq!(message, "Loopback, link-local and private addresses are not allowed");
        for url in [
            "http://[2002:7f00:1::]/",
            "http://[2002:a00:1::]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[64:ff9b::a00:1]/",
        ] {
            assert_eq!(refusal(policy.check(url)).3, "private_address", "{url}: a tunnelled private IPv4 address");
        }
        assert!(policy.check("http://[2002:808:808::]/").is_ok(), "6to4 of a public address");
        for url in ["http://localhost/", "http://a.localhost./", "http://[::1]/", "http://169.254.169.254/latest"] {
            assert_eq!(refusal(policy.check(url)).0, "url_denied", "{url}");
        }
        assert_eq!(refusal(policy.check("http://[::ffff:10.0.0.1]/")).0, "url_denied");
        assert_eq!(policy.check("data:text/plain,hi"), Ok(Host::None));
        assert_eq!(refusal(policy.check("file:///etc/passwd")).3, "scheme");
    }

    #[test]
    fn deny_and_allow_patterns_match_the_whole_url_as_fnmatch() {
        let policy = UrlPolicy::new(&strings(&["https://*.example.com/*"]), &strings(&["*secret*"]), None);
        assert!(policy.check("https://a.example.com/x/y").is_ok());
        let (code, _, message, rule) = refusal(policy.check("https://a.example.com/secret"));
        assert_eq!(
            (code, message.as_str(), rule.as_str()),
            ("url_not_allowed", "URL is denied by policy", "url_deny:*secret*")
        );
        let (_, _, message, rule) = refusal(policy.check("https://other.org/"));
        assert_eq!((message.as_str(), rule.as_str()), ("URL is not in the allow-list", "url_allow"));
        assert_eq!(refusal(policy.check("data:text/plain,x")).2, "Only http(s) URLs are allowed");
    }

    #[test]
    fn resolved_addresses_are_decided_by_the_private_switch() {
        let public: IpAddr = "93.184.216.34".parse().expect("ip");
        let private: IpAddr = "10.1.2.3".parse().expect("ip");
        let default = UrlPolicy::default();
        assert_eq!(default.check_addresses("a.test", &[public]), Ok(()));
        let r = default.check_addresses("a.test", &[public, private]).expect_err("private");
        assert_eq!((r.denial.code(), r.rule.as_str()), ("url_denied", "private_address"));
        assert!(r.denial.to_string().starts_with("a.test resolves to 10.1.2.3"));
        let strict = UrlPolicy::new(&[], &[], Some(true));
        let r = strict.check_addresses("a.test", &[private]).expect_err("private");
        assert_eq!(
            (r.denial.code(), r.denial.to_string().as_str()),
            ("url_not_allowed", "URL resolves to a private network")
        );
        let open = UrlPolicy::new(&[], &[], Some(false));
        assert_eq!(open.check_addresses("a.test", &[private]), Ok(()));
        assert_eq!(open.check("http://127.0.0.1:9/"), Ok(Host::Address(IpAddr::V4(Ipv4Addr::LOCALHOST))));
    }

    #[test]
    fn tunnels_are_decided_by_origin() {
        let policy = UrlPolicy::new(
            &strings(&["https://*.example.com/docs/*", "*://open.test/*"]),
            &strings(&["*://evil.example.com/*", "https://a.example.com/private/*"]),
            Some(false),
        );
        assert_eq!(policy.check_origin("a.example.com", 443), Ok(Host::Name("a.example.com".into(), 443)));
        assert!(policy.check_origin("open.test", 8443).is_err(), "the port is part of the origin");
        assert!(policy.check_origin("open.test", 443).is_ok());
        let r = policy.check_origin("evil.example.com", 443).expect_err("denied origin");
        assert_eq!(r.rule, "url_deny:*://evil.example.com/*");
        let r = policy.check_origin("other.org", 443).expect_err("not allowed");
        assert_eq!(r.rule, "url_allow");
        let open = UrlPolicy::new(&[], &strings(&["*127.0.0.1:9999*"]), Some(false));
        assert_eq!(open.check_origin("[::1]", 443), Ok(Host::Address("::1".parse().expect("ip"))));
        assert!(open.check_origin("127.0.0.1", 9999).is_err());
        let strict = UrlPolicy::default();
        assert_eq!(strict.check_origin("127.0.0.1", 443).expect_err("loopback").rule, "private_address");
        assert_eq!(strict.check_origin("localhost", 8080).expect_err("loopback").rule, "private_address");
        assert!(strict.check_origin("bad host", 443).is_err());
        assert_eq!(origin_part("https://*.example.com/docs/*"), Some("https://*.example.com"));
        assert_eq!(origin_part("https://example.com"), Some("https://example.com"));
        assert_eq!(origin_part("*example*"), None);
    }

    #[test]
    fn address_classes() {
        for ip in ["8.8.8.8", "2606:4700::1111", "1.1.1.1"] {
            assert!(is_public(ip.parse().expect("ip")), "{ip}");
        }
        for ip in [
            "0.0.0.0",
            "127.0.0.2",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip.parse().expect("ip")), "{ip}");
        }
    }
}
