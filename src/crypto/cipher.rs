//! The ciphers, as Java `MessageCryptoBc` and C++ `MessageCrypto` use them: AES-256-GCM with a
//! 12-byte IV and a 16-byte tag appended to the ciphertext (`AES/GCM/NoPadding`, tag length
//! 128), and the 32-byte data key wrapped with RSA-OAEP, SHA-1 and MGF1-SHA-1
//! (`RSA/NONE/OAEPWithSHA1AndMGF1Padding`, OpenSSL's `RSA_PKCS1_OAEP_PADDING`).

use std::collections::HashMap;
use std::time::Duration;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use aws_lc_rs::rsa::{OaepPrivateDecryptingKey, OaepPublicEncryptingKey, OAEP_SHA1_MGF1SHA1};
use bytes::Bytes;
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::CryptoError;

pub(crate) const DATA_KEY_LEN: usize = 32;
pub(crate) const IV_LEN: usize = 12;
pub(crate) const TAG_LEN: usize = 16;

/// A data key (AES-256). Its `Debug` shows nothing of it.
///
/// The key schedule lives in aws-lc's memory, which aws-lc cleanses when it frees it (its
/// `OPENSSL_free`); every copy of the raw key bytes on our side is zeroized when dropped
/// ([`RawDataKey`], the unwrap buffer).
pub(crate) struct DataKey(LessSafeKey);

/// A data key's raw bytes, zeroized when dropped.
pub(crate) type RawDataKey = Zeroizing<[u8; DATA_KEY_LEN]>;

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(<redacted>)")
    }
}

impl DataKey {
    fn from_bytes(bytes: &[u8]) -> Option<DataKey> {
        UnboundKey::new(&AES_256_GCM, bytes)
            .ok()
            .map(|k| DataKey(LessSafeKey::new(k)))
    }

    /// A fresh random data key, with its raw bytes (to wrap for each recipient).
    pub(crate) fn generate() -> Result<(DataKey, RawDataKey), CryptoError> {
        let mut raw: RawDataKey = Zeroizing::new([0u8; DATA_KEY_LEN]);
        SystemRandom::new()
            .fill(&mut raw[..])
            .map_err(|_| CryptoError::Encrypt("the system random generator failed".into()))?;
        let key = DataKey::from_bytes(&raw[..])
            .ok_or_else(|| CryptoError::Encrypt("AES-256-GCM key setup failed".into()))?;
        Ok((key, raw))
    }

    /// Encrypts `plain` under a fresh random IV: (ciphertext with its tag, IV).
    pub(crate) fn seal(&self, plain: &[u8]) -> Result<(Bytes, [u8; IV_LEN]), CryptoError> {
        let mut iv = [0u8; IV_LEN];
        SystemRandom::new()
            .fill(&mut iv)
            .map_err(|_| CryptoError::Encrypt("the system random generator failed".into()))?;
        let mut out = Vec::with_capacity(plain.len() + TAG_LEN);
        out.extend_from_slice(plain);
        self.0
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(iv), Aad::empty(), &mut out)
            .map_err(|_| CryptoError::Encrypt("AES-256-GCM encryption failed".into()))?;
        Ok((Bytes::from(out), iv))
    }

    /// Decrypts and authenticates `sealed` (ciphertext and tag) with `iv`.
    pub(crate) fn open(&self, iv: &[u8], sealed: &[u8]) -> Result<Bytes, CryptoError> {
        let iv: [u8; IV_LEN] = iv.try_into().map_err(|_| {
            CryptoError::UnsupportedAlgorithm(format!(
                "an AES-GCM IV of {} bytes (the official clients use {IV_LEN})",
                iv.len()
            ))
        })?;
        if sealed.len() < TAG_LEN {
            return Err(CryptoError::Tampered);
        }
        let mut buf = sealed.to_vec();
        let n = self
            .0
            .open_in_place(Nonce::assume_unique_for_key(iv), Aad::empty(), &mut buf)
            .map_err(|_| CryptoError::Tampered)?
            .len();
        buf.truncate(n);
        Ok(Bytes::from(buf))
    }
}

/// Wraps a data key for one recipient.
pub(crate) fn wrap(
    name: &str,
    key: &OaepPublicEncryptingKey,
    raw: &RawDataKey,
) -> Result<Bytes, CryptoError> {
    let mut out = vec![0u8; key.ciphertext_size()];
    let n = key
        .encrypt(&OAEP_SHA1_MGF1SHA1, &raw[..], &mut out, None)
        .map_err(|_| CryptoError::InvalidKey {
            key: name.to_string(),
            reason: "RSA-OAEP encryption of the data key failed".into(),
        })?
        .len();
    out.truncate(n);
    Ok(Bytes::from(out))
}

/// Unwraps a data key with a recipient's private key (`None`: not this key's, or tampered).
pub(crate) fn unwrap(key: &OaepPrivateDecryptingKey, wrapped: &[u8]) -> Option<DataKey> {
    // The data key in clear: zeroized however this returns.
    let mut out = Zeroizing::new(vec![0u8; key.min_output_size()]);
    let raw = key
        .decrypt(&OAEP_SHA1_MGF1SHA1, wrapped, &mut out, None)
        .ok()?;
    if raw.len() != DATA_KEY_LEN {
        return None;
    }
    DataKey::from_bytes(raw)
}

/// How long a decrypted data key stays cached after it was last used (upstream's
/// `expireAfterAccess(4, HOURS)`).
pub(crate) const DATA_KEY_TTL: Duration = Duration::from_secs(4 * 3600);

/// The most data keys a consumer keeps (upstream's cache has no count bound; a producer
/// rotates every 4 hours, so this is room for ~250 producers' keys within one TTL).
pub(crate) const DATA_KEY_CACHE_MAX: usize = 1024;

/// The consumer's decrypted data keys, by the encrypted form a message carries (upstream keys
/// by its MD5; the bytes themselves leave no collision to handle). Expires an entry
/// [`DATA_KEY_TTL`] after its last use and holds at most [`DATA_KEY_CACHE_MAX`] (the least
/// recently used goes first).
#[derive(Debug, Default)]
pub(crate) struct DataKeyCache {
    keys: HashMap<Bytes, (std::sync::Arc<DataKey>, Instant)>,
}

impl DataKeyCache {
    pub(crate) fn get(&mut self, wrapped: &Bytes, now: Instant) -> Option<std::sync::Arc<DataKey>> {
        let (key, used) = self.keys.get_mut(wrapped)?;
        if now.saturating_duration_since(*used) > DATA_KEY_TTL {
            self.keys.remove(wrapped);
            return None;
        }
        *used = now;
        Some(key.clone())
    }

    pub(crate) fn insert(&mut self, wrapped: Bytes, key: std::sync::Arc<DataKey>, now: Instant) {
        self.keys
            .retain(|_, (_, used)| now.saturating_duration_since(*used) <= DATA_KEY_TTL);
        if self.keys.len() >= DATA_KEY_CACHE_MAX && !self.keys.contains_key(&wrapped) {
            if let Some(oldest) = self
                .keys
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                self.keys.remove(&oldest);
            }
        }
        self.keys.insert(wrapped, (key, now));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::keys;

    #[test]
    fn seal_open_round_trip_and_tamper() {
        let (key, _) = DataKey::generate().unwrap();
        let (sealed, iv) = key.seal(b"hello").unwrap();
        assert_eq!(sealed.len(), 5 + TAG_LEN);
        assert_eq!(&key.open(&iv, &sealed).unwrap()[..], b"hello");
        let mut bad = sealed.to_vec();
        bad[0] ^= 1;
        assert!(matches!(key.open(&iv, &bad), Err(CryptoError::Tampered)));
        let mut bad_tag = sealed.to_vec();
        *bad_tag.last_mut().unwrap() ^= 1;
        assert!(matches!(
            key.open(&iv, &bad_tag),
            Err(CryptoError::Tampered)
        ));
        assert!(matches!(
            key.open(&iv[..8], &sealed),
            Err(CryptoError::UnsupportedAlgorithm(_))
        ));
        let (other, _) = DataKey::generate().unwrap();
        assert!(matches!(
            other.open(&iv, &sealed),
            Err(CryptoError::Tampered)
        ));
    }

    #[test]
    fn data_key_wraps_for_its_recipient_only() {
        let (public, private) = keys::generate_pem(2048).unwrap();
        let (_, other_private) = keys::generate_pem(2048).unwrap();
        let public = keys::public_key("a", public.as_bytes()).unwrap();
        let private = keys::private_key("a", private.as_bytes()).unwrap();
        let other = keys::private_key("b", other_private.as_bytes()).unwrap();
        let (key, raw) = DataKey::generate().unwrap();
        let wrapped = wrap("a", &public, &raw).unwrap();
        assert_eq!(wrapped.len(), 256);
        let (sealed, iv) = key.seal(b"payload").unwrap();
        let unwrapped = unwrap(&private, &wrapped).expect("the recipient unwraps");
        assert_eq!(&unwrapped.open(&iv, &sealed).unwrap()[..], b"payload");
        assert!(unwrap(&other, &wrapped).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn cache_expires_after_last_use_and_is_capped() {
        let mut cache = DataKeyCache::default();
        let (key, _) = DataKey::generate().unwrap();
        let key = std::sync::Arc::new(key);
        let id = Bytes::from_static(b"k1");
        cache.insert(id.clone(), key.clone(), Instant::now());
        tokio::time::advance(DATA_KEY_TTL - Duration::from_secs(1)).await;
        assert!(cache.get(&id, Instant::now()).is_some(), "used: kept");
        tokio::time::advance(DATA_KEY_TTL - Duration::from_secs(1)).await;
        assert!(
            cache.get(&id, Instant::now()).is_some(),
            "4 h after the last use, not the first"
        );
        tokio::time::advance(DATA_KEY_TTL + Duration::from_secs(1)).await;
        assert!(cache.get(&id, Instant::now()).is_none(), "expired");
        for i in 0..DATA_KEY_CACHE_MAX + 10 {
            cache.insert(Bytes::from(i.to_string()), key.clone(), Instant::now());
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(cache.len(), DATA_KEY_CACHE_MAX);
        assert!(
            cache.get(&Bytes::from("0"), Instant::now()).is_none(),
            "oldest evicted"
        );
        let last = (DATA_KEY_CACHE_MAX + 9).to_string();
        assert!(cache.get(&Bytes::from(last), Instant::now()).is_some());
    }
}
