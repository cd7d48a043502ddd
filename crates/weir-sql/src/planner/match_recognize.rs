//! Planning `MATCH_RECOGNIZE`. DataFusion does not plan it, so before the query goes to
//! DataFusion each `… MATCH_RECOGNIZE (…)` table factor is compiled into a
//! [`MatchProgram`] and replaced by a placeholder table ([`MatchTable`]) with the clause's
//! output columns; the rest of the query plans around it, and the translation of a scan of
//! the placeholder plans the clause's input and adds the match node over it.
//!
//! Conditions and measures are planned by DataFusion too: each navigation (`LAST(A.x, n)`, `A.x` of another variable, `SUM(A.x)`, `MATCH_ROWTIME()`) becomes an
//! extra column `__nav_i` of the row the expression is evaluated on.

use super::*;
use crate::match_recognize::{MatchProgram, Nav, NavExpr, Skip, pattern};
use sqlparser::ast::{
    AfterMatchSkip, Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident,
    RowsPerMatch, TableFactor, Value, VisitMut, VisitorMut,
};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The symbol `WITHIN INTERVAL …` is carried as through the parser (see
/// [`crate::parser`]): `DEFINE __weir_within AS INTERVAL …`.
pub const WITHIN_SYMBOL: &str = "__weir_within";

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The placeholder of a `MATCH_RECOGNIZE` clause: its output columns, and what the
/// streaming translation needs (the input's plan and the compiled program).
#[derive(Debug)]
pub struct MatchTable {
    pub input: LogicalPlan,
    pub program: Arc<MatchProgram>,
}

#[async_trait]
impl TableProvider for MatchTable {
    fn schema(&self) -> SchemaRef {
        self.program.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    /// Batch mode: the clause over its whole input ([`crate::match_recognize::batch`]).
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _: &[Expr],
        _: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let input = state.create_physical_plan(&self.input).await?;
        Ok(Arc::new(crate::match_recognize::batch::MatchExec::try_new(
            input,
            self.program.clone(),
            projection,
        )?))
    }
}

/// Takes the `MATCH_RECOGNIZE` factors out of a query, leaving placeholders.
struct Extract {
    found: Vec<(String, TableFactor)>,
    error: Option<Error>,
}

impl VisitorMut for Extract {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::MatchRecognize { alias, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let name = format!("__weir_match_{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let text = match alias {
            Some(a) => format!("SELECT * FROM {name} {a}"),
            None => format!("SELECT * FROM {name}"),
        };
        let placeholder = match placeholder_factor(&text) {
            Ok(f) => f,
            Err(e) => {
                self.error = Some(e);
                return ControlFlow::Break(());
            }
        };
        let original = std::mem::replace(factor, placeholder);
        self.found.push((name, original));
        ControlFlow::Continue(())
    }
}

fn placeholder_factor(text: &str) -> Result<TableFactor> {
    let mut stmts = crate::parser::parse_script(text)?;
    if let Some(WeirStatement::Select(q)) = stmts.pop().map(|s| s.statement)
        && let sqlparser::ast::SetExpr::Select(s) = *q.body
        && let Some(t) = s.from.into_iter().next()
    {
        return Ok(t.relation);
    }
    Err(Error::internal(format!("cannot plan '{text}'")))
}

/// A navigation found in an expression; aggregates are planned after the walk.
enum Found {
    Ready(Nav),
    Aggregate {
        var: Option<usize>,
        call: Box<SqlExpr>,
    },
}

/// Replaces navigations in `DEFINE` conditions (`defining`: the variable) and measures
/// (`None`) with `__nav_i` columns.
struct Navigations<'a> {
    variables: &'a [String],
    columns: &'a Schema,
    time: usize,
    defining: Option<usize>,
    is_aggregate: &'a dyn Fn(&str) -> bool,
    found: Vec<Found>,
    error: Option<Error>,
}

impl Navigations<'_> {
    fn var(&self, name: &str) -> Option<usize> {
        self.variables.iter().position(|v| v == name).or_else(|| {
            self.variables
                .iter()
                .position(|v| v.eq_ignore_ascii_case(name))
        })
    }

    fn column(&self, name: &str) -> Result<usize> {
        self.columns
            .fields()
            .iter()
            .position(|f| f.name() == name)
            .or_else(|| {
                self.columns
                    .fields()
                    .iter()
                    .position(|f| f.name().eq_ignore_ascii_case(name))
            })
            .ok_or_else(|| {
                Error::plan(format!(
                    "MATCH_RECOGNIZE: no column '{name}' in the input (columns: {})",
                    self.columns
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }

    /// `V.col` or `col` → (variable, column).
    fn reference(&self, e: &SqlExpr) -> Result<(Option<usize>, usize)> {
        match e {
            SqlExpr::Identifier(c) => Ok((None, self.column(&c.value)?)),
            SqlExpr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let var = self.var(&parts[0].value).ok_or_else(|| {
                    Error::plan(format!(
                        "MATCH_RECOGNIZE: '{}' is not a pattern variable",
                        parts[0].value
                    ))
                })?;
                Ok((Some(var), self.column(&parts[1].value)?))
            }
            other => Err(Error::plan(format!(
                "MATCH_RECOGNIZE: expected a column (V.col or col) in a navigation, found '{other}'"
            ))),
        }
    }

    fn add(&mut self, nav: Found) -> SqlExpr {
        let i = match &nav {
            Found::Ready(n) => self
                .found
                .iter()
                .position(|f| matches!(f, Found::Ready(m) if m == n)),
            Found::Aggregate { .. } => None,
        };
        let i = i.unwrap_or_else(|| {
            self.found.push(nav);
            self.found.len() - 1
        });
        SqlExpr::Identifier(Ident::new(format!("__nav_{i}")))
    }

    fn replace(&mut self, e: &SqlExpr) -> Result<Option<SqlExpr>> {
        match e {
            SqlExpr::Function(f) => {
                let name = f.name.to_string().to_ascii_uppercase();
                let args: Vec<&SqlExpr> = match &f.args {
                    FunctionArguments::List(list) => list
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                let offset = |default: usize| -> Result<usize> {
                    match args.get(1) {
                        None => Ok(default),
                        Some(SqlExpr::Value(v)) => match &v.value {
                            Value::Number(n, _) => n.parse().map_err(|_| {
                                Error::plan(format!(
                                    "{name}: the offset must be a non-negative integer"
                                ))
                            }),
                            _ => Err(Error::plan(format!(
                                "{name}: the offset must be a literal integer"
                            ))),
                        },
                        Some(other) => Err(Error::plan(format!(
                            "{name}: the offset must be a literal integer, found '{other}'"
                        ))),
                    }
                };
                let first = || {
                    args.first().copied().ok_or_else(|| {
                        Error::plan(format!("MATCH_RECOGNIZE: {name} needs a column"))
                    })
                };
                let nav = match name.as_str() {
                    // Flink runs `PREV(x, 0)` only (what `A.x` means); physical offsets it
                    // refuses.
                    "PREV" if offset(1)? != 0 => {
                        return Err(Error::plan(
                            "MATCH_RECOGNIZE: Flink does not support physical offsets within partition \
                             (PREV(x) with an offset); use LAST(V.x, n) for the n-th last row of a variable",
                        ));
                    }
                    "PREV" => {
                        let arg = first()?.clone();
                        return Ok(Some(self.replace(&arg)?.unwrap_or(arg)));
                    }
                    "LAST" | "FIRST" => {
                        let (var, column) = self.reference(first()?)?;
                        let offset = offset(0)?;
                        Found::Ready(match name.as_str() {
                            "LAST" => Nav::Last {
                                var,
                                column,
                                offset,
                            },
                            _ => Nav::First {
                                var,
                                column,
                                offset,
                            },
                        })
                    }
                    "NEXT" => {
                        return Err(Error::plan(
                            "MATCH_RECOGNIZE: NEXT is not supported (as in Flink); use PREV",
                        ));
                    }
                    "MATCH_ROWTIME" => Found::Ready(Nav::Last {
                        var: None,
                        column: self.time,
                        offset: 0,
                    }),
                    _ if (self.is_aggregate)(&name) => {
                        let mut call = e.clone();
                        let mut vars = std::collections::BTreeSet::new();
                        let mut error = None;
                        let _ = sqlparser::ast::visit_expressions_mut(&mut call, |x| {
                            if let SqlExpr::CompoundIdentifier(parts) = x
                                && parts.len() == 2
                            {
                                match self.var(&parts[0].value) {
                                    Some(v) => {
                                        vars.insert(v);
                                        *x = SqlExpr::Identifier(parts[1].clone());
                                    }
                                    None => {
                                        error = Some(Error::plan(format!(
                                            "MATCH_RECOGNIZE: '{}' is not a pattern variable",
                                            parts[0].value
                                        )))
                                    }
                                }
                            }
                            ControlFlow::<()>::Continue(())
                        });
                        if let Some(e) = error {
                            return Err(e);
                        }
                        if vars.len() > 1 {
                            return Err(Error::plan(format!(
                                "MATCH_RECOGNIZE: an aggregate reads the rows of one variable at most: '{e}'"
                            )));
                        }
                        Found::Aggregate {
                            var: vars.into_iter().next(),
                            call: Box::new(call),
                        }
                    }
                    _ => return Ok(None),
                };
                Ok(Some(self.add(nav)))
            }
            SqlExpr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let Some(var) = self.var(&parts[0].value) else {
                    return Ok(None);
                };
                let column = self.column(&parts[1].value)?;
                if self.defining == Some(var) {
                    return Ok(Some(SqlExpr::Identifier(parts[1].clone())));
                }
                Ok(Some(self.add(Found::Ready(Nav::Last {
                    var: Some(var),
                    column,
                    offset: 0,
                }))))
            }
            _ => Ok(None),
        }
    }
}

impl VisitorMut for Navigations<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut SqlExpr) -> ControlFlow<()> {
        match self.replace(e) {
            Ok(Some(new)) => *e = new,
            Ok(None) => {}
            Err(err) => {
                self.error = Some(err);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

impl Planner {
    /// Compiles every `MATCH_RECOGNIZE` of `query` and leaves placeholders in its place.
    pub(super) async fn plan_match_recognize(&self, query: &mut Query) -> Result<()> {
        let mut extract = Extract {
            found: Vec::new(),
            error: None,
        };
        let _ = query.visit(&mut extract);
        if let Some(e) = extract.error {
            return Err(e);
        }
        for (name, factor) in extract.found {
            let table = self.compile_match(factor).await?;
            self.register_bare(&name, Arc::new(table))?;
        }
        Ok(())
    }

    async fn compile_match(&self, factor: TableFactor) -> Result<MatchTable> {
        let TableFactor::MatchRecognize {
            table,
            partition_by,
            order_by,
            measures,
            rows_per_match,
            after_match_skip,
            pattern: pattern_ast,
            symbols,
            ..
        } = factor
        else {
            return Err(Error::internal("not a MATCH_RECOGNIZE"));
        };
        if matches!(rows_per_match, Some(RowsPerMatch::AllRows(_))) {
            return Err(Error::plan(
                "MATCH_RECOGNIZE: ALL ROWS PER MATCH is not supported yet (as in Flink); use ONE ROW PER MATCH",
            ));
        }
        let input = Box::pin(self.logical_of_text(&format!("SELECT * FROM {table}"))).await?;
        let input_schema: SchemaRef = Arc::new(input.schema().as_arrow().clone());
        let column_of = |e: &SqlExpr, what: &str| -> Result<usize> {
            let name = match e {
                SqlExpr::Identifier(i) => i.value.clone(),
                SqlExpr::CompoundIdentifier(parts) => {
                    parts.last().map(|p| p.value.clone()).unwrap_or_default()
                }
                other => {
                    return Err(Error::plan(format!(
                        "MATCH_RECOGNIZE {what}: expected a column, found '{other}'"
                    )));
                }
            };
            input_schema.index_of(&name).map_err(|_| {
                Error::plan(format!(
                    "MATCH_RECOGNIZE {what}: no column '{name}' in the input"
                ))
            })
        };
        let partition = partition_by
            .iter()
            .map(|e| column_of(e, "PARTITION BY"))
            .collect::<Result<Vec<_>>>()?;
        let time = match order_by.as_slice() {
            [o] if o.options.asc != Some(false) => column_of(&o.expr, "ORDER BY")?,
            [_] => {
                return Err(Error::plan(
                    "MATCH_RECOGNIZE ORDER BY: the time attribute must be ascending (as in Flink)",
                ));
            }
            [] => {
                return Err(Error::plan(
                    "MATCH_RECOGNIZE needs ORDER BY a time attribute (as in Flink)",
                ));
            }
            _ => {
                return Err(Error::plan(
                    "MATCH_RECOGNIZE ORDER BY: only the time attribute is supported yet",
                ));
            }
        };
        // Variables in the order they appear in the pattern.
        let mut variables: Vec<String> = Vec::new();
        let elements = pattern::elements(&pattern_ast, &mut |name: &str| match variables
            .iter()
            .position(|v| v == name)
        {
            Some(i) => i,
            None => {
                variables.push(name.to_string());
                variables.len() - 1
            }
        })?;
        if elements.len() != variables.len() {
            return Err(Error::plan(
                "MATCH_RECOGNIZE: a pattern variable appears more than once in PATTERN (not supported, as in Flink)",
            ));
        }
        let nfa = pattern::Nfa::compile(&elements);
        let mut within = None;
        let mut definitions: Vec<Option<SqlExpr>> = vec![None; variables.len()];
        for s in symbols {
            if s.symbol.value == WITHIN_SYMBOL {
                within = Some(crate::functions::interval_ms(&s.definition).ok_or_else(|| {
                    Error::plan(format!(
                        "MATCH_RECOGNIZE WITHIN: expected INTERVAL '…' unit, found '{}'",
                        s.definition
                    ))
                })?);
                continue;
            }
            let Some(v) = variables.iter().position(|v| *v == s.symbol.value) else {
                return Err(Error::plan(format!(
                    "MATCH_RECOGNIZE DEFINE: '{}' is not a variable of the pattern",
                    s.symbol.value
                )));
            };
            definitions[v] = Some(s.definition);
        }
        let skip =
            match &after_match_skip {
                None | Some(AfterMatchSkip::ToNextRow) => Skip::ToNextRow,
                Some(AfterMatchSkip::PastLastRow) => Skip::PastLastRow,
                Some(AfterMatchSkip::ToFirst(v)) | Some(AfterMatchSkip::ToLast(v)) => {
                    let i = variables.iter().position(|x| *x == v.value).ok_or_else(|| {
                    Error::plan(format!(
                        "MATCH_RECOGNIZE AFTER MATCH SKIP TO: '{}' is not a pattern variable",
                        v.value
                    ))
                })?;
                    match &after_match_skip {
                        Some(AfterMatchSkip::ToFirst(_)) => Skip::ToFirst(i),
                        _ => Skip::ToLast(i),
                    }
                }
            };
        // Conditions.
        let mut defines = Vec::new();
        for (v, definition) in definitions.into_iter().enumerate() {
            let Some(mut e) = definition else {
                defines.push(None);
                continue;
            };
            let (navs, exprs) = self
                .plan_navigating(&input_schema, &variables, time, Some(v), &mut [&mut e])
                .await?;
            let expr = exprs.into_iter().next().expect("one expression");
            defines.push(Some(NavExpr { expr, navs }));
        }
        // Measures.
        let mut measure_exprs: Vec<SqlExpr> = measures.iter().map(|m| m.expr.clone()).collect();
        let mut refs: Vec<&mut SqlExpr> = measure_exprs.iter_mut().collect();
        let (measure_navs, measure_physical) = self
            .plan_navigating(&input_schema, &variables, time, None, &mut refs)
            .await?;
        let env = crate::match_recognize::matcher::env_schema(&input_schema, &measure_navs)?;
        let mut fields: Vec<Field> = partition
            .iter()
            .map(|c| input_schema.field(*c).clone())
            .collect();
        for (m, e) in measures.iter().zip(&measure_physical) {
            fields.push(Field::new(
                m.alias.value.clone(),
                e.data_type(&env)?,
                e.nullable(&env)?,
            ));
        }
        let program = MatchProgram {
            input_schema: input_schema.clone(),
            partition,
            time,
            variables,
            defines,
            nfa,
            skip,
            within,
            measures: measure_physical,
            measure_navs,
            schema: Arc::new(Schema::new(fields)),
        };
        Ok(MatchTable {
            input,
            program: Arc::new(program),
        })
    }

    /// Replaces the navigations of `exprs` by columns and plans them with DataFusion over
    /// the input's columns and those.
    async fn plan_navigating(
        &self,
        input: &SchemaRef,
        variables: &[String],
        time: usize,
        defining: Option<usize>,
        exprs: &mut [&mut SqlExpr],
    ) -> Result<(Vec<Nav>, Vec<PhysicalExprRef>)> {
        let state = self.ctx.state();
        let is_aggregate = |name: &str| {
            state
                .aggregate_functions()
                .contains_key(&name.to_ascii_lowercase())
        };
        let mut walk = Navigations {
            variables,
            columns: input,
            time,
            defining,
            is_aggregate: &is_aggregate,
            found: Vec::new(),
            error: None,
        };
        for e in exprs.iter_mut() {
            let _ = (**e).visit(&mut walk);
            if let Some(err) = walk.error.take() {
                return Err(err);
            }
        }
        let mut navs = Vec::new();
        for f in walk.found {
            navs.push(match f {
                Found::Ready(n) => n,
                Found::Aggregate { var, call } => {
                    let (function, result, value_schema) =
                        self.plan_match_aggregate(input, &call).await?;
                    Nav::Aggregate {
                        var,
                        function,
                        result,
                        value_schema,
                    }
                }
            });
        }
        let env = crate::match_recognize::matcher::env_schema(input, &navs)?;
        let list = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{e} AS __m{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let plan = self.plan_over(env.clone(), &list).await?;
        let LogicalPlan::Projection(p) = &plan else {
            return Err(Error::internal(format!(
                "MATCH_RECOGNIZE: unexpected plan {plan}"
            )));
        };
        let physical = p
            .expr
            .iter()
            .map(|e| self.physical(e, p.input.schema()))
            .collect::<Result<Vec<_>>>()?;
        if defining.is_some()
            && let Some(e) = physical.first()
            && e.data_type(&env)? != DataType::Boolean
        {
            return Err(Error::plan(format!(
                "MATCH_RECOGNIZE DEFINE {}: the condition must be a boolean, not {}",
                variables[defining.unwrap_or_default()],
                e.data_type(&env)?
            )));
        }
        Ok((navs, physical))
    }

    /// An aggregate call (`SUM(price)`, variables already stripped) over the input's rows.
    async fn plan_match_aggregate(
        &self,
        input: &SchemaRef,
        call: &SqlExpr,
    ) -> Result<(
        Arc<datafusion::physical_expr::aggregate::AggregateFunctionExpr>,
        PhysicalExprRef,
        SchemaRef,
    )> {
        let rows = crate::match_recognize::matcher::relaxed_schema(input);
        let plan = self.plan_over(rows, &call.to_string()).await?;
        // The projection over the aggregate gives Flink's result type (AVG of INT: INT).
        let mut top = None;
        datafusion::common::tree_node::TreeNode::apply(&plan, |node| {
            if let LogicalPlan::Projection(p) = node
                && matches!(p.input.as_ref(), LogicalPlan::Aggregate(_))
            {
                top = Some(p.clone());
                return Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop);
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })?;
        let Some(top) = top else {
            return Err(Error::internal(format!(
                "MATCH_RECOGNIZE: unexpected plan {plan}"
            )));
        };
        let value_schema: SchemaRef = Arc::new(top.input.schema().as_arrow().clone());
        let result = self.physical(&top.expr[0], top.input.schema())?;
        let mut found = None;
        datafusion::common::tree_node::TreeNode::apply(&plan, |node| {
            if let LogicalPlan::Aggregate(a) = node {
                found = Some(a.clone());
                return Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop);
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })?;
        let Some(agg) = found.filter(|a| a.group_expr.is_empty() && a.aggr_expr.len() == 1) else {
            return Err(Error::plan(format!(
                "MATCH_RECOGNIZE: cannot plan the aggregate '{call}'"
            )));
        };
        let schema = agg.input.schema();
        let props = datafusion::logical_expr::execution_props::ExecutionProps::new();
        #[allow(deprecated)]
        let (function, filter, order) =
            datafusion::physical_planner::create_aggregate_expr_and_maybe_filter(
                &agg.aggr_expr[0],
                schema,
                schema.as_arrow(),
                &props,
            )
            .map_err(plan_error)?;
        if filter.is_some() || !order.is_empty() {
            return Err(Error::plan(format!(
                "MATCH_RECOGNIZE: FILTER and ORDER BY in an aggregate are not supported: '{call}'"
            )));
        }
        if value_schema.fields().len() != 1 {
            return Err(Error::plan(format!(
                "MATCH_RECOGNIZE: cannot plan the aggregate '{call}'"
            )));
        }
        Ok((function, result, value_schema))
    }
}

impl Planner {
    /// `SELECT <list>` over an empty table of `schema`, planned and analyzed (types
    /// coerced), not optimized.
    async fn plan_over(&self, schema: SchemaRef, list: &str) -> Result<LogicalPlan> {
        let name = format!("__weir_match_rows_{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let table = datafusion::datasource::MemTable::try_new(schema, vec![vec![]])?;
        self.register_bare(&name, Arc::new(table))?;
        let planned = self
            .logical_of_text(&format!("SELECT {list} FROM {name}"))
            .await;
        self.deregister_bare(&name);
        let state = self.ctx.state();
        state
            .analyzer()
            .execute_and_check(planned?, state.config_options(), |_, _| {})
            .map_err(plan_error)
    }
}
