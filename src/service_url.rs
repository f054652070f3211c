//! Service URLs for the binary protocol: `pulsar://host[:port][,host[:port]...]` and
//! `pulsar+ssl://...`.
//!
//! As in the upstream Java client (`ServiceURI`), the authority may list several brokers
//! separated by `,` or `;` (e.g. `pulsar://h1:6650,h2:6650`); each host without a port gets the
//! scheme's default port (6650 for `pulsar`, 6651 for `pulsar+ssl`). The scheme is matched
//! case-insensitively. IPv6 literals are written in brackets (`pulsar://[::1]:6650`).
//!
//! The same type parses the broker URLs a lookup answers with (`pulsar://127.0.0.1:6650`), see
//! [`ServiceUrl::from_broker_url`] and [`ServiceUrl::from_lookup_response`].
//!
//! Rejected, with [`Error::InvalidServiceUrl`] and the reason: an empty string, a missing or
//! unsupported scheme (`http://` and `https://` are the admin REST API's, not the binary
//! protocol's), a missing or malformed host, port 0 or a port above 65535, user info
//! (`user@host`), whitespace or control characters inside the URL, and a path other than
//! empty or `/`, a query or a fragment.

use std::fmt;
use std::str::FromStr;

use url::{Host, Url};

use crate::error::{Error, Result};

/// The default port of `pulsar://` URLs.
pub const DEFAULT_PORT: u16 = 6650;

/// The default port of `pulsar+ssl://` URLs.
pub const DEFAULT_TLS_PORT: u16 = 6651;

/// One broker endpoint of a [`ServiceUrl`]: a host name or IP address and a port.
///
/// `host` is normalised: domain names are lower-cased (and internationalised names
/// punycode-encoded), IPv6 addresses are stored without brackets (`::1`).
/// [`Display`](fmt::Display) writes `host:port`, bracketing IPv6 addresses (`[::1]:6650`), which is the
/// form `tokio::net::lookup_host` and `TcpStream::connect` accept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BrokerAddress {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port (never 0).
    pub port: u16,
}

impl BrokerAddress {
    /// Whether `host` is an IPv6 address (and needs brackets in a URL).
    fn is_ipv6(&self) -> bool {
        self.host.contains(':')
    }
}

impl fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ipv6() {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A parsed binary-protocol service URL: one or more brokers, plain or TLS.
///
/// [`Display`](fmt::Display) writes the normalised URL, e.g. `pulsar://host:6650` or
/// `pulsar+ssl://h1:6651,h2:6651` (explicit ports, no trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceUrl {
    tls: bool,
    hosts: Vec<BrokerAddress>,
}

fn invalid(url: &str, reason: impl Into<String>) -> Error {
    Error::InvalidServiceUrl {
        url: url.to_owned(),
        reason: reason.into(),
    }
}

const EXPECTED: &str = "binary protocol URLs are pulsar://host:port or pulsar+ssl://host:port";

impl ServiceUrl {
    /// Parses a service URL (surrounding whitespace is ignored).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidServiceUrl`] with the reason, for the cases listed in the
    /// [module documentation](self).
    pub fn parse(url: &str) -> Result<ServiceUrl> {
        let given = url;
        let url = url.trim();
        if url.is_empty() {
            return Err(invalid(given, "the service URL is empty"));
        }
        // The `url` crate would silently drop tabs and newlines; refuse them instead.
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(
                given,
                "the service URL contains whitespace or control characters",
            ));
        }

        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(given, format!("missing scheme; {EXPECTED}")));
        };
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "pulsar" => false,
            "pulsar+ssl" => true,
            "http" | "https" => {
                return Err(invalid(
                    given,
                    format!(
                        "`{scheme}://` URLs are for the admin REST API, not the binary protocol; \
                         {EXPECTED}"
                    ),
                ))
            }
            _ => {
                return Err(invalid(
                    given,
                    format!("unsupported scheme `{scheme}`; {EXPECTED}"),
                ))
            }
        };
        let default_port = if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT };

        // Split the authority (host list) from anything after it.
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if !(tail.is_empty() || tail == "/") {
            return Err(invalid(
                given,
                format!(
                    "a service URL must not have a path, query or fragment (found `{tail}`); \
                     {EXPECTED}"
                ),
            ));
        }
        if authority.is_empty() {
            return Err(invalid(given, "missing host"));
        }
        if authority.contains('@') {
            return Err(invalid(
                given,
                "user info (`user@host`) is not supported in a service URL; configure \
                 authentication separately",
            ));
        }

        let hosts = authority
            .split([',', ';'])
            .map(|entry| parse_host(given, entry, default_port))
            .collect::<Result<Vec<_>>>()?;
        Ok(ServiceUrl { tls, hosts })
    }

    /// Parses the URL of a single broker, such as the `brokerServiceUrl` of a lookup response
    /// (`pulsar://127.0.0.1:6650`). Same rules as [`ServiceUrl::parse`], and exactly one host.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidServiceUrl`] if the URL is invalid or names more than one host.
    pub fn from_broker_url(url: &str) -> Result<ServiceUrl> {
        let parsed = ServiceUrl::parse(url)?;
        if parsed.hosts.len() != 1 {
            return Err(invalid(
                url,
                format!(
                    "a broker URL must name exactly one host, found {}",
                    parsed.hosts.len()
                ),
            ));
        }
        Ok(parsed)
    }

    /// The broker a lookup (`CommandLookupTopicResponse`) or partitioned-metadata response
    /// points at, chosen like the Java client: the TLS URL (`brokerServiceUrlTls`) when the
    /// client uses TLS, otherwise the plain one (`brokerServiceUrl`). Absent and empty URLs are
    /// treated alike.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidServiceUrl`] if the URL needed is missing, invalid, names more than one
    /// host, or its scheme does not match `use_tls`.
    pub fn from_lookup_response(
        broker_service_url: Option<&str>,
        broker_service_url_tls: Option<&str>,
        use_tls: bool,
    ) -> Result<ServiceUrl> {
        let (url, field) = if use_tls {
            (broker_service_url_tls, "brokerServiceUrlTls")
        } else {
            (broker_service_url, "brokerServiceUrl")
        };
        let url = url.filter(|u| !u.trim().is_empty()).ok_or_else(|| {
            invalid(
                "",
                format!("the lookup response has no {field} (needed because use_tls = {use_tls})"),
            )
        })?;
        let parsed = ServiceUrl::from_broker_url(url)?;
        if parsed.tls != use_tls {
            return Err(invalid(
                url,
                format!(
                    "the lookup response's {field} has scheme `{}` but use_tls = {use_tls}",
                    parsed.scheme()
                ),
            ));
        }
        Ok(parsed)
    }

    /// The URL of the one broker `host`, with this URL's scheme (no re-parse: the host was
    /// validated when this URL was parsed).
    pub(crate) fn with_host(&self, host: BrokerAddress) -> ServiceUrl {
        ServiceUrl {
            tls: self.tls,
            hosts: vec![host],
        }
    }

    /// Whether the URL is `pulsar+ssl://` (the connection must use TLS).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The scheme, `pulsar` or `pulsar+ssl`.
    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "pulsar+ssl"
        } else {
            "pulsar"
        }
    }

    /// The brokers, in the order given (never empty; ports filled in with the default).
    pub fn hosts(&self) -> &[BrokerAddress] {
        &self.hosts
    }

    /// The first broker (a URL always has at least one). For a broker URL from a lookup
    /// response, the broker.
    pub fn first_host(&self) -> &BrokerAddress {
        &self.hosts[0]
    }
}

/// Parses one `host[:port]` entry of the host list with the `url` crate.
fn parse_host(given: &str, entry: &str, default_port: u16) -> Result<BrokerAddress> {
    if entry.is_empty() {
        return Err(invalid(given, "empty host in the host list"));
    }
    // The `url` crate would percent-decode `a%2Cb` into the host `a,b`, which no resolver
    // accepts and which reads as two hosts once printed; a host name never needs escapes.
    if entry.contains('%') {
        return Err(invalid(
            given,
            format!("percent-encoding is not allowed in a host (`{entry}`)"),
        ));
    }
    // `pulsar` is not a "special" scheme for the `url` crate, so it has no default port and
    // `port()` reports exactly what was written.
    let parsed = Url::parse(&format!("pulsar://{entry}")).map_err(|e| {
        let reason = match e {
            url::ParseError::InvalidPort => {
                format!("invalid port in `{entry}`: a port is a number from 1 to 65535")
            }
            url::ParseError::EmptyHost => format!("missing host in `{entry}`"),
            other => format!("invalid host `{entry}`: {other}"),
        };
        invalid(given, reason)
    })?;
    let host_str = match parsed.host_str() {
        Some(h) if !h.is_empty() => h,
        _ => return Err(invalid(given, format!("missing host in `{entry}`"))),
    };
    // Re-parse the (opaque) host with domain rules: lower-cases, validates, recognises IPs.
    let host = match Host::parse(host_str) {
        // Host names (RFC 1123, plus `_` as container names use): letters, digits, `-`, `.`,
        // `_`; internationalised names arrive here already in their ASCII (punycode) form.
        Ok(Host::Domain(d))
            if d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) =>
        {
            d
        }
        Ok(Host::Domain(d)) => {
            return Err(invalid(
                given,
                format!(
                    "invalid host `{d}`: a host name has only letters, digits, `-`, `.` and `_`"
                ),
            ))
        }
        Ok(Host::Ipv4(ip)) => ip.to_string(),
        Ok(Host::Ipv6(ip)) => ip.to_string(),
        Err(e) => return Err(invalid(given, format!("invalid host `{host_str}`: {e}"))),
    };
    let port = match parsed.port() {
        None => default_port,
        Some(0) => {
            return Err(invalid(
                given,
                format!("port 0 in `{entry}`: a port is a number from 1 to 65535"),
            ))
        }
        Some(p) => p,
    };
    Ok(BrokerAddress { host, port })
}

impl fmt::Display for ServiceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme())?;
        for (i, host) in self.hosts.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{host}")?;
        }
        Ok(())
    }
}

impl FromStr for ServiceUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        ServiceUrl::parse(s)
    }
}

impl TryFrom<&str> for ServiceUrl {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self> {
        ServiceUrl::parse(s)
    }
}

impl TryFrom<String> for ServiceUrl {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        ServiceUrl::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> ServiceUrl {
        ServiceUrl::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn reason(s: &str) -> String {
        match ServiceUrl::parse(s) {
            Err(Error::InvalidServiceUrl { url, reason }) => {
                assert_eq!(url, s, "the error names the URL as given");
                reason
            }
            Err(other) => panic!("{s:?}: unexpected error {other:?}"),
            Ok(u) => panic!("{s:?} should be rejected, got {u}"),
        }
    }

    fn addr(host: &str, port: u16) -> BrokerAddress {
        BrokerAddress {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn plain_with_and_without_port() {
        let u = parse("pulsar://localhost:6650");
        assert!(!u.is_tls());
        assert_eq!(u.scheme(), "pulsar");
        assert_eq!(u.hosts(), &[addr("localhost", 6650)]);
        assert_eq!(u.to_string(), "pulsar://localhost:6650");

        let u = parse("pulsar://broker.example.com");
        assert_eq!(u.hosts(), &[addr("broker.example.com", 6650)]);
        assert_eq!(u.to_string(), "pulsar://broker.example.com:6650");

        let u = parse("pulsar://host:7000/");
        assert_eq!(u.hosts(), &[addr("host", 7000)]);
        assert_eq!(u.to_string(), "pulsar://host:7000");
        assert_eq!(parse("pulsar://host:").hosts(), &[addr("host", 6650)]);
    }

    #[test]
    fn tls_default_port() {
        let u = parse("pulsar+ssl://broker");
        assert!(u.is_tls());
        assert_eq!(u.scheme(), "pulsar+ssl");
        assert_eq!(u.hosts(), &[addr("broker", 6651)]);
        assert_eq!(u.to_string(), "pulsar+ssl://broker:6651");
        assert_eq!(parse("pulsar+ssl://b:9999").hosts(), &[addr("b", 9999)]);
    }

    #[test]
    fn normalisation() {
        let u = parse("  PULSAR://Broker.Example.COM:6650/ \n");
        assert_eq!(u.to_string(), "pulsar://broker.example.com:6650");
        assert_eq!(u, parse("pulsar://broker.example.com"));
        assert_eq!(parse("Pulsar+SSL://h").to_string(), "pulsar+ssl://h:6651");
        let u: ServiceUrl = "pulsar://h".parse().unwrap();
        assert_eq!(ServiceUrl::try_from("pulsar://h:6650").unwrap(), u);
        assert_eq!(ServiceUrl::try_from(String::from("pulsar://h")).unwrap(), u);
        // Display round-trips.
        assert_eq!(parse(&u.to_string()), u);
    }

    #[test]
    fn ip_addresses() {
        let u = parse("pulsar://127.0.0.1:6650");
        assert_eq!(u.hosts(), &[addr("127.0.0.1", 6650)]);
        assert_eq!(u.first_host().to_string(), "127.0.0.1:6650");

        let u = parse("pulsar://[::1]:6660");
        assert_eq!(u.hosts(), &[addr("::1", 6660)]);
        assert_eq!(u.first_host().to_string(), "[::1]:6660");
        assert_eq!(u.to_string(), "pulsar://[::1]:6660");
        assert_eq!(parse("pulsar://[::1]").hosts(), &[addr("::1", 6650)]);
        let sock: std::net::SocketAddr = u.first_host().to_string().parse().unwrap();
        assert_eq!(sock.port(), 6660);

        let u = parse("pulsar://[fe80::1],[::1]:7000;10.0.0.1");
        assert_eq!(
            u.hosts(),
            &[
                addr("fe80::1", 6650),
                addr("::1", 7000),
                addr("10.0.0.1", 6650)
            ]
        );
    }

    #[test]
    fn multiple_hosts() {
        let u = parse("pulsar://h1:6650,h2:6650");
        assert_eq!(u.hosts(), &[addr("h1", 6650), addr("h2", 6650)]);
        assert_eq!(u.to_string(), "pulsar://h1:6650,h2:6650");

        let u = parse("pulsar+ssl://h1,h2:7001;h3/");
        assert_eq!(
            u.hosts(),
            &[addr("h1", 6651), addr("h2", 7001), addr("h3", 6651)]
        );
        assert_eq!(u.to_string(), "pulsar+ssl://h1:6651,h2:7001,h3:6651");
        assert_eq!(u.first_host(), &addr("h1", 6651));
    }

    #[test]
    fn rejects_empty() {
        assert!(reason("").contains("empty"));
        assert!(reason("   ").contains("empty"));
    }

    #[test]
    fn rejects_other_schemes() {
        let r = reason("http://localhost:8080");
        assert!(
            r.contains("pulsar://") && r.contains("pulsar+ssl://"),
            "{r}"
        );
        assert!(r.contains("binary protocol"), "{r}");
        assert!(reason("https://h").contains("binary protocol"));
        let r = reason("pulsar+tls://h");
        assert!(r.contains("unsupported scheme `pulsar+tls`"), "{r}");
        assert!(reason("ftp://h").contains("unsupported scheme"));
        assert!(reason("localhost:6650").contains("missing scheme"));
        assert!(reason("://h").contains("unsupported scheme"));
    }

    #[test]
    fn rejects_missing_host() {
        assert!(reason("pulsar://").contains("missing host"));
        assert!(reason("pulsar:///").contains("missing host"));
        assert!(reason("pulsar://:6650").contains("missing host"));
        assert!(reason("pulsar://h1,,h2").contains("empty host"));
        assert!(reason("pulsar://h1,").contains("empty host"));
    }

    #[test]
    fn rejects_bad_ports() {
        let r = reason("pulsar://h:0");
        assert!(r.contains("port 0"), "{r}");
        for bad in [
            "pulsar://h:65536",
            "pulsar://h:99999999",
            "pulsar://h:-1",
            "pulsar://h:abc",
            "pulsar://h1:6650,h2:70000",
        ] {
            let r = reason(bad);
            assert!(r.contains("invalid port"), "{bad}: {r}");
        }
        assert_eq!(parse("pulsar://h:65535").hosts(), &[addr("h", 65535)]);
        assert_eq!(parse("pulsar://h:1").hosts(), &[addr("h", 1)]);
    }

    #[test]
    fn rejects_paths_queries_and_fragments() {
        for bad in [
            "pulsar://h:6650/admin",
            "pulsar://h//",
            "pulsar://h?x=1",
            "pulsar://h/?x=1",
            "pulsar://h#frag",
        ] {
            let r = reason(bad);
            assert!(r.contains("must not have a path"), "{bad}: {r}");
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(reason("garbage").contains("missing scheme"));
        assert!(reason("pulsar://user@h").contains("user info"));
        assert!(reason("pulsar://ho st:6650").contains("whitespace"));
        assert!(reason("pulsar://h<>:6650").contains("invalid host"));
        assert!(reason("pulsar://[::1:6650").contains("invalid host"));
        assert!(reason("pulsar://[zz]:6650").contains("invalid host"));
        assert!(reason("pulsar://h:6650:7000").contains("invalid port"));
        assert!(reason("pulsar://h\nost").contains("whitespace"));
        assert!(reason("pulsar://h1 ,h2").contains("whitespace"));
        assert!(reason("pulsar://h1,\th2").contains("whitespace"));
        assert!(reason("pulsar://a%2Cb:6650").contains("percent-encoding"));
        assert!(reason("pulsar://a%3bb").contains("percent-encoding"));
        assert!(reason("pulsar://a!b:6650").contains("invalid host"));
        assert!(reason("pulsar://a=b").contains("invalid host"));
    }

    proptest::proptest! {
        /// Whatever parses is usable: it prints and parses back to itself, and each of its
        /// hosts forms a valid single-broker URL (the lookup service relies on both).
        #[test]
        fn what_parses_round_trips(
            url in "(pulsar|pulsar\\+ssl)://[a-zA-Z0-9%,;:\\[\\]._!=$&'()*+-]{1,24}"
        ) {
            if let Ok(u) = ServiceUrl::parse(&url) {
                let printed = u.to_string();
                let again = ServiceUrl::parse(&printed)
                    .unwrap_or_else(|e| panic!("{url:?} printed as {printed:?}: {e}"));
                proptest::prop_assert_eq!(&again, &u);
                for h in u.hosts() {
                    let one = format!("{}://{h}", u.scheme());
                    let b = ServiceUrl::from_broker_url(&one)
                        .unwrap_or_else(|e| panic!("{url:?}: host {one:?}: {e}"));
                    proptest::prop_assert_eq!(b.hosts(), std::slice::from_ref(h));
                }
            }
        }
    }

    #[test]
    fn broker_urls_from_lookup() {
        let u = ServiceUrl::from_broker_url("pulsar://127.0.0.1:6650").unwrap();
        assert_eq!(u.first_host(), &addr("127.0.0.1", 6650));
        assert!(!u.is_tls());
        assert!(ServiceUrl::from_broker_url("pulsar://a,b").is_err());

        let plain = Some("pulsar://10.0.0.5:6650");
        let tls = Some("pulsar+ssl://10.0.0.5:6651");
        let u = ServiceUrl::from_lookup_response(plain, tls, false).unwrap();
        assert_eq!(u.to_string(), "pulsar://10.0.0.5:6650");
        let u = ServiceUrl::from_lookup_response(plain, tls, true).unwrap();
        assert_eq!(u.to_string(), "pulsar+ssl://10.0.0.5:6651");
        assert!(u.is_tls());

        let err = ServiceUrl::from_lookup_response(plain, None, true).unwrap_err();
        assert!(err.to_string().contains("brokerServiceUrlTls"), "{err}");
        assert!(ServiceUrl::from_lookup_response(Some(""), tls, false).is_err());
        // Mismatched scheme in the chosen field.
        assert!(ServiceUrl::from_lookup_response(tls, None, false).is_err());
        assert!(ServiceUrl::from_lookup_response(Some("garbage"), None, false).is_err());
    }
}
