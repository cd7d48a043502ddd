//! `OverAggregate`: `agg(…) OVER (PARTITION BY … ORDER BY time … PRECEDING AND CURRENT
//! ROW)` in streaming mode, as Flink runs it.
//!
//! Input arrives hash-partitioned by the `PARTITION BY` columns. On a rowtime, rows wait
//! until the watermark reaches them (a row at or behind the watermark when it arrives is
//! late and dropped, as in Flink); then each partition's rows are taken in time order
//! (rows at one time in arrival order) and every row leaves once, with the aggregates over
//! its frame appended. On `PROCTIME()` rows are taken as they arrive.
//!
//! Each partition keeps one DataFusion `Accumulator` per aggregate. With an `UNBOUNDED
//! PRECEDING` frame that is all its state (checkpointed as the accumulators' states). A
//! bounded frame also keeps the rows in the frame — their aggregates' arguments and
//! whether each aggregate's `FILTER` takes them, as one arrow `Row` each (compact: a few
//! bytes per value) —: a row leaving the frame is taken back from retracting (sliding)
//! accumulators, and a restore rebuilds the accumulators by feeding them the frame's rows
//! again. In a `RANGE` frame
//! rows at one time are peers and share one result; a partition whose rows have all left
//! the range by the watermark is dropped.

use super::aggregate::{
    Accumulators, AggregateInputs, evaluate, keyed_columns_batch, new_accumulators,
    restore_accumulators, state_columns, value_columns,
};
use super::keys;
use super::state::{item_batches, tagged_keyed_items};
use super::time_buffer::TimeBuffer;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use async_trait::async_trait;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::{AggregateSpec, OverFrame};

/// How many released rows are taken (and emitted) at a time.
const CHUNK_ROWS: usize = 8192;

/// Creates OVER aggregate operators.
pub struct OverAggregateFactory {
    /// `PARTITION BY` columns of the input.
    pub partition: Vec<usize>,
    /// The time column rows are ordered by.
    pub time: usize,
    /// The time is `PROCTIME()`: rows are taken as they arrive.
    pub processing_time: bool,
    /// The rows each row's aggregates cover.
    pub frame: OverFrame,
    /// The aggregate functions, one output column each.
    pub aggregates: Vec<AggregateSpec>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// The input's columns, then one per aggregate.
    pub schema: SchemaRef,
}

impl OperatorFactory for OverAggregateFactory {
    fn name(&self) -> String {
        format!(
            "OverAggregate(partition by: {}; order by {}; {}; {})",
            keys::names(&self.input_schema, &self.partition),
            self.input_schema.field(self.time).name(),
            self.frame,
            super::aggregate::names(&self.aggregates)
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let width = self.input_schema.fields().len();
        // A frame row's columns: every aggregate's arguments, then a flag per aggregate.
        let mut arg_fields = Vec::new();
        let mut widths = Vec::new();
        for (a, spec) in self.aggregates.iter().enumerate() {
            let exprs = spec.function.expressions();
            widths.push(exprs.len());
            for (j, e) in exprs.iter().enumerate() {
                let data_type = e.data_type(&self.input_schema)?;
                arg_fields.push(Field::new(format!("__arg_{a}_{j}"), data_type, true));
            }
        }
        for a in 0..self.aggregates.len() {
            arg_fields.push(Field::new(
                format!("__passed_{a}"),
                DataType::Boolean,
                false,
            ));
        }
        let args = RowConverter::new(
            arg_fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(Box::new(OverAggregate {
            args,
            arg_fields,
            widths,
            partition: self.partition.clone(),
            processing_time: self.processing_time,
            frame: self.frame,
            aggregates: self.aggregates.clone(),
            input_schema: self.input_schema.clone(),
            schema: self.schema.clone(),
            relaxed: keys::nullable(&self.schema),
            value_types: self.schema.fields()[width..]
                .iter()
                .map(|f| f.data_type().clone())
                .collect(),
            converter: keys::converter(&self.input_schema, &self.partition)?,
            partitions: HashMap::new(),
            waiting: TimeBuffer::new(self.time),
            expiry: BTreeSet::new(),
            max_parallelism: task.max_parallelism,
        }))
    }
}

/// One partition's state.
struct Partition {
    accumulators: Accumulators,
    /// Bounded frames: the rows in the frame, oldest first.
    frame: VecDeque<FrameRow>,
    /// The time of the newest row taken.
    last: i64,
}

/// A row in a bounded frame: its time, and its arguments and `FILTER` flags encoded by
/// [`OverAggregate::args`].
struct FrameRow {
    time: i64,
    args: OwnedRow,
}

struct OverAggregate {
    /// Encodes a frame row's columns ([`OverAggregate::arg_fields`]).
    args: RowConverter,
    /// Every aggregate's arguments, then per aggregate whether its `FILTER` takes the row.
    arg_fields: Vec<Field>,
    /// How many arguments each aggregate has.
    widths: Vec<usize>,
    partition: Vec<usize>,
    processing_time: bool,
    frame: OverFrame,
    aggregates: Vec<AggregateSpec>,
    input_schema: SchemaRef,
    schema: SchemaRef,
    relaxed: SchemaRef,
    /// Types of the aggregate columns.
    value_types: Vec<DataType>,
    converter: RowConverter,
    partitions: HashMap<OwnedRow, Partition>,
    /// Rowtime: rows ahead of the watermark.
    waiting: TimeBuffer,
    /// `RANGE` frames: when a partition's rows have all left its range (the time of its
    /// newest row plus the range), by the partition; stale entries are skipped.
    expiry: BTreeSet<(i64, OwnedRow)>,
    max_parallelism: usize,
}

impl OverAggregate {
    fn bounded(&self) -> bool {
        matches!(
            self.frame,
            OverFrame::Rows(Some(_)) | OverFrame::Range(Some(_))
        )
    }

    fn new_partition(&self) -> Result<Partition> {
        Ok(Partition {
            accumulators: new_accumulators(&self.aggregates, self.bounded())?,
            frame: VecDeque::new(),
            last: i64::MIN,
        })
    }

    /// Takes `rows` (ready: in time, or arriving on processing time) and emits each with
    /// its aggregates.
    fn take(&mut self, rows: &RecordBatch, out: &mut Output) -> Result<()> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let times = self.waiting.times(rows)?;
        let key_rows = self
            .converter
            .convert_columns(&keys::columns(rows, &self.partition))?;
        let inputs = AggregateInputs::evaluate(&self.aggregates, rows)?;
        // Each partition's rows, in arrival order.
        let mut index: HashMap<arrow::row::Row<'_>, usize> = HashMap::new();
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for i in 0..n {
            let slot = *index.entry(key_rows.row(i)).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[slot].push(i as u32);
        }
        let mut order: Vec<u32> = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        for mut group in groups {
            // Stable: rows at one time stay in arrival order.
            group.sort_by_key(|i| times[*i as usize]);
            let key = key_rows.row(group[0] as usize).owned();
            let mut partition = match self.partitions.remove(&key) {
                Some(p) => p,
                None => self.new_partition()?,
            };
            let take = UInt32Array::from(group.clone());
            let args = (0..self.aggregates.len())
                .map(|a| inputs.columns(a, Some(&take)))
                .collect::<Result<Vec<_>>>()?;
            let encoded = match self.bounded() {
                true => Some(self.encode(&args, group.len())?),
                false => None,
            };
            let mut j = 0;
            while j < group.len() {
                let time = times[group[j] as usize];
                // The rows that share one result: the peers at one time in a RANGE frame.
                let mut end = j + 1;
                if matches!(self.frame, OverFrame::Range(_)) {
                    while end < group.len() && times[group[end] as usize] == time {
                        end += 1;
                    }
                }
                for r in j..end {
                    for (acc, (columns, filter)) in partition.accumulators.iter_mut().zip(&args) {
                        if filter.as_ref().is_none_or(|f| f.is_valid(r) && f.value(r)) {
                            let row: Vec<ArrayRef> =
                                columns.iter().map(|c| c.slice(r, 1)).collect();
                            acc.update_batch(&row)?;
                        }
                    }
                    if let Some(encoded) = &encoded {
                        let args = encoded.row(r).owned();
                        partition.frame.push_back(FrameRow { time, args });
                    }
                }
                self.slide(&mut partition, time)?;
                let result = evaluate(&mut partition.accumulators)?;
                for row in &group[j..end] {
                    order.push(*row);
                    values.push(result.clone());
                }
                j = end;
            }
            partition.last = partition
                .last
                .max(times[*group.last().expect("rows") as usize]);
            if let OverFrame::Range(Some(range)) = self.frame {
                self.expiry
                    .insert((partition.last.saturating_add(range), key.clone()));
            }
            self.partitions.insert(key, partition);
        }
        let taken = arrow::compute::take_record_batch(rows, &UInt32Array::from(order))?;
        let mut columns = taken.columns().to_vec();
        columns.extend(value_columns(values, &self.value_types)?);
        let batch = RecordBatch::try_new(self.relaxed.clone(), columns)?;
        out.emit(
            RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec()).unwrap_or(batch),
        );
        Ok(())
    }

    /// The frame rows of `n` rows whose aggregates' arguments and filters are `args`.
    fn encode(&self, args: &[(Vec<ArrayRef>, Option<BooleanArray>)], n: usize) -> Result<Rows> {
        let mut columns: Vec<ArrayRef> = args.iter().flat_map(|(c, _)| c.clone()).collect();
        for (_, filter) in args {
            let passed: BooleanArray = match filter {
                Some(f) => arrow::compute::prep_null_mask_filter(f),
                None => BooleanArray::from(vec![true; n]),
            };
            columns.push(Arc::new(passed));
        }
        Ok(self.args.convert_columns(&columns)?)
    }

    /// Feeds frame rows (`columns` as [`Self::args`] decodes them) to `accumulators`, or
    /// takes them back.
    fn feed(
        &self,
        accumulators: &mut Accumulators,
        columns: &[ArrayRef],
        retract: bool,
    ) -> Result<()> {
        let flags = self.widths.iter().sum::<usize>();
        let mut col = 0;
        for (a, (acc, width)) in accumulators.iter_mut().zip(&self.widths).enumerate() {
            let passed = columns[flags + a].as_boolean();
            let values = match passed.true_count() == passed.len() {
                true => columns[col..col + width].to_vec(),
                false => columns[col..col + width]
                    .iter()
                    .map(|c| arrow::compute::filter(c, passed))
                    .collect::<Result<Vec<_>, _>>()?,
            };
            col += width;
            match retract {
                true => acc.retract_batch(&values)?,
                false => acc.update_batch(&values)?,
            }
        }
        Ok(())
    }

    /// Takes back the rows that left the frame of a row at `time`.
    fn slide(&self, partition: &mut Partition, time: i64) -> Result<()> {
        let mut gone = Vec::new();
        loop {
            let leaves = match (self.frame, partition.frame.front()) {
                (OverFrame::Rows(Some(n)), Some(_)) => partition.frame.len() as u64 > n + 1,
                (OverFrame::Range(Some(range)), Some(first)) => {
                    first.time < time.saturating_sub(range)
                }
                _ => false,
            };
            if !leaves {
                break;
            }
            gone.push(partition.frame.pop_front().expect("a row"));
        }
        if gone.is_empty() {
            return Ok(());
        }
        // Oldest first, as sliding MIN/MAX expect.
        let columns = self.args.convert_rows(gone.iter().map(|r| r.args.row()))?;
        self.feed(&mut partition.accumulators, &columns, true)
    }

    /// Takes the rows the watermark `upto` has reached.
    fn release(&mut self, upto: i64, out: &mut Output) -> Result<()> {
        for chunk in self
            .waiting
            .take_sorted_upto(upto, &self.input_schema, CHUNK_ROWS)?
        {
            self.take(&chunk, out)?;
        }
        // RANGE frames: a partition whose rows the next row's range cannot reach (every
        // row still to come is after the watermark) holds nothing any more.
        while let Some((at, _)) = self.expiry.first() {
            if *at > upto {
                break;
            }
            let (at, key) = self.expiry.pop_first().expect("an entry");
            let range = match self.frame {
                OverFrame::Range(Some(range)) => range,
                _ => break,
            };
            if self
                .partitions
                .get(&key)
                .is_some_and(|p| p.last.saturating_add(range) == at)
            {
                self.partitions.remove(&key);
            }
        }
        Ok(())
    }

    /// The bounded frames as one table: a row per frame row (partition columns, `__time`,
    /// every aggregate's arguments, then whether each aggregate takes the row).
    fn frames_batch(&self) -> Result<Option<RecordBatch>> {
        let mut owners: Vec<&OwnedRow> = Vec::new();
        let mut rows: Vec<&FrameRow> = Vec::new();
        for (key, p) in &self.partitions {
            for row in &p.frame {
                owners.push(key);
                rows.push(row);
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<(Field, ArrayRef)> = vec![(
            Field::new("__time", DataType::Int64, false),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.time))),
        )];
        let decoded = self.args.convert_rows(rows.iter().map(|r| r.args.row()))?;
        columns.extend(self.arg_fields.iter().cloned().zip(decoded));
        let key_columns = self
            .converter
            .convert_rows(owners.iter().map(|k| k.row()))?;
        Ok(Some(keyed_columns_batch(
            &self.input_schema,
            &self.partition,
            key_columns,
            columns,
        )?))
    }

    /// Rebuilds bounded frames (and their accumulators) from [`Self::frames_batch`]'s rows.
    fn restore_frames(&mut self, batch: &RecordBatch) -> Result<()> {
        let k = keys::width(&self.partition);
        let key_rows = self.converter.convert_columns(&batch.columns()[..k])?;
        let times = batch.column(k).as_primitive::<Int64Type>().clone();
        let columns = &batch.columns()[k + 1..];
        let encoded = self.args.convert_columns(columns)?;
        for r in 0..batch.num_rows() {
            let key = key_rows.row(r).owned();
            let mut partition = match self.partitions.remove(&key) {
                Some(p) => p,
                None => self.new_partition()?,
            };
            let row: Vec<ArrayRef> = columns.iter().map(|c| c.slice(r, 1)).collect();
            self.feed(&mut partition.accumulators, &row, false)?;
            let time = times.value(r);
            partition.frame.push_back(FrameRow {
                time,
                args: encoded.row(r).owned(),
            });
            partition.last = partition.last.max(time);
            self.partitions.insert(key, partition);
        }
        if let OverFrame::Range(Some(range)) = self.frame {
            for (key, p) in &self.partitions {
                self.expiry
                    .insert((p.last.saturating_add(range), key.clone()));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for OverAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let Some(state) = restored else {
            return Ok(());
        };
        let k = keys::width(&self.partition);
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                match item["part"].as_str() {
                    Some("waiting") => self.waiting.push(batch)?,
                    Some("frames") => self.restore_frames(&batch)?,
                    Some("accumulators") => {
                        let key_rows = self.converter.convert_columns(&batch.columns()[..k])?;
                        let lasts = batch.column(k).as_primitive::<Int64Type>().clone();
                        for r in 0..batch.num_rows() {
                            let accumulators =
                                restore_accumulators(&self.aggregates, false, &batch, k + 1, r)?;
                            let partition = Partition {
                                accumulators,
                                frame: VecDeque::new(),
                                last: lasts.value(r),
                            };
                            self.partitions.insert(key_rows.row(r).owned(), partition);
                        }
                    }
                    other => {
                        return Err(weir_common::Error::CorruptCheckpoint(format!(
                            "OVER aggregate state item of unknown part {other:?}"
                        )));
                    }
                }
            }
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
            return self.take(&batch, out);
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
        let partitions: usize = self
            .partitions
            .values()
            .map(|p| {
                p.accumulators.iter().map(|a| a.size()).sum::<usize>()
                    + p.frame
                        .iter()
                        .map(|r| 48 + r.args.row().as_ref().len())
                        .sum::<usize>()
            })
            .sum();
        partitions + self.waiting.bytes()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        let hashed: Vec<usize> = (0..self.partition.len()).collect();
        let max = self.max_parallelism;
        if !self.waiting.is_empty() {
            let all = arrow::compute::concat_batches(&self.input_schema, self.waiting.batches())?;
            tagged_keyed_items(&all, &self.partition, max, &mut state, ("part", "waiting"))?;
        }
        if self.bounded() {
            if let Some(frames) = self.frames_batch()? {
                tagged_keyed_items(&frames, &hashed, max, &mut state, ("part", "frames"))?;
            }
        } else if !self.partitions.is_empty() {
            let (keys, parts): (Vec<&OwnedRow>, Vec<&mut Partition>) =
                self.partitions.iter_mut().unzip();
            let lasts = Int64Array::from_iter_values(parts.iter().map(|p| p.last));
            let mut columns = vec![(
                Field::new("__last", DataType::Int64, false),
                Arc::new(lasts) as ArrayRef,
            )];
            columns.extend(state_columns(
                &self.aggregates,
                false,
                parts.into_iter().map(|p| &mut p.accumulators),
            )?);
            let key_columns = self.converter.convert_rows(keys.iter().map(|k| k.row()))?;
            let all =
                keyed_columns_batch(&self.input_schema, &self.partition, key_columns, columns)?;
            tagged_keyed_items(&all, &hashed, max, &mut state, ("part", "accumulators"))?;
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
