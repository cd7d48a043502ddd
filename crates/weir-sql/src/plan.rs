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
    /// Expand rows: each element of the list columns (and each field of the struct
    /// columns) becomes a row (a column), the other columns repeated, as DataFusion's
    /// `UnnestExec` does (`SELECT …, UNNEST(list)`, the window TVFs HOP and CUMULATE).
    Unnest(UnnestStep),
    /// Repeat rows: each input row becomes one row per projection, as Flink's Expand does
    /// for `GROUPING SETS`, `ROLLUP` and `CUBE` (one row per grouping set, the keys the
    /// set leaves out NULL).
    Expand(ExpandStep),
}

/// A [`CalcStep::Expand`]: its projections, one after another.
#[derive(Debug, Clone)]
pub struct ExpandStep {
    /// `schema.fields().len()` expressions per projection.
    pub exprs: Vec<PhysicalExprRef>,
    pub schema: SchemaRef,
}

impl ExpandStep {
    /// The projections, each one expression per output column.
    pub fn projections(&self) -> impl Iterator<Item = &[PhysicalExprRef]> {
        self.exprs.chunks(self.schema.fields().len().max(1))
    }

    /// The input column that output column `col` copies in every projection, if any.
    pub fn source(&self, col: usize) -> Option<usize> {
        use datafusion::physical_expr::expressions::Column;
        let mut found = None;
        for p in self.projections() {
            let c = p[col].downcast_ref::<Column>()?.index();
            if found.is_some_and(|f| f != c) {
                return None;
            }
            found = Some(c);
        }
        found
    }
}

/// A [`CalcStep::Unnest`]: the parameters of DataFusion's `UnnestExec`.
#[derive(Debug, Clone)]
pub struct UnnestStep {
    /// List columns of the input to unnest, with how deep.
    pub lists: Vec<datafusion::physical_plan::unnest::ListUnnest>,
    /// Struct columns of the input to expand into their fields.
    pub structs: Vec<usize>,
    /// For each output column, the input column it comes from.
    pub dependencies: Vec<usize>,
    pub schema: SchemaRef,
    pub options: datafusion::common::UnnestOptions,
}

impl UnnestStep {
    /// Whether output column `col` is (part of) an unnested column rather than a copy.
    pub fn unnests(&self, col: usize) -> bool {
        let input = self.dependencies[col];
        self.structs.contains(&input) || self.lists.iter().any(|l| l.index_in_input_schema == input)
    }
}

impl CalcStep {
    /// The expressions the step evaluates (none for an unnest).
    pub fn exprs(&self) -> &[PhysicalExprRef] {
        match self {
            CalcStep::Filter(e) => std::slice::from_ref(e),
            CalcStep::Project { exprs, .. } => exprs.as_slice(),
            CalcStep::Unnest(_) => &[],
            CalcStep::Expand(e) => &e.exprs,
        }
    }
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
    /// Inner rows, plus left rows without a match padded with NULLs (retracted when a
    /// match arrives).
    LeftOuter,
    /// Inner rows, plus right rows without a match padded with NULLs.
    RightOuter,
    /// Inner rows, plus rows of either side without a match padded with NULLs.
    FullOuter,
    /// Left rows without a match (`NOT EXISTS`): emitted, and retracted when a match
    /// arrives.
    LeftAnti,
    /// Right rows without a match.
    RightAnti,
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
        /// The window is over `PROCTIME()`: it fires on the wall clock, not on watermarks.
        processing_time: bool,
        aggregates: Vec<AggregateSpec>,
        schema: SchemaRef,
    },
    /// Session window aggregate (`GROUP BY k, SESSION(ts, gap)`): `keys` are the group
    /// columns of the input, the one at position `session` the per-row session struct
    /// `{start, end}` (see `group_windows`); sessions of a key that overlap are merged and a
    /// session is emitted once the watermark passes its end.
    SessionAggregate {
        input: usize,
        keys: Vec<usize>,
        session: usize,
        gap_ms: i64,
        aggregates: Vec<AggregateSpec>,
        schema: SchemaRef,
    },
    /// Updating aggregate (a `GROUP BY` without a window): rows are grouped by the `keys`
    /// columns; a new group emits `+I`, a changed one `-U` (old) and `+U` (new), and a group
    /// whose last row is retracted `-D`. Retractions in the input are taken back from the
    /// accumulators (`retract`).
    GroupAggregate {
        input: usize,
        keys: Vec<usize>,
        aggregates: Vec<AggregateSpec>,
        /// Whether the input is itself a changelog.
        retract: bool,
        schema: SchemaRef,
    },
    /// Top-N per partition (`ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) <= n`), also
    /// deduplication when `n` is 1: keeps the best `n` rows of each partition and emits the
    /// changes of the ranking as a changelog.
    TopN {
        input: usize,
        partition: Vec<usize>,
        /// Sort columns of the input with their direction.
        order: Vec<(usize, arrow::compute::SortOptions)>,
        /// How many rows each partition keeps: its ranks `offset + 1 ..= limit` are
        /// the output.
        limit: usize,
        /// How many of the best rows are kept but not output (`OFFSET`, `rn > m`).
        offset: usize,
        /// Whether the output carries the row number (as its last column).
        row_number: bool,
        schema: SchemaRef,
        /// The input is updating: every row is kept so retracted top rows can be replaced.
        retract: bool,
        /// Window Top-N, window deduplication and keep-first deduplication on a rowtime:
        /// each partition is emitted once, append-only, when it becomes final.
        final_at: Option<FinalAt>,
        /// Emit the change of every row, not one per partition and batch (a versioned
        /// view: a temporal join needs every version).
        every_change: bool,
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
        /// Per side, when its stored rows can be dropped: `(time column, offset)` drops a
        /// row once `time + offset <= watermark`, because no row that could still match
        /// it can arrive (window joins: a window's rows once the watermark passes its
        /// end; interval joins: rows outside the time bounds of anything still to come).
        expiry: [Option<(usize, i64)>; 2],
        schema: SchemaRef,
        /// `NOT IN` over a column that may be NULL (a left anti join): a NULL on the right
        /// excludes every left row, a NULL key on the left is excluded once the right is
        /// not empty. Its state is global, so it runs as one subtask.
        null_aware: bool,
    },
    /// Event-time temporal join (`JOIN v FOR SYSTEM_TIME AS OF probe.rowtime ON …`): each
    /// row of the probe side (left), once the watermark passes its time, joins the version
    /// of the versioned side (right) valid at that time — per key, the latest at or before
    /// it — or, in a LEFT join, is padded with NULLs when there is none. Append-only; the
    /// output keeps the probe side's time attribute.
    TemporalJoin {
        left: usize,
        right: usize,
        /// The columns that key the versions: the versioned side's primary key, and the
        /// probe side's columns equal to it.
        left_keys: Vec<usize>,
        right_keys: Vec<usize>,
        /// The probe side's time column.
        left_time: usize,
        /// The versioned side's event-time column (when each version starts).
        right_time: usize,
        /// `Inner` or `LeftOuter`.
        kind: JoinKind,
        /// Other conditions, over the joined row: a version that fails them is no match.
        filter: Option<PhysicalExprRef>,
        schema: SchemaRef,
    },
    /// Processing-time temporal join, a lookup join (`JOIN d FOR SYSTEM_TIME AS OF
    /// probe.proctime ON …`): each probe row, as it arrives, joins the rows of table `d`
    /// with its key, read whole and kept for `lookup.join.cache.ttl` (a LEFT join pads a
    /// row without any). The output keeps the probe side's row kinds.
    LookupJoin {
        left: usize,
        /// The table looked up.
        table: Arc<TableDef>,
        /// Conditions on the table's own rows (over its full schema).
        table_filter: Option<PhysicalExprRef>,
        /// Key columns of the probe side and of the table.
        left_keys: Vec<usize>,
        right_keys: Vec<usize>,
        /// `Inner` or `LeftOuter`.
        kind: JoinKind,
        /// Other conditions, over the joined row.
        filter: Option<PhysicalExprRef>,
        schema: SchemaRef,
    },
    /// `LIMIT fetch OFFSET skip` over an append-only input: rows `skip .. skip + fetch`
    /// in arrival order, in one subtask.
    Limit {
        input: usize,
        skip: usize,
        fetch: Option<usize>,
    },
    /// Literal rows (`VALUES (…), (…)`), read by a bounded source.
    Values { batch: arrow::array::RecordBatch },
    /// `ORDER BY` a rowtime ascending (then other columns): rows are kept until the
    /// watermark passes them and then emitted in order (Flink's temporal sort; late rows
    /// are dropped). On `PROCTIME()`, rows leave as they arrive (each batch sorted by the
    /// other columns). Runs as one subtask.
    TemporalSort {
        input: usize,
        /// Sort columns of the input with their direction; the first is the time.
        order: Vec<(usize, arrow::compute::SortOptions)>,
        processing_time: bool,
        schema: SchemaRef,
    },
    /// OVER aggregates (`agg(…) OVER (PARTITION BY … ORDER BY time ROWS|RANGE BETWEEN …
    /// PRECEDING AND CURRENT ROW)`): every input row once, with the aggregates over its
    /// frame appended (append-only). Rows are taken in time order once the watermark
    /// passes them (late rows dropped, as in Flink); on `PROCTIME()` as they arrive.
    OverAggregate {
        input: usize,
        /// Partition columns of the input (none: one subtask sees every row).
        partition: Vec<usize>,
        /// The time attribute rows are ordered by.
        time: usize,
        processing_time: bool,
        frame: OverFrame,
        aggregates: Vec<AggregateSpec>,
        /// The input's columns, then one per aggregate.
        schema: SchemaRef,
    },
    /// `MATCH_RECOGNIZE`: rows in time order per partition, one output row per match.
    MatchRecognize {
        input: usize,
        program: Arc<crate::match_recognize::MatchProgram>,
        /// Ordered by `PROCTIME()`: rows are taken as they arrive.
        processing_time: bool,
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

impl StreamPlan {
    /// The schema of the rows node `n` produces (its input's, for a sink).
    pub fn output_schema(&self, n: usize) -> SchemaRef {
        output_schema_in(&self.nodes, n)
    }

    /// Whether node `n` produces a changelog (rows with `-U`/`+U`/`-D` kinds), and if so
    /// the name of the operator that makes it one.
    pub fn updates(&self, n: usize) -> Option<&'static str> {
        updates_in(&self.nodes, n)
    }

    /// For a `SELECT … LIMIT n` shown to the user: `n`, the number of rows after which
    /// nothing more comes.
    pub fn shown_limit(&self) -> Option<usize> {
        match self.nodes.last()? {
            PlanNode::Collect { input, .. } => match &self.nodes[*input] {
                PlanNode::Limit { fetch, .. } => *fetch,
                _ => None,
            },
            _ => None,
        }
    }
}

/// [`StreamPlan::output_schema`] over a plan under construction.
pub fn output_schema_in(nodes: &[PlanNode], n: usize) -> SchemaRef {
    {
        match &nodes[n] {
            PlanNode::Scan { table, .. } => table.schema.clone(),
            PlanNode::Values { batch } => batch.schema(),
            PlanNode::Calc { schema, .. }
            | PlanNode::WindowAggregate { schema, .. }
            | PlanNode::SessionAggregate { schema, .. }
            | PlanNode::GroupAggregate { schema, .. }
            | PlanNode::TopN { schema, .. }
            | PlanNode::TemporalSort { schema, .. }
            | PlanNode::OverAggregate { schema, .. }
            | PlanNode::TemporalJoin { schema, .. }
            | PlanNode::LookupJoin { schema, .. }
            | PlanNode::Join { schema, .. }
            | PlanNode::Union { schema, .. }
            | PlanNode::Collect { schema, .. } => schema.clone(),
            PlanNode::MatchRecognize { program, .. } => program.schema.clone(),
            PlanNode::Sink { input, .. } | PlanNode::Limit { input, .. } => {
                output_schema_in(nodes, *input)
            }
        }
    }
}

/// The frame of an OVER aggregate: the rows up to the current one that it aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverFrame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`; `None`: `UNBOUNDED PRECEDING`.
    Rows(Option<u64>),
    /// `RANGE BETWEEN INTERVAL … PRECEDING AND CURRENT ROW`, the interval in milliseconds
    /// (`None`: `UNBOUNDED PRECEDING`); rows at the same time are peers and share a result.
    Range(Option<i64>),
}

impl fmt::Display for OverFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverFrame::Rows(None) => write!(f, "rows unbounded preceding"),
            OverFrame::Rows(Some(n)) => write!(f, "rows {n} preceding"),
            OverFrame::Range(None) => write!(f, "range unbounded preceding"),
            OverFrame::Range(Some(ms)) => write!(f, "range {ms} ms preceding"),
        }
    }
}

/// When the partitions of an append-only Top-N become final (see
/// [`PlanNode::TopN::final_at`]): when the watermark reaches the timestamp in `column` of a
/// partition's best row plus `offset_ms`; `once_per_key` remembers emitted partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalAt {
    pub column: usize,
    pub offset_ms: i64,
    pub once_per_key: bool,
}

/// The input column that column `col` of a Calc's output passes through unchanged, if it
/// does (not computed).
pub(crate) fn passed_through(steps: &[CalcStep], col: usize) -> Option<usize> {
    use datafusion::physical_expr::expressions::Column;
    let mut col = col;
    for step in steps.iter().rev() {
        match step {
            CalcStep::Project { exprs, .. } => col = exprs[col].downcast_ref::<Column>()?.index(),
            CalcStep::Unnest(u) if u.unnests(col) => return None,
            CalcStep::Unnest(u) => col = u.dependencies[col],
            CalcStep::Expand(e) => col = e.source(col)?,
            CalcStep::Filter(_) => {}
        }
    }
    Some(col)
}

/// Whether column `col` of node `n` is a table's rowtime (the column of its `WATERMARK
/// FOR`), directly or passed through projections, filters and unions.
pub fn is_rowtime(nodes: &[PlanNode], n: usize, col: usize) -> bool {
    match &nodes[n] {
        PlanNode::Scan { table, .. } => table
            .watermark
            .as_ref()
            .is_some_and(|(c, _)| table.schema.field(col).name() == c),
        PlanNode::Calc { input, steps, .. } => {
            passed_through(steps, col).is_some_and(|c| is_rowtime(nodes, *input, c))
        }
        PlanNode::Union { inputs, .. } => inputs.iter().all(|i| is_rowtime(nodes, *i, col)),
        // Sorted rows keep their time attribute (the watermark stays behind them).
        PlanNode::TemporalSort { input, .. } | PlanNode::Limit { input, .. } => {
            is_rowtime(nodes, *input, col)
        }
        // A temporal join keeps the probe side's time attribute.
        PlanNode::TemporalJoin { left, .. } => {
            col < output_schema_in(nodes, *left).fields().len() && is_rowtime(nodes, *left, col)
        }
        // An OVER aggregate keeps its input's columns in place (and their time attributes).
        PlanNode::OverAggregate { input, .. } => {
            col < output_schema_in(nodes, *input).fields().len() && is_rowtime(nodes, *input, col)
        }
        _ => false,
    }
}

/// [`StreamPlan::updates`] over a plan under construction.
pub fn updates_in(nodes: &[PlanNode], n: usize) -> Option<&'static str> {
    {
        match &nodes[n] {
            PlanNode::Join {
                kind: JoinKind::LeftOuter | JoinKind::RightOuter | JoinKind::FullOuter,
                ..
            } => Some("OuterJoin"),
            PlanNode::Join {
                kind: JoinKind::LeftAnti | JoinKind::RightAnti,
                ..
            } => Some("AntiJoin"),
            // An inner join of an updating input takes rows back too.
            PlanNode::Join { left, right, .. } => updates_in(nodes, *left)
                .or(updates_in(nodes, *right))
                .map(|_| "Join"),
            PlanNode::Scan { table, .. }
                if weir_common::changelog::is_changelog_source(&table.options) =>
            {
                Some("ChangelogSource")
            }
            PlanNode::Scan { .. }
            | PlanNode::Values { .. }
            | PlanNode::OverAggregate { .. }
            | PlanNode::MatchRecognize { .. }
            | PlanNode::TemporalJoin { .. }
            | PlanNode::WindowAggregate { .. }
            | PlanNode::SessionAggregate { .. } => None,
            PlanNode::GroupAggregate { .. } => Some("GroupAggregate"),
            PlanNode::TopN {
                final_at: Some(_), ..
            } => None,
            PlanNode::TopN { limit: 1, .. } => Some("Deduplicate"),
            PlanNode::TopN { .. } => Some("TopN"),
            PlanNode::Calc { input, .. }
            | PlanNode::Limit { input, .. }
            | PlanNode::TemporalSort { input, .. }
            | PlanNode::LookupJoin { left: input, .. }
            | PlanNode::Sink { input, .. }
            | PlanNode::Collect { input, .. } => updates_in(nodes, *input),
            PlanNode::Union { inputs, .. } => inputs.iter().find_map(|i| updates_in(nodes, *i)),
        }
    }
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
            CalcStep::Unnest(u) => {
                let columns: Vec<&str> = (0..u.schema.fields().len())
                    .filter(|c| u.unnests(*c))
                    .map(|c| u.schema.field(c).name().as_str())
                    .collect();
                write!(f, "unnest {}", columns.join(", "))
            }
            CalcStep::Expand(e) => {
                let sets: Vec<String> = e
                    .projections()
                    .map(|p| {
                        let items: Vec<String> = p.iter().map(|e| e.to_string()).collect();
                        format!("({})", items.join(", "))
                    })
                    .collect();
                write!(f, "expand {}", sets.join(", "))
            }
        }
    }
}

/// Whether column `col` of node `n` is the `window_end` of a window TVF, directly or
/// renamed through projections, filters, unions, joins and earlier window aggregates (whose
/// output keeps its window): grouping by it makes an aggregate a window aggregate.
pub fn is_window_end(nodes: &[PlanNode], n: usize, col: usize) -> bool {
    use datafusion::physical_expr::expressions::Column;
    match &nodes[n] {
        PlanNode::Calc { input, steps, .. } => {
            let mut col = col;
            // Whether the column was named `window_end` on its way up: the optimizer may
            // compute the bound under another name (a common subexpression shared with
            // `window_time`) and rename it above.
            let mut named = false;
            for step in steps.iter().rev() {
                let (f, source) = match step {
                    CalcStep::Project { exprs, schema } => (
                        schema.field(col),
                        exprs[col].downcast_ref::<Column>().map(|c| c.index()),
                    ),
                    CalcStep::Unnest(u) => (
                        u.schema.field(col),
                        (!u.unnests(col)).then(|| u.dependencies[col]),
                    ),
                    // A bound some grouping set leaves NULL is no window.
                    CalcStep::Expand(e) => match e.source(col) {
                        Some(c) => (e.schema.field(col), Some(c)),
                        None => return false,
                    },
                    CalcStep::Filter(_) => continue,
                };
                named |= f.name() == "window_end";
                match source {
                    Some(c) => col = c,
                    None => {
                        // Where a window TVF's rewrite computes its bounds (HOP and
                        // CUMULATE unnest a list of them).
                        return named
                            && matches!(f.data_type(), arrow::datatypes::DataType::Timestamp(..));
                    }
                }
            }
            is_window_end(nodes, *input, col)
        }
        PlanNode::WindowAggregate { window_end, .. } => col == *window_end,
        PlanNode::Union { inputs, .. } => inputs.iter().all(|i| is_window_end(nodes, *i, col)),
        PlanNode::Join {
            left, right, kind, ..
        } => {
            let left_width = output_schema_in(nodes, *left).fields().len();
            match kind {
                JoinKind::RightSemi | JoinKind::RightAnti => is_window_end(nodes, *right, col),
                JoinKind::Inner if col < left_width => is_window_end(nodes, *left, col),
                JoinKind::Inner => is_window_end(nodes, *right, col - left_width),
                JoinKind::LeftSemi | JoinKind::LeftAnti => is_window_end(nodes, *left, col),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether column `col` of node `n` derives from `PROCTIME()`: the window bounds of a
/// processing-time window do (through the window TVF's rewrite).
pub fn is_processing_time(nodes: &[PlanNode], n: usize, col: usize) -> bool {
    proctime_before(nodes, n, None, col)
}

/// [`is_processing_time`] for the value of `col` after the first `steps` steps of a Calc
/// (all of them when `None`).
fn proctime_before(nodes: &[PlanNode], n: usize, steps: Option<usize>, col: usize) -> bool {
    use datafusion::physical_expr::ScalarFunctionExpr;
    use datafusion::physical_expr::expressions::Column;
    fn mentions(e: &PhysicalExprRef, found: &mut Vec<usize>) -> bool {
        if e.downcast_ref::<ScalarFunctionExpr>()
            .is_some_and(|f| f.name() == crate::group_windows::PROCTIME)
        {
            return true;
        }
        if let Some(c) = e.downcast_ref::<Column>() {
            found.push(c.index());
        }
        e.children().into_iter().any(|c| mentions(c, found))
    }
    match &nodes[n] {
        PlanNode::Calc {
            input, steps: all, ..
        } => {
            let upto = steps.unwrap_or(all.len());
            for (i, step) in all[..upto].iter().enumerate().rev() {
                match step {
                    CalcStep::Project { exprs, .. } => {
                        let mut columns = Vec::new();
                        if mentions(&exprs[col], &mut columns) {
                            return true;
                        }
                        return columns
                            .into_iter()
                            .any(|c| proctime_before(nodes, n, Some(i), c));
                    }
                    // An unnested column derives from its list.
                    CalcStep::Unnest(u) => {
                        return proctime_before(nodes, n, Some(i), u.dependencies[col]);
                    }
                    // A column some grouping set leaves NULL is no time attribute.
                    CalcStep::Expand(e) => match e.source(col) {
                        Some(c) => return proctime_before(nodes, n, Some(i), c),
                        None => return false,
                    },
                    CalcStep::Filter(_) => {}
                }
            }
            proctime_before(nodes, *input, None, col)
        }
        PlanNode::Union { inputs, .. } => {
            inputs.iter().all(|i| proctime_before(nodes, *i, None, col))
        }
        // An OVER aggregate keeps its input's columns in place.
        PlanNode::OverAggregate { input, .. } => {
            col < output_schema_in(nodes, *input).fields().len()
                && proctime_before(nodes, *input, None, col)
        }
        // A computed column `p AS PROCTIME()`.
        PlanNode::Scan {
            computed: Some(exprs),
            ..
        } => mentions(&exprs[col], &mut Vec::new()),
        _ => false,
    }
}

/// Whether column `col` of node `n` is an event-time attribute: a table's `WATERMARK FOR`
/// column or a window bound, through projections, unions and joins.
pub fn is_time_attribute(nodes: &[PlanNode], n: usize, col: usize) -> bool {
    if is_window_end(nodes, n, col) {
        return true;
    }
    match &nodes[n] {
        PlanNode::Scan { .. } => is_rowtime(nodes, n, col),
        PlanNode::Calc { input, steps, .. } => {
            passed_through(steps, col).is_some_and(|c| is_time_attribute(nodes, *input, c))
        }
        PlanNode::Union { inputs, .. } => inputs.iter().all(|i| is_time_attribute(nodes, *i, col)),
        PlanNode::OverAggregate { input, .. } | PlanNode::TemporalJoin { left: input, .. } => {
            col < output_schema_in(nodes, *input).fields().len()
                && is_time_attribute(nodes, *input, col)
        }
        PlanNode::Join {
            left,
            right,
            kind: JoinKind::Inner,
            ..
        } => {
            let width = output_schema_in(nodes, *left).fields().len();
            if col < width {
                is_time_attribute(nodes, *left, col)
            } else {
                is_time_attribute(nodes, *right, col - width)
            }
        }
        _ => false,
    }
}
