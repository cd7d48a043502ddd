//! Session windows in batch mode. An aggregate grouped by `weir_session(ts, gap)` (the
//! legacy `SESSION(ts, gap)` group window and the SESSION TVF) groups each row under its
//! own session `[ts, ts + gap)`; streaming mode merges touching sessions in its session
//! operator. Over a bounded input the same merge is a sort: per key, rows in time order
//! start a new session when their time is more than `gap` after the previous row's (the
//! streaming operator merges sessions that touch, so a row exactly `gap` later joins), a
//! running sum of those starts numbers the sessions, and the aggregate groups by the
//! keys and that number:
//!
//! ```text
//! Aggregate(keys, weir_session(ts, gap); aggs)
//!   → Projection(the same columns: {start: MIN(ts), end: MAX(ts) + gap} for the session)
//!       Aggregate(keys, session_no; aggs, MIN(ts), MAX(ts))
//!         Window(SUM(new_session) OVER (PARTITION BY keys ORDER BY ts))
//!           Projection(*, CASE WHEN LAG(ts) … IS NULL OR ts > LAG(ts) … + gap THEN 1 ELSE 0 END)
//!             Window(LAG(ts) OVER (PARTITION BY keys ORDER BY ts))
//!               Filter(ts IS NOT NULL)   -- a row without a time is in no session
//! ```

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result, ScalarValue};
use datafusion::functions::core::expr_fn::named_struct;
use datafusion::functions_aggregate::expr_fn::{max, min};
use datafusion::functions_window::expr_fn::lag;
use datafusion::logical_expr::{
    Aggregate, Expr, ExprFunctionExt, ExprSchemable, LogicalPlan, LogicalPlanBuilder, WindowFrame,
    WindowFrameBound, WindowFrameUnits, cast, col, lit, when,
};

const PREVIOUS: &str = "__weir_session_previous";
const STARTS: &str = "__weir_session_starts";
const NUMBER: &str = "__weir_session_no";
const FIRST: &str = "__weir_session_first";
const LAST: &str = "__weir_session_last";

/// `plan` with every session-window aggregate rewritten as above.
pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|node| match node {
        LogicalPlan::Aggregate(agg) => match session_of(&agg) {
            Some(position) => Ok(Transformed::yes(merge_sessions(agg, position)?)),
            None => Ok(Transformed::no(LogicalPlan::Aggregate(agg))),
        },
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// The position of the aggregate's session key among its group expressions.
fn session_of(agg: &Aggregate) -> Option<usize> {
    agg.group_expr.iter().position(
        |g| matches!(g, Expr::ScalarFunction(f) if f.func.name() == crate::group_windows::SESSION),
    )
}

fn merge_sessions(agg: Aggregate, position: usize) -> Result<LogicalPlan> {
    let Expr::ScalarFunction(session) = &agg.group_expr[position] else {
        unreachable!("found by session_of");
    };
    let (ts, gap) = (session.args[0].clone(), session.args[1].clone());
    let keys: Vec<Expr> = (agg.group_expr.iter().enumerate())
        .filter(|(i, _)| *i != position)
        .map(|(_, g)| g.clone())
        .collect();
    let key_type = crate::group_windows::key_type(&ts.get_type(agg.input.schema())?);
    let datafusion::arrow::datatypes::DataType::Struct(bounds) = &key_type else {
        unreachable!("key_type is a struct");
    };
    let bound_type = bounds[0].data_type().clone();
    let in_order = || vec![ts.clone().sort(true, false)];
    let previous = lag(ts.clone(), Some(1), None)
        .partition_by(keys.clone())
        .order_by(in_order())
        .build()?
        .alias(PREVIOUS);
    let input = LogicalPlanBuilder::from(agg.input.as_ref().clone())
        .filter(ts.clone().is_not_null())?
        .window(vec![previous])?
        .build()?;
    // Every input column, then whether the row starts a session.
    let mut columns: Vec<Expr> = input
        .schema()
        .columns()
        .into_iter()
        .filter(|c| c.name != PREVIOUS)
        .map(Expr::Column)
        .collect();
    let starts = when(
        col(PREVIOUS)
            .is_null()
            .or(ts.clone().gt(col(PREVIOUS) + gap.clone())),
        lit(1i64),
    )
    .otherwise(lit(0i64))?;
    columns.push(starts.alias(STARTS));
    let running_sum = datafusion::logical_expr::expr::WindowFunction::new(
        datafusion::logical_expr::WindowFunctionDefinition::AggregateUDF(
            datafusion::functions_aggregate::sum::sum_udaf(),
        ),
        vec![col(STARTS)],
    );
    let numbered = Expr::from(running_sum)
        .partition_by(keys.clone())
        .order_by(in_order())
        // A running sum over rows (not a RANGE frame: DataFusion searches a RANGE frame's
        // peers row by row). Rows of one time share a number either way: only the first
        // of them can start a session.
        .window_frame(WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::Preceding(ScalarValue::UInt64(None)),
            WindowFrameBound::CurrentRow,
        ))
        .build()?
        .alias(NUMBER);
    let mut group = keys.clone();
    group.push(col(NUMBER));
    let mut aggregates = agg.aggr_expr.clone();
    aggregates.push(min(ts.clone()).alias(FIRST));
    aggregates.push(max(ts.clone()).alias(LAST));
    let merged = LogicalPlanBuilder::from(input)
        .project(columns)?
        .window(vec![numbered])?
        .aggregate(group, aggregates)?
        .build()?;
    // The original aggregate's columns, by position, under their names.
    let out = merged.schema().clone();
    let original = agg.schema.clone();
    let session_key = named_struct(vec![
        lit("start"),
        cast(col(FIRST), bound_type.clone()),
        lit("end"),
        cast(col(LAST) + gap, bound_type),
    ]);
    let keys_out = keys.len();
    let exprs: Vec<Expr> = (0..original.fields().len())
        .map(|i| {
            let (qualifier, field) = original.qualified_field(i);
            if i == position {
                return session_key
                    .clone()
                    .alias_qualified(qualifier.cloned(), field.name());
            }
            // Keys before the session keep their place; the ones after it moved up
            // by one, and the aggregates follow the keys and the session number.
            let j = match i {
                i if i < position => i,
                i if i < agg.group_expr.len() => i - 1,
                i => i - agg.group_expr.len() + keys_out + 1,
            };
            column_as(&out, j, &original, i)
        })
        .collect();
    LogicalPlanBuilder::from(merged).project(exprs)?.build()
}

/// Column `j` of `out` under the name of column `i` of `original` (a rewritten aggregate
/// keeps the names the plan above it reads).
pub(crate) fn column_as(
    out: &datafusion::common::DFSchema,
    j: usize,
    original: &datafusion::common::DFSchema,
    i: usize,
) -> Expr {
    let (qualifier, field) = original.qualified_field(i);
    let (q, f) = out.qualified_field(j);
    let value = Expr::Column(Column::new(q.cloned(), f.name()));
    if q == qualifier && f.name() == field.name() {
        value
    } else {
        value.alias_qualified(qualifier.cloned(), field.name())
    }
}
