//! # End-to-end encryption (PIP-4)
//!
//! With cargo feature `encryption`, a producer encrypts every message so that the broker (and
//! anyone reading its storage) sees only ciphertext, and only consumers holding a private key
//! read it. The format is the official clients' (Java `MessageCryptoBc`, C++ `MessageCrypto`,
//! and through it Python, Node and Go's): messages encrypted by any of them are read here, and
//! the other way round (checked against the Python client 3.13 in `tests/interop/`).
//!
//! ## How it works
//!
//! - The producer draws a random 256-bit **data key** and encrypts it with each recipient's RSA
//!   public key (RSA-OAEP with SHA-1 and MGF1-SHA-1, the official clients' padding). The data
//!   key is drawn again, and the public keys read again, every 4 hours (as upstream).
//! - Each payload is encrypted with AES-256-GCM under a fresh 12-byte IV, after compression;
//!   a batch is encrypted as a whole, and each chunk of a chunked message on its own (its own
//!   IV). Keys, properties and the other metadata stay in clear, as upstream.
//! - The message carries each recipient's encrypted data key (`encryption_keys`, with the key
//!   metadata the producer's reader gave) and the IV (`encryption_param`).
//! - A consumer unwraps the data key with the first recipient's private key its reader has,
//!   and keeps it cached (up to 1,024 keys, each until 4 hours after its last use), so the
//!   reader is asked once per data key, not per message.
//!
//! Keys come from a [`CryptoKeyReader`](crate::crypto::CryptoKeyReader): your own (a vault, a
//! KMS), or [`PemFileKeyReader`](crate::crypto::PemFileKeyReader) over PEM files, as the
//! official clients ship. Its futures run in their own tasks: a slow or remote key store never
//! blocks a connection or another consumer; a consumer waiting for a key holds the messages
//! behind that one (order is kept) and goes on when the answer comes. What it holds meanwhile
//! counts in its share of the client's
//! [`memory_limit`](crate::ClientBuilder::memory_limit), so it asks the broker for no more
//! than that while it waits.
//!
//! Keys are RSA, 2048 to 8192 bits, in the forms OpenSSL writes (`PUBLIC KEY` or `RSA PUBLIC
//! KEY`; `PRIVATE KEY` or `RSA PRIVATE KEY`, unencrypted), e.g.
//!
//! ```text
//! openssl genrsa -out private.pem 2048
//! openssl rsa -in private.pem -pubout -out public.pem
//! ```
//!
//! **EC keys are refused** with [`CryptoError::UnsupportedKey`](crate::crypto::CryptoError):
//! Java encrypts data keys for EC recipients with BouncyCastle's `ECIES` cipher in its default
//! configuration, a format no other client implements and we could not pin byte for byte.
//!
//! ## Producing and consuming
//!
//! ```no_run
//! use pulsar_sdk::crypto::{ConsumerCryptoFailureAction, PemFileKeyReader};
//! use pulsar_sdk::Client;
//!
//! # async fn demo() -> pulsar_sdk::Result<()> {
//! let client = Client::builder().service_url("pulsar://localhost:6650").build()?;
//!
//! // Every message is encrypted for the key named "billing" (several calls: several
//! // recipients, each able to decrypt on its own).
//! let producer = client
//!     .producer("payments")
//!     .encryption_key("billing")
//!     .crypto_key_reader(PemFileKeyReader::public_only("public.pem"))
//!     .create()
//!     .await?;
//! producer.send_and_wait("card 4111...").await?;
//!
//! let mut consumer = client
//!     .consumer("payments")
//!     .subscription("billing")
//!     .crypto_key_reader(PemFileKeyReader::private_only("private.pem"))
//!     .crypto_failure_action(ConsumerCryptoFailureAction::Fail) // the default
//!     .subscribe()
//!     .await?;
//! let msg = consumer.recv().await?; // decrypted
//! consumer.ack(&msg)?;
//! # Ok(()) }
//! ```
//!
//! The same, runnable as it stands: the crate's mock broker (feature `mock-broker`) stores
//! what it is given, so it holds only ciphertext here, and a fresh key pair from
//! [`crypto::testing`](crate::crypto::testing) stands in for the key files.
//!
//! ```
//! # #[cfg(feature = "mock-broker")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pulsar_sdk::crypto::{testing::rsa_key_pair_pem, PemFileKeyReader};
//! use pulsar_sdk::{mock::MockBroker, Client, InitialPosition};
//!
//! let (public_pem, private_pem) = rsa_key_pair_pem(2048)?;
//! let dir = std::env::temp_dir().join(format!("pulsar-sdk-guide-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! std::fs::write(dir.join("public.pem"), public_pem)?;
//! std::fs::write(dir.join("private.pem"), private_pem)?;
//!
//! let broker = MockBroker::start().await?;
//! let client = Client::builder().service_url(broker.service_url()).build()?;
//! let producer = client
//!     .producer("payments")
//!     .encryption_key("billing")
//!     .crypto_key_reader(PemFileKeyReader::public_only(dir.join("public.pem")))
//!     .create()
//!     .await?;
//! producer.send_and_wait("card 4111...").await?;
//!
//! let mut consumer = client
//!     .consumer("payments")
//!     .subscription("billing")
//!     .initial_position(InitialPosition::Earliest)
//!     .crypto_key_reader(PemFileKeyReader::private_only(dir.join("private.pem")))
//!     .subscribe()
//!     .await?;
//! let msg = consumer.recv().await?;
//! assert_eq!(msg.payload_str(), Some("card 4111...")); // decrypted
//! assert!(msg.encryption_context().is_none()); // the context is kept only when not decrypted
//! consumer.ack(&msg)?;
//! std::fs::remove_dir_all(&dir)?;
//! # Ok(()) }
//! # #[cfg(not(feature = "mock-broker"))]
//! # fn main() {}
//! ```
//!
//! Readers take the same two options
//! ([`ReaderBuilder::crypto_key_reader`](crate::ReaderBuilder::crypto_key_reader)).
//!
//! ## When it fails
//!
//! A producer whose reader cannot give a public key fails `create` with
//! [`Error::Crypto`](crate::Error::Crypto); with
//! [`ProducerCryptoFailureAction::Send`](crate::crypto::ProducerCryptoFailureAction) it is
//! created and sends unencrypted (logged); each message sent without a key makes it load the
//! keys again (in the background, one load at a time), and the messages after a load
//! succeeded are encrypted (upstream loads a missing key before each message, too).
//!
//! A consumer that cannot decrypt a message (no key reader, no private key for any recipient,
//! a reader error, a tampered payload or IV: AES-GCM authenticates both) does what its
//! [`ConsumerCryptoFailureAction`](crate::crypto::ConsumerCryptoFailureAction) says:
//!
//! | Action | The message | The application |
//! |---|---|---|
//! | `Fail` (default) | not delivered, not acked: redelivered after a reconnect, the [ack timeout](crate::ConsumerBuilder::ack_timeout) (its clock starts when decryption fails) or `redeliver_unacknowledged_messages`; never dead-lettered, as it is never delivered (as upstream) | receives `Err(Error::Crypto(CryptoError::Undelivered { id, cause }))` in its place |
//! | `Discard` | acked with validation error `DecryptionError`, dropped | nothing; counted in [`Consumer::discarded_entries`](crate::Consumer::discarded_entries) |
//! | `Consume` | delivered with its payload still encrypted, a batch as one message | [`Message::encryption_context`](crate::Message::encryption_context) gives the keys, IV, compression and batch size |
//!
//! A chunk of a chunked message cannot be delivered encrypted on its own: under `Consume` it
//! fails like `Fail`.
//!
//! ## Redelivery and dead-letter topics
//!
//! A message redelivered (a negative ack, an ack timeout) is decrypted again, with the data
//! key already cached. With a [`DeadLetterPolicy`](crate::DeadLetterPolicy), a message sent to
//! the dead-letter topic is **the message as the application received it, in clear**:
//! upstream's consumers (Java `ConsumerImpl.processPossibleToDLQ`, and the C++ core of the
//! Python client, checked in `tests/interop/`) publish the decrypted payload through a
//! dead-letter producer that has no encryption configured, and so does this one. Anyone who
//! can read the dead-letter topic reads the plaintext. If it must not hold plaintext, restrict
//! who reads it, or set aside failing messages yourself (publish them with an encrypting
//! producer of your own, then ack them) instead of a dead-letter policy. A message delivered
//! still encrypted (`Consume`) is dead-lettered as delivered: its ciphertext, without the
//! recipients' keys or the IV, which nothing can decrypt.
//!
//! ## Key material
//!
//! No key material (private keys, data keys) appears in any log or `Debug` output. Data keys
//! and the private keys' bytes this crate copies (their DER and base64 forms, the unwrapped
//! data key) are zeroized when dropped, as is the buffer a key reader returns once parsed, if
//! the reader kept no other reference to it; the key schedules aws-lc holds are cleansed by
//! aws-lc when freed.
//!
//! ## Testing
//!
//! With features `encryption` and `mock-broker`,
//! [`crypto::testing::rsa_key_pair_pem`](crate::crypto::testing::rsa_key_pair_pem) gives a
//! fresh RSA key pair in PEM form, to encrypt and decrypt through the
//! [mock broker](crate::mock) without key files.
