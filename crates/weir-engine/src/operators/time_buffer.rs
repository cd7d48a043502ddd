//! Rows waiting for the watermark to reach their event time (the temporal sort, OVER
//! aggregates), kept in arrival order as the batches they came in.

use arrow::array::{Array, RecordBatch};
use weir_common::Result;

/// Waiting batches with their earliest and latest time, so a watermark takes whole batches
/// or leaves them without reading their times again (only a batch it falls inside is
/// split).
struct Waiting {
    rows: RecordBatch,
    first: i64,
    last: i64,
}

/// Rows ahead of the watermark, by the time in one column, and the watermark they wait
/// for.
pub struct TimeBuffer {
    /// The column holding each row's time.
    column: usize,
    waiting: Vec<Waiting>,
    watermark: i64,
}

impl TimeBuffer {
    pub fn new(column: usize) -> Self {
        Self {
            column,
            waiting: Vec::new(),
            watermark: i64::MIN,
        }
    }

    /// Event times (milliseconds) of `batch`'s rows; NULL as `i64::MIN` (always late).
    pub fn times(&self, batch: &RecordBatch) -> Result<Vec<i64>> {
        let times = weir_sql::group_windows::epoch_millis(batch.column(self.column))?;
        Ok((0..times.len())
            .map(|i| match times.is_null(i) {
                true => i64::MIN,
                false => times.value(i),
            })
            .collect())
    }

    /// Keeps the rows of `batch` for which `keep(time)` holds; gives the others.
    fn split(
        &self,
        batch: &RecordBatch,
        keep: impl Fn(i64) -> bool,
    ) -> Result<(RecordBatch, RecordBatch)> {
        let mask: arrow::array::BooleanArray = self
            .times(batch)?
            .into_iter()
            .map(|t| Some(keep(t)))
            .collect();
        let kept = arrow::compute::filter_record_batch(batch, &mask)?;
        let other = arrow::compute::filter_record_batch(batch, &arrow::compute::not(&mask)?)?;
        Ok((kept, other))
    }

    /// `rows` with the span of their times (none when there are no rows).
    fn waiting(&self, rows: RecordBatch) -> Result<Option<Waiting>> {
        if rows.num_rows() == 0 {
            return Ok(None);
        }
        let times = self.times(&rows)?;
        let first = times.iter().copied().min().unwrap_or(i64::MAX);
        let last = times.iter().copied().max().unwrap_or(i64::MIN);
        Ok(Some(Waiting { rows, first, last }))
    }

    /// Adds `rows` (all of them).
    pub fn push(&mut self, rows: RecordBatch) -> Result<()> {
        let w = self.waiting(rows)?;
        self.waiting.extend(w);
        Ok(())
    }

    /// Adds the rows of `batch` ahead of the watermark; the others are late and dropped.
    /// Returns how many were dropped.
    pub fn push_on_time(&mut self, batch: &RecordBatch) -> Result<usize> {
        let watermark = self.watermark;
        let (on_time, late) = self.split(batch, |t| t > watermark)?;
        self.push(on_time)?;
        Ok(late.num_rows())
    }

    /// Moves the watermark to `watermark`; false when it is not ahead of the current one
    /// (nothing new is due).
    pub fn advance(&mut self, watermark: i64) -> bool {
        if watermark <= self.watermark {
            return false;
        }
        self.watermark = watermark;
        true
    }

    /// Takes the rows at or before `upto`, in arrival order.
    pub fn take_upto(&mut self, upto: i64) -> Result<Vec<RecordBatch>> {
        let mut due = Vec::new();
        let mut still = Vec::new();
        for w in std::mem::take(&mut self.waiting) {
            if w.last <= upto {
                due.push(w.rows);
            } else if w.first > upto {
                still.push(w);
            } else {
                let (ready, later) = self.split(&w.rows, |t| t <= upto)?;
                due.push(ready);
                still.extend(self.waiting(later)?);
            }
        }
        self.waiting = still;
        Ok(due)
    }

    /// Takes the rows at or before `upto` in time order (stable: rows at one time in
    /// arrival order), in chunks of about `chunk_rows` rows so a watermark that releases
    /// many rows does not hold all their results at once; a chunk never splits the rows of
    /// one time.
    pub fn take_sorted_upto(
        &mut self,
        upto: i64,
        schema: &arrow::datatypes::SchemaRef,
        chunk_rows: usize,
    ) -> Result<Vec<RecordBatch>> {
        let due = self.take_upto(upto)?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let rows = arrow::compute::concat_batches(schema, &due)?;
        let times = self.times(&rows)?;
        let mut order: Vec<u32> = (0..rows.num_rows() as u32).collect();
        order.sort_by_key(|i| times[*i as usize]);
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let mut end = (start + chunk_rows).min(order.len());
            while end < order.len() && times[order[end] as usize] == times[order[end - 1] as usize]
            {
                end += 1;
            }
            let chunk = arrow::array::UInt32Array::from(order[start..end].to_vec());
            chunks.push(arrow::compute::take_record_batch(&rows, &chunk)?);
            start = end;
        }
        Ok(chunks)
    }

    /// The waiting batches, in arrival order.
    pub fn batches(&self) -> impl Iterator<Item = &RecordBatch> {
        self.waiting.iter().map(|w| &w.rows)
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Memory held by the waiting rows.
    pub fn bytes(&self) -> usize {
        self.batches().map(|b| b.get_array_memory_size()).sum()
    }
}
