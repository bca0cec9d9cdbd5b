//! The commit request queue through `aws-sdk-sqs`: writers send; the CLI's `committer poll`
//! receives and deletes the way the Lambda SQS mapping does (under Lambda, the mapping does it).

#[cfg(feature = "aws")]
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, MessageSystemAttributeName,
};

use super::{CommitRequest, Message};
use crate::base::error::{Error, Result};

/// SQS returns at most this many messages per receive call.
#[cfg(feature = "aws")]
const RECEIVE_MAX: usize = 10;

/// IAM actions this module calls: writers send; the CLI's `committer poll` receives, deletes and
/// defers (under Lambda the mapping receives and deletes, the committer defers). Batch APIs are
/// authorised by their single-message action. Read by [`crate::services::deployment`].
pub const SEND_ACTIONS: &[&str] = &["sqs:SendMessage"];
pub const DEFER_ACTIONS: &[&str] = &["sqs:ChangeMessageVisibility"];

/// A FIFO queue's URL ends in `.fifo` (SQS requires the suffix on FIFO queue names).
pub fn is_fifo(url: &str) -> bool {
    url.ends_with(".fifo")
}

/// FIFO message group of a request: its table. SQS delivers one group's messages in order and
/// never two batches of one group at once, so one table's commits are serial by construction
/// while different tables commit in parallel.
pub fn message_group(request: &CommitRequest) -> String {
    format!("{}.{}", request.namespace, request.table)
}

/// FIFO deduplication id: a digest of what the request commits (table and offset ranges), so a
/// resend of the same offsets within SQS's 5-minute window is dropped by the queue; a
/// dropped duplicate would only have been skipped below the watermark by the committer.
pub fn deduplication_id(request: &CommitRequest) -> String {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    digest.update(message_group(request).as_bytes());
    for r in &request.ranges {
        digest.update(format!("\n{}\t{}\t{}\t{}", r.topic, r.partition, r.first, r.last).as_bytes());
    }
    format!("{:x}", digest.finalize())
}

/// A client for one commit request queue, built once per process.
#[cfg(feature = "aws")]
#[derive(Clone, Debug)]
pub struct CommitQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

/// Without the `aws` feature there is no SQS client: the configuration refuses
/// `commit_mode=queued`, and any other use of a queue fails, naming the feature.
#[cfg(not(feature = "aws"))]
#[derive(Clone, Debug)]
pub struct CommitQueue {
    url: String,
}

#[cfg(not(feature = "aws"))]
impl CommitQueue {
    pub async fn connect(url: &str) -> Self {
        Self { url: url.to_string() }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn not_built(&self) -> Error {
        Error::not_built(&format!("the commit request queue {}", self.url), "aws")
    }

    pub async fn send(&self, _request: &CommitRequest) -> Result<String> {
        Err(self.not_built())
    }

    pub async fn receive(&self, _max: usize, _visibility_timeout_s: i32) -> Result<Vec<Message>> {
        Err(self.not_built())
    }

    pub async fn delete(&self, _messages: &[&Message]) -> Result<()> {
        Err(self.not_built())
    }

    pub async fn change_visibility(&self, _messages: &[&Message], _seconds: i32) -> Result<()> {
        Err(self.not_built())
    }
}

#[cfg(feature = "aws")]
impl CommitQueue {
    pub async fn connect(url: &str) -> Self {
        let sdk = crate::base::aws::sdk_config().await;
        Self { client: aws_sdk_sqs::Client::new(&sdk), url: url.to_string() }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Send one request; returns once SQS has acknowledged it (its message id).
    pub async fn send(&self, request: &CommitRequest) -> Result<String> {
        let mut send = self.client.send_message().queue_url(&self.url).message_body(serde_json::to_string(request)?);
        if is_fifo(&self.url) {
            send = send.message_group_id(message_group(request)).message_deduplication_id(deduplication_id(request));
        }
        let out = send.send().await.map_err(|e| crate::base::aws::error("sqs:SendMessage", &self.url, e))?;
        out.message_id.ok_or_else(|| Error::Aws {
            message: format!("sqs:SendMessage on {}: no message id in the acknowledgement", self.url),
            retryable: true,
        })
    }

    /// Receive up to `max` messages (several calls of at most 10), hiding them for
    /// `visibility_timeout_s`; stops early when the queue has nothing more to give.
    pub async fn receive(&self, max: usize, visibility_timeout_s: i32) -> Result<Vec<Message>> {
        let mut out = Vec::new();
        while out.len() < max {
            let asked = RECEIVE_MAX.min(max - out.len());
            let got = self
                .client
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(asked as i32)
                .visibility_timeout(visibility_timeout_s)
                .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                .send()
                .await
                .map_err(|e| crate::base::aws::error("sqs:ReceiveMessage", &self.url, e))?;
            let messages = got.messages.unwrap_or_default();
            if messages.is_empty() {
                break;
            }
            for m in messages {
                let id = m.message_id.unwrap_or_default();
                let count = m.attributes.as_ref().and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount));
                let receive_count = super::receive_count(count.map(String::as_str), &id)?;
                out.push(Message { receive_count, id, body: m.body.unwrap_or_default(), receipt: m.receipt_handle });
            }
        }
        Ok(out)
    }

    /// Delete (acknowledge) messages received by [`Self::receive`].
    pub async fn delete(&self, messages: &[&Message]) -> Result<()> {
        for chunk in receipt_chunks(messages)? {
            let action = "sqs:DeleteMessageBatch";
            let entries = chunk
                .into_iter()
                .map(|(id, receipt)| DeleteMessageBatchRequestEntry::builder().id(id).receipt_handle(receipt).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| entry_error(action, &self.url, e))?;
            let request = self.client.delete_message_batch().queue_url(&self.url).set_entries(Some(entries));
            let out = request.send().await.map_err(|e| crate::base::aws::error(action, &self.url, e))?;
            all_done(action, &self.url, &out.failed)?;
        }
        Ok(())
    }

    /// Make received messages visible again after `seconds`.
    pub async fn change_visibility(&self, messages: &[&Message], seconds: i32) -> Result<()> {
        for chunk in receipt_chunks(messages)? {
            let action = "sqs:ChangeMessageVisibilityBatch";
            let entries = chunk
                .into_iter()
                .map(|(id, receipt)| {
                    let entry = ChangeMessageVisibilityBatchRequestEntry::builder().id(id).receipt_handle(receipt);
                    entry.visibility_timeout(seconds).build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| entry_error(action, &self.url, e))?;
            let request = self.client.change_message_visibility_batch().queue_url(&self.url).set_entries(Some(entries));
            let out = request.send().await.map_err(|e| crate::base::aws::error(action, &self.url, e))?;
            all_done(action, &self.url, &out.failed)?;
        }
        Ok(())
    }
}

/// `(batch entry id, receipt handle)` of received messages, at most 10 per batch call. A
/// message without a receipt handle cannot be acknowledged: an error, not a silent skip.
#[cfg(feature = "aws")]
fn receipt_chunks(messages: &[&Message]) -> Result<Vec<Vec<(String, String)>>> {
    messages
        .chunks(RECEIVE_MAX)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .map(|(i, m)| match &m.receipt {
                    Some(receipt) => Ok((i.to_string(), receipt.clone())),
                    None => Err(Error::Event(format!("message {} has no receipt handle", m.id))),
                })
                .collect()
        })
        .collect()
}

/// A batch entry the SDK refused to build: fail rather than leave the message unhandled.
#[cfg(feature = "aws")]
fn entry_error(action: &str, url: &str, e: aws_sdk_sqs::error::BuildError) -> Error {
    Error::Invariant(format!("{action} on {url}: batch entry cannot be built: {e}"))
}

/// A batch call's per-entry failures as an error.
#[cfg(feature = "aws")]
fn all_done(action: &str, url: &str, failed: &[BatchResultErrorEntry]) -> Result<()> {
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(Error::Aws {
            message: format!(
                "{action} on {url}: {} entries failed ({}: {})",
                failed.len(),
                first.code,
                first.message.as_deref().unwrap_or("")
            ),
            retryable: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::queue::{OffsetRange, REQUEST_VERSION};

    fn request(table: &str, first: i64) -> CommitRequest {
        CommitRequest {
            version: REQUEST_VERSION,
            namespace: "bigdata".into(),
            table: table.into(),
            manifest: None,
            ranges: vec![OffsetRange { topic: "t".into(), partition: 0, first, last: first + 9 }],
            records: 0,
            files: 0,
            bytes: 0,
            oldest_record_ms: None,
            deduped: Vec::new(),
        }
    }

    #[test]
    fn fifo_groups_by_table_and_deduplicates_by_offsets() {
        assert!(is_fifo("https://sqs.eu-west-1.amazonaws.com/1/x-commit.fifo") && !is_fifo("https://sqs/1/x-commit"));
        assert_eq!(message_group(&request("a", 0)), "bigdata.a");
        let id = deduplication_id(&request("a", 0));
        assert_eq!(id.len(), 64, "SQS allows at most 128 characters");
        assert_eq!(id, deduplication_id(&request("a", 0)));
        assert_ne!(id, deduplication_id(&request("a", 10)));
        assert_ne!(id, deduplication_id(&request("b", 0)));
    }

    fn message(id: &str, receipt: Option<&str>) -> Message {
        Message { id: id.into(), body: String::new(), receive_count: 1, receipt: receipt.map(str::to_string) }
    }

    #[cfg(feature = "aws")]
    #[test]
    fn a_message_without_a_receipt_fails_the_batch_call_instead_of_being_skipped() {
        let (a, b) = (message("a", Some("r")), message("b", None));
        let err = receipt_chunks(&[&a, &b]).unwrap_err().to_string();
        assert!(err.contains("message b"), "{err}");
        let many: Vec<Message> = (0..11).map(|i| message(&i.to_string(), Some("r"))).collect();
        let chunks = receipt_chunks(&many.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), [10, 1]);
    }
}
