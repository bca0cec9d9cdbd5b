//! A table per topic: a pipeline whose `table` contains `{topic}` (with `topic_pattern` or
//! several `topics`) writes each topic it claims to its own table, named by the template with
//! the topic lowercased and every character outside `[a-z0-9_]` replaced by `_`. Exact topics
//! are expanded at start into one pipeline each; topics of a pattern become pipelines when
//! first seen (`ingest`). Two topics that map to one table are refused, naming both.

use std::collections::BTreeMap;

use regex::Regex;

use super::file::PipelineSpec;
use super::{Pipeline, PipelineSet, Topics, load_one, registry_spec, resolve};
use crate::base::error::{Error, Result};
use crate::model::config::Config;

/// The placeholder of a table template.
pub const TOPIC: &str = "{topic}";

/// Whether a `table` is a template.
pub fn is_template(table: &str) -> bool {
    table.contains(TOPIC)
}

/// The table `template` names for `topic`.
pub fn table_for(template: &str, topic: &str) -> String {
    let name: String = topic
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' { c } else { '_' })
        .collect();
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
        return Err(format!(
            "key `registry_schema`: not with a table per topic: each topic's schema is its own subject ({TOPIC}-value) or Glue schema ({TOPIC})"
        ));
    }
    Ok(())
}

/// A table-per-topic spec, checked as any pipeline is (`label` names it): one pipeline per
/// listed topic; a pattern's are made when its topics are seen, its keys checked now for a
/// stand-in topic.
pub(super) async fn load(spec: &PipelineSpec, label: &str, base: &std::path::Path, config: &Config) -> Result<Vec<Pipeline>> {
    let mut pipelines = Vec::with_capacity(spec.topics.len());
    check(spec).map_err(|e| Error::Config(format!("{label}: {e}")))?;
    tables(&spec.table, spec.topics.iter().map(String::as_str)).map_err(|e| Error::Config(format!("{label}: {e}")))?;
    for topic in &spec.topics {
        pipelines.push(load_one(&instance(spec, topic), label, base, config).await?);
    }
    if let Some(pattern) = &spec.topic_pattern {
        // Checked now as any pipeline is, for a stand-in topic: a bad key stops start-up,
        // not the first batch of a new topic. (Through a registry, the subject is known
        // only with the topic.)
        Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| Error::Config(format!("{label}: key `topic_pattern`: {pattern:?} is not a regular expression: {e}")))?;
        if spec.schema.is_some() || spec.registry.is_none() {
            resolve(&instance(spec, "topic"), base, config, registry_spec(spec).map_err(|e| Error::Config(format!("{label}: {e}")))?, None)
                .map_err(|e| Error::Config(format!("{label}: {e}")))?;
        } else {
            registry_spec(spec).map_err(|e| Error::Config(format!("{label}: {e}")))?;
        }
    }
    Ok(pipelines)
}

/// The set's table-per-topic pipelines.
impl PipelineSet {
    /// The pipeline of a topic first seen at run time that a table-per-topic pattern claims
    /// (`None`: none claims it). A table name another pipeline or `taken` (the tables of topics
    /// seen before) already has fails the invocation, naming the topic and the table.
    pub async fn instantiate(&self, topic: &str, taken: &BTreeMap<String, String>, config: &Config) -> Result<Option<Pipeline>> {
        let file = self.file.as_deref().unwrap_or("the knobs");
        let mut claims = self.pattern_templates(topic);
        let Some((i, spec)) = claims.next() else { return Ok(None) };
        if let Some((_, other)) = claims.next() {
            return Err(two_patterns(file, topic, spec, other));
        }
        if let Some(p) = self.pipelines.iter().find(|p| p.topics.claims(topic)) {
            return Err(Error::Routing(format!(
                "{file}: topic {topic:?} is claimed by two pipelines: `{}` ({}) and `{}` (topics matching /{}/); a topic feeds one table",
                p.table,
                p.topics,
                spec.table,
                spec.topic_pattern.as_deref().unwrap_or_default()
            )));
        }
        let table = table_for(&spec.table, topic);
        if let Some(other) = taken.get(&table).filter(|t| *t != topic) {
            return Err(Error::Routing(format!(
                "{file}: topic {topic:?} maps to table `{table}` of pipeline `{}`, which topic {other:?} already writes",
                spec.table
            )));
        }
        if let Some(p) = self
            .pipelines
            .iter()
            .find(|p| [Some(&p.def), Some(&p.dead_letter), p.changelog()].into_iter().flatten().any(|d| d.name == table))
        {
            return Err(Error::Routing(format!(
                "{file}: topic {topic:?} maps to table `{table}` of pipeline `{}`, which pipeline `{}` already writes",
                spec.table, p.table
            )));
        }
        let label = format!("{file}: pipeline `{}` (#{}) for topic {topic:?}", spec.table, i + 1);
        load_one(&instance(spec, topic), &label, &self.base, config).await.map(Some)
    }

    /// The table-per-topic patterns that claim `topic`, with their index among the templates.
    pub fn pattern_templates<'a>(&'a self, topic: &'a str) -> impl Iterator<Item = (usize, &'a PipelineSpec)> + 'a {
        self.templates.iter().enumerate().filter(move |(_, spec)| pattern_claims(spec, topic))
    }

    /// The table a table-per-topic pattern would give `topic` (the first that claims it).
    pub fn pattern_table(&self, topic: &str) -> Option<String> {
        self.pattern_templates(topic).next().map(|(_, spec)| table_for(&spec.table, topic))
    }

    /// The tables the file's table-per-topic pipelines would create for `topics` (those each
    /// claims), as `(template, topic, table)`; two topics of one template that map to one table
    /// are refused, naming both.
    pub fn template_tables<'a>(&self, topics: &'a [String]) -> Result<Vec<(String, &'a str, String)>> {
        let mut out = Vec::new();
        for spec in &self.templates {
            let claims = |t: &&String| match &spec.topic_pattern {
                Some(_) => pattern_claims(spec, t),
                None => spec.topics.contains(t),
            };
            let claimed = topics.iter().filter(claims).map(String::as_str);
            let tables = self::tables(&spec.table, claimed).map_err(|e| Error::Config(format!("pipeline `{}`: {e}", spec.table)))?;
            out.extend(tables.into_iter().map(|(table, topic)| (spec.table.clone(), topic, table)));
        }
        Ok(out)
    }

    /// Whether a pipeline takes `topic`: [`Self::route`]'s, or a table-per-topic pattern's (its
    /// table is made when the topic is first seen). The error is `route`'s.
    pub fn check_route(&self, topic: &str) -> Result<()> {
        match self.route(topic) {
            Err(_) if self.pipelines.iter().all(|p| !p.topics.claims(topic)) && self.pattern_templates(topic).count() == 1 => Ok(()),
            other => other.map(drop),
        }
    }

    /// An exact topic of one pipeline that a table-per-topic pattern also claims, refused
    /// naming both pipelines and the topic (two patterns are told apart per topic, at run time).
    pub(super) fn check_pattern_claims(&self) -> Result<()> {
        let file = self.file.as_deref().unwrap_or("the knobs");
        for p in &self.pipelines {
            let Topics::Exact(names) = &p.topics else { continue };
            for topic in names {
                if let Some((_, spec)) = self.pattern_templates(topic).next() {
                    return Err(Error::Config(format!(
                        "{file}: topic {topic:?} is claimed by two pipelines: `{}` and `{}` (topics matching /{}/); a topic feeds one table",
                        p.table,
                        spec.table,
                        spec.topic_pattern.as_deref().unwrap_or_default()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Whether `spec` is a pattern that claims `topic` (a whole-name match).
fn pattern_claims(spec: &PipelineSpec, topic: &str) -> bool {
    spec.topic_pattern.as_ref().is_some_and(|pattern| Regex::new(&format!("^(?:{pattern})$")).is_ok_and(|re| re.is_match(topic)))
}

/// Two table-per-topic patterns claim one topic: the invocation fails naming both.
pub(super) fn two_patterns(file: &str, topic: &str, a: &PipelineSpec, b: &PipelineSpec) -> Error {
    Error::Routing(format!(
        "{file}: topic {topic:?} is claimed by two pipelines: `{}` (topics matching /{}/) and `{}` (topics matching /{}/); a topic feeds one table",
        a.table,
        a.topic_pattern.as_deref().unwrap_or_default(),
        b.table,
        b.topic_pattern.as_deref().unwrap_or_default()
    ))
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
        assert!(
            names("raw_{topic}", "raw_shop_orders")
                && !names("raw_{topic}", "raw_shop_orders_dead_letter")
                && !names("raw_{topic}", "other")
        );
    }
}
