//! Window functions that streaming OVER aggregates run as aggregates, as Flink does:
//! `LAG(x [, offset [, default]])` keeps the last values of its partition, and
//! `ROW_NUMBER()` counts its rows (see [`row_number`]).

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, Signature, Volatility,
};
use std::collections::VecDeque;
use std::sync::Arc;

/// The `lag` aggregate: `LAG(x [, offset [, default]])` over the rows taken so far, the
/// value `offset` (default 1) rows before the last one taken, `default` (or NULL) while
/// there are not that many. Like Flink's, it reads the last row taken, so peers in a
/// `RANGE` frame share the value before the last of them.
pub fn lag() -> AggregateUDF {
    AggregateUDF::new_from_impl(Lag {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

/// `ROW_NUMBER()` of a streaming OVER window: the count of the partition's rows so far.
pub fn row_number() -> Expr {
    datafusion::functions_aggregate::count::count(Expr::Literal(ScalarValue::Int64(Some(1)), None))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Lag {
    signature: Signature,
}

impl AggregateUDFImpl for Lag {
    fn name(&self) -> &str {
        "lag"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [value, ..] if args.len() <= 3 => Ok(value.clone()),
            _ => exec_err!("LAG takes a value, an offset and a default"),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let value = args.return_field.data_type().clone();
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[values]", args.name),
                DataType::List(Arc::new(Field::new_list_field(value.clone(), true))),
                true,
            )),
            Arc::new(Field::new(format!("{}[default]", args.name), value, true)),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let offset = match args.exprs.get(1) {
            None => 1,
            Some(e) => {
                let literal = e.downcast_ref::<datafusion::physical_expr::expressions::Literal>();
                match literal.map(|l| l.value().cast_to(&DataType::Int64)) {
                    Some(Ok(ScalarValue::Int64(Some(n)))) if n >= 0 => n as usize,
                    _ => return exec_err!("LAG: the offset must be a literal count of rows"),
                }
            }
        };
        let data_type = args.return_field.data_type().clone();
        Ok(Box::new(LagAccumulator {
            offset,
            values: VecDeque::new(),
            default: ScalarValue::try_from(&data_type)?,
            data_type,
        }))
    }
}

#[derive(Debug)]
struct LagAccumulator {
    offset: usize,
    /// The last `offset + 1` values taken, oldest first.
    values: VecDeque<ScalarValue>,
    /// The default of the last row taken.
    default: ScalarValue,
    data_type: DataType,
}

impl LagAccumulator {
    fn push(&mut self, value: ScalarValue) {
        self.values.push_back(value);
        while self.values.len() > self.offset + 1 {
            self.values.pop_front();
        }
    }
}

impl Accumulator for LagAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for i in 0..values[0].len() {
            self.push(ScalarValue::try_from_array(&values[0], i)?);
            if let Some(default) = values.get(2) {
                self.default = ScalarValue::try_from_array(default, i)?.cast_to(&self.data_type)?;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(match self.values.len() > self.offset {
            true => self.values[self.values.len() - 1 - self.offset].clone(),
            false => self.default.clone(),
        })
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.values.iter().map(|v| v.size()).sum::<usize>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self.values.iter().cloned().collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &self.data_type)),
            self.default.clone(),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for row in 0..lists.len() {
            if lists.is_null(row) {
                continue;
            }
            let values = lists.value(row);
            for i in 0..values.len() {
                self.push(ScalarValue::try_from_array(&values, i)?);
            }
            self.default = ScalarValue::try_from_array(&states[1], row)?;
        }
        Ok(())
    }
}
