//! `Union`: passes batches of every input on under the union's schema.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use std::sync::Arc;
use weir_common::Result;
use weir_common::changelog::{self, RowKind};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};

struct UnionOperator {
    schema: SchemaRef,
    changelog: bool,
}

#[async_trait]
impl Operator for UnionOperator {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        let (data, ops) = changelog::split(&batch);
        let data = RecordBatch::try_new(self.schema.clone(), data.columns().to_vec())?;
        // If any input updates, every output batch carries row kinds.
        out.emit(match (ops, self.changelog) {
            (Some(ops), _) => changelog::attach(&data, Arc::new(ops))?,
            (None, true) => {
                changelog::attach(&data, changelog::kinds(RowKind::Insert, data.num_rows()))?
            }
            (None, false) => data,
        });
        Ok(())
    }
}

/// Creates union operators.
pub struct UnionOperatorFactory {
    /// The union's output schema.
    pub schema: SchemaRef,
    /// Whether some input is a changelog (then so is the output).
    pub changelog: bool,
}

impl OperatorFactory for UnionOperatorFactory {
    fn name(&self) -> String {
        "Union".into()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(UnionOperator {
            schema: self.schema.clone(),
            changelog: self.changelog,
        }))
    }
}
