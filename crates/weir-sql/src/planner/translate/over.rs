//! OVER aggregates: `agg(…) OVER (PARTITION BY … ORDER BY time [ROWS|RANGE] BETWEEN …
//! PRECEDING AND CURRENT ROW)`, as Flink's streaming planner runs them.

use super::*;
use crate::plan::{AggregateSpec, OverFrame};
use datafusion::logical_expr::expr::{AggregateFunction, WindowFunction};
use datafusion::logical_expr::{
    WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
};

/// Whether a Filter over this window is a filter over OVER aggregates, not a Top-N (a
/// filter on a ranking function's rank).
pub(super) fn aggregates_only(w: &datafusion::logical_expr::Window) -> bool {
    w.window_expr.iter().all(|e| {
        matches!(e.clone().unalias(), Expr::WindowFunction(f)
            if matches!(&f.fun, WindowFunctionDefinition::AggregateUDF(_))
                || f.fun.name() == "lag")
    })
}

/// A window function as the aggregate a streaming OVER window runs: aggregates as they
/// are, `LAG` and `ROW_NUMBER` as Weir's aggregates ([`crate::over_functions`]).
fn as_aggregate(f: &WindowFunction) -> Result<Expr> {
    let p = &f.params;
    match &f.fun {
        WindowFunctionDefinition::AggregateUDF(udf) => {
            Ok(Expr::AggregateFunction(AggregateFunction::new_udf(
                udf.clone(),
                p.args.clone(),
                p.distinct,
                p.filter.clone(),
                Vec::new(),
                p.null_treatment,
            )))
        }
        WindowFunctionDefinition::WindowUDF(w) if w.name() == "lag" => {
            Ok(Expr::AggregateFunction(AggregateFunction::new_udf(
                Arc::new(crate::over_functions::lag()),
                p.args.clone(),
                false,
                None,
                Vec::new(),
                None,
            )))
        }
        WindowFunctionDefinition::WindowUDF(w) if w.name() == "row_number" => {
            Ok(crate::over_functions::row_number())
        }
        other => Err(refused(format!(
            "{}() OVER (…){}",
            other.name().to_ascii_uppercase(),
            match other.name() {
                "rank" | "dense_rank" => " without a filter on its rank",
                _ => "",
            }
        ))),
    }
}

/// The error for an OVER window streaming mode cannot run.
fn refused(what: impl std::fmt::Display) -> Error {
    Error::plan(format!(
        "{what}: in streaming mode, OVER windows are aggregates over `PARTITION BY … ORDER BY \
         <time attribute> [ROWS|RANGE] BETWEEN … PRECEDING AND CURRENT ROW` (as in Flink)"
    ))
}

/// One window of a `Window` node: its `PARTITION BY`, `ORDER BY` and frame.
type Spec<'a> = (
    &'a [Expr],
    &'a [datafusion::logical_expr::SortExpr],
    &'a WindowFrame,
);

impl Planner {
    /// A `Window` of aggregate functions as [`PlanNode::OverAggregate`]s, one per distinct
    /// window (each appends its aggregates to the rows; a projection puts the columns in
    /// the plan's order when there are several).
    pub(super) fn translate_over(
        &self,
        w: &datafusion::logical_expr::Window,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<(usize, Vec<CalcStep>)> {
        let functions: Vec<WindowFunction> = w
            .window_expr
            .iter()
            .map(|e| match e.clone().unalias() {
                Expr::WindowFunction(f) => Ok(*f),
                other => Err(Error::internal(format!("not a window function: {other}"))),
            })
            .collect::<Result<_>>()?;
        // ROW_NUMBER counts rows, whatever the frame (as in Flink, where its window is
        // `ROWS UNBOUNDED PRECEDING`).
        let rows = WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::Preceding(datafusion::common::ScalarValue::UInt64(None)),
            WindowFrameBound::CurrentRow,
        );
        let mut windows: Vec<(Spec<'_>, Vec<usize>)> = Vec::new();
        for (i, f) in functions.iter().enumerate() {
            let p = &f.params;
            let frame = match f.fun.name() {
                "row_number" => &rows,
                _ => &p.window_frame,
            };
            let spec = (p.partition_by.as_slice(), p.order_by.as_slice(), frame);
            match windows.iter_mut().find(|(s, _)| *s == spec) {
                Some((_, members)) => members.push(i),
                None => windows.push((spec, vec![i])),
            }
        }
        let mut node = self.translate_into_node(&w.input, nodes)?;
        let width = w.input.schema().fields().len();
        let mut fields: Vec<Field> = w
            .input
            .schema()
            .as_arrow()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        // Where each function's column ends up among the stacked nodes' columns.
        let mut position = vec![0; functions.len()];
        for (spec, members) in &windows {
            for m in members {
                position[*m] = fields.len();
                fields.push(w.schema.as_arrow().field(width + m).as_ref().clone());
            }
            let chosen: Vec<&WindowFunction> = members.iter().map(|m| &functions[*m]).collect();
            let schema = Arc::new(Schema::new(fields.clone()));
            node = self.over_node(w, node, *spec, &chosen, schema, nodes)?;
        }
        if windows.len() == 1 {
            return Ok((node, Vec::new()));
        }
        let exprs = (0..width)
            .chain(position)
            .map(|c| Arc::new(Column::new(fields[c].name(), c)) as PhysicalExprRef)
            .collect();
        Ok((
            node,
            vec![CalcStep::Project {
                exprs,
                schema: Arc::new(w.schema.as_arrow().clone()),
            }],
        ))
    }

    /// One OVER aggregate node: `functions` over window `spec`, appended to the rows of
    /// `input` (whose first columns are the `Window`'s input).
    fn over_node(
        &self,
        w: &datafusion::logical_expr::Window,
        input: usize,
        (partition_by, order_by, frame): Spec<'_>,
        functions: &[&WindowFunction],
        schema: SchemaRef,
        nodes: &mut Vec<PlanNode>,
    ) -> Result<usize> {
        let in_schema = w.input.schema();
        let props = datafusion::logical_expr::execution_props::ExecutionProps::new();
        let mut aggregates = Vec::new();
        for f in functions {
            #[allow(deprecated)]
            let (function, filter, _) =
                datafusion::physical_planner::create_aggregate_expr_and_maybe_filter(
                    &as_aggregate(f)?,
                    in_schema,
                    in_schema.as_arrow(),
                    &props,
                )
                .map_err(plan_error)?;
            aggregates.push(AggregateSpec { function, filter });
        }
        let column = |e: &Expr, what: &str| -> Result<usize> {
            match e {
                Expr::Column(c) => Ok(in_schema.index_of_column(c)?),
                other => Err(Error::plan(format!(
                    "{what} {other}: in streaming mode, use columns (compute expressions in a subquery)"
                ))),
            }
        };
        let partition = partition_by
            .iter()
            .map(|e| column(e, "PARTITION BY"))
            .collect::<Result<Vec<_>>>()?;
        let [order] = order_by else {
            return Err(refused(match order_by.len() {
                0 => "an OVER window without ORDER BY".to_string(),
                _ => format!("ORDER BY {} columns in an OVER window", order_by.len()),
            }));
        };
        let time = column(&order.expr, "ORDER BY")?;
        let processing_time = crate::plan::is_processing_time(nodes, input, time);
        if !order.asc || !(processing_time || crate::plan::is_time_attribute(nodes, input, time)) {
            return Err(Error::plan(format!(
                "OVER windows' ordering in stream mode must be defined on a time attribute \
                 ascending (ORDER BY {order} is not): a rowtime with a WATERMARK or PROCTIME()"
            )));
        }
        if let Some(producer) = crate::plan::updates_in(nodes, input) {
            return Err(Error::plan(format!(
                "OVER aggregates over an updating input ({producer}) are not supported in \
                 streaming mode (as in Flink)"
            )));
        }
        let frame = over_frame(frame, processing_time)?;
        let bounded = matches!(frame, OverFrame::Rows(Some(_)) | OverFrame::Range(Some(_)));
        for (a, f) in aggregates.iter().zip(functions) {
            let retracts = a
                .function
                .create_sliding_accumulator()
                .map(|a| a.supports_retract_batch())
                .unwrap_or(false);
            if bounded && !retracts {
                return Err(Error::plan(format!(
                    "{}: this aggregate cannot take back rows that leave a bounded frame; \
                     use UNBOUNDED PRECEDING",
                    f.fun.name().to_ascii_uppercase()
                )));
            }
        }
        nodes.push(PlanNode::OverAggregate {
            input,
            partition,
            time,
            processing_time,
            frame,
            aggregates,
            schema,
        });
        Ok(nodes.len() - 1)
    }
}

/// The frame of an OVER window: from some row before to the current one.
fn over_frame(frame: &WindowFrame, processing_time: bool) -> Result<OverFrame> {
    if !matches!(frame.end_bound, WindowFrameBound::CurrentRow) {
        return Err(refused(format!(
            "a frame ending at {} (not CURRENT ROW)",
            frame.end_bound
        )));
    }
    let preceding = match &frame.start_bound {
        WindowFrameBound::Preceding(v) if v.is_null() => None,
        WindowFrameBound::Preceding(v) => Some(v),
        WindowFrameBound::CurrentRow => {
            return Ok(match frame.units {
                WindowFrameUnits::Rows => OverFrame::Rows(Some(0)),
                _ => OverFrame::Range(Some(0)),
            });
        }
        WindowFrameBound::Following(_) => {
            return Err(refused("a frame starting at a FOLLOWING row"));
        }
    };
    match frame.units {
        WindowFrameUnits::Rows => {
            let n = match preceding {
                None => None,
                Some(v) => match v.cast_to(&DataType::UInt64) {
                    Ok(datafusion::common::ScalarValue::UInt64(Some(n))) => Some(n),
                    _ => return Err(refused(format!("ROWS BETWEEN {v} PRECEDING"))),
                },
            };
            Ok(OverFrame::Rows(n))
        }
        // Flink runs an unbounded RANGE over processing time as it comes (rows arriving
        // in one millisecond are not peers there).
        WindowFrameUnits::Range if preceding.is_none() && processing_time => {
            Ok(OverFrame::Rows(None))
        }
        WindowFrameUnits::Range => match preceding {
            None => Ok(OverFrame::Range(None)),
            Some(v) => match crate::group_windows::interval_millis(v) {
                Some(ms) if ms >= 0 => Ok(OverFrame::Range(Some(ms))),
                _ => Err(refused(format!(
                    "RANGE BETWEEN {v} PRECEDING (the range over a time is a day-time interval)"
                ))),
            },
        },
        WindowFrameUnits::Groups => Err(refused("a GROUPS frame")),
    }
}
