//! `'connector' = 'blackhole'`: discards every row (for benchmarks).

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use weir_common::Result;
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};

pub const OPTIONS: &[&str] = &["connector"];

pub struct BlackholeSinkFactory;

struct BlackholeSink;

#[async_trait]
impl Operator for BlackholeSink {
    async fn process_batch(&mut self, _: usize, _: RecordBatch, _: &mut Output) -> Result<()> {
        // A slow sink, for back-pressure tests (`WEIR_FAILPOINTS=blackhole-batch=sleep:MS`).
        if let Some(delay) = weir_common::failpoint_delay("blackhole-batch") {
            tokio::time::sleep(delay).await;
        }
        Ok(())
    }
}

impl OperatorFactory for BlackholeSinkFactory {
    fn name(&self) -> String {
        "Sink: blackhole".into()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(BlackholeSink))
    }
    fn is_sink(&self) -> bool {
        true
    }
}
