//! `LookupJoin`: the processing-time temporal join (`FROM o JOIN d FOR SYSTEM_TIME AS OF
//! o.proctime ON o.k = d.k`), Flink's lookup join.
//!
//! The looked-up table is read whole through its connector (as batch mode reads it), its
//! rows indexed by key, and read again once `lookup.join.cache.ttl` (default 60 minutes,
//! Flink's filesystem default) has passed. Each probe row joins, as it arrives, the rows
//! with its key that pass the join's other conditions; a LEFT join pads a row without
//! any. The probe side's row kinds (a changelog's) are kept. Nothing is checkpointed: a
//! restored job reads the table again.

use super::keys;
use crate::batch::ConnectorBatchScan;
use arrow::array::{Array, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter};
use async_trait::async_trait;
use futures::TryStreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_common::changelog;
use weir_common::{Error, Result};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};
use weir_sql::plan::PhysicalExprRef;
use weir_sql::{BatchScan, JoinKind, TableDef};

/// Flink's default for the filesystem connector's `lookup.join.cache.ttl`.
const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

/// Creates lookup join operators.
pub struct LookupJoinFactory {
    /// The table looked up.
    pub table: Arc<TableDef>,
    /// Conditions on the table's rows.
    pub table_filter: Option<PhysicalExprRef>,
    /// Key columns of the probe side and of the table.
    pub keys: [Vec<usize>; 2],
    /// `Inner` or `LeftOuter`.
    pub kind: JoinKind,
    /// Other conditions over the joined row.
    pub filter: Option<PhysicalExprRef>,
    /// The probe side's schema (without a changelog's row kinds).
    pub input_schema: SchemaRef,
    /// Probe columns, then the table's.
    pub schema: SchemaRef,
}

impl OperatorFactory for LookupJoinFactory {
    fn name(&self) -> String {
        format!(
            "LookupJoin({}; {} = {}.{})",
            match self.kind {
                JoinKind::LeftOuter => "left",
                _ => "inner",
            },
            keys::names(&self.input_schema, &self.keys[0]),
            self.table.name,
            keys::names(&self.table.schema, &self.keys[1]),
        )
    }

    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        let ttl = match self.table.options.get("lookup.join.cache.ttl") {
            Some(text) => weir_common::config::parse_duration(text).map_err(|e| {
                Error::plan(format!(
                    "table '{}': 'lookup.join.cache.ttl' = '{text}': {e}",
                    self.table.name
                ))
            })?,
            None => DEFAULT_TTL,
        };
        Ok(Box::new(LookupJoin {
            table: self.table.clone(),
            table_filter: self.table_filter.clone(),
            keys: self.keys.clone(),
            kind: self.kind,
            filter: self.filter.clone(),
            schema: self.schema.clone(),
            relaxed: keys::nullable(&self.schema),
            converter: keys::converter(&self.table.schema, &self.keys[1])?,
            ttl,
            loaded: None,
        }))
    }
}

/// The table as last read: its rows and, per key, the rows with that key.
struct Loaded {
    at: Instant,
    rows: RecordBatch,
    index: HashMap<OwnedRow, Vec<u32>>,
}

struct LookupJoin {
    table: Arc<TableDef>,
    table_filter: Option<PhysicalExprRef>,
    keys: [Vec<usize>; 2],
    kind: JoinKind,
    filter: Option<PhysicalExprRef>,
    schema: SchemaRef,
    relaxed: SchemaRef,
    converter: RowConverter,
    ttl: Duration,
    loaded: Option<Loaded>,
}

impl LookupJoin {
    /// Reads the table whole (again, once the TTL has passed).
    async fn load(&mut self) -> Result<()> {
        if self
            .loaded
            .as_ref()
            .is_some_and(|l| l.at.elapsed() < self.ttl)
        {
            return Ok(());
        }
        let lookup = |e: Error| {
            Error::plan(format!(
                "the lookup join reads table '{}' whole: {e}",
                self.table.name
            ))
        };
        let reader = ConnectorBatchScan
            .open(self.table.clone(), &[], None)
            .await
            .map_err(lookup)?;
        let batches: Vec<RecordBatch> = reader
            .scan_partition(0, 1)?
            .try_collect()
            .await
            .map_err(|e| lookup(e.into()))?;
        let mut rows =
            arrow::compute::concat_batches(&self.table.schema, &batches).or_else(|_| {
                arrow::compute::concat_batches(&keys::nullable(&self.table.schema), &batches)
            })?;
        if let Some(f) = &self.table_filter {
            let mask = f.evaluate(&rows)?.into_array(rows.num_rows())?;
            rows = arrow::compute::filter_record_batch(&rows, mask.as_boolean())?;
        }
        let key_columns = keys::columns(&rows, &self.keys[1]);
        let keys = self.converter.convert_columns(&key_columns)?;
        let mut index: HashMap<OwnedRow, Vec<u32>> = HashMap::new();
        for i in 0..rows.num_rows() {
            // SQL equality: a NULL key matches nothing.
            if key_columns.iter().any(|c| c.is_null(i)) {
                continue;
            }
            index.entry(keys.row(i).owned()).or_default().push(i as u32);
        }
        self.loaded = Some(Loaded {
            at: Instant::now(),
            rows,
            index,
        });
        Ok(())
    }
}

#[async_trait]
impl Operator for LookupJoin {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        self.load().await?;
        let loaded = self.loaded.as_ref().expect("loaded");
        let (data, ops) = changelog::split(&batch);
        let key_columns = keys::columns(&data, &self.keys[0]);
        let keys = self.converter.convert_columns(&key_columns)?;
        let (mut probe, mut found) = (Vec::new(), Vec::new());
        for i in 0..data.num_rows() {
            if key_columns.iter().any(|c| c.is_null(i)) {
                continue;
            }
            if let Some(rows) = loaded.index.get(&keys.row(i).owned()) {
                for r in rows {
                    probe.push(i as u32);
                    found.push(*r);
                }
            }
        }
        let probe = UInt32Array::from(probe);
        let mut columns = arrow::compute::take_record_batch(&data, &probe)?
            .columns()
            .to_vec();
        columns.extend(
            arrow::compute::take_record_batch(&loaded.rows, &UInt32Array::from(found))?
                .columns()
                .iter()
                .cloned(),
        );
        let joined = RecordBatch::try_new(self.relaxed.clone(), columns)?;
        let passed: BooleanArray = match &self.filter {
            None => BooleanArray::from(vec![true; joined.num_rows()]),
            Some(f) => {
                let mask = f.evaluate(&joined)?.into_array(joined.num_rows())?;
                arrow::compute::prep_null_mask_filter(mask.as_boolean())
            }
        };
        let kept: Vec<u32> = (0..joined.num_rows() as u32)
            .filter(|r| passed.value(*r as usize))
            .collect();
        let mut rows_out =
            arrow::compute::take_record_batch(&joined, &UInt32Array::from(kept.clone()))?;
        let mut probe_of: Vec<u32> = kept.iter().map(|r| probe.value(*r as usize)).collect();
        if self.kind == JoinKind::LeftOuter {
            let mut matched = vec![false; data.num_rows()];
            for p in &probe_of {
                matched[*p as usize] = true;
            }
            let unmatched: Vec<u32> = (0..data.num_rows() as u32)
                .filter(|i| !matched[*i as usize])
                .collect();
            if !unmatched.is_empty() {
                let probe_rows = arrow::compute::take_record_batch(
                    &data,
                    &UInt32Array::from(unmatched.clone()),
                )?;
                let padded = keys::null_padded(&probe_rows, &self.table.schema, &self.relaxed)?;
                rows_out = arrow::compute::concat_batches(&self.relaxed, [&rows_out, &padded])?;
                probe_of.extend(unmatched);
            }
        }
        if rows_out.num_rows() == 0 {
            return Ok(());
        }
        let rows_out = RecordBatch::try_new(self.schema.clone(), rows_out.columns().to_vec())
            .unwrap_or(rows_out);
        match ops {
            None => out.emit(rows_out),
            Some(ops) => {
                let kinds = arrow::compute::take(&ops, &UInt32Array::from(probe_of), None)?;
                out.emit(changelog::attach(&rows_out, kinds)?);
            }
        }
        Ok(())
    }
}
