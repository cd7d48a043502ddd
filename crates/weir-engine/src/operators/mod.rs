//! Operators that implement SQL semantics on the runtime's [`Operator`] trait, one file
//! per operator.
//!
//! [`Operator`]: weir_runtime::Operator

mod calc;
mod union;
mod watermark_assigner;

pub use calc::{CalcOperator, CalcOperatorFactory};
pub use union::UnionOperatorFactory;
pub use watermark_assigner::WatermarkAssignerFactory;
