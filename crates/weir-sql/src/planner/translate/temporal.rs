//! Event-time temporal joins: a join whose condition holds the marker of
//! [`crate::temporal_join`] (`FOR SYSTEM_TIME AS OF`).

use super::*;
use crate::plan::JoinKind;

/// Whether `j` is a temporal join (its condition holds the marker).
pub(super) fn is_temporal(j: &datafusion::logical_expr::Join) -> bool {
    j.filter.as_ref().is_some_and(|f| {
        datafusion::logical_expr::utils::split_conjunction(f)
            .into_iter()
            .any(is_marker)
    })
}

fn is_marker(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if f.func.name() == crate::temporal_join::MARKER)
}

impl Planner {
    /// `o JOIN v FOR SYSTEM_TIME AS OF o.ts ON …` as a [`PlanNode::TemporalJoin`].
    pub(super) fn translate_temporal_join(
        &self,
        j: &datafusion::logical_expr::Join,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        use datafusion::logical_expr::JoinType;
        let kind = match j.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::LeftOuter,
            other => {
                return Err(Error::plan(format!(
                    "a {other} temporal join: temporal joins are JOIN or LEFT JOIN (as in Flink)"
                )));
            }
        };
        let conjuncts = datafusion::logical_expr::utils::split_conjunction_owned(
            j.filter
                .clone()
                .unwrap_or_else(|| datafusion::prelude::lit(true)),
        );
        let (markers, mut residual): (Vec<Expr>, Vec<Expr>) =
            conjuncts.into_iter().partition(is_marker);
        let [Expr::ScalarFunction(marker)] = markers.as_slice() else {
            return Err(Error::plan(
                "one join reads two tables FOR SYSTEM_TIME AS OF; join them one at a time",
            ));
        };
        let (left_schema, right_schema) = (j.left.schema(), j.right.schema());
        let time = &marker.args[0];
        let left_time = match time {
            Expr::Column(c) => left_schema.index_of_column(c).ok(),
            _ => None,
        }
        .ok_or_else(|| {
            Error::plan(format!(
                "FOR SYSTEM_TIME AS OF {time}: the time is a time attribute column of the table \
                 joined to the versioned one (FROM o JOIN v FOR SYSTEM_TIME AS OF o.ts)"
            ))
        })?;
        let mut pairs = Vec::new();
        for (l, r) in &j.on {
            match (l, r) {
                (Expr::Column(l), Expr::Column(r)) => pairs.push((
                    left_schema.index_of_column(l)?,
                    right_schema.index_of_column(r)?,
                )),
                _ => {
                    return Err(Error::plan(format!(
                        "temporal join ON {l} = {r}: join on columns (compute expressions in a subquery)"
                    )));
                }
            }
        }
        let left = self.translate_into_node(&j.left, nodes)?;
        if crate::plan::is_processing_time(nodes, left, left_time) {
            return self.translate_lookup_join(j, kind, left, pairs, residual, nodes);
        }
        let right = self.translate_into_node(&j.right, nodes)?;
        // A versioned view (a deduplication keeping each key's last row): every change is a
        // version, so the deduplication emits them all.
        let mut m = right;
        while let PlanNode::Calc { input, .. } = &nodes[m] {
            m = *input;
        }
        if let PlanNode::TopN {
            limit: 1,
            every_change,
            ..
        } = &mut nodes[m]
        {
            *every_change = true;
        }
        if let Some(producer) = crate::plan::updates_in(nodes, left) {
            return Err(Error::plan(format!(
                "the table joined FOR SYSTEM_TIME AS OF another is updated by {producer}: a \
                 temporal join's probe side must be append-only"
            )));
        }
        if !crate::plan::is_time_attribute(nodes, left, left_time) {
            return Err(Error::plan(format!(
                "FOR SYSTEM_TIME AS OF {time}: the time must be a time attribute (a column with \
                 a WATERMARK) of the probe side"
            )));
        }
        let right_width = right_schema.fields().len();
        let times: Vec<usize> = (0..right_width)
            .filter(|c| version_time(nodes, right, *c))
            .collect();
        let [right_time] = times.as_slice() else {
            return Err(Error::plan(
                "Event-Time Temporal Table Join requires both primary key and row time attribute \
                 in versioned table: the table read FOR SYSTEM_TIME AS OF needs one event-time \
                 column (a WATERMARK)",
            ));
        };
        let Some(key) = version_key(nodes, right) else {
            return Err(Error::plan(
                "Temporal Table Join requires primary key in versioned table, but no primary key \
                 can be found (declare PRIMARY KEY (…) NOT ENFORCED, or deduplicate it in a view)",
            ));
        };
        if !key.iter().all(|k| pairs.iter().any(|(_, r)| r == k)) {
            let names: Vec<&str> = key
                .iter()
                .map(|k| right_schema.field(*k).name().as_str())
                .collect();
            return Err(Error::plan(format!(
                "the versioned table's primary key ({}) must be in the temporal join's equality \
                 condition (as in Flink)",
                names.join(", ")
            )));
        }
        // Versions are kept per primary key; other equalities are conditions on the pair.
        let (mut left_keys, mut right_keys) = (Vec::new(), Vec::new());
        for (l, r) in pairs {
            if key.contains(&r) && !right_keys.contains(&r) {
                left_keys.push(l);
                right_keys.push(r);
            } else {
                let column = |schema: &DFSchema, c: usize| {
                    let (q, f) = schema.qualified_field(c);
                    Expr::Column(datafusion::common::Column::new(q.cloned(), f.name()))
                };
                residual.push(column(left_schema, l).eq(column(right_schema, r)));
            }
        }
        let filter = match datafusion::logical_expr::utils::conjunction(residual) {
            Some(e) => Some(self.physical(&e, &j.schema)?),
            None => None,
        };
        nodes.push(PlanNode::TemporalJoin {
            left,
            right,
            left_keys,
            right_keys,
            left_time,
            right_time: *right_time,
            kind,
            filter,
            schema: Arc::new(j.schema.as_arrow().clone()),
        });
        Ok((nodes.len() - 1, Vec::new()))
    }
}

impl Planner {
    /// `o JOIN d FOR SYSTEM_TIME AS OF o.proctime ON …` as a [`PlanNode::LookupJoin`]: `d`
    /// is a table (maybe filtered), read whole by the join.
    fn translate_lookup_join(
        &self,
        j: &datafusion::logical_expr::Join,
        kind: JoinKind,
        left: usize,
        pairs: Vec<(usize, usize)>,
        residual: Vec<Expr>,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let mut plan = j.right.as_ref();
        let mut filters = Vec::new();
        let scan = loop {
            match plan {
                LogicalPlan::SubqueryAlias(a) => plan = &a.input,
                LogicalPlan::Filter(f) => {
                    filters.push(f.predicate.clone());
                    plan = &f.input;
                }
                LogicalPlan::TableScan(scan) => break scan,
                other => {
                    let what = other.display().to_string();
                    return Err(Error::plan(format!(
                        "a lookup join (FOR SYSTEM_TIME AS OF a PROCTIME()) reads a table, \
                         not {}",
                        what.split(':').next().unwrap_or_default()
                    )));
                }
            }
        };
        let table = table_of_scan(scan)
            .ok_or_else(|| Error::plan(format!("'{}' cannot be looked up", scan.table_name)))?;
        let width = table.schema.fields().len();
        let whole = match &scan.projection {
            None => true,
            Some(p) => p.len() == width && p.iter().enumerate().all(|(i, c)| i == *c),
        };
        if !whole || j.right.schema().fields().len() != width {
            return Err(Error::internal("a lookup join's table is not read whole"));
        }
        let table_filter = match datafusion::logical_expr::utils::conjunction(filters) {
            Some(e) => Some(self.physical(&e, scan.projected_schema.as_ref())?),
            None => None,
        };
        let filter = match datafusion::logical_expr::utils::conjunction(residual) {
            Some(e) => Some(self.physical(&e, &j.schema)?),
            None => None,
        };
        let (left_keys, right_keys) = pairs.into_iter().unzip();
        nodes.push(PlanNode::LookupJoin {
            left,
            table,
            table_filter,
            left_keys,
            right_keys,
            kind,
            filter,
            schema: Arc::new(j.schema.as_arrow().clone()),
        });
        Ok((nodes.len() - 1, Vec::new()))
    }
}

/// The node and column `col` of node `n` comes from, through Calcs passing it on and
/// Top-Ns (a deduplication keeps its input's columns in place).
fn source_of(nodes: &[PlanNode], n: usize, col: usize) -> Option<(usize, usize)> {
    match &nodes[n] {
        PlanNode::Calc { input, steps, .. } => {
            source_of(nodes, *input, crate::plan::passed_through(steps, col)?)
        }
        PlanNode::TopN { input, .. } => {
            let width = crate::plan::output_schema_in(nodes, *input).fields().len();
            (col < width).then_some(())?;
            source_of(nodes, *input, col)
        }
        _ => Some((n, col)),
    }
}

/// Whether column `col` of the versioned side `n` is its event time.
fn version_time(nodes: &[PlanNode], n: usize, col: usize) -> bool {
    source_of(nodes, n, col).is_some_and(|(m, c)| crate::plan::is_time_attribute(nodes, m, c))
}

/// The columns of node `n` that key its versions: a table's `PRIMARY KEY`, or the
/// partition of a deduplication (a versioned view), as columns of `n`.
fn version_key(nodes: &[PlanNode], n: usize) -> Option<Vec<usize>> {
    let width = crate::plan::output_schema_in(nodes, n).fields().len();
    // Where each column of `n` comes from.
    let sources: Vec<Option<(usize, usize)>> = (0..width).map(|c| source_of(nodes, n, c)).collect();
    let key_of = |m: usize| -> Option<Vec<usize>> {
        match &nodes[m] {
            PlanNode::Scan { table, .. } if !table.primary_key.is_empty() => table
                .primary_key
                .iter()
                .map(|k| table.schema.index_of(k).ok())
                .collect(),
            _ => None,
        }
    };
    // A deduplication on the way: its partition columns.
    let mut m = n;
    loop {
        match &nodes[m] {
            PlanNode::Calc { input, .. } => m = *input,
            PlanNode::TopN {
                input,
                partition,
                limit: 1,
                ..
            } => {
                let found: Option<Vec<usize>> = partition
                    .iter()
                    .map(|p| {
                        let at = source_of(nodes, *input, *p)?;
                        sources.iter().position(|s| *s == Some(at))
                    })
                    .collect();
                return found;
            }
            _ => break,
        }
    }
    let bottom = sources.iter().flatten().next()?.0;
    key_of(bottom)?
        .into_iter()
        .map(|k| sources.iter().position(|s| *s == Some((bottom, k))))
        .collect()
}
