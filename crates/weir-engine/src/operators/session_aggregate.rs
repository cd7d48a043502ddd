//! `SessionAggregate`: event-time session windows (`GROUP BY k, SESSION(ts, gap)`).
//!
//! Input arrives hash-partitioned by the group keys other than the session. Every row
//! carries its own session `[ts, ts + gap)` (the `{start, end}` key column); per key, the
//! operator keeps open sessions, each with its accumulators. A batch's rows of one key are
//! sorted by time and cut into runs whose sessions touch; each run is merged with the open
//! sessions it overlaps (their accumulator states merged into one) and fed to it. A
//! session is emitted once the watermark reaches its last millisecond; rows whose session
//! would already have been emitted, and that join no open session, are late and dropped.
//! State is keyed: a snapshot stores each key group's sessions (keys, bounds, accumulator
//! states) as Arrow IPC.

use super::aggregate::{
    Accumulators, AggregateInputs, evaluate, keyed_snapshot, new_accumulators,
    restore_accumulators, value_columns,
};
use super::state::restored_batches;
use super::{aggregate, keys};
use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use arrow::row::{OwnedRow, RowConverter};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;
use weir_sql::group_windows::{bounds, key_array};

/// Creates session window aggregates.
pub struct SessionAggregateFactory {
    /// Group columns of the input; the one at position `session` is the session key.
    pub keys: Vec<usize>,
    /// Position of the session key among `keys`.
    pub session: usize,
    /// The aggregate functions.
    pub aggregates: Vec<AggregateSpec>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Output schema: group columns (the session as `{start, end}`), then the aggregates.
    pub schema: SchemaRef,
}

impl SessionAggregateFactory {
    /// The group columns other than the session: what the input is partitioned by.
    pub fn partition_keys(&self) -> Vec<usize> {
        let mut keys = self.keys.clone();
        keys.remove(self.session);
        keys
    }
}

impl OperatorFactory for SessionAggregateFactory {
    fn name(&self) -> String {
        format!(
            "SessionAggregate(keys: {}; {})",
            keys::names(&self.input_schema, &self.partition_keys()),
            aggregate::names(&self.aggregates)
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let partition = self.partition_keys();
        Ok(Box::new(SessionAggregate {
            converter: keys::converter(&self.input_schema, &partition)?,
            keys: partition,
            session_column: self.keys[self.session],
            session: self.session,
            aggregates: self.aggregates.clone(),
            input_schema: self.input_schema.clone(),
            output: keys::nullable(&self.schema),
            sessions: HashMap::new(),
            watermark: i64::MIN,
            max_parallelism: task.max_parallelism,
        }))
    }
}

struct Session {
    start: i64,
    end: i64,
    accumulators: Accumulators,
}

struct SessionAggregate {
    /// Input columns of the group keys other than the session.
    keys: Vec<usize>,
    /// Input column of the session key.
    session_column: usize,
    /// Position of the session among the output's group columns.
    session: usize,
    aggregates: Vec<AggregateSpec>,
    input_schema: SchemaRef,
    output: SchemaRef,
    converter: RowConverter,
    /// Open sessions per key, unordered.
    sessions: HashMap<OwnedRow, Vec<Session>>,
    watermark: i64,
    max_parallelism: usize,
}

impl SessionAggregate {
    /// Adds rows `run` (one key, sessions touching) spanning `[start, end)` to `open`.
    fn add_run(
        &self,
        open: &mut Vec<Session>,
        start: i64,
        end: i64,
        run: &[u32],
        inputs: &AggregateInputs,
    ) -> Result<()> {
        let (mut merged, rest): (Vec<Session>, Vec<Session>) = std::mem::take(open)
            .into_iter()
            .partition(|s| s.start <= end && start <= s.end);
        *open = rest;
        let (start, end) = merged
            .iter()
            .fold((start, end), |(a, b), s| (a.min(s.start), b.max(s.end)));
        if merged.is_empty() && end - 1 <= self.watermark {
            return Ok(()); // late, and no open session to join
        }
        let mut target = match merged.pop() {
            Some(s) => s.accumulators,
            None => new_accumulators(&self.aggregates, false)?,
        };
        for mut other in merged {
            for (acc, from) in target.iter_mut().zip(other.accumulators.iter_mut()) {
                let state: Vec<ArrayRef> = from
                    .state()?
                    .into_iter()
                    .map(|v| v.to_array())
                    .collect::<Result<_, _>>()?;
                acc.merge_batch(&state)?;
            }
        }
        inputs.feed(&mut target, run, false)?;
        open.push(Session {
            start,
            end,
            accumulators: target,
        });
        Ok(())
    }

    /// Emits every session whose end the watermark has reached.
    fn fire(&mut self, out: &mut Output) -> Result<()> {
        let watermark = self.watermark;
        let mut keys = Vec::new();
        let (mut starts, mut ends, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for (key, open) in self.sessions.iter_mut() {
            let mut i = 0;
            while i < open.len() {
                if open[i].end - 1 <= watermark {
                    let mut s = open.swap_remove(i);
                    keys.push(key.clone());
                    starts.push(s.start);
                    ends.push(s.end);
                    values.push(evaluate(&mut s.accumulators)?);
                } else {
                    i += 1;
                }
            }
        }
        self.sessions.retain(|_, open| !open.is_empty());
        if keys.is_empty() {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> = if self.keys.is_empty() {
            Vec::new()
        } else {
            self.converter.convert_rows(keys.iter().map(|k| k.row()))?
        };
        let session_type = self.output.field(self.session).data_type().clone();
        columns.insert(self.session, key_array(&session_type, starts, ends)?);
        let types: Vec<DataType> = self.output.fields()[columns.len()..]
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        columns.extend(value_columns(values, &types)?);
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }
}

#[async_trait]
impl Operator for SessionAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let k = keys::width(&self.keys);
        for batch in restored_batches(restored)? {
            let rows = self.converter.convert_columns(&batch.columns()[..k])?;
            let starts = batch.column(k).as_primitive::<Int64Type>().clone();
            let ends = batch.column(k + 1).as_primitive::<Int64Type>().clone();
            for r in 0..batch.num_rows() {
                let accumulators = restore_accumulators(&self.aggregates, false, &batch, k + 2, r)?;
                self.sessions
                    .entry(rows.row(r).owned())
                    .or_default()
                    .push(Session {
                        start: starts.value(r),
                        end: ends.value(r),
                        accumulators,
                    });
            }
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        let key_columns = keys::columns(&batch, &self.keys);
        let rows = self.converter.convert_columns(&key_columns)?;
        let session = batch.column(self.session_column);
        let (starts, ends) = bounds(session)?;
        let inputs = AggregateInputs::evaluate(&self.aggregates, &batch)?;
        let mut index: HashMap<arrow::row::Row<'_>, usize> = HashMap::new();
        let mut members: Vec<Vec<u32>> = Vec::new();
        for i in 0..batch.num_rows() {
            if session.is_null(i) {
                continue;
            }
            let slot = *index.entry(rows.row(i)).or_insert_with(|| {
                members.push(Vec::new());
                members.len() - 1
            });
            members[slot].push(i as u32);
        }
        for mut member in members {
            member.sort_by_key(|i| starts[*i as usize]);
            let key = rows.row(member[0] as usize).owned();
            let mut open = self.sessions.remove(&key).unwrap_or_default();
            // Cut the key's rows into runs of touching sessions.
            let mut run_start = 0;
            let (mut lo, mut hi) = (starts[member[0] as usize], ends[member[0] as usize]);
            for j in 1..=member.len() {
                if j < member.len() && starts[member[j] as usize] <= hi {
                    hi = hi.max(ends[member[j] as usize]);
                    continue;
                }
                self.add_run(&mut open, lo, hi, &member[run_start..j], &inputs)?;
                if j < member.len() {
                    run_start = j;
                    lo = starts[member[j] as usize];
                    hi = ends[member[j] as usize];
                }
            }
            if !open.is_empty() {
                self.sessions.insert(key, open);
            }
        }
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.fire(out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.sessions
            .iter()
            .map(|(k, open)| {
                k.row().as_ref().len()
                    + open
                        .iter()
                        .map(|s| 16 + s.accumulators.iter().map(|a| a.size()).sum::<usize>())
                        .sum::<usize>()
            })
            .sum()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut key_rows = Vec::new();
        let (mut starts, mut ends, mut accumulators) = (Vec::new(), Vec::new(), Vec::new());
        for (key, open) in self.sessions.iter_mut() {
            for s in open.iter_mut() {
                key_rows.push(key.row());
                starts.push(s.start);
                ends.push(s.end);
                accumulators.push(&mut s.accumulators);
            }
        }
        if key_rows.is_empty() {
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let key_columns = self.converter.convert_rows(key_rows)?;
        let bound = |name: &str, v: Vec<i64>| -> (Field, ArrayRef) {
            (
                Field::new(name, DataType::Int64, false),
                Arc::new(arrow::array::Int64Array::from(v)),
            )
        };
        keyed_snapshot(
            &self.input_schema,
            &self.keys,
            key_columns,
            vec![bound("__start_ms", starts), bound("__end_ms", ends)],
            &self.aggregates,
            accumulators.into_iter(),
            self.max_parallelism,
        )
    }
}
