//! RSA keys from what a [`CryptoKeyReader`](super::CryptoKeyReader) gives: PEM text (`PUBLIC
//! KEY`, `RSA PUBLIC KEY`, `PRIVATE KEY`, `RSA PRIVATE KEY`, as OpenSSL writes them and the
//! official clients read them) or DER bytes. EC keys are recognised and refused.

use aws_lc_rs::rsa::{
    OaepPrivateDecryptingKey, OaepPublicEncryptingKey, PrivateDecryptingKey, PublicEncryptingKey,
};
use base64::Engine as _;
use zeroize::Zeroizing;

use super::CryptoError;

/// Key bytes (a private key's DER, base64 or PKCS#8 wrapping), zeroized when dropped. Each is
/// allocated at its final size, so no unzeroized copy is left behind by a reallocation.
type Secret = Zeroizing<Vec<u8>>;

/// DER of the `id-ecPublicKey` object identifier (1.2.840.10045.2.1).
const EC_OID: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// DER of the `rsaEncryption` AlgorithmIdentifier (OID 1.2.840.113549.1.1.1, NULL).
const RSA_ALGORITHM: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];

/// The longest PEM label read (`ENCRYPTED PRIVATE KEY` is 21 bytes).
const MAX_LABEL: usize = 64;

/// The first PEM block of `text`: its label and DER bytes; `None` when `text` is no PEM.
fn pem(text: &[u8]) -> Option<Result<(String, Secret), String>> {
    let text = std::str::from_utf8(text).ok()?;
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + 11..];
    let label_end = rest.find("-----")?;
    let label = &rest[..label_end];
    // A label is a few words on the BEGIN line (RFC 7468); anything else is not quoted back,
    // as it may be the key itself (a BEGIN line without its closing dashes).
    if label.len() > MAX_LABEL
        || !label
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ')
    {
        return Some(Err("malformed PEM BEGIN line".into()));
    }
    let label = label.to_string();
    let body = &rest[label_end + 5..];
    let end_marker = format!("-----END {label}-----");
    let Some(end) = body.find(&end_marker) else {
        return Some(Err(format!("PEM block `{label}` has no END line")));
    };
    let mut b64 = Zeroizing::new(String::with_capacity(end));
    // Headers of encrypted PEM (`Proc-Type`, `DEK-Info`) make it unreadable here.
    for line in body[..end].lines().map(str::trim) {
        b64.push_str(line);
    }
    if b64.contains(':') {
        return Some(Err(format!(
            "PEM block `{label}` is password-protected; give the key unencrypted"
        )));
    }
    let mut der: Secret = Zeroizing::new(Vec::with_capacity(b64.len() / 4 * 3 + 3));
    Some(
        base64::engine::general_purpose::STANDARD
            .decode_vec(b64.as_bytes(), &mut der)
            .map_err(|e| format!("PEM block `{label}` is not valid base64: {e}"))
            .map(|()| (label, der)),
    )
}

/// A DER length.
fn der_len(n: usize) -> Vec<u8> {
    if n < 0x80 {
        return vec![n as u8];
    }
    let bytes: Vec<u8> = n
        .to_be_bytes()
        .into_iter()
        .skip_while(|b| *b == 0)
        .collect();
    let mut out = vec![0x80 | bytes.len() as u8];
    out.extend(bytes);
    out
}

fn der(tag: u8, content: &[u8]) -> Secret {
    let len = der_len(content.len());
    let mut out = Zeroizing::new(Vec::with_capacity(1 + len.len() + content.len()));
    out.push(tag);
    out.extend_from_slice(&len);
    out.extend_from_slice(content);
    out
}

/// PKCS#8 `PrivateKeyInfo` around a PKCS#1 `RSAPrivateKey` (`RSA PRIVATE KEY`).
fn pkcs8_of_pkcs1(pkcs1: &[u8]) -> Secret {
    let key = der(0x04, pkcs1);
    let mut content = Zeroizing::new(Vec::with_capacity(3 + RSA_ALGORITHM.len() + key.len()));
    content.extend_from_slice(&[0x02, 0x01, 0x00]);
    content.extend_from_slice(RSA_ALGORITHM);
    content.extend_from_slice(&key);
    der(0x30, &content)
}

/// `SubjectPublicKeyInfo` around a PKCS#1 `RSAPublicKey` (`RSA PUBLIC KEY`).
fn spki_of_pkcs1(pkcs1: &[u8]) -> Secret {
    let mut bits = vec![0x00];
    bits.extend_from_slice(pkcs1);
    let mut content = RSA_ALGORITHM.to_vec();
    content.extend_from_slice(&der(0x03, &bits));
    der(0x30, &content)
}

fn is_ec(label: &str, der: &[u8]) -> bool {
    label.starts_with("EC ") || der.windows(EC_OID.len()).any(|w| w == EC_OID)
}

/// The DER of a key and whether it is PKCS#1 (`RSA ...` label).
fn decode(name: &str, bytes: &[u8]) -> Result<(String, Secret), CryptoError> {
    let invalid = |reason: String| CryptoError::InvalidKey {
        key: name.to_string(),
        reason,
    };
    let (label, der) = match pem(bytes) {
        Some(parsed) => parsed.map_err(invalid)?,
        None => (String::new(), Zeroizing::new(bytes.to_vec())),
    };
    if is_ec(&label, &der) {
        return Err(CryptoError::UnsupportedKey {
            key: name.to_string(),
            kind: "EC",
        });
    }
    Ok((label, der))
}

/// A recipient's public key (a producer's).
pub(crate) fn public_key(name: &str, bytes: &[u8]) -> Result<OaepPublicEncryptingKey, CryptoError> {
    let (label, der) = decode(name, bytes)?;
    let der = if label == "RSA PUBLIC KEY" {
        spki_of_pkcs1(&der)
    } else {
        der
    };
    PublicEncryptingKey::from_der(&der)
        .map_err(|e| e.to_string())
        .and_then(|k| OaepPublicEncryptingKey::new(k).map_err(|e| e.to_string()))
        .map_err(|reason| CryptoError::InvalidKey {
            key: name.to_string(),
            reason,
        })
}

/// A recipient's private key (a consumer's).
pub(crate) fn private_key(
    name: &str,
    bytes: &[u8],
) -> Result<OaepPrivateDecryptingKey, CryptoError> {
    let (label, der) = decode(name, bytes)?;
    let der = if label == "RSA PRIVATE KEY" {
        pkcs8_of_pkcs1(&der)
    } else {
        der
    };
    PrivateDecryptingKey::from_pkcs8(&der)
        .map_err(|e| e.to_string())
        .and_then(|k| OaepPrivateDecryptingKey::new(k).map_err(|e| e.to_string()))
        .map_err(|reason| CryptoError::InvalidKey {
            key: name.to_string(),
            reason,
        })
}

#[cfg(any(test, feature = "mock-broker"))]
fn to_pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A fresh RSA key pair: (`PUBLIC KEY` PEM, `PRIVATE KEY` PEM), for tests (see
/// `crypto::testing`).
#[cfg(any(test, feature = "mock-broker"))]
pub(crate) fn generate_pem(bits: usize) -> Result<(String, String), CryptoError> {
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::rsa::KeySize;
    let invalid = |reason: String| CryptoError::InvalidKey {
        key: format!("<generated RSA-{bits}>"),
        reason,
    };
    let size = match bits {
        2048 => KeySize::Rsa2048,
        3072 => KeySize::Rsa3072,
        4096 => KeySize::Rsa4096,
        8192 => KeySize::Rsa8192,
        other => {
            return Err(invalid(format!(
                "no RSA key size {other} (2048, 3072, 4096 or 8192)"
            )))
        }
    };
    let private = PrivateDecryptingKey::generate(size).map_err(|e| invalid(e.to_string()))?;
    let public = private.public_key();
    let private_der = private.as_der().map_err(|e| invalid(e.to_string()))?;
    let public_der = public.as_der().map_err(|e| invalid(e.to_string()))?;
    Ok((
        to_pem("PUBLIC KEY", public_der.as_ref()),
        to_pem("PRIVATE KEY", private_der.as_ref()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkcs1_forms_are_read_like_pkcs8() {
        let (public, private) = generate_pem(2048).unwrap();
        assert!(public_key("k", public.as_bytes()).is_ok());
        assert!(private_key("k", private.as_bytes()).is_ok());
        // The PKCS#1 forms: the inner structures of the PKCS#8 / SPKI ones.
        let (_, p8) = pem(private.as_bytes()).unwrap().unwrap();
        // PrivateKeyInfo: version, algorithm, OCTET STRING (the RSAPrivateKey).
        let inner = &p8[26..];
        let pkcs1 = to_pem("RSA PRIVATE KEY", inner);
        assert!(private_key("k", pkcs1.as_bytes()).is_ok(), "{pkcs1}");
    }

    #[test]
    fn ec_and_garbage_are_refused_with_their_reason() {
        let ec = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n";
        assert!(matches!(
            private_key("k", ec.as_bytes()),
            Err(CryptoError::UnsupportedKey { kind: "EC", .. })
        ));
        assert!(matches!(
            public_key("k", b"not a key"),
            Err(CryptoError::InvalidKey { .. })
        ));
        let encrypted = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        let err = private_key("k", encrypted.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("password"), "{err}");
    }
}
