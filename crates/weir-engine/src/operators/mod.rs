//! Operators that implement SQL semantics on the runtime's [`Operator`] trait, one file
//! per operator.
//!
//! [`Operator`]: weir_runtime::Operator

mod aggregate;
mod calc;
mod changelog_normalize;
mod delta;
mod final_top_n;
mod group_aggregate;
mod hot;
mod join;
mod keys;
mod limit;
mod lookup_join;
mod match_recognize;
mod min_max;
mod over_aggregate;
mod session_aggregate;
mod state;
mod temporal_join;
mod temporal_sort;
mod time_buffer;
mod top_n;
mod union;
mod watermark_assigner;
mod window_aggregate;

pub use calc::{CalcOperator, CalcOperatorFactory};
pub use changelog_normalize::ChangelogNormalizeFactory;
pub use final_top_n::{Deadline, FinalTopNFactory};
pub use group_aggregate::GroupAggregateFactory;
pub use join::JoinOperatorFactory;
pub use limit::LimitFactory;
pub use lookup_join::LookupJoinFactory;
pub use match_recognize::MatchRecognizeFactory;
pub use over_aggregate::OverAggregateFactory;
pub use session_aggregate::SessionAggregateFactory;
pub use temporal_join::TemporalJoinFactory;
pub use temporal_sort::TemporalSortFactory;
pub use top_n::TopNFactory;
pub use union::UnionOperatorFactory;
pub use watermark_assigner::WatermarkAssignerFactory;
pub use window_aggregate::WindowAggregateFactory;
