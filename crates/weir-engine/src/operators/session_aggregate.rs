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
//!
//! **State larger than memory**: while the job's keyed state is over its budget
//! (`taskmanager.memory.managed.size`), the keys that least recently had rows move their
//! open sessions to local disk ([`weir_state::cold`]), each session as its snapshot row in
//! arrow's row format. A key on disk stays in memory as its index entry and as a timer: the
//! end of its earliest session. A row of such a key, or a watermark reaching that end,
//! takes the key's sessions back. Snapshots read the keys on disk a few megabytes at a
//! time and keep what they encode in a local file until the checkpoint writes it.

use super::aggregate::{
    Accumulators, AggregateInputs, evaluate, new_accumulators, restore_accumulators, value_columns,
};
use super::aggregate::{keyed_columns_batch, state_columns};
use super::state::{item_batches, keyed_items, snapshot_entries};
use super::{aggregate, keys};
use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use arrow::row::{OwnedRow, RowConverter};
use async_trait::async_trait;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;
use weir_sql::group_windows::{bounds, key_array};
use weir_state::cold::{self, ColdEntries};
use weir_state::spill::StateMemory;

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
    /// The job's keyed state budget: past it, open sessions move to disk.
    pub state_memory: Option<Arc<StateMemory>>,
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
            hot_bytes: 0,
            cold: ColdEntries::new(self.state_memory.clone()),
            timers: BTreeSet::new(),
            row_format: None,
            memory: self.state_memory.clone(),
            batches: 0,
        }))
    }
}

struct Session {
    start: i64,
    end: i64,
    accumulators: Accumulators,
}

/// A key's open sessions in memory.
struct Open {
    sessions: Vec<Session>,
    /// The batch that last had rows of the key.
    touched: u64,
    /// What the key takes in memory, as [`measure`] counts it.
    bytes: u64,
}

/// Memory of a key besides its bytes and its sessions': the map's entry and slack (about).
const KEY_OVERHEAD: usize = 64;
/// Memory of a session besides its accumulators (bounds and the list's slot).
const SESSION_OVERHEAD: usize = 24;
/// Memory of a timer of a key on disk (an entry of a `BTreeSet<(i64, u64)>`, about).
const TIMER_BYTES: u64 = 24;

/// What key `key` with open sessions `sessions` takes in memory (about).
fn measure(key: &OwnedRow, sessions: &[Session]) -> u64 {
    let sessions: usize = (sessions.iter())
        .map(|s| SESSION_OVERHEAD + s.accumulators.iter().map(|a| a.size()).sum::<usize>())
        .sum();
    (KEY_OVERHEAD + key.row().as_ref().len() + sessions) as u64
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
    /// Open sessions per key in memory, unordered.
    sessions: HashMap<OwnedRow, Open>,
    watermark: i64,
    max_parallelism: usize,
    /// What the keys in `sessions` take, as [`measure`] counts it.
    hot_bytes: u64,
    /// Keys whose sessions moved to disk (see the module docs).
    cold: ColdEntries,
    /// The keys on disk by the end of their earliest session: (end, key hash).
    timers: BTreeSet<(i64, u64)>,
    /// The schema of the snapshot rows on disk and their row format, once sessions moved
    /// (`Some(None)`: their state types have no row format, and nothing moves).
    row_format: Option<Option<(SchemaRef, RowConverter)>>,
    memory: Option<Arc<StateMemory>>,
    /// Batches processed: when keys last had rows.
    batches: u64,
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
        // Keys on disk with a session to emit come back first.
        while let Some(&(end, hash)) = self.timers.first() {
            if end - 1 > watermark {
                break;
            }
            self.timers.pop_first();
            let (key, value) = (self.cold.take_by_hash(hash)?)
                .ok_or_else(|| Error::internal("a session timer without its key on disk"))?;
            let sessions = self.decode(&value)?;
            let key = self.converter.parser().parse(&key).owned();
            self.keep(key, sessions, self.batches);
        }
        let mut keys = Vec::new();
        let (mut starts, mut ends, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for (key, open) in self.sessions.iter_mut() {
            let mut i = 0;
            let before = open.sessions.len();
            while i < open.sessions.len() {
                if open.sessions[i].end - 1 <= watermark {
                    let mut s = open.sessions.swap_remove(i);
                    keys.push(key.clone());
                    starts.push(s.start);
                    ends.push(s.end);
                    values.push(evaluate(&mut s.accumulators)?);
                } else {
                    i += 1;
                }
            }
            if open.sessions.len() != before {
                self.hot_bytes -= open.bytes;
                open.bytes = measure(key, &open.sessions);
                self.hot_bytes += open.bytes;
            }
        }
        let hot_bytes = &mut self.hot_bytes;
        self.sessions.retain(|_, open| {
            let done = open.sessions.is_empty();
            if done {
                *hot_bytes -= open.bytes;
            }
            !done
        });
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

    /// Keeps `sessions` of `key` in memory, last touched by batch `touched`.
    fn keep(&mut self, key: OwnedRow, sessions: Vec<Session>, touched: u64) {
        let bytes = measure(&key, &sessions);
        self.hot_bytes += bytes;
        let open = Open {
            sessions,
            touched,
            bytes,
        };
        if let Some(old) = self.sessions.insert(key, open) {
            self.hot_bytes -= old.bytes;
        }
    }

    /// The open sessions of `key`, taken out of memory or off the disk (none if it has
    /// none).
    fn take(&mut self, key: &OwnedRow) -> Result<Vec<Session>> {
        if let Some(open) = self.sessions.remove(key) {
            self.hot_bytes -= open.bytes;
            return Ok(open.sessions);
        }
        if self.cold.is_empty() {
            return Ok(Vec::new());
        }
        let hash = cold::hash(key.row().as_ref());
        if !self.cold.may_hold(hash) {
            return Ok(Vec::new());
        }
        let Some((value, _)) = self.cold.take(hash, key.row().as_ref())? else {
            return Ok(Vec::new());
        };
        let sessions = self.decode(&value)?;
        self.timers.remove(&(earliest_end(&sessions), hash));
        Ok(sessions)
    }

    /// The snapshot rows of the open sessions of `keys`, in their order: key columns,
    /// `__start_ms`, `__end_ms`, accumulator states. The accumulators stay usable.
    fn sessions_batch<'a>(
        &self,
        keys: impl Iterator<Item = (&'a OwnedRow, &'a mut Vec<Session>)>,
    ) -> Result<RecordBatch> {
        let mut key_rows = Vec::new();
        let (mut starts, mut ends, mut accumulators) = (Vec::new(), Vec::new(), Vec::new());
        for (key, sessions) in keys {
            for s in sessions.iter_mut() {
                key_rows.push(key.row());
                starts.push(s.start);
                ends.push(s.end);
                accumulators.push(&mut s.accumulators);
            }
        }
        let key_columns = self.converter.convert_rows(key_rows)?;
        let bound = |name: &str, v: Vec<i64>| -> (Field, ArrayRef) {
            (
                Field::new(name, DataType::Int64, false),
                Arc::new(arrow::array::Int64Array::from(v)),
            )
        };
        let columns = [bound("__start_ms", starts), bound("__end_ms", ends)]
            .into_iter()
            .chain(state_columns(
                &self.aggregates,
                false,
                accumulators.into_iter(),
            )?)
            .collect();
        keyed_columns_batch(&self.input_schema, &self.keys, key_columns, columns)
    }

    /// Each row of a snapshot batch (as [`Self::sessions_batch`] writes it) as its key and
    /// session.
    fn sessions_of(&self, batch: &RecordBatch) -> Result<Vec<(OwnedRow, Session)>> {
        let k = keys::width(&self.keys);
        let rows = self.converter.convert_columns(&batch.columns()[..k])?;
        let starts = batch.column(k).as_primitive::<Int64Type>();
        let ends = batch.column(k + 1).as_primitive::<Int64Type>();
        (0..batch.num_rows())
            .map(|r| {
                let accumulators = restore_accumulators(&self.aggregates, false, batch, k + 2, r)?;
                let session = Session {
                    start: starts.value(r),
                    end: ends.value(r),
                    accumulators,
                };
                Ok((rows.row(r).owned(), session))
            })
            .collect()
    }

    /// The snapshot rows of entries on disk (each its rows' bytes, see [`encode_rows`]).
    fn rows_from_disk<'a>(&self, values: impl Iterator<Item = &'a [u8]>) -> Result<RecordBatch> {
        let Some(Some((schema, codec))) = &self.row_format else {
            return Err(Error::internal("sessions on disk without a row format"));
        };
        let parser = codec.parser();
        let mut rows = Vec::new();
        for value in values {
            for row in split_rows(value)? {
                rows.push(parser.parse(row));
            }
        }
        let columns = codec.convert_rows(rows)?;
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }

    /// The sessions of one key read from disk.
    fn decode(&self, value: &[u8]) -> Result<Vec<Session>> {
        let batch = self.rows_from_disk(std::iter::once(value))?;
        Ok(self
            .sessions_of(&batch)?
            .into_iter()
            .map(|(_, s)| s)
            .collect())
    }

    /// While the job's state is over its budget, moves the sessions of the keys that least
    /// recently had rows to disk.
    fn relieve(&mut self) -> Result<()> {
        let timers = self.timers.len() as u64 * TIMER_BYTES;
        if !self.cold.set_hot(self.hot_bytes + timers) || matches!(self.row_format, Some(None)) {
            return Ok(());
        }
        let moving = cold::least_recently_used(
            self.sessions.iter().map(|(k, open)| (k, open.touched)),
            |k| self.sessions[*k].bytes,
            self.hot_bytes,
            self.cold.hot_target().saturating_sub(timers),
        );
        let moving: Vec<OwnedRow> = moving.into_iter().map(|(k, _)| k.clone()).collect();
        if moving.is_empty() {
            return Ok(()); // what is over budget is the index of the keys on disk
        }
        let mut taken: Vec<(OwnedRow, Open)> = (moving.iter())
            .map(|k| self.sessions.remove_entry(k).expect("a kept key"))
            .collect();
        self.hot_bytes -= taken.iter().map(|(_, open)| open.bytes).sum::<u64>();
        let batch = self.sessions_batch(taken.iter_mut().map(|(k, o)| (&*k, &mut o.sessions)))?;
        if self.row_format.is_none() {
            self.row_format = Some(aggregate::state_row_format(batch.schema()));
        }
        let Some(Some((_, codec))) = &self.row_format else {
            // A state type the row format does not take: the sessions stay.
            for (key, open) in taken {
                self.keep(key, open.sessions, open.touched);
            }
            return Ok(());
        };
        let rows = codec.convert_columns(batch.columns())?;
        let mut next = 0;
        for (key, open) in taken {
            let n = open.sessions.len();
            let value = encode_rows((next..next + n).map(|r| rows.row(r)));
            next += n;
            let hash = cold::hash(key.row().as_ref());
            if self
                .cold
                .put(hash, key.row().as_ref(), &value, open.touched)?
            {
                self.timers.insert((earliest_end(&open.sessions), hash));
            } else {
                self.keep(key, open.sessions, open.touched);
            }
        }
        self.cold
            .set_hot(self.hot_bytes + self.timers.len() as u64 * TIMER_BYTES);
        Ok(())
    }
}

/// The end of the earliest of `sessions` (a key's open sessions, at least one).
fn earliest_end(sessions: &[Session]) -> i64 {
    sessions.iter().map(|s| s.end).min().unwrap_or(i64::MAX)
}

/// Rows as the bytes of an entry on disk: each row's length, then its bytes.
fn encode_rows<'a>(rows: impl Iterator<Item = arrow::row::Row<'a>>) -> Vec<u8> {
    let mut out = Vec::new();
    for row in rows {
        let bytes = row.as_ref();
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// The rows [`encode_rows`] wrote.
fn split_rows(mut rest: &[u8]) -> Result<Vec<&[u8]>> {
    let corrupt = || Error::internal("session state read back from local disk is corrupt");
    let mut rows = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at_checked(4).ok_or_else(corrupt)?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (row, tail) = tail.split_at_checked(len).ok_or_else(corrupt)?;
        rows.push(row);
        rest = tail;
    }
    Ok(rows)
}

#[async_trait]
impl Operator for SessionAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let Some(state) = restored else {
            return Ok(());
        };
        // An item at a time, so that a restore past the budget moves keys to disk as it
        // goes.
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                for (key, session) in self.sessions_of(&batch)? {
                    let mut sessions = self.take(&key)?;
                    sessions.push(session);
                    self.keep(key, sessions, 0);
                }
            }
            self.relieve()?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        self.batches += 1;
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
            let mut open = self.take(&key)?;
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
                self.keep(key, open, self.batches);
            }
        }
        self.relieve()
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.fire(out)?;
            self.relieve()?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        (self.hot_bytes + self.cold.on_disk()) as usize
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        if !self.sessions.is_empty() {
            let mut sessions = std::mem::take(&mut self.sessions);
            let batch = self.sessions_batch(sessions.iter_mut().map(|(k, o)| (k, &mut o.sessions)));
            // (The accumulators were rebuilt from their states: measure them again.)
            self.hot_bytes = 0;
            for (key, open) in sessions.iter_mut() {
                open.bytes = measure(key, &open.sessions);
                self.hot_bytes += open.bytes;
            }
            self.sessions = sessions;
            let hashed: Vec<usize> = (0..self.keys.len()).collect();
            keyed_items(&batch?, &hashed, self.max_parallelism, &mut state)?;
        }
        if !self.cold.is_empty() {
            let hashed: Vec<usize> = (0..self.keys.len()).collect();
            snapshot_entries(
                &self.cold,
                |values| self.rows_from_disk(values.iter().map(Vec::as_slice)),
                &hashed,
                self.max_parallelism,
                self.memory.as_ref(),
                &mut state,
            )?;
        }
        Ok(state)
    }
}
