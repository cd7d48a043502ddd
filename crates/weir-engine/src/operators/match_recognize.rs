//! `MatchRecognize`: `MATCH_RECOGNIZE` in streaming mode, as Flink runs it.
//!
//! Input arrives hash-partitioned by the `PARTITION BY` columns. On a rowtime, rows wait
//! until the watermark reaches them (rows at or behind the watermark on arrival are late
//! and dropped, as in Flink); then they are offered to their partition's automaton in time
//! order (rows at one time in arrival order) by [`weir_sql::match_recognize::matcher`],
//! which emits one row per match. The watermark also ends partial matches past their
//! `WITHIN` interval. On `PROCTIME()` rows are offered as they arrive.
//!
//! State (keyed by partition, redistributed on restore): the waiting rows, the rows
//! partial matches hold, and each partition's runs (its partial and completed matches).

use super::state::{item_batches, tagged_keyed_items};
use super::time_buffer::TimeBuffer;
use arrow::array::RecordBatch;
use async_trait::async_trait;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::match_recognize::MatchProgram;
use weir_sql::match_recognize::matcher::Matcher;

/// How many released rows are offered (and their matches emitted) at a time.
const CHUNK_ROWS: usize = 8192;

/// Creates `MATCH_RECOGNIZE` operators.
pub struct MatchRecognizeFactory {
    /// The compiled clause.
    pub program: Arc<MatchProgram>,
    /// Ordered by `PROCTIME()`: rows are offered as they arrive.
    pub processing_time: bool,
}

impl OperatorFactory for MatchRecognizeFactory {
    fn name(&self) -> String {
        format!("MatchRecognize({})", self.program.describe())
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(MatchRecognize {
            matcher: Matcher::new(self.program.clone())?,
            program: self.program.clone(),
            processing_time: self.processing_time,
            waiting: TimeBuffer::new(self.program.time),
            max_parallelism: task.max_parallelism,
        }))
    }
}

struct MatchRecognize {
    matcher: Matcher,
    program: Arc<MatchProgram>,
    processing_time: bool,
    /// Rowtime: rows ahead of the watermark.
    waiting: TimeBuffer,
    max_parallelism: usize,
}

impl MatchRecognize {
    fn offer(&mut self, rows: &RecordBatch, out: &mut Output) -> Result<()> {
        if let Some(matches) = self.matcher.process(rows)? {
            out.emit(matches);
        }
        Ok(())
    }

    /// Offers the rows the watermark `upto` has reached, then ends partial matches past
    /// their `WITHIN` deadline.
    fn release(&mut self, upto: i64, out: &mut Output) -> Result<()> {
        let schema = self.program.input_schema.clone();
        for chunk in self.waiting.take_sorted_upto(upto, &schema, CHUNK_ROWS)? {
            self.offer(&chunk, out)?;
        }
        self.matcher.advance(upto);
        Ok(())
    }
}

#[async_trait]
impl Operator for MatchRecognize {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let Some(state) = restored else {
            return Ok(());
        };
        // Runs before the rows they hold.
        let mut held = Vec::new();
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                match item["part"].as_str() {
                    Some("waiting") => self.waiting.push(batch)?,
                    Some("runs") => self.matcher.restore_runs(&batch)?,
                    Some("held") => held.push(batch),
                    other => {
                        return Err(weir_common::Error::CorruptCheckpoint(format!(
                            "MATCH_RECOGNIZE state item of unknown part {other:?}"
                        )));
                    }
                }
            }
        }
        for batch in held {
            self.matcher.restore_rows(&batch)?;
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        if self.processing_time {
            return self.offer(&batch, out);
        }
        self.waiting.push_on_time(&batch)?;
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if !self.processing_time && self.waiting.advance(watermark) {
            self.release(watermark, out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.matcher.bytes() + self.waiting.bytes()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        let max = self.max_parallelism;
        let partition = &self.program.partition;
        if !self.waiting.is_empty() {
            let all =
                arrow::compute::concat_batches(&self.program.input_schema, self.waiting.batches())?;
            tagged_keyed_items(&all, partition, max, &mut state, ("part", "waiting"))?;
        }
        // Both tables lead with the partition columns.
        let hashed: Vec<usize> = (0..partition.len()).collect();
        let (held, runs) = self.matcher.snapshot()?;
        if let Some(runs) = runs {
            tagged_keyed_items(&runs, &hashed, max, &mut state, ("part", "runs"))?;
        }
        if let Some(held) = held {
            tagged_keyed_items(&held, &hashed, max, &mut state, ("part", "held"))?;
        }
        Ok(state)
    }

    /// A bounded input ends as if the watermark reached the end of time.
    async fn finish(&mut self, out: &mut Output) -> Result<()> {
        if !self.processing_time {
            self.release(i64::MAX, out)?;
        }
        Ok(())
    }
}
