//! Protobuf schemas: a `.proto` compiled in-process by protox, or a compiled descriptor set,
//! reduced to one message's descriptor (prost-reflect), which the decoder walks per record.

use std::path::Path;

use prost_reflect::{DescriptorPool, FieldDescriptor, FileDescriptor, Kind, MessageDescriptor};

use super::{Field, Prim, Ty, join, unsupported};
use crate::base::error::{Error, Result};

/// One message type of a compiled `.proto`.
#[derive(Debug, Clone)]
pub struct ProtoSchema {
    pub(crate) message: MessageDescriptor,
    pub(crate) fields: Vec<Field>,
}

/// A well-known message that maps to a column value rather than a struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WellKnown {
    Timestamp,
    /// `google.protobuf.*Value`: the wrapped scalar is its field 1.
    Wrapper(Prim),
}

pub(crate) fn well_known(m: &MessageDescriptor) -> Option<WellKnown> {
    Some(match m.full_name() {
        "google.protobuf.Timestamp" => WellKnown::Timestamp,
        "google.protobuf.DoubleValue" => WellKnown::Wrapper(Prim::Double),
        "google.protobuf.FloatValue" => WellKnown::Wrapper(Prim::Float),
        "google.protobuf.Int64Value" | "google.protobuf.UInt64Value" | "google.protobuf.UInt32Value" => WellKnown::Wrapper(Prim::Long),
        "google.protobuf.Int32Value" => WellKnown::Wrapper(Prim::Int),
        "google.protobuf.BoolValue" => WellKnown::Wrapper(Prim::Boolean),
        "google.protobuf.StringValue" => WellKnown::Wrapper(Prim::String),
        "google.protobuf.BytesValue" => WellKnown::Wrapper(Prim::Binary),
        _ => return None,
    })
}

impl ProtoSchema {
    /// A `.proto` (imports from its directory; `message` required) or a descriptor set.
    pub fn load(path: &Path, message: Option<&str>) -> Result<Self> {
        let pool = match path.extension().and_then(|e| e.to_str()) {
            Some("proto") => {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                let mut compiler = protox::Compiler::new([dir]).map_err(compile_error)?;
                compiler.include_imports(true).open_file(path).map_err(compile_error)?;
                if message.is_none() {
                    return Err(Error::Schema("a .proto schema needs `message` (the full name of the value's message type)".into()));
                }
                compiler.descriptor_pool()
            }
            _ => {
                let bytes = std::fs::read(path)?;
                DescriptorPool::decode(bytes.as_slice())
                    .map_err(|e| Error::Schema(format!("not a protobuf descriptor set (.pb/.desc): {e}")))?
            }
        };
        Self::from_pool(&pool, message)
    }

    /// `.proto` source importing nothing beyond the well-known types.
    pub fn from_source(source: &str, message: Option<&str>) -> Result<Self> {
        if message.is_none() {
            return Err(Error::Schema("a .proto schema needs `message` (the full name of the value's message type)".into()));
        }
        Self::from_pool(&compile_source(source)?, message)
    }

    /// `.proto` source (as a registry holds it) and the message `select` picks from its file.
    pub fn from_source_selecting(source: &str, select: impl FnOnce(&FileDescriptor) -> Result<MessageDescriptor>) -> Result<Self> {
        let pool = compile_source(source)?;
        let file = pool.get_file_by_name(SOURCE_NAME).ok_or_else(|| Error::Schema("the compiled .proto is missing".into()))?;
        let message = select(&file)?;
        Self::from_pool(&pool, Some(message.full_name()))
    }

    fn from_pool(pool: &DescriptorPool, message: Option<&str>) -> Result<Self> {
        let message = match message {
            Some(name) => pool.get_message_by_name(name).ok_or_else(|| {
                let known: Vec<String> = user_messages(pool).map(|m| m.full_name().to_string()).collect();
                Error::Schema(format!("no message `{name}` (messages: {})", known.join(", ")))
            })?,
            None => {
                let mut all = user_messages(pool).filter(|m| !m.is_map_entry());
                match (all.next(), all.next()) {
                    (Some(m), None) => m,
                    _ => return Err(Error::Schema("the descriptor set holds several messages: set `message`".into())),
                }
            }
        };
        let mut expanding = Vec::new();
        let fields = message_fields(&message, "", &mut expanding)?;
        Ok(ProtoSchema { message, fields })
    }
}

/// The name the in-memory `.proto` source compiles under.
const SOURCE_NAME: &str = "schema.proto";

/// `.proto` text, or a base64 `FileDescriptorProto` (how Confluent's serializers register
/// Protobuf schemas, and what a registry serves with `format=serialized`).
fn compile_source(source: &str) -> Result<DescriptorPool> {
    let file = match protox::file::File::from_source(SOURCE_NAME, source) {
        Ok(file) => file,
        Err(e) => match serialized_descriptor(source) {
            Some((bytes, descriptor)) => return serialized_pool(bytes, &descriptor),
            None => return Err(compile_error(e)),
        },
    };
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(OneFile(file));
    resolver.add(KnownFiles);
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true).open_file(SOURCE_NAME).map_err(compile_error)?;
    Ok(compiler.descriptor_pool())
}

/// A serialized `FileDescriptorProto` in a pool with its imports, decoded by prost-reflect,
/// which keeps its custom options (a decimal's `confluent.field_meta`), under [`SOURCE_NAME`].
fn serialized_pool(mut bytes: Vec<u8>, descriptor: &prost_types::FileDescriptorProto) -> Result<DescriptorPool> {
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(KnownFiles);
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    for dependency in &descriptor.dependency {
        compiler.open_file(dependency).map_err(compile_error)?;
    }
    let mut pool = compiler.descriptor_pool();
    // Field 1 (`name`) once more at the end: the last occurrence of a singular field wins.
    prost::encoding::string::encode(1, &SOURCE_NAME.to_string(), &mut bytes);
    pool.decode_file_descriptor_proto(bytes.as_slice()).map_err(|e| Error::Schema(format!("the registered descriptor: {e}")))?;
    Ok(pool)
}

fn serialized_descriptor(source: &str) -> Option<(Vec<u8>, prost_types::FileDescriptorProto)> {
    use base64::Engine;
    use prost::Message;
    let bytes = base64::engine::general_purpose::STANDARD.decode(source.trim()).ok()?;
    let descriptor = prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok().filter(|d| !d.message_type.is_empty())?;
    Some((bytes, descriptor))
}

fn user_messages(pool: &DescriptorPool) -> impl Iterator<Item = MessageDescriptor> {
    pool.all_messages().filter(|m| !m.full_name().starts_with("google.protobuf."))
}

fn compile_error(e: protox::Error) -> Error {
    Error::Schema(format!("cannot compile the .proto: {e}"))
}

struct OneFile(protox::file::File);

/// The imports Confluent's Protobuf converter and serializers treat as built in (they are
/// never registered as references): `confluent.type.Decimal`, the `confluent.field_meta`
/// option that carries a decimal's precision and scale, and the `google.type` date and time
/// of day. Written here from their published definitions (fields a reader needs).
const KNOWN_FILES: &[(&str, &str)] = &[
    (
        "confluent/meta.proto",
        r#"syntax = "proto3"; package confluent; import "google/protobuf/descriptor.proto";
        message Meta { string doc = 1; map<string, string> params = 2; repeated string tags = 3; }
        extend google.protobuf.FileOptions { Meta file_meta = 1088; }
        extend google.protobuf.MessageOptions { Meta message_meta = 1088; }
        extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
        extend google.protobuf.EnumOptions { Meta enum_meta = 1088; }
        extend google.protobuf.EnumValueOptions { Meta enum_value_meta = 1088; }"#,
    ),
    (
        "confluent/type/decimal.proto",
        r#"syntax = "proto3"; package confluent.type; message Decimal { bytes value = 1; uint32 precision = 2; int32 scale = 3; }"#,
    ),
    (
        "google/type/date.proto",
        r#"syntax = "proto3"; package google.type; message Date { int32 year = 1; int32 month = 2; int32 day = 3; }"#,
    ),
    (
        "google/type/timeofday.proto",
        r#"syntax = "proto3"; package google.type; message TimeOfDay { int32 hours = 1; int32 minutes = 2; int32 seconds = 3; int32 nanos = 4; }"#,
    ),
];

/// Whether a registry reference names one of [`KNOWN_FILES`] or a `google/protobuf` file.
pub fn is_known_import(name: &str) -> bool {
    name.starts_with("google/protobuf/") || KNOWN_FILES.iter().any(|(known, _)| *known == name)
}

struct KnownFiles;

impl protox::file::FileResolver for KnownFiles {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match KNOWN_FILES.iter().find(|(known, _)| *known == name) {
            Some((known, source)) => protox::file::File::from_source(known, source),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

impl protox::file::FileResolver for OneFile {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == self.0.name() {
            Ok(protox::file::File::from_file_descriptor_proto(self.0.file_descriptor_proto().clone()))
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

fn message_fields(m: &MessageDescriptor, path: &str, expanding: &mut Vec<String>) -> Result<Vec<Field>> {
    if expanding.iter().any(|n| n == m.full_name()) {
        return Err(unsupported(
            path,
            format!(
                "recursive message `{}` ({} -> {}): Iceberg tables need a finite schema",
                m.full_name(),
                expanding.join(" -> "),
                m.full_name()
            ),
        ));
    }
    expanding.push(m.full_name().to_string());
    let fields = m.fields().map(|fd| field(&fd, &join(path, fd.name()), expanding)).collect();
    expanding.pop();
    fields
}

/// A field's column: repeated and map fields are required (absent = empty); messages, proto3
/// `optional` and oneof members are optional (they have presence); plain scalars are required.
fn field(fd: &FieldDescriptor, path: &str, expanding: &mut Vec<String>) -> Result<Field> {
    if fd.is_map() {
        let Kind::Message(entry) = fd.kind() else { unreachable!("a map field's kind is its entry message") };
        let key = value_ty(&entry.map_entry_key_field().kind(), &join(path, "key"), expanding)?;
        let value_fd = entry.map_entry_value_field();
        let value = value_ty(&value_fd.kind(), &join(path, "value"), expanding)?;
        let value_optional = matches!(value_fd.kind(), Kind::Message(_));
        return Ok(Field::new(fd.name(), false, Field::map(key, Field::new("value", value_optional, value))).with_default(true));
    }
    let ty = value_ty(&fd.kind(), path, expanding)?;
    if fd.is_list() {
        return Ok(Field::new(fd.name(), false, Ty::List(Box::new(Field::element(false, ty)))).with_default(true));
    }
    // Every protobuf field has a value when absent (its zero value, or presence = null).
    Ok(Field::new(fd.name(), fd.supports_presence(), ty).with_default(true))
}

/// The column type of a scalar field or a `google.protobuf` wrapper (`None`: another message).
pub(crate) fn scalar_prim(kind: &Kind) -> Option<Prim> {
    Some(match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Prim::Int,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint32 | Kind::Fixed32 | Kind::Uint64 | Kind::Fixed64 => Prim::Long,
        Kind::Float => Prim::Float,
        Kind::Double => Prim::Double,
        Kind::Bool => Prim::Boolean,
        Kind::String | Kind::Enum(_) => Prim::String,
        Kind::Bytes => Prim::Binary,
        Kind::Message(m) => match well_known(m) {
            Some(WellKnown::Wrapper(p)) => p,
            _ => return None,
        },
    })
}

fn value_ty(kind: &Kind, path: &str, expanding: &mut Vec<String>) -> Result<Ty> {
    if let Some(prim) = scalar_prim(kind) {
        return Ok(Ty::Prim(prim));
    }
    Ok(Ty::Prim(match kind {
        Kind::Message(m) => match well_known(m) {
            Some(WellKnown::Timestamp) => Prim::Timestamptz,
            _ => return Ok(Ty::Struct(message_fields(m, path, expanding)?)),
        },
        _ => return Err(unsupported(path, format!("{kind:?} has no column type"))),
    }))
}
