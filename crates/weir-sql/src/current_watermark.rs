//! `CURRENT_WATERMARK(rowtime)`: the watermark of the operator evaluating it, as a value of
//! the rowtime's type (precision 3), or NULL while there is none.
//!
//! The planner sees an ordinary scalar function. A streaming `Calc` operator binds every
//! call in its expressions to its own watermark cell ([`bind`]), which it updates as
//! watermarks arrive, so each subtask reads the watermark it has seen — Flink's semantics.
//! Unbound calls (batch mode, which has no watermarks, and expressions evaluated outside a
//! `Calc`) return NULL.

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// The function's name.
pub const CURRENT_WATERMARK: &str = "current_watermark";

/// No watermark has arrived yet.
const NONE: i64 = i64::MIN;

/// A subtask's watermark as `CURRENT_WATERMARK` reads it (epoch milliseconds).
#[derive(Debug)]
pub struct WatermarkCell(AtomicI64);

impl Default for WatermarkCell {
    fn default() -> Self {
        Self(AtomicI64::new(NONE))
    }
}

impl WatermarkCell {
    /// Records the operator's current watermark.
    pub fn set(&self, watermark: i64) {
        self.0.store(watermark, Ordering::Relaxed);
    }

    fn get(&self) -> Option<i64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|w| *w != NONE)
    }
}

/// The function, unbound (or bound to one operator's cell).
#[derive(Debug)]
pub struct CurrentWatermark {
    signature: Signature,
    cell: Option<Arc<WatermarkCell>>,
}

impl PartialEq for CurrentWatermark {
    fn eq(&self, other: &Self) -> bool {
        match (&self.cell, &other.cell) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for CurrentWatermark {}

impl Hash for CurrentWatermark {
    fn hash<H: Hasher>(&self, state: &mut H) {
        CURRENT_WATERMARK.hash(state);
        self.cell.as_ref().map(Arc::as_ptr).hash(state);
    }
}

impl CurrentWatermark {
    fn new(cell: Option<Arc<WatermarkCell>>) -> Self {
        Self {
            signature: Signature::any(1, Volatility::Volatile),
            cell,
        }
    }

    /// The function as the planner registers it.
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(Self::new(None))
    }
}

impl ScalarUDFImpl for CurrentWatermark {
    fn name(&self) -> &str {
        CURRENT_WATERMARK
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match &args[0] {
            DataType::Timestamp(_, tz) => {
                Ok(DataType::Timestamp(TimeUnit::Millisecond, tz.clone()))
            }
            other => plan_err!(
                "CURRENT_WATERMARK takes a rowtime attribute (a TIMESTAMP(3) or \
                 TIMESTAMP_LTZ(3) column with a WATERMARK), not {}",
                crate::types::sql_name(other)
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let tz = match args.return_field.data_type() {
            DataType::Timestamp(_, tz) => tz.clone(),
            _ => None,
        };
        let watermark = self.cell.as_ref().and_then(|c| c.get());
        Ok(ColumnarValue::Scalar(ScalarValue::TimestampMillisecond(
            watermark, tz,
        )))
    }
}

/// Whether `expr` calls `CURRENT_WATERMARK`.
pub fn mentions(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.exists(|e| {
        Ok(e.downcast_ref::<ScalarFunctionExpr>()
            .is_some_and(|f| f.name() == CURRENT_WATERMARK))
    })
    .unwrap_or(false)
}

/// `expr` with every `CURRENT_WATERMARK` call reading `cell`.
pub fn bind(
    expr: &Arc<dyn PhysicalExpr>,
    cell: &Arc<WatermarkCell>,
) -> Result<Arc<dyn PhysicalExpr>> {
    expr.clone()
        .transform(|e| {
            let Some(f) = e
                .downcast_ref::<ScalarFunctionExpr>()
                .filter(|f| f.name() == CURRENT_WATERMARK)
            else {
                return Ok(Transformed::no(e));
            };
            let bound = ScalarUDF::new_from_impl(CurrentWatermark::new(Some(cell.clone())));
            // A function's return field does not depend on the schema.
            let field = f.return_field(&arrow::datatypes::Schema::empty())?;
            Ok(Transformed::yes(Arc::new(ScalarFunctionExpr::new(
                CURRENT_WATERMARK,
                Arc::new(bound),
                f.args().to_vec(),
                field,
                Arc::new(f.config_options().clone()),
            )) as Arc<dyn PhysicalExpr>))
        })
        .map(|t| t.data)
}

/// Checks that every `CURRENT_WATERMARK` in `steps` (a `Calc` over node `input`) reads a
/// rowtime attribute, as Flink requires: a column with a `WATERMARK`, or a window's
/// `window_time`, passed through unchanged.
pub fn check_steps(
    nodes: &[crate::plan::PlanNode],
    input: usize,
    steps: &[crate::plan::CalcStep],
) -> weir_common::Result<()> {
    use datafusion::physical_expr::expressions::Column;
    for (i, step) in steps.iter().enumerate() {
        for expr in step.exprs() {
            let mut bad = None;
            expr.apply(|e| {
                if let Some(f) = e
                    .downcast_ref::<ScalarFunctionExpr>()
                    .filter(|f| f.name() == CURRENT_WATERMARK)
                {
                    let arg = &f.args()[0];
                    let rowtime = arg
                        .downcast_ref::<Column>()
                        .and_then(|c| crate::plan::passed_through(&steps[..i], c.index()))
                        .is_some_and(|c| crate::plan::is_time_attribute(nodes, input, c));
                    if !rowtime {
                        bad = Some(arg.to_string());
                    }
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            })?;
            if let Some(arg) = bad {
                let arg = arg.split('@').next().unwrap_or_default().to_string();
                return Err(weir_common::Error::plan(format!(
                    "CURRENT_WATERMARK({arg}): the argument must be a rowtime attribute (a \
                     column with a WATERMARK, or a window's window_time)"
                )));
            }
        }
    }
    Ok(())
}

/// `CURRENT_WATERMARK` in a batch query: Flink refuses it (batch rows have no rowtime
/// attributes), and so does Weir.
pub fn check_batch(plan: &datafusion::logical_expr::LogicalPlan) -> weir_common::Result<()> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::logical_expr::Expr;
    let mut found = false;
    plan.apply(|node| {
        for e in node.expressions() {
            e.apply(|e| {
                found |= matches!(e, Expr::ScalarFunction(f) if f.func.name() == CURRENT_WATERMARK);
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if found {
        return Err(weir_common::Error::plan(
            "CURRENT_WATERMARK needs a rowtime attribute, and batch mode has none (as in \
             Flink): use it in streaming mode",
        ));
    }
    Ok(())
}
