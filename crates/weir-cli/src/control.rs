//! Job control over a local socket: `weir run` listens on
//! `<runtime-dir>/<job-id>.sock` (folder mode 0700, socket mode 0600: only its owner can
//! stop a job); `weir stop` and `weir list` talk to it, one JSON line each way.
//!
//! The runtime folder is `$WEIR_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/weir`, else
//! `/tmp/weir-$USER`.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::OnceLock;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use weir::JobHandle;

fn runtime_dir() -> PathBuf {
    if let Ok(d) = std::env::var("WEIR_RUNTIME_DIR") {
        return PathBuf::from(d);
    }
    if let Ok(d) = std::env::var("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("weir");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    std::env::temp_dir().join(format!("weir-{user}"))
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

/// Starts answering control requests for `job`.
pub fn serve(
    job: &JobHandle,
    default_savepoint_dir: Option<String>,
) -> anyhow::Result<SocketGuard> {
    let dir = runtime_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create the control folder '{}'", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let path = dir.join(format!("{}.sock", job.job_id));
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on '{}'", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let controller = job.controller();
    let metrics = job.metrics.clone();
    let job_id = job.job_id.to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
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

fn sockets() -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(runtime_dir()) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    v.sort();
    v
}

/// `weir stop JOB [--drain] [--savepoint-dir D]`.
pub async fn stop(job: &str, drain: bool, savepoint_dir: Option<String>) -> anyhow::Result<i32> {
    let matching: Vec<PathBuf> = sockets()
        .into_iter()
        .filter(|p| {
            p.file_stem()
                .is_some_and(|s| s.to_string_lossy().starts_with(job))
        })
        .collect();
    let path = match matching.as_slice() {
        [one] => one.clone(),
        [] => bail!("no running job '{job}' (see `weir list`)"),
        _ => bail!(
            "'{job}' matches {} jobs; give more of the id",
            matching.len()
        ),
    };
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
    for path in sockets() {
        match request(&path, json!({"command": "status"})).await {
            Ok(s) => out!(
                "{}  rows in {}  rows out {}  last checkpoint {}  state {:.1} MB",
                s["job"].as_str().unwrap_or_default(),
                s["rows_in"],
                s["rows_out"],
                s["last_checkpoint"],
                s["state_bytes"].as_f64().unwrap_or(0.0) / 1e6
            ),
            // A socket nobody answers belongs to a job that was killed.
            Err(_) => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    Ok(0)
}
