//! Writing a task's snapshots off its data path.
//!
//! At a barrier a task takes its operators' snapshots (the synchronous part: state frozen
//! into Arrow IPC buffers), forwards the barrier and goes back to its input at once; an
//! [`Uploader`] of its own writes the state file and then acknowledges the checkpoint to
//! the coordinator. Snapshots are written one after another in barrier order, so a task
//! that acknowledged checkpoint N has written everything of earlier ones (the cleanup of
//! aborted checkpoints relies on it). The task's other events (`EndOfData`, `Closed`) go
//! through the same queue, so the coordinator hears them in the order they happened: a
//! task's end of data never overtakes the acknowledgement of a snapshot taken before it.
//! A failed write declines the checkpoint with its error, which fails the attempt like a
//! failing task did before.

use crate::checkpoint::{SubtaskStatus, TaskSnapshot};
use crate::plan::TaskRef;
use crate::storage::CheckpointStorage;
use crate::task::TaskEvent;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use weir_common::CheckpointId;

/// One snapshot to write and acknowledge.
pub(crate) struct Upload {
    pub id: CheckpointId,
    pub file: String,
    pub snapshot: TaskSnapshot,
    pub status: SubtaskStatus,
    pub union_state: bool,
}

enum Outgoing {
    Upload(Upload),
    Event(TaskEvent),
}

/// A task's writer of snapshots and sender of its events; aborts what it has not done when
/// dropped (the attempt failed), unless [`Uploader::drain`] waited for it.
pub(crate) struct Uploader {
    tx: Option<UnboundedSender<Outgoing>>,
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl Uploader {
    pub fn start(
        storage: CheckpointStorage,
        events: UnboundedSender<TaskEvent>,
        task: TaskRef,
        // Shared payloads that exist at the start, by name: those of the restored
        // checkpoint, if it is this job's. They stay while that checkpoint is retained,
        // which it is until a checkpoint referring to them completes.
        mut known: std::collections::HashMap<String, crate::state_file::SharedAt>,
    ) -> Self {
        let (tx, mut rx) = unbounded_channel::<Outgoing>();
        let handle = tokio::spawn(async move {
            // Shared payloads of the previous snapshot: they exist (see crate::state_file).
            let mut names = crate::state_file::SharedNames::default();
            while let Some(next) = rx.recv().await {
                let u = match next {
                    Outgoing::Upload(u) => u,
                    Outgoing::Event(event) => {
                        if events.send(event).is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let written = async {
                    if let Some(delay) = weir_common::failpoint_delay("before-task-state") {
                        tokio::time::sleep(delay).await;
                    }
                    let written = storage
                        .write_task_state(u.id, &u.file, &u.snapshot, &known, &mut names)
                        .await?;
                    weir_common::failpoint("after-task-state")?;
                    Ok(written)
                }
                .await;
                let event = match written {
                    Ok(state) => {
                        known = crate::storage::shared_payloads(&state.shared);
                        TaskEvent::Ack {
                            task,
                            id: u.id,
                            status: u.status,
                            state_file: u.file,
                            state,
                            union_state: u.union_state,
                        }
                    }
                    Err(error) => TaskEvent::Declined {
                        task,
                        id: u.id,
                        error,
                    },
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        });
        Self {
            tx: Some(tx),
            handle: Some(handle),
        }
    }

    /// Queues a snapshot; its acknowledgement follows what was queued before.
    pub fn submit(&self, upload: Upload) {
        self.queue(Outgoing::Upload(upload));
    }

    /// Queues an event for the coordinator, behind the snapshots queued before it.
    pub fn send(&self, event: TaskEvent) {
        self.queue(Outgoing::Event(event));
    }

    fn queue(&self, next: Outgoing) {
        if let Some(tx) = &self.tx {
            // The writer only stops when the coordinator is gone: the attempt is ending.
            let _ = tx.send(next);
        }
    }

    /// Waits until every queued snapshot is written and acknowledged.
    pub async fn drain(&mut self) {
        self.tx = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.await;
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        if let Some(handle) = &self.handle {
            handle.abort();
        }
    }
}
