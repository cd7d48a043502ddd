//! Streaming joins: keys, kinds and how long rows are kept.

use super::*;

impl Planner {
    /// An equi-join on columns (computed keys are rewritten before) as a join node.
    pub(super) fn translate_join(
        &self,
        j: &datafusion::logical_expr::Join,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        use datafusion::logical_expr::JoinType;
        let kind = match j.join_type {
            JoinType::LeftSemi => crate::plan::JoinKind::LeftSemi,
            JoinType::RightSemi => crate::plan::JoinKind::RightSemi,
            JoinType::Left => crate::plan::JoinKind::LeftOuter,
            JoinType::Right => crate::plan::JoinKind::RightOuter,
            JoinType::Full => crate::plan::JoinKind::FullOuter,
            JoinType::LeftAnti => crate::plan::JoinKind::LeftAnti,
            JoinType::RightAnti => crate::plan::JoinKind::RightAnti,
            _ => crate::plan::JoinKind::Inner,
        };
        let supported = matches!(
            j.join_type,
            JoinType::Inner
                | JoinType::LeftSemi
                | JoinType::RightSemi
                | JoinType::Left
                | JoinType::Right
                | JoinType::Full
                | JoinType::LeftAnti
                | JoinType::RightAnti
        );
        if j.null_aware && (j.filter.is_some() || j.on.len() != 1) {
            return Err(Error::plan(
                "NOT IN over a column that may be NULL is supported for one column without \
                 other conditions; write NOT EXISTS (or filter the NULLs out)",
            ));
        }
        if !supported || j.on.is_empty() {
            return Err(Error::plan(format!(
                "{} join{} is not supported in streaming mode yet (inner, outer, semi and anti equi-joins are)",
                j.join_type,
                if j.on.is_empty() {
                    " without an equality condition"
                } else {
                    ""
                }
            )));
        }
        let left = self.translate_into_node(&j.left, nodes)?;
        let right = self.translate_into_node(&j.right, nodes)?;
        let updating =
            crate::plan::updates_in(nodes, left).or(crate::plan::updates_in(nodes, right));
        if let (Some(producer), true) = (updating, j.null_aware) {
            return Err(Error::plan(format!(
                "NOT IN over an updating input ({producer}) is not supported in streaming \
                 mode yet; write NOT EXISTS"
            )));
        }
        let (mut left_keys, mut right_keys) = (Vec::new(), Vec::new());
        for (l, r) in &j.on {
            let (Expr::Column(lc), Expr::Column(rc)) = (l, r) else {
                return Err(Error::internal(format!(
                    "join condition {l} = {r} was not rewritten to columns"
                )));
            };
            let (li, ri) = (
                j.left.schema().index_of_column(lc)?,
                j.right.schema().index_of_column(rc)?,
            );
            let (lt, rt) = (
                j.left.schema().field(li).data_type(),
                j.right.schema().field(ri).data_type(),
            );
            if lt != rt {
                return Err(Error::plan(format!(
                    "join condition {l} = {r} compares {lt} with {rt}; cast one side so both have the same type"
                )));
            }
            left_keys.push(li);
            right_keys.push(ri);
        }
        // The condition reads left then right columns (a semi join outputs one side).
        let combined = j.left.schema().join(j.right.schema())?;
        let filter = match &j.filter {
            Some(f) => Some(self.physical(f, &combined)?),
            None => None,
        };
        let window_key = (0..left_keys.len()).find(|i| {
            crate::plan::is_window_end(nodes, left, left_keys[*i])
                && crate::plan::is_window_end(nodes, right, right_keys[*i])
                && !crate::plan::is_processing_time(nodes, left, left_keys[*i])
        });
        let expiry = match window_key {
            // Rows of an updating input stay until retracted.
            _ if updating.is_some() => [None, None],
            // A window's rows: until the watermark passes the window's end.
            Some(k) => [Some((left_keys[k], -1)), Some((right_keys[k], -1))],
            None => interval_expiry(j, nodes, left, right),
        };
        nodes.push(PlanNode::Join {
            kind,
            left,
            right,
            left_keys,
            right_keys,
            filter,
            expiry,
            schema: Arc::new(j.schema.as_arrow().clone()),
            null_aware: j.null_aware,
        });
        Ok((nodes.len() - 1, Vec::new()))
    }
}

/// A join whose equality keys include expressions (`ON MOD(b.id, 50) = p.pid`), as one
/// on columns: each side gets its computed keys as extra columns
/// (`__weir_join_left_key_<i>`, `__weir_join_right_key_<i>`),
/// the join matches those, and a projection drops them again, so the plan above sees the
/// join's own schema. The streaming join keys, partitions and stores rows by columns.
pub(super) fn join_on_computed_keys(j: &datafusion::logical_expr::Join) -> Result<LogicalPlan> {
    use datafusion::logical_expr::logical_plan::builder::build_join_schema;
    use datafusion::logical_expr::{Join, Projection};
    fn name(side: usize, i: usize) -> String {
        format!("__weir_join_{}_key_{i}", ["left", "right"][side])
    }
    fn with_keys(
        input: &Arc<LogicalPlan>,
        side: usize,
        keys: &[(usize, &Expr)],
    ) -> Result<Arc<LogicalPlan>> {
        if keys.is_empty() {
            return Ok(input.clone());
        }
        let mut exprs: Vec<Expr> = input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        exprs.extend(keys.iter().map(|(i, e)| (*e).clone().alias(name(side, *i))));
        Ok(Arc::new(LogicalPlan::Projection(Projection::try_new(
            exprs,
            input.clone(),
        )?)))
    }
    let computed = |side: usize| -> Vec<(usize, &Expr)> {
        j.on.iter()
            .enumerate()
            .map(|(i, (l, r))| (i, if side == 0 { l } else { r }))
            .filter(|(_, e)| !matches!(e, Expr::Column(_)))
            .collect()
    };
    let (left_keys, right_keys) = (computed(0), computed(1));
    let left = with_keys(&j.left, 0, &left_keys)?;
    let right = with_keys(&j.right, 1, &right_keys)?;
    let key = |plan: &Arc<LogicalPlan>, side: usize, i: usize, e: &Expr| -> Result<Expr> {
        Ok(match e {
            Expr::Column(_) => e.clone(),
            _ => Expr::Column(
                plan.schema().columns().remove(
                    plan.schema()
                        .index_of_column_by_name(None, &name(side, i))
                        .ok_or_else(|| Error::internal("computed join key column missing"))?,
                ),
            ),
        })
    };
    let on =
        j.on.iter()
            .enumerate()
            .map(|(i, (l, r))| Ok((key(&left, 0, i, l)?, key(&right, 1, i, r)?)))
            .collect::<Result<Vec<_>>>()?;
    let schema = build_join_schema(left.schema(), right.schema(), &j.join_type)?;
    let join = LogicalPlan::Join(Join {
        left,
        right,
        on,
        schema: Arc::new(schema),
        ..j.clone()
    });
    let original: Vec<Expr> = j.schema.columns().into_iter().map(Expr::Column).collect();
    Ok(LogicalPlan::Projection(Projection::try_new(
        original,
        Arc::new(join),
    )?))
}

/// Interval join: when the join's condition bounds `l.t - r.t` on both sides for two
/// event-time columns (`l.t BETWEEN r.t - INTERVAL a AND r.t + INTERVAL b`, or the same
/// with comparisons), a left row at `t` matches right rows up to `t - lower` and a right
/// row at `r` left rows up to `r + upper`; once the watermark passes those, the rows go.
fn interval_expiry(
    join: &datafusion::logical_expr::Join,
    nodes: &[PlanNode],
    left: usize,
    right: usize,
) -> [Option<(usize, i64)>; 2] {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    let Some(filter) = &join.filter else {
        return [None, None];
    };
    // `column + offset` (milliseconds), on either side of the join.
    let term = |e: &Expr| -> Option<(usize, bool, i64)> {
        let (column, offset) = match e {
            Expr::BinaryExpr(BinaryExpr {
                left: l,
                op: op @ (Operator::Plus | Operator::Minus),
                right: r,
            }) => {
                let Expr::Literal(v, _) = r.as_ref() else {
                    return None;
                };
                let ms = crate::group_windows::interval_millis(v)?;
                (l.as_ref(), if *op == Operator::Plus { ms } else { -ms })
            }
            other => (other, 0),
        };
        let column = match column {
            Expr::Column(c) => c,
            Expr::Cast(c) => match c.expr.as_ref() {
                Expr::Column(c) => c,
                _ => return None,
            },
            _ => return None,
        };
        if let Ok(i) = join.left.schema().index_of_column(column) {
            return Some((i, true, offset));
        }
        let i = join.right.schema().index_of_column(column).ok()?;
        Some((i, false, offset))
    };
    // Bounds on `l - r`, for one pair of columns.
    let (mut pair, mut lower, mut upper): (Option<(usize, usize)>, Option<i64>, Option<i64>) =
        (None, None, None);
    let mut relate = |a: &Expr, op: Operator, b: &Expr| {
        let (Some(x), Some(y)) = (term(a), term(b)) else {
            return;
        };
        // Orient as (left + p) OP (right + q), i.e. l - r OP q - p.
        let (l, r, op) = match (x.1, y.1) {
            (true, false) => (x, y, op),
            (false, true) => (
                y,
                x,
                match op {
                    Operator::Gt => Operator::Lt,
                    Operator::GtEq => Operator::LtEq,
                    Operator::Lt => Operator::Gt,
                    Operator::LtEq => Operator::GtEq,
                    other => other,
                },
            ),
            _ => return,
        };
        if pair.is_some_and(|p| p != (l.0, r.0)) {
            return;
        }
        pair = Some((l.0, r.0));
        let k = r.2 - l.2;
        match op {
            Operator::Gt | Operator::GtEq => lower = Some(lower.map_or(k, |v: i64| v.max(k))),
            Operator::Lt | Operator::LtEq => upper = Some(upper.map_or(k, |v: i64| v.min(k))),
            _ => {}
        }
    };
    for conjunct in datafusion::logical_expr::utils::split_conjunction(filter) {
        match conjunct {
            Expr::Between(b) if !b.negated => {
                relate(&b.expr, Operator::GtEq, &b.low);
                relate(&b.expr, Operator::LtEq, &b.high);
            }
            Expr::BinaryExpr(BinaryExpr {
                left: a,
                op,
                right: b,
            }) if matches!(
                op,
                Operator::Gt | Operator::GtEq | Operator::Lt | Operator::LtEq
            ) =>
            {
                relate(a, *op, b)
            }
            _ => {}
        }
    }
    match (pair, lower, upper) {
        (Some((l, r)), Some(lower), Some(upper))
            if crate::plan::is_time_attribute(nodes, left, l)
                && crate::plan::is_time_attribute(nodes, right, r) =>
        {
            // Left row at t: no future right row (time > watermark) can be <= t - lower.
            // Right row at r: no future left row can be <= r + upper.
            [Some((l, 1 - lower)), Some((r, upper + 1))]
        }
        _ => [None, None],
    }
}
