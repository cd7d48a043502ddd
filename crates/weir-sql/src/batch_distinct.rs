//! Batch mode's aggregates with several `DISTINCT` aggregates, or one with a `FILTER`,
//! rewritten as Flink's batch planner does (Calcite's expansion of distinct aggregates),
//! so that they spill.
//!
//! DataFusion computes `COUNT(DISTINCT x)` with a hash set per group, which it cannot
//! spill: Nexmark q15/q16 (eight `COUNT(DISTINCT …) FILTER (…)` per day) need more than a
//! 12 GB budget at 100M events. Rewritten, the distinct values become groups of an
//! ordinary (spilling) aggregation:
//!
//! ```text
//! SELECT k, COUNT(*), COUNT(DISTINCT a), COUNT(DISTINCT a) FILTER (WHERE p), SUM(DISTINCT b)
//! GROUP BY k
//! ```
//!
//! becomes an aggregation over the grouping sets `(k, a)`, `(k, b)` and `(k)` computing the
//! plain aggregates (`COUNT(*)`) and, per filter, whether any row of the group passed it
//! (`BOOL_OR(p)`), then one over `k` that takes the plain aggregates from the `(k)` row and
//! aggregates each distinct argument over its own set's rows, one row per distinct value
//! (`COUNT(a) FILTER (WHERE set = (k, a))`, `… AND p`, `SUM(b) FILTER (WHERE set = (k, b))`).

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    Aggregate, Expr, ExprFunctionExt, GroupingSet, LogicalPlan, LogicalPlanBuilder, col, lit,
};

const PLAIN: &str = "__weir_plain_";
const DISTINCT: &str = "__weir_distinct_";
const PASSED: &str = "__weir_passed_";

/// `plan` with every such aggregate rewritten as above.
pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|node| match node {
        LogicalPlan::Aggregate(agg) if expands(&agg) => Ok(Transformed::yes(expand(agg)?)),
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// The aggregate function of an aggregate expression.
fn function(e: &Expr) -> Option<&AggregateFunction> {
    match e {
        Expr::Alias(a) => function(&a.expr),
        Expr::AggregateFunction(f) => Some(f),
        _ => None,
    }
}

/// Whether `agg` has several distinct aggregates (or a filtered one), each of one argument
/// and without `ORDER BY`, and no grouping sets of its own.
fn expands(agg: &Aggregate) -> bool {
    if agg
        .group_expr
        .iter()
        .any(|g| matches!(g, Expr::GroupingSet(_)))
    {
        return false;
    }
    let Some(functions) = agg
        .aggr_expr
        .iter()
        .map(function)
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let distinct: Vec<_> = functions.iter().filter(|f| f.params.distinct).collect();
    let simple = distinct
        .iter()
        .all(|f| f.params.args.len() == 1 && f.params.order_by.is_empty());
    simple && (distinct.len() > 1 || distinct.iter().any(|f| f.params.filter.is_some()))
}

fn expand(agg: Aggregate) -> Result<LogicalPlan> {
    let keys = agg.group_expr.clone();
    let functions: Vec<&AggregateFunction> = agg
        .aggr_expr
        .iter()
        .map(|e| function(e).expect("checked"))
        .collect();
    // The distinct arguments, each once, in order of appearance.
    let mut arguments: Vec<Expr> = Vec::new();
    for f in functions.iter().filter(|f| f.params.distinct) {
        if !arguments.contains(&f.params.args[0]) {
            arguments.push(f.params.args[0].clone());
        }
    }
    // The arguments as columns of their own (an argument may be an expression, which
    // DataFusion could name like a column of the input, e.g. a cast).
    let mut columns: Vec<Expr> = agg
        .input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    columns.extend(
        (arguments.iter().enumerate()).map(|(j, a)| a.clone().alias(format!("{DISTINCT}{j}"))),
    );
    let input = LogicalPlanBuilder::from(agg.input.as_ref().clone())
        .project(columns)?
        .build()?;
    let mut sets: Vec<Vec<Expr>> = (0..arguments.len())
        .map(|j| {
            let mut set = keys.clone();
            set.push(col(format!("{DISTINCT}{j}")));
            set
        })
        .collect();
    sets.push(keys.clone());
    // Level one: the plain aggregates, and whether any row of a group passed each filter
    // of a distinct aggregate.
    let mut first = Vec::new();
    for (i, f) in functions.iter().enumerate() {
        if !f.params.distinct {
            first.push(Expr::AggregateFunction((*f).clone()).alias(format!("{PLAIN}{i}")));
        } else if let Some(filter) = &f.params.filter {
            let passed = datafusion::functions::core::expr_fn::coalesce(vec![
                filter.as_ref().clone(),
                lit(false),
            ]);
            first.push(
                datafusion::functions_aggregate::expr_fn::bool_or(passed)
                    .alias(format!("{PASSED}{i}")),
            );
        }
    }
    let grouped = LogicalPlanBuilder::from(input)
        .aggregate(
            vec![Expr::GroupingSet(GroupingSet::GroupingSets(sets))],
            first,
        )?
        .build()?;
    let schema = grouped.schema().clone();
    let column = |i: usize| {
        let (q, f) = schema.qualified_field(i);
        Expr::Column(Column::new(q.cloned(), f.name()))
    };
    // The grouping id of each set: a bit per distinct argument the set leaves out (the
    // first expression the highest bit), the keys always in.
    let m = arguments.len();
    let id_type = schema
        .field_with_unqualified_name(Aggregate::INTERNAL_GROUPING_ID)?
        .data_type()
        .clone();
    let id_of = |kept: Option<usize>| -> Result<Expr> {
        let bits = (0..m)
            .filter(|j| Some(*j) != kept)
            .fold(0u64, |acc, j| acc | (1 << (m - 1 - j)));
        Ok(lit(ScalarValue::UInt64(Some(bits)).cast_to(&id_type)?))
    };
    let set_id = col(Aggregate::INTERNAL_GROUPING_ID);
    let in_keys_set = set_id.clone().eq(id_of(None)?);
    // Level two, by the keys.
    let n = keys.len();
    let mut second = Vec::new();
    for (i, f) in functions.iter().enumerate() {
        let value = if !f.params.distinct {
            // The one row of the keys' own set holds it (of any type: not MAX, which
            // does not order lists or maps).
            datafusion::functions_aggregate::expr_fn::first_value(
                col(format!("{PLAIN}{i}")),
                Vec::new(),
            )
            .filter(in_keys_set.clone())
            .build()?
        } else {
            let j = arguments
                .iter()
                .position(|a| a == &f.params.args[0])
                .expect("collected above");
            let mut condition = set_id.clone().eq(id_of(Some(j))?);
            if f.params.filter.is_some() {
                condition = condition.and(col(format!("{PASSED}{i}")));
            }
            let mut plain = (*f).clone();
            plain.params.distinct = false;
            plain.params.filter = Some(Box::new(condition));
            plain.params.args = vec![column(n + j)];
            Expr::AggregateFunction(plain)
        };
        second.push(value.alias(format!("__weir_aggregate_{i}")));
    }
    let merged = LogicalPlanBuilder::from(grouped)
        .aggregate((0..n).map(column).collect::<Vec<_>>(), second)?
        .build()?;
    // The original aggregate's columns, by position, under their names.
    let out = merged.schema().clone();
    let original = agg.schema.clone();
    let exprs: Vec<Expr> = (0..original.fields().len())
        .map(|i| crate::batch_sessions::column_as(&out, i, &original, i))
        .collect();
    LogicalPlanBuilder::from(merged).project(exprs)?.build()
}
