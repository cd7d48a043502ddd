//! `FinalTopN`: a Top-N whose partitions become final at a point of event time, so that it
//! emits each partition's rows once, append-only, as Flink does for
//!
//! * **window Top-N and window deduplication** (`PARTITION BY window_start, window_end,
//!   …` over a window TVF or window aggregate): a window's rows are final when the
//!   watermark reaches its last instant (`window_end` − 1 ms); its best `n` rows are then
//!   emitted and the window forgotten;
//! * **keep-first deduplication on a rowtime** (`ORDER BY rowtime ASC`, `n` = 1): a key's
//!   first row is final when the watermark reaches its time; it is emitted once and the key
//!   remembered, so later rows of the key are dropped.
//!
//! A row whose partition is already final when it arrives (late, behind the watermark) is
//! dropped, as Flink drops late rows. State is keyed: the rows waiting in each partition,
//! and for deduplication the keys already emitted (as their emitted row, flagged).

use super::keys;
use super::state::{keyed_state, restored_batches};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use weir_common::changelog;
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::plan::FinalAt;

/// When a partition becomes final (the planner's rule, see [`FinalAt`]).
pub type Deadline = FinalAt;

/// Creates [`FinalTopN`] operators.
pub struct FinalTopNFactory {
    /// Partition columns of the input.
    pub partition: Vec<usize>,
    /// Sort columns of the input and their direction.
    pub order: Vec<(usize, SortOptions)>,
    /// How many rows each partition emits.
    pub limit: usize,
    /// Whether the output has the row number as its last column.
    pub row_number: bool,
    /// When a partition is final.
    pub deadline: Deadline,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Output schema (without a row-kind column: the output is append-only).
    pub schema: SchemaRef,
}

impl OperatorFactory for FinalTopNFactory {
    fn name(&self) -> String {
        let what = if self.deadline.once_per_key {
            "RowTimeDeduplicate(keep first"
        } else if self.limit == 1 {
            "WindowDeduplicate("
        } else {
            "WindowTopN("
        };
        let sep = if self.deadline.once_per_key { "; " } else { "" };
        format!(
            "{what}{sep}partition: {}; n: {}; at {})",
            keys::names(&self.input_schema, &self.partition),
            self.limit,
            self.input_schema.field(self.deadline.column).name()
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let field = |c: usize| self.input_schema.field(c).data_type().clone();
        if !matches!(field(self.deadline.column), DataType::Timestamp(..)) {
            return Err(Error::internal("a final Top-N needs a timestamp deadline"));
        }
        Ok(Box::new(FinalTopN {
            partition: self.partition.clone(),
            order: self.order.iter().map(|(c, _)| *c).collect(),
            limit: self.limit,
            row_number: self.row_number.then(|| {
                self.schema
                    .fields()
                    .last()
                    .expect("rank")
                    .data_type()
                    .clone()
            }),
            deadline: self.deadline,
            input_schema: self.input_schema.clone(),
            output: self.schema.clone(),
            partition_rows: keys::converter(&self.input_schema, &self.partition)?,
            order_rows: RowConverter::new(
                self.order
                    .iter()
                    .map(|(c, o)| SortField::new_with_options(field(*c), *o))
                    .collect(),
            )?,
            full_rows: RowConverter::new(
                (0..self.input_schema.fields().len())
                    .map(|c| SortField::new(field(c)))
                    .collect(),
            )?,
            waiting: HashMap::new(),
            by_deadline: BTreeSet::new(),
            emitted: HashSet::new(),
            watermark: i64::MIN,
            max_parallelism: task.max_parallelism,
        }))
    }
}

/// A waiting row: its sort key, the row and its deadline (ms).
struct Waiting {
    sort: OwnedRow,
    row: OwnedRow,
    deadline: i64,
}

struct FinalTopN {
    partition: Vec<usize>,
    order: Vec<usize>,
    limit: usize,
    row_number: Option<DataType>,
    deadline: Deadline,
    input_schema: SchemaRef,
    output: SchemaRef,
    partition_rows: RowConverter,
    order_rows: RowConverter,
    full_rows: RowConverter,
    /// Each waiting partition's best rows, best first (ties in arrival order).
    waiting: HashMap<OwnedRow, Vec<Waiting>>,
    /// The waiting partitions by deadline (their best row's), so that a watermark visits
    /// only the partitions it makes final.
    by_deadline: BTreeSet<(i64, OwnedRow)>,
    /// Partitions already emitted (keep-first deduplication), with their emitted row.
    emitted: HashSet<OwnedRow>,
    watermark: i64,
    max_parallelism: usize,
}

impl FinalTopN {
    /// The deadline of each row, in ms.
    fn deadlines(&self, batch: &RecordBatch) -> Result<Vec<i64>> {
        let ms = weir_sql::group_windows::epoch_millis(batch.column(self.deadline.column))?;
        Ok((0..ms.len())
            .map(|i| {
                if ms.is_null(i) {
                    i64::MIN // a NULL time is final at once
                } else {
                    ms.value(i).saturating_add(self.deadline.offset_ms)
                }
            })
            .collect())
    }

    fn add(&mut self, batch: &RecordBatch, late_too: bool) -> Result<()> {
        let part = self
            .partition_rows
            .convert_columns(&keys::columns(batch, &self.partition))?;
        let order: Vec<ArrayRef> = self
            .order
            .iter()
            .map(|c| batch.column(*c).clone())
            .collect();
        let sort = self.order_rows.convert_columns(&order)?;
        let full = self.full_rows.convert_columns(batch.columns())?;
        let deadlines = self.deadlines(batch)?;
        for (i, deadline) in deadlines.into_iter().enumerate() {
            let key = part.row(i);
            if !late_too && deadline <= self.watermark {
                continue; // late: its partition is final already
            }
            if self.deadline.once_per_key && self.emitted.contains(&key.owned()) {
                continue;
            }
            let top = self.waiting.entry(key.owned()).or_default();
            let s = sort.row(i);
            let at = top.partition_point(|w| w.sort.row() <= s);
            if at >= self.limit {
                continue;
            }
            if at == 0 {
                // A new best row: the partition's deadline is its.
                if let Some(old) = top.first() {
                    self.by_deadline.remove(&(old.deadline, key.owned()));
                }
                self.by_deadline.insert((deadline, key.owned()));
            }
            top.insert(
                at,
                Waiting {
                    sort: s.owned(),
                    row: full.row(i).owned(),
                    deadline,
                },
            );
            top.truncate(self.limit);
        }
        Ok(())
    }

    /// Emits the partitions that are final at `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        let mut due = Vec::new();
        while let Some(first) = self.by_deadline.first()
            && first.0 <= watermark
        {
            due.push(self.by_deadline.pop_first().expect("first").1);
        }
        if due.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::new();
        let mut ranks = Vec::new();
        for key in due {
            let top = self.waiting.remove(&key).expect("due");
            for (rank, w) in top.into_iter().enumerate() {
                rows.push(w.row);
                ranks.push(rank as u64 + 1);
            }
            if self.deadline.once_per_key {
                self.emitted.insert(key);
            }
        }
        let mut columns = self.full_rows.convert_rows(rows.iter().map(|r| r.row()))?;
        if let Some(t) = &self.row_number {
            let ranks: ArrayRef = Arc::new(arrow::array::UInt64Array::from(ranks));
            columns.push(arrow::compute::cast(&ranks, t)?);
        }
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    fn state_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = keys::nullable(&self.input_schema)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__weir_emitted", DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    }
}

#[async_trait]
impl Operator for FinalTopN {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        for batch in restored_batches(restored)? {
            let width = batch.num_columns() - 1;
            let flags = batch.column(width).as_boolean().clone();
            let rows = RecordBatch::try_new(
                keys::nullable(&self.input_schema),
                batch.columns()[..width].to_vec(),
            )?;
            let emitted = arrow::compute::filter_record_batch(&rows, &flags)?;
            let keys = self
                .partition_rows
                .convert_columns(&keys::columns(&emitted, &self.partition))?;
            for i in 0..emitted.num_rows() {
                self.emitted.insert(keys.row(i).owned());
            }
            let waiting =
                arrow::compute::filter_record_batch(&rows, &arrow::compute::not(&flags)?)?;
            self.add(&waiting, true)?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        if changelog::is_changelog(&batch) {
            return Err(Error::internal("a final Top-N received a changelog"));
        }
        self.add(&batch, false)
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.fire(watermark, out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.waiting
            .iter()
            .map(|(k, top)| {
                k.row().as_ref().len()
                    + top
                        .iter()
                        .map(|w| w.row.row().as_ref().len() + w.sort.row().as_ref().len())
                        .sum::<usize>()
            })
            .sum::<usize>()
            + self
                .emitted
                .iter()
                .map(|k| k.row().as_ref().len())
                .sum::<usize>()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let waiting: Vec<arrow::row::Row<'_>> = self
            .waiting
            .values()
            .flat_map(|top| top.iter().map(|w| w.row.row()))
            .collect();
        let mut batches = Vec::new();
        if !waiting.is_empty() {
            let mut columns = self.full_rows.convert_rows(waiting.iter().copied())?;
            columns.push(Arc::new(BooleanArray::from(vec![false; waiting.len()])));
            batches.push(RecordBatch::try_new(self.state_schema(), columns)?);
        }
        if !self.emitted.is_empty() {
            // An emitted key is stored as a row holding the key (other columns NULL).
            let keys: Vec<arrow::row::Row<'_>> = self.emitted.iter().map(|k| k.row()).collect();
            let key_columns = self.partition_rows.convert_rows(keys.iter().copied())?;
            let n = keys.len();
            let mut columns: Vec<ArrayRef> = self
                .input_schema
                .fields()
                .iter()
                .map(|f| arrow::array::new_null_array(f.data_type(), n))
                .collect();
            for (k, c) in self.partition.iter().zip(key_columns) {
                columns[*k] = c;
            }
            columns.push(Arc::new(BooleanArray::from(vec![true; n])));
            batches.push(RecordBatch::try_new(self.state_schema(), columns)?);
        }
        if batches.is_empty() {
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let all = arrow::compute::concat_batches(&self.state_schema(), &batches)?;
        keyed_state(&all, &self.partition, self.max_parallelism)
    }
}
