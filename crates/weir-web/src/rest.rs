//! The REST API, shaped like Flink's where Flink has the endpoint, and the dashboard's
//! assets. Vertex ids are the vertices' positions in the job graph (`0`, `1`, …).
// Handlers answer errors with a ready response (axum's `Response`).
#![allow(clippy::result_large_err)]

use crate::{JobEntry, Jobs, SavepointOperation, TaskRates};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use weir_runtime::metrics::{TaskSample, VertexMetrics};

pub(crate) fn router(jobs: Arc<Jobs>) -> Router {
    Router::new()
        .route("/", get(|| asset("index.html")))
        .route("/app.js", get(|| asset("app.js")))
        .route("/style.css", get(|| asset("style.css")))
        .route("/config", get(config))
        .route("/overview", get(overview))
        .route("/taskmanagers", get(task_managers))
        .route("/metrics", get(crate::prometheus::metrics))
        .route("/jobs", get(jobs_list))
        .route("/jobs/overview", get(jobs_overview))
        .route("/jobs/{id}", get(job_details).patch(job_cancel))
        .route("/jobs/{id}/checkpoints", get(checkpoints))
        .route("/jobs/{id}/exceptions", get(exceptions))
        .route("/jobs/{id}/metrics-history", get(history))
        .route("/jobs/{id}/vertices/{vid}", get(vertex))
        .route("/jobs/{id}/vertices/{vid}/backpressure", get(backpressure))
        .route("/jobs/{id}/vertices/{vid}/watermarks", get(watermarks))
        .route("/jobs/{id}/stop", post(stop))
        .route("/jobs/{id}/savepoints/{rid}", get(savepoint_status))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "Not found.") })
        .with_state(jobs)
}

/// The dashboard's files, built into the binary.
async fn asset(name: &str) -> Response {
    let (body, kind) = match name {
        "index.html" => (
            include_str!("../assets/index.html"),
            "text/html; charset=utf-8",
        ),
        "app.js" => (
            include_str!("../assets/app.js"),
            "text/javascript; charset=utf-8",
        ),
        _ => (
            include_str!("../assets/style.css"),
            "text/css; charset=utf-8",
        ),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// Flink's error body: `{"errors": ["…"]}`.
fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "errors": [message] }))).into_response()
}

fn find(jobs: &Jobs, id: &str) -> Result<Arc<JobEntry>, Response> {
    jobs.get(id).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            &format!("Job {id} not found (see GET /jobs)."),
        )
    })
}

fn find_vertex(job: &JobEntry, vid: &str) -> Result<(usize, VertexMetrics), Response> {
    let vertices = job.metrics.vertices();
    vid.parse::<usize>()
        .ok()
        .and_then(|v| vertices.get(v).cloned().map(|m| (v, m)))
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                &format!(
                    "Vertex {vid} not found in job {}: vertices are 0 to {}.",
                    job.id,
                    vertices.len().saturating_sub(1)
                ),
            )
        })
}

async fn config() -> Json<Value> {
    Json(json!({
        "refresh-interval": crate::SAMPLE_EVERY.as_millis() as u64,
        "weir-version": env!("CARGO_PKG_VERSION"),
        "features": { "web-submit": false, "web-cancel": true },
    }))
}

/// Flink's cluster overview: task managers, slots and jobs by state.
async fn overview(State(jobs): State<Arc<Jobs>>) -> Json<Value> {
    let managers = jobs.task_managers();
    let all = jobs.all();
    let count = |s: crate::JobStatus| all.iter().filter(|j| j.status() == s).count();
    use crate::JobStatus as S;
    Json(json!({
        "taskmanagers": managers.len(),
        "slots-total": managers.iter().map(|m| m.slots).sum::<usize>(),
        "slots-available": managers.iter().map(|m| m.free_slots).sum::<usize>(),
        "jobs-running": count(S::Running) + count(S::Restarting),
        "jobs-finished": count(S::Finished),
        "jobs-cancelled": count(S::Canceled),
        "jobs-failed": count(S::Failed),
        "weir-version": env!("CARGO_PKG_VERSION"),
    }))
}

/// Flink's task manager list (`timeSinceLastHeartbeat` is, as in Flink, the time of the
/// last heartbeat in ms since the epoch).
async fn task_managers(State(jobs): State<Arc<Jobs>>) -> Json<Value> {
    let list: Vec<Value> = jobs
        .task_managers()
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "path": m.address,
                "dataPort": m.address.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).unwrap_or(0),
                "timeSinceLastHeartbeat": m.last_heartbeat_ms,
                "slotsNumber": m.slots,
                "freeSlots": m.free_slots,
            })
        })
        .collect();
    Json(json!({ "taskmanagers": list }))
}

async fn jobs_list(State(jobs): State<Arc<Jobs>>) -> Json<Value> {
    let list: Vec<Value> = jobs
        .all()
        .iter()
        .map(|j| json!({ "id": j.id, "status": j.status().as_str() }))
        .collect();
    Json(json!({ "jobs": list }))
}

fn times(job: &JobEntry) -> (u64, i64, u64) {
    let start = job
        .metrics
        .started_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    let end = job.end_ms();
    let now = weir_common::now_ms();
    let duration = end.unwrap_or(now).saturating_sub(start);
    (start, end.map(|e| e as i64).unwrap_or(-1), duration)
}

async fn jobs_overview(State(jobs): State<Arc<Jobs>>) -> Json<Value> {
    let list: Vec<Value> = jobs
        .all()
        .iter()
        .map(|j| {
            let (start, end, duration) = times(j);
            let vertices = j.metrics.vertices();
            json!({
                "jid": j.id,
                "name": j.name,
                "state": j.status().as_str(),
                "start-time": start,
                "end-time": end,
                "duration": duration,
                "restarts": j.metrics.restarts(),
                "tasks": { "total": vertices.iter().map(|v| v.parallelism).sum::<usize>() },
            })
        })
        .collect();
    Json(json!({ "jobs": list }))
}

/// Sums of a vertex's subtask counters, as Flink's `metrics` object of a vertex.
fn io_metrics(samples: &[TaskSample]) -> Value {
    let sum = |f: fn(&TaskSample) -> u64| samples.iter().map(f).sum::<u64>();
    json!({
        "read-records": sum(|s| s.records_in),
        "read-bytes": sum(|s| s.bytes_in),
        "write-records": sum(|s| s.records_out),
        "write-bytes": sum(|s| s.bytes_out),
    })
}

fn subtask_status(job: &JobEntry, s: &TaskSample) -> &'static str {
    match job.status() {
        crate::JobStatus::Running if s.finished => "FINISHED",
        crate::JobStatus::Restarting => "INITIALIZING",
        status => status.as_str(),
    }
}

fn wm(w: Option<i64>) -> Value {
    match w {
        Some(w) => json!(w),
        None => json!(i64::MIN),
    }
}

/// Flink's back-pressure level of a ratio of time back-pressured.
fn level(ratio: f64) -> &'static str {
    if ratio > 0.5 {
        "high"
    } else if ratio > 0.1 {
        "low"
    } else {
        "ok"
    }
}

fn vertex_json(job: &JobEntry, v: usize, vertex: &VertexMetrics, rates: &[TaskRates]) -> Value {
    let samples: Vec<TaskSample> = vertex.subtasks.iter().map(|t| t.sample()).collect();
    let max = |f: fn(&TaskRates) -> f64| rates.iter().map(f).fold(0.0, f64::max);
    let status = if samples.iter().all(|s| s.finished) && !samples.is_empty() {
        "FINISHED"
    } else {
        subtask_status(job, &TaskSample::default())
    };
    json!({
        "id": v.to_string(),
        "name": vertex.name,
        "uid": vertex.uid,
        "parallelism": vertex.parallelism,
        "status": status,
        "source": vertex.is_source,
        "sink": vertex.is_sink,
        "metrics": io_metrics(&samples),
        "records-in-per-second": rates.iter().map(|r| r.records_in_per_s).sum::<f64>(),
        "records-out-per-second": rates.iter().map(|r| r.records_out_per_s).sum::<f64>(),
        "busyTimeMsPerSecond": max(|r| r.busy_ms_per_s),
        "backPressuredTimeMsPerSecond": max(|r| r.backpressured_ms_per_s),
        "idleTimeMsPerSecond": max(|r| r.idle_ms_per_s),
        "backpressure-level": level(max(|r| r.backpressured_ms_per_s) / 1000.0),
        "state-size": samples.iter().map(|s| s.state_bytes).sum::<u64>(),
        "currentInputWatermark": wm(samples.iter().filter_map(|s| s.input_watermark).min()),
        "currentOutputWatermark": wm(samples.iter().filter_map(|s| s.output_watermark).min()),
    })
}

async fn job_details(
    State(jobs): State<Arc<Jobs>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let (start, end, duration) = times(&job);
    let rates = job.rates();
    let vertices = job.metrics.vertices();
    let edges = job.metrics.edges();
    let none = Vec::new();
    let vertex_list: Vec<Value> = vertices
        .iter()
        .enumerate()
        .map(|(v, m)| vertex_json(&job, v, m, rates.tasks.get(v).unwrap_or(&none)))
        .collect();
    let nodes: Vec<Value> = vertices
        .iter()
        .enumerate()
        .map(|(v, m)| {
            let inputs: Vec<Value> = edges
                .iter()
                .filter(|e| e.to == v)
                .enumerate()
                .map(|(num, e)| {
                    json!({ "num": num, "id": e.from.to_string(), "ship_strategy": e.partitioning })
                })
                .collect();
            json!({
                "id": v.to_string(),
                "parallelism": m.parallelism,
                "description": m.name,
                "inputs": inputs,
            })
        })
        .collect();
    let last_failure = job.metrics.last_failure();
    Ok(Json(json!({
        "jid": job.id,
        "name": job.name,
        "isStoppable": job.end_ms().is_none(),
        "state": job.status().as_str(),
        "start-time": start,
        "end-time": end,
        "duration": duration,
        "now": weir_common::now_ms(),
        "restarts": job.metrics.restarts(),
        "last-failure": last_failure.map(|(t, why)| json!({ "timestamp": t, "message": why })),
        "rows-in": job.metrics.rows_in(),
        "rows-out": job.metrics.rows_out(),
        "state-size": job.metrics.state_bytes(),
        "vertices": vertex_list,
        "plan": { "jid": job.id, "name": job.name, "nodes": nodes },
    })))
}

async fn job_cancel(
    State(jobs): State<Arc<Jobs>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, Response> {
    let job = find(&jobs, &id)?;
    match query.get("mode").map(String::as_str) {
        None | Some("cancel") => {}
        Some(other) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                &format!("Unknown mode '{other}': only 'cancel' is supported."),
            ));
        }
    }
    if job.end_ms().is_some() {
        return Err(error(
            StatusCode::CONFLICT,
            &format!("Job {id} has already ended ({}).", job.status().as_str()),
        ));
    }
    job.controller.cancel();
    Ok((StatusCode::ACCEPTED, Json(json!({}))).into_response())
}

async fn checkpoints(
    State(jobs): State<Arc<Jobs>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let h = job.metrics.checkpoint_history();
    let entry = |c: &weir_runtime::metrics::CheckpointStats| {
        json!({
            "id": c.id,
            "status": c.status.as_str(),
            "is_savepoint": c.savepoint,
            "trigger_timestamp": c.trigger_ms,
            "latest_ack_timestamp": c.trigger_ms + c.duration_ms,
            "end_to_end_duration": c.duration_ms,
            "state_size": c.state_size,
            "checkpointed_size": c.checkpointed_size,
            "num_subtasks": c.subtasks,
            "num_acknowledged_subtasks": c.acknowledged,
            "failure_message": c.failure,
        })
    };
    use weir_runtime::metrics::CheckpointStatus as S;
    let latest = |status: S| {
        h.recent
            .iter()
            .rev()
            .find(|c| c.status == status)
            .map(entry)
    };
    let completed: Vec<_> = h
        .recent
        .iter()
        .filter(|c| c.status == S::Completed)
        .collect();
    let stat = |f: fn(&weir_runtime::metrics::CheckpointStats) -> u64| {
        let values: Vec<u64> = completed.iter().map(|c| f(c)).collect();
        json!({
            "min": values.iter().min().copied().unwrap_or(0),
            "max": values.iter().max().copied().unwrap_or(0),
            "avg": if values.is_empty() { 0 } else { values.iter().sum::<u64>() / values.len() as u64 },
        })
    };
    let in_progress = h
        .recent
        .iter()
        .filter(|c| c.status == S::InProgress)
        .count();
    Ok(Json(json!({
        "counts": {
            "restored": h.restored,
            "total": h.completed + h.failed + in_progress as u64,
            "in_progress": in_progress,
            "completed": h.completed,
            "failed": h.failed,
        },
        "summary": {
            "end_to_end_duration": stat(|c| c.duration_ms),
            "state_size": stat(|c| c.state_size),
        },
        "latest": {
            "completed": latest(S::Completed),
            "failed": latest(S::Failed),
            "savepoint": h.recent.iter().rev().find(|c| c.savepoint && c.status == S::Completed).map(entry),
            "restored": h.latest_restored.as_ref().map(|(id, location)| json!({ "id": id, "external_path": location })),
        },
        "history": h.recent.iter().rev().map(entry).collect::<Vec<_>>(),
    })))
}

async fn exceptions(
    State(jobs): State<Arc<Jobs>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let failures = job.metrics.failures();
    let entries: Vec<Value> = failures
        .iter()
        .rev()
        .map(
            |(t, why)| json!({ "exceptionName": "weir::Error", "stacktrace": why, "timestamp": t }),
        )
        .collect();
    let root = failures.last();
    Ok(Json(json!({
        "root-exception": root.map(|(_, why)| why.clone()),
        "timestamp": root.map(|(t, _)| *t),
        "exceptionHistory": { "entries": entries, "truncated": false },
    })))
}

async fn history(
    State(jobs): State<Arc<Jobs>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let points: Vec<Value> = job
        .rates()
        .chart
        .iter()
        .map(|p| {
            json!({
                "timestamp": p.at_ms,
                "records-in-per-second": p.in_per_s,
                "records-out-per-second": p.out_per_s,
                "watermark-lag": p.watermark_lag_ms,
            })
        })
        .collect();
    Ok(Json(json!({ "points": points })))
}

async fn vertex(
    State(jobs): State<Arc<Jobs>>,
    Path((id, vid)): Path<(String, String)>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let (v, vertex) = find_vertex(&job, &vid)?;
    let rates = job.rates();
    let hosts = jobs.hosts(&job.id, v);
    let subtasks: Vec<Value> = vertex
        .subtasks
        .iter()
        .enumerate()
        .map(|(s, t)| {
            let sample = t.sample();
            let r = rates.task(v, s);
            json!({
                "subtask": s,
                "host": match &hosts {
                    Some(on) => json!(on.get(s)),
                    None => json!("localhost"),
                },
                "status": subtask_status(&job, &sample),
                "attempt": job.metrics.restarts(),
                "metrics": io_metrics(&[sample]),
                "records-in-per-second": r.records_in_per_s,
                "records-out-per-second": r.records_out_per_s,
                "busyTimeMsPerSecond": r.busy_ms_per_s,
                "backPressuredTimeMsPerSecond": r.backpressured_ms_per_s,
                "idleTimeMsPerSecond": r.idle_ms_per_s,
                "currentInputWatermark": wm(sample.input_watermark),
                "currentOutputWatermark": wm(sample.output_watermark),
                "state-size": sample.state_bytes,
                "checkpointAlignmentTime": sample.alignment_ms,
            })
        })
        .collect();
    Ok(Json(json!({
        "id": v.to_string(),
        "name": vertex.name,
        "parallelism": vertex.parallelism,
        "now": weir_common::now_ms(),
        "subtasks": subtasks,
    })))
}

async fn backpressure(
    State(jobs): State<Arc<Jobs>>,
    Path((id, vid)): Path<(String, String)>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let (v, vertex) = find_vertex(&job, &vid)?;
    let rates = job.rates();
    let subtasks: Vec<Value> = (0..vertex.parallelism)
        .map(|s| {
            let r = rates.task(v, s);
            let ratio = r.backpressured_ms_per_s / 1000.0;
            json!({
                "subtask": s,
                "backpressure-level": level(ratio),
                "ratio": ratio,
                "idleRatio": r.idle_ms_per_s / 1000.0,
                "busyRatio": r.busy_ms_per_s / 1000.0,
            })
        })
        .collect();
    let worst = subtasks
        .iter()
        .filter_map(|s| s["ratio"].as_f64())
        .fold(0.0, f64::max);
    Ok(Json(json!({
        "status": "ok",
        "backpressure-level": level(worst),
        "end-timestamp": weir_common::now_ms(),
        "subtasks": subtasks,
    })))
}

async fn watermarks(
    State(jobs): State<Arc<Jobs>>,
    Path((id, vid)): Path<(String, String)>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let (_, vertex) = find_vertex(&job, &vid)?;
    let list: Vec<Value> = vertex
        .subtasks
        .iter()
        .enumerate()
        .flat_map(|(s, t)| {
            let sample = t.sample();
            [
                json!({ "id": format!("{s}.currentInputWatermark"), "value": wm(sample.input_watermark).to_string() }),
                json!({ "id": format!("{s}.currentOutputWatermark"), "value": wm(sample.output_watermark).to_string() }),
            ]
        })
        .collect();
    Ok(Json(Value::Array(list)))
}

/// `POST /jobs/{id}/stop` with `{"drain": bool, "targetDirectory": "…"}`: starts a stop
/// with a savepoint and answers at once with a request id (`202`), as Flink does.
async fn stop(
    State(jobs): State<Arc<Jobs>>,
    Path(id): Path<String>,
    body: Option<Json<Value>>,
) -> Result<Response, Response> {
    let job = find(&jobs, &id)?;
    let body = body.map(|Json(b)| b).unwrap_or(Value::Null);
    let drain = body["drain"].as_bool().unwrap_or(false);
    let Some(dir) = body["targetDirectory"]
        .as_str()
        .map(str::to_string)
        .or_else(|| job.savepoint_dir.clone())
    else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "No savepoint folder: give \"targetDirectory\" or SET 'execution.checkpointing.savepoint-dir'.",
        ));
    };
    if job.end_ms().is_some() {
        return Err(error(
            StatusCode::CONFLICT,
            &format!("Job {id} has already ended ({}).", job.status().as_str()),
        ));
    }
    let request = uuid::Uuid::new_v4().simple().to_string();
    job.savepoints
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(request.clone(), SavepointOperation::InProgress);
    let (job2, request2) = (job.clone(), request.clone());
    tokio::spawn(async move {
        let result = job2.controller.stop_with_savepoint(drain, &dir).await;
        let op = match result {
            Ok(location) => SavepointOperation::Completed(location),
            Err(e) => SavepointOperation::Failed(format!("{e}; the job keeps running")),
        };
        job2.savepoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request2, op);
    });
    Ok((StatusCode::ACCEPTED, Json(json!({ "request-id": request }))).into_response())
}

async fn savepoint_status(
    State(jobs): State<Arc<Jobs>>,
    Path((id, rid)): Path<(String, String)>,
) -> Result<Json<Value>, Response> {
    let job = find(&jobs, &id)?;
    let op = job
        .savepoints
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&rid)
        .cloned()
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                &format!("No savepoint request {rid} for job {id}."),
            )
        })?;
    Ok(Json(match op {
        SavepointOperation::InProgress => json!({ "status": { "id": "IN_PROGRESS" } }),
        SavepointOperation::Completed(location) => json!({
            "status": { "id": "COMPLETED" },
            "operation": { "location": location },
        }),
        SavepointOperation::Failed(why) => json!({
            "status": { "id": "COMPLETED" },
            "operation": { "failure-cause": { "class": "weir::Error", "stack-trace": why } },
        }),
    }))
}
