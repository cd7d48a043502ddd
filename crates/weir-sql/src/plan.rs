//! The planner's output: a streaming job as plain data.

use crate::catalog::TableDef;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::fmt;
use std::sync::Arc;

pub type PhysicalExprRef = Arc<dyn PhysicalExpr>;

/// One stateless step of a `Calc` node.
#[derive(Debug, Clone)]
pub enum CalcStep {
    /// Keep rows where the predicate is true.
    Filter(PhysicalExprRef),
    /// Compute new columns.
    Project {
        exprs: Vec<PhysicalExprRef>,
        schema: SchemaRef,
    },
}

/// One aggregate function of a window aggregate, with its `FILTER (WHERE …)`.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    pub function: Arc<datafusion::physical_expr::aggregate::AggregateFunctionExpr>,
    pub filter: Option<PhysicalExprRef>,
}

/// Kinds of streaming join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    /// Every matching pair, left columns then right columns.
    Inner,
    /// Each left row once, when it first has a match (`EXISTS`/`IN`, DISTINCT rewrites).
    LeftSemi,
    /// Each right row once, when it first has a match.
    RightSemi,
}

/// A node of a [`StreamPlan`]; inputs refer to earlier nodes.
#[derive(Debug, Clone)]
pub enum PlanNode {
    /// Read a table: connector columns, then computed columns, then the watermark.
    Scan {
        table: Arc<TableDef>,
        /// Expressions over the physical columns producing the table's full schema.
        computed: Option<Vec<PhysicalExprRef>>,
        /// Watermark expression over the full schema.
        watermark: Option<PhysicalExprRef>,
    },
    /// Filters and projections, fused.
    Calc {
        input: usize,
        steps: Vec<CalcStep>,
        schema: SchemaRef,
    },
    /// Event-time window aggregate: rows are grouped by the `keys` columns of the input
    /// (which include the window's `window_end`, at position `window_end` among them); a
    /// group is emitted once the watermark passes its window end.
    WindowAggregate {
        input: usize,
        keys: Vec<usize>,
        window_end: usize,
        aggregates: Vec<AggregateSpec>,
        schema: SchemaRef,
    },
    /// Regular inner equi-join of two append-only inputs: every row is kept (keyed by the
    /// join columns) and joined with the rows of the other side that arrived before it.
    Join {
        /// Inner, or a semi join that keeps the rows of one side that have a match.
        kind: JoinKind,
        left: usize,
        right: usize,
        left_keys: Vec<usize>,
        right_keys: Vec<usize>,
        /// Extra condition over the joined row.
        filter: Option<PhysicalExprRef>,
        schema: SchemaRef,
    },
    /// Union of inputs with the same schema.
    Union {
        inputs: Vec<usize>,
        schema: SchemaRef,
    },
    /// Write into a table (`INSERT INTO`).
    Sink { input: usize, table: Arc<TableDef> },
    /// Show the rows to the user (a bare `SELECT`).
    Collect { input: usize, schema: SchemaRef },
}

/// A streaming job: nodes in topological order; the last one is the sink.
#[derive(Debug, Clone, Default)]
pub struct StreamPlan {
    pub nodes: Vec<PlanNode>,
    /// DataFusion's optimized logical plan, for EXPLAIN.
    pub logical_plan: String,
}

impl fmt::Display for CalcStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CalcStep::Filter(e) => write!(f, "where {e}"),
            CalcStep::Project { exprs, schema } => {
                let items: Vec<String> = exprs
                    .iter()
                    .zip(schema.fields())
                    .map(|(e, field)| {
                        let text = e.to_string();
                        let bare = text.split('@').next().unwrap_or_default();
                        if bare == field.name() {
                            field.name().clone()
                        } else {
                            format!("{text} AS {}", field.name())
                        }
                    })
                    .collect();
                write!(f, "select {}", items.join(", "))
            }
        }
    }
}
