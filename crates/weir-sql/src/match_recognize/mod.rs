//! `MATCH_RECOGNIZE`: the compiled program ([`MatchProgram`]) and the matcher that runs it
//! over each partition's rows in time order ([`matcher`]). The planner builds the program
//! (`planner/match_recognize.rs`); the streaming operator and batch mode ([`batch`])
//! share the matcher.

pub mod batch;
mod java_heap;
pub mod matcher;
pub mod pattern;

use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use std::sync::Arc;

/// A value a `DEFINE` condition or a measure reads from the rows of a (partial) match: an
/// extra column of the row its expression is evaluated on.
#[derive(Debug, Clone)]
pub enum Nav {
    /// `LAST(V.col, n)` (and `V.col` of another variable): the `n`-th last row mapped to
    /// `V` (any variable: `None`).
    Last {
        var: Option<usize>,
        column: usize,
        offset: usize,
    },
    /// `FIRST(V.col, n)`: the `n`-th row mapped to `V`.
    First {
        var: Option<usize>,
        column: usize,
        offset: usize,
    },
    /// An aggregate over the rows mapped to `V` (every row of the match: `None`).
    Aggregate {
        var: Option<usize>,
        function: Arc<AggregateFunctionExpr>,
        /// Flink's result type: an expression over the aggregate's value (the one column of
        /// `value_schema`).
        result: PhysicalExprRef,
        value_schema: SchemaRef,
    },
}

impl PartialEq for Nav {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                Nav::Last {
                    var: a,
                    column: b,
                    offset: c,
                },
                Nav::Last {
                    var: d,
                    column: e,
                    offset: f,
                },
            )
            | (
                Nav::First {
                    var: a,
                    column: b,
                    offset: c,
                },
                Nav::First {
                    var: d,
                    column: e,
                    offset: f,
                },
            ) => a == d && b == e && c == f,
            _ => false,
        }
    }
}

/// An expression over the row it is evaluated on (the candidate row of a `DEFINE`, the
/// last row of a match for a measure) followed by one column per [`Nav`].
#[derive(Debug, Clone)]
pub struct NavExpr {
    pub expr: PhysicalExprRef,
    pub navs: Vec<Nav>,
}

/// `AFTER MATCH SKIP …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    PastLastRow,
    ToNextRow,
    ToFirst(usize),
    ToLast(usize),
}

/// A compiled `MATCH_RECOGNIZE` clause.
#[derive(Debug)]
pub struct MatchProgram {
    pub input_schema: SchemaRef,
    /// `PARTITION BY` columns of the input.
    pub partition: Vec<usize>,
    /// The time attribute rows are ordered by.
    pub time: usize,
    /// Pattern variables, by index.
    pub variables: Vec<String>,
    /// Each variable's `DEFINE` condition (none: always true).
    pub defines: Vec<Option<NavExpr>>,
    pub nfa: pattern::Nfa,
    pub skip: Skip,
    /// `WITHIN INTERVAL …`, milliseconds: a match spans less than this.
    pub within: Option<i64>,
    /// `MEASURES`, one output column each after the partition columns.
    pub measures: Vec<PhysicalExprRef>,
    /// The navigations the measures read (shared: one extra column each).
    pub measure_navs: Vec<Nav>,
    /// Partition columns, then the measures.
    pub schema: SchemaRef,
}

impl MatchProgram {
    /// Short description for EXPLAIN and operator names.
    pub fn describe(&self) -> String {
        let pattern = self
            .variables
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ");
        let partition = self
            .partition
            .iter()
            .map(|c| self.input_schema.field(*c).name().as_str())
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "partition by: [{partition}]; order by {}; variables: {pattern}; skip: {:?}",
            self.input_schema.field(self.time).name(),
            self.skip
        )
    }
}
