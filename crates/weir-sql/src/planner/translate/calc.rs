//! Stateless steps: projections and unnests.

use super::*;

impl Planner {
    /// A projection (or a Top-N's, when it projects a filtered window) as a step.
    pub(super) fn translate_projection(
        &self,
        p: &datafusion::logical_expr::Projection,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let top_n = match p.input.as_ref() {
            LogicalPlan::Filter(f) if matches!(f.input.as_ref(), LogicalPlan::Window(w) if !super::over::aggregates_only(w)) =>
            {
                // The row number is only computed when the projection keeps it.
                let rank = f.input.schema().fields().len() - 1;
                let rank_used = p.expr.iter().any(|e| {
                    e.column_refs()
                        .iter()
                        .any(|c| f.input.schema().index_of_column(c).ok() == Some(rank))
                });
                Some(self.top_n(f, rank_used, nodes)?)
            }
            _ => None,
        };
        let (node, mut steps) = match top_n {
            Some(planned) => planned,
            None => self.translate(&p.input, nodes)?,
        };
        let exprs = p
            .expr
            .iter()
            .map(|e| self.physical(e, p.input.schema()))
            .collect::<Result<Vec<_>>>()?;
        steps.push(CalcStep::Project {
            exprs,
            schema: Arc::new(p.schema.as_arrow().clone()),
        });
        Ok((node, steps))
    }

    /// The optimizer may prune columns between a Top-N's filter and its window:
    /// Filter(Projection(columns; Window)) is Projection(columns; Filter(Window)).
    pub(super) fn translate_pruned_top_n(
        &self,
        f: &datafusion::logical_expr::Filter,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let LogicalPlan::Projection(p) = f.input.as_ref() else {
            return Err(Error::internal("a pruned Top-N without its projection"));
        };
        let filter =
            datafusion::logical_expr::Filter::try_new(f.predicate.clone(), p.input.clone())
                .map_err(plan_error)?;
        let projection = datafusion::logical_expr::Projection::try_new_with_schema(
            p.expr.clone(),
            Arc::new(LogicalPlan::Filter(filter)),
            p.schema.clone(),
        )
        .map_err(plan_error)?;
        self.translate(&LogicalPlan::Projection(projection), nodes)
    }

    /// `UNNEST(list)` in a select list (and the window TVFs HOP and CUMULATE, rewritten to
    /// one) as a step expanding rows, over insert-only and updating input alike.
    pub(super) fn translate_unnest(
        &self,
        u: &datafusion::logical_expr::Unnest,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        use datafusion::physical_plan::unnest::ListUnnest;
        let (node, mut steps) = self.translate(&u.input, nodes)?;
        steps.push(CalcStep::Unnest(crate::plan::UnnestStep {
            lists: u
                .list_type_columns
                .iter()
                .map(|(index, list)| ListUnnest {
                    index_in_input_schema: *index,
                    depth: list.depth,
                })
                .collect(),
            structs: u.struct_type_columns.clone(),
            dependencies: u.dependency_indices.clone(),
            schema: Arc::new(u.schema.as_arrow().clone()),
            options: u.options.clone(),
        }));
        Ok((node, steps))
    }
}
