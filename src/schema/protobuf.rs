//! [`ProtobufNativeSchema`]: prost messages in their protobuf binary encoding, registered as
//! PROTOBUF_NATIVE with the definition of upstream's `ProtobufNativeSchema`
//! (`ProtobufNativeSchemaData`, also built by the Python client's `ProtobufNativeSchema`): the
//! JSON object `{"fileDescriptorSet": <base64 FileDescriptorSet>, "rootMessageTypeName":
//! <full message name>, "rootFileDescriptorName": <the .proto file declaring it>}`.
//!
//! prost messages carry no descriptor at run time: the application passes the
//! `FileDescriptorSet` bytes (for example from `prost_build::Config::file_descriptor_set_path`,
//! with the message's file and its dependencies).

use std::marker::PhantomData;

use bytes::Bytes;
use prost::Message as _;

use super::info::json_string;
use super::keyvalue::base64_encode;
use super::{Schema, SchemaError, SchemaInfo, SchemaType};

/// prost messages of type `T`, registered as PROTOBUF_NATIVE.
pub struct ProtobufNativeSchema<T> {
    info: SchemaInfo,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for ProtobufNativeSchema<T> {
    fn clone(&self) -> Self {
        ProtobufNativeSchema {
            info: self.info.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for ProtobufNativeSchema<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtobufNativeSchema")
            .field("info", &self.info)
            .finish()
    }
}

/// The file of `set` that declares the message `full_name` (`package.Name`, nested types
/// as `package.Outer.Inner`).
fn declaring_file<'a>(
    set: &'a prost_types::FileDescriptorSet,
    full_name: &str,
) -> Option<&'a prost_types::FileDescriptorProto> {
    fn declares(prefix: &str, messages: &[prost_types::DescriptorProto], wanted: &str) -> bool {
        messages.iter().any(|m| {
            let name = format!("{prefix}{}", m.name());
            name == wanted || declares(&format!("{name}."), &m.nested_type, wanted)
        })
    }
    set.file.iter().find(|f| {
        let prefix = match f.package() {
            "" => String::new(),
            p => format!("{p}."),
        };
        declares(&prefix, &f.message_type, full_name)
    })
}

impl<T> ProtobufNativeSchema<T> {
    /// A schema for the message `root_message_type` (its full name, `package.Message`)
    /// described by `file_descriptor_set` (an encoded `google.protobuf.FileDescriptorSet`
    /// holding its file and their dependencies). Fails if the set does not decode or does not
    /// declare that message.
    pub fn new(file_descriptor_set: &[u8], root_message_type: &str) -> Result<Self, SchemaError> {
        let set = prost_types::FileDescriptorSet::decode(file_descriptor_set)
            .map_err(|e| SchemaError::InvalidDefinition(format!("FileDescriptorSet: {e}")))?;
        let file = declaring_file(&set, root_message_type).ok_or_else(|| {
            SchemaError::InvalidDefinition(format!(
                "no file of the FileDescriptorSet declares `{root_message_type}`"
            ))
        })?;
        // The field order of Java's `ProtobufNativeSchemaData` (Jackson, declaration order).
        let mut def = String::from(r#"{"fileDescriptorSet":"#);
        json_string(&mut def, &base64_encode(file_descriptor_set));
        def.push_str(r#","rootMessageTypeName":"#);
        json_string(&mut def, root_message_type);
        def.push_str(r#","rootFileDescriptorName":"#);
        json_string(&mut def, file.name());
        def.push('}');
        Ok(ProtobufNativeSchema {
            info: SchemaInfo::new(SchemaType::ProtobufNative, "").with_definition(def),
            _t: PhantomData,
        })
    }

    /// The schema info it registers.
    pub fn schema_info(&self) -> &SchemaInfo {
        &self.info
    }
}

impl<T> Schema for ProtobufNativeSchema<T>
where
    T: prost::Message + Default + Send + 'static,
{
    type Type = T;

    fn info(&self) -> Option<SchemaInfo> {
        Some(self.info.clone())
    }

    fn encode(&self, value: &T) -> Result<Bytes, SchemaError> {
        Ok(Bytes::from(value.encode_to_vec()))
    }

    fn decode(&self, payload: &[u8], _: Option<&SchemaInfo>) -> Result<T, SchemaError> {
        T::decode(payload).map_err(|e| SchemaError::Decode {
            schema_type: SchemaType::ProtobufNative,
            reason: e.to_string(),
            source: Some(std::sync::Arc::new(e)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{field_descriptor_proto::Type as FieldType, DescriptorProto};
    use prost_types::{FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};

    #[derive(Clone, PartialEq, prost::Message)]
    struct Point {
        #[prost(int32, tag = "1")]
        x: i32,
        #[prost(string, tag = "2")]
        label: String,
    }

    fn descriptor_set() -> Vec<u8> {
        let field = |name: &str, number, ty: FieldType| FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            r#type: Some(ty as i32),
            ..Default::default()
        };
        FileDescriptorSet {
            file: vec![FileDescriptorProto {
                name: Some("demo/point.proto".into()),
                package: Some("demo".into()),
                message_type: vec![DescriptorProto {
                    name: Some("Point".into()),
                    field: vec![
                        field("x", 1, FieldType::Int32),
                        field("label", 2, FieldType::String),
                    ],
                    nested_type: vec![DescriptorProto {
                        name: Some("Inner".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                syntax: Some("proto3".into()),
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn the_definition_is_upstreams_protobuf_native_schema_data() {
        let set = descriptor_set();
        let s = ProtobufNativeSchema::<Point>::new(&set, "demo.Point").unwrap();
        let info = s.info().unwrap();
        assert_eq!(info.schema_type, SchemaType::ProtobufNative);
        assert_eq!(info.schema_type.to_wire(), 20);
        let def: serde_json::Value = serde_json::from_slice(&info.definition).unwrap();
        assert_eq!(def["rootMessageTypeName"], "demo.Point");
        assert_eq!(def["rootFileDescriptorName"], "demo/point.proto");
        let fds = def["fileDescriptorSet"].as_str().unwrap();
        assert_eq!(super::super::keyvalue::base64_decode(fds).unwrap(), set);
        // Nested messages are found too; unknown ones and bad sets are refused.
        assert!(ProtobufNativeSchema::<Point>::new(&set, "demo.Point.Inner").is_ok());
        assert!(ProtobufNativeSchema::<Point>::new(&set, "demo.Nope").is_err());
        assert!(ProtobufNativeSchema::<Point>::new(&[0xff, 0xff], "demo.Point").is_err());
    }

    #[test]
    fn messages_use_the_protobuf_binary_encoding() {
        let s = ProtobufNativeSchema::<Point>::new(&descriptor_set(), "demo.Point").unwrap();
        let p = Point {
            x: 150,
            label: "a".into(),
        };
        let bytes = s.encode(&p).unwrap();
        // Field 1 varint 150 (0x96 0x01), field 2 length-delimited "a".
        assert_eq!(&bytes[..], [0x08, 0x96, 0x01, 0x12, 0x01, b'a']);
        assert_eq!(s.decode(&bytes, None).unwrap(), p);
        assert!(s.decode(&[0x08], None).is_err());
    }

    proptest::proptest! {
        #[test]
        fn protobuf_round_trips(x: i32, label: String) {
            let s = ProtobufNativeSchema::<Point>::new(&descriptor_set(), "demo.Point").unwrap();
            let p = Point { x, label };
            let back = s.decode(&s.encode(&p).unwrap(), None).unwrap();
            proptest::prop_assert_eq!(back, p);
        }
    }
}
