//! A table per topic: a pipeline whose `table` contains `{topic}` (with `topic_pattern` or
//! several `topics`) writes each topic it claims to its own table, named by the template with
//! the topic lowercased and every character outside `[a-z0-9_]` replaced by `_`. Exact topics
//! are expanded at start into one pipeline each; topics of a pattern become pipelines when
//! first seen (`ingest`). Two topics that map to one table are refused, naming both.

use std::collections::BTreeMap;

use regex::Regex;

use super::file::PipelineSpec;

/// The placeholder of a table template.
pub const TOPIC: &str = "{topic}";

/// Whether a `table` is a template.
pub fn is_template(table: &str) -> bool {
    table.contains(TOPIC)
}

/// The table `template` names for `topic`.
pub fn table_for(template: &str, topic: &str) -> String {
    let name: String = topic.chars().map(|c| c.to_ascii_lowercase()).map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' { c } else { '_' }).collect();
    template.replace(TOPIC, &name)
}

/// Whether `table` is one `template` can name (what maintenance, audit and status look for in
/// the namespace when the topics are not known in advance). Its dead-letter table is not.
pub fn names(template: &str, table: &str) -> bool {
    let (before, after) = template.split_once(TOPIC).unwrap_or((template, ""));
    let pattern = format!("^{}[a-z0-9_]+{}$", regex::escape(before), regex::escape(&after.replace(TOPIC, "")));
    Regex::new(&pattern).is_ok_and(|re| re.is_match(table)) && !table.ends_with("_dead_letter") && !table.ends_with("_changelog")
}

/// Whether `table` is a table of `template` or its dead-letter table.
pub fn covers(template: &str, table: &str) -> bool {
    names(template, table) || table.strip_suffix("_dead_letter").is_some_and(|data| names(template, data))
}

/// The spec of one topic's table: the template's, for that topic alone.
pub fn instance(spec: &PipelineSpec, topic: &str) -> PipelineSpec {
    PipelineSpec { table: table_for(&spec.table, topic), topics: vec![topic.to_string()], topic_pattern: None, ..spec.clone() }
}

/// The tables `topics` get from `template`, refusing two topics that map to one name.
pub fn tables<'a>(template: &str, topics: impl IntoIterator<Item = &'a str>) -> Result<BTreeMap<String, &'a str>, String> {
    let mut out: BTreeMap<String, &str> = BTreeMap::new();
    for topic in topics {
        let table = table_for(template, topic);
        if let Some(other) = out.insert(table.clone(), topic)
            && other != topic
        {
            return Err(format!("topics {other:?} and {topic:?} both map to table `{table}`; give one of them its own pipeline"));
        }
    }
    Ok(out)
}

/// A spec with a template table checked: `{topic}` once, and with a pattern or several topics.
pub fn check(spec: &PipelineSpec) -> Result<(), String> {
    if spec.table.matches(TOPIC).count() > 1 {
        return Err(format!("key `table`: {:?} names {TOPIC} more than once", spec.table));
    }
    if spec.topic_pattern.is_none() && spec.topics.len() < 2 {
        return Err(format!("key `table`: {:?} is a table per topic: only with `topic_pattern` or several `topics`", spec.table));
    }
    if spec.registry_schema.is_some() {
        return Err(format!("key `registry_schema`: not with a table per topic: each topic's schema is its own subject ({TOPIC}-value) or Glue schema ({TOPIC})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_topic_lowercased_with_other_characters_as_underscores() {
        assert_eq!(table_for("raw_{topic}", "Shop.Orders-EU"), "raw_shop_orders_eu");
        assert_eq!(table_for("{topic}_v1", "a_b9"), "a_b9_v1");
        let e = tables("raw_{topic}", ["shop.orders", "shop-orders", "x"]).unwrap_err();
        assert!(e.contains("\"shop.orders\" and \"shop-orders\" both map to table `raw_shop_orders`"), "{e}");
        assert!(names("raw_{topic}", "raw_shop_orders") && !names("raw_{topic}", "raw_shop_orders_dead_letter") && !names("raw_{topic}", "other"));
    }
}
