//! Certificates generated at test run time (rcgen): a CA, server certificates for
//! 127.0.0.1/localhost (valid, expired, for the wrong host), and a client certificate, written
//! as PEM files into a fresh directory under the cargo target's tmp dir.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate with its key, as PEM text and files.
#[derive(Debug, Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

/// A test CA that issues certificates.
pub struct Ca {
    cert: Certificate,
    key: KeyPair,
    pub pem: Pem,
    dir: PathBuf,
}

/// A fresh directory for one test's files.
pub fn fresh_dir(prefix: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = crate::target_tmp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, cert: String, key: String) -> Pem {
    let cert_path = dir.join(format!("{name}.pem"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, &cert).unwrap();
    std::fs::write(&key_path, &key).unwrap();
    Pem {
        cert,
        key,
        cert_path,
        key_path,
    }
}

impl Ca {
    /// A new CA named `name`, its files in `dir`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let pem = write(dir, name, cert.pem(), key.serialize_pem());
        Ca {
            cert,
            key,
            pem,
            dir: dir.to_path_buf(),
        }
    }

    fn issue(&self, name: &str, mut params: CertificateParams) -> Pem {
        let key = KeyPair::generate().unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        write(&self.dir, name, cert.pem(), key.serialize_pem())
    }

    /// A server certificate for `hosts` (DNS names or IP addresses).
    pub fn server(&self, name: &str, hosts: &[&str]) -> Pem {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let mut params = CertificateParams::new(hosts).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(name, params)
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn local_server(&self, name: &str) -> Pem {
        self.server(name, &["127.0.0.1", "localhost"])
    }

    /// A server certificate for 127.0.0.1 and localhost that expired in 2001.
    pub fn expired_server(&self, name: &str) -> Pem {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        self.issue(name, params)
    }

    /// A client certificate (mutual TLS).
    pub fn client(&self, name: &str) -> Pem {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(name, params)
    }
}
