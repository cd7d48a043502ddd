//! The shell's jobs on a Weir coordinator (`weir shell --cluster host:port`), as Flink's
//! SQL client submits to a session cluster: the statements that set the session up (DDL,
//! `SET`, `USE` …) are kept, and each streaming `INSERT` goes to the coordinator as a
//! script of those statements and the `INSERT`, the job `weir run --cluster` would submit.

use anyhow::Context;
use std::time::Duration;
use tokio::task::JoinHandle;
use weir::common::SqlLocation;
use weir_cluster::coordinator::{JobUpdate, RunningJob, StopRequest};

/// How long a job's follower waits for a coordinator that restarts.
const RECONNECT_FOR: Duration = Duration::from_secs(300);

/// A job submitted to the coordinator, followed until it ends.
pub type Following = JoinHandle<weir::Result<JobUpdate>>;

/// The coordinator the shell submits to, and the session its jobs start from.
pub struct Coordinator {
    pub address: String,
    /// The text of each statement that set the session up, in order.
    session: Vec<String>,
}

impl Coordinator {
    /// The coordinator at `address`, which must answer.
    pub async fn connect(address: &str) -> anyhow::Result<Self> {
        weir_cluster::client::list(address)
            .await
            .with_context(|| format!("no Weir coordinator answers at {address}"))?;
        Ok(Self {
            address: address.to_string(),
            session: Vec::new(),
        })
    }

    /// Keeps a statement that set the session up, for the jobs submitted after it.
    pub fn record(&mut self, statement: &str) {
        self.session.push(statement.to_string());
    }

    /// Submits the session and `insert` as one job; returns the job's id once it started
    /// on the cluster, and its follower.
    pub async fn submit(&self, insert: &str) -> anyhow::Result<(String, Following)> {
        let script = self
            .session
            .iter()
            .map(String::as_str)
            .chain([insert])
            .map(|s| format!("{s};\n"))
            .collect::<String>();
        let job = weir_cluster::JobDefinition {
            scripts: vec![("shell".into(), script)],
            settings: Vec::new(),
            restore: None,
        };
        let (started, id) = tokio::sync::oneshot::channel();
        let address = self.address.clone();
        let following = tokio::spawn(async move {
            let mut started = Some(started);
            weir_cluster::client::submit(&address, &job, RECONNECT_FOR, move |update| {
                if let JobUpdate::Started { job_id, .. } = update
                    && let Some(tx) = started.take()
                {
                    let _ = tx.send(job_id.clone());
                }
            })
            .await
        });
        match id.await {
            Ok(id) => Ok((id, following)),
            // The job ended before it started: the coordinator refused it.
            Err(_) => match following.await {
                Ok(Err(e)) => Err(e.into()),
                Ok(Ok(_)) => anyhow::bail!("the job ended before it started"),
                Err(e) => Err(anyhow::anyhow!("submitting the job failed: {e}")),
            },
        }
    }

    /// The jobs running on the coordinator.
    pub async fn running(&self) -> Vec<RunningJob> {
        weir_cluster::client::list(&self.address)
            .await
            .unwrap_or_default()
    }

    /// Stops job `id` with a savepoint; returns the savepoint's location.
    pub async fn stop(
        &self,
        id: &str,
        drain: bool,
        savepoint_dir: Option<String>,
    ) -> anyhow::Result<String> {
        let request = StopRequest {
            job: id.to_string(),
            drain,
            savepoint_dir,
        };
        Ok(weir_cluster::client::stop(&self.address, &request).await?)
    }

    /// Cancels job `id`.
    pub async fn cancel(&self, id: &str) -> anyhow::Result<()> {
        weir_cluster::client::cancel(&self.address, id).await?;
        Ok(())
    }
}

/// The text of each statement of `sql` that starts at `starts` (in order): from its start
/// to the next one's, without the `;` that ends it.
pub fn statement_texts(sql: &str, starts: &[SqlLocation]) -> Vec<String> {
    let offsets: Vec<usize> = starts.iter().map(|l| offset_of(sql, l)).collect();
    offsets
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let end = offsets.get(i + 1).copied().unwrap_or(sql.len()).max(start);
            let text = sql[start..end].trim_end();
            text.strip_suffix(';')
                .unwrap_or(text)
                .trim_end()
                .to_string()
        })
        .collect()
}

/// The byte offset of a 1-based line and character column of `sql`.
fn offset_of(sql: &str, location: &SqlLocation) -> usize {
    let mut line_start = 0;
    for _ in 1..location.line {
        match sql[line_start..].find('\n') {
            Some(i) => line_start += i + 1,
            None => return sql.len(),
        }
    }
    sql[line_start..]
        .char_indices()
        .nth(location.column.saturating_sub(1) as usize)
        .map_or(sql.len(), |(i, _)| line_start + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_cut_at_their_starts() {
        let sql = "SET 'a' = 'b';\nCREATE TABLE t (x INT) WITH ('k' = 'é;');  INSERT INTO t\n  SELECT 1;\n";
        let starts: Vec<_> = weir::Engine::default()
            .parse(sql)
            .unwrap()
            .iter()
            .map(|s| s.location)
            .collect();
        assert_eq!(
            statement_texts(sql, &starts),
            [
                "SET 'a' = 'b'",
                "CREATE TABLE t (x INT) WITH ('k' = 'é;')",
                "INSERT INTO t\n  SELECT 1"
            ]
        );
    }
}
