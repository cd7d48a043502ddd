//! Runs a [`MatchProgram`] over rows in time order, one automaton run per partition, as
//! Flink's CEP `NFA` does for `MATCH_RECOGNIZE`.
//!
//! Each partition keeps its partial matches (threads: a state of the NFA and the rows taken
//! so far, each with its variable) and completed matches that wait for an earlier-starting
//! partial match to end. A row is offered to every thread, the one in the start state
//! among them: the thread follows its state's PROCEED edges and takes the row along every
//! TAKE edge whose variable holds (a thread can branch). A thread reaching the final state
//! completes a match. Completed matches leave by start row, once no partial match started
//! earlier; each emitted match prunes threads and completed matches by the `AFTER MATCH
//! SKIP` strategy. Both are kept as Flink keeps them, in heaps laid out as Java's
//! `PriorityQueue` ([`super::java_heap`]), so that of several matches with one start row
//! the one Flink emits is emitted. With `WITHIN`, threads older than the interval are
//! dropped before a row (or at a watermark) past their deadline; as in Flink, completed
//! matches they held back leave with the partition's next row.
//!
//! Rows that threads hold are kept per partition as arrow `Row`s; a row's conditions are
//! evaluated with DataFusion on a one-row batch: the row's columns and one column per
//! navigation (`LAST`, `FIRST`, aggregates). Conditions without navigations are
//! evaluated for a whole batch of rows at once.

use super::java_heap;
use super::pattern::{Edge, FINAL};
use super::{MatchProgram, Nav, NavExpr, Skip};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use weir_common::{Error, Result};

/// A partial (or completed) match.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Thread {
    /// NFA state ([`FINAL`] once completed).
    pub state: usize,
    /// Rows taken: sequence number in the partition and variable.
    pub rows: Vec<(u64, u32)>,
    /// Time and sequence number of the first row ([`START`] for the start thread, which
    /// has none and sorts last, as in Flink).
    pub start: (i64, u64),
}

/// The start of the thread that waits in the automaton's start state.
pub const START: (i64, u64) = (i64::MAX, u64::MAX);

impl Thread {
    /// The thread in the start state (every partition has one: each row may start a match).
    fn at_start(state: usize) -> Self {
        Thread {
            state,
            rows: Vec::new(),
            start: START,
        }
    }

    /// Flink's order of partial and completed matches: by first row.
    fn key(&self) -> (i64, u64) {
        self.start
    }
}

/// One partition's run. Threads (the start thread among them) and completed matches are
/// heaps laid out as Flink's `PriorityQueue`s ([`super::java_heap`]).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Partition {
    threads: Vec<Thread>,
    completed: Vec<Thread>,
    /// Sequence number of the next row.
    next: u64,
    /// Rows threads hold, by sequence number (contiguous).
    #[serde(skip)]
    history: VecDeque<(u64, OwnedRow)>,
}

impl Partition {
    fn new(start_state: usize) -> Self {
        Partition {
            threads: vec![Thread::at_start(start_state)],
            ..Default::default()
        }
    }

    /// Nothing but the start thread: the partition is as new.
    fn is_empty(&self) -> bool {
        self.threads.iter().all(|t| t.start == START) && self.completed.is_empty()
    }

    fn history_row(&self, seq: u64) -> Option<&OwnedRow> {
        let first = self.history.front()?.0;
        self.history
            .get(seq.checked_sub(first)? as usize)
            .map(|(_, r)| r)
    }

    /// Whether a partial match started `within` or more before `time` (its `WITHIN`
    /// deadline has passed).
    fn expires(&self, time: i64, within: i64) -> bool {
        self.threads
            .iter()
            .any(|t| t.start != START && time - t.start.0 >= within)
    }

    /// Ends the partial matches whose `WITHIN` deadline `time` has passed; the others are
    /// offered to a new heap in array order, as Flink's `advanceTime` does.
    fn expire(&mut self, time: i64, within: i64) {
        let mut kept = Vec::with_capacity(self.threads.len());
        for t in std::mem::take(&mut self.threads) {
            if t.start == START || time - t.start.0 < within {
                java_heap::offer(&mut kept, t, Thread::key);
            }
        }
        self.threads = kept;
    }

    /// Drops rows no thread holds any more.
    fn trim(&mut self) {
        let keep = self
            .threads
            .iter()
            .chain(&self.completed)
            .map(|t| t.start.1)
            .min()
            .unwrap_or(u64::MAX);
        while self.history.front().is_some_and(|(s, _)| *s < keep) {
            self.history.pop_front();
        }
    }
}

/// Runs a program over every partition of an input.
pub struct Matcher {
    program: Arc<MatchProgram>,
    rows: RowConverter,
    keys: RowConverter,
    /// The row a condition is evaluated on: the input's columns (nullable), then one per
    /// navigation; per variable.
    define_schemas: Vec<SchemaRef>,
    measure_schema: SchemaRef,
    partitions: HashMap<OwnedRow, Partition>,
}

/// The row being offered, within the batch it came in.
struct Current<'a> {
    batch: &'a RecordBatch,
    index: usize,
    seq: u64,
    time: i64,
    /// Conditions without navigations, evaluated for the whole batch (per variable).
    local: &'a [Option<BooleanArray>],
}

/// A match found, with what its measures need: the columns of its last row and its
/// navigations' values (one-row arrays).
struct Found {
    key: OwnedRow,
    columns: Vec<ArrayRef>,
}

impl Matcher {
    pub fn new(program: Arc<MatchProgram>) -> Result<Self> {
        let input = &program.input_schema;
        let fields = |t: &DataType| SortField::new(t.clone());
        let rows = RowConverter::new(
            input
                .fields()
                .iter()
                .map(|f| fields(f.data_type()))
                .collect(),
        )?;
        // Without PARTITION BY every row has one key: a constant column.
        let keys = match program.partition.is_empty() {
            true => RowConverter::new(vec![SortField::new(DataType::Boolean)])?,
            false => RowConverter::new(
                program
                    .partition
                    .iter()
                    .map(|c| fields(input.field(*c).data_type()))
                    .collect(),
            )?,
        };
        let define_schemas = program
            .defines
            .iter()
            .map(|d| {
                env_schema(
                    &program.input_schema,
                    d.as_ref().map(|d| d.navs.as_slice()).unwrap_or(&[]),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let measure_schema = env_schema(&program.input_schema, &program.measure_navs)?;
        Ok(Self {
            program,
            rows,
            keys,
            define_schemas,
            measure_schema,
            partitions: HashMap::new(),
        })
    }

    /// Offers `batch`'s rows (in time order; rows at one time in arrival order) to their
    /// partitions; returns the matches completed, one output row each.
    pub fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(None);
        }
        let times = crate::group_windows::epoch_millis(batch.column(self.program.time))?;
        let key_columns: Vec<ArrayRef> = match self.program.partition.is_empty() {
            true => vec![Arc::new(BooleanArray::from(vec![true; n]))],
            false => self
                .program
                .partition
                .iter()
                .map(|c| batch.column(*c).clone())
                .collect(),
        };
        let keys = self.keys.convert_columns(&key_columns)?;
        let encoded = self.rows.convert_columns(batch.columns())?;
        let local = self.local_conditions(batch)?;
        let mut found = Vec::new();
        for i in 0..n {
            if times.is_null(i) {
                continue;
            }
            let key = keys.row(i).owned();
            let mut partition = match self.partitions.remove(&key) {
                Some(p) => p,
                None => Partition::new(self.program.nfa.start),
            };
            let current = Current {
                batch,
                index: i,
                seq: partition.next,
                time: times.value(i),
                local: &local,
            };
            partition.next += 1;
            let result = self.step(&mut partition, &current, &encoded, &key, &mut found);
            // A partition with nothing pending is dropped (its sequence numbers restart).
            if !partition.is_empty() {
                self.partitions.insert(key, partition);
            }
            result?;
        }
        self.output(found)
    }

    /// The watermark reached `time`: threads past their `WITHIN` deadline end. As in
    /// Flink, completed matches they held back leave with the partition's next row (a
    /// bounded input's last ones never do).
    pub fn advance(&mut self, time: i64) {
        let Some(within) = self.program.within else {
            return;
        };
        let due: Vec<OwnedRow> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.expires(time, within))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let mut partition = self.partitions.remove(&key).expect("a partition");
            partition.expire(time, within);
            partition.trim();
            if !partition.is_empty() {
                self.partitions.insert(key, partition);
            }
        }
    }

    /// One row of a partition.
    fn step(
        &self,
        partition: &mut Partition,
        current: &Current<'_>,
        encoded: &Rows,
        key: &OwnedRow,
        found: &mut Vec<Found>,
    ) -> Result<()> {
        let nfa = &self.program.nfa;
        if let Some(within) = self.program.within {
            partition.expire(current.time, within);
        }
        // Threads in array order, as Flink iterates its queue; what each leads to is
        // offered to the new heaps in the order Flink computes it.
        let threads = std::mem::take(&mut partition.threads);
        let mut next: Vec<Thread> = Vec::new();
        let mut potential: Vec<Thread> = Vec::new();
        let mut taken = false;
        for thread in &threads {
            let mut cache: HashMap<usize, bool> = HashMap::new();
            let mut holds = |var: usize| -> Result<bool> {
                if let Some(v) = cache.get(&var) {
                    return Ok(*v);
                }
                let v = self.holds(partition, current, &thread.rows, var)?;
                cache.insert(var, v);
                Ok(v)
            };
            // The TAKE edges whose variable holds, of every state PROCEED edges reach.
            let mut takes: Vec<(usize, usize)> = Vec::new();
            for s in follow(nfa, thread.state, &mut holds)?.0 {
                let state = &nfa.states[s];
                for edge in &state.edges {
                    if let Edge::Take { target } = *edge
                        && holds(state.var)?
                    {
                        takes.push((s, target));
                    }
                }
            }
            let start = match thread.start {
                START => (current.time, current.seq),
                s => s,
            };
            for (from, target) in takes {
                taken = true;
                let mut rows = thread.rows.clone();
                rows.push((current.seq, nfa.states[from].var as u32));
                let t = Thread {
                    state: target,
                    rows,
                    start,
                };
                if target == FINAL {
                    java_heap::offer(&mut potential, t, Thread::key);
                    continue;
                }
                // A state that can PROCEED to the end completes a match with this row.
                if follow(nfa, target, &mut holds)?.1 {
                    let done = Thread {
                        state: FINAL,
                        ..t.clone()
                    };
                    java_heap::offer(&mut potential, done, Thread::key);
                }
                java_heap::offer(&mut next, t, Thread::key);
            }
            if thread.start == START {
                java_heap::offer(&mut next, Thread::at_start(nfa.start), Thread::key);
            }
        }
        if taken {
            partition
                .history
                .push_back((current.seq, encoded.row(current.index).owned()));
        }
        partition.threads = next;
        for m in potential {
            java_heap::offer(&mut partition.completed, m, Thread::key);
        }
        self.release(partition, key, current, found)?;
        partition.trim();
        Ok(())
    }

    /// Emits the completed matches no earlier-starting partial match holds back, each
    /// pruning what its skip strategy discards.
    fn release(
        &self,
        partition: &mut Partition,
        key: &OwnedRow,
        current: &Current<'_>,
        found: &mut Vec<Found>,
    ) -> Result<()> {
        // The roots: the earliest completed match and the earliest partial one (the start
        // thread sorts last).
        while let Some(first) = partition.completed.first() {
            if partition
                .threads
                .first()
                .is_some_and(|e| first.key() > e.key())
            {
                break;
            }
            let m = java_heap::poll(&mut partition.completed, Thread::key).expect("a match");
            let (pruning, strict) = self.pruning(&m)?;
            let prune = |t: &Thread| match strict {
                // Skip to a row: matches that started before it go.
                true => t.start.1 < pruning,
                false => t.start.1 <= pruning,
            };
            java_heap::remove_if(&mut partition.threads, prune, Thread::key);
            java_heap::remove_if(&mut partition.completed, prune, Thread::key);
            found.push(self.found(partition, key, &m, Some(current))?);
        }
        Ok(())
    }

    /// The row before (or at, `strict`) which the skip strategy discards matches.
    fn pruning(&self, m: &Thread) -> Result<(u64, bool)> {
        let first_row = m.rows.first().map(|r| r.0).unwrap_or_default();
        let of = |var: usize, last: bool| {
            let mut rows = m.rows.iter().filter(|r| r.1 as usize == var);
            let row = match last {
                true => rows.next_back(),
                false => rows.next(),
            };
            row.map(|r| r.0).ok_or_else(|| {
                Error::input(format!(
                    "MATCH_RECOGNIZE: AFTER MATCH SKIP TO {} {}: the match has no row of {}",
                    if last { "LAST" } else { "FIRST" },
                    self.program.variables[var],
                    self.program.variables[var]
                ))
            })
        };
        let (row, strict) = match self.program.skip {
            Skip::PastLastRow => (m.rows.last().map(|r| r.0).unwrap_or_default(), false),
            Skip::ToNextRow => (first_row, false),
            Skip::ToFirst(v) => (of(v, false)?, true),
            Skip::ToLast(v) => (of(v, true)?, true),
        };
        if strict && row == first_row {
            return Err(Error::input(
                "MATCH_RECOGNIZE: AFTER MATCH SKIP would skip to the first row of the match (an endless loop), as Flink refuses"
                    .to_string(),
            ));
        }
        Ok((row, strict))
    }

    /// The measures' inputs of match `m`.
    fn found(
        &self,
        partition: &Partition,
        key: &OwnedRow,
        m: &Thread,
        current: Option<&Current<'_>>,
    ) -> Result<Found> {
        let last = m.rows.last().map(|r| r.0).unwrap_or_default();
        let mut columns = self.row_columns(partition, current, last)?;
        for nav in &self.program.measure_navs {
            columns.push(self.nav_value(partition, current, &m.rows, None, nav)?);
        }
        Ok(Found {
            key: key.clone(),
            columns,
        })
    }

    /// The output rows of `found`: partition columns, then the measures.
    fn output(&self, found: Vec<Found>) -> Result<Option<RecordBatch>> {
        if found.is_empty() {
            return Ok(None);
        }
        let width = self.measure_schema.fields().len();
        let mut columns = Vec::with_capacity(width);
        for c in 0..width {
            let parts: Vec<&dyn Array> = found.iter().map(|f| f.columns[c].as_ref()).collect();
            columns.push(arrow::compute::concat(&parts)?);
        }
        let env = RecordBatch::try_new(self.measure_schema.clone(), columns)?;
        let mut out = match self.program.partition.is_empty() {
            true => Vec::new(),
            false => self.keys.convert_rows(found.iter().map(|f| f.key.row()))?,
        };
        for m in &self.program.measures {
            out.push(m.evaluate(&env)?.into_array(env.num_rows())?);
        }
        let relaxed = relaxed_schema(&self.program.schema);
        let batch = RecordBatch::try_new(relaxed, out)?;
        Ok(Some(
            RecordBatch::try_new(self.program.schema.clone(), batch.columns().to_vec())
                .unwrap_or(batch),
        ))
    }

    /// Conditions without navigations, for every row of `batch`.
    fn local_conditions(&self, batch: &RecordBatch) -> Result<Vec<Option<BooleanArray>>> {
        self.program
            .defines
            .iter()
            .zip(&self.define_schemas)
            .map(|(d, schema)| match d {
                Some(d) if d.navs.is_empty() => {
                    let env = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?;
                    let v = d.expr.evaluate(&env)?.into_array(batch.num_rows())?;
                    let v = v.as_boolean();
                    Ok(Some(match v.null_count() {
                        0 => v.clone(),
                        _ => arrow::compute::prep_null_mask_filter(v),
                    }))
                }
                _ => Ok(None),
            })
            .collect()
    }

    /// Whether variable `var` holds for the current row after a thread's `rows`.
    fn holds(
        &self,
        partition: &Partition,
        current: &Current<'_>,
        rows: &[(u64, u32)],
        var: usize,
    ) -> Result<bool> {
        let Some(define) = &self.program.defines[var] else {
            return Ok(true);
        };
        if let Some(local) = &current.local[var] {
            return Ok(local.value(current.index));
        }
        let NavExpr { expr, navs } = define;
        let mut columns = self.row_columns(partition, Some(current), current.seq)?;
        for nav in navs {
            columns.push(self.nav_value(partition, Some(current), rows, Some(var), nav)?);
        }
        let env = RecordBatch::try_new(self.define_schemas[var].clone(), columns)?;
        let v = expr.evaluate(&env)?.into_array(1)?;
        let v = v.as_boolean();
        Ok(v.is_valid(0) && v.value(0))
    }

    /// The input columns of row `seq` as one-row arrays.
    fn row_columns(
        &self,
        partition: &Partition,
        current: Option<&Current<'_>>,
        seq: u64,
    ) -> Result<Vec<ArrayRef>> {
        if let Some(c) = current.filter(|c| c.seq == seq) {
            return Ok(c
                .batch
                .columns()
                .iter()
                .map(|a| a.slice(c.index, 1))
                .collect());
        }
        let row = partition
            .history_row(seq)
            .ok_or_else(|| Error::internal(format!("MATCH_RECOGNIZE: row {seq} is gone")))?;
        Ok(self.rows.convert_rows(std::iter::once(row.row()))?)
    }

    /// A navigation's value (one-row array) for a thread's `rows` and, while a `DEFINE`
    /// of `defining` is evaluated, the current row.
    fn nav_value(
        &self,
        partition: &Partition,
        current: Option<&Current<'_>>,
        rows: &[(u64, u32)],
        defining: Option<usize>,
        nav: &Nav,
    ) -> Result<ArrayRef> {
        let mut events: Vec<(u64, u32)> = rows.to_vec();
        if let (Some(c), Some(v)) = (current, defining) {
            events.push((c.seq, v as u32));
        }
        let of = |var: Option<usize>| {
            events
                .iter()
                .filter(move |(_, v)| var.is_none_or(|var| *v as usize == var))
                .map(|(s, _)| *s)
        };
        let (seq, column) = match nav {
            Nav::Last {
                var,
                column,
                offset,
            } => (of(*var).rev().nth(*offset), *column),
            Nav::First {
                var,
                column,
                offset,
            } => (of(*var).nth(*offset), *column),
            Nav::Aggregate {
                var,
                function,
                result,
                value_schema,
            } => {
                let seqs: Vec<u64> = of(*var).collect();
                let value = self.aggregate(partition, current, &seqs, function)?;
                let batch = RecordBatch::try_new(value_schema.clone(), vec![value])?;
                return Ok(result.evaluate(&batch)?.into_array(1)?);
            }
        };
        match seq {
            Some(seq) => Ok(self.row_columns(partition, current, seq)?[column].clone()),
            None => {
                let t = self.program.input_schema.field(column).data_type();
                Ok(ScalarValue::try_from(t)?.to_array_of_size(1)?)
            }
        }
    }

    /// An aggregate over rows `seqs` (one-row array).
    fn aggregate(
        &self,
        partition: &Partition,
        current: Option<&Current<'_>>,
        seqs: &[u64],
        function: &datafusion::physical_expr::aggregate::AggregateFunctionExpr,
    ) -> Result<ArrayRef> {
        let mut parts: Vec<RecordBatch> = Vec::new();
        let input = relaxed_schema(&self.program.input_schema);
        for seq in seqs {
            let columns = self.row_columns(partition, current, *seq)?;
            parts.push(RecordBatch::try_new(input.clone(), columns)?);
        }
        let rows = arrow::compute::concat_batches(&input, &parts)?;
        let args = function
            .expressions()
            .iter()
            .map(|e| e.evaluate(&rows)?.into_array(rows.num_rows()))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let mut acc = function.create_accumulator()?;
        if rows.num_rows() > 0 {
            acc.update_batch(&args)?;
        }
        Ok(acc.evaluate()?.to_array_of_size(1)?)
    }

    /// Partition state as two tables, each led by the partition columns: rows threads hold
    /// (`__seq`, then the input's columns) and the runs (`__run`: JSON).
    pub fn snapshot(&self) -> Result<(Option<RecordBatch>, Option<RecordBatch>)> {
        if self.partitions.is_empty() {
            return Ok((None, None));
        }
        let input = &self.program.input_schema;
        let mut key_fields: Vec<Field> = self
            .program
            .partition
            .iter()
            .map(|c| input.field(*c).clone().with_nullable(true))
            .collect();
        if key_fields.is_empty() {
            key_fields.push(Field::new("__all", DataType::Boolean, true));
        }
        let (mut owners, mut runs) = (Vec::new(), Vec::new());
        let (mut row_owners, mut seqs, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        for (key, p) in &self.partitions {
            owners.push(key.row());
            runs.push(serde_json::to_string(p)?);
            for (seq, row) in &p.history {
                row_owners.push(key.row());
                seqs.push(*seq);
                rows.push(row.row());
            }
        }
        let mut fields = key_fields.clone();
        fields.push(Field::new("__run", DataType::Utf8, false));
        let mut columns = self.keys.convert_rows(owners)?;
        columns.push(Arc::new(StringArray::from(runs)));
        let runs = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        if seqs.is_empty() {
            return Ok((None, Some(runs)));
        }
        let mut fields = key_fields;
        fields.push(Field::new("__seq", DataType::UInt64, false));
        fields.extend(
            input
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true)),
        );
        let mut columns = self.keys.convert_rows(row_owners)?;
        columns.push(Arc::new(UInt64Array::from(seqs)));
        columns.extend(self.rows.convert_rows(rows)?);
        let held = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        Ok((Some(held), Some(runs)))
    }

    /// Adds partitions from [`Self::snapshot`]'s run table.
    pub fn restore_runs(&mut self, batch: &RecordBatch) -> Result<()> {
        let k = self.program.partition.len().max(1);
        let keys = self.keys.convert_columns(&batch.columns()[..k])?;
        let runs = batch.column(k).as_string::<i32>();
        for r in 0..batch.num_rows() {
            let run: Partition = serde_json::from_str(runs.value(r))
                .map_err(|e| Error::CorruptCheckpoint(format!("MATCH_RECOGNIZE state: {e}")))?;
            let start = self.program.nfa.start;
            let entry = self
                .partitions
                .entry(keys.row(r).owned())
                .or_insert_with(|| Partition::new(start));
            entry.threads = run.threads;
            entry.completed = run.completed;
            entry.next = run.next;
        }
        Ok(())
    }

    /// Adds held rows from [`Self::snapshot`]'s row table (after the runs).
    pub fn restore_rows(&mut self, batch: &RecordBatch) -> Result<()> {
        let k = self.program.partition.len().max(1);
        let keys = self.keys.convert_columns(&batch.columns()[..k])?;
        let seqs = batch
            .column(k)
            .as_primitive::<arrow::datatypes::UInt64Type>();
        let rows = self.rows.convert_columns(&batch.columns()[k + 1..])?;
        let mut held: Vec<(OwnedRow, u64, OwnedRow)> = (0..batch.num_rows())
            .map(|r| (keys.row(r).owned(), seqs.value(r), rows.row(r).owned()))
            .collect();
        held.sort_by_key(|(_, seq, _)| *seq);
        for (key, seq, row) in held {
            self.partitions
                .entry(key)
                .or_default()
                .history
                .push_back((seq, row));
        }
        Ok(())
    }

    /// Approximate bytes held.
    pub fn bytes(&self) -> usize {
        self.partitions
            .values()
            .map(|p| {
                64 + p
                    .history
                    .iter()
                    .map(|(_, r)| 32 + r.row().as_ref().len())
                    .sum::<usize>()
                    + (p.threads.len() + p.completed.len()) * 48
                    + p.threads
                        .iter()
                        .chain(&p.completed)
                        .map(|t| t.rows.len() * 16)
                        .sum::<usize>()
            })
            .sum()
    }
}

/// Follows PROCEED edges from `state` on the current row (a greedy loop's only while its
/// own variable does not hold), as Flink's NFA does with a stack: the states reached, in
/// the order their TAKE edges are tried, and whether the final state is reached.
fn follow(
    nfa: &super::pattern::Nfa,
    state: usize,
    holds: &mut dyn FnMut(usize) -> Result<bool>,
) -> Result<(Vec<usize>, bool)> {
    let (mut reached, mut done) = (Vec::new(), false);
    let mut stack = vec![state];
    while let Some(s) = stack.pop() {
        reached.push(s);
        let st = &nfa.states[s];
        for edge in &st.edges {
            if let Edge::Proceed {
                target,
                unless_taken,
            } = *edge
            {
                if unless_taken && holds(st.var)? {
                    continue;
                }
                match target {
                    FINAL => done = true,
                    _ => stack.push(target),
                }
            }
        }
    }
    Ok((reached, done))
}

/// The row a condition or measure is evaluated on: the input's columns (nullable), then
/// one per navigation (`__nav_i`).
pub fn env_schema(input: &SchemaRef, navs: &[Nav]) -> Result<SchemaRef> {
    let mut fields: Vec<Field> = input
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    for (i, nav) in navs.iter().enumerate() {
        fields.push(Field::new(
            format!("__nav_{i}"),
            nav_type(input, nav)?,
            true,
        ));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The type of a navigation's column.
pub fn nav_type(input: &Schema, nav: &Nav) -> Result<DataType> {
    Ok(match nav {
        Nav::Last { column, .. } | Nav::First { column, .. } => {
            input.field(*column).data_type().clone()
        }
        Nav::Aggregate {
            result,
            value_schema,
            ..
        } => result.data_type(value_schema)?,
    })
}

/// `schema` with every field nullable.
pub fn relaxed_schema(schema: &SchemaRef) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}
