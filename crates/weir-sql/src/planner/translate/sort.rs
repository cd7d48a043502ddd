//! `ORDER BY`, as Flink's streaming planner runs it: ascending on a time attribute first,
//! a temporal sort (on a rowtime, rows buffered until the watermark passes them, then
//! emitted in order; on `PROCTIME()`, rows in arrival order: append-only either way), with
//! `LIMIT` after it; otherwise only with `LIMIT n`, as an updating Top-N over the whole
//! input.

use super::*;

impl Planner {
    /// `ORDER BY … LIMIT n [OFFSET m]`: DataFusion's limit over the sort.
    pub(super) fn translate_sort_limit(
        &self,
        limit: &datafusion::logical_expr::Limit,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let LogicalPlan::Sort(sort) = limit.input.as_ref() else {
            return Err(Error::internal("a sort limit without a sort"));
        };
        let (skip, fetch) = limit_bounds(limit)?;
        let fetch = match (fetch, sort.fetch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.translate_sort(sort, skip, fetch, nodes)
    }

    /// `ORDER BY …`, skipping `skip` rows and keeping `fetch` after them (a Top-N keeps
    /// the skipped rows too, and outputs the ranks after them).
    pub(super) fn translate_sort(
        &self,
        sort: &datafusion::logical_expr::Sort,
        skip: usize,
        fetch: Option<usize>,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let in_schema = sort.input.schema();
        let order = sort
            .expr
            .iter()
            .map(|s| match &s.expr {
                Expr::Column(c) => Ok((
                    in_schema.index_of_column(c)?,
                    arrow::compute::SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                )),
                other => Err(Error::plan(format!(
                    "ORDER BY {other}: in streaming mode, order by columns (compute \
                     expressions in a subquery)"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        let input = self.translate_into_node(&sort.input, nodes)?;
        let schema = Arc::new(in_schema.as_arrow().clone());
        let on_rowtime = matches!(order.first(),
            Some((c, o)) if !o.descending && crate::plan::is_rowtime(nodes, input, *c));
        let on_proctime = matches!(order.first(),
            Some((c, o)) if !o.descending && crate::plan::is_processing_time(nodes, input, *c));
        if on_rowtime || on_proctime {
            if let Some(producer) = crate::plan::updates_in(nodes, input) {
                return Err(Error::plan(format!(
                    "ORDER BY a rowtime over an updating input ({producer}) is not supported \
                     in streaming mode (as in Flink)"
                )));
            }
            nodes.push(PlanNode::TemporalSort {
                input,
                order,
                processing_time: on_proctime,
                schema,
            });
            let sorted = nodes.len() - 1;
            if skip == 0 && fetch.is_none() {
                return Ok((sorted, Vec::new()));
            }
            nodes.push(PlanNode::Limit {
                input: sorted,
                skip,
                fetch,
            });
            return Ok((nodes.len() - 1, Vec::new()));
        }
        let Some(limit) = fetch else {
            return Err(Error::plan(
                "ORDER BY without LIMIT is only supported in streaming mode on a rowtime \
                 ascending (as in Flink); over bounded tables, batch mode runs it \
                 (SET 'execution.runtime-mode' = 'batch')",
            ));
        };
        if limit == 0 {
            // Nothing is ever in the result.
            let nothing = Arc::new(datafusion::physical_expr::expressions::Literal::new(
                datafusion::common::ScalarValue::Boolean(Some(false)),
            ));
            return Ok((input, vec![CalcStep::Filter(nothing)]));
        }
        let retract = crate::plan::updates_in(nodes, input).is_some();
        nodes.push(PlanNode::TopN {
            input,
            partition: Vec::new(),
            order,
            limit: skip + limit,
            offset: skip,
            row_number: false,
            schema,
            retract,
            final_at: None,
            every_change: false,
        });
        Ok((nodes.len() - 1, Vec::new()))
    }
}
