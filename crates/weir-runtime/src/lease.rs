//! An exclusive claim (lease) on a checkpoint folder, so that two runs of one job never
//! run at once: both would restore the same checkpoint and commit the same rows.
//!
//! The claim is the object `<checkpoint-dir>/_lease`, which names its holder (job id,
//! process, host) for the error a second run gets.
//!
//! * **Local folder**: the file is locked with the operating system's exclusive file lock
//!   for the life of the run. The kernel releases it when the process ends, even by
//!   SIGKILL, so a restart claims it at once. Before each commit the run checks that the
//!   file at that path is still the one it locked: when the folder was deleted and
//!   another run created a new one, this run is fenced.
//! * **Object store** (S3 and friends): the object is created with a conditional put
//!   (`If-None-Match`) and renewed every `timeout / 4` with a put conditional on the
//!   version last written (`If-Match`). A claim not renewed for `timeout` may be taken
//!   over, conditionally, so two runs cannot both take it; a claim whose holder process
//!   is gone from this host is taken over at once. A run whose renewal was refused (it
//!   was taken over) or is overdue by `timeout / 2` is fenced.
//!
//! A fenced run completes no checkpoint and commits nothing: [`Fence::check`] fails, and
//! with it the job.

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_common::{Error, JobId, Result};

const LEASE_FILE: &str = "_lease";

/// Who holds a lease, as written in the lease object.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Holder {
    job_id: String,
    host: String,
    pid: u32,
    /// Start time of the process (clock ticks since boot, Linux), against pid reuse.
    process_start: Option<u64>,
    since_ms: u64,
}

impl Holder {
    fn me(job_id: JobId) -> Self {
        let pid = std::process::id();
        Self {
            job_id: job_id.to_string(),
            host: host_name(),
            pid,
            process_start: process_start(pid),
            since_ms: weir_common::now_ms(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "job {} (process {} on host '{}', claimed {:.0}s ago)",
            self.job_id,
            self.pid,
            self.host,
            weir_common::now_ms().saturating_sub(self.since_ms) as f64 / 1000.0
        )
    }

    /// The holder ran on this host and its process is gone.
    fn gone_from_this_host(&self) -> bool {
        self.host == host_name() && process_start(self.pid) != self.process_start
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// Start time of process `pid` (field 22 of `/proc/<pid>/stat`); `None` if there is no
/// such process (or no `/proc`).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Leases on object stores held by this process: a lease there naming this process but
/// not in this set was left by a job of this process that was cancelled.
fn held_here() -> &'static Mutex<HashSet<String>> {
    static HELD: std::sync::OnceLock<Mutex<HashSet<String>>> = std::sync::OnceLock::new();
    HELD.get_or_init(Default::default)
}

/// Whether this run may still commit. Cheap to clone; a run without a checkpoint folder
/// (checkpoints in memory) has the default fence, which never fails.
#[derive(Clone, Default)]
pub struct Fence(Option<Arc<FenceState>>);

struct FenceState {
    folder: String,
    kind: FenceKind,
    /// Why the run was fenced, once it was.
    fenced: Mutex<Option<String>>,
}

enum FenceKind {
    /// The locked file: its path and (device, inode).
    Local {
        path: std::path::PathBuf,
        id: (u64, u64),
    },
    Store {
        last_renewed: Mutex<Instant>,
        timeout: Duration,
    },
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Fence(none)"),
            Some(s) => write!(f, "Fence({})", s.folder),
        }
    }
}

impl Fence {
    /// Fails when this run no longer holds its checkpoint folder's lease.
    pub fn check(&self) -> Result<()> {
        let Some(state) = &self.0 else { return Ok(()) };
        let fenced = |why: String| {
            Error::Checkpoint(format!(
                "this run no longer holds the checkpoint folder '{}' ({why}); it commits \
                 nothing more",
                state.folder
            ))
        };
        if let Some(why) = state.fenced.lock().expect("fence lock").clone() {
            return Err(fenced(why));
        }
        match &state.kind {
            FenceKind::Local { path, id } => {
                use std::os::unix::fs::MetadataExt;
                match std::fs::metadata(path) {
                    Ok(m) if (m.dev(), m.ino()) == *id => Ok(()),
                    Ok(_) => Err(fenced(format!(
                        "'{}' was replaced by another run's",
                        path.display()
                    ))),
                    Err(e) => Err(fenced(format!("'{}': {e}", path.display()))),
                }
            }
            FenceKind::Store {
                last_renewed,
                timeout,
            } => {
                let since = last_renewed.lock().expect("fence lock").elapsed();
                if since > *timeout / 2 {
                    return Err(fenced(format!(
                        "its lease was last renewed {:.1}s ago",
                        since.as_secs_f64()
                    )));
                }
                Ok(())
            }
        }
    }

    fn fence(&self, why: String) {
        if let Some(state) = &self.0 {
            *state.fenced.lock().expect("fence lock") = Some(why);
        }
    }
}

/// A held lease; released when dropped (see [`Lease::release`] to wait for it).
pub struct Lease {
    fence: Fence,
    /// The locked file of a local lease (the lock goes with it).
    _file: Option<std::fs::File>,
    /// Object-store lease: the store, the object and the renewal task.
    store: Option<(Arc<dyn ObjectStore>, Path, tokio::task::JoinHandle<()>)>,
}

impl Lease {
    /// Claims the checkpoint folder `dir` for job `job_id`, or fails naming its holder.
    pub async fn acquire(dir: &str, job_id: JobId, timeout: Duration) -> Result<Lease> {
        let location = crate::storage::resolve(dir, true, &Default::default())?;
        let shown = crate::storage::display_location(dir);
        match location.local {
            Some(folder) => Self::acquire_local(&folder, &shown, job_id),
            None => {
                Self::acquire_in_store(location.store, location.path, &shown, job_id, timeout).await
            }
        }
    }

    fn in_use(shown: &str, holder: &str) -> Error {
        Error::Checkpoint(format!(
            "the checkpoint folder '{shown}' is in use by {holder}. Two runs restoring the \
             same checkpoints would both commit their rows: stop that run first (`weir stop`), \
             or give this one its own --checkpoint-dir"
        ))
    }

    fn acquire_local(folder: &std::path::Path, shown: &str, job_id: JobId) -> Result<Lease> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::fs::MetadataExt;
        let path = folder.join(LEASE_FILE);
        let io = |e: std::io::Error| Error::external(format!("'{}': {e}", path.display()));
        // The holder removes the file when it ends: a file locked just after its removal
        // is not the one at the path any more, so try again.
        for _ in 0..10 {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    // The holder writes its name just after locking: give it a moment.
                    let mut holder = None;
                    for _ in 0..20 {
                        let mut text = String::new();
                        let _ = file.rewind().and_then(|_| file.read_to_string(&mut text));
                        holder = serde_json::from_str::<Holder>(&text).ok();
                        if holder.is_some() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let holder = holder.map_or_else(|| "another run".into(), |h| h.describe());
                    return Err(Self::in_use(shown, &holder));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
            let m = file.metadata().map_err(io)?;
            let id = (m.dev(), m.ino());
            let at_path = std::fs::metadata(&path).map(|m| (m.dev(), m.ino()));
            if at_path.ok() != Some(id) {
                continue;
            }
            let me = serde_json::to_vec(&Holder::me(job_id))?;
            file.set_len(0).map_err(io)?;
            file.rewind().map_err(io)?;
            file.write_all(&me).map_err(io)?;
            return Ok(Lease {
                fence: Fence(Some(Arc::new(FenceState {
                    folder: shown.to_string(),
                    kind: FenceKind::Local { path, id },
                    fenced: Mutex::new(None),
                }))),
                _file: Some(file),
                store: None,
            });
        }
        Err(Error::external(format!(
            "cannot lock '{}': it keeps being replaced",
            path.display()
        )))
    }

    async fn acquire_in_store(
        store: Arc<dyn ObjectStore>,
        base: Path,
        shown: &str,
        job_id: JobId,
        timeout: Duration,
    ) -> Result<Lease> {
        let path = base.join(LEASE_FILE);
        let body = || -> Result<PutPayload> {
            Ok(PutPayload::from(serde_json::to_vec(&Holder::me(job_id))?))
        };
        let key = format!("{shown}/{LEASE_FILE}");
        let put = |mode: PutMode| {
            let (store, path) = (store.clone(), path.clone());
            let payload = body();
            async move {
                let options = PutOptions {
                    mode,
                    ..Default::default()
                };
                store
                    .put_opts(&path, payload?, options)
                    .await
                    .map_err(Error::from)
            }
        };
        let created = match put(PutMode::Create).await {
            Ok(r) => r,
            Err(Error::ObjectStore(object_store::Error::AlreadyExists { .. })) => {
                let current = store.get(&path).await?;
                let version = UpdateVersion {
                    e_tag: current.meta.e_tag.clone(),
                    version: current.meta.version.clone(),
                };
                let written = current.meta.last_modified.timestamp_millis().max(0) as u64;
                let holder = serde_json::from_slice::<Holder>(&current.bytes().await?).ok();
                let silent_ms = weir_common::now_ms().saturating_sub(written);
                let description = holder
                    .as_ref()
                    .map(|h| h.describe())
                    .unwrap_or_else(|| "another run".into());
                let cancelled_here = holder.as_ref().is_some_and(|h| {
                    h.pid == std::process::id()
                        && h.host == host_name()
                        && !held_here().lock().expect("lease set").contains(&key)
                });
                let gone = holder.as_ref().is_some_and(|h| h.gone_from_this_host());
                if !(gone || cancelled_here || silent_ms > timeout.as_millis() as u64) {
                    return Err(Self::in_use(
                        shown,
                        &format!(
                            "{description}, last renewed {:.1}s ago (a lease is free once not \
                             renewed for {:.0}s)",
                            silent_ms as f64 / 1000.0,
                            timeout.as_secs_f64()
                        ),
                    ));
                }
                let why = if gone || cancelled_here {
                    "its process is gone".to_string()
                } else {
                    format!("not renewed for {:.1}s", silent_ms as f64 / 1000.0)
                };
                match put(PutMode::Update(version)).await {
                    Ok(r) => {
                        tracing::warn!(
                            "took over the checkpoint folder '{shown}' from {description}: {why}"
                        );
                        r
                    }
                    Err(Error::ObjectStore(object_store::Error::Precondition { .. })) => {
                        return Err(Self::in_use(shown, "another run that claimed it just now"));
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(Error::ObjectStore(e @ object_store::Error::NotImplemented { .. })) => {
                return Err(Error::config(format!(
                    "the checkpoint folder '{shown}' is on a store without conditional writes \
                     ({e}); Weir needs them to keep two runs of a job apart"
                )));
            }
            Err(e) => return Err(e),
        };
        held_here().lock().expect("lease set").insert(key.clone());
        let fence = Fence(Some(Arc::new(FenceState {
            folder: shown.to_string(),
            kind: FenceKind::Store {
                last_renewed: Mutex::new(Instant::now()),
                timeout,
            },
            fenced: Mutex::new(None),
        })));
        let renewal = {
            let (store, path, fence) = (store.clone(), path.clone(), fence.clone());
            let mut version = UpdateVersion {
                e_tag: created.e_tag,
                version: created.version,
            };
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(timeout / 4).await;
                    let payload = match serde_json::to_vec(&Holder::me(job_id)) {
                        Ok(b) => PutPayload::from(b),
                        Err(_) => continue,
                    };
                    let options = PutOptions {
                        mode: PutMode::Update(version.clone()),
                        ..Default::default()
                    };
                    match store.put_opts(&path, payload, options).await {
                        Ok(r) => {
                            version = UpdateVersion {
                                e_tag: r.e_tag,
                                version: r.version,
                            };
                            if let Some(FenceKind::Store { last_renewed, .. }) =
                                fence.0.as_ref().map(|s| &s.kind)
                            {
                                *last_renewed.lock().expect("fence lock") = Instant::now();
                            }
                        }
                        Err(object_store::Error::Precondition { .. }) => {
                            tracing::warn!("another run took over the lease '{path}'");
                            fence.fence("another run took over its lease".into());
                            return;
                        }
                        Err(e) => tracing::warn!("cannot renew the lease '{path}': {e}"),
                    }
                }
            })
        };
        Ok(Lease {
            fence,
            _file: None,
            store: Some((store, path, renewal)),
        })
    }

    /// The fence that tells whether this lease is still held.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Gives the lease up (the next run may claim it at once) and removes its file.
    pub async fn release(mut self) {
        if let Some(FenceKind::Local { path, .. }) = self.fence.0.as_ref().map(|s| &s.kind)
            && self.fence.check().is_ok()
        {
            // Still locked: a run that opens the file now finds it locked, or finds it
            // removed once it holds the lock and tries again.
            let _ = std::fs::remove_file(path);
        }
        if let Some((store, path, renewal)) = self.store.take() {
            renewal.abort();
            if self.fence.check().is_ok() {
                let _ = store.delete(&path).await;
            }
            self.forget();
        }
    }

    fn forget(&self) {
        if let Some(state) = &self.fence.0 {
            held_here()
                .lock()
                .expect("lease set")
                .remove(&format!("{}/{LEASE_FILE}", state.folder));
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some((_, _, renewal)) = self.store.take() {
            // A cancelled job: the object stays until it expires, but this process knows
            // it holds it no more (see `held_here`).
            renewal.abort();
            self.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_local_folder_is_held_by_one_run_and_a_replaced_lease_fences_it() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().to_str().unwrap();
        let timeout = Duration::from_secs(30);
        let first = Lease::acquire(folder, JobId::new(), timeout).await.unwrap();
        let err = Lease::acquire(folder, JobId::new(), timeout)
            .await
            .err()
            .expect("a second claim was granted");
        assert!(err.to_string().contains("is in use by job"), "{err}");
        assert!(first.fence().check().is_ok());
        // The folder is emptied and another run claims it: the first one is fenced.
        std::fs::remove_file(dir.path().join(LEASE_FILE)).unwrap();
        let second = Lease::acquire(folder, JobId::new(), timeout).await.unwrap();
        let err = first.fence().check().unwrap_err();
        assert!(err.to_string().contains("no longer holds"), "{err}");
        drop(first);
        assert!(second.fence().check().is_ok());
        second.release().await;
        assert!(!dir.path().join(LEASE_FILE).exists());
        Lease::acquire(folder, JobId::new(), timeout).await.unwrap();
    }

    #[tokio::test]
    async fn a_store_lease_is_exclusive_renewed_and_taken_over_when_expired() {
        let folder = format!("memory://lease-test-{}", uuid::Uuid::new_v4().simple());
        let timeout = Duration::from_millis(400);
        let first = Lease::acquire(&folder, JobId::new(), timeout)
            .await
            .unwrap();
        let err = Lease::acquire(&folder, JobId::new(), timeout)
            .await
            .err()
            .expect("a second claim was granted");
        assert!(err.to_string().contains("is in use by job"), "{err}");
        // Renewed: still held and exclusive well after the timeout.
        tokio::time::sleep(timeout * 3).await;
        assert!(first.fence().check().is_ok());
        assert!(
            Lease::acquire(&folder, JobId::new(), timeout)
                .await
                .is_err()
        );
        // A job of this process that was cancelled (dropped) frees it at once.
        drop(first);
        let second = Lease::acquire(&folder, JobId::new(), timeout)
            .await
            .unwrap();
        second.release().await;
        let third = Lease::acquire(&folder, JobId::new(), timeout)
            .await
            .unwrap();
        assert!(third.fence().check().is_ok());
        third.release().await;
        // A holder on another host is waited for until its lease was not renewed for the
        // timeout; then it is taken over.
        let location = crate::storage::resolve(&folder, true, &Default::default()).unwrap();
        let elsewhere = Holder {
            host: "elsewhere".into(),
            ..Holder::me(JobId::new())
        };
        location
            .store
            .put(
                &location.path.join(LEASE_FILE),
                PutPayload::from(serde_json::to_vec(&elsewhere).unwrap()),
            )
            .await
            .unwrap();
        let err = Lease::acquire(&folder, JobId::new(), timeout)
            .await
            .err()
            .expect("a live lease of another host was taken");
        assert!(err.to_string().contains("'elsewhere'"), "{err}");
        tokio::time::sleep(timeout + Duration::from_millis(100)).await;
        Lease::acquire(&folder, JobId::new(), timeout)
            .await
            .unwrap();
    }
}
