use std::path::Path;

use super::*;
use crate::model::config::Config;
use iceberg::spec::Schema;

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
    format!("[[pipeline]]\ntable = \"orders\"\ntopics = [\"shop.orders\"]\nformat = \"avro\"\nschema = \"schemas/order.avsc\"\n{extra}\n")
}

/// Fields as (id, name, type, required), lineage included.
fn columns(schema: &Schema) -> Vec<(i32, String, String, bool)> {
    schema.as_struct().fields().iter().map(|f| (f.id, f.name.clone(), f.field_type.to_string(), f.required)).collect()
}

#[test]
fn the_knob_pipeline_matches_the_telemetry_table_in_every_format() {
    let reference = crate::model::tables::vehicle_telemetry("vehicle_telemetry", "zstd", 1 << 20).unwrap();
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
fn the_shipped_reference_file_is_the_telemetry_pipeline_and_the_accounts_mirror() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/reference.toml");
    let set = crate::testkit::block_on(PipelineSet::load(&path, "reference.toml", &config())).unwrap();
    let knobs = PipelineSet::telemetry(&config()).unwrap();
    assert_eq!(columns(&set.pipelines[0].def.schema), columns(&knobs.pipelines[0].def.schema));
    assert_eq!(set.pipelines[0].dead_letter.name, "vehicle_telemetry_dead_letter");
    assert_eq!(set.route("vehicle-telemetry").unwrap(), 0);
    assert!(set.route("other").is_err());

    // The accounts mirror: its changelog keeps the columns the retired `cdc` function's had,
    // by name and type, so a deployment that moved keeps its changelog and rebuilds from it.
    assert_eq!(set.route("accounts-cdc").unwrap(), 1);
    let accounts = &set.pipelines[1];
    assert_eq!(accounts.upsert.as_ref().unwrap().order_column(), "seq");
    let changelog = accounts.changelog().unwrap();
    assert_eq!(changelog.name, "accounts_changelog");
    let mut by_name: Vec<(String, String)> = columns(&changelog.schema).into_iter().map(|c| (c.1, c.2)).collect();
    by_name.sort();
    let cdc = [
        ("account_id", "long"),
        ("balance", "long"),
        ("kafka_offset", "long"),
        ("kafka_partition", "int"),
        ("kafka_topic", "string"),
        ("last_updated", "timestamptz"),
        ("operation", "string"),
        ("seq", "long"),
    ];
    assert_eq!(by_name, cdc.map(|(n, t)| (n.to_string(), t.to_string())));
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
    let pattern = format!(
        "{}[[pipeline]]\ntable = \"all\"\ntopic_pattern = \"shop\\\\..*\"\nformat = \"avro\"\nschema = \"schemas/order.avsc\"\n",
        orders("")
    );
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &pattern)]);
    assert!(e.contains("claimed by two pipelines"), "{e}");
    let same_table = format!("{}{}", orders(""), orders("").replace("shop.orders", "shop.orders2"));
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &same_table)]);
    assert!(e.contains("both write table `orders`"), "{e}");
}

#[test]
fn format_version_is_declared_per_pipeline_and_by_the_knob_for_the_telemetry_table() {
    use iceberg::spec::FormatVersion;
    let set = load(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &orders("format_version = 3"))]).unwrap();
    assert_eq!(set.pipelines[0].def.format_version, Some(FormatVersion::V3));
    // Only the pipeline's table: its dead-letter table takes the default.
    assert_eq!(set.pipelines[0].dead_letter.format_version, None);
    let set = load(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &orders(""))]).unwrap();
    assert_eq!(set.pipelines[0].def.format_version, None);
    let knob = |args: &[&str]| {
        PipelineSet::telemetry(&crate::model::config::Config::from_args(args.iter().map(|a| a.to_string())).unwrap()).unwrap().pipelines[0]
            .def
            .format_version
    };
    assert_eq!(knob(&["format_version=3"]), Some(FormatVersion::V3));
    assert_eq!(knob(&[]), None);
    assert!(crate::model::config::Config::from_args(["format_version=4".to_string()]).is_err());
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
        ("timestamp_precision = \"round\"", "key `timestamp_precision`: \"round\" is not allowed: allowed are reject | truncate"),
        ("format_version = 4", "key `format_version`: 4 is not allowed: allowed are 2 | 3"),
    ];
    for (extra, needle) in cases {
        // A later duplicate key would be a TOML error: replace the defaults the case sets.
        let mut text = orders(extra);
        if extra.starts_with("format =") {
            text = text.replacen("format = \"avro\"\n", "", 1);
        }
        if extra.starts_with("schema") {
            text = text.replacen("schema = \"schemas/order.avsc\"\n", "", 1);
        }
        let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &text)]);
        assert!(e.contains("pipelines.toml: pipeline `orders` (#1)") && e.contains(needle), "{extra}: {e}");
    }
    let e = load_err(&[
        ("schemas/order.avsc", ORDER_AVSC),
        ("pipelines.toml", &orders("").replace("table = \"orders\"", "table = \"Orders\"")),
    ]);
    assert!(e.contains("key `table`") && e.contains("lowercase"), "{e}");
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &orders("").replace("topics = [\"shop.orders\"]\n", ""))]);
    assert!(e.contains("one of the two is required"), "{e}");
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &orders("").replace("shop.orders", "shop orders"))]);
    assert!(e.contains("not a Kafka topic name"), "{e}");
    let reserved = ORDER_AVSC.replace("\"note\"", "\"kafka_offset\"");
    let e = load_err(&[("schemas/order.avsc", &reserved), ("pipelines.toml", &orders(""))]);
    assert!(e.contains("reserved for Kafka lineage"), "{e}");
}

const ORDER_JSON_SCHEMA: &str = r#"{"type":"object","required":["tenant_id","order_id","updated_at"],"properties":{
  "tenant_id":{"type":"string"},"order_id":{"type":"integer"},
  "updated_at":{"type":"string","format":"date-time"},"note":{"type":["string","null"]},"total":{"type":"number"}}}"#;

fn json_orders(extra: &str) -> String {
    format!(
        "[[pipeline]]\ntable = \"orders\"\ntopics = [\"shop.orders\"]\nformat = \"json\"\nschema = \"order.json\"\npartition_by = [\"bucket(8, order_id)\"]\n{extra}\n"
    )
}

#[test]
fn an_upsert_pipeline_gets_its_order_column_and_changelog() {
    let text = json_orders(
        "mode = \"upsert\"\nkey = [\"tenant_id\", \"order_id\"]\nenvelope = \"debezium\"\norder_by = \"source.lsn\"\nchangelog = true",
    );
    let set = load(&[("order.json", ORDER_JSON_SCHEMA), ("pipelines.toml", &text)]).unwrap();
    let p = &set.pipelines[0];
    let upsert = p.upsert.as_ref().unwrap();
    assert_eq!(upsert.envelope, upsert::Envelope::Debezium);
    assert_eq!(upsert.order, upsert::Order::Source(upsert::SourceField::Lsn));
    assert_eq!(upsert.decimal_handling, upsert::DecimalHandling::Precise, "Debezium's own default");
    let names: Vec<String> = columns(&p.def.schema).into_iter().map(|c| c.1).collect();
    assert_eq!(names.last().map(String::as_str), Some(upsert::SOURCE_POSITION));
    let changelog = p.changelog().unwrap();
    assert_eq!(changelog.name, "orders_changelog");
    let cols = columns(&changelog.schema);
    assert_eq!(cols[0].1, "operation");
    let required: Vec<&str> = cols.iter().filter(|c| c.3).map(|c| c.1.as_str()).collect();
    assert_eq!(required, ["operation", "tenant_id", "order_id", "kafka_topic", "kafka_partition", "kafka_offset", "source_position"]);
    assert_eq!(set.tables(), ["orders", "orders_dead_letter", "orders_changelog"]);
    for key in ["tenant_id", "order_id"] {
        let bloom = format!("{}{key}", crate::model::tables::BLOOM_FILTER_PROPERTY_PREFIX);
        assert_eq!(p.def.properties.get(&bloom).map(String::as_str), Some("true"), "bloom filter on key column {key}");
    }

    let by_column = json_orders("mode = \"upsert\"\nkey = [\"order_id\"]\nenvelope = \"dms\"\norder_by = \"updated_at\"");
    let set = load(&[("order.json", ORDER_JSON_SCHEMA), ("pipelines.toml", &by_column)]).unwrap();
    assert_eq!(set.pipelines[0].upsert.as_ref().unwrap().order_column(), "updated_at");
    let strings = json_orders(
        "mode = \"upsert\"\nkey = [\"order_id\"]\nenvelope = \"debezium\"\norder_by = \"source.lsn\"\ndecimal_handling = \"string\"",
    );
    let set = load(&[("order.json", ORDER_JSON_SCHEMA), ("pipelines.toml", &strings)]).unwrap();
    assert_eq!(set.pipelines[0].upsert.as_ref().unwrap().decimal_handling, upsert::DecimalHandling::String);
    assert!(!set.pipelines[0].upsert.as_ref().unwrap().allow_truncate, "truncates are refused by default");
    let truncating =
        json_orders("mode = \"upsert\"\nkey = [\"order_id\"]\nenvelope = \"debezium\"\norder_by = \"source.lsn\"\nallow_truncate = true");
    let set = load(&[("order.json", ORDER_JSON_SCHEMA), ("pipelines.toml", &truncating)]).unwrap();
    assert!(set.pipelines[0].upsert.as_ref().unwrap().allow_truncate);
    let row = json_orders("mode = \"upsert\"\nkey = [\"order_id\"]\nenvelope = \"row\"");
    let set = load(&[("order.json", ORDER_JSON_SCHEMA), ("pipelines.toml", &row)]).unwrap();
    assert_eq!(set.pipelines[0].upsert.as_ref().unwrap().order, upsert::Order::Kafka);
    assert!(set.pipelines[0].changelog().is_none());
}

#[test]
fn every_bad_upsert_key_names_the_pipeline_the_key_and_what_is_allowed() {
    let up = "mode = \"upsert\"\nkey = [\"order_id\"]\n";
    let cases: Vec<(String, &str)> = vec![
        ("mode = \"merge\"".into(), "key `mode`: \"merge\" is not allowed: allowed are append | upsert"),
        ("envelope = \"row\"".into(), "key `envelope`: only with mode = \"upsert\""),
        ("changelog = true".into(), "key `changelog`: only with mode = \"upsert\""),
        ("mode = \"upsert\"\nenvelope = \"row\"".into(), "key `key`: mode = \"upsert\" needs the key columns"),
        (up.to_string(), "key `envelope`: required with mode = \"upsert\": allowed are debezium | dms | csv | row"),
        (format!("{up}envelope = \"maxwell\""), "key `envelope`: \"maxwell\" is not allowed: allowed are debezium | dms | csv | row"),
        (
            format!("{up}envelope = \"debezium\""),
            "key `order_by`: required with envelope = \"debezium\": a column, or source.lsn | source.scn | source.pos | source.ts_ms",
        ),
        (
            format!("{up}envelope = \"debezium\"\norder_by = \"source.xid\""),
            "key `order_by`: \"source.xid\" is not a source-position field of debezium",
        ),
        (format!("{up}envelope = \"dms\"\norder_by = \"nope\""), "key `order_by`: no top-level column \"nope\""),
        (
            format!("{up}envelope = \"dms\"\norder_by = \"note\""),
            "key `order_by`: column \"note\" is string: allowed are int, long, date, timestamp",
        ),
        (format!("{up}envelope = \"row\"\norder_by = \"updated_at\""), "key `order_by`: envelope = \"row\" orders by the Kafka offset"),
        (format!("{up}envelope = \"row\"\ndedup = \"batch\""), "key `dedup`: not with mode = \"upsert\""),
        ("mode = \"upsert\"\nkey = [\"total\"]\nenvelope = \"row\"".into(), "a key column must be a primitive other than float/double"),
        ("decimal_handling = \"string\"".into(), "key `decimal_handling`: only with mode = \"upsert\""),
        (
            format!("{up}envelope = \"dms\"\norder_by = \"updated_at\"\ndecimal_handling = \"string\""),
            "key `decimal_handling`: only with envelope = \"debezium\"",
        ),
        (
            format!("{up}envelope = \"debezium\"\norder_by = \"source.lsn\"\ndecimal_handling = \"exact\""),
            "key `decimal_handling`: \"exact\" is not allowed: allowed are precise | string | double",
        ),
        ("allow_truncate = true".into(), "key `allow_truncate`: only with mode = \"upsert\""),
        (
            format!("{up}envelope = \"debezium\"\norder_by = \"updated_at\"\nallow_truncate = true"),
            "key `allow_truncate`: only with envelope = \"debezium\" and order_by = a source-position field (source.lsn | source.scn | source.pos | source.ts_ms), not debezium ordered by updated_at",
        ),
        (format!("{up}envelope = \"row\"\nallow_truncate = true"), "key `allow_truncate`: only with envelope = \"debezium\""),
    ];
    for (extra, needle) in &cases {
        let e = load_err(&[("order.json", ORDER_JSON_SCHEMA), ("pipelines.toml", &json_orders(extra))]);
        assert!(e.contains("pipelines.toml: pipeline `orders` (#1)") && e.contains(needle), "{extra}: {e}");
    }
    let avro = orders("mode = \"upsert\"\nkey = [\"order_id\"]\nenvelope = \"debezium\"\norder_by = \"source.lsn\"");
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &avro)]);
    assert!(e.contains("key `envelope`: debezium is read from JSON values"), "{e}");
    // Debezium Avro and keyed rows come through a registry; DMS does not.
    let registry = "registry = \"confluent\"\nregistry_url = \"http://127.0.0.1:1\"\n";
    let set = load(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &format!("{avro}\n{registry}"))]).unwrap();
    assert!(set.pipelines[0].registry.is_some() && set.pipelines[0].upsert.is_some());
    let row = orders(&format!("mode = \"upsert\"\nkey = [\"order_id\"]\nenvelope = \"row\"\n{registry}"));
    let set = load(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &row)]).unwrap();
    assert!(set.pipelines[0].registry.is_some() && set.pipelines[0].upsert.is_some());
    let dms = json_orders(&format!("{up}envelope = \"dms\"\norder_by = \"metadata.timestamp\"\n{registry}"));
    let e = load_err(&[("order.json", ORDER_JSON_SCHEMA), ("pipelines.toml", &dms)]);
    assert!(
        e.contains(
            "key `registry`: with mode = \"upsert\" a registry frames rows (envelope = \"row\") or Debezium Avro and Protobuf envelopes"
        ),
        "{e}"
    );
    // Debezium Protobuf comes through a registry; its row is declared as an Avro record.
    let protobuf = avro.replace("format = \"avro\"", "format = \"protobuf\"");
    let e = load_err(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &protobuf)]);
    assert!(e.contains("key `envelope`: debezium is read from JSON values (format = \"json\"), or, for debezium, from Avro or Protobuf through a schema registry"), "{e}");
    let set = load(&[("schemas/order.avsc", ORDER_AVSC), ("pipelines.toml", &format!("{protobuf}\n{registry}"))]).unwrap();
    let declared = &set.pipelines[0].upsert.as_ref().unwrap().declared_row;
    assert_eq!(declared["order_id"]["type"], "int64", "{declared:?}");
    let proto = format!("{protobuf}\n{registry}").replace("schemas/order.avsc", "order.proto");
    let e = load_err(&[("order.proto", "syntax = \"proto3\"; message O { int64 order_id = 1; }"), ("pipelines.toml", &proto)]);
    assert!(
        e.contains("key `schema`: order.proto: with format = \"protobuf\" and envelope = \"debezium\" the row is an Avro record (.avsc"),
        "{e}"
    );
    let reserved = ORDER_JSON_SCHEMA.replace("\"note\"", "\"source_position\"");
    let e = load_err(&[("order.json", &reserved), ("pipelines.toml", &json_orders(&format!("{up}envelope = \"row\"")))]);
    assert!(e.contains("\"source_position\" is reserved"), "{e}");
}

#[test]
fn kafka_columns_come_after_the_lineage_and_the_dead_letter_table_keeps_the_timestamp() {
    let set =
        load(&[("pipelines.toml", &orders("kafka_columns = [\"headers\", \"timestamp\", \"key\"]")), ("schemas/order.avsc", ORDER_AVSC)])
            .unwrap();
    let p = &set.pipelines[0];
    let names: Vec<String> =
        columns(&p.def.schema).into_iter().skip(5).map(|(id, name, ty, required)| format!("{id} {name} {ty} {required}")).collect();
    assert_eq!(
        names,
        [
            "6 kafka_topic string true",
            "7 kafka_partition int true",
            "8 kafka_offset long true",
            "9 kafka_timestamp timestamptz false",
            "10 kafka_key binary false",
            "11 kafka_headers map false",
        ]
    );
    let dead: Vec<String> = columns(&p.dead_letter.schema).into_iter().skip(9).map(|(_, name, ..)| name).collect();
    assert_eq!(dead, ["kafka_timestamp", "kafka_timestamp_type"]);
    let plain = load(&[("pipelines.toml", &orders("")), ("schemas/order.avsc", ORDER_AVSC)]).unwrap();
    assert_eq!(plain.pipelines[0].def.schema.as_struct().fields().len(), 8, "none unless asked for");

    let e = load_err(&[("pipelines.toml", &orders("kafka_columns = [\"partition\"]")), ("schemas/order.avsc", ORDER_AVSC)]);
    assert!(
        e.contains("pipeline `orders`") && e.contains("key `kafka_columns`") && e.contains("timestamp | timestamp_type | key | headers"),
        "{e}"
    );
    let e = load_err(&[("pipelines.toml", &orders("kafka_columns = [\"key\", \"key\"]")), ("schemas/order.avsc", ORDER_AVSC)]);
    assert!(e.contains("key `kafka_columns`") && e.contains("twice"), "{e}");
    let reserved = ORDER_AVSC.replace("\"note\"", "\"kafka_key\"");
    let e = load_err(&[("pipelines.toml", &orders("")), ("schemas/order.avsc", &reserved)]);
    assert!(e.contains("\"kafka_key\" is reserved"), "{e}");
}

#[test]
fn a_table_per_topic_expands_exact_topics_and_refuses_two_topics_of_one_name() {
    let schema = ("schemas/order.avsc", ORDER_AVSC);
    let file = |table: &str, claims: &str| {
        format!("[[pipeline]]\ntable = \"{table}\"\n{claims}\nformat = \"avro\"\nschema = \"schemas/order.avsc\"\n")
    };
    let set = load(&[("pipelines.toml", &file("raw_{topic}", "topics = [\"Shop.Orders\", \"shop-refunds\"]")), schema]).unwrap();
    let names: Vec<_> = set.pipelines.iter().map(|p| (p.table.as_str(), p.topics.to_string(), p.dead_letter.name.as_str())).collect();
    assert_eq!(
        names,
        [
            ("raw_shop_orders", "Shop.Orders".into(), "raw_shop_orders_dead_letter"),
            ("raw_shop_refunds", "shop-refunds".into(), "raw_shop_refunds_dead_letter")
        ]
    );
    assert_eq!(set.route("shop-refunds").unwrap(), 1);
    let e = load_err(&[("pipelines.toml", &file("raw_{topic}", "topics = [\"shop.orders\", \"shop-orders\"]")), schema]);
    assert!(
        e.contains("pipeline `raw_{topic}`") && e.contains("\"shop.orders\" and \"shop-orders\" both map to table `raw_shop_orders`"),
        "{e}"
    );
    let e = load_err(&[("pipelines.toml", &file("raw_{topic}", "topics = [\"one\"]")), schema]);
    assert!(e.contains("key `table`") && e.contains("only with `topic_pattern` or several `topics`"), "{e}");
    // A pattern's tables come with its topics; its keys are checked at start all the same.
    let set = load(&[("pipelines.toml", &file("{topic}_raw", "topic_pattern = \"shop\\\\..*\"")), schema]).unwrap();
    assert!(set.pipelines.is_empty() && set.templates.len() == 1);
    let topics = ["shop.a".to_string(), "other".into(), "shop.B".into()];
    let made: Vec<_> = set.template_tables(&topics).unwrap().into_iter().map(|(_, topic, table)| (topic.to_string(), table)).collect();
    assert_eq!(made, [("shop.a".to_string(), "shop_a_raw".to_string()), ("shop.B".into(), "shop_b_raw".into())]);
    let clash = ["shop.a".to_string(), "shop.A".into()];
    assert!(set.template_tables(&clash).unwrap_err().to_string().contains("both map to table `shop_a_raw`"));
    let e = load_err(&[
        ("pipelines.toml", &(file("{topic}_raw", "topic_pattern = \"shop\\\\..*\"") + "partition_by = [\"day(nope)\"]\n")),
        schema,
    ]);
    assert!(e.contains("pipeline `{topic}_raw`") && e.contains("key `partition_by`"), "{e}");
    let taken = BTreeMap::from([("shop_a_raw".to_string(), "shop.a".to_string())]);
    let e = crate::testkit::block_on(set.instantiate("shop.A", &taken, &config())).unwrap_err().to_string();
    assert!(e.contains("topic \"shop.A\" maps to table `shop_a_raw`") && e.contains("topic \"shop.a\" already writes"), "{e}");
}

#[test]
fn unknown_fields_of_json_values_are_ignored_or_dead_letters_naming_the_field() {
    let schema =
        r#"{"type":"object","properties":{"id":{"type":"integer"},"customer":{"type":"object","properties":{"name":{"type":"string"}}}}}"#;
    let file = |extra: &str| format!("[[pipeline]]\ntable = \"t\"\ntopics = [\"t\"]\nformat = \"json\"\nschema = \"t.json\"\n{extra}\n");
    let decode = |extra: &str, value: &str| {
        let set = load(&[("t.json", schema), ("pipelines.toml", &file(extra))]).unwrap();
        let p = &set.pipelines[0];
        let arrow = p.def.arrow_schema().unwrap();
        let decoded =
            arrow.fields().iter().filter(|f| !crate::model::tables::is_written_by_icestream(f.name())).cloned().collect::<Vec<_>>();
        let mut decoder = crate::decode::RecordDecoder::new(&p.source, std::sync::Arc::new(arrow_schema::Schema::new(decoded))).unwrap();
        decoder.append(value.as_bytes())
    };
    let extra_top = r#"{"id": 1, "added": true}"#;
    let extra_nested = r#"{"id": 1, "customer": {"name": "a", "tier": 3}}"#;
    assert!(decode("", extra_top).is_ok() && decode("unknown_fields = \"ignore\"", extra_nested).is_ok(), "ignored by default");
    let e = decode("unknown_fields = \"dead_letter\"", extra_top).unwrap_err();
    assert!(e.contains("added") && e.contains("not a field of the schema"), "{e}");
    let e = decode("unknown_fields = \"dead_letter\"", extra_nested).unwrap_err();
    assert!(e.contains("customer.tier"), "{e}");
    assert!(decode("unknown_fields = \"dead_letter\"", r#"{"id": 2, "customer": {"name": "b"}}"#).is_ok());
    let e = load_err(&[("t.json", schema), ("pipelines.toml", &file("unknown_fields = \"drop\""))]);
    assert!(e.contains("key `unknown_fields`") && e.contains("ignore | dead_letter"), "{e}");
    let e = load_err(&[("pipelines.toml", &orders("unknown_fields = \"dead_letter\"")), ("schemas/order.avsc", ORDER_AVSC)]);
    assert!(e.contains("key `unknown_fields`: only with format = \"json\""), "{e}");
}

#[test]
fn an_inferred_schema_declares_its_timestamps_and_refuses_what_needs_columns_before_any_value() {
    let file =
        |extra: &str| format!("[[pipeline]]\ntable = \"clicks\"\ntopics = [\"clicks\"]\nformat = \"json\"\nschema = \"infer\"\n{extra}\n");
    let set = load(&[("pipelines.toml", &file("event_time = \"at\"\npartition_by = [\"day(event.ts)\", \"identity(at)\"]"))]).unwrap();
    let p = &set.pipelines[0];
    assert!(p.infer);
    let shown: Vec<_> = columns(&p.def.schema).into_iter().map(|(_, name, ty, required)| (name, ty, required)).collect();
    assert_eq!(&shown[..2], [("at".to_string(), "timestamptz".to_string(), false), ("event".into(), "struct<timestamptz>".into(), false)]);
    assert_eq!(p.def.schema.field_by_name("event.ts").unwrap().field_type.to_string(), "timestamptz");
    assert_eq!(p.def.partition_spec.fields().len(), 2);
    for (extra, needles) in [
        ("key = [\"id\"]", &["pipeline `clicks`", "key `key`", "schema file"][..]),
        ("mode = \"upsert\"\nenvelope = \"row\"", &["key `mode`", "only mode = \"append\""]),
        ("registry = \"glue\"", &["key `registry`", "allowed is no registry"]),
        ("unknown_fields = \"dead_letter\"", &["key `unknown_fields`"]),
        ("partition_by = [\"bucket(4, id)\"]", &["key `partition_by`", "\"id\"", "year|month|day|hour"]),
    ] {
        let e = load_err(&[("pipelines.toml", &file(extra))]);
        assert!(needles.iter().all(|n| e.contains(n)), "{extra}: {e}");
    }
    let e = load_err(&[("pipelines.toml", &file("").replace("\"json\"", "\"avro\""))]);
    assert!(e.contains("key `schema`") && e.contains("only with format = \"json\""), "{e}");
}

#[test]
fn an_exact_topic_a_pattern_also_claims_is_refused_at_start_and_two_patterns_per_topic() {
    let schema = ("schemas/order.avsc", ORDER_AVSC);
    let template = |table: &str, pattern: &str| {
        format!("[[pipeline]]\ntable = \"{table}\"\ntopic_pattern = \"{pattern}\"\nformat = \"avro\"\nschema = \"schemas/order.avsc\"\n")
    };
    let e = load_err(&[("pipelines.toml", &format!("{}{}", orders(""), template("raw_{topic}", "shop\\\\..*"))), schema]);
    assert!(e.contains("topic \"shop.orders\" is claimed by two pipelines: `orders` and `raw_{topic}`"), "{e}");
    let set =
        load(&[("pipelines.toml", &format!("{}{}", template("raw_{topic}", "shop\\\\..*"), template("all_{topic}", ".*\\\\.eu"))), schema])
            .unwrap();
    let e = crate::testkit::block_on(set.instantiate("shop.eu", &BTreeMap::new(), &config())).unwrap_err().to_string();
    assert!(e.contains("\"shop.eu\" is claimed by two pipelines") && e.contains("`raw_{topic}`") && e.contains("`all_{topic}`"), "{e}");
    assert!(set.check_route("shop.eu").is_err() && set.check_route("shop.us").is_ok());
    // A plain pattern pipeline and a template's pattern: the topic fails when it comes.
    let set =
        load(&[("pipelines.toml", &format!("{}{}", template("raw_{topic}", "shop\\\\..*"), template("eu", ".*\\\\.eu"))), schema]).unwrap();
    let e = set.route("shop.eu").unwrap_err().to_string();
    assert!(e.contains("claimed by two pipelines") && e.contains("`eu`") && e.contains("`raw_{topic}`"), "{e}");
    let e = crate::testkit::block_on(set.instantiate("shop.eu", &BTreeMap::new(), &config())).unwrap_err().to_string();
    assert!(e.contains("claimed by two pipelines") && e.contains("`eu`"), "{e}");
}
