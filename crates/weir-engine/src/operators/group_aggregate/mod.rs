//! `GroupAggregate`: the updating aggregate of a `GROUP BY` without a window.
//!
//! Input arrives hash-partitioned by the group keys. Each group keeps the state of every
//! aggregate function and a count of its live input rows. After each batch, every group it
//! touched emits its change: `+I` for a new group, `-U` (old values) and `+U` (new values)
//! when its values changed, `-D` when its last row was retracted (then it is dropped).
//! State is keyed and snapshotted per key group, like the window aggregate's. With a state
//! TTL, groups no row reached for that long are dropped (a later row starts the group
//! afresh).
//!
//! Two implementations share the snapshot layout (key columns, `__rows`, then each
//! aggregate's state fields):
//! - [`vectorized`], for append-only input: DataFusion's `GroupValues` hash table gives
//!   each group a dense id, the states live in per-group columns, and a batch is
//!   aggregated with DataFusion `GroupsAccumulator`s over the groups it touched, a call
//!   per aggregate rather than per group; its snapshots write only the groups changed
//!   since the previous one (`operators::delta`);
//! - [`rows`], for changelog input (rows are taken back from retracting accumulators,
//!   which `GroupsAccumulator`s cannot do) and for `DISTINCT` aggregates or aggregates
//!   whose state is a list (re-writing a growing list at every touch would be quadratic).

mod rows;
mod vectorized;

use super::{aggregate, keys};
use arrow::datatypes::{DataType, SchemaRef};
use weir_common::Result;
use weir_runtime::{Operator, OperatorFactory, TaskInfo};
use weir_sql::AggregateSpec;

/// Creates group aggregate operators.
pub struct GroupAggregateFactory {
    /// Group columns of the input.
    pub keys: Vec<usize>,
    /// The aggregate functions.
    pub aggregates: Vec<AggregateSpec>,
    /// Whether the input is a changelog whose retractions must be taken back.
    pub retract: bool,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Output schema without the row-kind column: group columns, then the aggregates.
    pub schema: SchemaRef,
    /// `table.exec.state.ttl`: groups untouched this long are dropped.
    pub state_ttl: Option<std::time::Duration>,
    /// The job's state budget: past it, the row-at-a-time implementation moves cold
    /// groups to disk.
    pub state_memory: Option<std::sync::Arc<weir_state::spill::StateMemory>>,
}

impl GroupAggregateFactory {
    /// The types of the aggregate columns of the output.
    fn value_types(&self) -> Vec<DataType> {
        self.schema.fields()[self.keys.len()..]
            .iter()
            .map(|f| f.data_type().clone())
            .collect()
    }

    /// Whether the vectorized implementation takes this aggregate.
    fn vectorized(&self) -> Result<bool> {
        if self.retract {
            return Ok(false);
        }
        for a in &self.aggregates {
            if a.function.is_distinct() {
                return Ok(false);
            }
            for field in a.function.state_fields()? {
                if field.data_type().is_nested() {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// The key columns of the output rows: rows `rows` of the batch's `key_columns` (none for
/// a global aggregate, whose key column is only a constant).
fn output_keys(
    keys: &[usize],
    key_columns: &[arrow::array::ArrayRef],
    rows: Vec<u32>,
) -> Result<Vec<arrow::array::ArrayRef>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let take = arrow::array::UInt32Array::from(rows);
    Ok(key_columns
        .iter()
        .map(|c| arrow::compute::take(c, &take, None))
        .collect::<Result<Vec<_>, _>>()?)
}

/// Groups' snapshot rows read from disk ([`weir_state::cold`]), in the row format
/// `codec` (whose schema is theirs).
fn from_disk(
    codec: Option<&(SchemaRef, arrow::row::RowConverter)>,
    values: &[Vec<u8>],
) -> Result<arrow::array::RecordBatch> {
    let (schema, codec) =
        codec.ok_or_else(|| weir_common::Error::internal("groups on disk without a row format"))?;
    let parser = codec.parser();
    let columns = codec.convert_rows(values.iter().map(|v| parser.parse(v)))?;
    Ok(arrow::array::RecordBatch::try_new(schema.clone(), columns)?)
}

impl OperatorFactory for GroupAggregateFactory {
    fn name(&self) -> String {
        format!(
            "GroupAggregate(keys: {}; {})",
            keys::names(&self.input_schema, &self.keys),
            aggregate::names(&self.aggregates)
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        if self.vectorized()? {
            vectorized::create(self, task)
        } else {
            rows::create(self, task)
        }
    }
}
