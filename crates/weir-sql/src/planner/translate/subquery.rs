//! Uncorrelated scalar subqueries (`WHERE price > (SELECT AVG(price) FROM bid)`), as Flink
//! plans them in streaming mode: the outer rows joined with the subquery's (single-row,
//! usually updating) result, the subquery replaced by the joined column. DataFusion leaves
//! them in the expression for its physical planner to evaluate once, which a stream cannot.
//! The join has no equality condition; like every such join it runs on one constant key
//! (see [`with_constant_key`]), so in one subtask, as Flink runs it.

use super::*;
use datafusion::common::Column as LogicalColumn;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{JoinType, LogicalPlanBuilder, lit};

/// Whether `e` holds an uncorrelated scalar subquery.
pub(super) fn has_scalar_subquery(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::ScalarSubquery(s) if s.outer_ref_columns.is_empty())))
        .unwrap_or(false)
}

/// `exprs` over `input` with each uncorrelated scalar subquery replaced by a column of the
/// subquery's result, and `input` left-joined with those results (an empty subquery
/// is NULL, as in SQL).
fn lift(input: &Arc<LogicalPlan>, exprs: &[Expr]) -> Result<(LogicalPlan, Vec<Expr>)> {
    let mut subqueries: Vec<(String, Arc<LogicalPlan>)> = Vec::new();
    let rewritten = exprs
        .iter()
        .map(|e| {
            e.clone()
                .transform_up(|e| match e {
                    Expr::ScalarSubquery(s) if s.outer_ref_columns.is_empty() => {
                        let alias = format!("__weir_scalar_{}", subqueries.len());
                        let field = s.subquery.schema().field(0).name().clone();
                        subqueries.push((alias.clone(), s.subquery.clone()));
                        Ok(Transformed::yes(Expr::Column(LogicalColumn::new(
                            Some(alias),
                            field,
                        ))))
                    }
                    other => Ok(Transformed::no(other)),
                })
                .map(|t| t.data)
        })
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let mut joined = LogicalPlanBuilder::from(input.as_ref().clone());
    for (alias, subquery) in subqueries {
        let right = LogicalPlanBuilder::from(subquery.as_ref().clone())
            .alias(alias)?
            .build()?;
        joined = joined.join_on(right, JoinType::Left, vec![lit(true)])?;
    }
    Ok((joined.build()?, rewritten))
}

/// The filter with its scalar subqueries joined in, projected back to its columns.
pub(super) fn lift_from_filter(f: &datafusion::logical_expr::Filter) -> Result<LogicalPlan> {
    let (joined, predicate) = lift(&f.input, std::slice::from_ref(&f.predicate))?;
    let columns: Vec<Expr> = f
        .input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    Ok(LogicalPlanBuilder::from(joined)
        .filter(predicate.into_iter().next().expect("one predicate"))?
        .project(columns)?
        .build()?)
}

/// The projection with its scalar subqueries joined in, under its own column names.
pub(super) fn lift_from_projection(
    p: &datafusion::logical_expr::Projection,
) -> Result<LogicalPlan> {
    let (joined, exprs) = lift(&p.input, &p.expr)?;
    let named: Vec<Expr> = exprs
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let (qualifier, field) = p.schema.qualified_field(i);
            e.alias_qualified(qualifier.cloned(), field.name())
        })
        .collect();
    Ok(LogicalPlanBuilder::from(joined).project(named)?.build()?)
}

/// The aggregate with the scalar subqueries of its keys and arguments joined into its
/// input, under its own column names.
pub(super) fn lift_from_aggregate(a: &datafusion::logical_expr::Aggregate) -> Result<LogicalPlan> {
    let all: Vec<Expr> = a.group_expr.iter().chain(&a.aggr_expr).cloned().collect();
    let (joined, exprs) = lift(&a.input, &all)?;
    let (group, aggregates) = exprs.split_at(a.group_expr.len());
    let aggregated = LogicalPlanBuilder::from(joined)
        .aggregate(group.to_vec(), aggregates.to_vec())?
        .build()?;
    let named: Vec<Expr> = (aggregated.schema().columns().into_iter().enumerate())
        .map(|(i, c)| {
            let (qualifier, field) = a.schema.qualified_field(i);
            Expr::Column(c).alias_qualified(qualifier.cloned(), field.name())
        })
        .collect();
    Ok(LogicalPlanBuilder::from(aggregated)
        .project(named)?
        .build()?)
}

/// A join without an equality condition (a cross join, a scalar subquery's join) as one
/// on a constant key, so that the streaming join, which partitions and stores rows by
/// key, sends every row to one subtask.
pub(super) fn with_constant_key(j: &datafusion::logical_expr::Join) -> LogicalPlan {
    LogicalPlan::Join(datafusion::logical_expr::Join {
        on: vec![(lit(0i32), lit(0i32))],
        ..j.clone()
    })
}
