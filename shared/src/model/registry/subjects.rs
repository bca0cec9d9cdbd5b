//! Which registry subjects a pipeline's records may name. A writer id is a key to any schema
//! the registry holds; taken as it comes, a producer could name the schema of another subject
//! and add its columns to the table for good. So a writer is read only when it is registered
//! under a subject the pipeline owns: the configured `registry_schema`, else the subject the
//! serializers' default naming gives the record's topic (Confluent's TopicNameStrategy:
//! `<topic>-value`, `<topic>-key`; Glue: the schema named like the topic, in the pipeline's
//! registry). Records of any other writer are dead letters naming both sides.

use super::RegistrySpec;

/// Which part of a record a writer id was read from (their default subjects differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Value,
    /// A record key (an upsert's delete): its key subject, or any subject of the values.
    Key,
}

/// The topics a pipeline reads, as the subject rule needs them.
pub trait TopicClaims {
    fn claims(&self, topic: &str) -> bool;
    /// The accepted names `name` makes of the topics, for messages (`a-value, b-value`, or
    /// `<topic>-value for topics matching /…/`).
    fn describe(&self, name: &dyn Fn(&str) -> String) -> String;
}

impl RegistrySpec {
    /// The subject configured with `registry_schema` (Glue: the schema name), if any.
    pub fn configured_subject(&self) -> Option<&str> {
        match self {
            RegistrySpec::Glue { subject, .. } | RegistrySpec::Confluent { subject, .. } => subject.as_deref(),
        }
    }

    /// The subject (Confluent) or schema name (Glue) of `topic`'s values: the configured one,
    /// else the serializers' default naming.
    pub fn value_subject(&self, topic: &str) -> String {
        match (self.configured_subject(), self) {
            (Some(subject), _) => subject.to_string(),
            (None, RegistrySpec::Confluent { .. }) => format!("{topic}-value"),
            (None, RegistrySpec::Glue { .. }) => topic.to_string(),
        }
    }

    /// How a subject the registry names reads in the rule: Glue schemas are `registry/schema`
    /// (a version id is global to the account), Confluent subjects as they are.
    fn qualified(&self, name: &str) -> String {
        match self {
            RegistrySpec::Glue { registry_name, .. } => format!("{registry_name}/{name}"),
            RegistrySpec::Confluent { .. } => name.to_string(),
        }
    }

    /// Whether a writer registered under `subject` (as [`super::RegisteredSchema::subjects`]
    /// names it) may be read from `field` of records of `topics`.
    pub fn accepts(&self, subject: &str, topics: &dyn TopicClaims, field: Field) -> bool {
        let value = match (self.configured_subject(), self) {
            (Some(configured), _) => subject == self.qualified(configured),
            (None, RegistrySpec::Confluent { .. }) => subject.strip_suffix("-value").is_some_and(|t| topics.claims(t)),
            (None, RegistrySpec::Glue { registry_name, .. }) => {
                subject.split_once('/').is_some_and(|(registry, schema)| registry == registry_name && topics.claims(schema))
            }
        };
        // Glue's serializers name a key's schema like the value's.
        let key = field == Field::Key
            && matches!(self, RegistrySpec::Confluent { .. })
            && subject.strip_suffix("-key").is_some_and(|t| topics.claims(t));
        value || key
    }

    /// The subjects [`Self::accepts`] takes, for messages.
    pub fn accepted(&self, topics: &dyn TopicClaims, field: Field) -> String {
        let values = match self.configured_subject() {
            Some(configured) => self.qualified(configured),
            None => topics.describe(&|topic| self.qualified(&self.value_subject(topic))),
        };
        match (field, self) {
            (Field::Key, RegistrySpec::Confluent { .. }) => format!("{}, {values}", topics.describe(&|topic| format!("{topic}-key"))),
            _ => values,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Exact(&'static [&'static str]);
    impl TopicClaims for Exact {
        fn claims(&self, topic: &str) -> bool {
            self.0.contains(&topic)
        }
        fn describe(&self, name: &dyn Fn(&str) -> String) -> String {
            self.0.iter().map(|t| name(t)).collect::<Vec<_>>().join(", ")
        }
    }

    fn confluent(subject: Option<&str>) -> RegistrySpec {
        RegistrySpec::Confluent { url: "http://127.0.0.1:1".into(), secret: None, subject: subject.map(str::to_string) }
    }

    #[test]
    fn a_writer_is_read_only_under_a_subject_of_the_pipeline() {
        let topics = Exact(&["shop.orders", "shop.returns"]);
        let by_topic = confluent(None);
        assert!(by_topic.accepts("shop.orders-value", &topics, Field::Value));
        assert!(by_topic.accepts("shop.returns-value", &topics, Field::Value));
        assert!(!by_topic.accepts("payments-value", &topics, Field::Value));
        assert!(!by_topic.accepts("shop.orders-key", &topics, Field::Value), "a key schema cannot widen the table");
        assert!(by_topic.accepts("shop.orders-key", &topics, Field::Key));
        assert_eq!(by_topic.accepted(&topics, Field::Value), "shop.orders-value, shop.returns-value");

        let configured = confluent(Some("orders-envelope"));
        assert!(configured.accepts("orders-envelope", &topics, Field::Value));
        assert!(!configured.accepts("shop.orders-value", &topics, Field::Value), "the configured subject alone");
        assert_eq!(configured.accepted(&topics, Field::Value), "orders-envelope");

        let glue = RegistrySpec::Glue { registry_name: "shop".into(), subject: None };
        assert!(glue.accepts("shop/shop.orders", &topics, Field::Value) && glue.accepts("shop/shop.orders", &topics, Field::Key));
        assert!(!glue.accepts("other/shop.orders", &topics, Field::Value), "another registry's schema of the same name");
        assert!(!glue.accepts("shop/payments", &topics, Field::Value));
        let glue = RegistrySpec::Glue { registry_name: "shop".into(), subject: Some("orders".into()) };
        assert!(glue.accepts("shop/orders", &topics, Field::Value) && !glue.accepts("shop/shop.orders", &topics, Field::Value));
        assert_eq!(glue.accepted(&topics, Field::Value), "shop/orders");
    }
}
