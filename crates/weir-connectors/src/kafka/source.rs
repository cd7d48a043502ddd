//! The `kafka` source: every partition of the table's topics is a split, read by the
//! subtask [`super::owner`] names, from the offset Weir's checkpoint recorded.
//!
//! - **Positions** are the next offset of every partition, kept as union state so that a
//!   restore at another parallelism hands each partition to its new owner. A partition
//!   the checkpoint does not know (added to the topic later) is read from its earliest
//!   offset, as Flink does.
//! - **Startup** offsets (`scan.startup.mode`) are resolved to numbers when the job starts
//!   from scratch, so the first checkpoint records where reading really began.
//! - **Bounded** reads (`scan.bounded.mode`) resolve their stop offsets at the first start
//!   and keep them in the checkpoint: a restored bounded job stops where the first attempt
//!   would have, then takes the final checkpoint.
//! - **Committing** offsets back to `properties.group.id` happens when a checkpoint
//!   completes; it is for monitoring only (Weir never reads them back, except for
//!   `scan.startup.mode` = `group-offsets` on a fresh start).
//! - **Polling** never blocks: messages librdkafka has prefetched are taken without
//!   waiting, and the partition positions change only when a batch is returned, so
//!   `poll_next` is cancel-safe. Blocking client calls (metadata, offsets) run on tokio's
//!   blocking pool.

use super::KafkaConsumer as BaseConsumer;
use super::decode::{Decoder, KafkaMetadata, Record};
use super::positions::{Position, Topics, parse_position};
use super::{REQUEST_TIMEOUT, brokers, owner};
use crate::filesystem::format::{Format, raw_column};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, Timestamp};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::{
    JobMetrics, OperatorState, Source, SourceFactory, SourcePoll, SplitId, StateDistribution,
    TaskInfo,
};

/// Messages taken per poll at most (one batch).
const MAX_BATCH_MESSAGES: usize = 8192;
/// librdkafka's `fetch.queue.backoff.ms` unless set (see where it is set).
const FETCH_QUEUE_BACKOFF_MS: u64 = 10;
/// How long an idle source waits before polling librdkafka's queue again.
const IDLE_WAIT: Duration = Duration::from_millis(5);
/// Where an earliest read starts: the first offset a partition can have (see
/// `Shared::resolve`).
const LOG_START: i64 = 0;

type PartitionId = (String, i32);

/// What every subtask of one table shares.
struct Shared {
    table: String,
    brokers: String,
    config: ClientConfig,
    group_id: Option<String>,
    topics: Topics,
    startup: Position,
    bounded: Option<Position>,
    /// `properties.auto.offset.reset` for `group-offsets` without committed offsets.
    reset_to_earliest: Option<bool>,
    discovery: Option<Duration>,
    decoder: Decoder,
}

pub struct KafkaSourceFactory {
    shared: Arc<Shared>,
}

impl KafkaSourceFactory {
    /// Checks the options and that the brokers answer and the topics exist, so that a
    /// mistake fails the job before it starts.
    pub async fn try_new(
        options: &ConnectorOptions,
        schema: SchemaRef,
        metadata: &[(String, String)],
        primary_key: Option<&[String]>,
    ) -> Result<Self> {
        let table = options.table.clone();
        let topics = match (options.get("topic"), options.get("topic-pattern")) {
            (Some(_), Some(_)) => {
                return Err(Error::config(format!(
                    "table '{table}': set 'topic' or 'topic-pattern', not both"
                )));
            }
            (Some(list), None) => Topics::List(
                list.split(';')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect(),
            ),
            (None, Some(pattern)) => {
                Topics::Pattern(Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
                    Error::config(format!(
                        "table '{table}': invalid 'topic-pattern' '{pattern}': {e}"
                    ))
                })?)
            }
            (None, None) => {
                return Err(Error::config(format!(
                    "table '{table}': missing required option 'topic' (or 'topic-pattern')"
                )));
            }
        };
        if let Topics::List(list) = &topics
            && list.is_empty()
        {
            return Err(Error::config(format!("table '{table}': 'topic' is empty")));
        }
        // `upsert-kafka` reads the whole topic: every key's latest value.
        let startup = match primary_key {
            Some(_) => Position::Earliest,
            None => parse_position(options, "scan.startup")?.unwrap_or(Position::GroupOffsets),
        };
        let bounded = parse_position(options, "scan.bounded")?;
        let specific = matches!(startup, Position::Specific(_))
            || matches!(bounded, Some(Position::Specific(_)));
        if specific && !matches!(&topics, Topics::List(l) if l.len() == 1) {
            return Err(Error::config(format!(
                "table '{table}': 'specific-offsets' needs exactly one 'topic'"
            )));
        }
        let group_id = options.get("properties.group.id").map(str::to_string);
        if startup == Position::GroupOffsets && group_id.is_none() {
            return Err(Error::config(format!(
                "table '{table}': 'scan.startup.mode' = 'group-offsets' (the default) needs \
                 'properties.group.id'; or set 'scan.startup.mode' to 'earliest-offset'"
            )));
        }
        let reset_to_earliest = match options.get("properties.auto.offset.reset") {
            None => Some(false),
            Some(r) => match r.to_ascii_lowercase().as_str() {
                "earliest" | "smallest" | "beginning" => Some(true),
                "latest" | "largest" | "end" => Some(false),
                "none" | "error" => None,
                other => {
                    return Err(Error::config(format!(
                        "table '{table}': invalid 'properties.auto.offset.reset' '{other}'"
                    )));
                }
            },
        };
        // An offset out of the partition's range (deleted by the topic's retention, or an
        // earliest read's start below the log start) is reset as the startup mode says,
        // as Flink's source sets `auto.offset.reset`: to the log start for
        // `earliest-offset` and `specific-offsets`, to the end for `latest-offset` and
        // `timestamp`, as `properties.auto.offset.reset` says for `group-offsets`.
        // (librdkafka's own default is the end, which skips a trimmed partition's data.)
        let reset = match (&startup, reset_to_earliest) {
            (Position::Earliest | Position::Specific(_), _) => "earliest",
            (Position::Latest | Position::Timestamp(_), _) => "latest",
            (Position::GroupOffsets, Some(true)) => "earliest",
            (Position::GroupOffsets, Some(false)) => "latest",
            (Position::GroupOffsets, None) => "error",
        };
        let discovery = match options.get("scan.topic-partition-discovery.interval") {
            None => Some(Duration::from_secs(300)),
            Some(_) => options
                .get_duration("scan.topic-partition-discovery.interval")?
                .filter(|d| !d.is_zero()),
        };
        let format = super::value_format(options)?;
        let metadata = crate::metadata::resolve(
            options,
            "kafka",
            &schema,
            metadata,
            KafkaMetadata::KEYS,
            KafkaMetadata::from_key,
        )?;
        let physical = crate::metadata::physical_schema(&schema, &metadata);
        let layout = super::keys::layout(options, &physical, primary_key)?;
        if matches!(format, Format::Raw) {
            raw_column(&layout.value_schema)?;
        }
        // With `ALL` the value holds the key columns too, and they are read from it (but
        // for a delete, which has only a key).
        let upsert = primary_key.is_some();
        let key = layout
            .key
            .clone()
            .filter(|_| upsert || !layout.value_is_whole(&physical));
        let mut config = super::client_config(options)?;
        config
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", reset);
        if options.get("properties.fetch.queue.backoff.ms").is_none() {
            // Once a partition's prefetch queue holds `queued.min.messages` (100 000),
            // librdkafka waits this long before fetching it again: 1 s by default, during
            // which a source that has emptied the queue idles (a job read 290k messages/s
            // at a quarter of a core; with 10 ms, 2.2M/s). Java's client has no such pause.
            config.set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string());
        }
        if group_id.is_none() {
            // librdkafka wants a group even for assigned partitions; nothing is committed.
            config.set("group.id", format!("weir-{}", uuid::Uuid::new_v4()));
        }
        let value_avro = match &format {
            Format::Avro(_) => Some(crate::filesystem::avro::AvroLayout::new(
                &layout.value_schema,
            )?),
            _ => None,
        };
        let shared = Arc::new(Shared {
            brokers: brokers(options).to_string(),
            table,
            config,
            group_id,
            topics,
            startup,
            bounded,
            reset_to_earliest,
            discovery,
            decoder: Decoder {
                format,
                schema,
                physical,
                value_schema: layout.value_schema,
                value_fields: layout.value_fields,
                key,
                upsert,
                value_avro,
                metadata,
            },
        });
        // Fail now, with the brokers' and topics' names, if they cannot be read.
        let probe = shared.clone();
        blocking(move || {
            let consumer = probe.consumer()?;
            probe.partitions(&consumer).map(|_| ())
        })
        .await?;
        Ok(Self { shared })
    }
}

/// Runs a blocking client call on tokio's blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("Kafka client call panicked: {e}")))?
}

impl Shared {
    fn consumer(&self) -> Result<BaseConsumer> {
        self.config.create_with_context(super::Quiet).map_err(|e| {
            Error::config(format!(
                "table '{}': cannot create a Kafka consumer: {e}",
                self.table
            ))
        })
    }

    fn broker_error(&self, what: &str, e: KafkaError) -> Error {
        Error::external(format!(
            "table '{}': {what} from the Kafka brokers '{}' failed: {e}",
            self.table, self.brokers
        ))
    }

    /// Every partition of the table's topics (blocking). A listed topic that does not
    /// exist is an error; a pattern may match nothing yet.
    fn partitions(&self, consumer: &BaseConsumer) -> Result<Vec<PartitionId>> {
        let metadata = match &self.topics {
            Topics::List(list) if list.len() == 1 => {
                consumer.fetch_metadata(Some(&list[0]), REQUEST_TIMEOUT)
            }
            _ => consumer.fetch_metadata(None, REQUEST_TIMEOUT),
        }
        .map_err(|e| self.broker_error("reading topic metadata", e))?;
        let mut out = Vec::new();
        let wanted = |name: &str| match &self.topics {
            Topics::List(list) => list.iter().any(|t| t == name),
            Topics::Pattern(re) => re.is_match(name),
        };
        let mut found = BTreeSet::new();
        for topic in metadata.topics() {
            if !wanted(topic.name()) || topic.error().is_some() || topic.partitions().is_empty() {
                continue;
            }
            found.insert(topic.name().to_string());
            for p in topic.partitions() {
                out.push((topic.name().to_string(), p.id()));
            }
        }
        if let Topics::List(list) = &self.topics
            && let Some(missing) = list.iter().find(|t| !found.contains(*t))
        {
            return Err(Error::input(format!(
                "table '{}': Kafka topic '{missing}' does not exist on the brokers '{}'",
                self.table, self.brokers
            )));
        }
        out.sort();
        Ok(out)
    }

    /// Resolves `position` to an offset of every partition in `parts` (blocking).
    /// `bound`: unlisted specific partitions end at the latest offset instead of
    /// starting at the earliest.
    ///
    /// The earliest offset is [`LOG_START`], not the broker's answer: a read from there
    /// below a trimmed partition's log start is moved up to it by the consumer
    /// (`auto.offset.reset` = `earliest`, set for every mode that starts there). A broker
    /// may answer wrongly: Tansu 0.6 gives the offset of the partition's first *stored*
    /// batch, and two producers writing a partition at once can store offset 1 before
    /// offset 0, which a read from its answer then lost.
    fn resolve(
        &self,
        consumer: &BaseConsumer,
        parts: &[PartitionId],
        position: &Position,
        bound: bool,
    ) -> Result<Vec<i64>> {
        let watermarks = |(t, p): &PartitionId| {
            consumer
                .fetch_watermarks(t, *p, REQUEST_TIMEOUT)
                .map_err(|e| self.broker_error(&format!("reading the offsets of {t}/{p}"), e))
        };
        let list = |f: &dyn Fn(&PartitionId) -> Offset| {
            let mut tpl = TopicPartitionList::new();
            for part in parts {
                tpl.add_partition_offset(&part.0, part.1, f(part))
                    .map_err(|e| self.broker_error("building a partition list", e))?;
            }
            Ok::<_, Error>(tpl)
        };
        let found = |tpl: &TopicPartitionList, part: &PartitionId| {
            tpl.find_partition(&part.0, part.1)
                .map(|e| e.offset())
                .unwrap_or(Offset::Invalid)
        };
        let mut out = Vec::with_capacity(parts.len());
        match position {
            Position::Earliest => out.resize(parts.len(), LOG_START),
            Position::Latest => {
                for part in parts {
                    out.push(watermarks(part)?.1);
                }
            }
            Position::Specific(offsets) => {
                for part in parts {
                    out.push(match offsets.get(&part.1) {
                        Some(o) => *o,
                        None if bound => watermarks(part)?.1,
                        None => LOG_START,
                    });
                }
            }
            Position::Timestamp(ts) => {
                let tpl = list(&|_| Offset::Offset(*ts))?;
                let tpl = consumer
                    .offsets_for_times(tpl, REQUEST_TIMEOUT)
                    .map_err(|e| self.broker_error("looking up offsets by timestamp", e))?;
                for part in parts {
                    out.push(match found(&tpl, part) {
                        Offset::Offset(o) => o,
                        // No message at or after the timestamp: the end.
                        _ => watermarks(part)?.1,
                    });
                }
            }
            Position::GroupOffsets => {
                let tpl = list(&|_| Offset::Invalid)?;
                let tpl = consumer
                    .committed_offsets(tpl, REQUEST_TIMEOUT)
                    .map_err(|e| self.broker_error("reading the group's committed offsets", e))?;
                for part in parts {
                    out.push(match (found(&tpl, part), self.reset_to_earliest) {
                        (Offset::Offset(o), _) => o,
                        (_, Some(true)) => LOG_START,
                        (_, Some(false)) => watermarks(part)?.1,
                        (_, None) => {
                            return Err(Error::input(format!(
                                "table '{}': group '{}' has no committed offset for {}/{} and \
                                 'properties.auto.offset.reset' is 'none'",
                                self.table,
                                self.group_id.as_deref().unwrap_or_default(),
                                part.0,
                                part.1
                            )));
                        }
                    });
                }
            }
        }
        Ok(out)
    }
}

impl SourceFactory for KafkaSourceFactory {
    fn name(&self) -> String {
        let topics = match &self.shared.topics {
            Topics::List(list) => list.join(";"),
            Topics::Pattern(re) => re.as_str().to_string(),
        };
        format!("KafkaSource({topics})")
    }

    fn schema(&self) -> SchemaRef {
        self.shared.decoder.schema.clone()
    }

    fn is_bounded(&self) -> bool {
        self.shared.bounded.is_some()
    }

    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>> {
        let restored = restored
            .map(|state| {
                state
                    .items
                    .into_iter()
                    .map(serde_json::from_value)
                    .collect::<Result<Vec<PartitionState>, _>>()
            })
            .transpose()?;
        Ok(Box::new(KafkaSource {
            shared: self.shared.clone(),
            subtask: task.subtask,
            parallelism: task.parallelism,
            metrics: task.metrics.clone(),
            consumer: None,
            restored,
            parts: BTreeMap::new(),
            next_discovery: None,
            snapshots: BTreeMap::new(),
            announced: BTreeSet::new(),
            ended: BTreeSet::new(),
        }))
    }
}

/// A partition's position in the checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PartitionState {
    topic: String,
    partition: i32,
    /// The next offset to read.
    offset: i64,
    /// Where a bounded read stops (exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stop: Option<i64>,
}

struct Part {
    next: i64,
    stop: Option<i64>,
    /// The broker said there is nothing more (enable.partition.eof) at `next`.
    at_end: bool,
}

impl Part {
    fn finished(&self) -> bool {
        self.stop.is_some_and(|s| self.next >= s || self.at_end)
    }
}

struct KafkaSource {
    shared: Arc<Shared>,
    subtask: usize,
    parallelism: usize,
    metrics: Arc<JobMetrics>,
    consumer: Option<Arc<BaseConsumer>>,
    restored: Option<Vec<PartitionState>>,
    parts: BTreeMap<PartitionId, Part>,
    next_discovery: Option<Instant>,
    /// Positions of checkpoints not yet complete, committed to the group when they are.
    snapshots: BTreeMap<u64, Vec<(PartitionId, i64)>>,
    /// Partitions announced as splits, and those whose end was announced.
    announced: BTreeSet<PartitionId>,
    ended: BTreeSet<PartitionId>,
}

#[async_trait]
impl Source for KafkaSource {
    async fn open(&mut self) -> Result<()> {
        let shared = self.shared.clone();
        let (subtask, parallelism) = (self.subtask, self.parallelism);
        let restored = self.restored.take();
        let (consumer, parts) = blocking(move || {
            let consumer = shared.consumer()?;
            let all = shared.partitions(&consumer)?;
            let mine: Vec<PartitionId> = all
                .into_iter()
                .filter(|(t, p)| owner(t, *p, parallelism) == subtask)
                .collect();
            let mut parts = BTreeMap::new();
            match restored {
                Some(states) => {
                    let known: BTreeMap<PartitionId, PartitionState> = states
                        .into_iter()
                        .map(|s| ((s.topic.clone(), s.partition), s))
                        .collect();
                    // Partitions the checkpoint knows, wherever they are now, and new
                    // ones of this subtask (from their earliest offset).
                    let mut new = Vec::new();
                    for (id, s) in &known {
                        if owner(&id.0, id.1, parallelism) == subtask {
                            parts.insert(id.clone(), (s.offset, s.stop));
                        }
                    }
                    for id in &mine {
                        if !known.contains_key(id) {
                            new.push(id.clone());
                        }
                    }
                    let starts = shared.resolve(&consumer, &new, &Position::Earliest, false)?;
                    let stops = match &shared.bounded {
                        Some(b) => Some(shared.resolve(&consumer, &new, b, true)?),
                        None => None,
                    };
                    for (i, id) in new.into_iter().enumerate() {
                        parts.insert(id, (starts[i], stops.as_ref().map(|s| s[i])));
                    }
                }
                None => {
                    let starts = shared.resolve(&consumer, &mine, &shared.startup, false)?;
                    let stops = match &shared.bounded {
                        Some(b) => Some(shared.resolve(&consumer, &mine, b, true)?),
                        None => None,
                    };
                    for (i, id) in mine.into_iter().enumerate() {
                        parts.insert(id, (starts[i], stops.as_ref().map(|s| s[i])));
                    }
                }
            }
            Ok((consumer, parts))
        })
        .await?;
        for (id, (next, stop)) in parts {
            self.parts.insert(
                id,
                Part {
                    next,
                    stop,
                    at_end: false,
                },
            );
        }
        let consumer = Arc::new(consumer);
        assign(&self.shared, &consumer, &self.parts, false)?;
        self.consumer = Some(consumer);
        if self.shared.bounded.is_none() {
            self.next_discovery = self.shared.discovery.map(|d| Instant::now() + d);
        }
        Ok(())
    }

    async fn poll_next(&mut self) -> Result<SourcePoll> {
        let consumer = self.consumer.clone().expect("opened");
        if self.next_discovery.is_some_and(|at| Instant::now() >= at) {
            self.discover(&consumer).await?;
        }
        // The messages taken, by partition. Messages come in runs from one partition:
        // its id and topic name are made once per run, not once per message.
        let mut by_partition: BTreeMap<PartitionId, Vec<Record>> = BTreeMap::new();
        let mut current: Option<(PartitionId, Arc<str>)> = None;
        let mut taken = 0;
        while taken < MAX_BATCH_MESSAGES {
            let Some(message) = consumer.poll(Duration::ZERO) else {
                break;
            };
            let message = match message {
                Ok(m) => m,
                Err(KafkaError::PartitionEOF(p)) => {
                    // The end of a partition ends a bounded read whose stop offset was the
                    // end when it started (a specific offset may lie beyond it). librdkafka
                    // names the partition number only: it is trusted when one unfinished
                    // partition has that number (else the stop offset decides, which a
                    // trailing transaction marker delays until more records arrive).
                    if matches!(self.shared.bounded, Some(Position::Specific(_))) {
                        continue;
                    }
                    let mut open = self
                        .parts
                        .iter_mut()
                        .filter(|((_, partition), part)| *partition == p && !part.finished());
                    if let (Some((_, part)), None) = (open.next(), open.next()) {
                        part.at_end = true;
                    }
                    continue;
                }
                Err(e) => {
                    return Err(self.shared.broker_error("reading messages", e));
                }
            };
            let (topic, partition) = (message.topic(), message.partition());
            if !current
                .as_ref()
                .is_some_and(|((t, p), _)| *p == partition && t == topic)
            {
                current = Some(((topic.to_string(), partition), Arc::from(topic)));
            }
            let (id, topic) = current.as_ref().expect("set above");
            let Some(part) = self.parts.get_mut(id) else {
                continue;
            };
            if message.offset() < part.next || part.finished() {
                continue;
            }
            part.at_end = false;
            if part.stop.is_some_and(|s| message.offset() >= s) {
                part.next = part.stop.unwrap_or_default();
                continue;
            }
            part.next = message.offset() + 1;
            let (timestamp, timestamp_type) = match message.timestamp() {
                Timestamp::NotAvailable => (None, "NoTimestampType"),
                Timestamp::CreateTime(t) => (Some(t), "CreateTime"),
                Timestamp::LogAppendTime(t) => (Some(t), "LogAppendTime"),
            };
            let record = Record {
                topic: topic.clone(),
                partition,
                offset: message.offset(),
                timestamp,
                timestamp_type,
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec),
                headers: message.headers().map_or_else(Vec::new, |headers| {
                    headers
                        .iter()
                        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                }),
            };
            match by_partition.get_mut(id) {
                Some(records) => records.push(record),
                None => {
                    by_partition.insert(id.clone(), vec![record]);
                }
            }
            taken += 1;
        }
        // Each partition is a split with its own watermark: announced when it is first
        // read, its batches apart, and its end when a bounded read reaches it.
        let split = |(topic, partition): &PartitionId| -> SplitId {
            Arc::from(format!("{topic}/{partition}"))
        };
        let added: Vec<SplitId> = self
            .parts
            .keys()
            .filter(|id| self.announced.insert((*id).clone()))
            .map(split)
            .collect();
        let finished: Vec<SplitId> = self
            .parts
            .iter()
            .filter(|(id, part)| part.finished() && self.ended.insert((*id).clone()))
            .map(|(id, _)| split(id))
            .collect();
        if taken == 0 && added.is_empty() && finished.is_empty() {
            if self.shared.bounded.is_some() && self.parts.values().all(Part::finished) {
                return Ok(SourcePoll::Finished);
            }
            return Ok(SourcePoll::Idle(IDLE_WAIT));
        }
        let mut batches = Vec::with_capacity(by_partition.len());
        for (id, records) in by_partition {
            let (batch, skipped) = self.shared.decoder.decode(&records)?;
            if skipped > 0 {
                self.metrics.count_records_in_errors(skipped);
            }
            // Tombstones or skipped records only: the position moved, nothing to emit.
            if batch.num_rows() > 0 {
                batches.push((split(&id), batch));
            }
        }
        Ok(SourcePoll::Splits {
            added,
            batches,
            finished,
        })
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        let mut items = Vec::with_capacity(self.parts.len());
        let mut positions = Vec::with_capacity(self.parts.len());
        for ((topic, partition), part) in &self.parts {
            items.push(serde_json::to_value(PartitionState {
                topic: topic.clone(),
                partition: *partition,
                offset: part.next,
                stop: part.stop,
            })?);
            positions.push(((topic.clone(), *partition), part.next));
        }
        if self.shared.group_id.is_some() {
            self.snapshots.insert(checkpoint.0, positions);
        }
        // Unopened (restored but not yet started): keep what the checkpoint had.
        if let Some(restored) = &self.restored {
            for s in restored {
                if owner(&s.topic, s.partition, self.parallelism) == self.subtask {
                    items.push(serde_json::to_value(s)?);
                }
            }
        }
        Ok(OperatorState::new(StateDistribution::Union, items))
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let Some(consumer) = &self.consumer else {
            return Ok(());
        };
        let Some(positions) = self.snapshots.remove(&checkpoint.0) else {
            return Ok(());
        };
        self.snapshots.retain(|id, _| *id > checkpoint.0);
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in positions {
            tpl.add_partition_offset(&topic, partition, Offset::Offset(offset))
                .map_err(|e| self.shared.broker_error("building a partition list", e))?;
        }
        // For monitoring only: a failed commit is logged, never fatal.
        if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
            tracing::warn!(
                "table '{}': committing offsets of checkpoint {} to the group failed: {e}",
                self.shared.table,
                checkpoint.0
            );
        }
        Ok(())
    }
}

/// Assigns `parts` (their next offsets) to the consumer; `incremental` adds them to what
/// is assigned already.
fn assign(
    shared: &Shared,
    consumer: &BaseConsumer,
    parts: &BTreeMap<PartitionId, Part>,
    incremental: bool,
) -> Result<()> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), part) in parts {
        if !part.finished() {
            tpl.add_partition_offset(topic, *partition, Offset::Offset(part.next))
                .map_err(|e| shared.broker_error("building a partition list", e))?;
        }
    }
    let assigned = if incremental {
        consumer.incremental_assign(&tpl)
    } else {
        consumer.assign(&tpl)
    };
    assigned.map_err(|e| shared.broker_error("assigning partitions", e))
}

impl KafkaSource {
    /// Adds partitions that appeared since the last look (from their earliest offset).
    async fn discover(&mut self, consumer: &Arc<BaseConsumer>) -> Result<()> {
        let shared = self.shared.clone();
        let c = consumer.clone();
        let known: BTreeSet<PartitionId> = self.parts.keys().cloned().collect();
        let (subtask, parallelism) = (self.subtask, self.parallelism);
        let found = blocking(move || {
            let new: Vec<PartitionId> = shared
                .partitions(&c)?
                .into_iter()
                .filter(|(t, p)| owner(t, *p, parallelism) == subtask)
                .filter(|id| !known.contains(id))
                .collect();
            let starts = shared.resolve(&c, &new, &Position::Earliest, false)?;
            Ok(new.into_iter().zip(starts).collect::<Vec<_>>())
        })
        .await?;
        self.next_discovery = self.shared.discovery.map(|d| Instant::now() + d);
        if found.is_empty() {
            return Ok(());
        }
        let new: BTreeMap<PartitionId, Part> = found
            .into_iter()
            .map(|(id, next)| {
                tracing::info!(
                    "table '{}': reading new partition {}/{} from offset {next}",
                    self.shared.table,
                    id.0,
                    id.1
                );
                (
                    id,
                    Part {
                        next,
                        stop: None,
                        at_end: false,
                    },
                )
            })
            .collect();
        assign(&self.shared, consumer, &new, true)?;
        self.parts.extend(new);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_has_one_owner_spread_over_subtasks() {
        for p in 1..5 {
            let owners: BTreeSet<usize> = (0..p as i32).map(|i| owner("orders", i, p)).collect();
            assert_eq!(owners.len(), p, "{p} partitions over {p} subtasks");
        }
    }
}
