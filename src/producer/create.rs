//! The create handshake of a producer: the PRODUCER command of one attempt and what the
//! broker's PRODUCER_SUCCESS says (its name and schema version bounded: the broker chooses
//! them and every pending frame carries them).

use std::sync::Arc;

use bytes::Bytes;

use crate::entity::CreateCommand;
use crate::error::{Error, Result};
use crate::proto::{self, BaseCommand};

use super::options::ProducerOptions;

/// What the broker said when the producer was created.
#[derive(Debug, Clone)]
pub(crate) struct Created {
    pub name: String,
    /// The next sequence id to use.
    pub next_sequence_id: u64,
    pub topic_epoch: Option<u64>,
    /// The version of the producer's schema (`None` when the broker names none).
    pub schema_version: Option<Bytes>,
}

/// The longest producer name the client takes from a broker's ProducerSuccess. Every message
/// of an unbatched producer carries the name in its metadata while it is pending, so a broker
/// naming it with megabytes would multiply them by the pending messages (4 MiB × 2,000 sends
/// reached 1.1 GB). Upstream brokers name producers `<cluster>-<broker id>-<counter>` (tens of
/// bytes); 1 KiB leaves room for long user-chosen names.
pub(crate) const MAX_PRODUCER_NAME: usize = 1024;

/// The longest schema version the client takes from a broker: it too is copied into every
/// message's metadata. Upstream versions are an 8-byte long (`LongSchemaVersion`).
pub(crate) const MAX_SCHEMA_VERSION: usize = 64;

impl Created {
    /// `requested` is the name the client asked for (the user's, or the one the broker chose
    /// at the first create, on a re-create).
    pub(crate) fn parse(response: BaseCommand, requested: Option<&str>) -> Result<Created> {
        let ok = response.producer_success.ok_or_else(|| {
            Error::Protocol("producer create answered without ProducerSuccess".into())
        })?;
        let too_long = |what: &str, n: usize, max: usize| {
            Error::Protocol(format!(
                "ProducerSuccess names the {what} with {n} bytes, more than the {max} the \
                 client accepts (each pending message would carry it)"
            ))
        };
        // The cap is on what the broker chooses: a name the client asked for and the broker
        // echoes is the user's own cost (upstream's Java client takes any `producerName`).
        if ok.producer_name.len() > MAX_PRODUCER_NAME
            && requested != Some(ok.producer_name.as_str())
        {
            return Err(too_long(
                "producer",
                ok.producer_name.len(),
                MAX_PRODUCER_NAME,
            ));
        }
        if let Some(v) = ok
            .schema_version
            .as_ref()
            .filter(|v| v.len() > MAX_SCHEMA_VERSION)
        {
            return Err(too_long("schema version", v.len(), MAX_SCHEMA_VERSION));
        }
        // -1 (or absent) = nothing stored yet. A broker's i64::MAX must not overflow.
        let last = ok.last_sequence_id.unwrap_or(-1);
        let next_sequence_id = u64::try_from(last).map_or(0, |l| l + 1);
        Ok(Created {
            name: ok.producer_name,
            next_sequence_id,
            topic_epoch: ok.topic_epoch,
            schema_version: ok.schema_version.filter(|v| !v.is_empty()),
        })
    }
}

/// The CommandProducer of one create attempt.
pub(crate) fn create_command(
    topic: &str,
    producer_id: u64,
    name: Option<&str>,
    epoch: u64,
    topic_epoch: Option<u64>,
    opts: &ProducerOptions,
    txn_enabled: bool,
) -> CreateCommand {
    let body = proto::CommandProducer {
        topic: topic.to_string(),
        producer_id,
        producer_name: name.map(str::to_string),
        user_provided_producer_name: Some(opts.name.is_some()),
        epoch: Some(epoch),
        topic_epoch,
        metadata: opts
            .properties
            .iter()
            .map(|(k, v)| proto::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        producer_access_mode: Some(opts.access_mode.to_proto()),
        initial_subscription_name: opts.initial_subscription_name.clone(),
        // BYTES registers nothing (upstream sends no schema for `Schema.BYTES`).
        schema: opts
            .schema
            .as_ref()
            .filter(|s| s.schema_type != crate::schema::SchemaType::Bytes)
            .map(|s| s.to_proto()),
        // Java `ProducerImpl.connectionOpened` sends the client's `enableTransaction` (the
        // broker then waits for the topic's transaction buffer before answering).
        txn_enabled: txn_enabled.then_some(true),
        ..Default::default()
    };
    Arc::new(move |request_id| crate::commands::producer(body.clone(), request_id))
}
