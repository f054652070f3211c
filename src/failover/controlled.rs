//! [`ControlledClusterFailover`]: an HTTP(S) service says which cluster to use (upstream Java
//! `ControlledClusterFailover`; the C++ and Python clients have none).

use std::sync::Arc;
use std::time::Duration;

use url::Url;

use super::{ServiceInfoProvider, ServiceInfoUpdater};
use crate::auth::http::{self, Timeouts};
use crate::auth::{BasicAuth, SharedAuthProvider, TokenAuth};
use crate::connection::tls::{TlsConnector, TlsOptions};
use crate::error::{Error, Result};
use crate::service_info::ServiceInfo;
use crate::service_url::ServiceUrl;

/// Bound on the service's answer by default: a few fields of JSON.
const DEFAULT_MAX_ANSWER: usize = 64 * 1024;

/// A provider that asks an HTTP(S) service, every
/// [`check_interval`](ControlledClusterFailoverBuilder::check_interval), which cluster the
/// client should use, and switches when the answer names another one (upstream Java's
/// `ControlledClusterFailover`, same request and answer).
///
/// The request is a `GET` of the URL given to [`builder`](Self::builder) with
/// `Accept: application/json` and the headers set with
/// [`header`](ControlledClusterFailoverBuilder::header) (e.g. a bearer token), bounded by a
/// connect and a read timeout. The answer (status 200, at most
/// [`max_answer_bytes`](ControlledClusterFailoverBuilder::max_answer_bytes)) is a JSON
/// object:
///
/// ```json
/// {
///   "serviceUrl": "pulsar+ssl://west:6651",
///   "tlsTrustCertsFilePath": "/etc/pulsar/west-ca.pem",
///   "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
///   "authParamsString": "token:eyJhbGciOi..."
/// }
/// ```
///
/// Only `serviceUrl` is required. As in Java, the client switches when the answer differs from
/// the last one applied in any field (the same URL with another trust file or other
/// credentials is a switch too); a field left out keeps what the client has (its
/// authentication, its trust file). Authentication plugins understood: Java's
/// `AuthenticationToken` (or `token`; params `token:..` or the token; unlike Java, `file:..`
/// is refused: the client never reads a local file, and sends its content to a broker,
/// because of a remote answer) and `AuthenticationBasic` (or `basic`; params
/// `{"userId": .., "password": ..}` or `user:password`). Anything else (an error status, a
/// timeout, too large, not JSON, an unusable URL, an unknown plugin, a `tlsTrustCertsFilePath`
/// that is not a regular file of at most 4 MiB) is logged at `warn`
/// (never the credentials) and the client stays where it is.
///
/// ```no_run
/// # async fn run() -> pulsar_sdk::Result<()> {
/// use pulsar_sdk::failover::ControlledClusterFailover;
/// use pulsar_sdk::{Client, ServiceInfo};
///
/// let provider = ControlledClusterFailover::builder(
///     ServiceInfo::new("pulsar://east:6650")?,
///     "https://failover.internal/pulsar/cluster",
/// )
/// .header("Authorization", "Bearer ...")
/// .build()?;
/// let client = Client::builder().service_info_provider(provider).build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ControlledClusterFailover {
    default: ServiceInfo,
    url: Url,
    headers: Vec<(String, String)>,
    check_interval: Duration,
    timeouts: Timeouts,
    max_answer: usize,
}

/// Builds a [`ControlledClusterFailover`]; see [`ControlledClusterFailover::builder`].
#[derive(Debug, Clone)]
pub struct ControlledClusterFailoverBuilder {
    default: ServiceInfo,
    url: String,
    headers: Vec<(String, String)>,
    check_interval: Duration,
    connect_timeout: Duration,
    read_timeout: Duration,
    max_answer: usize,
}

impl ControlledClusterFailover {
    /// Starts building a provider that starts the client on `default` (Java's
    /// `defaultServiceUrl`) and asks `url_provider` (an `http://` or `https://` URL, Java's
    /// `urlProvider`) which cluster to use.
    pub fn builder(
        default: ServiceInfo,
        url_provider: impl Into<String>,
    ) -> ControlledClusterFailoverBuilder {
        ControlledClusterFailoverBuilder {
            default,
            url: url_provider.into(),
            headers: Vec::new(),
            check_interval: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            max_answer: DEFAULT_MAX_ANSWER,
        }
    }
}

impl ControlledClusterFailoverBuilder {
    /// A header sent with every request (Java's `urlProviderHeader`). Names and values with a
    /// line break are refused by `build`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How often the service is asked. Default 30 s, like Java's.
    pub fn check_interval(mut self, interval: Duration) -> Self {
        self.check_interval = interval;
        self
    }

    /// Bound on opening the connection to the service (TLS included). Default 10 s, like Java's.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Bound on sending the request and reading the whole answer. Default 30 s, like Java's.
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// The largest answer accepted, in bytes (default 64 KiB, at most 1 MiB); a larger one is
    /// refused.
    pub fn max_answer_bytes(mut self, n: usize) -> Self {
        self.max_answer = n;
        self
    }

    /// Checks the settings and builds the provider.
    pub fn build(self) -> Result<ControlledClusterFailover> {
        let url = Url::parse(&self.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                Error::InvalidConfig(
                    "the url provider must be an http(s):// URL with a host".into(),
                )
            })?;
        let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        for (name, value) in &self.headers {
            if !token(name) || value.contains(['\r', '\n']) {
                return Err(Error::InvalidConfig(format!(
                    "url provider header `{}`: not a valid header",
                    name.escape_debug()
                )));
            }
        }
        if self.check_interval.is_zero()
            || self.connect_timeout.is_zero()
            || self.read_timeout.is_zero()
        {
            return Err(Error::InvalidConfig(
                "check_interval, connect_timeout and read_timeout must be greater than zero".into(),
            ));
        }
        if self.max_answer == 0 || self.max_answer > 1024 * 1024 {
            return Err(Error::InvalidConfig(
                "max_answer_bytes must be between 1 byte and 1 MiB".into(),
            ));
        }
        Ok(ControlledClusterFailover {
            default: self.default,
            url,
            headers: self.headers,
            check_interval: self.check_interval,
            timeouts: Timeouts {
                connect: self.connect_timeout,
                read: self.read_timeout,
            },
            max_answer: self.max_answer,
        })
    }
}

/// The answer's fields (Java's `ControlledConfiguration`), as strings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Answer {
    service_url: String,
    tls_trust_certs_file_path: Option<String>,
    auth_plugin_class_name: Option<String>,
    auth_params_string: Option<String>,
}

impl ServiceInfoProvider for ControlledClusterFailover {
    fn initial_service_info(&self) -> ServiceInfo {
        self.default.clone()
    }

    fn initialize(self: Arc<Self>, updater: ServiceInfoUpdater) {
        let interval = self.check_interval;
        let applied = Answer {
            service_url: self.default.service_url().to_string(),
            tls_trust_certs_file_path: self
                .default
                .tls_trust_certs_file_path()
                .map(|p| p.display().to_string()),
            ..Answer::default()
        };
        super::spawn_polls(
            updater,
            interval,
            ControlledPoll {
                config: self,
                applied,
            },
        );
    }
}

/// [`ControlledClusterFailover`] at work for one client.
struct ControlledPoll {
    config: Arc<ControlledClusterFailover>,
    /// The answer last applied (at first: the default cluster, with the client's own
    /// authentication).
    applied: Answer,
}

impl super::Poll for ControlledPoll {
    type Mark = Answer;

    async fn check(&mut self, current: ServiceInfo) -> Option<(ServiceInfo, Answer)> {
        let unusable = |why: &dyn std::fmt::Display| {
            tracing::warn!(provider = %http::redact(&self.config.url), %why,
                "cluster failover: unusable answer; staying");
        };
        let answer = match self.config.fetch().await {
            Ok(a) => a,
            Err(why) => {
                unusable(&why);
                return None;
            }
        };
        // Java: a switch when the answer differs from the last one applied in any field
        // (`ControlledConfiguration.equals`): the URL, the trust file, the plugin, its
        // params. The same URL with new credentials or trust is a switch too.
        if answer.same_as(&self.applied) {
            return None;
        }
        match answer.service_info(&current) {
            Ok(info) => Some((info, answer)),
            Err(e) => {
                unusable(&e);
                None
            }
        }
    }

    fn switched(&mut self, answer: Answer) {
        self.applied = answer;
    }
}

impl ControlledClusterFailover {
    /// Asks the service once. The error is for a log line: it never holds the answer's body.
    async fn fetch(&self) -> std::result::Result<Answer, String> {
        let tls = || TlsConnector::with_fallback_roots(&TlsOptions::default());
        let (_, r) = http::request(&tls, self.timeouts, "GET", &self.url, None, &self.headers)
            .await
            .map_err(|e| e.to_string())?;
        if r.status != 200 {
            return Err(format!("status {} {}", r.status, r.reason));
        }
        if r.body.len() > self.max_answer {
            return Err(format!(
                "answer of {} bytes, more than the {} accepted",
                r.body.len(),
                self.max_answer
            ));
        }
        Answer::parse(&r.body)
    }
}

impl Answer {
    /// Whether this answer asks for what `applied` set up: the same cluster (service URLs
    /// compared as parsed, so `pulsar://h` is `pulsar://h:6650`), trust file and
    /// authentication.
    fn same_as(&self, applied: &Answer) -> bool {
        let url = |a: &Answer| ServiceUrl::parse(&a.service_url).ok();
        let same_url = match (url(self), url(applied)) {
            (Some(a), Some(b)) => a == b,
            _ => self.service_url == applied.service_url,
        };
        same_url
            && self.tls_trust_certs_file_path == applied.tls_trust_certs_file_path
            && self.auth_plugin_class_name == applied.auth_plugin_class_name
            && self.auth_params_string == applied.auth_params_string
    }

    fn parse(body: &[u8]) -> std::result::Result<Answer, String> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        let object = value.as_object().ok_or("not a JSON object")?;
        let field = |name: &str| -> std::result::Result<Option<String>, String> {
            match object.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("`{name}` is not a string")),
            }
        };
        Ok(Answer {
            service_url: field("serviceUrl")?.ok_or("no `serviceUrl`")?,
            tls_trust_certs_file_path: field("tlsTrustCertsFilePath")?,
            auth_plugin_class_name: field("authPluginClassName")?,
            auth_params_string: field("authParamsString")?,
        })
    }

    /// The cluster this answer names; what it leaves out is kept from `current` (Java calls
    /// `updateAuthentication` / `updateTlsTrustCertsFilePath` only for fields it got).
    fn service_info(&self, current: &ServiceInfo) -> Result<ServiceInfo> {
        let url = ServiceUrl::parse(&self.service_url)?;
        let auth = match (&self.auth_plugin_class_name, &self.auth_params_string) {
            (Some(plugin), Some(params)) => Some(auth_plugin(plugin, params)?),
            _ => current.auth().cloned(),
        };
        let trust = match &self.tls_trust_certs_file_path {
            Some(path) => Some(trust_file(path)?),
            None => current.tls_trust_certs_file_path().map(Into::into),
        };
        Ok(ServiceInfo::from_parts(url, auth, trust))
    }
}

/// Bound on a trust file named by the service (a CA bundle of every public root is ~250 KB).
const MAX_TRUST_FILE: u64 = 4 * 1024 * 1024;

/// The trust file an answer names, if the client can read it whole: a regular file (symbolic
/// links followed) of at most [`MAX_TRUST_FILE`] bytes. Java reads whatever the path names; a
/// hostile answer naming `/dev/zero`, `/dev/urandom` or a FIFO would have the client read
/// without end (memory without bound, the switch and every later one blocked).
fn trust_file(path: &str) -> Result<std::path::PathBuf> {
    let refused = |why: &str| {
        Error::InvalidConfig(format!(
            "tlsTrustCertsFilePath `{}` from the failover service: {why}",
            path.escape_debug()
        ))
    };
    let meta = std::fs::metadata(path).map_err(|e| refused(&e.to_string()))?;
    if !meta.is_file() {
        return Err(refused("not a regular file"));
    }
    if meta.len() > MAX_TRUST_FILE {
        return Err(refused(&format!(
            "{} bytes, more than the {MAX_TRUST_FILE} accepted",
            meta.len()
        )));
    }
    Ok(path.into())
}

/// A provider for one of Java's authentication plugins, by class name (or its short name).
///
/// A token given as `file:PATH` (or `file://PATH`) is refused: the answer comes from the
/// network, and the client would read a local file of the service's choosing and send its
/// content to the brokers the same answer names. Java's `AuthenticationToken` reads it; the
/// difference is in the conformance ledger.
fn auth_plugin(plugin: &str, params: &str) -> Result<SharedAuthProvider> {
    let short = plugin.rsplit('.').next().unwrap_or(plugin);
    match short {
        "AuthenticationToken" | "token" => {
            let lead = params.trim_start().get(..5).unwrap_or_default();
            if lead.eq_ignore_ascii_case("file:") {
                return Err(Error::InvalidConfig(
                    "a `file:` token from the failover service is refused: the client never \
                     reads a local file because of a remote answer"
                        .into(),
                ));
            }
            Ok(Arc::new(TokenAuth::from_param(params)))
        }
        "AuthenticationBasic" | "basic" => {
            if let Ok(serde_json::Value::Object(o)) = serde_json::from_str(params) {
                let get = |k: &str| o.get(k).and_then(|v| v.as_str());
                if let (Some(user), Some(password)) = (get("userId"), get("password")) {
                    return Ok(Arc::new(BasicAuth::new(user, password)));
                }
            } else if let Some((user, password)) = params.split_once(':') {
                return Ok(Arc::new(BasicAuth::new(user, password)));
            }
            Err(Error::InvalidConfig(
                "basic authentication params must be {\"userId\":..,\"password\":..}".into(),
            ))
        }
        _ => Err(Error::InvalidConfig(format!(
            "authentication plugin `{}` is not supported",
            plugin.escape_debug()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_or_fail_without_panicking() {
        let ok = Answer::parse(br#"{"serviceUrl":"pulsar://b:6650","authPluginClassName":"org.apache.pulsar.client.impl.auth.AuthenticationToken","authParamsString":"token:t"}"#).unwrap();
        assert_eq!(ok.service_url, "pulsar://b:6650");
        let current = ServiceInfo::new("pulsar://a:6650").unwrap();
        let info = ok.service_info(&current).unwrap();
        assert_eq!(info.auth_method(), Some("token"));
        for bad in [
            &b""[..],
            b"nope",
            b"[1,2]",
            b"{}",
            br#"{"serviceUrl": 7}"#,
            br#"{"serviceUrl": ""}"#,
            &[0xff, 0xfe, 0x00][..],
            &[b'['; 10_000][..],
        ] {
            assert!(
                Answer::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for (url, plugin) in [
            ("http://b:8080", None),
            ("pulsar://b:6650", Some("com.example.Kerberos")),
        ] {
            let a = Answer {
                service_url: url.into(),
                auth_plugin_class_name: plugin.map(Into::into),
                auth_params_string: plugin.map(|_| "x".into()),
                ..Answer::default()
            };
            assert!(a.service_info(&current).is_err(), "{a:?}");
        }
    }

    #[test]
    fn basic_params_in_either_form() {
        for params in [r#"{"userId":"u","password":"p"}"#, "u:p"] {
            assert_eq!(auth_plugin("basic", params).unwrap().method_name(), "basic");
        }
        assert!(auth_plugin("AuthenticationBasic", "{}").is_err());
    }

    #[test]
    fn the_same_url_with_other_credentials_or_trust_is_a_switch() {
        let answer = |url: &str, trust: Option<&str>, token: Option<&str>| Answer {
            service_url: url.into(),
            tls_trust_certs_file_path: trust.map(Into::into),
            auth_plugin_class_name: token.map(|_| "token".into()),
            auth_params_string: token.map(Into::into),
        };
        let applied = answer("pulsar://b:6650", Some("/ca-1.pem"), Some("t1"));
        assert!(answer("pulsar://b:6650", Some("/ca-1.pem"), Some("t1")).same_as(&applied));
        assert!(
            answer("pulsar://b", Some("/ca-1.pem"), Some("t1")).same_as(&applied),
            "the default port is the same URL"
        );
        assert!(!answer("pulsar://b:6650", Some("/ca-2.pem"), Some("t1")).same_as(&applied));
        assert!(!answer("pulsar://b:6650", Some("/ca-1.pem"), Some("t2")).same_as(&applied));
        assert!(!answer("pulsar://b:6650", None, Some("t1")).same_as(&applied));
        assert!(!answer("pulsar://c:6650", Some("/ca-1.pem"), Some("t1")).same_as(&applied));
    }

    /// A hostile service naming a device or a FIFO as the trust file: refused before the
    /// switch (reading `/dev/zero` as PEM never ends and grows without bound).
    #[test]
    fn a_trust_file_that_is_not_a_bounded_regular_file_is_refused() {
        let current = ServiceInfo::new("pulsar://a:6650").unwrap();
        let with_trust = |path: &str| Answer {
            service_url: "pulsar+ssl://b:6651".into(),
            tls_trust_certs_file_path: Some(path.into()),
            ..Answer::default()
        };
        for path in ["/dev/zero", "/dev/urandom", "/", "/nonexistent/ca.pem"] {
            let r = with_trust(path).service_info(&current);
            assert!(
                matches!(&r, Err(Error::InvalidConfig(m)) if m.contains("tlsTrustCertsFilePath")),
                "{path}: {:?}",
                r.map(|_| ())
            );
        }
        let dir = std::env::temp_dir().join(format!("pulsar-sdk-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("ca.pem");
        std::fs::write(&ok, b"-----BEGIN CERTIFICATE-----\n").unwrap();
        let big = dir.join("big.pem");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_TRUST_FILE + 1)
            .unwrap();
        let info = with_trust(ok.to_str().unwrap())
            .service_info(&current)
            .unwrap();
        assert_eq!(info.tls_trust_certs_file_path(), Some(ok.as_path()));
        assert!(with_trust(big.to_str().unwrap())
            .service_info(&current)
            .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A hostile service naming a local file as the token: never read (it would be sent to
    /// the brokers the same answer names).
    #[test]
    fn a_file_token_from_the_service_is_refused() {
        for params in [
            "file:/etc/passwd",
            "file:///etc/passwd",
            "FILE:/etc/passwd",
            " file:/etc/passwd",
        ] {
            for plugin in [
                "token",
                "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            ] {
                let r = auth_plugin(plugin, params);
                assert!(
                    matches!(&r, Err(Error::InvalidConfig(m)) if m.contains("file:")),
                    "{plugin} {params}: {:?}",
                    r.map(|_| ())
                );
            }
        }
        assert!(auth_plugin("token", "token:abc").is_ok());
        assert!(auth_plugin("token", "abc").is_ok());
    }
}
