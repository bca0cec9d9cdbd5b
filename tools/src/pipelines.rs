//! `icestream pipelines check FILE [output=text|json]`: validate a pipeline file and show, per
//! pipeline, the Iceberg schema (names, types, field ids), the partition spec and the topics
//! it claims. Any error names the file, the pipeline, the key and what is allowed.

use anyhow::Result;
use iceberg::TableCreation;
use iceberg::TableIdent;
use iceberg::spec::{NestedFieldRef, StructType, TableMetadata, TableMetadataBuilder, Type};
use icestream::Config;
use icestream::engine::catalog::Catalogs;
use icestream::model::config::{Allowed, Knob, Settings};
use icestream::model::evolve::evolve_for;
use icestream::model::infer::INFER;
use icestream::model::pipeline::{Pipeline, PipelineSet, Topics, format_name};
use icestream::model::registry::Registry;
use icestream::model::tables::TableDef;
use serde_json::{Value, json};
use std::sync::Arc;

const CHECK_OPTIONS: &[Knob] = &[
    Knob {
        key: "output",
        default: "text",
        allowed: Allowed::OneOf(&["text", "json"]),
        help: "`text` for people; `json` for scripts (the Terraform cross-check reads it)",
    },
    Knob {
        key: "topics",
        default: "",
        allowed: Allowed::OptionalText,
        help: "comma-separated topic names: the tables a table-per-topic pipeline (`table` with {topic}) would create for them",
    },
];

/// The command's option list for the command line (`crate::cli`).
pub struct Check;

impl crate::cli::OptionList for Check {
    const LISTS: &'static [&'static [Knob]] = &[CHECK_OPTIONS];
}

pub async fn check(file: String, args: Vec<String>) -> Result<()> {
    let (options, knobs) = Settings::split_options(CHECK_OPTIONS, &args)?;
    let mut config = Config::from_env_and_args(&knobs)?;
    config.pipelines = Some(file);
    let set = PipelineSet::from_config(&config).await?;
    let registries = registry_checks(&set, &config).await?;
    let topics: Vec<String> = options.get("topics").split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect();
    let per_topic = set.template_tables(&topics)?;
    if options.get("output") == "json" {
        let mut described = describe(&set);
        described["topic_tables"] = json!(
            per_topic
                .iter()
                .map(|(template, topic, table)| json!({"pipeline": template, "topic": topic, "table": table}))
                .collect::<Vec<_>>()
        );
        for (pipeline, check) in described["pipelines"].as_array_mut().into_iter().flatten().zip(&registries) {
            if let Some(check) = check {
                pipeline["registry"] = check.clone();
            }
        }
        println!("{}", serde_json::to_string_pretty(&described)?);
    } else {
        print!("{}", text(&set));
        for (p, check) in set.pipelines.iter().zip(&registries) {
            if let Some(check) = check {
                print!("{}", registry_text(&p.table, check));
            }
        }
        for spec in &set.templates {
            let made: Vec<String> =
                per_topic.iter().filter(|(t, ..)| *t == spec.table).map(|(_, topic, table)| format!("{topic} -> {table}")).collect();
            let claims = spec.topic_pattern.as_ref().map_or_else(|| spec.topics.join(", "), |p| format!("topics matching /{p}/"));
            print!("\ntable per topic `{}` ({claims}){}: ", spec.table, inferred_text(spec.schema.as_deref() == Some(INFER)));
            match (made.is_empty(), topics.is_empty()) {
                (false, _) => println!("{}", made.join(", ")),
                (true, true) => println!("give topics=a,b,c to see the tables it would create"),
                (true, false) => println!("claims none of the topics given"),
            }
        }
    }
    Ok(())
}

/// `pipelines tables FILE`: the namespace and every table the file implies (dead-letter and
/// changelog tables too) as JSON, read offline (no schema files, no registry): what a
/// deployment must grant, schedule and alarm (tests/infra/test_pipelines.py holds the
/// Terraform module to it).
pub async fn tables(file: &str) -> Result<()> {
    let mut config = Config::from_env_and_args(std::iter::empty::<&str>())?;
    config.pipelines = Some(file.to_string());
    let (namespace, tables, templates) = PipelineSet::table_names(&config).await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({"file": file, "namespace": namespace, "tables": tables, "table_templates": templates}))?
    );
    Ok(())
}

/// Per pipeline with a registry: its latest registered schema and whether the table (as the
/// catalog has it, else as the pipeline would create it) can take it.
async fn registry_checks(set: &PipelineSet, config: &Config) -> Result<Vec<Option<Value>>> {
    if set.pipelines.iter().all(|p| p.registry.is_none()) {
        return Ok(vec![None; set.pipelines.len()]);
    }
    let catalogs = Catalogs::connect(config).await.ok();
    let mut out = Vec::with_capacity(set.pipelines.len());
    for p in &set.pipelines {
        let (Some(spec), Some(subject)) = (&p.registry, &p.registry_subject) else {
            out.push(None);
            continue;
        };
        let registry = Registry::connect(spec, config.registry_auth.as_ref().map(|a| a.expose())).await?;
        let (version, latest) = registry.latest_writer(subject, p.format, p.source.message_name()).await?;
        let ident = TableIdent::from_strs([set.namespace.as_str(), p.table.as_str()])?;
        let table = match &catalogs {
            Some(c) => c.catalog().load_table(&ident).await.ok(),
            None => None,
        };
        let (against, current, last) = match &table {
            Some(t) => ("table", t.metadata().current_schema().as_ref().clone(), t.metadata().last_column_id()),
            None => ("pipeline schema (the table does not exist yet)", p.def.schema.clone(), p.def.schema.highest_field_id()),
        };
        let mut check = json!({"kind": spec.kind(), "subject": subject, "latest_version": version, "against": against});
        match latest {
            Err(reason) => {
                check["verdict"] = json!("refused");
                check["reason"] = json!(reason);
            }
            Ok(latest) => {
                check["latest_schema"] = json!(fields_json(latest.to_iceberg()?.as_struct()));
                match evolve_for(&current, last, &[Arc::new(latest)], p.kafka_columns) {
                    Ok(None) => check["verdict"] = json!("fits"),
                    Ok(Some(evolved)) => {
                        check["verdict"] = json!("evolves");
                        check["evolved_schema"] = json!(fields_json(evolved.as_struct()));
                    }
                    Err(reason) => {
                        check["verdict"] = json!("refused");
                        check["reason"] = json!(reason);
                    }
                }
            }
        }
        out.push(Some(check));
    }
    Ok(out)
}

fn registry_text(table: &str, check: &Value) -> String {
    let mut out = format!(
        "\npipeline `{table}`: registry {} subject {}: latest {} against the {}: {}\n",
        check["kind"].as_str().unwrap_or_default(),
        check["subject"].as_str().unwrap_or_default(),
        check["latest_version"].as_str().unwrap_or_default(),
        check["against"].as_str().unwrap_or_default(),
        check["verdict"].as_str().unwrap_or_default(),
    );
    if let Some(reason) = check["reason"].as_str() {
        out += &format!("  {reason}\n");
    }
    if let Some(fields) = check["evolved_schema"].as_array() {
        let names: Vec<String> = fields
            .iter()
            .map(|f| format!("{} {}", f["name"].as_str().unwrap_or_default(), f["type"].as_str().unwrap_or_default()))
            .collect();
        out += &format!("  the table would become: {}\n", names.join(", "));
    }
    out
}

/// The set as JSON: what scripts and the Terraform cross-check read.
pub fn describe(set: &PipelineSet) -> Value {
    json!({
        "file": set.file,
        "namespace": set.namespace,
        // Every table the file implies (dead-letter and changelog tables too).
        "tables": set.tables(),
        "pipelines": set.pipelines.iter().map(pipeline_json).collect::<Vec<_>>(),
    })
}

/// The table `def` creates, as a catalog makes it: creation assigns field ids afresh (nested
/// fields after their parents' level), so these, not the pipeline schema's, are the table's.
fn as_created(def: &TableDef) -> Option<TableMetadata> {
    let creation = TableCreation::builder()
        .name(def.name.clone())
        .location("file:///pipelines-check".to_string())
        .schema(def.schema.clone())
        .partition_spec(def.partition_spec.clone())
        .properties(def.properties.clone())
        .sort_order_opt(def.sort_order.clone())
        .build();
    Some(TableMetadataBuilder::from_table_creation(creation).ok()?.build().ok()?.metadata)
}

fn pipeline_json(p: &Pipeline) -> Value {
    let created = as_created(&p.def);
    let table_schema = created.as_ref().map_or(p.def.schema.clone(), |m| m.current_schema().as_ref().clone());
    let schema = table_schema.as_struct();
    let fields: Vec<(String, String, i32)> = match &created {
        Some(m) => m.default_partition_spec().fields().iter().map(|f| (f.name.clone(), f.transform.to_string(), f.source_id)).collect(),
        None => p.def.partition_spec.fields().iter().map(|f| (f.name.clone(), f.transform.to_string(), f.source_id)).collect(),
    };
    let (topics, pattern) = match &p.topics {
        Topics::Exact(names) => (json!(names), Value::Null),
        Topics::Pattern(re) => (json!([]), json!(re.as_str())),
        Topics::Any => (json!([]), json!(".*")),
    };
    json!({
        "table": p.table,
        "dead_letter_table": p.dead_letter.name,
        "changelog_table": p.changelog().map(|c| c.name.clone()),
        "mode": if p.upsert.is_some() { "upsert" } else { "append" },
        "topics": topics,
        "topic_pattern": pattern,
        "format": format_name(p.format),
        "schema": fields_json(schema),
        "identifier_field_ids": table_schema.identifier_field_ids().collect::<Vec<_>>(),
        "partition_spec": fields.iter().map(|(name, transform, source_id)| {
            let source = table_schema.name_by_field_id(*source_id).unwrap_or_default().to_string();
            json!({"name": name, "transform": transform, "source": source, "source_id": source_id})
        }).collect::<Vec<_>>(),
        "key": p.key,
        "dedup": p.dedup.to_string(),
        "event_time": p.event_time,
        "schema_inferred": p.infer,
    })
}

fn fields_json(s: &StructType) -> Vec<Value> {
    s.fields().iter().map(field_json).collect()
}

fn field_json(f: &NestedFieldRef) -> Value {
    let mut v = json!({"id": f.id, "name": f.name, "type": type_name(&f.field_type), "required": f.required});
    match &*f.field_type {
        Type::Struct(s) => v["fields"] = json!(fields_json(s)),
        Type::List(l) => v["element"] = field_json(&l.element_field),
        Type::Map(m) => {
            v["key"] = field_json(&m.key_field);
            v["value"] = field_json(&m.value_field);
        }
        Type::Primitive(_) => {}
    }
    v
}

fn type_name(t: &Type) -> String {
    match t {
        Type::Primitive(p) => p.to_string(),
        Type::Struct(_) => "struct".into(),
        Type::List(_) => "list".into(),
        Type::Map(_) => "map".into(),
    }
}

/// The set for people: one block per pipeline.
pub fn text(set: &PipelineSet) -> String {
    let mut out = format!("{}: {} pipeline(s), namespace {}\n", set.file.as_deref().unwrap_or("knobs"), set.pipelines.len(), set.namespace);
    for p in &set.pipelines {
        out += &format!(
            "\npipeline `{}` ({}): {} -> {}.{} (dead letters: {}.{})\n",
            p.table,
            format_name(p.format),
            p.topics,
            set.namespace,
            p.table,
            set.namespace,
            p.dead_letter.name
        );
        if p.infer {
            out += &format!("  {}; at start the table has:\n", inferred_text(true).trim_start_matches(", "));
        }
        out += "  schema (field id, name, type):\n";
        for f in p.def.schema.as_struct().fields() {
            field_text(f, 2, &mut out);
        }
        let spec = &p.def.partition_spec;
        if spec.fields().is_empty() {
            out += "  partition spec: unpartitioned\n";
        } else {
            let parts: Vec<String> = spec
                .fields()
                .iter()
                .map(|f| format!("{} = {}({})", f.name, f.transform, p.def.schema.name_by_field_id(f.source_id).unwrap_or("?")))
                .collect();
            out += &format!("  partition spec: {}\n", parts.join(", "));
        }
        out += &format!("  key: [{}]  dedup: {}\n", p.key.join(", "), p.dedup);
    }
    out
}

/// What `pipelines check` says of a pipeline whose schema is `schema = "infer"`.
fn inferred_text(infer: bool) -> &'static str {
    if infer { ", schema inferred from the values (schema = \"infer\": every field becomes a column as it first appears)" } else { "" }
}

fn field_text(f: &NestedFieldRef, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    let required = if f.required { "required" } else { "optional" };
    *out += &format!("{pad}{:>3}  {}  {} {}\n", f.id, f.name, required, type_name(&f.field_type));
    match &*f.field_type {
        Type::Struct(s) => s.fields().iter().for_each(|c| field_text(c, depth + 1, out)),
        Type::List(l) => field_text(&l.element_field, depth + 1, out),
        Type::Map(m) => {
            field_text(&m.key_field, depth + 1, out);
            field_text(&m.value_field, depth + 1, out);
        }
        Type::Primitive(_) => {}
    }
}
