//! One subtask: a source and/or a chain of operators, its input channels (with barrier
//! alignment and watermark combination), its output writer, and the FLIP-147 finishing
//! protocol.
//!
//! # States
//! * **Running**: processes input (or polls its source), takes part in checkpoints.
//! * **Finished**: every input delivered `EndOfData` (or the source ran out); `end_input`
//!   and `finish` were called and `EndOfData` was forwarded. The task now handles only
//!   checkpoint events. When a checkpoint it acknowledged *after* finishing completes, it
//!   calls `close`, sends `EndOfPartition` and ends.
//!
//! # Alignment
//! A barrier from one channel blocks that channel until the same barrier came from every
//! channel that is still open; then the task snapshots, forwards the barrier and unblocks.
//! A newer barrier supersedes an incomplete alignment; an aborted checkpoint cancels it.
//!
//! # Watermarks and idleness
//! The task's watermark is the minimum over its open input channels, never decreasing. A
//! source task that emitted no rows for `idle_timeout` announces `WatermarkStatus::Idle`
//! and `Active` again before its next batch. Idle channels do not count in the minimum, nor
//! do channels that came back from idleness behind the task's watermark, until they catch
//! up (as Flink's status watermark valve); a task whose open inputs are all idle is idle
//! itself and says so downstream.

use crate::checkpoint::{OperatorState, SubtaskStatus, TaskSnapshot};
use crate::exchange::OutputWriter;
use crate::message::{Barrier, Message, StopMode, WatermarkStatus};
use crate::operator::{Operator, Output, StreamItem, TaskInfo};
use crate::plan::TaskRef;
use crate::source::{Source, SourcePoll, SplitId};
use crate::storage::CheckpointStorage;
use crate::upload::{Upload, Uploader};
use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::task::Poll;
use tokio::sync::mpsc::{Receiver, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;
use weir_common::{CheckpointId, Error, MAX_WATERMARK, Result};

/// From the coordinator to a task.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Control {
    /// Start checkpoint `barrier` here: sent to tasks with no running upstream task.
    Trigger(Barrier),
    /// Stop with savepoint `barrier`: end input (`mode` says whether to drain), then take
    /// the savepoint. Sent like `Trigger`.
    Stop(Barrier, StopMode),
    /// Checkpoint `id` completed. `may_close`: a finished subtask may now close; it may
    /// not while it keeps union list state and part of its vertex still runs (its share
    /// of the union must stay in later checkpoints).
    Complete {
        id: CheckpointId,
        may_close: bool,
    },
    Aborted(CheckpointId),
}

/// From a task to the coordinator.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum TaskEvent {
    Ack {
        task: TaskRef,
        id: CheckpointId,
        status: SubtaskStatus,
        state_file: String,
        state: crate::storage::WrittenState,
        /// Some operator of the task keeps union list state.
        union_state: bool,
    },
    EndOfData {
        task: TaskRef,
    },
    Closed {
        task: TaskRef,
    },
    /// The task could not write its state for checkpoint `id`.
    Declined {
        task: TaskRef,
        id: CheckpointId,
        /// Crosses processes as its text (see [`crate::remote`]).
        #[serde(with = "crate::remote::error_text")]
        error: weir_common::Error,
    },
}

pub(crate) struct InputChannel {
    pub rx: Receiver<Message>,
    /// Which input of the first operator this channel feeds.
    pub input: usize,
    pub blocked: bool,
    pub ended: bool,
    pub closed: bool,
    pub watermark: i64,
    pub idle: bool,
}

impl InputChannel {
    pub fn new(rx: Receiver<Message>, input: usize) -> Self {
        Self {
            rx,
            input,
            blocked: false,
            ended: false,
            closed: false,
            watermark: i64::MIN,
            idle: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Finished,
    Closed,
}

pub(crate) struct Task {
    pub info: TaskInfo,
    pub task_ref: TaskRef,
    pub source: Option<Box<dyn Source>>,
    pub operators: Vec<Box<dyn Operator>>,
    /// Restored state per chained operator.
    pub restored: Vec<Option<OperatorState>>,
    /// The vertex was fully finished in the checkpoint restored from: do not run it.
    pub finished_on_restore: bool,
    pub last_is_sink: bool,
    pub inputs: Vec<InputChannel>,
    pub output: OutputWriter,
    pub control: UnboundedReceiver<Control>,
    pub events: UnboundedSender<TaskEvent>,
    pub storage: CheckpointStorage,
    /// Shared payloads that exist in the job's shared folder at the start, by name: the
    /// restored checkpoint's, when it is this job's own (see [`crate::upload`]).
    pub known_shared:
        std::sync::Arc<std::collections::HashMap<String, crate::state_file::SharedAt>>,
    pub checkpoints_after_finish: bool,
    /// A source emitting nothing for this long is idle (see the module docs).
    pub idle_timeout: Option<std::time::Duration>,
    /// This subtask's metrics (kept over restarts).
    pub metrics: std::sync::Arc<crate::metrics::TaskMetrics>,
}

struct State {
    /// Writes this task's snapshots and acknowledges them.
    uploads: Uploader,
    phase: Phase,
    /// How the task finished (`NoDrain`: stopped with a savepoint to resume from).
    stop_mode: Option<StopMode>,
    aligning: Option<Barrier>,
    /// When the first barrier of the alignment in progress came.
    aligning_since: Option<Instant>,
    acked_after_finish: Option<CheckpointId>,
    watermark: i64,
    /// This task's share of the job's reported state bytes.
    state_bytes: u64,
    idle_until: Option<Instant>,
    /// The status last sent downstream is `Idle`.
    idle: bool,
    /// When the source last emitted a batch.
    last_emit: Instant,
    inputs_ended: Vec<bool>,
    next_channel: usize,
}

enum Next {
    Control(Option<Control>),
    Input(usize, Option<Message>),
    Source(Result<crate::source::SourcePoll>),
    Wake,
    Timer,
    SourceIdle,
}

/// Processing time in milliseconds, as operators' timers count it.
fn now_ms() -> i64 {
    weir_common::now_ms() as i64
}

impl Task {
    pub async fn run(mut self) -> Result<()> {
        let restored = std::mem::take(&mut self.restored);
        for (op, state) in self.operators.iter_mut().zip(restored) {
            op.open(state).await?;
        }
        let num_inputs = self.inputs.iter().map(|c| c.input + 1).max().unwrap_or(0);
        let mut st = State {
            uploads: Uploader::start(
                self.storage.clone(),
                self.events.clone(),
                self.task_ref,
                (*self.known_shared).clone(),
            ),
            phase: Phase::Running,
            stop_mode: None,
            aligning: None,
            aligning_since: None,
            acked_after_finish: None,
            watermark: i64::MIN,
            state_bytes: 0,
            idle_until: None,
            idle: false,
            last_emit: Instant::now(),
            inputs_ended: vec![false; num_inputs],
            next_channel: 0,
        };
        if self.finished_on_restore {
            // FLIP-147: a fully finished operator is not run again after a restore.
            self.output
                .broadcast(Message::EndOfData(StopMode::Drain))
                .await?;
            st.phase = Phase::Finished;
            st.uploads.send(TaskEvent::EndOfData {
                task: self.task_ref,
            });
        } else if let Some(source) = self.source.as_mut() {
            source.open().await?;
        }

        while st.phase != Phase::Closed {
            let source_active = self.source.is_some() && st.phase == Phase::Running;
            let has_inputs = self.inputs.iter().any(|c| !c.closed);
            let idle_until = st.idle_until;
            // The earliest processing-time timer of the chain, as a deadline.
            let timer = self
                .operators
                .iter()
                .filter_map(|o| o.next_timer())
                .min()
                .filter(|_| st.phase == Phase::Running);
            let timer_at = timer.map(|t| {
                let wait = (t - now_ms()).max(0) as u64;
                Instant::now() + std::time::Duration::from_millis(wait)
            });
            // A running source that emitted nothing for the idle timeout goes idle.
            let idle_at = self
                .idle_timeout
                .filter(|_| source_active && !st.idle)
                .map(|t| st.last_emit + t);
            // Timing costs two clock reads per wake-up; `metrics.task.detailed` = false
            // saves them.
            let timed = self.metrics.detailed;
            let waiting = timed.then(Instant::now);
            let next = tokio::select! {
                biased;
                c = self.control.recv() => Next::Control(c),
                _ = tokio::time::sleep_until(idle_at.unwrap_or_else(Instant::now)), if idle_at.is_some() => Next::SourceIdle,
                _ = tokio::time::sleep_until(timer_at.unwrap_or_else(Instant::now)), if timer_at.is_some() => Next::Timer,
                (i, m) = poll_inputs(&mut self.inputs, &mut st.next_channel), if has_inputs => Next::Input(i, m),
                _ = tokio::time::sleep_until(idle_until.unwrap_or_else(Instant::now)), if source_active && idle_until.is_some() => Next::Wake,
                r = poll_source(&mut self.source), if source_active && idle_until.is_none() => Next::Source(r),
            };
            let handling = waiting.map(|waiting| {
                let now = Instant::now();
                crate::metrics::TaskMetrics::add_ns(&self.metrics.idle_ns, now - waiting);
                now
            });
            // A source with data is always ready and its task would never give its worker
            // thread back: the checkpoint coordinator, timers and other tasks would starve
            // (a Kafka backlog was read whole before the first checkpoint was triggered).
            let from_source = matches!(next, Next::Source(_));
            self.handle(&mut st, next).await?;
            if let Some(handling) = handling {
                crate::metrics::TaskMetrics::add_ns(&self.metrics.active_ns, handling.elapsed());
            }
            if from_source {
                tokio::task::yield_now().await;
            } else {
                tokio::task::coop::consume_budget().await;
            }
        }
        Ok(())
    }

    /// Handles what the task's loop woke up for.
    async fn handle(&mut self, st: &mut State, next: Next) -> Result<()> {
        match next {
            Next::Control(None) => return Err(Error::Cancelled),
            Next::Control(Some(c)) => self.on_control(st, c).await?,
            Next::Input(i, m) => self.on_input(st, i, m).await?,
            Next::Wake => st.idle_until = None,
            Next::Timer => self.fire_timers(st).await?,
            Next::SourceIdle => self.set_status(st, WatermarkStatus::Idle).await?,
            Next::Source(r) => match r? {
                SourcePoll::Batch(batch) => {
                    st.last_emit = Instant::now();
                    if st.idle {
                        self.set_status(st, WatermarkStatus::Active).await?;
                    }
                    self.count_source_rows(&batch);
                    self.push(0, 0, vec![StreamItem::Batch(batch)]).await?;
                }
                SourcePoll::Splits {
                    added,
                    batches,
                    finished,
                } => {
                    if !added.is_empty() {
                        self.splits_changed(st, &added, &[]).await?;
                    }
                    if !batches.is_empty() {
                        st.last_emit = Instant::now();
                        if st.idle {
                            self.set_status(st, WatermarkStatus::Active).await?;
                        }
                    }
                    for (split, batch) in batches {
                        self.count_source_rows(&batch);
                        self.push_split(0, 0, vec![StreamItem::Batch(batch)], Some(split))
                            .await?;
                    }
                    if !finished.is_empty() {
                        self.splits_changed(st, &[], &finished).await?;
                    }
                }
                SourcePoll::Idle(d) => st.idle_until = Some(Instant::now() + d),
                SourcePoll::Finished => {
                    self.push(0, 0, vec![StreamItem::Watermark(MAX_WATERMARK)])
                        .await?;
                    self.finish(st, StopMode::Drain, true).await?;
                }
            },
        }
        Ok(())
    }

    /// Counts rows a source produced (the job's `rows in` and the task's records in).
    fn count_source_rows(&self, batch: &arrow::array::RecordBatch) {
        self.info
            .metrics
            .rows_in
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        self.metrics.count_in(batch);
    }

    async fn on_control(&mut self, st: &mut State, control: Control) -> Result<()> {
        match control {
            Control::Trigger(barrier) => {
                self.drain_closed_inputs(st).await?;
                if st.phase != Phase::Closed {
                    self.checkpoint(st, barrier).await?;
                }
            }
            Control::Stop(barrier, mode) => {
                self.drain_closed_inputs(st).await?;
                if st.phase == Phase::Running {
                    // Only sources (or tasks whose inputs all ended) are stopped directly;
                    // the rest learn of the stop through EndOfData, in order.
                    if mode == StopMode::Drain {
                        self.push(0, 0, vec![StreamItem::Watermark(MAX_WATERMARK)])
                            .await?;
                    }
                    self.finish(st, mode, true).await?;
                }
                if st.phase != Phase::Closed {
                    self.checkpoint(st, barrier).await?;
                }
            }
            Control::Complete { id, may_close } => {
                if let Some(source) = self.source.as_mut() {
                    source.notify_checkpoint_complete(id).await?;
                }
                for op in &mut self.operators {
                    op.notify_checkpoint_complete(id).await?;
                }
                if may_close
                    && st.phase == Phase::Finished
                    && st.acked_after_finish.is_some_and(|a| a <= id)
                {
                    self.close(st).await?;
                }
            }
            Control::Aborted(id) => {
                for op in &mut self.operators {
                    op.notify_checkpoint_aborted(id).await?;
                }
                if st.aligning.is_some_and(|b| b.id == id) {
                    st.aligning = None;
                    self.inputs.iter_mut().for_each(|c| c.blocked = false);
                }
            }
        }
        Ok(())
    }

    async fn on_input(&mut self, st: &mut State, i: usize, msg: Option<Message>) -> Result<()> {
        let Some(msg) = msg else {
            return Err(Error::Cancelled);
        };
        match msg {
            Message::Data(batch) => {
                if st.phase != Phase::Running {
                    return Err(Error::internal(format!(
                        "{}: data received after end of data",
                        self.info.vertex_name
                    )));
                }
                let input = self.inputs[i].input;
                self.metrics.count_in(&batch);
                self.push(0, input, vec![StreamItem::Batch(batch)]).await?;
            }
            Message::Watermark(w) => {
                let ch = &mut self.inputs[i];
                ch.watermark = ch.watermark.max(w);
                self.advance_watermark(st).await?;
            }
            Message::WatermarkStatus(status) => {
                self.inputs[i].idle = status == WatermarkStatus::Idle;
                let open = self.inputs.iter().filter(|c| !c.closed);
                let all_idle = open.clone().count() > 0 && open.clone().all(|c| c.idle);
                if all_idle != st.idle && st.phase == Phase::Running {
                    let status = if all_idle {
                        WatermarkStatus::Idle
                    } else {
                        WatermarkStatus::Active
                    };
                    self.set_status(st, status).await?;
                }
                self.advance_watermark(st).await?;
            }
            Message::Barrier(barrier) => {
                if st.aligning.is_none() {
                    st.aligning_since = Some(Instant::now());
                }
                match st.aligning {
                    None => st.aligning = Some(barrier),
                    Some(cur) if cur.id == barrier.id => {}
                    Some(cur) if barrier.id > cur.id => {
                        self.inputs.iter_mut().for_each(|c| c.blocked = false);
                        st.aligning = Some(barrier);
                    }
                    Some(_) => return Ok(()), // stale barrier of an aborted checkpoint
                }
                self.inputs[i].blocked = true;
                self.check_aligned(st).await?;
            }
            Message::EndOfData(mode) => {
                self.inputs[i].ended = true;
                if st.phase != Phase::Running {
                    return Ok(());
                }
                let input = self.inputs[i].input;
                let input_done = self
                    .inputs
                    .iter()
                    .filter(|c| c.input == input)
                    .all(|c| c.ended);
                if input_done && !st.inputs_ended[input] && mode == StopMode::Drain {
                    st.inputs_ended[input] = true;
                    if let Some(op) = self.operators.first_mut() {
                        let mut out = Output::default();
                        op.end_input(input, &mut out).await?;
                        self.push(1, 0, out.items).await?;
                    }
                }
                if self.inputs.iter().all(|c| c.ended) {
                    self.finish(st, mode, false).await?;
                }
            }
            Message::EndOfPartition => {
                self.inputs[i].closed = true;
                self.inputs[i].blocked = false;
                if st.aligning.is_some() {
                    self.check_aligned(st).await?;
                }
            }
        }
        Ok(())
    }

    /// Recomputes the combined watermark of the inputs and passes it down the chain if it
    /// advanced. Idle channels and channels behind the current watermark (back from
    /// idleness) do not hold it back.
    async fn advance_watermark(&mut self, st: &mut State) -> Result<()> {
        let combined = self
            .inputs
            .iter()
            .filter(|c| !c.closed && !c.idle && c.watermark >= st.watermark)
            .map(|c| c.watermark)
            .min();
        if let Some(combined) = combined
            && combined > st.watermark
            && st.phase == Phase::Running
        {
            st.watermark = combined;
            self.metrics
                .input_watermark
                .store(combined, Ordering::Relaxed);
            self.push(0, 0, vec![StreamItem::Watermark(combined)])
                .await?;
        }
        Ok(())
    }

    /// Announces this task's idleness downstream.
    async fn set_status(&mut self, st: &mut State, status: WatermarkStatus) -> Result<()> {
        st.idle = status == WatermarkStatus::Idle;
        self.output
            .broadcast(Message::WatermarkStatus(status))
            .await
    }

    /// A triggered task has no running upstream task: take in what the closed upstream
    /// tasks sent before their end.
    async fn drain_closed_inputs(&mut self, st: &mut State) -> Result<()> {
        while self.inputs.iter().any(|c| !c.closed) {
            let (i, m) = poll_inputs(&mut self.inputs, &mut st.next_channel).await;
            Box::pin(self.on_input(st, i, m)).await?;
        }
        Ok(())
    }

    async fn check_aligned(&mut self, st: &mut State) -> Result<()> {
        let Some(barrier) = st.aligning else {
            return Ok(());
        };
        if self.inputs.iter().all(|c| c.closed || c.blocked) {
            st.aligning = None;
            if let Some(since) = st.aligning_since.take() {
                self.metrics
                    .alignment_ms
                    .store(since.elapsed().as_millis() as u64, Ordering::Relaxed);
            }
            self.inputs.iter_mut().for_each(|c| c.blocked = false);
            self.checkpoint(st, barrier).await?;
        }
        Ok(())
    }

    /// Calls `on_timer` of every chained operator whose timer is due, passing what it
    /// emits down the chain.
    async fn fire_timers(&mut self, st: &mut State) -> Result<()> {
        let now = now_ms();
        for i in 0..self.operators.len() {
            if self.operators[i].next_timer().is_some_and(|t| t <= now) {
                let mut out = Output::default();
                self.operators[i].on_timer(now, &mut out).await?;
                self.wake_for_watermark(st, &out).await?;
                if i + 1 < self.operators.len() {
                    self.push(i + 1, 0, out.items).await?;
                } else {
                    self.send(out.items).await?;
                }
            }
        }
        Ok(())
    }

    /// Tells the chain that source splits came or went (see [`Operator::splits_changed`]).
    async fn splits_changed(
        &mut self,
        st: &mut State,
        added: &[SplitId],
        finished: &[SplitId],
    ) -> Result<()> {
        for i in 0..self.operators.len() {
            let mut out = Output::default();
            self.operators[i]
                .splits_changed(added, finished, &mut out)
                .await?;
            self.wake_for_watermark(st, &out).await?;
            self.push(i + 1, 0, out.items).await?;
        }
        Ok(())
    }

    /// An idle source task whose chain moves the watermark on without a row (a split
    /// went idle or ended) is active again for it: downstream ignores the watermarks of
    /// idle channels. It goes idle again once the idle timeout has passed.
    async fn wake_for_watermark(&mut self, st: &mut State, out: &Output) -> Result<()> {
        let moves = out
            .items
            .iter()
            .any(|item| matches!(item, StreamItem::Watermark(_)));
        if st.idle && moves && self.source.is_some() {
            self.set_status(st, WatermarkStatus::Active).await?;
        }
        Ok(())
    }

    /// Runs the chain from operator `start` on `items`, then sends the result downstream.
    async fn push(&mut self, start: usize, input: usize, items: Vec<StreamItem>) -> Result<()> {
        self.push_split(start, input, items, None).await
    }

    /// [`Self::push`] of items that come from source split `split`.
    async fn push_split(
        &mut self,
        start: usize,
        input: usize,
        items: Vec<StreamItem>,
        split: Option<SplitId>,
    ) -> Result<()> {
        let mut pending = items;
        let last = self.operators.len().saturating_sub(1);
        for i in start..self.operators.len() {
            if pending.is_empty() {
                return Ok(());
            }
            let mut out = Output::for_split(split.clone());
            let op = &mut self.operators[i];
            for item in pending {
                match item {
                    StreamItem::Batch(b) => {
                        let rows = b.num_rows() as u64;
                        op.process_batch(if i == start { input } else { 0 }, b, &mut out)
                            .await?;
                        // Counted once the sink has taken them (the shell ends a LIMIT
                        // query when all its rows are shown).
                        if i == last && self.last_is_sink {
                            self.info
                                .metrics
                                .rows_out
                                .fetch_add(rows, Ordering::Relaxed);
                            self.info.metrics.records_taken();
                            self.metrics.records_out.fetch_add(rows, Ordering::Relaxed);
                        }
                    }
                    StreamItem::Watermark(w) => op.process_watermark(w, &mut out).await?,
                }
            }
            pending = out.items;
        }
        self.send(pending).await
    }

    /// Sends what the last operator emitted downstream.
    async fn send(&mut self, items: Vec<StreamItem>) -> Result<()> {
        for item in items {
            match item {
                StreamItem::Batch(b) => self.output.data(b).await?,
                StreamItem::Watermark(w) => {
                    self.metrics.output_watermark.store(w, Ordering::Relaxed);
                    self.output.broadcast(Message::Watermark(w)).await?
                }
            }
        }
        Ok(())
    }

    async fn checkpoint(&mut self, st: &mut State, barrier: Barrier) -> Result<()> {
        for i in 0..self.operators.len() {
            let mut out = Output::default();
            self.operators[i]
                .prepare_snapshot_pre_barrier(barrier.id, &mut out)
                .await?;
            self.push(i + 1, 0, out.items).await?;
        }
        let mut snapshot = TaskSnapshot::default();
        if let Some(source) = self.source.as_mut() {
            snapshot.source = Some(source.snapshot_state(barrier.id)?);
        }
        for op in &mut self.operators {
            snapshot.operators.push(op.snapshot_state(barrier.id)?);
        }
        let bytes: u64 = self.operators.iter().map(|o| o.state_bytes() as u64).sum();
        self.info.metrics.report_state(st.state_bytes, bytes);
        self.metrics.state_bytes.store(bytes, Ordering::Relaxed);
        st.state_bytes = bytes;
        self.output.broadcast(Message::Barrier(barrier)).await?;
        let file = format!(
            "{}-{}.state",
            self.info
                .vertex_uid
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
            self.info.subtask
        );
        // A task stopped without drain resumes from this state: it is not finished.
        let status = match (st.phase, st.stop_mode) {
            (Phase::Running, _) | (_, Some(StopMode::NoDrain)) => SubtaskStatus::Running,
            _ => SubtaskStatus::FinishedData,
        };
        if st.phase == Phase::Finished && st.acked_after_finish.is_none() {
            st.acked_after_finish = Some(barrier.id);
        }
        let union_state = snapshot
            .operators
            .iter()
            .chain(snapshot.source.iter())
            .any(|s| {
                s.distribution == crate::checkpoint::StateDistribution::Union && !s.items.is_empty()
            });
        // Written (and acknowledged) off the data path.
        st.uploads.submit(Upload {
            id: barrier.id,
            file,
            snapshot,
            status,
            union_state,
        });
        Ok(())
    }

    /// End of input: `end_input`/`finish` down the chain (for a drain), forward
    /// `EndOfData`, then wait for the final checkpoint (FLIP-147).
    async fn finish(&mut self, st: &mut State, mode: StopMode, source_ended: bool) -> Result<()> {
        if mode == StopMode::Drain {
            for i in 0..self.operators.len() {
                let mut out = Output::default();
                if i > 0 || (source_ended && self.inputs.is_empty()) {
                    self.operators[i].end_input(0, &mut out).await?;
                }
                self.operators[i].finish(&mut out).await?;
                self.push(i + 1, 0, out.items).await?;
            }
        }
        self.output.broadcast(Message::EndOfData(mode)).await?;
        st.phase = Phase::Finished;
        st.stop_mode = Some(mode);
        self.metrics.finished.store(true, Ordering::Relaxed);
        st.uploads.send(TaskEvent::EndOfData {
            task: self.task_ref,
        });
        if !self.checkpoints_after_finish {
            self.close(st).await?;
        }
        Ok(())
    }

    async fn close(&mut self, st: &mut State) -> Result<()> {
        for op in &mut self.operators {
            op.close().await?;
        }
        if let Some(source) = self.source.as_mut() {
            source.close().await?;
        }
        self.output.end_of_partition().await;
        st.phase = Phase::Closed;
        // After the acknowledgements of snapshots still being written.
        st.uploads.send(TaskEvent::Closed {
            task: self.task_ref,
        });
        st.uploads.drain().await;
        Ok(())
    }
}

/// Receives from the open, unblocked channels, starting after the last one served.
async fn poll_inputs(inputs: &mut [InputChannel], next: &mut usize) -> (usize, Option<Message>) {
    poll_fn(|cx| {
        let n = inputs.len();
        for k in 0..n {
            let i = (*next + k) % n;
            let ch = &mut inputs[i];
            if ch.closed || ch.blocked {
                continue;
            }
            if let Poll::Ready(m) = ch.rx.poll_recv(cx) {
                *next = i + 1;
                return Poll::Ready((i, m));
            }
        }
        Poll::Pending
    })
    .await
}

async fn poll_source(source: &mut Option<Box<dyn Source>>) -> Result<SourcePoll> {
    match source {
        Some(s) => s.poll_next().await,
        None => std::future::pending().await,
    }
}
