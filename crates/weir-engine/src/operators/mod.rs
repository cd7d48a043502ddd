//! Operators that implement SQL semantics on the runtime's [`Operator`] trait, one file
//! per operator.
//!
//! [`Operator`]: weir_runtime::Operator

mod calc;
mod join;
mod state;
mod union;
mod watermark_assigner;
mod window_aggregate;

pub use calc::{CalcOperator, CalcOperatorFactory};
pub use join::JoinOperatorFactory;
pub use union::UnionOperatorFactory;
pub use watermark_assigner::WatermarkAssignerFactory;
pub use window_aggregate::WindowAggregateFactory;
