//! JSON Schema (the draft 7 / 2020-12 subset that maps to Iceberg types). The decoder needs no
//! more than the format-neutral [`Ty`] tree: JSON values carry their own structure.

use std::collections::HashMap;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{Field, Prim, Ty, join, unsupported};
use crate::base::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct JsonSchema {
    pub(crate) fields: Vec<Field>,
    /// The allowed values of each string property with an `enum`, by path (dotted, `element`
    /// and `value` inside lists and maps, as [`join`] writes them): a value outside is a record
    /// error, as JSON Schema validation says.
    pub(crate) enums: HashMap<String, Vec<String>>,
    /// `unknown_fields = "dead_letter"`: a property the schema does not declare, at any level,
    /// makes the record a dead letter naming it (default: ignored).
    pub(crate) reject_unknown: bool,
    /// `schema = "infer"`: top-level `long` columns of the table these values need as `double`
    /// (the commit replaces them: `crate::engine::commit::replace_column`).
    pub(crate) replace_long: Vec<String>,
}

impl JsonSchema {
    /// Fields without value constraints (an image of another format's fields).
    pub(crate) fn of_fields(fields: Vec<Field>) -> Self {
        JsonSchema { fields, enums: HashMap::new(), reject_unknown: false, replace_long: Vec::new() }
    }

    pub fn parse(text: &str) -> Result<Self> {
        let root: Value = serde_json::from_str(text).map_err(|e| Error::Schema(format!("invalid JSON Schema: {e}")))?;
        let mut parser = Parser { root: &root, expanding: Vec::new(), enums: HashMap::new() };
        match parser.node(&root, "")? {
            (_, Ty::Struct(fields)) => Ok(JsonSchema { fields, enums: parser.enums, reject_unknown: false, replace_long: Vec::new() }),
            (_, other) => Err(Error::Schema(format!("the top-level JSON Schema must be an object with properties, not {other}"))),
        }
    }
}

struct Parser<'a> {
    root: &'a Value,
    /// `$ref`s being expanded, to refuse recursion.
    expanding: Vec<String>,
    enums: HashMap<String, Vec<String>>,
}

const ALLOWED: &str = "allowed: type string/integer/number/boolean/object/array (or [T, \"null\"]), \
                       format date-time/date/time/local-date-time/uuid/decimal (on strings; decimal with precision and scale), date-time/int32 (on integers), properties, required, items, additionalProperties, \
                       $ref to #/definitions or #/$defs";

impl<'a> Parser<'a> {
    /// `(nullable, type)` of the value `schema` describes.
    fn node(&mut self, schema: &'a Value, path: &str) -> Result<(bool, Ty)> {
        let Some(obj) = schema.as_object().map(|_| schema) else {
            return Err(unsupported(path, format!("a schema must be an object ({ALLOWED})")));
        };
        if let Some(reference) = obj.get("$ref") {
            return self.reference(reference, path);
        }
        for construct in ["anyOf", "oneOf", "allOf", "not", "if", "patternProperties"] {
            if obj.get(construct).is_some() {
                return Err(unsupported(path, format!("`{construct}` is not supported ({ALLOWED})")));
            }
        }
        let (nullable, name) = type_name(obj, path)?;
        if let Some(values) = obj.get("enum") {
            self.enumeration(values, name, path)?;
        }
        let ty = match name {
            "string" => Ty::Prim(match obj.get("format").and_then(Value::as_str) {
                Some("date-time") => Prim::Timestamptz,
                Some("local-date-time") => Prim::Timestamp,
                Some("date") => Prim::Date,
                Some("time") => Prim::Time,
                Some("uuid") => Prim::Uuid,
                Some("decimal") => decimal(obj, path)?,
                _ => Prim::String,
            }),
            "integer" => Ty::Prim(match obj.get("format").and_then(Value::as_str) {
                // Epoch milliseconds: what JSON telemetry sends.
                Some("date-time") => Prim::Timestamptz,
                Some("int32") => Prim::Int,
                _ => Prim::Long,
            }),
            "number" => Ty::Prim(Prim::Double),
            "boolean" => Ty::Prim(Prim::Boolean),
            "array" => {
                let items = obj.get("items").ok_or_else(|| unsupported(path, "an array needs `items` (one schema)"))?;
                let (optional, ty) = self.node(items, &join(path, "element"))?;
                Ty::List(Box::new(Field::element(optional, ty)))
            }
            "object" => self.object(obj, path)?,
            other => return Err(unsupported(path, format!("type `{other}` is not supported ({ALLOWED})"))),
        };
        Ok((nullable, ty))
    }

    fn object(&mut self, obj: &'a Value, path: &str) -> Result<Ty> {
        let properties = obj.get("properties").and_then(Value::as_object);
        let additional = obj.get("additionalProperties").filter(|v| v.is_object());
        match (properties, additional) {
            (Some(props), _) if !props.is_empty() => {
                let required: Vec<&str> = match obj.get("required") {
                    None => Vec::new(),
                    Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
                    Some(_) => return Err(unsupported(path, "`required` must be a list of property names")),
                };
                let fields = props
                    .iter()
                    .map(|(name, schema)| {
                        let (nullable, ty) = self.node(schema, &join(path, name))?;
                        let has_default = schema.get("default").is_some();
                        Ok(Field::new(name, nullable || !required.contains(&name.as_str()), ty).with_default(has_default))
                    })
                    .collect::<Result<_>>()?;
                Ok(Ty::Struct(fields))
            }
            (_, Some(values)) => {
                let (optional, ty) = self.node(values, &join(path, "value"))?;
                Ok(Field::map(Ty::Prim(Prim::String), Field::new("value", optional, ty)))
            }
            _ => Err(unsupported(path, "an object needs `properties`, or `additionalProperties` with a schema (a map)")),
        }
    }

    /// An `enum` of strings on a string (a `null` member is what a nullable type allows).
    fn enumeration(&mut self, values: &Value, type_name: &str, path: &str) -> Result<()> {
        let members = values.as_array().ok_or_else(|| unsupported(path, "`enum` must be a list of values"))?;
        let strings: Vec<String> = members.iter().filter_map(|v| v.as_str().map(str::to_string)).collect();
        let nulls = members.iter().filter(|v| matches!(v, Value::Null)).count();
        if type_name != "string" || strings.len() + nulls != members.len() || strings.is_empty() {
            return Err(unsupported(path, "only an `enum` of strings (on a string, and null) is supported"));
        }
        self.enums.insert(path.to_string(), strings);
        Ok(())
    }

    fn reference(&mut self, reference: &'a Value, path: &str) -> Result<(bool, Ty)> {
        let target = reference.as_str().unwrap_or_default();
        let Some(name) = target.strip_prefix("#/definitions/").or_else(|| target.strip_prefix("#/$defs/")) else {
            return Err(unsupported(path, format!("$ref `{target}`: only #/definitions/NAME and #/$defs/NAME are supported")));
        };
        if self.expanding.iter().any(|r| r == target) {
            return Err(unsupported(path, format!("recursive $ref `{target}`: Iceberg tables need a finite schema")));
        }
        let defs = if target.starts_with("#/definitions/") { "definitions" } else { "$defs" };
        let schema =
            self.root.get(defs).and_then(|d| d.get(name)).ok_or_else(|| unsupported(path, format!("$ref `{target}` points at nothing")))?;
        self.expanding.push(target.to_string());
        let node = self.node(schema, path);
        self.expanding.pop();
        node
    }
}

/// A decimal string's `precision` (1 to 38: what Iceberg allows) and `scale` (0 to precision).
fn decimal(obj: &Value, path: &str) -> Result<Prim> {
    let number = |key: &str| obj.get(key).and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
    match (number("precision"), number("scale")) {
        (Some(precision), Some(scale)) if (1..=38).contains(&precision) && scale <= precision => Ok(Prim::Decimal { precision, scale }),
        _ => Err(unsupported(path, "format `decimal` needs whole numbers `precision` (1 to 38) and `scale` (0 to precision)")),
    }
}

/// `type` as `"T"` or `["T", "null"]` (either order); an object with properties may omit it.
fn type_name<'v>(obj: &'v Value, path: &str) -> Result<(bool, &'v str)> {
    match obj.get("type") {
        Some(Value::String(t)) => Ok((false, t.as_str())),
        Some(Value::Array(types)) => match types.as_slice() {
            [Value::String(t), Value::String(n)] | [Value::String(n), Value::String(t)] if n == "null" && t != "null" => {
                Ok((true, t.as_str()))
            }
            _ => Err(unsupported(path, format!("type {types:?}: only \"T\" or [\"T\", \"null\"] is supported"))),
        },
        None if obj.get("properties").is_some() => Ok((false, "object")),
        None if obj.get("enum").and_then(Value::as_array).is_some_and(|v| v.iter().any(Value::is_string)) => {
            let nullable = obj.get("enum").and_then(Value::as_array).is_some_and(|v| v.iter().any(|m| matches!(m, Value::Null)));
            Ok((nullable, "string"))
        }
        _ => Err(unsupported(path, format!("no `type` ({ALLOWED})"))),
    }
}

/// A JSON value whose objects keep their key order (serde_json's `Map` sorts keys unless the
/// workspace-wide `preserve_order` feature is on), so columns follow declaration order.
#[derive(Debug)]
enum Value {
    Null,
    /// A boolean or a number other than a whole one: nothing here reads their value.
    Scalar,
    /// A whole non-negative number (a decimal's precision and scale).
    Whole(u64),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    fn get(&self, key: &str) -> Option<&Value> {
        self.as_object()?.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    fn as_object(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }
    fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Whole(n) => Some(*n),
            _ => None,
        }
    }
    fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    fn is_object(&self) -> bool {
        matches!(self, Value::Object(_))
    }
    fn is_string(&self) -> bool {
        matches!(self, Value::String(_))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> std::result::Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Value, E> {
                Ok(Value::Scalar)
            }
            fn visit_i64<E>(self, n: i64) -> std::result::Result<Value, E> {
                Ok(u64::try_from(n).map_or(Value::Scalar, Value::Whole))
            }
            fn visit_u64<E>(self, n: u64) -> std::result::Result<Value, E> {
                Ok(Value::Whole(n))
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Value, E> {
                Ok(Value::Scalar)
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Value, E> {
                Ok(Value::String(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element()? {
                    items.push(v);
                }
                Ok(Value::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Value::Object(entries))
            }
        }
        d.deserialize_any(V)
    }
}
