//! `'connector' = 'memory'`: Arrow record batches handed over by the embedding program
//! (`Engine::register_batches`). Bounded; batch `i` goes to subtask `i % parallelism`, and
//! the position (batches emitted per split) is checkpointed.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::{OperatorState, Source, SourceFactory, SourcePoll, StateDistribution, TaskInfo};

pub const OPTIONS: &[&str] = &["connector", "memory.id"];

fn registry() -> &'static Mutex<HashMap<String, Arc<Vec<RecordBatch>>>> {
    static R: OnceLock<Mutex<HashMap<String, Arc<Vec<RecordBatch>>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Stores `batches` for this process and returns the id a table refers to them by.
pub fn register(batches: Vec<RecordBatch>) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id.clone(), Arc::new(batches));
    id
}

pub struct MemorySourceFactory {
    schema: SchemaRef,
    batches: Arc<Vec<RecordBatch>>,
}

impl MemorySourceFactory {
    pub fn new(options: &ConnectorOptions, schema: SchemaRef) -> Result<Self> {
        options.check_known("memory", OPTIONS)?;
        let id = options.required("memory.id")?;
        let batches = registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| {
                Error::config(format!(
                    "table '{}': no in-memory data registered as '{id}'",
                    options.table
                ))
            })?;
        for b in batches.iter() {
            if b.schema().fields().len() != schema.fields().len() {
                return Err(Error::input(format!(
                    "table '{}': a batch does not match the table's schema",
                    options.table
                )));
            }
        }
        Ok(Self { schema, batches })
    }

    /// A source of `batches` (of `schema`) not registered anywhere (`VALUES`).
    pub fn from_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self {
            schema,
            batches: Arc::new(batches),
        }
    }
}

#[derive(Clone, Serialize, Deserialize)]
struct Split {
    split: usize,
    splits: usize,
    next: usize,
}

impl SourceFactory for MemorySourceFactory {
    fn name(&self) -> String {
        format!("Source: memory ({} batches)", self.batches.len())
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn is_bounded(&self) -> bool {
        true
    }
    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>> {
        let splits = match restored {
            Some(s) => s
                .items
                .into_iter()
                .map(serde_json::from_value)
                .collect::<Result<_, _>>()?,
            None => vec![Split {
                split: task.subtask,
                splits: task.parallelism,
                next: 0,
            }],
        };
        Ok(Box::new(MemorySource {
            schema: self.schema.clone(),
            batches: self.batches.clone(),
            splits,
        }))
    }
}

struct MemorySource {
    schema: SchemaRef,
    batches: Arc<Vec<RecordBatch>>,
    splits: Vec<Split>,
}

#[async_trait]
impl Source for MemorySource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        for s in &mut self.splits {
            let index = s.split + s.next * s.splits;
            if let Some(b) = self.batches.get(index) {
                s.next += 1;
                // The table's schema (nullability may differ); the row count is given for
                // batches without columns (`SELECT 1` reads one row of none).
                let batch = RecordBatch::try_new_with_options(
                    self.schema.clone(),
                    b.columns().to_vec(),
                    &arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                )?;
                return Ok(SourcePoll::Batch(batch));
            }
        }
        Ok(SourcePoll::Finished)
    }
    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let items = self
            .splits
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        Ok(OperatorState::new(StateDistribution::RoundRobin, items))
    }
}
