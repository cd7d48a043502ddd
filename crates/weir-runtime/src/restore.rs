//! What a job starts from: the checkpoint to restore (the given one, or the newest sound
//! one under the checkpoint folder, falling back past corrupt ones), its state read and
//! checked, the job's lineage, and — for a start from scratch — whether a sink already
//! holds committed output of an earlier run of the same job.

use crate::graph::JobGraph;
use crate::job::{JobOptions, RestoreFrom};
use crate::operator::TaskInfo;
use crate::plan::check_restore;
use crate::storage::RestoredCheckpoint;
use weir_common::{Error, Result};

/// The state of every subtask of every vertex of a restored checkpoint, read and checked.
pub(crate) type LoadedStates = Vec<Vec<crate::checkpoint::TaskSnapshot>>;

/// Checks that `graph` may restore from `r` and reads the state files of its vertices.
async fn load(graph: &JobGraph, r: &RestoredCheckpoint, opts: &JobOptions) -> Result<LoadedStates> {
    check_restore(graph, &r.metadata)?;
    if r.metadata.max_parallelism != opts.max_parallelism {
        return Err(Error::Checkpoint(format!(
            "checkpoint was taken with pipeline.max-parallelism = {}, the job has {}; it cannot change",
            r.metadata.max_parallelism, opts.max_parallelism
        )));
    }
    let mut loaded = Vec::with_capacity(graph.vertices.len());
    for vertex in &graph.vertices {
        let mut snapshots = Vec::new();
        if let Some(entry) = r.metadata.vertex(&vertex.uid) {
            for sub in &entry.subtasks {
                snapshots.extend(
                    r.read_task_state(sub, graph.state_memory.as_deref())
                        .await?,
                );
            }
        }
        loaded.push(snapshots);
    }
    Ok(loaded)
}

/// Finds what to restore: the given checkpoint, or the newest sound one under the
/// checkpoint folder. A corrupt checkpoint is never restored; `latest` then falls back to
/// the previous one, with a warning.
pub(crate) async fn resolve_restore(
    graph: &JobGraph,
    opts: &JobOptions,
) -> Result<Option<(RestoredCheckpoint, LoadedStates)>> {
    let dir = match &opts.restore {
        None => return Ok(None),
        Some(RestoreFrom::Path(p)) => {
            let r = RestoredCheckpoint::open(p).await?;
            let loaded = load(graph, &r, opts).await?;
            return Ok(Some((r, loaded)));
        }
        Some(RestoreFrom::Latest) => opts.checkpoint_dir.as_deref().ok_or_else(|| {
            Error::config("--restore latest needs a checkpoint folder (--checkpoint-dir)")
        })?,
    };
    let mut corrupt: Vec<String> = Vec::new();
    for candidate in RestoredCheckpoint::all_latest_first(dir).await? {
        let attempt = match candidate {
            Ok(r) => load(graph, &r, opts).await.map(|l| (r, l)),
            Err(e) => Err(e),
        };
        match attempt {
            Ok((r, loaded)) => {
                if !corrupt.is_empty() {
                    tracing::warn!(
                        "restoring from the older checkpoint '{}' instead: rows committed after \
                         it are read and committed again",
                        r.location
                    );
                }
                return Ok(Some((r, loaded)));
            }
            Err(Error::CorruptCheckpoint(why)) => {
                tracing::warn!("not restoring from a corrupt checkpoint: {why}");
                corrupt.push(why);
            }
            Err(e) => return Err(e),
        }
    }
    let shown = crate::storage::display_location(dir);
    if !corrupt.is_empty() {
        return Err(Error::CorruptCheckpoint(format!(
            "{}; there is no older sound checkpoint under '{shown}' to fall back to (keep \
             more with execution.checkpointing.num-retained)",
            corrupt.join("; ")
        )));
    }
    tracing::warn!(
        "--restore latest: no completed checkpoint under '{shown}': starting from scratch"
    );
    Ok(None)
}

/// The newest sound checkpoint that job `job_id` completed under `base` (a restart's
/// starting point; other jobs' checkpoints in the folder are not its own).
pub async fn latest_of_job(base: &str, job_id: weir_common::JobId) -> Result<Option<String>> {
    let job = job_id.to_string();
    for candidate in RestoredCheckpoint::all_latest_first(base).await? {
        match candidate {
            Ok(c) if c.metadata.job_id == job => return Ok(Some(c.location)),
            Ok(_) => {}
            Err(e) => tracing::warn!("not restarting from a corrupt checkpoint: {e}"),
        }
    }
    Ok(None)
}

/// Identifies a job graph's shape (see [`TaskInfo::job_fingerprint`]).
pub(crate) fn fingerprint(graph: &JobGraph) -> u64 {
    use std::hash::Hasher;
    let mut h = twox_hash::XxHash64::with_seed(graph.fingerprint);
    for v in &graph.vertices {
        h.write(v.uid.as_bytes());
        h.write(b"\n");
        h.write(v.name.as_bytes());
        h.write(b"\n");
    }
    h.finish()
}

/// Before a start from scratch: a sink that sees committed output of an earlier run of
/// this job refuses the start when the user asked to restore (`--restore latest` found
/// nothing: the checkpoints are gone or elsewhere, and starting over would write those
/// rows again), and warns otherwise.
pub(crate) async fn check_earlier_output(
    graph: &JobGraph,
    opts: &JobOptions,
    info: impl Fn(&crate::graph::Vertex, usize) -> TaskInfo,
) -> Result<()> {
    for vertex in &graph.vertices {
        for sink in vertex.operators.iter().filter(|o| o.is_sink()) {
            let Some(found) = sink.earlier_output(&info(vertex, 0)).await? else {
                continue;
            };
            if opts.restore.is_some() {
                let dir = opts
                    .checkpoint_dir
                    .as_deref()
                    .map(crate::storage::display_location)
                    .unwrap_or_default();
                return Err(Error::Checkpoint(format!(
                    "--restore latest found no checkpoint under '{dir}', but {found}. Starting \
                     from scratch would write their rows again. Point --checkpoint-dir at that \
                     run's checkpoints, or run without --restore to start from scratch anyway"
                )));
            }
            tracing::warn!(
                "{found}; this run starts from scratch and adds its rows beside them \
                 (to continue that run instead, use --restore)"
            );
        }
    }
    Ok(())
}

/// The lineage of a run (see [`crate::CheckpointMetadata::lineage`]): the restored
/// checkpoint's; for a start from scratch on a checkpoint folder, one derived from the
/// folder and the job, which an earlier run of it that crashed before its first checkpoint
/// had too (what that run left uncommitted is then this run's to clean up); else the job
/// id.
pub(crate) fn lineage(
    restored: Option<&RestoredCheckpoint>,
    opts: &JobOptions,
    job_fingerprint: u64,
) -> String {
    match (restored, &opts.checkpoint_dir) {
        (Some(r), _) => r.metadata.lineage.clone(),
        (None, Some(dir)) => {
            use std::hash::Hasher;
            let mut h = twox_hash::XxHash64::with_seed(job_fingerprint);
            h.write(crate::storage::display_location(dir).as_bytes());
            format!("{:016x}", h.finish())
        }
        (None, None) => opts.job_id.to_string(),
    }
}
