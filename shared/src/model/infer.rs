//! `schema = "infer"`: the columns of schemaless JSON values, from the values themselves.
//! Strings are `string`, integers `long`, other numbers `double`, booleans `boolean`, objects
//! structs, arrays a list of their elements' common type; a null leaves the column optional (a
//! field seen only as null, `{}` or inside an empty array has no column yet: its rows read null
//! either way). A batch's values are folded in order into what the table already has: a field
//! seen with integers and fractions within the batch is `double` from the start; a `long` column
//! of the table the caller names replaceable becomes `double` (the commit replaces it:
//! `crate::engine::commit::replace_column`), any other stays `long`, and a fraction there is a
//! dead letter naming the field, the column's type and the value; any other conflict (a string
//! where a struct is) is a dead letter naming the field and both types. Nothing a producer sends
//! is dropped: every field of a record that lands has a column.

use iceberg::spec::{PrimitiveType, Schema, Type};
use serde_json::{Map, Value};

use crate::model::schema::json_schema::JsonSchema;
use crate::model::schema::{Field, Prim, Ty, join};
use crate::model::tables::is_written_by_icestream;

/// The largest magnitude up to which every integer is a double (2^53).
const EXACT_IN_DOUBLE: u64 = 1 << 53;

/// `schema = "infer"` as the pipeline file spells it.
pub const INFER: &str = "infer";

/// What a batch's values (and the table before them) say the columns are.
#[derive(Debug, Clone)]
pub(crate) struct Inference {
    root: Vec<(String, Node)>,
    /// Top-level names no value may add (the table's partition fields).
    reserved: Vec<String>,
    /// Top-level `long` columns of the table that become `double` when a value has a fraction
    /// (the commit replaces them, `crate::engine::commit::replace_column`).
    replaceable: Vec<String>,
}

/// One column as inferred so far.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// Only nulls, `{}` or elements of empty arrays so far: no column yet.
    Unknown,
    /// A leaf; `true`: the table has the column, whose type stays (a long does not become a
    /// double; a timestamptz takes RFC 3339 strings and epoch milliseconds).
    Prim(Prim, bool),
    Struct(Vec<(String, Node)>),
    List(Box<Node>),
    /// A map column the table has (values are never inferred as maps: objects are structs).
    Map(Box<Node>),
    /// A column of a type JSON values do not fill: only nulls fit.
    Other(String),
}

impl Inference {
    /// Starting from the table's columns (the lineage and Kafka metadata columns aside); the
    /// names in `reserved` (its partition fields) cannot be added; the `long` columns named in
    /// `replaceable` become `double` when a value has a fraction, the others stay `long`.
    pub fn from_table(schema: &Schema, reserved: Vec<String>, replaceable: Vec<String>) -> Self {
        let root = schema
            .as_struct()
            .fields()
            .iter()
            .filter(|f| !is_written_by_icestream(&f.name))
            .map(|f| match of_type(&f.field_type) {
                Node::Prim(Prim::Long, true) if replaceable.contains(&f.name) => (f.name.clone(), Node::Prim(Prim::Long, false)),
                node => (f.name.clone(), node),
            })
            .collect();
        Inference { root, reserved, replaceable }
    }

    /// Folds one value in. `Err`: why the record is a dead letter (nothing of it is folded).
    /// A value that is not a JSON object is left to the decoder, which says why.
    pub fn add(&mut self, value: &[u8]) -> Result<(), String> {
        let Some(object) = object(value) else { return Ok(()) };
        if self.fits(&object) {
            return Ok(());
        }
        let mut trial = self.root.clone();
        self.merge_top(&mut trial, &object)?;
        self.root = trial;
        Ok(())
    }

    /// Whether a value fits what was inferred, or why it is a dead letter: a value that
    /// conflicted when folded conflicts still (folding only adds fields and widens a field the
    /// batch made), and one that was folded fits.
    pub fn check(&self, value: &[u8]) -> Result<(), String> {
        let Some(object) = object(value) else { return Ok(()) };
        if self.fits(&object) {
            return Ok(());
        }
        self.merge_top(&mut self.root.clone(), &object)
    }

    /// The columns inferred, as a writer schema: every field optional (a table may add it).
    pub fn fields(&self) -> Vec<Field> {
        fields(&self.root)
    }

    /// The inferred columns as the JSON writer schema of the batch.
    pub fn schema(&self) -> JsonSchema {
        let mut schema = JsonSchema::of_fields(self.fields());
        schema.replace_long = self
            .replaceable
            .iter()
            .filter(|name| self.root.iter().any(|(n, node)| n == *name && *node == Node::Prim(Prim::Double, false)))
            .cloned()
            .collect();
        schema
    }

    fn fits(&self, object: &Map<String, Value>) -> bool {
        object.iter().all(|(k, v)| v.is_null() || self.root.iter().find(|(n, _)| n == k).is_some_and(|(_, node)| fits(node, v)))
    }

    fn merge_top(&self, root: &mut Vec<(String, Node)>, object: &Map<String, Value>) -> Result<(), String> {
        for (key, value) in object {
            if !value.is_null() && !root.iter().any(|(n, _)| n == key) {
                if is_written_by_icestream(key) {
                    return Err(format!("field `{key}`: the name is reserved for Kafka lineage and metadata columns"));
                }
                if self.reserved.contains(key) {
                    return Err(format!("field `{key}`: the table has a partition field of that name"));
                }
            }
        }
        merge_object(root, object, "")
    }
}

/// The declared timestamp fields of an inferring pipeline (`event_time`, partition sources;
/// dotted paths into structs): the columns its table has from the start.
pub(crate) fn declared(paths: &[String]) -> Result<JsonSchema, String> {
    let mut root: Vec<Field> = Vec::new();
    for path in paths {
        let mut level = &mut root;
        let mut parts = path.split('.').peekable();
        while let Some(name) = parts.next() {
            let last = parts.peek().is_none();
            let at = match level.iter().position(|f| f.name == name) {
                Some(at) => at,
                None => {
                    let ty = if last { Ty::Prim(Prim::Timestamptz) } else { Ty::Struct(Vec::new()) };
                    level.push(Field::new(name, true, ty).with_default(true));
                    level.len() - 1
                }
            };
            level = match (&mut level[at].ty, last) {
                (Ty::Prim(Prim::Timestamptz), true) => break,
                (Ty::Struct(children), false) => children,
                _ => return Err(format!("{path:?} and another timestamp field are both a struct and a timestamp")),
            };
        }
    }
    Ok(JsonSchema::of_fields(root))
}

fn object(value: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(value) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    }
}

fn of_type(ty: &Type) -> Node {
    match ty {
        Type::Primitive(p) => match prim_of(p) {
            Some(prim) => Node::Prim(prim, true),
            None => Node::Other(p.to_string()),
        },
        Type::Struct(s) => Node::Struct(s.fields().iter().map(|f| (f.name.clone(), of_type(&f.field_type))).collect()),
        Type::List(l) => Node::List(Box::new(of_type(&l.element_field.field_type))),
        Type::Map(m) if *m.key_field.field_type == Type::Primitive(PrimitiveType::String) => {
            Node::Map(Box::new(of_type(&m.value_field.field_type)))
        }
        other => Node::Other(other.to_string()),
    }
}

fn prim_of(p: &PrimitiveType) -> Option<Prim> {
    use PrimitiveType as P;
    Some(match p {
        P::Boolean => Prim::Boolean,
        P::Int => Prim::Int,
        P::Long => Prim::Long,
        P::Double => Prim::Double,
        P::String => Prim::String,
        P::Decimal { precision, scale } => Prim::Decimal { precision: *precision, scale: *scale },
        P::Uuid => Prim::Uuid,
        P::Date => Prim::Date,
        P::Time => Prim::Time,
        P::Timestamp => Prim::Timestamp,
        P::Timestamptz => Prim::Timestamptz,
        // No JSON value fills these (the JSON reader writes none of them).
        _ => return None,
    })
}

fn fields(nodes: &[(String, Node)]) -> Vec<Field> {
    nodes.iter().filter_map(|(name, node)| Some(Field::new(name, true, ty(node)?).with_default(true))).collect()
}

/// A column's type, `None` while nothing says what it is. The elements of arrays only ever
/// seen empty are strings: the array must land, and a later element of another type is a
/// conflict naming both.
fn ty(node: &Node) -> Option<Ty> {
    match node {
        Node::Unknown | Node::Other(_) => None,
        Node::Prim(p, _) => Some(Ty::Prim(*p)),
        Node::Struct(children) => Some(Ty::Struct(fields(children))).filter(|t| !matches!(t, Ty::Struct(f) if f.is_empty())),
        Node::List(element) => Some(Ty::List(Box::new(Field::element(true, ty(element).unwrap_or(Ty::Prim(Prim::String)))))),
        Node::Map(value) => {
            Some(Field::map(Ty::Prim(Prim::String), Field::new("value", true, ty(value).unwrap_or(Ty::Prim(Prim::String)))))
        }
    }
}

/// What a JSON leaf is, as a column type.
fn kind(value: &Value) -> Option<Prim> {
    match value {
        Value::Bool(_) => Some(Prim::Boolean),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(Prim::Long),
        Value::Number(_) => Some(Prim::Double),
        Value::String(_) => Some(Prim::String),
        _ => None,
    }
}

/// A value's type as a message names it.
fn value_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "long (an integer)",
        Value::Number(_) => "double (a number with a fraction or exponent)",
        Value::String(_) => "string",
        Value::Array(_) => "list (an array)",
        Value::Object(_) => "struct (an object)",
    }
}

fn node_type(node: &Node) -> String {
    match node {
        Node::Unknown => "unknown".into(),
        Node::Prim(p, _) => p.to_string(),
        Node::Struct(children) => format!("struct<{}>", children.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")),
        Node::List(element) => format!("list<{}>", node_type(element)),
        Node::Map(value) => format!("map<string, {}>", node_type(value)),
        Node::Other(name) => name.clone(),
    }
}

fn conflict(path: &str, value: &Value, node: &Node) -> String {
    format!(
        "field `{path}`: the value is a {}, the column is {}: an inferred column keeps its type (schema = \"infer\")",
        value_type(value),
        node_type(node)
    )
}

/// A leaf `value` of type `kind` into a column `p` (`fixed`: the table's): `Ok(None)` it fits
/// as is, `Ok(Some(q))` the column becomes `q` (a batch's long meeting a fraction), or why not.
fn leaf(p: Prim, fixed: bool, kind: Prim, value: &Value, path: &str) -> Result<Option<Prim>, String> {
    use Prim as P;
    match (p, kind) {
        (a, b) if a == b => Ok(None),
        // A double holds every integer up to 2^53 exactly; a larger one would land rounded.
        (P::Long, P::Double) if !fixed => Ok(Some(P::Double)),
        (P::Double, P::Long) if value.as_i64().is_none_or(|v| v.unsigned_abs() > EXACT_IN_DOUBLE) => Err(format!(
            "field `{path}`: {value} is beyond 2^53 and the column is double, which cannot hold it exactly (schema = \"infer\")"
        )),
        (P::Double, P::Long) | (P::Int, P::Long) | (P::Timestamptz, P::Long) => Ok(None),
        // The JSON reader reads a whole number written with a fraction or exponent (`3.0`)
        // into an integer column exactly, from its text.
        (P::Long | P::Int, P::Double) if value.as_f64().is_some_and(|f| f.fract() == 0.0) => Ok(None),
        (P::Long, P::Double) => Err(format!(
            "field `{path}`: {value} is not an integer and the column is long, which cannot be replaced by a double here \
             (schema = \"infer\"; see docs/pipelines.md)"
        )),
        // Strings the JSON reader parses into these (a value it cannot parse is refused there).
        (P::Timestamptz | P::Timestamp | P::Date | P::Time | P::Uuid | P::Decimal { .. }, P::String) => Ok(None),
        _ => Err(conflict(path, value, &Node::Prim(p, fixed))),
    }
}

/// Whether `value` fits `node` as it is (`false` also when unsure: the merge decides).
fn fits(node: &Node, value: &Value) -> bool {
    match (node, value) {
        (_, Value::Null) => true,
        (Node::Prim(p, fixed), leaf_value) => kind(leaf_value).is_some_and(|k| matches!(leaf(*p, *fixed, k, leaf_value, ""), Ok(None))),
        (Node::Struct(children), Value::Object(object)) => {
            object.iter().all(|(k, v)| v.is_null() || children.iter().find(|(n, _)| n == k).is_some_and(|(_, c)| fits(c, v)))
        }
        (Node::Map(value_node), Value::Object(object)) => object.values().all(|v| fits(value_node, v)),
        (Node::List(element), Value::Array(items)) => items.iter().all(|v| fits(element, v)),
        _ => false,
    }
}

fn merge_object(children: &mut Vec<(String, Node)>, object: &Map<String, Value>, path: &str) -> Result<(), String> {
    for (key, value) in object {
        if value.is_null() {
            continue;
        }
        let at = match children.iter().position(|(n, _)| n == key) {
            Some(at) => at,
            None => {
                children.push((key.clone(), Node::Unknown));
                children.len() - 1
            }
        };
        merge(&mut children[at].1, value, &join(path, key))?;
    }
    Ok(())
}

fn merge(node: &mut Node, value: &Value, path: &str) -> Result<(), String> {
    match (&mut *node, value) {
        (_, Value::Null) => Ok(()),
        (Node::Unknown, Value::Object(_)) => {
            *node = Node::Struct(Vec::new());
            merge(node, value, path)
        }
        (Node::Unknown, Value::Array(_)) => {
            *node = Node::List(Box::new(Node::Unknown));
            merge(node, value, path)
        }
        (Node::Unknown, leaf_value) => {
            // Null, objects and arrays are matched above: every other JSON value has a kind.
            let kind = kind(leaf_value).ok_or_else(|| format!("field {path}: a {} has no column type", value_type(leaf_value)))?;
            *node = Node::Prim(kind, false);
            Ok(())
        }
        (Node::Prim(p, fixed), leaf_value) => match kind(leaf_value) {
            Some(k) => {
                if let Some(widened) = leaf(*p, *fixed, k, leaf_value, path)? {
                    *p = widened;
                }
                Ok(())
            }
            None => Err(conflict(path, value, node)),
        },
        (Node::Struct(children), Value::Object(object)) => merge_object(children, object, path),
        (Node::Map(value_node), Value::Object(object)) => object.iter().try_for_each(|(key, v)| merge(value_node, v, &join(path, key))),
        (Node::List(element), Value::Array(items)) => items.iter().try_for_each(|v| merge(element, v, &join(path, "element"))),
        _ => Err(conflict(path, value, node)),
    }
}

#[cfg(test)]
mod tests;
