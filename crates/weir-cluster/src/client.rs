//! Submitting a job to a coordinator (`weir run --cluster`), listing and stopping its
//! jobs (`weir list --cluster`, `weir stop --cluster`).

use crate::coordinator::{JobUpdate, RunningJob, StopRequest, Submission};
use crate::service::connect;
use crate::{JobDefinition, endpoint_url};
use arrow_flight::Action;
use futures::StreamExt;
use std::time::{Duration, Instant};
use weir_common::{Error, Result};

/// Submits `job` to the coordinator at `address` and follows it: `on_update` hears that it
/// started, and the job's end is returned (an error when it failed or could not start).
/// When the connection to the coordinator is lost, it connects again for up to
/// `reconnect_for` and follows the same job: a coordinator that restarted resumes it from
/// its latest checkpoint.
pub async fn submit(
    address: &str,
    job: &JobDefinition,
    reconnect_for: Duration,
    mut on_update: impl FnMut(&JobUpdate),
) -> Result<JobUpdate> {
    let url = endpoint_url(address);
    let mut submission = Submission {
        id: uuid::Uuid::new_v4(),
        job: job.clone(),
        resume: false,
    };
    let mut lost_since: Option<Instant> = None;
    let mut connected = false;
    loop {
        let followed = follow(&url, &submission, &mut connected, &mut on_update).await;
        match followed {
            Ok(Followed::Ended(update)) => return Ok(update),
            Ok(Followed::Refused(e) | Followed::Failed(e)) => return Err(e),
            // Never reached: a wrong address, or no coordinator there.
            Err(e) if !connected => return Err(e),
            Ok(Followed::Lost) | Err(_)
                if lost_since.is_some_and(|t| t.elapsed() > reconnect_for) =>
            {
                return Err(Error::External(format!(
                    "lost the coordinator at {url} for {} s; the job may still run there",
                    reconnect_for.as_secs()
                )));
            }
            Ok(Followed::Lost) | Err(_) => {
                if lost_since.is_none() {
                    tracing::warn!("lost the coordinator at {url}; connecting again");
                    lost_since = Some(Instant::now());
                }
                submission.resume = true;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// How following a job over one connection ended.
enum Followed {
    Ended(JobUpdate),
    /// The connection ended before the job did.
    Lost,
    /// The coordinator refused the job (it does not compile, it does not fit).
    Refused(Error),
    /// The job failed.
    Failed(Error),
}

/// One connection's worth of following; an error when the connection failed.
async fn follow(
    url: &str,
    submission: &Submission,
    connected: &mut bool,
    on_update: &mut impl FnMut(&JobUpdate),
) -> Result<Followed> {
    let mut client = connect(url).await?;
    *connected = true;
    let action = Action {
        r#type: "submit".into(),
        body: serde_json::to_vec(submission)
            .map_err(|e| Error::internal(format!("cannot encode the job: {e}")))?
            .into(),
    };
    let ended = |s: tonic::Status| match s.code() {
        // The coordinator's error, as it said it.
        tonic::Code::InvalidArgument => Ok(Followed::Refused(Error::Remote(s.message().into()))),
        tonic::Code::Aborted => Ok(Followed::Failed(Error::Remote(format!(
            "the job failed on the cluster: {}",
            s.message()
        )))),
        _ => Err(Error::External(s.message().to_string())),
    };
    let mut updates = match client.do_action(action).await {
        Ok(r) => r.into_inner(),
        Err(s) => return ended(s),
    };
    while let Some(result) = updates.next().await {
        let result = match result {
            Ok(r) => r,
            Err(s) => return ended(s),
        };
        let update: JobUpdate = serde_json::from_slice(&result.body)
            .map_err(|e| Error::External(format!("unreadable update from {url}: {e}")))?;
        on_update(&update);
        if matches!(update, JobUpdate::Finished { .. }) {
            return Ok(Followed::Ended(update));
        }
    }
    Ok(Followed::Lost)
}

/// Runs the coordinator's action `kind` with `body` and returns its one result.
async fn one_action(address: &str, kind: &str, body: Vec<u8>) -> Result<Vec<u8>> {
    let url = endpoint_url(address);
    let mut client = connect(&url).await?;
    let action = Action {
        r#type: kind.into(),
        body: body.into(),
    };
    let refused = |s: tonic::Status| Error::Remote(s.message().to_string());
    let mut results = client
        .do_action(action)
        .await
        .map_err(refused)?
        .into_inner();
    match results.next().await {
        Some(r) => Ok(r.map_err(refused)?.body.to_vec()),
        None => Err(Error::External(format!("no answer from {url}"))),
    }
}

/// The jobs running on the coordinator at `address` (`weir list --cluster`).
pub async fn list(address: &str) -> Result<Vec<RunningJob>> {
    let body = one_action(address, "list", Vec::new()).await?;
    serde_json::from_slice(&body).map_err(|e| Error::External(format!("unreadable job list: {e}")))
}

/// Stops a job on the coordinator at `address` with a savepoint (`weir stop --cluster`);
/// returns the savepoint's location.
pub async fn stop(address: &str, request: &StopRequest) -> Result<String> {
    let body = serde_json::to_vec(request).map_err(|e| Error::internal(e.to_string()))?;
    let savepoint = one_action(address, "stop", body).await?;
    Ok(String::from_utf8_lossy(&savepoint).to_string())
}

/// Cancels a job on the coordinator at `address` (its id, or a unique prefix of it): its
/// tasks end on the workers, nothing more is committed. Returns the job's id.
pub async fn cancel(address: &str, job: &str) -> Result<String> {
    let id = one_action(address, "cancel", job.as_bytes().to_vec()).await?;
    Ok(String::from_utf8_lossy(&id).to_string())
}
