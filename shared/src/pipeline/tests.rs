use std::path::Path;

use super::*;
use crate::config::Config;

fn config() -> Config {
    Config::from_args(["warehouse=/tmp/unused"]).unwrap()
}

/// Write `files` (name, text) into a fresh directory; the pipeline file is `pipelines.toml`.
fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

fn load(files: &[(&str, &str)]) -> Result<PipelineSet> {
    let dir = dir_with(files);
    let path = dir.path().join("pipelines.toml");
    crate::testkit::block_on(PipelineSet::load(&path, "pipelines.toml", &config()))
}

fn load_err(files: &[(&str, &str)]) -> String {
    load(files).unwrap_err().to_string()
}

const ORDER_AVSC: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"order_id","type":"long"},
  {"name":"customer_id","type":"long"},
  {"name":"created_at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"total","type":"double"}]}"#;

fn orders(extra: &str) -> String {
    format!(
        "[[pipeline]]\ntable = \"orders\"\ntopics = [\"shop.orders\"]\nformat = \"avro\"\nschema = \"schemas/order.avsc\"\n{extra}\n"
    )
}

/// Fields as (id, name, type, required), lineage included.
fn columns(schema: &Schema) -> Vec<(i32, String, String, bool)> {
    schema.as_struct().fields().iter().map(|f| (f.id, f.name.clone(), f.field_type.to_string(), f.required)).collect()
}

#[test]
fn the_knob_pipeline_matches_the_telemetry_table_in_every_format() {
    let reference = crate::tables::vehicle_telemetry("vehicle_telemetry", "zstd", 1 << 20).unwrap();
    for source in ["proto", "avro", "json"] {
        let config = Config::from_args([format!("source={source}"), "warehouse=/tmp/x".into()]).unwrap();
        let set = PipelineSet::telemetry(&config).unwrap();
        let p = &set.pipelines[0];
        assert_eq!(columns(&p.def.schema), columns(&reference.schema), "{source}");
        let mut ids: Vec<i32> = p.def.schema.identifier_field_ids().collect();
        ids.sort();
        assert_eq!(ids, [1, 2]);
        assert_eq!(p.def.partition_spec.fields(), reference.partition_spec.fields(), "{source}");
        assert!(matches!(p.topics, Topics::Any));
        assert_eq!(set.route("anything").unwrap(), 0);
    }
}

#[test]
fn the_shipped_reference_file_is_the_telemetry_pipeline() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/reference.toml");
    let set = crate::testkit::block_on(PipelineSet::load(&path, "reference.toml", &config())).unwrap();
    let knobs = PipelineSet::telemetry(&config()).unwrap();
    assert_eq!(columns(&set.pipelines[0].def.schema), columns(&knobs.pipelines[0].def.schema));
    assert_eq!(set.pipelines[0].dead_letter.name, "vehicle_telemetry_dead_letter");
    assert_eq!(set.route("vehicle-telemetry").unwrap(), 0);
    assert!(set.route("other").is_err());
}

#[test]
fn a_user_pipeline_gets_its_schema_key_partitioning_and_lineage() {
    let set = load(&[
        ("schemas/order.avsc", ORDER_AVSC),
        ("pipelines.toml", &format!("namespace = \"shop\"\n{}", orders("partition_by = [\"day(created_at)\", \"bucket(16, customer_id)\"]\nkey = [\"order_id\"]\ndedup = \"window\"\nevent_time = \"created_at\""))),
    ])
    .unwrap();
    assert_eq!(set.namespace, "shop");
    let p = &set.pipelines[0];
    let cols = columns(&p.def.schema);
    let names: Vec<&str> = cols.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(names, ["order_id", "customer_id", "created_at", "note", "total", "kafka_topic", "kafka_partition", "kafka_offset"]);
    assert_eq!(cols[2].2, "timestamptz");
    assert!(!cols[3].3, "a union with null is optional");
    assert_eq!(cols[5].0, 6, "lineage ids follow the source's");
    assert_eq!(p.def.schema.identifier_field_ids().collect::<Vec<_>>(), [1]);
    let parts: Vec<_> = p.def.partition_spec.fields().iter().map(|f| f.name.clone()).collect();
    assert_eq!(parts, ["created_at_day", "customer_id_bucket"]);
    assert_eq!(p.dedup, Dedup::Window);
    assert_eq!(set.tables(), ["orders", "orders_dead_letter"]);
}

#[test]
fn routing_by_exact_names_and_patterns_and_unclaimed_topics_fail() {
    let set = load(&[
        ("schemas/order.avsc", ORDER_AVSC),
        (
            "pipelines.toml",
            &format!(
                "{}\n[[pipeline]]\ntable = \"returns\"\ntopic_pattern = \"shop\\\\.returns\\\\.[a-z]+\"\nformat = \"avro\"\nschema = \"schemas/order.avsc\"\n",
                orders("")
            ),
        ),
    ])
    .unwrap();
    assert_eq!(set.route("shop.orders").unwrap(), 0);
    assert_eq!(set.route("shop.returns.eu").unwrap(), 1);
    let e = set.route("shop.returns.EU").unwrap_err().to_string();
    assert!(e.contains("\"shop.returns.EU\"") && e.contains("pipelines.toml") && e.contains("orders, returns"), "{e}");
    assert!(set.route("shop.orders.x").is_err(), "patterns match whole names");
}

#[test]
fn two_pipelines_claiming_one_topic_or_table_are_refused() {
    let twice = format!("{}{}", orders(""), orders("").replace("\"orders\"", "\"orders2\""));
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &twice)]);
    assert!(e.contains("\"shop.orders\" is claimed by two pipelines") && e.contains("`orders`") && e.contains("`orders2`"), "{e}");
    let pattern = format!("{}[[pipeline]]\ntable = \"all\"\ntopic_pattern = \"shop\\\\..*\"\nformat = \"avro\"\nschema = \"schemas/order.avsc\"\n", orders(""));
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &pattern)]);
    assert!(e.contains("claimed by two pipelines"), "{e}");
    let same_table = format!("{}{}", orders(""), orders("").replace("shop.orders", "shop.orders2"));
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &same_table)]);
    assert!(e.contains("both write table `orders`"), "{e}");
}

#[test]
fn every_bad_key_names_the_pipeline_the_key_and_what_is_allowed() {
    let cases: &[(&str, &str)] = &[
        ("format = \"xml\"", "key `format`: \"xml\" is not allowed: allowed are avro | protobuf | json"),
        ("schema = \"schemas/missing.avsc\"", "key `schema`"),
        ("partition_by = [\"minute(created_at)\"]", "key `partition_by`"),
        ("partition_by = [\"day(nope)\"]", "no top-level column \"nope\""),
        ("key = [\"nope\"]", "key `key`: no top-level column \"nope\""),
        ("key = [\"total\"]", "a key column must be a primitive other than float/double"),
        ("dedup = \"always\"", "key `dedup`: \"always\" is not allowed: allowed are none | batch | window"),
        ("dedup = \"batch\"", "compares rows by `key`, which is empty"),
        ("key = [\"order_id\"]\ndedup = \"window\"", "key `event_time`: required with dedup = \"window\""),
        ("event_time = \"total\"", "key `event_time`: column \"total\" is double, not a timestamp"),
        ("message = \"x.Y\"", "key `message`: only for format = \"protobuf\""),
        ("topic_pattern = \"(\"", "keys `topics` and `topic_pattern`: give one of the two"),
        ("dedup_window_minutes = 0", "key `dedup_window_minutes`: 0 is not allowed"),
    ];
    for (extra, needle) in cases {
        // A later duplicate key would be a TOML error: replace the defaults the case sets.
        let mut text = orders(extra);
        if extra.starts_with("format") {
            text = text.replacen("format = \"avro\"\n", "", 1);
        }
        if extra.starts_with("schema") {
            text = text.replacen("schema = \"schemas/order.avsc\"\n", "", 1);
        }
        let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &text)]);
        assert!(e.contains("pipelines.toml: pipeline `orders` (#1)") && e.contains(needle), "{extra}: {e}");
    }
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &orders("").replace("table = \"orders\"", "table = \"Orders\""))]);
    assert!(e.contains("key `table`") && e.contains("lowercase"), "{e}");
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &orders("").replace("topics = [\"shop.orders\"]\n", ""))]);
    assert!(e.contains("one of the two is required"), "{e}");
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &orders("").replace("shop.orders", "shop orders"))]);
    assert!(e.contains("not a Kafka topic name"), "{e}");
    let reserved = ORDER_AVSC.replace("\"note\"", "\"kafka_offset\"");
    let e = load_err(&[("schemas/order.avsc", &reserved), ("pipelines.toml", &orders(""))]);
    assert!(e.contains("reserved for Kafka lineage"), "{e}");
}
