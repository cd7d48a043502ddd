//! The optimized logical plan into a [`StreamPlan`]'s nodes: one method per kind of plan
//! node, grouped by file.

use super::*;

mod aggregate;
mod calc;
mod join;
pub(super) mod over;
mod scan;
mod sort;
mod subquery;
mod temporal;
mod top_n;

impl Planner {
    pub(super) fn translate_into_node(
        &self,
        plan: &LogicalPlan,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<usize> {
        let (node, steps) = self.translate(plan, nodes)?;
        materialize(
            node,
            steps,
            Arc::new(plan.schema().as_arrow().clone()),
            nodes,
        )
    }

    /// Translates `plan`; returns the node that produces its input and the stateless steps
    /// still to apply on top of it (they are fused into one `Calc`). One method per kind of
    /// plan node, in this folder's files.
    pub(super) fn translate(
        &self,
        plan: &LogicalPlan,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        match plan {
            LogicalPlan::TableScan(scan) => self.translate_scan(scan, nodes),
            LogicalPlan::Filter(f) if subquery::has_scalar_subquery(&f.predicate) => {
                self.translate(&subquery::lift_from_filter(f)?, nodes)
            }
            LogicalPlan::Projection(p) if p.expr.iter().any(subquery::has_scalar_subquery) => {
                self.translate(&subquery::lift_from_projection(p)?, nodes)
            }
            LogicalPlan::Aggregate(a)
                if a.group_expr
                    .iter()
                    .chain(&a.aggr_expr)
                    .any(subquery::has_scalar_subquery) =>
            {
                self.translate(&subquery::lift_from_aggregate(a)?, nodes)
            }
            LogicalPlan::Projection(p) => self.translate_projection(p, nodes),
            LogicalPlan::Filter(f) if matches!(f.input.as_ref(), LogicalPlan::Window(w) if !over::aggregates_only(w)) => {
                self.top_n(f, true, nodes)
            }
            LogicalPlan::Filter(f)
                if matches!(f.input.as_ref(), LogicalPlan::Projection(p)
                    if matches!(p.input.as_ref(), LogicalPlan::Window(w) if !over::aggregates_only(w))
                        && p.expr.iter().all(|e| matches!(e, Expr::Column(_)))) =>
            {
                self.translate_pruned_top_n(f, nodes)
            }
            LogicalPlan::Window(w) => self.translate_over(w, nodes),
            LogicalPlan::Filter(f) => {
                let (node, mut steps) = self.translate(&f.input, nodes)?;
                steps.push(CalcStep::Filter(
                    self.physical(&f.predicate, f.input.schema())?,
                ));
                Ok((node, steps))
            }
            LogicalPlan::SubqueryAlias(a) => self.translate(&a.input, nodes),
            LogicalPlan::Join(j) if temporal::is_temporal(j) => {
                self.translate_temporal_join(j, nodes)
            }
            LogicalPlan::Join(j) if j.on.is_empty() => {
                self.translate(&subquery::with_constant_key(j), nodes)
            }
            LogicalPlan::Join(j)
                if j.on.iter().any(|(l, r)| {
                    !matches!(l, Expr::Column(_)) || !matches!(r, Expr::Column(_))
                }) =>
            {
                self.translate(&join::join_on_computed_keys(j)?, nodes)
            }
            LogicalPlan::Join(j) => self.translate_join(j, nodes),
            LogicalPlan::Aggregate(agg) => self.translate_aggregate(agg, nodes),
            LogicalPlan::EmptyRelation(empty) => self.translate_empty(empty, nodes),
            LogicalPlan::Values(values) => self.translate_values(values, nodes),
            LogicalPlan::Limit(limit) if matches!(limit.input.as_ref(), LogicalPlan::Sort(_)) => {
                self.translate_sort_limit(limit, nodes)
            }
            LogicalPlan::Sort(sort) => self.translate_sort(sort, 0, sort.fetch, nodes),
            LogicalPlan::Limit(limit) => self.translate_limit(limit, nodes),
            LogicalPlan::Union(u) => self.translate_union(u, nodes),
            LogicalPlan::Unnest(u) => self.translate_unnest(u, nodes),
            other => {
                let what = other.display().to_string();
                let what = what.split(':').next().unwrap_or_default();
                Err(Error::plan(format!(
                    "{what} is not supported in streaming mode yet; over bounded tables, batch mode runs it (SET 'execution.runtime-mode' = 'batch')"
                )))
            }
        }
    }

    /// `e`, over the columns of `schema`, as a physical expression.
    pub(super) fn physical(&self, e: &Expr, schema: &DFSchema) -> Result<PhysicalExprRef> {
        physical_expr(&self.ctx.state(), e, schema)
    }
    /// `LIMIT`/`OFFSET` over an insert-only input.
    pub(super) fn translate_limit(
        &self,
        limit: &datafusion::logical_expr::Limit,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let (skip, fetch) = limit_bounds(limit)?;
        let input = self.translate_into_node(&limit.input, nodes)?;
        if let Some(kind) = crate::plan::updates_in(nodes, input) {
            return Err(Error::plan(format!(
                "LIMIT over an updating query ({kind}) is not supported in streaming mode; \
                 keep the best rows with ROW_NUMBER() OVER (ORDER BY …) <= n instead"
            )));
        }
        nodes.push(PlanNode::Limit { input, skip, fetch });
        Ok((nodes.len() - 1, Vec::new()))
    }

    /// `UNION ALL`.
    pub(super) fn translate_union(
        &self,
        u: &datafusion::logical_expr::Union,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let inputs = u
            .inputs
            .iter()
            .map(|i| self.translate_into_node(i, nodes))
            .collect::<Result<Vec<_>>>()?;
        nodes.push(PlanNode::Union {
            inputs,
            schema: Arc::new(u.schema.as_arrow().clone()),
        });
        Ok((nodes.len() - 1, Vec::new()))
    }
}

/// Turns pending steps into a `Calc` node (if there are any).
pub(super) fn materialize(
    node: usize,
    steps: Vec<CalcStep>,
    schema: SchemaRef,
    nodes: &mut Vec<PlanNode>,
) -> Result<usize> {
    if steps.is_empty() {
        return Ok(node);
    }
    crate::current_watermark::check_steps(nodes, node, &steps)?;
    nodes.push(PlanNode::Calc {
        input: node,
        steps,
        schema,
    });
    Ok(nodes.len() - 1)
}

/// The rows a `LIMIT … OFFSET …` skips and keeps (all when no `LIMIT`).
pub(super) fn limit_bounds(
    limit: &datafusion::logical_expr::Limit,
) -> Result<(usize, Option<usize>)> {
    use datafusion::logical_expr::{FetchType, SkipType};
    match (limit.get_skip_type()?, limit.get_fetch_type()?) {
        (SkipType::Literal(skip), FetchType::Literal(fetch)) => Ok((skip, fetch)),
        _ => Err(Error::plan("LIMIT and OFFSET take constant numbers")),
    }
}
