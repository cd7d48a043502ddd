//! The sending side of a task: one [`OutEdge`] per outgoing edge, each with one channel
//! per downstream subtask. Data is partitioned; every other message goes to all channels.

use crate::graph::Partitioning;
use crate::message::Message;
use crate::metrics::TaskMetrics;
use arrow::array::{RecordBatch, UInt32Array};
use std::sync::Arc;
use tokio::sync::mpsc::Sender;
use tokio::sync::mpsc::error::TrySendError;
use weir_common::{Error, Result};

pub use weir_state::key::{hash_rows, key_group, subtask_for_key_group};

pub(crate) struct OutEdge {
    pub partitioning: Partitioning,
    pub channels: Vec<Sender<Message>>,
    pub next: usize,
    pub max_parallelism: usize,
    /// The sending task's metrics: time spent waiting for a full channel counts as
    /// back-pressure.
    pub metrics: Arc<TaskMetrics>,
}

impl OutEdge {
    async fn send(&self, channel: usize, msg: Message) -> Result<()> {
        let tx = &self.channels[channel];
        match tx.try_send(msg) {
            Ok(()) => Ok(()),
            Err(TrySendError::Closed(_)) => Err(Error::Cancelled),
            Err(TrySendError::Full(msg)) => {
                let since = self.metrics.detailed.then(std::time::Instant::now);
                let sent = tx.send(msg).await.map_err(|_| Error::Cancelled);
                if let Some(since) = since {
                    TaskMetrics::add_ns(&self.metrics.backpressured_ns, since.elapsed());
                }
                sent
            }
        }
    }

    async fn send_data(&mut self, subtask: usize, batch: RecordBatch) -> Result<()> {
        let n = self.channels.len();
        match &self.partitioning {
            Partitioning::Forward => {
                let ch = if n == 1 { 0 } else { subtask };
                self.send(ch, Message::Data(batch)).await
            }
            Partitioning::Rebalance => {
                let ch = self.next % n;
                self.next = self.next.wrapping_add(1);
                self.send(ch, Message::Data(batch)).await
            }
            Partitioning::Broadcast => {
                for ch in 0..n {
                    self.send(ch, Message::Data(batch.clone())).await?;
                }
                Ok(())
            }
            Partitioning::Hash(keys) => {
                let hashes = hash_rows(&batch, keys)?;
                let mut rows: Vec<Vec<u32>> = vec![Vec::new(); n];
                for (row, h) in hashes.iter().enumerate() {
                    let kg = key_group(*h, self.max_parallelism);
                    rows[subtask_for_key_group(kg, n, self.max_parallelism)].push(row as u32);
                }
                for (ch, idx) in rows.into_iter().enumerate() {
                    if idx.is_empty() {
                        continue;
                    }
                    let part = if idx.len() == batch.num_rows() {
                        batch.clone()
                    } else {
                        let indices = UInt32Array::from(idx);
                        let columns = batch
                            .columns()
                            .iter()
                            .map(|c| arrow::compute::take(c, &indices, None))
                            .collect::<Result<Vec<_>, _>>()?;
                        RecordBatch::try_new(batch.schema(), columns)?
                    };
                    self.send(ch, Message::Data(part)).await?;
                }
                Ok(())
            }
        }
    }
}

/// All outgoing edges of a task.
pub(crate) struct OutputWriter {
    pub subtask: usize,
    pub edges: Vec<OutEdge>,
    pub metrics: Arc<TaskMetrics>,
}

impl OutputWriter {
    pub async fn data(&mut self, batch: RecordBatch) -> Result<()> {
        let subtask = self.subtask;
        if !self.edges.is_empty() {
            self.metrics.count_out(&batch);
        }
        for edge in &mut self.edges {
            edge.send_data(subtask, batch.clone()).await?;
        }
        Ok(())
    }

    /// Sends `EndOfPartition` to every downstream channel. A downstream task may already
    /// have closed (it closes on the same checkpoint completion as this task), so a
    /// channel without receiver is not an error here.
    pub async fn end_of_partition(&mut self) {
        for edge in &self.edges {
            for ch in &edge.channels {
                let _ = ch.send(Message::EndOfPartition).await;
            }
        }
    }

    /// Sends a non-data message to every downstream channel.
    pub async fn broadcast(&mut self, msg: Message) -> Result<()> {
        for edge in &self.edges {
            for ch in 0..edge.channels.len() {
                edge.send(ch, msg.clone()).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_cover_all_subtasks_in_ranges() {
        let owners: Vec<_> = (0..128)
            .map(|kg| subtask_for_key_group(kg, 3, 128))
            .collect();
        assert_eq!(owners[0], 0);
        assert_eq!(owners[127], 2);
        assert!(owners.windows(2).all(|w| w[0] <= w[1]));
    }
}
