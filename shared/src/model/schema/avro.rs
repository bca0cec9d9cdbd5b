//! Avro schemas (`.avsc`): parsed by apache-avro, then compiled into [`AvroType`], a tree with
//! named references resolved that the datum reader (`crate::decode::avro`) walks per record.

use std::collections::{HashMap, HashSet};

use apache_avro::Schema;
use apache_avro::schema::{Name, ResolvedSchema};

use super::{Field, Prim, Ty, join, unsupported};
use crate::base::error::{Error, Result};

/// An Avro writer schema whose top level is a record.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    pub(crate) root: AvroType,
    pub(crate) fields: Vec<Field>,
}

/// An Avro type as written on the wire, references resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AvroType {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum(Vec<String>),
    /// Big-endian two's complement in `bytes`, or in a `fixed` of this size.
    Decimal {
        fixed: Option<usize>,
        precision: u32,
        scale: u32,
    },
    Uuid,
    Date,
    TimeMillis,
    TimeMicros,
    /// `local` = local-timestamp-* (Iceberg `timestamp`), else `timestamptz`.
    TimestampMillis {
        local: bool,
    },
    TimestampMicros {
        local: bool,
    },
    Record(Vec<(String, AvroType)>),
    Array(Box<AvroType>),
    Map(Box<AvroType>),
    /// `["null", T]` (`null_index` 0) or `[T, "null"]` (1).
    Nullable {
        null_index: u8,
        inner: Box<AvroType>,
    },
}

impl AvroSchema {
    pub fn parse(text: &str) -> Result<Self> {
        let schema = Schema::parse_str(text).map_err(|e| Error::Schema(format!("invalid Avro schema: {e}")))?;
        let resolved = ResolvedSchema::try_from(&schema).map_err(|e| Error::Schema(format!("invalid Avro schema: {e}")))?;
        let mut compiler = Compiler { names: resolved.get_names(), expanding: Vec::new(), defaulted: HashSet::new() };
        let root = compiler.compile(&schema, "")?;
        let AvroType::Record(_) = &root else {
            return Err(Error::Schema("the top-level Avro type must be a record".into()));
        };
        let Ty::Struct(mut fields) = to_ty(&root, "")?.1 else { unreachable!("a record maps to a struct") };
        mark_defaults(&mut fields, "", &compiler.defaulted);
        Ok(AvroSchema { root, fields })
    }
}

struct Compiler<'a> {
    names: &'a HashMap<Name, &'a Schema>,
    /// Named types being expanded, to refuse recursion instead of looping.
    expanding: Vec<String>,
    /// Dotted paths of record fields that declare a `default`.
    defaulted: HashSet<String>,
}

/// Sets `has_default` on the fields whose path the compiler saw a `default` for.
fn mark_defaults(fields: &mut [Field], path: &str, defaulted: &HashSet<String>) {
    for field in fields {
        let here = join(path, &field.name);
        field.has_default = defaulted.contains(&here);
        if let Ty::Struct(children) = &mut field.ty {
            mark_defaults(children, &here, defaulted);
        }
    }
}

impl Compiler<'_> {
    fn compile(&mut self, schema: &Schema, path: &str) -> Result<AvroType> {
        Ok(match schema {
            Schema::Null => AvroType::Null,
            Schema::Boolean => AvroType::Boolean,
            Schema::Int => AvroType::Int,
            Schema::Long => AvroType::Long,
            Schema::Float => AvroType::Float,
            Schema::Double => AvroType::Double,
            Schema::Bytes => AvroType::Bytes,
            Schema::String => AvroType::String,
            Schema::Uuid => AvroType::Uuid,
            Schema::Date => AvroType::Date,
            Schema::TimeMillis => AvroType::TimeMillis,
            Schema::TimeMicros => AvroType::TimeMicros,
            Schema::TimestampMillis => AvroType::TimestampMillis { local: false },
            Schema::TimestampMicros => AvroType::TimestampMicros { local: false },
            Schema::LocalTimestampMillis => AvroType::TimestampMillis { local: true },
            Schema::LocalTimestampMicros => AvroType::TimestampMicros { local: true },
            Schema::Fixed(f) => AvroType::Fixed(f.size),
            Schema::Enum(e) => AvroType::Enum(e.symbols.clone()),
            Schema::Decimal(d) => {
                let fixed = match &*d.inner {
                    Schema::Fixed(f) => Some(f.size),
                    _ => None,
                };
                let (precision, scale) = (d.precision as u32, d.scale as u32);
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(unsupported(
                        path,
                        format!("decimal({precision},{scale}): precision must be 1..=38 and scale <= precision"),
                    ));
                }
                AvroType::Decimal { fixed, precision, scale }
            }
            Schema::Array(a) => AvroType::Array(Box::new(self.compile(&a.items, &join(path, "element"))?)),
            Schema::Map(m) => AvroType::Map(Box::new(self.compile(&m.types, &join(path, "value"))?)),
            Schema::Union(u) => {
                let v = u.variants();
                let null_index = match v {
                    [Schema::Null, t] | [t, Schema::Null] if !matches!(t, Schema::Null) => u8::from(matches!(v[1], Schema::Null)),
                    _ => {
                        return Err(unsupported(
                            path,
                            "only unions of null and one other type (`[\"null\", T]` or `[T, \"null\"]`) are supported",
                        ));
                    }
                };
                let inner = &v[1 - null_index as usize];
                AvroType::Nullable { null_index, inner: Box::new(self.compile(inner, path)?) }
            }
            Schema::Record(r) => {
                let name = r.name.fullname(None);
                self.enter(&name, path)?;
                let fields = r
                    .fields
                    .iter()
                    .map(|f| {
                        let here = join(path, &f.name);
                        if f.default.is_some() {
                            self.defaulted.insert(here.clone());
                        }
                        Ok((f.name.clone(), self.compile(&f.schema, &here)?))
                    })
                    .collect::<Result<Vec<_>>>()?;
                self.expanding.pop();
                AvroType::Record(fields)
            }
            Schema::Ref { name } => {
                let names = self.names;
                let target = names.get(name).ok_or_else(|| unsupported(path, format!("unknown named type `{}`", name.fullname(None))))?;
                let fullname = name.fullname(None);
                self.enter(&fullname, path)?;
                let t = self.compile(target, path)?;
                self.expanding.pop();
                t
            }
            other => {
                return Err(unsupported(
                    path,
                    format!(
                        "Avro type {other:?} is not supported (no Iceberg mapping: use decimal, timestamp-millis/micros or a plain type)"
                    ),
                ));
            }
        })
    }

    fn enter(&mut self, name: &str, path: &str) -> Result<()> {
        if self.expanding.iter().any(|n| n == name) {
            return Err(unsupported(
                path,
                format!("recursive type `{name}` ({} -> {name}): Iceberg tables need a finite schema", self.expanding.join(" -> ")),
            ));
        }
        self.expanding.push(name.to_string());
        Ok(())
    }
}

/// `(optional, type)` of a value of `t`.
fn to_ty(t: &AvroType, path: &str) -> Result<(bool, Ty)> {
    let prim = |p| Ok((false, Ty::Prim(p)));
    match t {
        AvroType::Null => Err(unsupported(path, "a bare `null` type has no column; use [\"null\", T]")),
        AvroType::Boolean => prim(Prim::Boolean),
        AvroType::Int => prim(Prim::Int),
        AvroType::Long => prim(Prim::Long),
        AvroType::Float => prim(Prim::Float),
        AvroType::Double => prim(Prim::Double),
        AvroType::Bytes => prim(Prim::Binary),
        AvroType::String | AvroType::Enum(_) => prim(Prim::String),
        AvroType::Fixed(n) => prim(Prim::Fixed(*n)),
        AvroType::Decimal { precision, scale, .. } => prim(Prim::Decimal { precision: *precision, scale: *scale }),
        AvroType::Uuid => prim(Prim::Uuid),
        AvroType::Date => prim(Prim::Date),
        AvroType::TimeMillis | AvroType::TimeMicros => prim(Prim::Time),
        AvroType::TimestampMillis { local } | AvroType::TimestampMicros { local } => {
            prim(if *local { Prim::Timestamp } else { Prim::Timestamptz })
        }
        AvroType::Record(fields) => {
            let fields = fields
                .iter()
                .map(|(name, t)| {
                    let (optional, ty) = to_ty(t, &join(path, name))?;
                    Ok(Field::new(name, optional, ty))
                })
                .collect::<Result<_>>()?;
            Ok((false, Ty::Struct(fields)))
        }
        AvroType::Array(items) => {
            let (optional, ty) = to_ty(items, &join(path, "element"))?;
            Ok((false, Ty::List(Box::new(Field::element(optional, ty)))))
        }
        AvroType::Map(values) => {
            let (optional, ty) = to_ty(values, &join(path, "value"))?;
            Ok((false, Field::map(Ty::Prim(Prim::String), Field::new("value", optional, ty))))
        }
        AvroType::Nullable { inner, .. } => {
            let (_, ty) = to_ty(inner, path)?;
            Ok((true, ty))
        }
    }
}
