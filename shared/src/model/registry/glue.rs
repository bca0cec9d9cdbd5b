//! The AWS Glue Schema Registry: `GetSchemaVersion` by version id (what a frame names; its
//! `SchemaArn` says which registry and schema it belongs to), or the latest version of a schema
//! (the table's initial schema when the pipeline gives none).

use aws_sdk_glue::error::ProvideErrorMetadata;
use aws_sdk_glue::operation::get_schema_version::GetSchemaVersionOutput;
use aws_sdk_glue::types::{SchemaId, SchemaVersionNumber};

use super::{RegisteredSchema, parse_data_format};
use crate::base::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct GlueRegistry {
    client: aws_sdk_glue::Client,
    registry_name: String,
}

impl GlueRegistry {
    pub fn new(sdk: &aws_config::SdkConfig, registry_name: &str) -> Self {
        Self { client: aws_sdk_glue::Client::new(sdk), registry_name: registry_name.to_string() }
    }

    pub async fn by_version_id(&self, id: uuid::Uuid) -> Result<RegisteredSchema> {
        let out = self.client.get_schema_version().schema_version_id(id.to_string()).send().await.map_err(|e| {
            if e.code() == Some("EntityNotFoundException") {
                return Error::RegistryNotFound(format!("Glue Schema Registry: schema version {id} does not exist"));
            }
            unreachable_or_unknown(crate::base::aws::error("glue:GetSchemaVersion", &format!("schema version {id}"), e))
        })?;
        registered(out)
    }

    pub async fn latest(&self, schema_name: &str) -> Result<RegisteredSchema> {
        let schema_id = SchemaId::builder().registry_name(&self.registry_name).schema_name(schema_name).build();
        let out = self
            .client
            .get_schema_version()
            .schema_id(schema_id)
            .schema_version_number(SchemaVersionNumber::builder().latest_version(true).build())
            .send()
            .await
            .map_err(|e| {
                let resource = format!("schema {schema_name} in registry {}", self.registry_name);
                unreachable_or_unknown(crate::base::aws::error("glue:GetSchemaVersion", &resource, e))
            })?;
        registered(out)
    }
}

fn unreachable_or_unknown(e: Error) -> Error {
    Error::Registry(format!("Glue Schema Registry: {e}"))
}

fn registered(out: GetSchemaVersionOutput) -> Result<RegisteredSchema> {
    let id = out.schema_version_id().unwrap_or_default();
    let format_name = out.data_format().map(|f| f.as_str().to_string()).unwrap_or_default();
    let format = parse_data_format(&format_name).ok_or_else(|| {
        Error::Registry(format!("Glue schema version {id} has data format {format_name:?} (expected AVRO, PROTOBUF or JSON)"))
    })?;
    let text = out.schema_definition().ok_or_else(|| Error::Registry(format!("Glue schema version {id} has no definition")))?;
    // `arn:<partition>:glue:<region>:<account>:schema/<registry>/<schema>`.
    let arn = out.schema_arn().unwrap_or_default();
    let schema = arn
        .rsplit_once(":schema/")
        .map(|(_, names)| names.to_string())
        .filter(|names| names.split('/').count() == 2)
        .ok_or_else(|| Error::Registry(format!("Glue schema version {id}: SchemaArn {arn:?} does not name its registry and schema")))?;
    Ok(RegisteredSchema {
        format,
        text: text.to_string(),
        version: format!("Glue version {id} (#{})", out.version_number().unwrap_or_default()),
        subjects: vec![schema],
    })
}
