//! Small helpers shared by the examples: argument parsing and JSON output.
#![allow(dead_code)]

use std::collections::HashMap;
use std::process::exit;

/// Options every example takes to reach a secured cluster.
pub const SECURITY_OPTIONS: &[&str] = &[
    "tls-trust-certs",
    "tls-cert",
    "tls-key",
    "auth-token",
    "auth-oauth2",
];

/// Flags every example takes to reach a secured cluster.
pub const SECURITY_FLAGS: &[&str] = &["allow-insecure"];

/// How the security options are used (appended to every usage text).
pub const SECURITY_USAGE: &str = "security (with a pulsar+ssl:// URL for TLS):
  --tls-trust-certs PATH       PEM file of the CAs to trust (default: the platform's roots)
  --tls-cert PATH --tls-key PATH   client certificate and key (mutual TLS, auth method `tls`)
  --allow-insecure             accept any broker certificate (tests only)
  --auth-token TOKEN|file:PATH token authentication (a file is read again on each use)
  --auth-oauth2 ISSUER,KEYFILE,AUDIENCE   OAuth2 client credentials";

/// Parsed `--name value` options, repeated options and `--flag`s.
pub struct Args {
    values: HashMap<String, Vec<String>>,
    flags: Vec<String>,
}

impl Args {
    /// Parses the process arguments; `options` take a value, `flags` take none. Anything else
    /// is an error (so a typo is not silently ignored).
    pub fn parse(usage: &str, options: &[&str], flags: &[&str]) -> Args {
        let mut values: HashMap<String, Vec<String>> = HashMap::new();
        let mut set_flags = Vec::new();
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            if arg == "-h" || arg == "--help" {
                println!("{usage}\n{SECURITY_USAGE}");
                exit(0);
            }
            let Some(name) = arg.strip_prefix("--") else {
                fail(usage, &format!("unexpected argument `{arg}`"));
            };
            if flags.contains(&name) || SECURITY_FLAGS.contains(&name) {
                set_flags.push(name.to_string());
                continue;
            }
            if !options.contains(&name) && !SECURITY_OPTIONS.contains(&name) {
                fail(usage, &format!("unknown option `--{name}`"));
            }
            let Some(value) = it.next() else {
                fail(usage, &format!("--{name} needs a value"));
            };
            values.entry(name.to_string()).or_default().push(value);
        }
        Args {
            values,
            flags: set_flags,
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    pub fn all(&self, name: &str) -> Vec<String> {
        self.values.get(name).cloned().unwrap_or_default()
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    pub fn required(&self, usage: &str, name: &str) -> String {
        self.get(name)
            .map(str::to_string)
            .unwrap_or_else(|| fail(usage, &format!("--{name} is required")))
    }

    pub fn number<T: std::str::FromStr>(&self, usage: &str, name: &str, default: T) -> T {
        match self.get(name) {
            None => default,
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| fail(usage, &format!("--{name}: `{v}` is not a number"))),
        }
    }

    pub fn url(&self) -> String {
        self.get("url")
            .map(str::to_string)
            .unwrap_or_else(|| "pulsar://127.0.0.1:6650".to_string())
    }
}

impl Args {
    /// A client builder for `--url` with the security options applied.
    pub fn client_builder(&self) -> pulsar_sdk::ClientBuilder {
        let get = |name: &str| self.get(name).map(str::to_owned);
        secure(
            pulsar_sdk::Client::builder().service_url(self.url()),
            Security {
                trust_certs: get("tls-trust-certs"),
                cert: get("tls-cert"),
                key: get("tls-key"),
                allow_insecure: self.flag("allow-insecure"),
                token: get("auth-token"),
                oauth2: get("auth-oauth2"),
            },
        )
    }
}

/// The security settings of an example (from options or environment variables).
#[derive(Default)]
pub struct Security {
    pub trust_certs: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub allow_insecure: bool,
    pub token: Option<String>,
    pub oauth2: Option<String>,
}

impl Security {
    /// From `PULSAR_TLS_TRUST_CERTS`, `PULSAR_TLS_CERT`, `PULSAR_TLS_KEY`,
    /// `PULSAR_ALLOW_INSECURE=1`, `PULSAR_AUTH_TOKEN`, `PULSAR_AUTH_OAUTH2`.
    pub fn from_env() -> Security {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Security {
            trust_certs: var("PULSAR_TLS_TRUST_CERTS"),
            cert: var("PULSAR_TLS_CERT"),
            key: var("PULSAR_TLS_KEY"),
            allow_insecure: var("PULSAR_ALLOW_INSECURE").is_some_and(|v| v == "1" || v == "true"),
            token: var("PULSAR_AUTH_TOKEN"),
            oauth2: var("PULSAR_AUTH_OAUTH2"),
        }
    }
}

/// Applies `security` to `builder` (exits with a message on a bad `--auth-oauth2`).
pub fn secure(
    mut builder: pulsar_sdk::ClientBuilder,
    security: Security,
) -> pulsar_sdk::ClientBuilder {
    if let Some(path) = security.trust_certs {
        builder = builder.tls_trust_certs_file_path(path);
    }
    match (security.cert, security.key) {
        (Some(cert), Some(key)) => builder = builder.auth_tls(cert, key),
        (None, None) => {}
        _ => die("--tls-cert and --tls-key go together"),
    }
    if security.allow_insecure {
        builder = builder.tls_allow_insecure_connection(true);
    }
    if let Some(token) = security.token {
        builder = builder.auth_token(&token);
    }
    if let Some(param) = security.oauth2 {
        let provider = pulsar_sdk::auth::oauth2::from_cli_param(&param).unwrap_or_else(|e| die(e));
        builder = builder.auth_provider_shared(provider);
    }
    builder
}

pub fn fail(usage: &str, message: &str) -> ! {
    eprintln!("error: {message}\n\n{usage}\n{SECURITY_USAGE}");
    exit(2)
}

/// Exits non-zero after printing an error as JSON on stdout and text on stderr.
pub fn die(error: impl std::fmt::Display) -> ! {
    eprintln!("error: {error}");
    println!("{}", serde_json::json!({ "error": error.to_string() }));
    exit(1)
}

/// Prints `{"event":"partitions_changed","topic":...,"partitions":n}` whenever the topic grows.
pub fn print_partition_changes(topic: String, mut changes: pulsar_sdk::Updates<usize>) {
    tokio::spawn(async move {
        while let Some(n) = changes.changed().await {
            println!(
                "{}",
                serde_json::json!({"event": "partitions_changed", "topic": topic, "partitions": n})
            );
        }
    });
}
