//! Submitting a job to a coordinator (`weir run --cluster URL`).

use crate::coordinator::JobUpdate;
use crate::service::connect;
use crate::{JobDefinition, endpoint_url};
use arrow_flight::Action;
use futures::StreamExt;
use weir_common::{Error, Result};

/// Submits `job` to the coordinator at `address` and follows it: `on_update` hears that it
/// started, and the job's end is returned (an error when it failed or could not start).
pub async fn submit(
    address: &str,
    job: &JobDefinition,
    mut on_update: impl FnMut(&JobUpdate),
) -> Result<JobUpdate> {
    let url = endpoint_url(address);
    let mut client = connect(&url).await?;
    let action = Action {
        r#type: "submit".into(),
        body: serde_json::to_vec(job)
            .map_err(|e| Error::internal(format!("cannot encode the job: {e}")))?
            .into(),
    };
    let failed = |s: tonic::Status| match s.code() {
        tonic::Code::InvalidArgument => Error::config(s.message().to_string()),
        _ => Error::External(format!("the job failed on the cluster: {}", s.message())),
    };
    let mut updates = client.do_action(action).await.map_err(failed)?.into_inner();
    let mut last = None;
    while let Some(result) = updates.next().await {
        let update: JobUpdate = serde_json::from_slice(&result.map_err(failed)?.body)
            .map_err(|e| Error::External(format!("unreadable update from {url}: {e}")))?;
        on_update(&update);
        last = Some(update);
    }
    match last {
        Some(u @ JobUpdate::Finished { .. }) => Ok(u),
        _ => Err(Error::External(format!(
            "the coordinator at {url} went away before the job ended"
        ))),
    }
}
