//! What window and group aggregates share: evaluating the aggregates' arguments and
//! filters once per batch, feeding a group's rows to its accumulators, turning values into
//! output columns, and storing accumulator states as columns of a snapshot.

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Accumulator, GroupsAccumulator};
use weir_common::Result;
use weir_sql::AggregateSpec;

/// The accumulators of one group.
pub type Accumulators = Vec<Box<dyn Accumulator>>;

/// The aggregate functions' names, comma-separated (for operator names).
pub fn names(aggregates: &[AggregateSpec]) -> String {
    aggregates
        .iter()
        .map(|a| a.function.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// New accumulators for `aggregates`; `retracting` ones can take rows back, in any order
/// (`MIN`/`MAX` are Weir's [`super::min_max`]: DataFusion's sliding ones take values back
/// only in the order they came).
pub fn new_accumulators(aggregates: &[AggregateSpec], retracting: bool) -> Result<Accumulators> {
    aggregates
        .iter()
        .map(|a| {
            Ok(if !retracting {
                a.function.create_accumulator()?
            } else if let Some(max) = super::min_max::is_min_max(a.function.fun().name()) {
                let data_type = a.function.field().data_type().clone();
                Box::new(super::min_max::RetractingMinMax::new(max, data_type))
            } else {
                a.function.create_sliding_accumulator()?
            })
        })
        .collect()
}

/// A vectorized accumulator for `spec`: DataFusion's own where the function has one, its
/// adapter over row accumulators otherwise.
pub fn groups_accumulator(spec: &AggregateSpec) -> Result<Box<dyn GroupsAccumulator>> {
    let function = spec.function.clone();
    Ok(if function.groups_accumulator_supported() {
        function.create_groups_accumulator()?
    } else {
        Box::new(datafusion::physical_expr::GroupsAccumulatorAdapter::new(
            move || function.create_accumulator(),
        ))
    })
}

/// The arguments and `FILTER` masks of every aggregate over one batch.
pub struct AggregateInputs {
    inputs: Vec<Vec<ArrayRef>>,
    filters: Vec<Option<BooleanArray>>,
}

impl AggregateInputs {
    /// Evaluates the arguments of `aggregates` over `batch`.
    pub fn evaluate(aggregates: &[AggregateSpec], batch: &RecordBatch) -> Result<Self> {
        let n = batch.num_rows();
        let mut inputs = Vec::with_capacity(aggregates.len());
        let mut filters = Vec::with_capacity(aggregates.len());
        for a in aggregates {
            inputs.push(
                a.function
                    .expressions()
                    .iter()
                    .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                    .collect::<Result<Vec<_>, _>>()?,
            );
            filters.push(match &a.filter {
                Some(f) => Some(f.evaluate(batch)?.into_array(n)?.as_boolean().clone()),
                None => None,
            });
        }
        Ok(Self { inputs, filters })
    }

    /// Aggregate `a`'s arguments and filter mask, for the rows `rows` (all when `None`).
    pub fn columns(
        &self,
        a: usize,
        rows: Option<&UInt32Array>,
    ) -> Result<(Vec<ArrayRef>, Option<BooleanArray>)> {
        let Some(rows) = rows else {
            return Ok((self.inputs[a].clone(), self.filters[a].clone()));
        };
        let values = self.inputs[a]
            .iter()
            .map(|c| arrow::compute::take(c, rows, None))
            .collect::<Result<Vec<_>, _>>()?;
        let filter = match &self.filters[a] {
            Some(f) => Some(arrow::compute::take(f, rows, None)?.as_boolean().clone()),
            None => None,
        };
        Ok((values, filter))
    }

    /// Feeds rows `rows` to `accumulators` (takes them back when `retract`).
    pub fn feed(&self, accumulators: &mut Accumulators, rows: &[u32], retract: bool) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let take = UInt32Array::from(rows.to_vec());
        for (a, acc) in accumulators.iter_mut().enumerate() {
            let mut columns = self.inputs[a]
                .iter()
                .map(|c| arrow::compute::take(c, &take, None))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(filter) = &self.filters[a] {
                let mask = arrow::compute::take(filter, &take, None)?;
                let mask = mask.as_boolean();
                columns = columns
                    .iter()
                    .map(|c| arrow::compute::filter(c, mask))
                    .collect::<Result<Vec<_>, _>>()?;
            }
            if retract {
                acc.retract_batch(&columns)?;
            } else {
                acc.update_batch(&columns)?;
            }
        }
        Ok(())
    }
}

/// The current value of every accumulator.
pub fn evaluate(accumulators: &mut Accumulators) -> Result<Vec<ScalarValue>> {
    accumulators.iter_mut().map(|a| Ok(a.evaluate()?)).collect()
}

/// Output columns from values (`values[i]` holds one value per group, in the order of the
/// aggregates), cast to the `types` the plan expects.
pub fn value_columns(values: Vec<Vec<ScalarValue>>, types: &[DataType]) -> Result<Vec<ArrayRef>> {
    let mut columns = Vec::with_capacity(types.len());
    for (a, want) in types.iter().enumerate() {
        let array = ScalarValue::iter_to_array(values.iter().map(|row| row[a].clone()))?;
        columns.push(if array.data_type() == want {
            array
        } else {
            arrow::compute::cast(&array, want)?
        });
    }
    Ok(columns)
}

/// Accumulator states as snapshot columns, one row per group: the state values of the
/// first aggregate, then of the second, and so on. The accumulators (of `aggregates`,
/// `retracting` or not) stay usable.
///
/// DataFusion calls `Accumulator::state` once, at the end of a partial aggregation, and
/// some accumulators hand over what they hold there (`COUNT(DISTINCT …)` of strings gives
/// its set away). So each group's accumulators are rebuilt from the state they gave, as
/// a restore (or DataFusion's final aggregation) would. Retracting (sliding) accumulators
/// keep theirs: their state is a copy, and some of them cannot merge one.
pub fn state_columns<'a>(
    aggregates: &[AggregateSpec],
    retracting: bool,
    groups: impl Iterator<Item = &'a mut Accumulators>,
) -> Result<Vec<(Field, ArrayRef)>> {
    let mut per_field: Vec<Vec<ScalarValue>> = Vec::new();
    for accumulators in groups {
        let mut f = 0;
        let mut rebuilt = match retracting {
            false => Some(new_accumulators(aggregates, false)?),
            true => None,
        };
        for (a, acc) in accumulators.iter_mut().enumerate() {
            let state = acc.state()?;
            if let Some(rebuilt) = &mut rebuilt {
                let arrays: Vec<ArrayRef> = (state.iter())
                    .map(|v| v.to_array())
                    .collect::<Result<_, _>>()?;
                rebuilt[a].merge_batch(&arrays)?;
            }
            for v in state {
                if per_field.len() <= f {
                    per_field.push(Vec::new());
                }
                per_field[f].push(v);
                f += 1;
            }
        }
        if let Some(rebuilt) = rebuilt {
            *accumulators = rebuilt;
        }
    }
    per_field
        .into_iter()
        .enumerate()
        .map(|(f, values)| {
            let array = ScalarValue::iter_to_array(values)?;
            Ok((state_field(f, array.data_type()), array))
        })
        .collect()
}

/// Accumulators rebuilt from row `row` of a snapshot batch whose state columns start at
/// `first` (as written by [`state_columns`]).
pub fn restore_accumulators(
    aggregates: &[AggregateSpec],
    retracting: bool,
    batch: &RecordBatch,
    first: usize,
    row: usize,
) -> Result<Accumulators> {
    let mut accumulators = new_accumulators(aggregates, retracting)?;
    let mut col = first;
    for acc in accumulators.iter_mut() {
        let n = acc.state()?.len();
        let states: Vec<ArrayRef> = (col..col + n)
            .map(|c| batch.column(c).slice(row, 1))
            .collect();
        acc.merge_batch(&states)?;
        col += n;
    }
    Ok(accumulators)
}

/// The name of the `f`th state column of a snapshot (counting over every aggregate).
pub fn state_field(f: usize, data_type: &DataType) -> Field {
    Field::new(format!("__state_{f}"), data_type.clone(), true)
}

/// One batch of the key columns `key_columns` (of columns `keys` of `input`; one constant
/// column when there are none) followed by `columns`. Its key columns for the key hash are
/// the first `keys.len()`.
pub fn keyed_columns_batch(
    input: &arrow::datatypes::Schema,
    keys: &[usize],
    key_columns: Vec<ArrayRef>,
    columns: Vec<(Field, ArrayRef)>,
) -> Result<RecordBatch> {
    use std::sync::Arc;
    let mut fields: Vec<Field> = if keys.is_empty() {
        vec![Field::new("__key", DataType::Boolean, true)]
    } else {
        keys.iter()
            .map(|k| input.field(*k).as_ref().clone().with_nullable(true))
            .collect()
    };
    let mut all_columns = key_columns;
    for (field, column) in columns {
        fields.push(field);
        all_columns.push(column);
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        all_columns,
    )?)
}

/// The row format of the snapshot rows (of groups or sessions) of `schema`, to move them to disk
/// ([`weir_state::cold`]); `None`, said in the log, when it does not take their types.
pub fn state_row_format(
    schema: arrow::datatypes::SchemaRef,
) -> Option<(arrow::datatypes::SchemaRef, arrow::row::RowConverter)> {
    let fields = (schema.fields().iter())
        .map(|f| arrow::row::SortField::new(f.data_type().clone()))
        .collect();
    match arrow::row::RowConverter::new(fields) {
        Ok(converter) => Some((schema, converter)),
        Err(e) => {
            tracing::warn!("the state of this aggregate cannot move to disk: {e}");
            None
        }
    }
}
