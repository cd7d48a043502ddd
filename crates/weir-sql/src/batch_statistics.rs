//! Batch mode's row-count estimates for DataFusion's join ordering.
//!
//! DataFusion builds a hash join's table on the input it estimates smaller. It estimates
//! a grouped aggregate at its input's row count unless the grouping columns' distinct
//! counts are known, so a join of a table with an aggregate of it (Nexmark q7: bids
//! against each window's highest bid) builds its hash table on the whole table. Flink's
//! planner (Calcite's `RelMdRowCount`) estimates such an aggregate at a tenth of its input;
//! Weir does the same, through DataFusion's statistics registry.

use datafusion::common::Statistics;
use datafusion::common::stats::Precision;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::operator_statistics::{
    AggregateStatisticsProvider, DefaultStatisticsProvider, ExtendedStatistics,
    FilterStatisticsProvider, JoinStatisticsProvider, LimitStatisticsProvider,
    PassthroughStatisticsProvider, ProjectionStatisticsProvider, StatisticsProvider,
    StatisticsRegistry, StatisticsResult, UnionStatisticsProvider,
};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use std::sync::Arc;

/// How many input rows Flink's planner expects per group when it cannot tell.
const ROWS_PER_UNKNOWN_GROUP: usize = 10;

/// DataFusion's own providers, with [`UnknownGroupsReduce`] after its distinct-count
/// estimate of aggregates (which wins when the counts are known).
pub fn registry() -> StatisticsRegistry {
    StatisticsRegistry::with_providers(vec![
        Arc::new(FilterStatisticsProvider),
        Arc::new(ProjectionStatisticsProvider),
        Arc::new(PassthroughStatisticsProvider),
        Arc::new(AggregateStatisticsProvider),
        Arc::new(UnknownGroupsReduce),
        Arc::new(JoinStatisticsProvider),
        Arc::new(LimitStatisticsProvider),
        Arc::new(UnionStatisticsProvider),
        Arc::new(DefaultStatisticsProvider),
    ])
}

/// A grouped aggregate (final or single phase) whose number of groups is unknown is
/// estimated at a tenth of its input rows.
#[derive(Debug, Default)]
pub struct UnknownGroupsReduce;

impl StatisticsProvider for UnknownGroupsReduce {
    fn compute_statistics(
        &self,
        plan: &dyn ExecutionPlan,
        child_stats: &[ExtendedStatistics],
    ) -> datafusion::error::Result<StatisticsResult> {
        let Some(aggregate) = plan.downcast_ref::<AggregateExec>() else {
            return Ok(StatisticsResult::Delegate);
        };
        // A partial aggregate's groups are per partition; a global aggregate is one row.
        if matches!(aggregate.mode(), AggregateMode::Partial)
            || aggregate.group_expr().expr().is_empty()
        {
            return Ok(StatisticsResult::Delegate);
        }
        let [input] = child_stats else {
            return Ok(StatisticsResult::Delegate);
        };
        let Some(&rows) = input.base().num_rows.get_value() else {
            return Ok(StatisticsResult::Delegate);
        };
        let groups = (rows / ROWS_PER_UNKNOWN_GROUP).max(1);
        let mut stats =
            Arc::unwrap_or_clone(StatisticsContext::new().compute(plan, &StatisticsArgs::new())?);
        stats.total_byte_size = scaled(&stats, groups);
        stats.num_rows = Precision::Inexact(groups);
        Ok(StatisticsResult::Computed(ExtendedStatistics::new(stats)))
    }
}

/// `stats`' byte size for `rows` rows instead of its own count.
fn scaled(stats: &Statistics, rows: usize) -> Precision<usize> {
    match (
        stats.num_rows.get_value(),
        stats.total_byte_size.get_value(),
    ) {
        (Some(&old), Some(&bytes)) if old > 0 => {
            Precision::Inexact((bytes as f64 * rows as f64 / old as f64).round() as usize)
        }
        _ => Precision::Absent,
    }
}
