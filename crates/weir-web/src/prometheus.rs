//! The Prometheus text endpoint. Metric names are Flink's (`numRecordsIn`,
//! `busyTimeMsPerSecond`, `numRestarts`, …) under the `weir_job_` and `weir_task_`
//! prefixes; labels name the job (`job_id`, `job_name`) and, for tasks, the vertex
//! (`task_name`, `vertex_id`) and `subtask_index`. Values are read at scrape time.

use crate::Jobs;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::sync::Arc;

pub(crate) fn router(jobs: Arc<Jobs>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(metrics))
        .with_state(jobs)
}

pub(crate) async fn metrics(State(jobs): State<Arc<Jobs>>) -> impl IntoResponse {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(JobsCollector(jobs)));
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::warn!("cannot encode the metrics: {e}");
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}

#[derive(Clone)]
struct JobsCollector(Arc<Jobs>);

impl std::fmt::Debug for JobsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobsCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

/// One metric family: its rows, each a label set and a value.
enum Family {
    Counter(Vec<(Labels, u64)>),
    Gauge(Vec<(Labels, f64)>),
}

impl Collector for JobsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut families: Vec<(&str, &str, Family)> = Vec::new();
        let jobs = self.0.all();
        let job_labels = |j: &crate::JobEntry| -> Labels {
            vec![("job_id", j.id.clone()), ("job_name", j.name.clone())]
        };
        let job_counter = |f: fn(&crate::JobEntry) -> u64| {
            Family::Counter(jobs.iter().map(|j| (job_labels(j), f(j))).collect())
        };
        let job_gauge = |f: fn(&crate::JobEntry) -> f64| {
            Family::Gauge(jobs.iter().map(|j| (job_labels(j), f(j))).collect())
        };
        families.push((
            "weir_job_uptime",
            "Time since the job started, ms.",
            job_gauge(|j| {
                let start = j
                    .metrics
                    .started_ms
                    .load(std::sync::atomic::Ordering::Relaxed);
                j.end_ms()
                    .unwrap_or_else(weir_common::now_ms)
                    .saturating_sub(start) as f64
            }),
        ));
        families.push((
            "weir_job_running",
            "1 while the job runs (or restarts), 0 once it ended.",
            job_gauge(|j| if j.end_ms().is_none() { 1.0 } else { 0.0 }),
        ));
        families.push((
            "weir_job_numRestarts",
            "Restarts after failures.",
            job_counter(|j| j.metrics.restarts()),
        ));
        families.push((
            "weir_job_numberOfCompletedCheckpoints",
            "Completed checkpoints.",
            job_counter(|j| j.metrics.checkpoint_history().completed),
        ));
        families.push((
            "weir_job_numberOfFailedCheckpoints",
            "Failed (aborted) checkpoints.",
            job_counter(|j| j.metrics.checkpoint_history().failed),
        ));
        families.push((
            "weir_job_lastCheckpointDuration",
            "Duration of the last completed checkpoint, ms.",
            job_gauge(|j| {
                j.metrics
                    .last_checkpoint_ms
                    .load(std::sync::atomic::Ordering::Relaxed) as f64
            }),
        ));
        families.push((
            "weir_job_lastCheckpointSize",
            "Bytes the last completed checkpoint wrote (less than its full size when \
             incremental).",
            job_gauge(|j| last_completed(j, |c| c.checkpointed_size)),
        ));
        families.push((
            "weir_job_lastCheckpointFullSize",
            "Bytes of state the last completed checkpoint refers to, written now or before.",
            job_gauge(|j| last_completed(j, |c| c.state_size)),
        ));
        families.push((
            "weir_job_numRecordsInErrors",
            "Records (or fields) skipped as unreadable.",
            job_counter(|j| j.metrics.records_in_errors()),
        ));

        // Per subtask: counters read now, rates from the last sample.
        let mut rows: Vec<(Labels, weir_runtime::metrics::TaskSample, crate::TaskRates)> =
            Vec::new();
        for j in &jobs {
            let rates = j.rates();
            for (v, vertex) in j.metrics.vertices().iter().enumerate() {
                for (s, t) in vertex.subtasks.iter().enumerate() {
                    let mut labels = job_labels(j);
                    labels.push(("task_name", vertex.name.clone()));
                    labels.push(("vertex_id", v.to_string()));
                    labels.push(("subtask_index", s.to_string()));
                    let r = rates.task(v, s);
                    rows.push((labels, t.sample(), r));
                }
            }
        }
        let counter = |f: fn(&weir_runtime::metrics::TaskSample) -> u64| {
            Family::Counter(rows.iter().map(|(l, s, _)| (l.clone(), f(s))).collect())
        };
        let rate = |f: fn(&crate::TaskRates) -> f64| {
            Family::Gauge(rows.iter().map(|(l, _, r)| (l.clone(), f(r))).collect())
        };
        let gauge = |f: fn(&weir_runtime::metrics::TaskSample) -> Option<f64>| {
            Family::Gauge(
                rows.iter()
                    .filter_map(|(l, s, _)| f(s).map(|v| (l.clone(), v)))
                    .collect(),
            )
        };
        let now = weir_common::now_ms() as f64;
        families.extend([
            (
                "weir_task_numRecordsIn",
                "Rows into the subtask.",
                counter(|s| s.records_in),
            ),
            (
                "weir_task_numRecordsOut",
                "Rows out of the subtask.",
                counter(|s| s.records_out),
            ),
            (
                "weir_task_numBytesIn",
                "Arrow bytes into the subtask.",
                counter(|s| s.bytes_in),
            ),
            (
                "weir_task_numBytesOut",
                "Arrow bytes out of the subtask.",
                counter(|s| s.bytes_out),
            ),
            (
                "weir_task_numRecordsInPerSecond",
                "Rows into the subtask per second.",
                rate(|r| r.records_in_per_s),
            ),
            (
                "weir_task_numRecordsOutPerSecond",
                "Rows out of the subtask per second.",
                rate(|r| r.records_out_per_s),
            ),
            (
                "weir_task_busyTimeMsPerSecond",
                "Time busy, ms per second.",
                rate(|r| r.busy_ms_per_s),
            ),
            (
                "weir_task_backPressuredTimeMsPerSecond",
                "Time back-pressured (waiting for full output channels), ms per second.",
                rate(|r| r.backpressured_ms_per_s),
            ),
            (
                "weir_task_idleTimeMsPerSecond",
                "Time waiting for input, ms per second.",
                rate(|r| r.idle_ms_per_s),
            ),
            (
                "weir_task_currentInputWatermark",
                "The subtask's combined input watermark, ms since the epoch.",
                gauge(|s| s.input_watermark.map(|w| w as f64)),
            ),
            (
                "weir_task_currentOutputWatermark",
                "The last watermark the subtask sent, ms since the epoch.",
                gauge(|s| s.output_watermark.map(|w| w as f64)),
            ),
            (
                "weir_task_stateSize",
                "Operator state at the last snapshot, bytes.",
                gauge(|s| Some(s.state_bytes as f64)),
            ),
            (
                "weir_task_checkpointAlignmentTime",
                "Barrier alignment of the last checkpoint, ms.",
                gauge(|s| Some(s.alignment_ms as f64)),
            ),
        ]);
        let lag = Family::Gauge(
            rows.iter()
                .filter(|(_, s, _)| !s.finished)
                .filter_map(|(l, s, _)| {
                    s.output_watermark
                        .or(s.input_watermark)
                        .filter(|w| *w != weir_common::MAX_WATERMARK)
                        .map(|w| (l.clone(), now - w as f64))
                })
                .collect(),
        );
        families.push((
            "weir_task_watermarkLag",
            "Processing time minus the subtask's watermark, ms.",
            lag,
        ));

        for (name, help, family) in families {
            match family {
                Family::Counter(rows) => {
                    let mut m = encoder.encode_descriptor(
                        name,
                        help,
                        None,
                        prometheus_client::metrics::MetricType::Counter,
                    )?;
                    for (labels, v) in rows {
                        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
                    }
                }
                Family::Gauge(rows) => {
                    let mut m = encoder.encode_descriptor(
                        name,
                        help,
                        None,
                        prometheus_client::metrics::MetricType::Gauge,
                    )?;
                    for (labels, v) in rows {
                        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A figure of the job's last completed checkpoint (0 before the first).
fn last_completed(
    j: &crate::JobEntry,
    f: fn(&weir_runtime::metrics::CheckpointStats) -> u64,
) -> f64 {
    let h = j.metrics.checkpoint_history();
    h.recent
        .iter()
        .rev()
        .find(|c| c.status == weir_runtime::metrics::CheckpointStatus::Completed)
        .map_or(0.0, |c| f(c) as f64)
}
