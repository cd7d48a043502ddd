//! One job's view of the cluster: placing its subtasks on the registered workers, and
//! running each worker's part of an attempt over the worker's control stream.

use super::{CoordinatorState, PartEntry};
use crate::JobDefinition;
use crate::lock;
use crate::wire::ToWorker;
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use weir_common::{Error, Result};
use weir_runtime::remote::{AttemptSpec, Cluster, PartLink, Placement, spread};

/// One job's view of the cluster.
pub(super) struct ClusterJob {
    state: Arc<CoordinatorState>,
    job: JobDefinition,
    /// Where the latest attempt placed each vertex's subtasks (by worker address).
    pub(super) placed: Mutex<Vec<(String, Vec<String>)>>,
}

impl ClusterJob {
    pub(super) fn new(state: Arc<CoordinatorState>, job: JobDefinition) -> ClusterJob {
        ClusterJob {
            state,
            job,
            placed: Mutex::new(Vec::new()),
        }
    }
}

impl Cluster for ClusterJob {
    fn place(&self, vertices: &[(String, usize)]) -> Result<Placement> {
        let workers = self.state.workers();
        let slots: Vec<usize> = workers.iter().map(|w| w.1).collect();
        let parallelism: Vec<usize> = vertices.iter().map(|v| v.1).collect();
        let of = spread(&parallelism, &slots)?;
        let shown: Vec<(String, Vec<String>)> = vertices
            .iter()
            .zip(&of)
            .map(|((name, _), at)| {
                (
                    name.clone(),
                    at.iter().map(|&w| workers[w].2.clone()).collect(),
                )
            })
            .collect();
        for (name, at) in &shown {
            tracing::info!("{name}: subtasks on {}", at.join(", "));
        }
        *lock(&self.placed) = shown;
        Ok(Placement {
            workers: workers.into_iter().map(|w| w.2).collect(),
            of,
        })
    }

    fn run_part(
        &self,
        worker: usize,
        spec: AttemptSpec,
        link: PartLink,
    ) -> weir_runtime::remote::Part {
        let PartLink {
            controls,
            events,
            metrics,
            checkpoint_requests,
        } = link;
        let address = spec.workers[worker].clone();
        let attempt = spec.attempt;
        let (ended_tx, ended_rx) = oneshot::channel();
        let to_worker = {
            let mut workers = lock(&self.state.workers);
            workers
                .iter_mut()
                .find(|(_, w)| w.data_address == address)
                .map(|(id, w)| {
                    w.parts.insert(
                        attempt,
                        PartEntry {
                            events,
                            ended: Some(ended_tx),
                            metrics,
                            reported: (0, 0),
                            reported_tasks: Default::default(),
                            checkpoint_requests,
                        },
                    );
                    (*id, w.to_worker.clone())
                })
        };
        let Some((worker_id, to_worker)) = to_worker else {
            return Box::pin(
                async move { Err(Error::External(format!("worker {address} is gone"))) },
            );
        };
        let _ = to_worker.send(ToWorker::Start {
            job: self.job.clone(),
            spec,
            me: worker,
        });
        // The coordinator's messages for the part's tasks, in order per task.
        let forward = {
            let to_worker = to_worker.clone();
            let merged = futures::stream::select_all(controls.into_iter().map(|(task, rx)| {
                tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(move |c| (task, c))
            }));
            tokio::spawn(async move {
                let mut merged = merged;
                while let Some((task, control)) = merged.next().await {
                    let _ = to_worker.send(ToWorker::Control {
                        attempt,
                        task,
                        control,
                    });
                }
            })
        };
        let cancel = CancelOnDrop {
            state: self.state.clone(),
            worker_id,
            attempt,
            to_worker,
            forward,
            done: false,
        };
        Box::pin(async move {
            let mut cancel = cancel;
            let result = ended_rx.await;
            cancel.done = true;
            match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(why)) => Err(Error::Remote(format!("worker {address}: {why}"))),
                Err(_) => Err(Error::Remote(format!("worker {address} was lost"))),
            }
        })
    }
}

/// Cancels a worker's part of an attempt when the coordinator gives the part up before
/// it ended (the attempt failed elsewhere, or the job was cancelled).
struct CancelOnDrop {
    state: Arc<CoordinatorState>,
    worker_id: u64,
    attempt: uuid::Uuid,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    forward: tokio::task::JoinHandle<()>,
    done: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.forward.abort();
        if !self.done {
            let _ = self.to_worker.send(ToWorker::Cancel {
                attempt: self.attempt,
            });
            if let Some(w) = lock(&self.state.workers).get_mut(&self.worker_id) {
                w.parts.remove(&self.attempt);
            }
        }
    }
}
