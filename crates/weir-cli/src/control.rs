//! Job control over a local socket: `weir run` listens on
//! `<control-folder>/<job-id>.sock` (folder mode 0700, socket mode 0600: only its owner
//! can stop a job); `weir stop` and `weir list` talk to it, one JSON line each way.
//!
//! The control folder is `$WEIR_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/weir`, else
//! `<tmp>/weir-<uid>` — keyed by the numeric user id, never by `$USER`, which cron,
//! systemd units and containers often leave unset. Whoever can write into the folder can
//! answer `weir stop` in the job's place, so both sides refuse a folder that is a
//! symbolic link, is owned by another user or is open to anyone but its owner.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use weir::JobHandle;

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Where the control sockets of this user's jobs live (see the module docs).
fn runtime_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WEIR_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("weir");
    }
    std::env::temp_dir().join(format!("weir-{}", uid()))
}

/// Checks that `dir` is a real folder owned by this user and closed to everyone else.
fn check_runtime_dir(dir: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(dir)
        .with_context(|| format!("cannot read the control folder '{}'", dir.display()))?;
    let refuse = |why: String| {
        anyhow::anyhow!(
            "refusing the control folder '{}': {why}; whoever controls it could answer \
             `weir stop` in the job's place. Remove it, or point WEIR_RUNTIME_DIR at a \
             folder of your own",
            dir.display()
        )
    };
    if meta.file_type().is_symlink() {
        return Err(refuse("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refuse("it is not a folder".into()));
    }
    if meta.uid() != uid() {
        return Err(refuse(format!(
            "it belongs to user id {}, not to you (user id {})",
            meta.uid(),
            uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode != 0o700 {
        return Err(refuse(format!("its mode is {mode:o}, not 700")));
    }
    Ok(())
}

/// Creates the control folder if it is missing (the folder itself atomically with mode
/// 0700, so nobody can slip in between creating and closing it) and checks it. `weir run`
/// calls this before the job starts, so a folder it must refuse stops nothing half-way.
pub fn prepare() -> anyhow::Result<PathBuf> {
    let dir = runtime_dir();
    if let Some(parent) = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !p.exists())
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the control folder '{}'", dir.display()))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot create the control folder '{}'", dir.display()));
        }
    }
    check_runtime_dir(&dir)?;
    Ok(dir)
}

static STOPPED_WITH: OnceLock<String> = OnceLock::new();

/// The savepoint the job was stopped with, if it was.
pub fn stopped_with() -> Option<&'static String> {
    STOPPED_WITH.get()
}

/// Removes the socket file when `weir run` ends.
pub struct SocketGuard(PathBuf);

impl Drop for SocketGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Starts answering control requests for `job` in `dir` (from [`prepare`]).
pub fn serve(
    dir: &Path,
    job: &JobHandle,
    default_savepoint_dir: Option<String>,
) -> anyhow::Result<SocketGuard> {
    let path = dir.join(format!("{}.sock", job.job_id));
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on '{}'", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let controller = job.controller();
    let metrics = job.metrics.clone();
    let job_id = job.job_id.to_string();
    let socket = path.clone();
    tokio::spawn(async move {
        let mut ended = tokio::time::interval(std::time::Duration::from_millis(200));
        loop {
            // An ended job leaves the list at once, whoever started it (a shell runs on).
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = ended.tick() => {
                    if metrics.ended().is_some() {
                        let _ = std::fs::remove_file(&socket);
                        return;
                    }
                    continue;
                }
            };
            let Ok((stream, _)) = accepted else { return };
            let controller = controller.clone();
            let metrics = metrics.clone();
            let job_id = job_id.clone();
            let default_dir = default_savepoint_dir.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                if BufReader::new(read).read_line(&mut line).await.is_err() {
                    return;
                }
                let request: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                let reply = match request["command"].as_str() {
                    Some("status") => json!({
                        "ok": true,
                        "job": job_id,
                        "rows_in": metrics.rows_in(),
                        "rows_out": metrics.rows_out(),
                        "last_checkpoint": metrics.last_checkpoint(),
                        "state_bytes": metrics.state_bytes(),
                        "status": if metrics.is_restarting() { "RESTARTING" } else { "RUNNING" },
                        "restarts": metrics.restarts(),
                        "last_failure": metrics.last_failure().map(|(_, why)| why),
                    }),
                    Some("stop") => {
                        let drain = request["drain"].as_bool().unwrap_or(false);
                        let dir = request["savepoint_dir"]
                            .as_str()
                            .map(str::to_string)
                            .or(default_dir);
                        match dir {
                            None => {
                                json!({"ok": false, "error": "no savepoint folder: pass --savepoint-dir or SET 'execution.checkpointing.savepoint-dir'"})
                            }
                            Some(dir) => match controller.stop_with_savepoint(drain, &dir).await {
                                Ok(location) => {
                                    let _ = STOPPED_WITH.set(location.clone());
                                    json!({"ok": true, "savepoint": location})
                                }
                                Err(e) => {
                                    json!({"ok": false, "error": format!("{e}; the job keeps running")})
                                }
                            },
                        }
                    }
                    _ => json!({"ok": false, "error": "unknown request"}),
                };
                let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
            });
        }
    });
    Ok(SocketGuard(path))
}

async fn request(path: &PathBuf, body: Value) -> anyhow::Result<Value> {
    let stream = UnixStream::connect(path).await?;
    let (read, mut write) = stream.into_split();
    write.write_all(format!("{body}\n").as_bytes()).await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    Ok(serde_json::from_str(&line)?)
}

/// The control sockets of this user's jobs, after checking their folder.
fn sockets() -> anyhow::Result<Vec<PathBuf>> {
    let dir = runtime_dir();
    if std::fs::symlink_metadata(&dir).is_err() {
        return Ok(Vec::new());
    }
    check_runtime_dir(&dir)?;
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read the control folder '{}'", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    v.sort();
    Ok(v)
}

fn job_id_of(socket: &Path) -> String {
    socket
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The one socket whose job id is `job` or starts with it. An empty prefix, one that
/// matches nothing and one that matches several jobs are errors listing the jobs.
fn pick_job(job: &str, sockets: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let ids: Vec<String> = sockets.iter().map(|p| job_id_of(p)).collect();
    let listing = |ids: &[&String]| {
        if ids.is_empty() {
            "no job is running".to_string()
        } else {
            let ids: Vec<&str> = ids.iter().map(|s| s.as_str()).collect();
            format!("running jobs: {}", ids.join(", "))
        }
    };
    let all: Vec<&String> = ids.iter().collect();
    if job.trim().is_empty() {
        bail!("no job id given ({})", listing(&all));
    }
    if let Some(at) = ids.iter().position(|id| id == job) {
        return Ok(sockets[at].clone());
    }
    let matching: Vec<usize> = (0..ids.len())
        .filter(|&i| ids[i].starts_with(job))
        .collect();
    match matching.as_slice() {
        [one] => Ok(sockets[*one].clone()),
        [] => bail!("no running job '{job}' ({})", listing(&all)),
        many => {
            let ids: Vec<&String> = many.iter().map(|&i| &ids[i]).collect();
            bail!(
                "'{job}' matches {} jobs; give more of the id ({})",
                many.len(),
                listing(&ids)
            )
        }
    }
}

/// `weir stop JOB [--drain] [--savepoint-dir D]`.
pub async fn stop(job: &str, drain: bool, savepoint_dir: Option<String>) -> anyhow::Result<i32> {
    let path = pick_job(job, &sockets()?)?;
    let reply = request(
        &path,
        json!({"command": "stop", "drain": drain, "savepoint_dir": savepoint_dir}),
    )
    .await
    .with_context(|| format!("cannot reach job '{job}'"))?;
    if reply["ok"].as_bool() == Some(true) {
        out!(
            "Savepoint completed. Path: {}",
            reply["savepoint"].as_str().unwrap_or_default()
        );
        Ok(0)
    } else {
        bail!(
            "stop failed: {}",
            reply["error"].as_str().unwrap_or("unknown error")
        )
    }
}

/// `weir list`.
pub async fn list() -> anyhow::Result<i32> {
    for path in sockets()? {
        match request(&path, json!({"command": "status"})).await {
            Ok(s) => {
                out!(
                    "{}  {}  rows in {}  rows out {}  last checkpoint {}  state {:.1} MB  restarts {}",
                    s["job"].as_str().unwrap_or_default(),
                    s["status"].as_str().unwrap_or("RUNNING"),
                    s["rows_in"],
                    s["rows_out"],
                    s["last_checkpoint"],
                    s["state_bytes"].as_f64().unwrap_or(0.0) / 1e6,
                    s["restarts"].as_u64().unwrap_or(0)
                );
                if let Some(why) = s["last_failure"].as_str() {
                    out!("    last failure: {why}");
                }
            }
            // A socket nobody answers belongs to a job that was killed.
            Err(_) => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    Ok(0)
}
