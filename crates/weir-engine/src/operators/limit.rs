//! `Limit`: passes on rows `skip .. skip + fetch` of its input in arrival order and drops
//! the rest (Flink's streaming `LIMIT` over an append-only query). It runs as one subtask;
//! the number of rows seen is its checkpointed state, so a restored job neither repeats
//! nor skips rows of the limit.

use arrow::array::RecordBatch;
use async_trait::async_trait;
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};

struct LimitOperator {
    skip: usize,
    fetch: Option<usize>,
    /// Input rows seen so far.
    seen: usize,
}

impl LimitOperator {
    /// Positions `start..end` of the batch arriving after `seen` rows that are passed on.
    fn range(&self, rows: usize) -> (usize, usize) {
        let start = self.skip.saturating_sub(self.seen).min(rows);
        let end = match self.fetch {
            Some(f) => (self.skip + f).saturating_sub(self.seen).min(rows),
            None => rows,
        };
        (start, end.max(start))
    }
}

#[async_trait]
impl Operator for LimitOperator {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        if let Some(state) = restored {
            for item in &state.items {
                self.seen += item["seen"].as_u64().ok_or_else(|| {
                    Error::internal(format!("LIMIT state without a row count: {item}"))
                })? as usize;
            }
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        let (start, end) = self.range(batch.num_rows());
        self.seen += batch.num_rows();
        out.emit(batch.slice(start, end - start));
        Ok(())
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        Ok(OperatorState::new(
            StateDistribution::ToFirst,
            vec![serde_json::json!({ "seen": self.seen })],
        ))
    }
}

/// Creates limit operators.
pub struct LimitFactory {
    /// Rows dropped first (`OFFSET`).
    pub skip: usize,
    /// Rows passed on after them (`LIMIT`); `None`: all.
    pub fetch: Option<usize>,
}

impl OperatorFactory for LimitFactory {
    fn name(&self) -> String {
        match self.fetch {
            Some(f) => format!("Limit(skip {}, fetch {f})", self.skip),
            None => format!("Limit(skip {})", self.skip),
        }
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(LimitOperator {
            skip: self.skip,
            fetch: self.fetch,
            seen: 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_on_the_rows_between_skip_and_skip_plus_fetch() {
        let op = |skip, fetch, seen| LimitOperator { skip, fetch, seen };
        assert_eq!(op(0, Some(3), 0).range(10), (0, 3));
        assert_eq!(op(0, Some(3), 2).range(10), (0, 1));
        assert_eq!(op(0, Some(3), 3).range(10), (0, 0));
        assert_eq!(op(5, Some(3), 0).range(4), (4, 4));
        assert_eq!(op(5, Some(3), 4).range(10), (1, 4));
        assert_eq!(op(5, None, 4).range(10), (1, 10));
        assert_eq!(op(5, Some(3), 20).range(10), (0, 0));
    }
}
