//! A record's `timestampType`: Kafka's three names, read leniently (anything else is absent,
//! as an unknown field is), for the `kafka_timestamp_type` column.

use serde::de::{self, MapAccess, SeqAccess, Visitor};

/// Kafka's timestamp types, as the event source mapping spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
    /// The record carries no timestamp (its `timestamp` is -1).
    NoTimestampType,
}

impl TimestampType {
    /// The type the mapping names; `None` for anything else (ignored, as an unknown field is).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "CREATE_TIME" => Some(Self::CreateTime),
            "LOG_APPEND_TIME" => Some(Self::LogAppendTime),
            "NO_TIMESTAMP_TYPE" => Some(Self::NoTimestampType),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::CreateTime => "CREATE_TIME",
            Self::LogAppendTime => "LOG_APPEND_TIME",
            Self::NoTimestampType => "NO_TIMESTAMP_TYPE",
        }
    }
}

/// Lenient: a `timestampType` that is not a known name reads as absent, never as an error
/// (the field is informational; the fast scan reads it the same way).
pub(super) struct ReadTimestampType(pub(super) Option<TimestampType>);

impl<'de> serde::Deserialize<'de> for ReadTimestampType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Option<TimestampType>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Self::Value, E> {
                Ok(TimestampType::parse(s))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_none<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(None)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
                while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(None)
            }
        }
        d.deserialize_any(V).map(ReadTimestampType)
    }
}
