//! FLIP-147 finish latency: the time from a bounded source's last record to the end of
//! the job, through a chain of three two-phase-commit file sinks (each forwards its input
//! to the next), with checkpoint intervals of 1 s, 10 s and 60 s. The final checkpoint is
//! triggered as soon as the tasks reach end of data, so the latency should not depend on
//! the interval (Flink waits for the next periodic checkpoint when part of the graph is
//! still running). Prints one line per interval.
//!
//! `cargo bench --bench finish_latency`

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir::common::{CheckpointId, ConnectorOptions, Result};
use weir::connectors::filesystem::FileSink;
use weir::connectors::two_phase::TwoPhaseCommitSinkFactory;
use weir::runtime::{
    JobGraph, JobOptions, Operator, OperatorFactory, OperatorState, Output, Source, SourceFactory,
    SourcePoll, StateDistribution, TaskInfo, Vertex,
};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
}

/// Emits `rows` rows in batches of 1000, then records when it ran out.
struct Counting {
    rows: i64,
    next: i64,
    ended: Arc<Mutex<Option<Instant>>>,
}

#[weir::runtime::async_trait]
impl Source for Counting {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        if self.next >= self.rows {
            self.ended.lock().unwrap().get_or_insert_with(Instant::now);
            return Ok(SourcePoll::Finished);
        }
        let end = (self.next + 1000).min(self.rows);
        let batch = RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from(
                (self.next..end).collect::<Vec<_>>(),
            ))],
        )?;
        self.next = end;
        Ok(SourcePoll::Batch(batch))
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        Ok(OperatorState::new(
            StateDistribution::RoundRobin,
            vec![self.next.into()],
        ))
    }
}

struct CountingFactory {
    rows: i64,
    ended: Arc<Mutex<Option<Instant>>>,
}

impl SourceFactory for CountingFactory {
    fn name(&self) -> String {
        "counting".into()
    }
    fn schema(&self) -> SchemaRef {
        schema()
    }
    fn is_bounded(&self) -> bool {
        true
    }
    fn create(&self, _: &TaskInfo, _: Option<OperatorState>) -> Result<Box<dyn Source>> {
        Ok(Box::new(Counting {
            rows: self.rows,
            next: 0,
            ended: self.ended.clone(),
        }))
    }
}

/// A two-phase-commit sink that also forwards its input, so that sinks can be chained.
struct Forwarding(Box<dyn Operator>);

#[weir::runtime::async_trait]
impl Operator for Forwarding {
    async fn open(&mut self, s: Option<OperatorState>) -> Result<()> {
        self.0.open(s).await
    }
    async fn process_batch(&mut self, i: usize, b: RecordBatch, out: &mut Output) -> Result<()> {
        self.0.process_batch(i, b.clone(), out).await?;
        out.emit(b);
        Ok(())
    }
    async fn prepare_snapshot_pre_barrier(
        &mut self,
        id: CheckpointId,
        out: &mut Output,
    ) -> Result<()> {
        self.0.prepare_snapshot_pre_barrier(id, out).await
    }
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<OperatorState> {
        self.0.snapshot_state(id)
    }
    async fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<()> {
        self.0.notify_checkpoint_complete(id).await
    }
    async fn close(&mut self) -> Result<()> {
        self.0.close().await
    }
}

struct ForwardingFactory(TwoPhaseCommitSinkFactory);

impl OperatorFactory for ForwardingFactory {
    fn name(&self) -> String {
        self.0.name()
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(Forwarding(self.0.create(task)?)))
    }
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for interval in [1u64, 10, 60] {
            let dir = tempfile::tempdir().unwrap();
            let ended = Arc::new(Mutex::new(None));
            let mut operators: Vec<Arc<dyn OperatorFactory>> = Vec::new();
            for i in 0..3 {
                let options = ConnectorOptions::new(
                    format!("sink{i}"),
                    [
                        ("connector", "filesystem".to_string()),
                        ("format", "csv".to_string()),
                        ("path", dir.path().join(format!("sink{i}")).to_string_lossy().to_string()),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                );
                let sink = FileSink::try_new(&options, schema(), &[]).await.unwrap();
                operators.push(Arc::new(ForwardingFactory(TwoPhaseCommitSinkFactory(Arc::new(sink)))));
            }
            let mut graph = JobGraph::default();
            graph.add_vertex(Vertex {
                uid: "chain".into(),
                name: "source -> 3 x 2PC sink".into(),
                parallelism: 1,
                source: Some(Arc::new(CountingFactory { rows: 200_000, ended: ended.clone() })),
                operators,
            });
            let opts = JobOptions {
                checkpoint_interval: Some(Duration::from_secs(interval)),
                checkpoint_dir: Some(dir.path().join("chk").to_string_lossy().to_string()),
                ..Default::default()
            };
            let job = weir::runtime::start(graph, opts).await.unwrap();
            let checkpoints = job.metrics.clone();
            let outcome = job.wait().await.unwrap();
            let exit = Instant::now();
            let last = ended.lock().unwrap().expect("source ended");
            let last_ckpt_ms = checkpoints.last_checkpoint_ms.load(Ordering::Relaxed);
            println!(
                "finish_latency interval_s={interval} sinks=3 latency_ms={:.1} final_checkpoint_ms={last_ckpt_ms} checkpoints={}",
                (exit - last).as_secs_f64() * 1000.0,
                outcome.checkpoints_completed
            );
        }
    });
}
