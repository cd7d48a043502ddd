//! Runtime scenarios with lifecycle validators in the manner of Flink's: operators record
//! every lifecycle call, and the recorded histories are checked against the FLIP-147 rules.

use crate::checkpoint::{OperatorState, StateDistribution, SubtaskStatus};
use crate::graph::{JobGraph, Partitioning, Vertex};
use crate::job::{JobOptions, RestoreFrom, start};
use crate::message::Message;
use crate::operator::{Operator, OperatorFactory, Output, TaskInfo};
use crate::source::{Source, SourceFactory, SourcePoll};
use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_common::{CheckpointId, MAX_WATERMARK, Result};

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Open,
    Batch,
    Watermark(i64),
    Prepare(u64),
    Snapshot(u64),
    Complete(u64),
    Aborted(u64),
    EndInput(usize),
    Finish,
    Close,
}

type Log = Arc<Mutex<Vec<(String, Event)>>>;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
}

/// Emits `0..rows` (or forever when `rows` is `None`) in batches of 10, 1 ms apart; one
/// split per subtask of the first run (values `subtask, subtask + P, …`), checkpointed as
/// `[next, step]`. `short_subtask0` makes subtask 0 of a fresh start stop after that many
/// batches.
struct CountingSourceFactory {
    rows: Option<i64>,
    short_subtask0: Option<usize>,
}

impl CountingSourceFactory {
    fn new(rows: Option<i64>) -> Self {
        Self {
            rows,
            short_subtask0: None,
        }
    }
}

struct CountingSource {
    split: Option<(i64, i64)>,
    end: Option<i64>,
    batches_left: Option<usize>,
    idle: bool,
}

impl SourceFactory for CountingSourceFactory {
    fn name(&self) -> String {
        "counting".into()
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn is_bounded(&self) -> bool {
        self.rows.is_some()
    }
    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>> {
        let split = match restored {
            Some(s) => s
                .items
                .first()
                .map(|v| (v[0].as_i64().unwrap(), v[1].as_i64().unwrap())),
            None => Some((task.subtask as i64, task.parallelism as i64)),
        };
        let batches_left = self.short_subtask0.filter(|_| task.subtask == 0);
        Ok(Box::new(CountingSource {
            split,
            end: self.rows,
            batches_left,
            idle: false,
        }))
    }
}

#[async_trait]
impl Source for CountingSource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        let Some((next, step)) = self.split else {
            return Ok(SourcePoll::Finished);
        };
        if self.end.is_some_and(|e| next >= e) || self.batches_left == Some(0) {
            return Ok(SourcePoll::Finished);
        }
        self.idle = !self.idle;
        if self.idle {
            return Ok(SourcePoll::Idle(Duration::from_millis(1)));
        }
        let values: Vec<i64> = (0..10)
            .map(|i| next + i * step)
            .filter(|v| self.end.is_none_or(|e| *v < e))
            .collect();
        self.split = Some((next + 10 * step, step));
        if let Some(n) = self.batches_left.as_mut() {
            *n -= 1;
        }
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(values))])?;
        Ok(SourcePoll::Batch(batch))
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let items = self
            .split
            .map(|(n, s)| serde_json::json!([n, s]))
            .into_iter()
            .collect();
        Ok(OperatorState::new(StateDistribution::RoundRobin, items))
    }
}

/// Passes batches on and records its lifecycle; `collect` keeps the values it saw.
struct Recorder {
    name: String,
    log: Log,
    collect: Option<Arc<Mutex<Vec<i64>>>>,
}

impl Recorder {
    fn record(&self, e: Event) {
        self.log.lock().unwrap().push((self.name.clone(), e));
    }
}

#[async_trait]
impl Operator for Recorder {
    async fn open(&mut self, _: Option<OperatorState>) -> Result<()> {
        self.record(Event::Open);
        Ok(())
    }
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        self.record(Event::Batch);
        if let Some(c) = &self.collect {
            c.lock()
                .unwrap()
                .extend(batch.column(0).as_primitive::<Int64Type>().values().iter());
        }
        out.emit(batch);
        Ok(())
    }
    async fn process_watermark(&mut self, w: i64, out: &mut Output) -> Result<()> {
        self.record(Event::Watermark(w));
        out.emit_watermark(w);
        Ok(())
    }
    async fn prepare_snapshot_pre_barrier(
        &mut self,
        id: CheckpointId,
        _: &mut Output,
    ) -> Result<()> {
        self.record(Event::Prepare(id.0));
        Ok(())
    }
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<OperatorState> {
        self.record(Event::Snapshot(id.0));
        Ok(OperatorState::default())
    }
    async fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<()> {
        self.record(Event::Complete(id.0));
        Ok(())
    }
    async fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<()> {
        self.record(Event::Aborted(id.0));
        Ok(())
    }
    async fn end_input(&mut self, input: usize, _: &mut Output) -> Result<()> {
        self.record(Event::EndInput(input));
        Ok(())
    }
    async fn finish(&mut self, _: &mut Output) -> Result<()> {
        self.record(Event::Finish);
        Ok(())
    }
    async fn close(&mut self) -> Result<()> {
        self.record(Event::Close);
        Ok(())
    }
}

struct RecorderFactory {
    name: String,
    log: Log,
    collect: Option<Arc<Mutex<Vec<i64>>>>,
}

impl OperatorFactory for RecorderFactory {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(Recorder {
            name: format!("{}#{}", self.name, task.subtask),
            log: self.log.clone(),
            collect: self.collect.clone(),
        }))
    }
}

fn recorder(
    name: &str,
    log: &Log,
    collect: Option<Arc<Mutex<Vec<i64>>>>,
) -> Arc<dyn OperatorFactory> {
    Arc::new(RecorderFactory {
        name: name.into(),
        log: log.clone(),
        collect,
    })
}

fn histories(log: &Log) -> std::collections::BTreeMap<String, Vec<Event>> {
    let mut h: std::collections::BTreeMap<String, Vec<Event>> = Default::default();
    for (who, e) in log.lock().unwrap().iter() {
        h.entry(who.clone()).or_default().push(e.clone());
    }
    h
}

/// The FLIP-147 lifecycle rules, checked on every operator's history.
fn validate(log: &Log, drained: bool) -> Vec<u64> {
    let mut final_snapshots = Vec::new();
    for (who, events) in histories(log) {
        assert_eq!(
            events.first(),
            Some(&Event::Open),
            "{who}: first call is open"
        );
        assert_eq!(
            events.last(),
            Some(&Event::Close),
            "{who}: last call is close"
        );
        assert_eq!(
            events.iter().filter(|e| **e == Event::Close).count(),
            1,
            "{who}: one close"
        );
        let finish = events.iter().position(|e| *e == Event::Finish);
        if drained {
            let finish = finish.unwrap_or_else(|| panic!("{who}: never finished: {events:?}"));
            // After finish(): checkpoint events only, then close.
            for e in &events[finish + 1..] {
                assert!(
                    matches!(
                        e,
                        Event::Prepare(_)
                            | Event::Snapshot(_)
                            | Event::Complete(_)
                            | Event::Aborted(_)
                            | Event::Close
                    ),
                    "{who}: {e:?} after finish: {events:?}"
                );
            }
            // MAX watermark exactly once, before the end of the last input (operators see
            // the combined watermark, which reaches MAX when the last input does).
            let max_at: Vec<_> = events
                .iter()
                .enumerate()
                .filter(|(_, e)| **e == Event::Watermark(MAX_WATERMARK))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(
                max_at.len(),
                1,
                "{who}: MAX watermark {} times",
                max_at.len()
            );
            let end_input = events
                .iter()
                .rposition(|e| matches!(e, Event::EndInput(_)))
                .expect("end_input");
            assert!(
                max_at[0] < end_input,
                "{who}: MAX watermark after the last end_input"
            );
        } else {
            assert!(
                finish.is_none(),
                "{who}: finished although stopped without drain"
            );
        }
        // A checkpoint snapshotted after finishing (or stopping) completes before close.
        let after = finish.unwrap_or(0);
        let snapshot = events[after..].iter().find_map(|e| {
            if let Event::Snapshot(id) = e {
                Some(*id)
            } else {
                None
            }
        });
        let snapshot =
            snapshot.unwrap_or_else(|| panic!("{who}: no checkpoint after finishing: {events:?}"));
        let close = events.len() - 1;
        assert!(
            events[after..close]
                .iter()
                .any(|e| matches!(e, Event::Complete(id) if *id >= snapshot)),
            "{who}: closed before its final checkpoint {snapshot} completed: {events:?}"
        );
        let last_snapshot = events.iter().rev().find_map(|e| {
            if let Event::Snapshot(id) = e {
                Some(*id)
            } else {
                None
            }
        });
        final_snapshots.push(last_snapshot.unwrap());
    }
    final_snapshots
}

fn vertex(
    uid: &str,
    p: usize,
    source: Option<Arc<dyn SourceFactory>>,
    ops: Vec<Arc<dyn OperatorFactory>>,
) -> Vertex {
    Vertex {
        uid: uid.into(),
        name: uid.into(),
        parallelism: p,
        source,
        operators: ops,
    }
}

/// 500 rows from two source subtasks, hash-exchanged to three keyed subtasks whose sink
/// collects them; every operator records its lifecycle in `log`.
fn lifecycle_graph(log: &Log, collected: &Arc<Mutex<Vec<i64>>>) -> JobGraph {
    let mut g = JobGraph::default();
    let src = g.add_vertex(vertex(
        "src",
        2,
        Some(Arc::new(CountingSourceFactory::new(Some(500)))),
        vec![recorder("map", log, None)],
    ));
    let agg = g.add_vertex(vertex(
        "keyed",
        3,
        None,
        vec![
            recorder("keyed", log, None),
            recorder("sink", log, Some(collected.clone())),
        ],
    ));
    g.connect(src, agg, Partitioning::Hash(vec![0]), 0);
    g
}

/// Waits for the lifecycle job and checks its lifecycle and rows.
async fn assert_lifecycle(job: crate::JobHandle, log: &Log, collected: &Arc<Mutex<Vec<i64>>>) {
    tokio::time::timeout(Duration::from_secs(30), job.wait())
        .await
        .expect("job hangs")
        .unwrap();
    validate(log, true);
    let mut v = collected.lock().unwrap().clone();
    v.sort();
    assert_eq!(v, (0..500).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_job_follows_the_lifecycle_and_shares_one_final_checkpoint() {
    let log: Log = Default::default();
    let collected = Arc::new(Mutex::new(Vec::new()));
    let opts = JobOptions {
        checkpoint_interval: Some(Duration::from_millis(20)),
        ..Default::default()
    };
    let job = start(lifecycle_graph(&log, &collected), opts)
        .await
        .unwrap();
    assert_lifecycle(job, &log, &collected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_and_unbounded_sources_into_a_two_input_operator_stop_with_drain() {
    let log: Log = Default::default();
    let mut g = JobGraph::default();
    let bounded = g.add_vertex(vertex(
        "bounded",
        1,
        Some(Arc::new(CountingSourceFactory::new(Some(100)))),
        vec![],
    ));
    let unbounded = g.add_vertex(vertex(
        "unbounded",
        2,
        Some(Arc::new(CountingSourceFactory::new(None))),
        vec![],
    ));
    let two = g.add_vertex(vertex(
        "two-input",
        2,
        None,
        vec![recorder("two-input", &log, None)],
    ));
    g.connect(bounded, two, Partitioning::Rebalance, 0);
    g.connect(unbounded, two, Partitioning::Forward, 1);
    let dir = tempfile::tempdir().unwrap();
    let opts = JobOptions {
        checkpoint_interval: Some(Duration::from_millis(30)),
        checkpoint_dir: Some(dir.path().join("chk").to_string_lossy().into()),
        ..Default::default()
    };
    let job = start(g, opts).await.unwrap();
    // The bounded source finishes early; checkpoints go on with a finished task.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        job.metrics.checkpoints_completed() >= 3,
        "checkpoints stopped after a task finished"
    );
    let before = histories(&log);
    assert!(
        before.values().all(|h| !h.contains(&Event::Finish)),
        "the two-input operator finished with one input running"
    );
    let savepoint = job
        .stop_with_savepoint(true, dir.path().join("sp").to_str().unwrap())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), job.wait())
        .await
        .expect("job hangs")
        .unwrap();
    let finals = validate(&log, true);
    assert!(
        finals.windows(2).all(|w| w[0] == w[1]),
        "tasks finished on different savepoints: {finals:?}"
    );
    let meta = crate::storage::RestoredCheckpoint::open(&savepoint)
        .await
        .unwrap()
        .metadata;
    assert!(meta.savepoint);
    assert_eq!(meta.checkpoint_id.0, finals[0]);
    assert!(
        meta.vertices.iter().all(|v| v.fully_finished()),
        "a drained savepoint has only finished operators"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_without_drain_resumes_exactly_at_another_parallelism() {
    let log: Log = Default::default();
    let collected = Arc::new(Mutex::new(Vec::new()));
    let build = |p: usize, log: &Log| {
        let mut g = JobGraph::default();
        let src = g.add_vertex(vertex(
            "src",
            2,
            Some(Arc::new(CountingSourceFactory::new(Some(3000)))),
            vec![],
        ));
        let sink = g.add_vertex(vertex(
            "sink",
            p,
            None,
            vec![recorder("sink", log, Some(collected.clone()))],
        ));
        g.connect(src, sink, Partitioning::Rebalance, 0);
        g
    };
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk").to_string_lossy().to_string();
    let opts = JobOptions {
        checkpoint_dir: Some(chk.clone()),
        ..Default::default()
    };
    let job = start(build(2, &log), opts.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let savepoint = job
        .stop_with_savepoint(false, dir.path().join("sp").to_str().unwrap())
        .await
        .unwrap();
    job.wait().await.unwrap();
    let finals = validate(&log, false);
    assert!(finals.windows(2).all(|w| w[0] == w[1]));
    let first = collected.lock().unwrap().len();
    assert!(first > 0 && first < 3000, "stopped after {first} rows");

    let log2: Log = Default::default();
    let opts = JobOptions {
        restore: Some(RestoreFrom::Path(savepoint)),
        ..opts
    };
    let job = start(build(3, &log2), opts).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), job.wait())
        .await
        .expect("job hangs")
        .unwrap();
    validate(&log2, true);
    let mut v = collected.lock().unwrap().clone();
    v.sort();
    assert_eq!(
        v,
        (0..3000).collect::<Vec<_>>(),
        "rows lost or repeated across the savepoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_finishing_while_checkpoints_are_triggered_never_hang() {
    // Checkpoints every millisecond race with tasks finishing and closing: triggers reach
    // tasks that just closed, which must decline that checkpoint and let the next succeed.
    for round in 0..15 {
        let log: Log = Default::default();
        let mut g = JobGraph::default();
        let src = g.add_vertex(vertex(
            "src",
            2,
            Some(Arc::new(CountingSourceFactory::new(Some(40 + round)))),
            vec![recorder("a", &log, None)],
        ));
        let b = g.add_vertex(vertex("b", 2, None, vec![recorder("b", &log, None)]));
        g.connect(src, b, Partitioning::Rebalance, 0);
        let opts = JobOptions {
            checkpoint_interval: Some(Duration::from_millis(1)),
            ..Default::default()
        };
        let job = start(g, opts).await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), job.wait())
            .await
            .expect("job hangs")
            .unwrap();
        validate(&log, true);
    }
}

/// A transactional test sink: rows become visible ("committed") only when the checkpoint
/// that pre-committed them completes; commits are idempotent by transaction id.
struct CommitSink {
    buffer: Vec<i64>,
    pending: Vec<(u64, String, Vec<i64>)>,
    committed: Arc<Mutex<std::collections::BTreeMap<String, Vec<i64>>>>,
}

#[async_trait]
impl Operator for CommitSink {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        for item in restored.map(|s| s.items).unwrap_or_default() {
            let id = item["id"].as_str().unwrap().to_string();
            let values = item["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            self.committed.lock().unwrap().entry(id).or_insert(values);
        }
        Ok(())
    }
    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        self.buffer
            .extend(batch.column(0).as_primitive::<Int64Type>().values().iter());
        Ok(())
    }
    async fn prepare_snapshot_pre_barrier(
        &mut self,
        id: CheckpointId,
        _: &mut Output,
    ) -> Result<()> {
        let txn = uuid::Uuid::new_v4().to_string();
        self.pending
            .push((id.0, txn, std::mem::take(&mut self.buffer)));
        Ok(())
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let items = self
            .pending
            .iter()
            .map(|(_, id, v)| serde_json::json!({"id": id, "values": v}))
            .collect();
        Ok(OperatorState::new(StateDistribution::ToFirst, items))
    }
    async fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<()> {
        let mut committed = self.committed.lock().unwrap();
        self.pending.retain(|(c, txn, values)| {
            if *c <= id.0 {
                committed
                    .entry(txn.clone())
                    .or_insert_with(|| values.clone());
                false
            } else {
                true
            }
        });
        Ok(())
    }
}

struct CommitSinkFactory(Arc<Mutex<std::collections::BTreeMap<String, Vec<i64>>>>);

impl OperatorFactory for CommitSinkFactory {
    fn name(&self) -> String {
        "commit-sink".into()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CommitSink {
            buffer: Vec::new(),
            pending: Vec::new(),
            committed: self.0.clone(),
        }))
    }
    fn is_sink(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_tasks_finished_restores_at_another_parallelism_exactly_once() {
    let committed = Arc::new(Mutex::new(std::collections::BTreeMap::new()));
    let build = |p: usize| {
        let mut g = JobGraph::default();
        let bounded = g.add_vertex(vertex(
            "bounded",
            1,
            Some(Arc::new(CountingSourceFactory::new(Some(100)))),
            vec![],
        ));
        let long = g.add_vertex(vertex(
            "long",
            p,
            Some(Arc::new(CountingSourceFactory::new(Some(6000)))),
            vec![],
        ));
        let sink = g.add_vertex(vertex(
            "sink",
            p,
            None,
            vec![Arc::new(CommitSinkFactory(committed.clone()))],
        ));
        g.connect(bounded, sink, Partitioning::Rebalance, 0);
        g.connect(long, sink, Partitioning::Rebalance, 0);
        g
    };
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk").to_string_lossy().to_string();
    let opts = JobOptions {
        checkpoint_interval: Some(Duration::from_millis(25)),
        checkpoint_dir: Some(chk.clone()),
        ..Default::default()
    };
    let job = start(build(2), opts.clone()).await.unwrap();
    // Wait for a checkpoint that records the bounded source as finished, then fail.
    let started = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Some(c) = crate::storage::RestoredCheckpoint::latest(&chk)
            .await
            .unwrap()
            && c.metadata
                .vertex("bounded")
                .is_some_and(|v| v.fully_finished())
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no checkpoint with a finished task"
        );
    }
    job.cancel();
    let _ = job.wait().await;
    let before: usize = committed.lock().unwrap().values().map(|v| v.len()).sum();
    assert!(before < 6100, "the job ended before the failure");

    let opts = JobOptions {
        restore: Some(RestoreFrom::Latest),
        ..opts
    };
    let job = start(build(3), opts).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), job.wait())
        .await
        .expect("job hangs")
        .unwrap();
    let mut all: Vec<i64> = committed
        .lock()
        .unwrap()
        .values()
        .flatten()
        .copied()
        .collect();
    all.sort();
    let mut expected: Vec<i64> = (0..100).chain(0..6000).collect();
    expected.sort();
    assert_eq!(all.len(), expected.len(), "rows lost or committed twice");
    assert_eq!(all, expected);
}

/// An operator that keeps union list state.
struct UnionStateOperator;

#[async_trait]
impl Operator for UnionStateOperator {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        out.emit(batch);
        Ok(())
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        Ok(OperatorState::new(
            StateDistribution::Union,
            vec![serde_json::json!("shared")],
        ))
    }
}

struct UnionStateFactory;

impl OperatorFactory for UnionStateFactory {
    fn name(&self) -> String {
        "union-state".into()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(UnionStateOperator))
    }
}

/// An operator with union list state whose subtask 0 finishes early: checkpoints go on
/// completing, and each holds the finished subtask's share (it stays open, as
/// `FinishedData`, until the whole operator has finished), so a restore at any
/// parallelism sees every item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn union_state_of_a_partly_finished_operator_stays_in_later_checkpoints() {
    let mut g = JobGraph::default();
    let src = CountingSourceFactory {
        rows: None,
        short_subtask0: Some(3),
    };
    g.add_vertex(vertex(
        "src",
        2,
        Some(Arc::new(src)),
        vec![Arc::new(UnionStateFactory)],
    ));
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let opts = JobOptions {
        checkpoint_interval: Some(Duration::from_millis(20)),
        checkpoint_dir: Some(chk.to_string_lossy().into()),
        ..Default::default()
    };
    let job = start(g, opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_finish = job.metrics.checkpoints_completed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        job.metrics.checkpoints_completed() > after_finish,
        "checkpoints stopped completing once part of the operator finished"
    );
    let latest = crate::storage::RestoredCheckpoint::latest(chk.to_str().unwrap())
        .await
        .unwrap()
        .expect("a completed checkpoint");
    let vertex = &latest.metadata.vertices[0];
    let statuses: Vec<_> = vertex.subtasks.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [SubtaskStatus::FinishedData, SubtaskStatus::Running],
        "the finished subtask must still store its state"
    );
    for entry in &vertex.subtasks {
        let snapshot = latest.read_task_state(entry, None).await.unwrap().unwrap();
        assert_eq!(snapshot.operators[0].items.len(), 1, "{entry:?}");
    }
    // Draining finishes every subtask: the savepoint succeeds and the job ends.
    job.stop_with_savepoint(true, dir.path().join("sp").to_str().unwrap())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), job.wait())
        .await
        .expect("job hangs")
        .unwrap();
}

/// Asks for a checkpoint on its first batch.
struct RequestingOperator {
    task: TaskInfo,
    asked: bool,
}

#[async_trait]
impl Operator for RequestingOperator {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        if !self.asked {
            self.task.request_checkpoint();
            self.asked = true;
        }
        out.emit(batch);
        Ok(())
    }
}

struct RequestingFactory;

impl OperatorFactory for RequestingFactory {
    fn name(&self) -> String {
        "requesting".into()
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(RequestingOperator {
            task: task.clone(),
            asked: false,
        }))
    }
}

/// An operator may ask for a checkpoint before the interval is up (the Kafka sink does
/// when its uncommitted output grows): one is taken at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_can_ask_for_an_early_checkpoint() {
    let opts = JobOptions {
        checkpoint_interval: Some(Duration::from_secs(3600)),
        ..Default::default()
    };
    let job = start(requesting_graph(), opts).await.unwrap();
    assert_early_checkpoint(job).await;
}

/// An unbounded source into an operator that asks for a checkpoint on its first batch.
fn requesting_graph() -> JobGraph {
    let mut g = JobGraph::default();
    let src = CountingSourceFactory {
        rows: None,
        short_subtask0: None,
    };
    g.add_vertex(vertex(
        "src",
        1,
        Some(Arc::new(src)),
        vec![Arc::new(RequestingFactory)],
    ));
    g
}

/// A checkpoint completes well before the interval (1 h) is up; then the job is cancelled.
async fn assert_early_checkpoint(job: crate::JobHandle) {
    let started = std::time::Instant::now();
    while job.metrics.checkpoints_completed() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no checkpoint within 10 s of the request (interval: 1 h)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    job.cancel();
}

/// A source that always has a batch ready: it never waits for anything.
struct BusySourceFactory;

struct BusySource(i64);

impl SourceFactory for BusySourceFactory {
    fn name(&self) -> String {
        "busy".into()
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn is_bounded(&self) -> bool {
        false
    }
    fn create(&self, _: &TaskInfo, _: Option<OperatorState>) -> Result<Box<dyn Source>> {
        Ok(Box::new(BusySource(0)))
    }
}

#[async_trait]
impl Source for BusySource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        self.0 += 1;
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(vec![self.0]))])?;
        Ok(SourcePoll::Batch(batch))
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        Ok(OperatorState::new(
            StateDistribution::RoundRobin,
            vec![serde_json::json!(self.0)],
        ))
    }
}

/// A source that always has data gives its worker thread back between batches: on a
/// runtime with a single worker, the checkpoint coordinator still runs on time. (Watched
/// from a plain thread, so that a regression fails here rather than hanging.)
#[test]
fn a_busy_source_does_not_starve_the_checkpoint_coordinator() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let completed = Arc::new(Mutex::new(None));
    let seen = completed.clone();
    rt.spawn(async move {
        let mut g = JobGraph::default();
        g.add_vertex(vertex("busy", 1, Some(Arc::new(BusySourceFactory)), vec![]));
        let opts = JobOptions {
            checkpoint_interval: Some(Duration::from_millis(50)),
            ..Default::default()
        };
        let job = start(g, opts).await.unwrap();
        *seen.lock().unwrap() = Some(job.metrics.clone());
        std::future::pending::<()>().await;
        drop(job);
    });
    let started = std::time::Instant::now();
    let count = || {
        completed
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |m| m.checkpoints_completed())
    };
    while count() < 3 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let n = count();
    rt.shutdown_background();
    assert!(n >= 3, "{n} checkpoints in 10 s at a 50 ms interval");
}

/// Emits, after each batch, the batch's largest value as a watermark.
struct ValueWatermarks;

#[async_trait]
impl Operator for ValueWatermarks {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        let max = arrow::compute::max(batch.column(0).as_primitive::<Int64Type>());
        out.emit(batch);
        if let Some(m) = max {
            out.emit_watermark(m);
        }
        Ok(())
    }
}

impl OperatorFactory for ValueWatermarks {
    fn name(&self) -> String {
        "value-watermarks".into()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ValueWatermarks))
    }
}

/// Emits nothing for `silent_for`, then a batch `0..10` (far behind the other source)
/// every 10 ms, too often to go idle again; at its first batch it notes the length of
/// `log` in `sent_at`.
struct LateSourceFactory {
    silent_for: Duration,
    log: Log,
    sent_at: Arc<Mutex<Option<usize>>>,
}

struct LateSource {
    wake: tokio::time::Instant,
    log: Log,
    sent_at: Arc<Mutex<Option<usize>>>,
    pause: bool,
}

impl SourceFactory for LateSourceFactory {
    fn name(&self) -> String {
        "late".into()
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn is_bounded(&self) -> bool {
        false
    }
    fn create(&self, _: &TaskInfo, _: Option<OperatorState>) -> Result<Box<dyn Source>> {
        Ok(Box::new(LateSource {
            wake: tokio::time::Instant::now() + self.silent_for,
            log: self.log.clone(),
            sent_at: self.sent_at.clone(),
            pause: false,
        }))
    }
}

#[async_trait]
impl Source for LateSource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        self.pause = !self.pause;
        if self.pause || tokio::time::Instant::now() < self.wake {
            return Ok(SourcePoll::Idle(Duration::from_millis(10)));
        }
        let mut sent = self.sent_at.lock().unwrap();
        if sent.is_none() {
            *sent = Some(self.log.lock().unwrap().len());
        }
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from_iter(0..10))])?;
        Ok(SourcePoll::Batch(batch))
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        Ok(OperatorState::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sources_do_not_hold_back_watermarks() {
    for timeout in [None, Some(Duration::from_millis(50))] {
        let log: Log = Default::default();
        let sent_at = Arc::new(Mutex::new(None));
        let mut g = JobGraph::default();
        let busy = g.add_vertex(vertex(
            "busy",
            1,
            Some(Arc::new(CountingSourceFactory::new(None))),
            vec![Arc::new(ValueWatermarks)],
        ));
        let late = g.add_vertex(vertex(
            "late",
            1,
            Some(Arc::new(LateSourceFactory {
                silent_for: Duration::from_millis(300),
                log: log.clone(),
                sent_at: sent_at.clone(),
            })),
            vec![Arc::new(ValueWatermarks)],
        ));
        let merge = g.add_vertex(vertex(
            "merge",
            1,
            None,
            vec![recorder("merge", &log, None)],
        ));
        g.connect(busy, merge, Partitioning::Rebalance, 0);
        g.connect(late, merge, Partitioning::Rebalance, 0);
        let dir = tempfile::tempdir().unwrap();
        let opts = JobOptions {
            checkpoint_interval: Some(Duration::from_millis(50)),
            source_idle_timeout: timeout,
            ..Default::default()
        };
        let job = start(g, opts).await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        // Draining ends every input with the MAX watermark: look at what came before.
        let running = log.lock().unwrap().len();
        job.stop_with_savepoint(true, dir.path().to_str().unwrap())
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(30), job.wait())
            .await
            .expect("job hangs")
            .unwrap();
        validate(&log, true);
        let sent_at = sent_at
            .lock()
            .unwrap()
            .expect("the late source sent its batch");
        let watermarks = |from: usize| -> Vec<i64> {
            log.lock().unwrap()[from..running]
                .iter()
                .filter_map(|(_, e)| match e {
                    Event::Watermark(w) => Some(*w),
                    _ => None,
                })
                .collect()
        };
        let all = watermarks(0);
        assert!(
            all.windows(2).all(|w| w[0] < w[1]),
            "watermarks went back: {all:?}"
        );
        match timeout {
            // The silent source holds the watermark at MIN, then at its own 9.
            None => assert_eq!(all, vec![9]),
            Some(_) => {
                // The idle source is left out; back with batches far behind, it neither
                // pulls the watermark back nor holds it (it is not aligned, as in Flink).
                assert!(all.len() > 10 && all[0] > 9, "watermarks: {all:?}");
                let after = watermarks(sent_at);
                assert!(
                    after.len() > 5,
                    "the watermark stopped after the late batch"
                );
            }
        }
    }
}

/// A cluster inside this process, for tests of attempts placed on workers: `workers`
/// workers of one slot each. Each part runs [`crate::remote::run_part`] on a graph that
/// `build` makes again (as a worker compiles the job), and its channels to other workers
/// are joined in memory.
struct Loopback {
    workers: usize,
    build: Arc<dyn Fn() -> JobGraph + Send + Sync>,
    opts: JobOptions,
    channels: Arc<LoopbackChannels>,
}

type LoopbackChannels = crate::remote::Rendezvous<
    (uuid::Uuid, crate::remote::ChannelId),
    tokio::sync::mpsc::Sender<Message>,
>;

struct LoopbackTransport {
    attempt: uuid::Uuid,
    channels: Arc<LoopbackChannels>,
}

impl crate::remote::Transport for LoopbackTransport {
    fn outgoing(
        &self,
        channel: crate::remote::ChannelId,
        _: usize,
        mut messages: tokio::sync::mpsc::Receiver<Message>,
    ) {
        let (channels, key) = (self.channels.clone(), (self.attempt, channel));
        tokio::spawn(async move {
            let Some(tx) = channels.take(&key, Duration::from_secs(60)).await else {
                return;
            };
            while let Some(m) = messages.recv().await {
                if tx.send(m).await.is_err() {
                    break;
                }
            }
        });
    }

    fn incoming(
        &self,
        channel: crate::remote::ChannelId,
        messages: tokio::sync::mpsc::Sender<Message>,
    ) {
        self.channels.register((self.attempt, channel), messages);
    }
}

impl crate::remote::Cluster for Loopback {
    fn place(&self, vertices: &[(String, usize)]) -> Result<crate::remote::Placement> {
        let parallelism: Vec<usize> = vertices.iter().map(|v| v.1).collect();
        Ok(crate::remote::Placement {
            workers: (0..self.workers).map(|w| format!("w{w}")).collect(),
            of: crate::remote::spread(&parallelism, &vec![1; self.workers])?,
        })
    }

    fn run_part(
        &self,
        worker: usize,
        spec: crate::remote::AttemptSpec,
        link: crate::remote::PartLink,
    ) -> crate::remote::Part {
        let (tx, controls) = tokio::sync::mpsc::unbounded_channel();
        for (task, mut rx) in link.controls {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(c) = rx.recv().await {
                    if tx.send((task, c)).is_err() {
                        return;
                    }
                }
            });
        }
        let transport = Arc::new(LoopbackTransport {
            attempt: spec.attempt,
            channels: self.channels.clone(),
        });
        let worker_link = crate::remote::WorkerLink {
            controls,
            events: link.events,
            metrics: Arc::new(crate::JobMetrics::default()),
            checkpoint_requests: link.checkpoint_requests,
        };
        let (graph, opts) = ((self.build)(), self.opts.clone());
        Box::pin(crate::remote::run_part(
            graph,
            opts,
            spec,
            worker,
            transport,
            worker_link,
        ))
    }
}

/// Starts the graph `build` makes on a [`Loopback`] cluster of `workers` workers.
async fn start_on_loopback(
    workers: usize,
    build: Arc<dyn Fn() -> JobGraph + Send + Sync>,
    opts: JobOptions,
) -> crate::JobHandle {
    let cluster = Arc::new(Loopback {
        workers,
        build: build.clone(),
        opts: opts.clone(),
        channels: Default::default(),
    });
    crate::start_on_cluster(build(), opts, cluster)
        .await
        .unwrap()
}

/// The lifecycle test's job with its subtasks on three workers: the hash exchange
/// crosses them, and the lifecycle, the shared final checkpoint and the rows are the same
/// as in one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_job_on_a_cluster_follows_the_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let log: Log = Default::default();
    let collected = Arc::new(Mutex::new(Vec::new()));
    let build = {
        let (log, collected) = (log.clone(), collected.clone());
        Arc::new(move || lifecycle_graph(&log, &collected))
    };
    let opts = JobOptions {
        checkpoint_interval: Some(Duration::from_millis(20)),
        checkpoint_dir: Some(dir.path().to_str().unwrap().into()),
        ..Default::default()
    };
    let job = start_on_loopback(3, build, opts).await;
    assert_lifecycle(job, &log, &collected).await;
}

/// An operator on a worker asks for an early checkpoint: the coordinator takes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_on_a_worker_can_ask_for_an_early_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let opts = JobOptions {
        checkpoint_interval: Some(Duration::from_secs(3600)),
        checkpoint_dir: Some(dir.path().to_str().unwrap().into()),
        ..Default::default()
    };
    let job = start_on_loopback(2, Arc::new(requesting_graph), opts).await;
    assert_early_checkpoint(job).await;
}
