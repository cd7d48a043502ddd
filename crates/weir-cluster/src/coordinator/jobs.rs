//! Jobs on a coordinator: submissions and the submitters that follow them, the records
//! a restarted coordinator resumes jobs from, listing and stopping.

use super::CoordinatorState;
use super::placement::ClusterJob;
use crate::JobDefinition;
use crate::lock;
use crate::service::{is_user_error, status};
use arrow_flight::Action;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStoreExt as _;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Response, Status};
use weir_common::{Error, Result};

/// The `submit` action's result messages (JSON in each result's body).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum JobUpdate {
    Started {
        job_id: String,
        restored_from: Option<String>,
        /// Each vertex (chained operators) and the workers of its subtasks, in order.
        placement: Vec<(String, Vec<String>)>,
    },
    Finished {
        checkpoints: u64,
        restarts: u64,
        last_checkpoint: Option<String>,
        rows_in: u64,
        rows_out: u64,
    },
}

impl CoordinatorState {
    /// `submit`: runs a job (or follows the one already submitted with the same id) and
    /// reports its start and end on the result stream.
    pub(crate) async fn action(
        self: Arc<Self>,
        action: Action,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<arrow_flight::Result, Status>>>,
        Status,
    > {
        match action.r#type.as_str() {
            "submit" => {}
            "list" => {
                let body = serde_json::to_vec(&self.running()).expect("job lists serialize");
                let one =
                    futures::stream::once(
                        async move { Ok(arrow_flight::Result { body: body.into() }) },
                    );
                return Ok(Response::new(one.boxed()));
            }
            "stop" | "cancel" => {
                let answer = if action.r#type == "stop" {
                    let request: StopRequest =
                        serde_json::from_slice(&action.body).map_err(|e| {
                            Status::invalid_argument(format!("unreadable request: {e}"))
                        })?;
                    self.stop(request).await.map_err(status)?
                } else {
                    let (id, r) = self
                        .find_running(&String::from_utf8_lossy(&action.body))
                        .map_err(status)?;
                    tracing::info!("cancelling job {id}");
                    r.controller.cancel();
                    id
                };
                let one = futures::stream::once(async move {
                    Ok(arrow_flight::Result {
                        body: answer.into_bytes().into(),
                    })
                });
                return Ok(Response::new(one.boxed()));
            }
            other => {
                return Err(Status::unimplemented(format!("unknown action '{other}'")));
            }
        }
        let submission: Submission = serde_json::from_slice(&action.body)
            .map_err(|e| Status::invalid_argument(format!("unreadable job: {e}")))?;
        let known = lock(&self.jobs).get(&submission.id).cloned();
        let status = match known {
            Some(status) => status,
            None => {
                let mut job = submission.job;
                if submission.resume && job.restore.is_none() {
                    // The coordinator that ran it is gone and kept no record: go on from
                    // the job's latest checkpoint.
                    job.restore = Some("latest".into());
                }
                let record = JobRecord { job, run: None };
                self.clone().run_job(submission.id, record, false).await
            }
        };
        Ok(Response::new(follow(status)))
    }

    /// The jobs running now.
    fn running(&self) -> Vec<RunningJob> {
        let mut jobs: Vec<RunningJob> = lock(&self.running)
            .iter()
            .map(|(id, r)| RunningJob {
                job_id: id.clone(),
                rows_in: r.metrics.rows_in(),
                rows_out: r.metrics.rows_out(),
                restarts: r.metrics.restarts(),
                last_checkpoint: r.metrics.last_checkpoint(),
                status: if r.metrics.is_restarting() {
                    "RESTARTING"
                } else {
                    "RUNNING"
                }
                .into(),
                placement: lock(&r.cluster.placed).clone(),
            })
            .collect();
        jobs.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        jobs
    }

    /// The running job that `job` (its id, or a unique prefix of it) names: its id, and
    /// how to control it.
    fn find_running(&self, job: &str) -> Result<(String, Running)> {
        let running = lock(&self.running);
        let matching: Vec<_> = running
            .iter()
            .filter(|(id, _)| id.starts_with(job))
            .collect();
        match matching[..] {
            [(id, r)] => Ok((id.clone(), r.clone())),
            [] => Err(Error::config(format!(
                "no running job '{job}' on this coordinator"
            ))),
            _ => Err(Error::config(format!(
                "'{job}' names {} running jobs; give more of the id",
                matching.len()
            ))),
        }
    }

    /// Stops a running job (its id, or a unique prefix of it) with a savepoint.
    async fn stop(&self, request: StopRequest) -> Result<String> {
        let (id, running) = self.find_running(&request.job)?;
        let (controller, default_dir) = (running.controller, running.savepoint_dir);
        let dir = request.savepoint_dir.or(default_dir).ok_or_else(|| {
            Error::config(
                "no savepoint folder: pass --savepoint-dir or set \
                 execution.checkpointing.savepoint-dir in the job",
            )
        })?;
        tracing::info!("stopping job {id} with a savepoint under {dir}");
        controller.stop_with_savepoint(request.drain, &dir).await
    }

    /// Records and starts a job (`resuming`: one an earlier coordinator recorded); its
    /// status is what submitters follow.
    async fn run_job(
        self: Arc<Self>,
        id: uuid::Uuid,
        record: JobRecord,
        resuming: bool,
    ) -> tokio::sync::watch::Receiver<JobStatus> {
        let (tx, rx) = tokio::sync::watch::channel(JobStatus::Starting);
        lock(&self.jobs).insert(id, rx.clone());
        if let Err(e) = self.records.save(id, &record).await {
            tracing::warn!("cannot record job {id}: {e}");
        }
        tokio::spawn(async move {
            let ended = self.run_to_end(id, record, resuming, &tx).await;
            if let Err(e) = &ended {
                tracing::warn!("job {id} failed: {e}");
            }
            // Ended for good: a restarted coordinator does not resume it.
            self.records.remove(id).await;
            let _ = tx.send(match ended {
                Ok(finished) => finished,
                Err(e) => JobStatus::Failed {
                    user_error: is_user_error(&e),
                    message: e.to_string(),
                },
            });
        });
        rx
    }

    async fn run_to_end(
        self: &Arc<Self>,
        id: uuid::Uuid,
        record: JobRecord,
        resuming: bool,
        status: &tokio::sync::watch::Sender<JobStatus>,
    ) -> Result<JobStatus> {
        let JobRecord { mut job, run } = record;
        let (engine, graph) = job.compile().await?;
        if resuming {
            job.restore = resume_point(&engine, &job, run).await?;
        }
        if let Some(web) = &self.web {
            engine.share_web_server(web.clone())?;
        }
        let needed = graph
            .vertices
            .iter()
            .map(|v| v.parallelism)
            .max()
            .unwrap_or(0);
        self.wait_for_slots(needed).await;
        let restore = job.restore.as_ref().map(|r| match r.as_str() {
            "latest" => weir_runtime::RestoreFrom::Latest,
            path => weir_runtime::RestoreFrom::Path(path.to_string()),
        });
        let cluster = Arc::new(ClusterJob::new(self.clone(), job.clone()));
        let handle = engine
            .start_on(graph, restore, Some(cluster.clone()))
            .await?;
        tracing::info!("job {} started", handle.job_id);
        // A coordinator that resumes the job goes on from this run.
        let started = JobRecord {
            job: JobDefinition {
                restore: handle.restored_from.clone(),
                ..job
            },
            run: Some(handle.job_id),
        };
        if let Err(e) = self.records.save(id, &started).await {
            tracing::warn!("cannot record job {id}: {e}");
        }
        let _ = status.send(JobStatus::Running(JobUpdate::Started {
            job_id: handle.job_id.to_string(),
            restored_from: handle.restored_from.clone(),
            placement: lock(&cluster.placed).clone(),
        }));
        let job_id = handle.job_id;
        lock(&self.running).insert(
            job_id.to_string(),
            Running {
                controller: handle.controller(),
                metrics: handle.metrics.clone(),
                savepoint_dir: engine.config().savepoint_dir(),
                cluster: cluster.clone(),
            },
        );
        // The session lives as long as the job.
        let metrics = handle.metrics.clone();
        let outcome = handle.wait().await;
        lock(&self.running).remove(&job_id.to_string());
        drop(engine);
        let o = outcome?;
        tracing::info!("job {job_id} finished");
        Ok(JobStatus::Ended(JobUpdate::Finished {
            checkpoints: o.checkpoints_completed,
            restarts: o.restarts,
            last_checkpoint: o.last_checkpoint,
            rows_in: metrics.rows_in(),
            rows_out: metrics.rows_out(),
        }))
    }

    /// Waits up to `slot_timeout` for workers with `needed` slots in all: workers may
    /// still be registering (after a restart of the coordinator, or of the cluster).
    async fn wait_for_slots(&self, needed: usize) {
        let deadline = tokio::time::Instant::now() + self.slot_timeout;
        let mut said = false;
        loop {
            let slots: usize = self.workers().iter().map(|w| w.1).sum();
            if slots >= needed || tokio::time::Instant::now() >= deadline {
                return;
            }
            if !said {
                tracing::info!(
                    "waiting for workers: the job needs {needed} slots, there are {slots}"
                );
                said = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Resumes the jobs a previous coordinator recorded and did not see end, from their
    /// latest checkpoints.
    pub(super) async fn resume_recorded(self: &Arc<Self>) -> Result<()> {
        for (id, record) in self.records.load().await? {
            tracing::info!("resuming job {id}, recorded by an earlier coordinator");
            self.clone().run_job(id, record, true).await;
        }
        Ok(())
    }
}

/// Where a resumed job goes on from: the newest checkpoint of the run an earlier
/// coordinator recorded, else where that run started (a savepoint it was started from
/// is not skipped, nor its folder's other jobs' checkpoints taken instead). A job
/// recorded before its run started goes on from where it was to start, or else from the
/// newest checkpoint in its folder.
async fn resume_point(
    engine: &weir_engine::Engine,
    job: &JobDefinition,
    run: Option<weir_common::JobId>,
) -> Result<Option<String>> {
    if let (Some(run), Some(dir)) = (run, engine.config().checkpoint_dir()) {
        if let Some(latest) = weir_runtime::latest_of_job(&dir, run).await? {
            return Ok(Some(latest));
        }
        return Ok(job.restore.clone());
    }
    Ok(job.restore.clone().or_else(|| Some("latest".into())))
}

/// A job as its coordinator records it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct JobRecord {
    /// The job; once it runs, its `restore` is where the run started (a checkpoint or
    /// savepoint, or none).
    job: JobDefinition,
    /// The job id of its current run, once started.
    #[serde(default)]
    run: Option<weir_common::JobId>,
}

/// A running job, as the coordinator controls it.
#[derive(Clone)]
pub(super) struct Running {
    controller: weir_runtime::JobController,
    metrics: Arc<weir_runtime::JobMetrics>,
    savepoint_dir: Option<String>,
    pub(super) cluster: Arc<ClusterJob>,
}

/// A running job, as `weir list --cluster` shows it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct RunningJob {
    pub job_id: String,
    /// Rows the sources emitted and the sinks took, over the workers' reports.
    pub rows_in: u64,
    pub rows_out: u64,
    /// `RUNNING` or `RESTARTING`.
    pub status: String,
    pub restarts: u64,
    pub last_checkpoint: Option<u64>,
    /// See [`JobUpdate::Started`].
    pub placement: Vec<(String, Vec<String>)>,
}

/// `weir stop --cluster`: stop a job with a savepoint.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct StopRequest {
    /// The job id, or a unique prefix of it.
    pub job: String,
    pub drain: bool,
    /// Default: the job's `execution.checkpointing.savepoint-dir`.
    pub savepoint_dir: Option<String>,
}

/// A submission: the job, and an id chosen by the submitter so that it can follow the
/// job again after losing its connection.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Submission {
    pub id: uuid::Uuid,
    pub job: JobDefinition,
    /// Submitted again after the connection was lost: a coordinator that does not know
    /// the job (it restarted without records) resumes it from its latest checkpoint.
    pub resume: bool,
}

/// Where a submitted job is.
#[derive(Debug, Clone)]
pub(super) enum JobStatus {
    Starting,
    Running(JobUpdate),
    Ended(JobUpdate),
    Failed { user_error: bool, message: String },
}

/// The updates a submitter sees: the start once running, then the end.
fn follow(
    status: tokio::sync::watch::Receiver<JobStatus>,
) -> BoxStream<'static, std::result::Result<arrow_flight::Result, Status>> {
    let encode = |u: &JobUpdate| {
        Ok(arrow_flight::Result {
            body: serde_json::to_vec(u).expect("updates serialize").into(),
        })
    };
    futures::stream::unfold(
        (status, false, false),
        move |(mut rx, started, done)| async move {
            if done {
                return None;
            }
            loop {
                let now = rx.borrow_and_update().clone();
                match now {
                    JobStatus::Running(u) if !started => {
                        return Some((encode(&u), (rx, true, false)));
                    }
                    JobStatus::Ended(u) => return Some((encode(&u), (rx, started, true))),
                    JobStatus::Failed {
                        user_error,
                        message,
                    } => {
                        let s = if user_error {
                            Status::invalid_argument(message)
                        } else {
                            // Not `internal`: a broken connection can look like that.
                            Status::aborted(message)
                        };
                        return Some((Err(s), (rx, started, true)));
                    }
                    _ => {}
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        },
    )
    .boxed()
}

/// The coordinator's record of the jobs it runs (`high-availability.storageDir`): one
/// JSON file per job under `jobs/`, written when the job is submitted and removed when
/// it ends. A coordinator started on the same folder resumes the jobs recorded there.
pub(super) struct JobRecords(
    Option<(Arc<dyn object_store::ObjectStore>, object_store::path::Path)>,
);

impl JobRecords {
    /// Records under `ha_dir` (a folder or URL); none without one.
    pub(super) fn at(ha_dir: Option<&str>) -> Result<JobRecords> {
        Ok(JobRecords(match ha_dir {
            Some(dir) => Some(weir_runtime::storage::resolve_location(dir)?),
            None => None,
        }))
    }

    fn path(&self, id: uuid::Uuid) -> Option<object_store::path::Path> {
        self.0
            .as_ref()
            .map(|(_, root)| root.clone().join("jobs").join(format!("{id}.json")))
    }

    async fn save(&self, id: uuid::Uuid, job: &JobRecord) -> Result<()> {
        let (Some((store, _)), Some(path)) = (&self.0, self.path(id)) else {
            return Ok(());
        };
        let body = serde_json::to_vec(job).map_err(|e| Error::internal(e.to_string()))?;
        store.put(&path, body.into()).await?;
        Ok(())
    }

    async fn remove(&self, id: uuid::Uuid) {
        if let (Some((store, _)), Some(path)) = (&self.0, self.path(id))
            && let Err(e) = store.delete(&path).await
        {
            tracing::warn!("cannot remove the record of job {id}: {e}");
        }
    }

    async fn load(&self) -> Result<Vec<(uuid::Uuid, JobRecord)>> {
        let Some((store, root)) = &self.0 else {
            return Ok(Vec::new());
        };
        let listed: Vec<_> = store
            .list(Some(&root.clone().join("jobs")))
            .collect::<Vec<_>>()
            .await;
        let mut jobs = Vec::new();
        for meta in listed {
            let meta = meta?;
            let Some(id) = meta
                .location
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
                .and_then(|f| uuid::Uuid::parse_str(f).ok())
            else {
                continue;
            };
            let body = store.get(&meta.location).await?.bytes().await?;
            let job = serde_json::from_slice(&body).map_err(|e| {
                Error::config(format!("unreadable job record '{}': {e}", meta.location))
            })?;
            jobs.push((id, job));
        }
        Ok(jobs)
    }
}
