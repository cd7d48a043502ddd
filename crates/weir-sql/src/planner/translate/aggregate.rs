//! Aggregates: updating group aggregates, event-time and processing-time window
//! aggregates, session windows.

use super::*;
use datafusion::common::ScalarValue;
use std::collections::HashMap;

impl Planner {
    /// A group, window or session aggregate.
    pub(super) fn translate_aggregate(
        &self,
        agg: &datafusion::logical_expr::Aggregate,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let (node, mut steps) = self.translate(&agg.input, nodes)?;
        let in_schema = agg.input.schema();
        let mut keys = Vec::new();
        // Group expressions that are not columns are computed first, as columns
        // appended to the input (the aggregates' arguments keep their positions).
        let mut computed: Vec<(PhysicalExprRef, Field)> = Vec::new();
        // Legacy group windows: (position among the keys, session gap in ms).
        let (mut session, mut tumble) = (None, None);
        // GROUPING SETS, ROLLUP and CUBE: the input expanded, one copy per grouping set.
        let mut expanded = None;
        for g in &agg.group_expr {
            match g {
                Expr::Column(c) => keys.push(in_schema.index_of_column(c)?),
                Expr::GroupingSet(set) => {
                    let step = self.expand_grouping_sets(set, agg)?;
                    let width = in_schema.fields().len();
                    keys.extend(width..step.schema.fields().len());
                    expanded = Some(step.schema.clone());
                    steps.push(CalcStep::Expand(step));
                }
                other => {
                    if let Expr::ScalarFunction(f) = other {
                        let name = f.func.name();
                        if name == crate::group_windows::SESSION {
                            let gap = match f.args.get(1) {
                                Some(Expr::Literal(v, _)) => {
                                    crate::group_windows::interval_millis(v)
                                }
                                _ => None,
                            };
                            session = Some((keys.len(), gap.unwrap_or(0)));
                        } else if name == crate::group_windows::TUMBLE {
                            tumble = Some(keys.len());
                        }
                    }
                    let (_, field) =
                        datafusion::logical_expr::ExprSchemable::to_field(other, in_schema)?;
                    let (data_type, nullable) = (field.data_type().clone(), field.is_nullable());
                    keys.push(in_schema.fields().len() + computed.len());
                    computed.push((
                        self.physical(other, in_schema)?,
                        Field::new(other.schema_name().to_string(), data_type, nullable),
                    ));
                }
            }
        }
        let mut input_fields: Vec<Field> = expanded
            .as_ref()
            .map_or(in_schema.fields(), |s| s.fields())
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        if !computed.is_empty() {
            let mut exprs: Vec<PhysicalExprRef> = input_fields
                .iter()
                .enumerate()
                .map(|(i, f)| Arc::new(Column::new(f.name(), i)) as PhysicalExprRef)
                .collect();
            for (e, f) in computed {
                exprs.push(e);
                input_fields.push(f);
            }
            steps.push(CalcStep::Project {
                exprs,
                schema: Arc::new(Schema::new(input_fields.clone())),
            });
        }
        let input = materialize(node, steps, Arc::new(Schema::new(input_fields)), nodes)?;
        let window_end = tumble.or_else(|| {
            keys.iter()
                .position(|k| crate::plan::is_window_end(nodes, input, *k))
        });
        if let (Some(_), Some(producer)) = (session, crate::plan::updates_in(nodes, input)) {
            return Err(Error::plan(format!(
                "a session window aggregate over an updating input ({producer}) is not supported"
            )));
        }
        let input_updates = crate::plan::updates_in(nodes, input);
        if let (Some(_), Some(producer)) = (window_end, input_updates) {
            return Err(Error::plan(format!(
                "a window aggregate over an updating input ({producer}) is not supported"
            )));
        }
        let props = datafusion::logical_expr::execution_props::ExecutionProps::new();
        let mut aggregates = Vec::new();
        for e in &agg.aggr_expr {
            // Deprecated in favour of `LoweredAggregateBuilder`; the helper still
            // gives exactly the function, its filter and its ordering.
            #[allow(deprecated)]
            let (function, filter, order) =
                datafusion::physical_planner::create_aggregate_expr_and_maybe_filter(
                    e,
                    in_schema,
                    in_schema.as_arrow(),
                    &props,
                )
                .map_err(plan_error)?;
            if !order.is_empty() {
                return Err(Error::plan(format!(
                    "{e}: ordered aggregates are not supported in streaming mode yet"
                )));
            }
            if let Some(producer) = input_updates {
                let retracts = function
                    .create_sliding_accumulator()
                    .map(|a| a.supports_retract_batch())
                    .unwrap_or(false);
                if !retracts {
                    return Err(Error::plan(format!(
                        "{e} cannot take back the rows its input retracts (the input is updated by {producer}); \
                         COUNT, SUM, AVG, MIN and MAX can"
                    )));
                }
                if matches!(function.fun().name(), "array_agg" | "nth_value") {
                    // DataFusion's accumulators take values back from the front, as a
                    // window frame slides: a retracted row of a changelog may be any.
                    return Err(Error::plan(format!(
                        "{e} over an updating input (updated by {producer}) is not supported \
                         yet: it would take back the oldest value instead of the retracted one"
                    )));
                }
            }
            aggregates.push(crate::plan::AggregateSpec { function, filter });
        }
        if let Some((position, gap_ms)) = session {
            if gap_ms <= 0 {
                return Err(Error::plan(
                    "SESSION(ts, gap): the gap must be a positive literal interval such as INTERVAL '10' SECOND",
                ));
            }
            nodes.push(PlanNode::SessionAggregate {
                input,
                keys,
                session: position,
                gap_ms,
                aggregates,
                schema: Arc::new(agg.schema.as_arrow().clone()),
            });
            return Ok((nodes.len() - 1, Vec::new()));
        }
        let Some(window_end) = window_end else {
            nodes.push(PlanNode::GroupAggregate {
                input,
                keys,
                aggregates,
                retract: input_updates.is_some(),
                schema: Arc::new(agg.schema.as_arrow().clone()),
            });
            return Ok((nodes.len() - 1, Vec::new()));
        };
        let processing_time = crate::plan::is_processing_time(nodes, input, keys[window_end]);
        nodes.push(PlanNode::WindowAggregate {
            input,
            keys,
            window_end,
            processing_time,
            aggregates,
            schema: Arc::new(agg.schema.as_arrow().clone()),
        });
        Ok((nodes.len() - 1, Vec::new()))
    }

    /// The Expand step of `GROUP BY` grouping sets (Flink's plan): each input row once per
    /// grouping set, with the grouping expressions appended (NULL where the set leaves
    /// one out) and DataFusion's `__grouping_id` (a bit per expression left out, and an
    /// ordinal telling repeated sets apart), which `GROUPING()` reads. The copies are then
    /// grouped by all of those.
    fn expand_grouping_sets(
        &self,
        set: &datafusion::logical_expr::GroupingSet,
        agg: &datafusion::logical_expr::Aggregate,
    ) -> Result<crate::plan::ExpandStep> {
        use datafusion::logical_expr::GroupingSet;
        let in_schema = agg.input.schema();
        let distinct: Vec<Expr> = set.distinct_expr().into_iter().cloned().collect();
        let group_window = |e: &Expr| {
            matches!(e, Expr::ScalarFunction(f)
                if [crate::group_windows::TUMBLE, crate::group_windows::SESSION]
                    .contains(&f.func.name()))
        };
        if distinct.iter().any(group_window) {
            return Err(Error::plan(
                "a group window (GROUP BY TUMBLE(…)/SESSION(…)) cannot be combined with \
                 grouping sets; use a window TVF: GROUP BY window_start, window_end, \
                 GROUPING SETS (…)",
            ));
        }
        let sets: Vec<Vec<Expr>> = match set {
            GroupingSet::GroupingSets(sets) => sets.clone(),
            GroupingSet::Rollup(exprs) => (0..=exprs.len())
                .rev()
                .map(|n| exprs[..n].to_vec())
                .collect(),
            GroupingSet::Cube(exprs) => datafusion::logical_expr::utils::powerset(exprs)
                .map_err(plan_error)?
                .into_iter()
                .map(|s| s.into_iter().cloned().collect())
                .collect(),
        };
        // Which expressions each set leaves out, and repeated sets' ordinals.
        let masks: Vec<Vec<bool>> = sets
            .iter()
            .map(|s| distinct.iter().map(|e| !s.contains(e)).collect())
            .collect();
        let mut seen: HashMap<&[bool], u64> = HashMap::new();
        let width = in_schema.fields().len();
        // The aggregate's output starts with its keys and `__grouping_id`.
        let key_fields: Vec<Field> = agg.schema.fields()[..=distinct.len()]
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let id_type = key_fields[distinct.len()].data_type().clone();
        let keys: Vec<PhysicalExprRef> = distinct
            .iter()
            .map(|e| self.physical(e, in_schema))
            .collect::<Result<_>>()?;
        let mut exprs = Vec::new();
        for mask in &masks {
            let ordinal = seen.entry(mask).or_default();
            exprs.extend(
                (0..width).map(|i| {
                    Arc::new(Column::new(in_schema.field(i).name(), i)) as PhysicalExprRef
                }),
            );
            for ((key, left_out), field) in keys.iter().zip(mask).zip(&key_fields) {
                exprs.push(match left_out {
                    true => Arc::new(datafusion::physical_expr::expressions::Literal::new(
                        ScalarValue::try_from(field.data_type())?,
                    )) as PhysicalExprRef,
                    false => key.clone(),
                });
            }
            let bits = mask
                .iter()
                .fold(0u64, |acc, &out| (acc << 1) | u64::from(out));
            let id =
                ScalarValue::UInt64(Some(bits | (*ordinal << distinct.len()))).cast_to(&id_type)?;
            exprs.push(Arc::new(
                datafusion::physical_expr::expressions::Literal::new(id),
            ));
            *ordinal += 1;
        }
        let mut fields: Vec<Field> = in_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(key_fields);
        Ok(crate::plan::ExpandStep {
            exprs,
            schema: Arc::new(Schema::new(fields)),
        })
    }
}
