//! Encoding of keyed operator state: Arrow IPC batches, hex-encoded into the JSON items
//! of an `OperatorState`.

use arrow::array::RecordBatch;
use weir_common::{Error, Result};

/// One batch as hex-encoded Arrow IPC stream bytes.
pub fn encode_batch(batch: &RecordBatch) -> Result<String> {
    let mut bytes = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The batches of a string written by [`encode_batch`].
pub fn decode_batches(text: &str) -> Result<Vec<RecordBatch>> {
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|e| Error::Checkpoint(format!("corrupt operator state: {e}")))?;
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}
