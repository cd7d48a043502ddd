//! Top-N: `ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) <= n`.

use super::*;

impl Planner {
    /// `Filter(row_number <= n [AND other conditions])` over `Window(ROW_NUMBER() OVER
    /// (PARTITION BY … ORDER BY …))` as a Top-N node, the other conditions (pushed down by
    /// the optimizer from an outer query) as a filter after it; `rank_used` says whether
    /// the row number is wanted in the output.
    pub(super) fn top_n(
        &self,
        filter: &datafusion::logical_expr::Filter,
        rank_used: bool,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        use datafusion::logical_expr::{BinaryExpr, Operator};
        let LogicalPlan::Window(w) = filter.input.as_ref() else {
            return Err(Error::internal("Top-N without a window"));
        };
        let unsupported = |what: String| {
            Error::plan(format!(
                "{what}: in streaming mode, OVER windows only run as Top-N, \
                 ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) filtered with `<= n`, `< n`, `= n` \
                 or a range (`BETWEEN m AND n`, `> m AND <= n`)"
            ))
        };
        let [expr] = w.window_expr.as_slice() else {
            return Err(unsupported(format!(
                "{} window functions",
                w.window_expr.len()
            )));
        };
        let Expr::WindowFunction(function) = expr.clone().unalias() else {
            return Err(unsupported(expr.to_string()));
        };
        if function.fun.name() != "row_number" {
            return Err(unsupported(format!("{}()", function.fun.name())));
        }
        let rank = w.schema.fields().len() - 1;
        let literal = |e: &Expr| match e {
            Expr::Literal(v, _) => v.cast_to(&DataType::Int64).ok().and_then(|v| match v {
                datafusion::common::ScalarValue::Int64(Some(n)) => Some(n),
                _ => None,
            }),
            _ => None,
        };
        let is_rank = |e: &Expr| match e {
            Expr::Column(c) => w.schema.index_of_column(c).ok() == Some(rank),
            _ => false,
        };
        let rank_limit = |e: &Expr| match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_rank(left) => {
                match (op, literal(right)) {
                    (Operator::LtEq, Some(n)) => Some(n),
                    (Operator::Lt, Some(n)) => Some(n - 1),
                    (Operator::Eq, Some(n)) if n >= 1 => Some(n),
                    _ => None,
                }
            }
            _ => None,
        };
        // A lower bound: the best rows below it are kept but not output.
        let rank_floor = |e: &Expr| match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_rank(left) => {
                match (op, literal(right)) {
                    (Operator::Gt, Some(m)) if m >= 1 => Some(m),
                    (Operator::GtEq, Some(m)) if m >= 2 => Some(m - 1),
                    (Operator::Eq, Some(n)) if n >= 2 => Some(n - 1),
                    _ => None,
                }
            }
            _ => None,
        };
        let conjuncts = datafusion::logical_expr::utils::split_conjunction(&filter.predicate);
        let limit = conjuncts.iter().filter_map(|e| rank_limit(e)).min();
        let offset = conjuncts.iter().filter_map(|e| rank_floor(e)).max();
        let residual: Vec<Expr> = conjuncts
            .into_iter()
            .filter(|e| rank_limit(e).is_none() && rank_floor(e).is_none())
            .cloned()
            .collect();
        let rank_used = rank_used
            || residual.iter().any(|e| {
                e.column_refs()
                    .iter()
                    .any(|c| w.schema.index_of_column(c).ok() == Some(rank))
            });
        let limit = match limit {
            Some(n) if n >= 1 => n as usize,
            _ => {
                return Err(unsupported(format!("WHERE {}", filter.predicate)));
            }
        };
        let in_schema = w.input.schema();
        let column = |e: &Expr, what: &str| -> Result<usize> {
            match e {
                Expr::Column(c) => Ok(in_schema.index_of_column(c)?),
                other => Err(Error::plan(format!(
                    "{what} {other}: in streaming mode, use columns (compute expressions in a subquery)"
                ))),
            }
        };
        let partition = function
            .params
            .partition_by
            .iter()
            .map(|e| column(e, "PARTITION BY"))
            .collect::<Result<Vec<_>>>()?;
        let order = function
            .params
            .order_by
            .iter()
            .map(|s| {
                Ok((
                    column(&s.expr, "ORDER BY")?,
                    arrow::compute::SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let input = self.translate_into_node(&w.input, nodes)?;
        let retract = crate::plan::updates_in(nodes, input).is_some();
        // As Flink: over an append-only input, a Top-N partitioned by a window (window
        // Top-N, window deduplication) and a keep-first deduplication on a rowtime emit
        // each partition once, when the watermark makes it final.
        let final_at = if retract {
            None
        } else if let Some(end) = partition
            .iter()
            .find(|c| crate::plan::is_window_end(nodes, input, **c))
        {
            Some(crate::plan::FinalAt {
                column: *end,
                offset_ms: -1,
                once_per_key: false,
            })
        } else {
            match order.as_slice() {
                [(c, o)]
                    if limit == 1 && !o.descending && crate::plan::is_rowtime(nodes, input, *c) =>
                {
                    Some(crate::plan::FinalAt {
                        column: *c,
                        offset_ms: 0,
                        once_per_key: true,
                    })
                }
                _ => None,
            }
        };
        let offset = offset.unwrap_or(0) as usize;
        if offset > 0 && final_at.is_some() {
            return Err(Error::plan(format!(
                "WHERE {}: a lower bound on the row number of a window Top-N or of a \
                 deduplication on a rowtime is not supported in streaming mode yet",
                filter.predicate
            )));
        }
        let schema = if rank_used {
            Arc::new(w.schema.as_arrow().clone())
        } else {
            Arc::new(in_schema.as_arrow().clone())
        };
        nodes.push(PlanNode::TopN {
            input,
            partition,
            order,
            limit,
            offset,
            row_number: rank_used,
            schema,
            retract,
            final_at,
            every_change: false,
        });
        // The other conditions read the window's columns; without the row number those
        // are the input's, at the same positions.
        let steps = match datafusion::logical_expr::utils::conjunction(residual) {
            Some(rest) => {
                let over = if rank_used { &w.schema } else { in_schema };
                vec![CalcStep::Filter(physical_expr(
                    &self.ctx.state(),
                    &rest,
                    over,
                )?)]
            }
            None => Vec::new(),
        };
        Ok((nodes.len() - 1, steps))
    }
}
