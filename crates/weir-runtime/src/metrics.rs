//! Counters shared between tasks and whoever watches the job (the CLI's progress line).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Job-wide counters; updated with relaxed atomics.
#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Rows produced by sources.
    pub rows_in: AtomicU64,
    /// Rows received by sinks.
    pub rows_out: AtomicU64,
    /// Id of the last completed checkpoint (0: none).
    pub last_checkpoint: AtomicU64,
    /// Number of completed checkpoints.
    pub checkpoints_completed: AtomicU64,
    /// Duration of the last completed checkpoint, in milliseconds.
    pub last_checkpoint_ms: AtomicU64,
    /// Bytes of operator state in memory, summed over tasks as of their last snapshot.
    pub state_bytes: AtomicU64,
    /// The highest `state_bytes` seen.
    pub state_bytes_peak: AtomicU64,
    /// Records (or fields) sources skipped as unreadable (`*.ignore-parse-errors`);
    /// Flink's `numRecordsInErrors`.
    pub records_in_errors: AtomicU64,
    /// Id of the last checkpoint triggered, over every attempt (ids keep growing).
    pub last_triggered: AtomicU64,
    /// Restarts after failures (Flink's `numRestarts`).
    pub restarts: AtomicU64,
    /// The job failed and waits to restart.
    pub restarting: AtomicBool,
    /// The last failure: when (ms since the epoch) and its message.
    pub last_failure: Mutex<Option<(u64, String)>>,
}

impl JobMetrics {
    pub fn rows_in(&self) -> u64 {
        self.rows_in.load(Ordering::Relaxed)
    }
    pub fn rows_out(&self) -> u64 {
        self.rows_out.load(Ordering::Relaxed)
    }
    pub fn last_checkpoint(&self) -> Option<u64> {
        Some(self.last_checkpoint.load(Ordering::Relaxed)).filter(|c| *c > 0)
    }
    pub fn checkpoints_completed(&self) -> u64 {
        self.checkpoints_completed.load(Ordering::Relaxed)
    }
    /// Operator state in memory (bytes), as of each task's last snapshot.
    pub fn state_bytes(&self) -> u64 {
        self.state_bytes.load(Ordering::Relaxed)
    }
    /// The most operator state (bytes) seen at any snapshot.
    pub fn state_bytes_peak(&self) -> u64 {
        self.state_bytes_peak.load(Ordering::Relaxed)
    }
    /// Records (or fields) skipped as unreadable.
    pub fn records_in_errors(&self) -> u64 {
        self.records_in_errors.load(Ordering::Relaxed)
    }
    pub fn count_records_in_errors(&self, n: u64) {
        self.records_in_errors.fetch_add(n, Ordering::Relaxed);
    }
    pub fn last_triggered(&self) -> u64 {
        self.last_triggered.load(Ordering::Relaxed)
    }
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }
    pub fn is_restarting(&self) -> bool {
        self.restarting.load(Ordering::Relaxed)
    }
    /// The last failure's time (ms since the epoch) and message.
    pub fn last_failure(&self) -> Option<(u64, String)> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    pub(crate) fn record_failure(&self, e: &weir_common::Error) {
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((weir_common::now_ms(), e.to_string()));
    }
    pub(crate) fn restarting(&self, yes: bool) {
        self.restarting.store(yes, Ordering::Relaxed);
    }
    pub(crate) fn count_restart(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }
    /// Replaces one task's share of `state_bytes` (`old` by `new`).
    pub fn report_state(&self, old: u64, new: u64) {
        let total = if new >= old {
            self.state_bytes.fetch_add(new - old, Ordering::Relaxed) + (new - old)
        } else {
            self.state_bytes.fetch_sub(old - new, Ordering::Relaxed) - (old - new)
        };
        self.state_bytes_peak.fetch_max(total, Ordering::Relaxed);
    }
}
