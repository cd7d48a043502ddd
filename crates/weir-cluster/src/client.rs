//! Submitting a job to a coordinator (`weir run --cluster URL`).

use crate::coordinator::{JobUpdate, Submission};
use std::time::{Duration, Instant};
use crate::service::connect;
use crate::{JobDefinition, endpoint_url};
use arrow_flight::Action;
use futures::StreamExt;
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
    loop {
        match follow(&url, &submission, &mut on_update).await {
            Ok(Some(ended)) => return Ok(ended),
            Err(e @ (Error::Config(_) | Error::Plan(_) | Error::Sql { .. })) => return Err(e),
            Err(Error::Input(failed)) => {
                return Err(Error::External(format!("the job failed on the cluster: {failed}")));
            }
            Ok(None) | Err(_) if lost_since.is_some_and(|t| t.elapsed() > reconnect_for) => {
                return Err(Error::External(format!(
                    "lost the coordinator at {url} for {} s; the job may still run there",
                    reconnect_for.as_secs()
                )));
            }
            Ok(None) | Err(_) => {
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

/// One connection's worth of following: `Ok(None)` when the connection ended before the
/// job did; `Err(Input)` when the job failed.
async fn follow(
    url: &str,
    submission: &Submission,
    on_update: &mut impl FnMut(&JobUpdate),
) -> Result<Option<JobUpdate>> {
    let mut client = connect(url).await?;
    let action = Action {
        r#type: "submit".into(),
        body: serde_json::to_vec(submission)
            .map_err(|e| Error::internal(format!("cannot encode the job: {e}")))?
            .into(),
    };
    let failed = |s: tonic::Status| match s.code() {
        tonic::Code::InvalidArgument => Error::config(s.message().to_string()),
        tonic::Code::Aborted => Error::Input(s.message().to_string()),
        _ => Error::External(s.message().to_string()),
    };
    let mut updates = client.do_action(action).await.map_err(failed)?.into_inner();
    while let Some(result) = updates.next().await {
        let update: JobUpdate = serde_json::from_slice(&result.map_err(failed)?.body)
            .map_err(|e| Error::External(format!("unreadable update from {url}: {e}")))?;
        on_update(&update);
        if matches!(update, JobUpdate::Finished { .. }) {
            return Ok(Some(update));
        }
    }
    Ok(None)
}
