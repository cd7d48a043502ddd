//! What crosses the network: the control stream between a worker and the coordinator
//! (JSON messages in a `FlightData`'s `app_metadata`), and the messages of a data channel
//! (Arrow IPC in `data_body` for batches, JSON in `app_metadata` for the rest).

use crate::JobDefinition;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_flight::FlightData;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use weir_common::{Error, Result};
use weir_runtime::metrics::TaskSample;
use weir_runtime::remote::{AttemptSpec, ChannelId, Control, TaskEvent, TaskRef};
use weir_runtime::{Barrier, Message, StopMode, WatermarkStatus};

/// From a worker to the coordinator, on the worker's control stream.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToCoordinator {
    /// The stream's first message.
    Register {
        /// Subtasks of one vertex it runs at once (`taskmanager.numberOfTaskSlots`).
        slots: usize,
        /// Where its data endpoint listens (`host:port`), for its peers.
        data_address: String,
    },
    Heartbeat,
    /// Rows the tasks of a part counted so far, and each of its tasks' metrics (sent
    /// every second, and before `PartEnded`).
    Progress {
        attempt: uuid::Uuid,
        rows_in: u64,
        rows_out: u64,
        tasks: Vec<(TaskRef, TaskSample)>,
    },
    /// An event of a task of attempt `attempt`.
    Event {
        attempt: uuid::Uuid,
        event: TaskEvent,
    },
    /// A task of `attempt` asked for an early checkpoint.
    RequestCheckpoint {
        attempt: uuid::Uuid,
    },
    /// The worker's part of `attempt` ended: every task closed, or `error`.
    PartEnded {
        attempt: uuid::Uuid,
        error: Option<String>,
    },
}

/// From the coordinator to a worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToWorker {
    Registered {
        worker_id: u64,
    },
    /// Run the tasks `spec` places on worker `me` of the attempt.
    Start {
        job: JobDefinition,
        spec: AttemptSpec,
        me: usize,
    },
    Control {
        attempt: uuid::Uuid,
        task: TaskRef,
        control: Control,
    },
    Cancel {
        attempt: uuid::Uuid,
    },
}

/// Wraps a control message into a `FlightData`.
pub fn control_frame<T: Serialize>(msg: &T) -> FlightData {
    FlightData {
        app_metadata: Bytes::from(serde_json::to_vec(msg).expect("control messages serialize")),
        ..Default::default()
    }
}

/// Reads a control message from a `FlightData`.
pub fn read_control<T: for<'de> Deserialize<'de>>(frame: &FlightData) -> Result<T> {
    serde_json::from_slice(&frame.app_metadata)
        .map_err(|e| Error::External(format!("unreadable message from a peer: {e}")))
}

/// The first frame of a data channel's stream: which channel of which attempt it carries.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChannelHeader {
    pub attempt: uuid::Uuid,
    pub channel: ChannelId,
}

/// A data channel's message other than a batch.
#[derive(Debug, Serialize, Deserialize)]
enum Event {
    Watermark(i64),
    WatermarkStatus(WatermarkStatus),
    Barrier(Barrier),
    EndOfData(StopMode),
    EndOfPartition,
}

/// Encodes a channel's message: a batch as an Arrow IPC stream in `data_body` (no
/// `app_metadata`), anything else as JSON in `app_metadata`.
pub fn encode(msg: Message) -> Result<FlightData> {
    let event = match msg {
        Message::Data(batch) => {
            let mut buf = Vec::with_capacity(batch.get_array_memory_size() + 1024);
            let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
            w.write(&batch)?;
            w.finish()?;
            drop(w);
            return Ok(FlightData {
                data_body: Bytes::from(buf),
                ..Default::default()
            });
        }
        Message::Watermark(w) => Event::Watermark(w),
        Message::WatermarkStatus(s) => Event::WatermarkStatus(s),
        Message::Barrier(b) => Event::Barrier(b),
        Message::EndOfData(m) => Event::EndOfData(m),
        Message::EndOfPartition => Event::EndOfPartition,
    };
    Ok(control_frame(&event))
}

/// Decodes what [`encode`] made.
pub fn decode(frame: FlightData) -> Result<Message> {
    if frame.app_metadata.is_empty() {
        let mut reader = StreamReader::try_new(std::io::Cursor::new(frame.data_body), None)?;
        return match reader.next() {
            Some(batch) => Ok(Message::Data(batch?)),
            None => Err(Error::External("a data frame without a batch".into())),
        };
    }
    Ok(match read_control::<Event>(&frame)? {
        Event::Watermark(w) => Message::Watermark(w),
        Event::WatermarkStatus(s) => Message::WatermarkStatus(s),
        Event::Barrier(b) => Message::Barrier(b),
        Event::EndOfData(m) => Message::EndOfData(m),
        Event::EndOfPartition => Message::EndOfPartition,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    use weir_common::CheckpointId;
    use weir_runtime::CheckpointKind;

    #[test]
    fn channel_messages_round_trip() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        let messages = vec![
            Message::WatermarkStatus(WatermarkStatus::Idle),
            Message::Data(batch.clone()),
            Message::Watermark(-5),
            Message::Barrier(Barrier {
                id: CheckpointId(7),
                kind: CheckpointKind::Savepoint,
            }),
            Message::EndOfData(StopMode::NoDrain),
            Message::EndOfPartition,
        ];
        for m in messages {
            let back = decode(encode(m.clone()).unwrap()).unwrap();
            match (&m, &back) {
                (Message::Data(a), Message::Data(b)) => assert_eq!(a, b),
                _ => assert_eq!(format!("{m:?}"), format!("{back:?}")),
            }
        }
    }
}
