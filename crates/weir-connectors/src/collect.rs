//! The sink of a `SELECT` shown by the shell: it hands each batch, changelog kinds
//! included, to whoever holds the receiving end of a channel (Flink's collect sink).
//! The channel is bounded, so a reader that falls behind slows the job down rather than
//! letting rows pile up in memory. Not exactly-once: after a restart rows are shown again.

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use tokio::sync::mpsc;
use weir_common::Result;
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};

/// Batches in flight between the job and the reader.
const CAPACITY: usize = 16;

/// A collect sink and the receiving end of its rows.
pub fn collector() -> (CollectSinkFactory, mpsc::Receiver<RecordBatch>) {
    let (sender, receiver) = mpsc::channel(CAPACITY);
    (CollectSinkFactory { sender }, receiver)
}

pub struct CollectSinkFactory {
    sender: mpsc::Sender<RecordBatch>,
}

struct CollectSink {
    sender: mpsc::Sender<RecordBatch>,
}

#[async_trait]
impl Operator for CollectSink {
    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        // A reader that went away cancels the job; until then its rows are dropped.
        let _ = self.sender.send(batch).await;
        Ok(())
    }
}

impl OperatorFactory for CollectSinkFactory {
    fn name(&self) -> String {
        "Sink: collect".into()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CollectSink {
            sender: self.sender.clone(),
        }))
    }
    fn is_sink(&self) -> bool {
        true
    }
}
