//! The exactly-once Kafka sink (`sink.delivery-guarantee` = `exactly-once`).
//!
//! Each subtask owns the transactional id `<sink.transactional-id-prefix>-<subtask>`. The
//! messages of the rows a subtask receives between two checkpoint barriers are kept, in the
//! order they came, and are stored in the checkpoint at the barrier (the *pre-commit*: a
//! write-ahead log of the transaction). When the checkpoint completes, they are written in
//! one Kafka transaction, together with a marker: the checkpoint id, committed as the
//! offset of a consumer group named `<prefix>-<subtask>-<attempt>` through
//! `send_offsets_to_transaction` — atomically with the messages. Consumers reading
//! `read_committed` see a checkpoint's rows all at once, or not at all.
//!
//! After a crash, the restored checkpoint holds the transactions it covered but perhaps
//! not yet committed. The subtask that takes them over first fences their transactional
//! id (`init_transactions` aborts whatever the dead producer left open), then reads the
//! marker: a transaction whose checkpoint id the marker already shows was committed and is
//! skipped; any other is written and committed again. Nothing is lost and nothing is
//! written twice, whichever moment the crash hit. A restore at another parallelism works
//! too: a subtask `s` of the old run is taken over by subtask `s mod parallelism`, which
//! also fences the transactional ids of old subtasks that had nothing pending.
//!
//! Why not Flink's scheme (write into an open transaction all along, and let the restored
//! job commit the prepared transaction by resuming it with the old producer id and epoch)?
//! librdkafka cannot resume another producer's transaction, so a transaction left
//! prepared by a killed process could only be aborted; keeping the messages in the
//! checkpoint — as Flink's own write-ahead sinks do — lets the restored job write them
//! again instead. A transaction is therefore open only while one checkpoint's messages are
//! written, and `properties.transaction.timeout.ms` (librdkafka's default 60 s) need only
//! cover that, not a checkpoint interval plus a recovery as in Flink.

use super::messages::{self, Deliveries, Handle, Messages};
use crate::kafka::{KafkaConsumer, Quiet};
use arrow::array::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use rdkafka::consumer::{Consumer, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::{Operator, OperatorState, Output, StateDistribution, TaskInfo};

/// How long a transaction call (`init_transactions`, `commit_transaction`, …) may take.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// `sink.transactional-id-prefix`, required for exactly-once (as in Flink): two jobs
/// writing with the same prefix would fence each other.
pub(super) fn id_prefix(options: &ConnectorOptions) -> Result<String> {
    let table = &options.table;
    for (key, why) in [
        (
            "properties.transactional.id",
            "Weir gives each subtask its own id from 'sink.transactional-id-prefix'",
        ),
        (
            "properties.enable.idempotence",
            "Kafka transactions need the idempotent producer",
        ),
    ] {
        if let Some(value) = options.get(key) {
            if key.ends_with("idempotence") && value.eq_ignore_ascii_case("true") {
                continue;
            }
            return Err(Error::config(format!(
                "table '{table}': '{key}' = '{value}' cannot be used with \
                 'sink.delivery-guarantee' = 'exactly-once': {why}"
            )));
        }
    }
    match options.get("sink.transactional-id-prefix").map(str::trim) {
        Some(prefix) if !prefix.is_empty() => Ok(prefix.to_string()),
        _ => Err(Error::config(format!(
            "table '{table}': 'sink.delivery-guarantee' = 'exactly-once' needs \
             'sink.transactional-id-prefix' (Kafka transactional ids are \
             '<prefix>-<subtask>'; use a prefix no other job writes with)"
        ))),
    }
}

/// What every subtask's transactions share.
pub(super) struct Transactions {
    pub table: String,
    pub topic: String,
    pub brokers: String,
    pub config: ClientConfig,
    pub prefix: String,
    /// The metadata of each marker group used so far (a subtask commits to the same
    /// group at every checkpoint: its consumer is created once, not per commit).
    pub groups: Mutex<HashMap<String, Arc<ConsumerGroupMetadata>>>,
}

impl Transactions {
    fn id(&self, subtask: usize) -> String {
        format!("{}-{subtask}", self.prefix)
    }

    /// The consumer group whose offset on partition 0 of the topic records the last
    /// checkpoint that `attempt`'s subtask `subtask` committed.
    fn marker_group(&self, subtask: usize, attempt: &str) -> String {
        format!("{}-{subtask}-{attempt}", self.prefix)
    }

    fn error(&self, subtask: usize, what: &str, e: impl std::fmt::Display) -> Error {
        Error::external(format!(
            "table '{}': {what} (Kafka topic '{}', transactional id '{}', brokers '{}'): {e}",
            self.table,
            self.topic,
            self.id(subtask),
            self.brokers
        ))
    }

    /// The producer of `subtask`'s transactional id, with every earlier producer of that
    /// id fenced and its open transaction aborted.
    async fn producer(self: &Arc<Self>, subtask: usize) -> Result<Handle> {
        let mut config = self.config.clone();
        config.set("transactional.id", self.id(subtask));
        let (producer, failed) = super::producer(&self.table, &config)?;
        let p = producer.clone();
        blocking(move || p.init_transactions(TRANSACTION_TIMEOUT))
            .await?
            .map_err(|e| self.error(subtask, "starting the transactional producer failed", e))?;
        Ok((producer, failed))
    }

    fn consumer(&self, group: &str) -> Result<KafkaConsumer> {
        let mut config = self.config.clone();
        // read_committed also makes librdkafka ask for stable offsets (KIP-447): an
        // offset of a transaction still being completed is waited for, never skipped.
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        config.create_with_context(Quiet).map_err(|e| {
            Error::config(format!(
                "table '{}': cannot create a Kafka consumer for group '{group}': {e}",
                self.table
            ))
        })
    }

    /// The metadata `send_offsets_to_transaction` needs for `group`.
    fn group_metadata(&self, group: &str) -> Result<Arc<ConsumerGroupMetadata>> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(metadata) = groups.get(group) {
            return Ok(metadata.clone());
        }
        let metadata = self.consumer(group)?.group_metadata().ok_or_else(|| {
            Error::internal(format!(
                "the Kafka consumer group '{group}' has no metadata"
            ))
        })?;
        let metadata = Arc::new(metadata);
        groups.insert(group.to_string(), metadata.clone());
        Ok(metadata)
    }

    /// The last checkpoint `attempt`'s subtask `subtask` committed (its marker).
    async fn committed(self: &Arc<Self>, subtask: usize, attempt: &str) -> Result<Option<u64>> {
        let group = self.marker_group(subtask, attempt);
        let consumer = self.consumer(&group)?;
        let mut partitions = TopicPartitionList::new();
        partitions.add_partition(&self.topic, 0);
        let committed =
            blocking(move || consumer.committed_offsets(partitions, super::super::REQUEST_TIMEOUT))
                .await?
                .map_err(|e| {
                    self.error(
                        subtask,
                        &format!("reading the offsets of group '{group}' failed"),
                        e,
                    )
                })?;
        let marker = committed.find_partition(&self.topic, 0);
        let failed = |why: String| {
            self.error(
                subtask,
                &format!("reading the offsets of group '{group}' failed"),
                why,
            )
        };
        let marker =
            marker.ok_or_else(|| failed("the broker did not answer for partition 0".into()))?;
        marker.error().map_err(|e| failed(e.to_string()))?;
        Ok(match marker.offset() {
            Offset::Offset(n) if n >= 0 => Some(n as u64),
            _ => None,
        })
    }

    /// Writes `data`'s messages in one transaction with `subtask`'s producer, and marks
    /// `checkpoint` as committed by `attempt` in the same transaction.
    async fn commit(
        self: &Arc<Self>,
        (producer, failed): &Handle,
        subtask: usize,
        attempt: &str,
        checkpoint: u64,
        data: Bytes,
    ) -> Result<()> {
        let group = self.group_metadata(&self.marker_group(subtask, attempt))?;
        let (producer, failed, this) = (producer.clone(), failed.clone(), self.clone());
        blocking(move || {
            let write = || -> std::result::Result<(), String> {
                let fail = |e: KafkaError| e.to_string();
                producer.begin_transaction().map_err(fail)?;
                for message in messages::decode(&data).map_err(|e| e.to_string())? {
                    // A full queue drains in librdkafka's own thread.
                    while !messages::send(&producer, &this.topic, &message)
                        .map_err(|e| e.to_string())?
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                // Every message stored by the broker (still invisible) before the commit.
                producer.flush(TRANSACTION_TIMEOUT).map_err(fail)?;
                let mut marker = TopicPartitionList::new();
                marker
                    .add_partition_offset(&this.topic, 0, Offset::Offset(checkpoint as i64))
                    .map_err(fail)?;
                producer
                    .send_offsets_to_transaction(&marker, group.as_ref(), TRANSACTION_TIMEOUT)
                    .map_err(fail)?;
                weir_common::failpoint("commit-before-publish").map_err(|e| e.to_string())?;
                producer
                    .commit_transaction(TRANSACTION_TIMEOUT)
                    .map_err(fail)?;
                weir_common::failpoint("commit-after-publish").map_err(|e| e.to_string())?;
                match Deliveries::first_failure(&failed) {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            };
            write().map_err(|e| {
                // Leave nothing open (an abort fails harmlessly if no transaction is).
                let _ = producer.abort_transaction(TRANSACTION_TIMEOUT);
                this.error(
                    subtask,
                    &format!("committing the transaction of checkpoint {checkpoint} failed"),
                    e,
                )
            })
        })
        .await?
    }
}

/// Runs a blocking librdkafka call off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("a Kafka client call panicked: {e}")))
}

/// One checkpoint's messages, waiting for the checkpoint to complete.
#[derive(Clone)]
struct Prepared {
    checkpoint: u64,
    rows: usize,
    data: Bytes,
}

pub(super) struct ExactlyOnceSink {
    tx: Arc<Transactions>,
    messages: Messages,
    task: TaskInfo,
    attempt: String,
    /// This subtask's producer, created (and its predecessors fenced) in `open`.
    producer: Option<Handle>,
    /// Messages since the last barrier.
    buffer: Vec<u8>,
    rows: usize,
    /// Pre-committed transactions in checkpoint order.
    prepared: Vec<Prepared>,
    /// Transactions being written in the background since their checkpoint completed
    /// (still in the checkpoints taken meanwhile), and that work.
    in_flight: Vec<Prepared>,
    committing: Option<tokio::task::JoinHandle<Result<()>>>,
    /// An early checkpoint was asked for since the last barrier.
    requested: bool,
}

/// Messages held since the last barrier beyond which the sink asks for a checkpoint
/// before the interval is up (a backlog read faster than the interval would otherwise
/// pile up in memory until the next one).
const EARLY_CHECKPOINT_BYTES: usize = 64 << 20;
/// Messages held in all (since the barrier, pre-committed, being written) beyond which
/// the sink waits for the transactions being written before it takes more rows.
const MAX_HELD_BYTES: usize = 256 << 20;

impl ExactlyOnceSink {
    pub(super) fn new(tx: Transactions, messages: Messages, task: TaskInfo) -> Result<Self> {
        Ok(Self {
            tx: Arc::new(tx),
            messages,
            attempt: task.attempt.to_string(),
            task,
            producer: None,
            buffer: Vec::new(),
            rows: 0,
            prepared: Vec::new(),
            in_flight: Vec::new(),
            committing: None,
            requested: false,
        })
    }

    /// Waits for the transactions being written in the background; their error, if any,
    /// fails the job (a restore writes them again unless their marker shows them).
    async fn wait_for_commits(&mut self) -> Result<()> {
        if let Some(handle) = self.committing.take() {
            handle
                .await
                .map_err(|e| Error::internal(format!("a Kafka commit panicked: {e}")))??;
        }
        self.in_flight.clear();
        Ok(())
    }

    fn producer(&self) -> Result<&Handle> {
        self.producer
            .as_ref()
            .ok_or_else(|| Error::internal("the Kafka sink was used before it was opened"))
    }

    /// Commits, in checkpoint order, the transactions of the restored state that this
    /// subtask takes over and that their marker does not show as committed; fences the
    /// transactional ids of the old subtasks it takes over.
    async fn recover(&self, state: &OperatorState) -> Result<()> {
        let corrupt = |item: &serde_json::Value| {
            Error::Checkpoint(format!("corrupt Kafka sink state: {item}"))
        };
        let (me, parallelism) = (self.task.subtask, self.task.parallelism.max(1));
        let mut old_parallelism = 0;
        // Old subtask -> its transactions (attempt, checkpoint, messages).
        let mut taken: BTreeMap<usize, Vec<(String, u64, Bytes)>> = BTreeMap::new();
        for item in &state.items {
            let subtask = item["subtask"].as_u64().ok_or_else(|| corrupt(item))? as usize;
            match item.get("checkpoint").and_then(|c| c.as_u64()) {
                None => {
                    let p = item["parallelism"].as_u64().ok_or_else(|| corrupt(item))?;
                    old_parallelism = old_parallelism.max(p as usize);
                }
                Some(checkpoint) if subtask % parallelism == me => {
                    let attempt = item["attempt"].as_str().ok_or_else(|| corrupt(item))?;
                    let data = state.payload(item)?;
                    taken
                        .entry(subtask)
                        .or_default()
                        .push((attempt.to_string(), checkpoint, data));
                }
                Some(_) => {}
            }
        }
        for s in (parallelism..old_parallelism).filter(|s| s % parallelism == me) {
            taken.entry(s).or_default();
        }
        for (subtask, mut transactions) in taken {
            let own;
            let producer = match subtask == me {
                true => self.producer()?,
                false => {
                    own = self.tx.producer(subtask).await?;
                    &own
                }
            };
            transactions.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
            let mut markers: BTreeMap<String, Option<u64>> = BTreeMap::new();
            for (attempt, checkpoint, data) in transactions {
                let done = match markers.get(&attempt) {
                    Some(done) => *done,
                    None => {
                        let done = self.tx.committed(subtask, &attempt).await?;
                        markers.insert(attempt.clone(), done);
                        done
                    }
                };
                if done.is_some_and(|d| d >= checkpoint) {
                    tracing::debug!(
                        "table '{}': the transaction of checkpoint {checkpoint} of subtask \
                         {subtask} (run {attempt}) was committed before the restore",
                        self.tx.table
                    );
                    continue;
                }
                tracing::info!(
                    "table '{}': committing again the transaction of checkpoint {checkpoint} \
                     of subtask {subtask} (run {attempt}), restored from the checkpoint",
                    self.tx.table
                );
                self.task.fence.check()?;
                self.tx
                    .commit(producer, subtask, &attempt, checkpoint, data)
                    .await?;
                markers.insert(attempt, Some(checkpoint));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for ExactlyOnceSink {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        self.producer = Some(self.tx.producer(self.task.subtask).await?);
        if let Some(state) = restored {
            self.recover(&state).await?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        if self.committing.as_ref().is_some_and(|h| h.is_finished()) {
            self.wait_for_commits().await?;
        }
        let client = self.producer()?.0.clone();
        for message in self.messages.encode(&batch, &client).await? {
            messages::append(&mut self.buffer, &message);
            self.rows += 1;
        }
        if !self.requested && self.buffer.len() >= EARLY_CHECKPOINT_BYTES {
            self.task.request_checkpoint();
            self.requested = true;
        }
        // Back-pressure: the transactions being written drain what is held (waiting for
        // them needs nothing from this task, unlike waiting for a barrier).
        let held: usize = self.buffer.len()
            + self
                .prepared
                .iter()
                .chain(&self.in_flight)
                .map(|p| p.data.len())
                .sum::<usize>();
        if held > MAX_HELD_BYTES && self.committing.is_some() {
            self.wait_for_commits().await?;
        }
        Ok(())
    }

    async fn prepare_snapshot_pre_barrier(
        &mut self,
        id: CheckpointId,
        _: &mut Output,
    ) -> Result<()> {
        self.requested = false;
        if self.rows > 0 {
            self.prepared.push(Prepared {
                checkpoint: id.0,
                rows: std::mem::take(&mut self.rows),
                data: Bytes::from(std::mem::take(&mut self.buffer)),
            });
        }
        Ok(())
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        // Every subtask sees every item on a restore and takes over its share.
        let mut state = OperatorState::new(
            StateDistribution::Union,
            vec![json!({ "subtask": self.task.subtask, "parallelism": self.task.parallelism })],
        );
        for p in self.in_flight.iter().chain(&self.prepared) {
            let payload = state.add_payload(p.data.clone());
            state.items.push(json!({
                "subtask": self.task.subtask,
                "attempt": self.attempt,
                "checkpoint": p.checkpoint,
                "rows": p.rows,
                "payload": payload,
            }));
        }
        Ok(state)
    }

    /// Writes the transactions of the checkpoints up to `id` in the background, in order,
    /// after those of earlier checkpoints: the sink goes on taking rows meanwhile.
    async fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<()> {
        self.wait_for_commits().await?;
        let ready = self
            .prepared
            .iter()
            .take_while(|p| p.checkpoint <= id.0)
            .count();
        if ready == 0 {
            return Ok(());
        }
        self.task.fence.check()?;
        self.in_flight = self.prepared.drain(..ready).collect();
        let (tx, producer) = (self.tx.clone(), self.producer()?.clone());
        let (subtask, attempt, fence) = (
            self.task.subtask,
            self.attempt.clone(),
            self.task.fence.clone(),
        );
        let work = self.in_flight.clone();
        self.committing = Some(tokio::spawn(async move {
            for p in work {
                fence.check()?;
                tx.commit(&producer, subtask, &attempt, p.checkpoint, p.data)
                    .await?;
            }
            Ok(())
        }));
        Ok(())
    }

    /// The last transactions (a bounded job's final checkpoint) are written before the
    /// sink ends.
    async fn close(&mut self) -> Result<()> {
        self.wait_for_commits().await
    }
}
