//! Typed messages: schemas the broker registers, versions and checks for compatibility.
//!
//! A [`Schema`] turns values into payload bytes and back, and describes itself with a
//! [`SchemaInfo`] (type, definition, properties) that producers and consumers send to the broker
//! (`CommandProducer.schema` / `CommandSubscribe.schema`). Typed handles wrap the byte handles:
//!
//! ```no_run
//! # async fn run(client: pulsar_sdk::Client) -> pulsar_sdk::Result<()> {
//! use pulsar_sdk::schema::StringSchema;
//! let producer = client.producer("greetings").schema(StringSchema).create().await?;
//! producer.send_and_wait(&"hello".to_string()).await?;
//!
//! let mut consumer = client.consumer("greetings").subscription("s").schema(StringSchema)
//!     .subscribe().await?;
//! let msg = consumer.recv().await?;
//! match msg.value() {
//!     Ok(text) => println!("{text}"),
//!     // A payload the schema cannot decode is an error for that message only.
//!     Err(e) => { eprintln!("{e}"); consumer.nack(&msg)?; }
//! }
//! # Ok(()) }
//! ```
//!
//! Built-ins, byte-compatible with the official clients: [`BytesSchema`], [`StringSchema`], the
//! primitives ([`Int8Schema`] .. [`Int64Schema`], [`FloatSchema`], [`DoubleSchema`],
//! [`BoolSchema`], [`TimestampSchema`], [`DateSchema`], [`TimeSchema`], [`InstantSchema`],
//! [`LocalDateSchema`], [`LocalTimeSchema`], [`LocalDateTimeSchema`]; upstream's big-endian
//! encodings), [`KeyValueSchema`] (inline and separated), [`AutoConsumeSchema`], and behind
//! features `JsonSchema` (`json`), `AvroSchema` / `GenericAvroSchema` (`avro`) and
//! `ProtobufNativeSchema` (`protobuf`).

mod auto;
#[cfg(feature = "avro")]
mod avro;
#[cfg(feature = "avro")]
mod avro_guard;
pub(crate) mod error;
mod info;
#[cfg(feature = "json")]
mod json;
mod keyvalue;
mod primitive;
#[cfg(feature = "protobuf")]
mod protobuf;
mod registry;
mod typed;

pub use auto::{AutoConsumeSchema, GenericValue};
#[cfg(feature = "avro")]
pub use avro::{AvroSchema, GenericAvroSchema};
pub use error::SchemaError;
pub use info::{SchemaInfo, SchemaType, SchemaVersion};
#[cfg(feature = "json")]
pub use json::JsonSchema;
pub use keyvalue::{KeyValue, KeyValueEncoding, KeyValueSchema};
pub use primitive::{
    BoolSchema, BytesSchema, DateSchema, DoubleSchema, FloatSchema, InstantSchema, Int16Schema,
    Int32Schema, Int64Schema, Int8Schema, LocalDateSchema, LocalDateTimeSchema, LocalTimeSchema,
    StringSchema, TimeSchema, TimestampSchema,
};
#[cfg(feature = "protobuf")]
pub use protobuf::ProtobufNativeSchema;
pub use typed::{
    TypedConsumer, TypedConsumerBuilder, TypedMessage, TypedMessages, TypedProducer,
    TypedProducerBuilder, TypedReader, TypedReaderBuilder,
};

pub(crate) use registry::{
    get_or_create_schema as registry_get_or_create_schema, get_schema as registry_get_schema,
    WriterSchemas,
};

use bytes::Bytes;

use crate::message::{Message, ProducerMessage};

/// A schema: how values of [`Schema::Type`] become payloads and back, and what the broker
/// registers for them ([`Schema::info`]).
///
/// Implement [`Schema::encode`] and [`Schema::decode`]; the `*_message` methods have defaults
/// that move the payload only (a separated [`KeyValueSchema`] overrides them to use the message
/// key too).
pub trait Schema: Send + Sync + 'static {
    /// The values this schema encodes.
    type Type: Send + 'static;

    /// What the broker registers: type, name, definition and properties. `None` registers
    /// nothing (plain bytes, like upstream's `Schema.BYTES`).
    fn info(&self) -> Option<SchemaInfo>;

    /// Encodes a value into a payload.
    fn encode(&self, value: &Self::Type) -> Result<Bytes, SchemaError>;

    /// Decodes a payload. `writer` is the schema the producer wrote it with, when the consumer
    /// knows it (fetched by version, see [`Schema::needs_writer_schema`]).
    fn decode(
        &self,
        payload: &[u8],
        writer: Option<&SchemaInfo>,
    ) -> Result<Self::Type, SchemaError>;

    /// Whether decoding needs the writer's schema (Avro resolution, `AUTO_CONSUME`): the typed
    /// consumer then fetches unknown versions from the broker (GetSchema). Default false.
    fn needs_writer_schema(&self) -> bool {
        false
    }

    /// Puts an encoded value into `msg` (its payload; a separated key/value also sets the key).
    fn encode_message(
        &self,
        value: &Self::Type,
        msg: &mut ProducerMessage,
    ) -> Result<(), SchemaError> {
        msg.payload = self.encode(value)?;
        Ok(())
    }

    /// Decodes a received message (its payload; a separated key/value also reads the key).
    fn decode_message(
        &self,
        msg: &Message,
        writer: Option<&SchemaInfo>,
    ) -> Result<Self::Type, SchemaError> {
        self.decode(&msg.payload, writer)
    }
}

impl<S: Schema + ?Sized> Schema for std::sync::Arc<S> {
    type Type = S::Type;
    fn info(&self) -> Option<SchemaInfo> {
        (**self).info()
    }
    fn encode(&self, value: &Self::Type) -> Result<Bytes, SchemaError> {
        (**self).encode(value)
    }
    fn decode(
        &self,
        payload: &[u8],
        writer: Option<&SchemaInfo>,
    ) -> Result<Self::Type, SchemaError> {
        (**self).decode(payload, writer)
    }
    fn needs_writer_schema(&self) -> bool {
        (**self).needs_writer_schema()
    }
    fn encode_message(
        &self,
        value: &Self::Type,
        msg: &mut ProducerMessage,
    ) -> Result<(), SchemaError> {
        (**self).encode_message(value, msg)
    }
    fn decode_message(
        &self,
        msg: &Message,
        writer: Option<&SchemaInfo>,
    ) -> Result<Self::Type, SchemaError> {
        (**self).decode_message(msg, writer)
    }
}

// The crate's tests always build with every feature (see the dev-dependencies).
#[cfg(all(test, feature = "avro"))]
mod tests;
