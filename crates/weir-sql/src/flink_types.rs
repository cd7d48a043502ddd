//! Flink's result types where DataFusion's differ.
//!
//! - An integer literal that fits 32 bits is an `INT` (DataFusion: `BIGINT`), so
//!   `VALUES (1)`, `a + 1` over an `INT` column and `CASE … THEN 1` are `INT` as in Flink;
//!   an exact decimal literal's precision counts every digit written (`0.1`: `DECIMAL(2, 1)`).
//! - `SUM` and `AVG` of `TINYINT`/`SMALLINT`/`INT`/`BIGINT`/`FLOAT` keep the argument's
//!   type (`AVG` truncates toward zero); `SUM(DECIMAL(p, s))` is `DECIMAL(38, s)` and
//!   `AVG(DECIMAL(p, s))` is `DECIMAL(38, max(6, s))`, rounded half up.
//! - `ROW_NUMBER`, `RANK` and `DENSE_RANK` are `BIGINT` (DataFusion: unsigned).
//! - Aggregates of different casts of one column (`AVG(x)`, `AVG(CAST(x AS DOUBLE))`) are
//!   distinct columns (DataFusion names a cast after its operand, so both were `avg(x)`).
//! - Decimal division and `CAST(x AS STRING)` follow Flink through the functions of
//!   [`crate::flink_decimal`] and [`crate::flink_cast`].
//!
//! Literals and names are fixed on the AST before planning ([`int_literals`],
//! [`distinct_cast_names`]); result types on the logical plan DataFusion's SQL planner
//! gives ([`result_types`]), before it is optimized.

use std::ops::{ControlFlow, Range};
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::window_state::WindowAggState;
use datafusion::logical_expr::{
    Aggregate, Expr, ExprSchemable, LimitEffect, LogicalPlan, PartitionEvaluator, Projection,
    ReversedUDWF, Signature, Window, WindowFunctionDefinition, WindowUDF, WindowUDFImpl, cast,
};
use datafusion::physical_expr::PhysicalExpr;
use sqlparser::ast::{
    CastKind, Expr as SqlExpr, GroupByExpr, LimitClause, OrderByKind, Query, Select, Value,
    VisitMut, VisitorMut, WindowFrameBound, WindowType,
};

/// Aggregate functions whose arguments are named apart (see [`distinct_cast_names`]).
const AGGREGATES: &[&str] = &[
    "AVG",
    "COUNT",
    "FIRST_VALUE",
    "LAST_VALUE",
    "LISTAGG",
    "MAX",
    "MIN",
    "STDDEV",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "SUM",
    "VAR_POP",
    "VAR_SAMP",
    "VARIANCE",
];

/// A numeric literal typed by [`int_literals`]. The `::` form marks it: Flink SQL
/// has no `::` cast, so a user's own casts are never mistaken for one.
fn is_marked_literal(e: &SqlExpr) -> bool {
    matches!(e, SqlExpr::Cast { kind: CastKind::DoubleColon, expr, .. }
        if matches!(&**expr, SqlExpr::Value(v) if matches!(v.value, Value::Number(..))))
}

/// Undoes [`int_literals`] where SQL needs the literal itself: positions in `ORDER BY` /
/// `GROUP BY`, `LIMIT`/`OFFSET`/`FETCH` counts and window frame offsets.
fn unmark(e: &mut SqlExpr) {
    if is_marked_literal(e)
        && let SqlExpr::Cast { expr, .. } = e
    {
        *e = std::mem::replace(&mut **expr, SqlExpr::value(Value::Null));
    }
}

struct IntLiterals {
    /// Depth inside `INTERVAL …` (its value stays as written).
    in_interval: usize,
}

impl VisitorMut for IntLiterals {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
        if matches!(e, SqlExpr::Interval(_)) {
            self.in_interval += 1;
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
        match e {
            SqlExpr::Interval(_) => self.in_interval -= 1,
            SqlExpr::Value(v) if self.in_interval == 0 => {
                if let Value::Number(n, _) = &v.value
                    && let Some(data_type) = literal_type(n)
                {
                    *e = SqlExpr::Cast {
                        kind: CastKind::DoubleColon,
                        expr: Box::new(e.clone()),
                        data_type,
                        array: false,
                        format: None,
                    };
                }
            }
            SqlExpr::Function(f) => {
                if let Some(WindowType::WindowSpec(spec)) = &mut f.over {
                    unmark_frame(spec);
                }
                // The digits of ROUND/TRUNCATE stay a literal: the result type depends
                // on their value.
                let name = f.name.to_string().to_ascii_uppercase();
                if (name == "ROUND" || name == "TRUNCATE")
                    && let sqlparser::ast::FunctionArguments::List(list) = &mut f.args
                    && let Some(sqlparser::ast::FunctionArg::Unnamed(
                        sqlparser::ast::FunctionArgExpr::Expr(digits),
                    )) = list.args.get_mut(1)
                {
                    unmark(digits);
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
            exprs.iter_mut().for_each(unmark);
        }
        for w in &mut select.named_window {
            if let sqlparser::ast::NamedWindowExpr::WindowSpec(spec) = &mut w.1 {
                unmark_frame(spec);
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Some(order_by) = &mut query.order_by
            && let OrderByKind::Expressions(items) = &mut order_by.kind
        {
            items.iter_mut().for_each(|o| unmark(&mut o.expr));
        }
        match &mut query.limit_clause {
            Some(LimitClause::LimitOffset { limit, offset, .. }) => {
                limit.iter_mut().for_each(unmark);
                offset.iter_mut().for_each(|o| unmark(&mut o.value));
            }
            Some(LimitClause::OffsetCommaLimit { offset, limit }) => {
                unmark(offset);
                unmark(limit);
            }
            None => {}
        }
        if let Some(fetch) = &mut query.fetch {
            fetch.quantity.iter_mut().for_each(unmark);
        }
        ControlFlow::Continue(())
    }
}

/// Flink's (Calcite's) type of a numeric literal where DataFusion's differs: `INT` for an
/// integer that fits 32 bits, and for an exact decimal (`0.1`) a precision that counts
/// every digit written (`DECIMAL(2, 1)`; DataFusion: `DECIMAL(1, 1)`).
fn literal_type(n: &str) -> Option<sqlparser::ast::DataType> {
    use sqlparser::ast::{DataType as T, ExactNumberInfo};
    if n.parse::<i32>().is_ok() {
        return Some(T::Int(None));
    }
    let (whole, fraction) = n.split_once('.')?;
    let digits = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit())
            .then_some(s.len() as u64)
    };
    let (whole, fraction) = (digits(whole)?, digits(fraction)?);
    let precision = (whole + fraction).max(1);
    (precision <= 38).then_some(T::Decimal(ExactNumberInfo::PrecisionAndScale(
        precision,
        fraction as i64,
    )))
}

fn unmark_frame(spec: &mut sqlparser::ast::WindowSpec) {
    let Some(frame) = &mut spec.window_frame else {
        return;
    };
    for bound in std::iter::once(&mut frame.start_bound).chain(frame.end_bound.as_mut()) {
        if let WindowFrameBound::Preceding(Some(e)) | WindowFrameBound::Following(Some(e)) = bound {
            unmark(e);
        }
    }
}

/// Types integer literals that fit 32 bits as `INT`, as Flink does.
pub fn int_literals<V: VisitMut>(node: &mut V) {
    let _ = node.visit(&mut IntLiterals { in_interval: 0 });
}

/// `AGG(CAST(x AS T))` becomes `AGG(arrow_cast(x, 'T'))`: the same cast (DataFusion
/// simplifies it back), but a name of its own, so that `AVG(x)` and
/// `AVG(CAST(x AS DOUBLE))` can be selected together.
pub fn distinct_cast_names<V: VisitMut>(node: &mut V) {
    let _ = sqlparser::ast::visit_expressions_mut(node, |e| {
        if let SqlExpr::Function(f) = e
            && AGGREGATES.contains(&f.name.to_string().to_ascii_uppercase().as_str())
            && let sqlparser::ast::FunctionArguments::List(list) = &mut f.args
        {
            for arg in &mut list.args {
                let sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(a)) =
                    arg
                else {
                    continue;
                };
                if let SqlExpr::Cast {
                    kind: CastKind::Cast,
                    expr,
                    data_type,
                    array: false,
                    format: None,
                } = a
                    && let Ok(arrow_type) = crate::types::convert(data_type)
                    && arrow_type.to_string().parse::<DataType>().ok().as_ref() == Some(&arrow_type)
                {
                    let text = format!("arrow_cast({expr}, '{arrow_type}')");
                    if let Some(new) = crate::functions::parse_expr(&text) {
                        *a = new;
                    }
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Casts to Flink type names DataFusion does not know: `CAST(x AS BYTES)` and `CAST(x AS
/// VARBINARY)` become `CAST(x AS BYTEA)`; `CAST(x AS TIMESTAMP_LTZ(p))` becomes
/// `arrow_cast(x, 'Timestamp(unit, Some("UTC"))')`, Weir's `TIMESTAMP_LTZ(p)`.
pub fn flink_type_casts<V: VisitMut>(node: &mut V) {
    use sqlparser::ast::DataType as T;
    let _ = sqlparser::ast::visit_expressions_mut(node, |e| {
        if let SqlExpr::Cast {
            kind,
            data_type,
            expr,
            ..
        } = e
        {
            match data_type {
                T::Bytes(_) | T::Varbinary(_) => *data_type = T::Bytea,
                T::Custom(name, args) if name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ") => {
                    let precision = match args.as_slice() {
                        [] => Some(6),
                        [p] => p.parse::<u64>().ok(),
                        _ => None,
                    };
                    if let Some(p) = precision.filter(|p| *p <= 9) {
                        let target = DataType::Timestamp(
                            crate::types::unit_for_precision(Some(p)),
                            Some("UTC".into()),
                        );
                        let function = match kind {
                            CastKind::TryCast | CastKind::SafeCast => "arrow_try_cast",
                            _ => "arrow_cast",
                        };
                        if let Some(new) =
                            crate::functions::parse_expr(&format!("{function}({expr}, '{target}')"))
                        {
                            *e = new;
                        }
                    }
                }
                _ => {}
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Flink's type for `function(arg)` where DataFusion's differs: the type the argument is
/// cast to first (if any) and the result type.
fn flink_aggregate_type(function: &str, arg: &DataType) -> Option<(Option<DataType>, DataType)> {
    use DataType::*;
    match (function, arg) {
        ("sum", Int8 | Int16 | Int32 | Float32)
        | ("avg", Int8 | Int16 | Int32 | Int64 | Float32) => Some((None, arg.clone())),
        ("sum", Decimal128(p, s)) if *p < 38 => Some((None, Decimal128(38, *s))),
        // DataFusion's AVG truncates at scale + 4; computing at a scale of at least 7
        // leaves a digit below Flink's scale (at least 6) to round on.
        ("avg", Decimal128(_, s)) => {
            let scale = (*s).max(6);
            Some((Some(Decimal128(38, (*s).max(3))), Decimal128(38, scale)))
        }
        _ => None,
    }
}

/// Gives a planned query Flink's result types (see the module docs): decimal divisions and
/// casts to strings become Flink's functions; `SUM`/`AVG` compute as DataFusion's, a
/// projection above the aggregation casts their results.
/// `zone` is the session's `table.local-time-zone` ([`crate::local_time_zone`]).
pub fn result_types(plan: LogicalPlan, zone: &str) -> Result<LogicalPlan> {
    plan.transform_up(|node| {
        let node = flink_expressions(node, zone)?.recompute_schema()?;
        match node {
            LogicalPlan::Aggregate(agg) => aggregate(agg),
            LogicalPlan::Window(w) => window(w),
            other => Ok(Transformed::no(other)),
        }
    })
    .map(|t| t.data)
}

/// Flink's semantics for expressions: `l / r` with a decimal side is Flink's decimal
/// division ([`crate::flink_decimal`]), `CAST(x AS STRING)` Flink's text
/// ([`crate::flink_cast`]); casts between instants and local values and `DATE_FORMAT`
/// of an instant use the session zone ([`zoned`]).
fn flink_expressions(node: LogicalPlan, zone: &str) -> Result<LogicalPlan> {
    if matches!(
        node,
        LogicalPlan::Values(_) | LogicalPlan::TableScan(_) | LogicalPlan::EmptyRelation(_)
    ) {
        return Ok(node);
    }
    let mut schema = datafusion::common::DFSchema::empty();
    for input in node.inputs() {
        schema.merge(input.schema());
    }
    let rewritten = node.map_expressions(|e| {
        let e = if crate::local_time_zone::is_utc(zone) {
            e
        } else {
            e.transform_up(|e| zoned(e, &schema, zone))?.data
        };
        e.transform_up(|e| match &e {
            Expr::BinaryExpr(b) if b.op == datafusion::logical_expr::Operator::Divide => {
                let (l, r) = (b.left.get_type(&schema)?, b.right.get_type(&schema)?);
                if crate::flink_decimal::division_type(&l, &r).is_none() {
                    return Ok(Transformed::no(e));
                }
                let Expr::BinaryExpr(b) = e else {
                    unreachable!("matched above")
                };
                Ok(Transformed::yes(
                    crate::flink_decimal::DIVIDE.call(vec![*b.left, *b.right]),
                ))
            }
            Expr::Cast(c)
                if matches!(c.field.data_type(), DataType::Utf8 | DataType::Utf8View)
                    && crate::flink_cast::needs_flink_text(&c.expr.get_type(&schema)?) =>
            {
                let Expr::Cast(c) = e else {
                    unreachable!("matched above")
                };
                Ok(Transformed::yes(
                    crate::flink_cast::TO_STRING.call(vec![*c.expr]),
                ))
            }
            _ => Ok(Transformed::no(e)),
        })
    })?;
    Ok(rewritten.data)
}

/// `e` with the session zone (not UTC) applied where instants meet local values: casts
/// (`CAST(ltz AS STRING|TIMESTAMP|DATE)`, `CAST(text|timestamp AS TIMESTAMP_LTZ)`, also
/// written as `arrow_cast`) and `to_char` (`DATE_FORMAT`) of an instant.
fn zoned(e: Expr, schema: &datafusion::common::DFSchema, zone: &str) -> Result<Transformed<Expr>> {
    use crate::local_time_zone::{local, zoned_cast};
    use datafusion::logical_expr::{Cast, TryCast};
    match e {
        Expr::Cast(Cast { expr, field }) => {
            let from = expr.get_type(schema)?;
            Ok(
                match zoned_cast(*expr.clone(), &from, field.data_type(), zone) {
                    Some(new) => Transformed::yes(new),
                    None => Transformed::no(Expr::Cast(Cast { expr, field })),
                },
            )
        }
        Expr::TryCast(TryCast { expr, field }) => {
            let from = expr.get_type(schema)?;
            Ok(
                match zoned_cast(*expr.clone(), &from, field.data_type(), zone) {
                    // The inner cast (a relabel or a local reading) cannot fail where
                    // the outer one would not.
                    Some(Expr::Cast(Cast { expr: inner, .. })) => Transformed::yes(Expr::TryCast(
                        TryCast::new(inner, field.data_type().clone()),
                    )),
                    _ => Transformed::no(Expr::TryCast(TryCast { expr, field })),
                },
            )
        }
        Expr::ScalarFunction(f)
            if matches!(f.func.name(), "arrow_cast" | "arrow_try_cast") && f.args.len() == 2 =>
        {
            let target = match &f.args[1] {
                Expr::Literal(datafusion::common::ScalarValue::Utf8(Some(t)), _) => {
                    t.parse::<DataType>().ok()
                }
                _ => None,
            };
            let Some(target @ DataType::Timestamp(_, Some(_))) = target else {
                return Ok(Transformed::no(Expr::ScalarFunction(f)));
            };
            let arg = f.args[0].clone();
            let from = arg.get_type(schema)?;
            let Some(new) = zoned_cast(arg, &from, &target, zone) else {
                return Ok(Transformed::no(Expr::ScalarFunction(f)));
            };
            Ok(Transformed::yes(if f.func.name() == "arrow_try_cast" {
                match new {
                    Expr::Cast(Cast { expr, .. }) => Expr::TryCast(TryCast::new(expr, target)),
                    other => other,
                }
            } else {
                new
            }))
        }
        Expr::ScalarFunction(mut f) if f.func.name() == "to_char" && !f.args.is_empty() => {
            if let DataType::Timestamp(unit, Some(_)) = f.args[0].get_type(schema)? {
                f.args[0] = local(f.args[0].clone(), unit, zone);
                return Ok(Transformed::yes(Expr::ScalarFunction(f)));
            }
            Ok(Transformed::no(Expr::ScalarFunction(f)))
        }
        other => Ok(Transformed::no(other)),
    }
}

fn aggregate(agg: Aggregate) -> Result<Transformed<LogicalPlan>> {
    let input = agg.input.schema().clone();
    let mut casts: Vec<Option<DataType>> = Vec::with_capacity(agg.aggr_expr.len());
    let mut aggr_expr = Vec::with_capacity(agg.aggr_expr.len());
    for e in &agg.aggr_expr {
        let mut e = e.clone();
        let mut target = None;
        let f = match &mut e {
            Expr::Alias(a) => match a.expr.as_mut() {
                Expr::AggregateFunction(f) => Some(f),
                _ => None,
            },
            Expr::AggregateFunction(f) => Some(f),
            _ => None,
        };
        if let Some(AggregateFunction { func, .. }) = &f
            && func.name() == "grouping"
        {
            // Flink's GROUPING and GROUPING_ID are BIGINT (DataFusion's INT).
            target = Some(DataType::Int64);
        } else if let Some(AggregateFunction { func, params }) = f {
            target = flink_argument(func.name(), &mut params.args, &input)?;
        }
        casts.push(target);
        aggr_expr.push(e);
    }
    if casts.iter().all(Option::is_none) {
        return Ok(Transformed::no(LogicalPlan::Aggregate(agg)));
    }
    let original = agg.schema.clone();
    let new = Aggregate::try_new(agg.input, agg.group_expr, aggr_expr)?;
    // A cast of the argument does not change the aggregate's name (DataFusion names a cast
    // after its operand), so the columns above still resolve.
    debug_assert_eq!(new.schema.field_names(), original.field_names());
    cast_results(&original, &casts, LogicalPlan::Aggregate(new))
}

/// For an aggregate `function` of one argument whose result type Flink's differs from
/// DataFusion's ([`flink_aggregate_type`]): casts the argument where it must be, and gives
/// the type to cast the result to.
fn flink_argument(
    function: &str,
    args: &mut [Expr],
    input: &datafusion::common::DFSchema,
) -> Result<Option<DataType>> {
    let [arg] = args else {
        return Ok(None);
    };
    let Some((arg_cast, result)) = flink_aggregate_type(function, &arg.get_type(input)?) else {
        return Ok(None);
    };
    if let Some(t) = arg_cast {
        *arg = cast(arg.clone(), t);
    }
    Ok(Some(result))
}

/// `SUM`/`AVG` OVER windows with Flink's result types, as [`aggregate`] does for groups.
fn window(w: Window) -> Result<Transformed<LogicalPlan>> {
    let input = w.input.schema().clone();
    let mut casts: Vec<Option<DataType>> = Vec::with_capacity(w.window_expr.len());
    let mut window_expr = Vec::with_capacity(w.window_expr.len());
    for e in &w.window_expr {
        let mut e = e.clone();
        let mut target = None;
        if let Expr::WindowFunction(f) = &mut e
            && let WindowFunctionDefinition::AggregateUDF(func) = &f.fun
        {
            target = flink_argument(func.name(), &mut f.params.args, &input)?;
        }
        casts.push(target);
        window_expr.push(e);
    }
    if casts.iter().all(Option::is_none) {
        return Ok(Transformed::no(LogicalPlan::Window(w)));
    }
    let original = w.schema.clone();
    let new = Window::try_new(window_expr, w.input)?;
    debug_assert_eq!(new.schema.field_names(), original.field_names());
    cast_results(&original, &casts, LogicalPlan::Window(new))
}

/// A projection over `plan` (whose schema is `original`'s) that casts its last columns,
/// one per entry of `casts`, to the given types.
fn cast_results(
    original: &datafusion::common::DFSchemaRef,
    casts: &[Option<DataType>],
    plan: LogicalPlan,
) -> Result<Transformed<LogicalPlan>> {
    let first = original.fields().len() - casts.len();
    let exprs = original
        .iter()
        .enumerate()
        // DataFusion resolves GROUPING() from the aggregate's `__grouping_id` and leaves
        // that column out above the aggregate.
        .filter(|(_, (_, field))| field.name() != Aggregate::INTERNAL_GROUPING_ID)
        .map(|(i, (qualifier, field))| {
            let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
            match i.checked_sub(first).and_then(|j| casts[j].clone()) {
                Some(t) if field.data_type() != &t => {
                    cast(column, t).alias_qualified(qualifier.cloned(), field.name())
                }
                _ => column,
            }
        })
        .collect();
    let projection = Projection::try_new(exprs, Arc::new(plan))?;
    Ok(Transformed::yes(LogicalPlan::Projection(projection)))
}

/// `ROW_NUMBER`, `RANK` or `DENSE_RANK` returning `BIGINT`, as in Flink: DataFusion's
/// function with its result cast.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BigintRanking {
    inner: WindowUDF,
}

impl BigintRanking {
    /// Flink-typed versions of DataFusion's ranking functions, to register in a session.
    pub fn all() -> Vec<WindowUDF> {
        use datafusion::functions_window::{rank, row_number};
        [
            row_number::row_number_udwf(),
            rank::rank_udwf(),
            rank::dense_rank_udwf(),
        ]
        .into_iter()
        .map(|inner| {
            WindowUDF::new_from_impl(BigintRanking {
                inner: inner.as_ref().clone(),
            })
        })
        .collect()
    }
}

impl WindowUDFImpl for BigintRanking {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn partition_evaluator(
        &self,
        args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(BigintEvaluator(
            self.inner.partition_evaluator_factory(args)?,
        )))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let field = self.inner.field(args)?;
        Ok(Arc::new(
            field.as_ref().clone().with_data_type(DataType::Int64),
        ))
    }

    fn sort_options(&self) -> Option<arrow::compute::SortOptions> {
        self.inner.sort_options()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn reverse_expr(&self) -> ReversedUDWF {
        match self.inner.reverse_expr() {
            ReversedUDWF::Identical => ReversedUDWF::Identical,
            _ => ReversedUDWF::NotSupported,
        }
    }

    fn limit_effect(&self, args: &[Arc<dyn PhysicalExpr>]) -> LimitEffect {
        self.inner.inner().limit_effect(args)
    }
}

#[derive(Debug)]
struct BigintEvaluator(Box<dyn PartitionEvaluator>);

fn to_bigint(a: ArrayRef) -> Result<ArrayRef> {
    Ok(arrow::compute::cast(&a, &DataType::Int64)?)
}

impl PartitionEvaluator for BigintEvaluator {
    fn memoize(&mut self, state: &mut WindowAggState) -> Result<()> {
        self.0.memoize(state)
    }

    fn get_range(&self, idx: usize, n_rows: usize) -> Result<Range<usize>> {
        self.0.get_range(idx, n_rows)
    }

    fn is_causal(&self) -> bool {
        self.0.is_causal()
    }

    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        to_bigint(self.0.evaluate_all(values, num_rows)?)
    }

    fn evaluate(&mut self, values: &[ArrayRef], range: &Range<usize>) -> Result<ScalarValue> {
        self.0.evaluate(values, range)?.cast_to(&DataType::Int64)
    }

    fn evaluate_all_with_rank(
        &self,
        num_rows: usize,
        ranks_in_partition: &[Range<usize>],
    ) -> Result<ArrayRef> {
        to_bigint(
            self.0
                .evaluate_all_with_rank(num_rows, ranks_in_partition)?,
        )
    }

    fn supports_bounded_execution(&self) -> bool {
        self.0.supports_bounded_execution()
    }

    fn uses_window_frame(&self) -> bool {
        self.0.uses_window_frame()
    }

    fn include_rank(&self) -> bool {
        self.0.include_rank()
    }
}
