//! `TemporalJoin`: the event-time temporal join (`FROM o JOIN v FOR SYSTEM_TIME AS OF
//! o.ts ON o.k = v.k`), as Flink's row-time temporal join runs it.
//!
//! Both inputs arrive hash-partitioned by the versioned side's primary key (and the probe
//! side's columns equal to it). The versioned side's rows are versions of their key, each
//! valid from its event time on (a `-D` ends the key's versions at its time; `-U` rows are
//! superseded by their `+U` and ignored). Probe rows wait until the watermark — the
//! smaller of the two inputs' — reaches their time; then each joins its key's latest
//! version at or before its time, if that version passes the join's other conditions
//! (an inner join drops a row without one, a left join pads it with NULLs). After that a key
//! keeps only its newest version at or before the watermark, and the later ones: no probe
//! row still to come can need an older one. Versions are kept as arrow `Row`s; state is
//! keyed and checkpointed (waiting probe rows and versions).

use super::keys;
use super::state::{item_batches, tagged_keyed_items};
use super::time_buffer::TimeBuffer;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::JoinKind;
use weir_sql::plan::PhysicalExprRef;

/// Creates temporal join operators.
pub struct TemporalJoinFactory {
    /// Key columns of the probe (left) and versioned (right) sides.
    pub keys: [Vec<usize>; 2],
    /// The probe side's time column.
    pub left_time: usize,
    /// The versioned side's time column (when a version starts).
    pub right_time: usize,
    /// `Inner` or `LeftOuter`.
    pub kind: JoinKind,
    /// Other conditions over the joined row.
    pub filter: Option<PhysicalExprRef>,
    /// The schemas of the two inputs (without a changelog's row kinds).
    pub inputs: [SchemaRef; 2],
    /// Left columns, then right columns.
    pub schema: SchemaRef,
}

impl OperatorFactory for TemporalJoinFactory {
    fn name(&self) -> String {
        format!(
            "TemporalJoin({}; {} = {}; as of {})",
            match self.kind {
                JoinKind::LeftOuter => "left",
                _ => "inner",
            },
            keys::names(&self.inputs[0], &self.keys[0]),
            keys::names(&self.inputs[1], &self.keys[1]),
            self.inputs[0].field(self.left_time).name()
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let versions = RowConverter::new(
            self.inputs[1]
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(Box::new(TemporalJoin {
            keys: self.keys.clone(),
            right_time: self.right_time,
            kind: self.kind,
            filter: self.filter.clone(),
            inputs: self.inputs.clone(),
            schema: self.schema.clone(),
            relaxed: keys::nullable(&self.schema),
            key_converter: keys::converter(&self.inputs[1], &self.keys[1])?,
            row_converter: versions,
            versions: HashMap::new(),
            crowded: HashSet::new(),
            waiting: TimeBuffer::new(self.left_time),
            watermark: i64::MIN,
            max_parallelism: task.max_parallelism,
        }))
    }
}

/// A version of a key: the versioned side's row, or its deletion.
struct Version {
    row: OwnedRow,
    deleted: bool,
}

struct TemporalJoin {
    keys: [Vec<usize>; 2],
    right_time: usize,
    kind: JoinKind,
    filter: Option<PhysicalExprRef>,
    inputs: [SchemaRef; 2],
    schema: SchemaRef,
    relaxed: SchemaRef,
    /// Encodes the key columns (of either side: they have the same types).
    key_converter: RowConverter,
    /// Encodes versioned rows.
    row_converter: RowConverter,
    /// Each key's versions by start time (milliseconds).
    versions: HashMap<OwnedRow, BTreeMap<i64, Version>>,
    /// Keys with more than one version (the ones a watermark may clean).
    crowded: HashSet<OwnedRow>,
    /// Probe rows waiting for the watermark.
    waiting: TimeBuffer,
    watermark: i64,
    max_parallelism: usize,
}

impl TemporalJoin {
    /// Adds the versioned side's rows of `batch`.
    fn add_versions(&mut self, batch: &RecordBatch) -> Result<()> {
        let (data, ops) = changelog::split(batch);
        let deleted: Vec<bool> = (0..data.num_rows())
            .map(|i| changelog::kind_at(ops.as_ref(), i) == RowKind::Delete)
            .collect();
        let skip: Vec<bool> = (0..data.num_rows())
            .map(|i| changelog::kind_at(ops.as_ref(), i) == RowKind::UpdateBefore)
            .collect();
        self.insert_versions(&data, &deleted, &skip)
    }

    fn insert_versions(
        &mut self,
        data: &RecordBatch,
        deleted: &[bool],
        skip: &[bool],
    ) -> Result<()> {
        let times = weir_sql::group_windows::epoch_millis(data.column(self.right_time))?;
        let key_columns = keys::columns(data, &self.keys[1]);
        let keys = self.key_converter.convert_columns(&key_columns)?;
        let rows = self.row_converter.convert_columns(data.columns())?;
        for i in 0..data.num_rows() {
            // SQL equality: a version with a NULL key matches no row.
            if skip[i] || times.is_null(i) || key_columns.iter().any(|c| c.is_null(i)) {
                continue;
            }
            let key = keys.row(i).owned();
            let versions = self.versions.entry(key.clone()).or_default();
            versions.insert(
                times.value(i),
                Version {
                    row: rows.row(i).owned(),
                    deleted: deleted[i],
                },
            );
            if versions.len() > 1 {
                self.crowded.insert(key);
            }
        }
        Ok(())
    }

    /// Joins the probe rows the watermark `upto` has reached, then drops versions no probe
    /// row still to come can need.
    fn release(&mut self, upto: i64, out: &mut Output) -> Result<()> {
        let due = self.waiting.take_upto(upto)?;
        if !due.is_empty() {
            let left = arrow::compute::concat_batches(&self.inputs[0], &due)?;
            self.join(&left, out)?;
        }
        for key in std::mem::take(&mut self.crowded) {
            let Some(versions) = self.versions.get_mut(&key) else {
                continue;
            };
            if let Some(valid) = versions.range(..=upto).next_back().map(|(t, _)| *t) {
                *versions = versions.split_off(&valid);
            }
            let only_a_deletion = versions.len() == 1
                && versions
                    .first_key_value()
                    .is_some_and(|(t, v)| v.deleted && *t <= upto);
            if only_a_deletion {
                self.versions.remove(&key);
            } else if versions.len() > 1 {
                self.crowded.insert(key);
            }
        }
        Ok(())
    }

    /// Joins `left` (probe rows in time) with the versions valid at their times.
    fn join(&self, left: &RecordBatch, out: &mut Output) -> Result<()> {
        let times = self.waiting.times(left)?;
        let keys = self
            .key_converter
            .convert_columns(&keys::columns(left, &self.keys[0]))?;
        let (mut matched_left, mut matched_right) = (Vec::new(), Vec::new());
        let mut unmatched = Vec::new();
        for (i, time) in times.iter().enumerate() {
            let version = self
                .versions
                .get(&keys.row(i).owned())
                .and_then(|v| v.range(..=*time).next_back())
                .map(|(_, v)| v)
                .filter(|v| !v.deleted);
            match version {
                Some(v) => {
                    matched_left.push(i as u32);
                    matched_right.push(v.row.row());
                }
                None => unmatched.push(i as u32),
            }
        }
        if !matched_left.is_empty() {
            let left_part =
                arrow::compute::take_record_batch(left, &UInt32Array::from(matched_left.clone()))?;
            let mut columns = left_part.columns().to_vec();
            columns.extend(self.row_converter.convert_rows(matched_right)?);
            let joined = RecordBatch::try_new(self.relaxed.clone(), columns)?;
            let joined = match &self.filter {
                None => joined,
                Some(f) => {
                    let mask = f.evaluate(&joined)?.into_array(joined.num_rows())?;
                    let passed = arrow::compute::prep_null_mask_filter(mask.as_boolean());
                    for (r, i) in matched_left.iter().enumerate() {
                        if !passed.value(r) {
                            unmatched.push(*i);
                        }
                    }
                    arrow::compute::filter_record_batch(&joined, &passed)?
                }
            };
            self.emit(joined, out);
        }
        if self.kind == JoinKind::LeftOuter && !unmatched.is_empty() {
            let left_part = arrow::compute::take_record_batch(left, &UInt32Array::from(unmatched))?;
            let padded = keys::null_padded(&left_part, &self.inputs[1], &self.relaxed)?;
            self.emit(padded, out);
        }
        Ok(())
    }

    fn emit(&self, batch: RecordBatch, out: &mut Output) {
        if batch.num_rows() > 0 {
            out.emit(
                RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec())
                    .unwrap_or(batch),
            );
        }
    }

    /// Every version as one table: the versioned side's columns, then `__deleted`.
    fn versions_batch(&self) -> Result<Option<RecordBatch>> {
        let all: Vec<&Version> = self.versions.values().flat_map(|v| v.values()).collect();
        if all.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = self
            .row_converter
            .convert_rows(all.iter().map(|v| v.row.row()))?;
        columns.push(Arc::new(BooleanArray::from(
            all.iter().map(|v| v.deleted).collect::<Vec<_>>(),
        )));
        let mut fields: Vec<Field> = self.inputs[1]
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new("__deleted", DataType::Boolean, false));
        Ok(Some(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?))
    }
}

#[async_trait]
impl Operator for TemporalJoin {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let Some(state) = restored else {
            return Ok(());
        };
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                match item["side"].as_str() {
                    Some("probe") => self.waiting.push(batch)?,
                    Some("versions") => {
                        let n = batch.num_columns() - 1;
                        let deleted: Vec<bool> = batch
                            .column(n)
                            .as_boolean()
                            .iter()
                            .map(|d| d.unwrap_or(false))
                            .collect();
                        let data = RecordBatch::try_new(
                            self.inputs[1].clone(),
                            batch.columns()[..n].to_vec(),
                        )
                        .or_else(|_| {
                            RecordBatch::try_new(
                                keys::nullable(&self.inputs[1]),
                                batch.columns()[..n].to_vec(),
                            )
                        })?;
                        let skip = vec![false; data.num_rows()];
                        self.insert_versions(&data, &deleted, &skip)?;
                    }
                    other => {
                        return Err(weir_common::Error::CorruptCheckpoint(format!(
                            "temporal join state item of unknown side {other:?}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        _: &mut Output,
    ) -> Result<()> {
        match input {
            0 => self.waiting.push(batch),
            _ => self.add_versions(&batch),
        }
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.release(watermark, out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        let versions: usize = self
            .versions
            .values()
            .flat_map(|v| v.values())
            .map(|v| 48 + v.row.row().as_ref().len())
            .sum();
        versions + self.waiting.bytes()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        let max = self.max_parallelism;
        if !self.waiting.is_empty() {
            let all = arrow::compute::concat_batches(&self.inputs[0], self.waiting.batches())?;
            tagged_keyed_items(&all, &self.keys[0], max, &mut state, ("side", "probe"))?;
        }
        if let Some(versions) = self.versions_batch()? {
            tagged_keyed_items(
                &versions,
                &self.keys[1],
                max,
                &mut state,
                ("side", "versions"),
            )?;
        }
        Ok(state)
    }

    /// A bounded input ends as if the watermark reached the end of time.
    async fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.release(i64::MAX, out)
    }
}
