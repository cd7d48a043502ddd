//! `Union`: passes batches of every input on under the union's schema.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use weir_common::Result;
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};

struct UnionOperator {
    schema: SchemaRef,
}

#[async_trait]
impl Operator for UnionOperator {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        out.emit(RecordBatch::try_new(
            self.schema.clone(),
            batch.columns().to_vec(),
        )?);
        Ok(())
    }
}

/// Creates union operators.
pub struct UnionOperatorFactory {
    /// The union's output schema.
    pub schema: SchemaRef,
}

impl OperatorFactory for UnionOperatorFactory {
    fn name(&self) -> String {
        "Union".into()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(UnionOperator {
            schema: self.schema.clone(),
        }))
    }
}
