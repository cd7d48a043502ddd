//! Flink built-in functions that DataFusion spells differently, rewritten on the AST
//! before planning: `MOD(a, b)` → `a % b`, `CHAR_LENGTH(s)` → `CHARACTER_LENGTH(s)`,
//! `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP`, `CURRENT_DATE` …; legacy
//! group windows `TUMBLE(ts, size)`/`SESSION(ts, gap)` and their `*_START`/`*_END`/
//! `*_ROWTIME` (see [`crate::group_windows`]); the functions that are DataFusion
//! expressions written out as text (`REGEXP_EXTRACT`, `DATE_FORMAT`, `TIMESTAMPADD`, …) in
//! [`crate::flink_functions`].

use sqlparser::ast::VisitMut;
use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName,
    visit_expressions_mut,
};
use std::ops::ControlFlow;

pub(crate) fn plain_args(args: &FunctionArguments) -> Option<Vec<Expr>> {
    let FunctionArguments::List(list) = args else {
        return None;
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn parse_expr(text: &str) -> Option<Expr> {
    let dialect = crate::dialect::FlinkDialect;
    sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(text)
        .ok()?
        .parse_expr()
        .ok()
}

/// Java `SimpleDateFormat` letters → chrono's `strftime`.
pub(crate) fn java_to_strftime(pattern: &str) -> String {
    let mut out = pattern.to_string();
    for (java, c) in [
        ("yyyy", "%Y"),
        ("MM", "%m"),
        ("dd", "%d"),
        ("HH", "%H"),
        ("mm", "%M"),
        ("ss", "%S"),
        ("SSS", "%3f"),
    ] {
        out = out.replace(java, c);
    }
    out
}

/// Flink functions Weir rewrites for DataFusion (besides DataFusion's own), for
/// `SHOW FUNCTIONS`.
pub const FLINK_FUNCTIONS: &[&str] = &["char_length", "mod", "proctime", "to_timestamp_ltz"];

/// Rewrites Flink function names and forms inside any AST node.
pub fn rewrite<V: VisitMut>(node: &mut V) {
    let _ = visit_expressions_mut(node, |expr| {
        // An approximate numeric literal (`1E1`, `2.5e-3`) is a DOUBLE in Flink; exact
        // ones (`0.1`) are DECIMALs (see the planner's configuration).
        if let Expr::Value(v) = expr
            && let sqlparser::ast::Value::Number(n, _) = &v.value
            && n.contains(['e', 'E'])
        {
            *expr = Expr::Cast {
                kind: sqlparser::ast::CastKind::Cast,
                expr: Box::new(expr.clone()),
                data_type: sqlparser::ast::DataType::Double(sqlparser::ast::ExactNumberInfo::None),
                array: false,
                format: None,
            };
            return ControlFlow::Continue(());
        }
        // Flink's niladic time functions: CURRENT_TIMESTAMP is an instant, the others are
        // local to the session zone (the planner applies it to these casts).
        let niladic = match &*expr {
            Expr::Identifier(i) if i.quote_style.is_none() => Some(i.value.to_ascii_uppercase()),
            Expr::Function(f) if matches!(f.args, FunctionArguments::None) => {
                Some(f.name.to_string().to_ascii_uppercase())
            }
            _ => None,
        };
        if let Some(name) = niladic {
            let now = crate::flink_functions::current_timestamp();
            let text = match name.as_str() {
                "CURRENT_TIMESTAMP" => now,
                "LOCALTIMESTAMP" => format!("CAST({now} AS TIMESTAMP(3))"),
                "LOCALTIME" | "CURRENT_TIME" => {
                    format!("CAST(CAST({now} AS TIMESTAMP(3)) AS TIME)")
                }
                "CURRENT_DATE" => format!("CAST(CAST({now} AS TIMESTAMP(3)) AS DATE)"),
                _ => return ControlFlow::Continue(()),
            };
            if let Some(new) = parse_expr(&text) {
                *expr = new;
            }
            return ControlFlow::Continue(());
        }
        if let Some(new) = crate::flink_functions::rewrite_special(expr)
            .as_deref()
            .and_then(parse_expr)
        {
            *expr = new;
            return ControlFlow::Continue(());
        }
        if let Expr::Function(f) = expr {
            let name = f.name.to_string().to_ascii_uppercase();
            match name.as_str() {
                "MOD" => {
                    if let Some(args) = plain_args(&f.args).filter(|a| a.len() == 2) {
                        *expr = Expr::Nested(Box::new(Expr::BinaryOp {
                            left: Box::new(Expr::Nested(Box::new(args[0].clone()))),
                            op: BinaryOperator::Modulo,
                            right: Box::new(Expr::Nested(Box::new(args[1].clone()))),
                        }));
                    }
                }
                // Legacy group windows (see `group_windows`).
                "TUMBLE" | "SESSION" if plain_args(&f.args).is_some_and(|a| a.len() == 2) => {
                    let udf = if name == "TUMBLE" {
                        crate::group_windows::TUMBLE
                    } else {
                        crate::group_windows::SESSION
                    };
                    f.name = ObjectName::from(vec![Ident::new(udf)]);
                }
                "TUMBLE_START" | "TUMBLE_END" | "TUMBLE_ROWTIME" | "SESSION_START"
                | "SESSION_END" | "SESSION_ROWTIME" => {
                    let Some(args) = plain_args(&f.args).filter(|a| a.len() == 2) else {
                        return ControlFlow::Continue(());
                    };
                    let (window, part) = name.split_once('_').expect("underscore");
                    let udf = if window == "TUMBLE" {
                        crate::group_windows::TUMBLE
                    } else {
                        crate::group_windows::SESSION
                    };
                    let key = format!("{udf}({}, {})", args[0], args[1]);
                    let text = match part {
                        "START" => format!("{key}['start']"),
                        "END" => format!("{key}['end']"),
                        _ => format!("({key}['end'] - INTERVAL '1' MILLISECOND)"),
                    };
                    if let Some(new) = parse_expr(&text) {
                        *expr = new;
                    }
                }
                "CHAR_LENGTH" => f.name = ObjectName::from(vec![Ident::new("character_length")]),
                // Flink's GROUPING_ID(a, b, …) is DataFusion's GROUPING of several columns.
                "GROUPING_ID" => f.name = ObjectName::from(vec![Ident::new("grouping")]),
                // Functions rewritten to DataFusion text (`crate::flink_functions`).
                _ => {
                    let Some(args) = plain_args(&f.args) else {
                        return ControlFlow::Continue(());
                    };
                    let a: Vec<String> = args.iter().map(|e| format!("({e})")).collect();
                    if let Some(new) = crate::flink_functions::rewrite_call(&name, &args, &a)
                        .as_deref()
                        .and_then(parse_expr)
                    {
                        *expr = new;
                    }
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Flink names `SELECT person.id` (a field of a ROW column) `id`; DataFusion would name it
/// `t.person[id]`. Unaliased field accesses in select lists get the field's name, unless
/// their first part names a relation of the FROM clause (`t.col` is a plain column).
pub fn alias_nested_fields(query: &mut sqlparser::ast::Query) {
    use sqlparser::ast::{SelectItem, SetExpr, TableFactor};
    fn set_expr(body: &mut SetExpr) {
        match body {
            SetExpr::Select(select) => {
                let mut relations: Vec<String> = Vec::new();
                for t in &mut select.from {
                    for f in std::iter::once(&mut t.relation)
                        .chain(t.joins.iter_mut().map(|j| &mut j.relation))
                    {
                        match f {
                            TableFactor::Table { name, alias, .. } => {
                                if let Some(last) = name.0.last() {
                                    relations.push(last.to_string().trim_matches('`').to_string());
                                }
                                if let Some(a) = alias {
                                    relations.push(a.name.value.clone());
                                }
                            }
                            TableFactor::Derived {
                                subquery, alias, ..
                            } => {
                                alias_nested_fields(subquery);
                                if let Some(a) = alias {
                                    relations.push(a.name.value.clone());
                                }
                            }
                            _ => {}
                        }
                    }
                }
                for item in &mut select.projection {
                    if let SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) = item
                        && parts.len() >= 2
                        && !relations.iter().any(|r| *r == parts[0].value)
                    {
                        let alias = parts.last().expect("two parts").clone();
                        let expr = Expr::CompoundIdentifier(parts.clone());
                        *item = SelectItem::ExprWithAlias { expr, alias };
                    }
                }
            }
            SetExpr::SetOperation { left, right, .. } => {
                set_expr(left);
                set_expr(right);
            }
            SetExpr::Query(q) => alias_nested_fields(q),
            _ => {}
        }
    }
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            alias_nested_fields(&mut cte.query);
        }
    }
    set_expr(&mut query.body);
}

/// Milliseconds of a literal `INTERVAL 'n' UNIT` (SECOND, MINUTE, HOUR, DAY, MILLISECOND).
pub(crate) fn interval_ms(e: &Expr) -> Option<i64> {
    use sqlparser::ast::DateTimeField as F;
    let Expr::Interval(i) = e else { return None };
    let n: i64 = match i.value.as_ref() {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::SingleQuotedString(s) | sqlparser::ast::Value::Number(s, _) => {
                s.trim().parse().ok()?
            }
            _ => return None,
        },
        _ => return None,
    };
    let unit = match i.leading_field.as_ref()? {
        F::Millisecond | F::Milliseconds => 1,
        F::Second | F::Seconds => 1_000,
        F::Minute | F::Minutes => 60_000,
        F::Hour | F::Hours => 3_600_000,
        F::Day | F::Days => 86_400_000,
        _ => return None,
    };
    Some(n * unit)
}

/// Marks `TABLE t` arguments (see the dialect's `parse_prefix`).
pub const TABLE_ARG: &str = "__weir_table__";

/// The input of a window TVF, `TABLE t`, `TABLE (SELECT …)`, either with `PARTITION BY
/// …`: the relation as FROM-clause text and the partition columns.
pub(crate) fn table_input(arg: Option<&Expr>, tvf: &str) -> Result<(String, Vec<String>), String> {
    let (table, keys) = match arg {
        Some(Expr::Tuple(items)) if !items.is_empty() => (&items[0], &items[1..]),
        other => (other.ok_or(format!("{tvf}: no arguments"))?, &[][..]),
    };
    let relation = match table {
        Expr::CompoundIdentifier(parts) if parts[0].value == TABLE_ARG => parts[1..]
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("."),
        Expr::Subquery(q) => format!("({q}) AS __weir_tvf_input"),
        _ => {
            return Err(format!(
                "{tvf}: the first argument must be TABLE <name> or TABLE (<query>)"
            ));
        }
    };
    let keys = keys.iter().map(|k| k.to_string()).collect();
    Ok((relation, keys))
}

/// The column of a window TVF's `DESCRIPTOR(column)` argument.
pub(crate) fn descriptor(arg: Option<&Expr>, tvf: &str) -> Result<Expr, String> {
    match arg {
        Some(Expr::Function(d)) if d.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") => {
            plain_args(&d.args)
                .and_then(|a| a.first().cloned())
                .ok_or_else(|| format!("{tvf}: DESCRIPTOR(column) expected"))
        }
        _ => Err(format!(
            "{tvf}: the second argument must be DESCRIPTOR(time column)"
        )),
    }
}

/// Flink's window table-valued functions become derived tables with the window columns:
/// `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))` →
/// `(SELECT *, date_bin(size, ts) AS window_start, … + size AS window_end,
///   … + size - 1 ms AS window_time FROM t)`; HOP and CUMULATE unnest the list of a row's
/// windows ([`crate::window_lists`]). A `GROUP BY window_start, window_end` over
/// it is planned as an event-time window aggregate in streaming mode, and runs as an
/// ordinary aggregate in batch mode.
pub fn rewrite_window_tvfs(query: &mut sqlparser::ast::Query) -> Result<(), String> {
    use sqlparser::ast::{SetExpr, TableFactor};
    fn factor(f: &mut TableFactor) -> Result<(), String> {
        match f {
            TableFactor::TableFunction {
                expr: Expr::Function(func),
                alias,
            } => {
                let name = func.name.to_string().to_ascii_uppercase();
                let args = plain_args(&func.args).ok_or("window TVF with unexpected arguments")?;
                if !matches!(name.as_str(), "TUMBLE" | "HOP" | "CUMULATE" | "SESSION") {
                    return Ok(());
                }
                let (table, partition) = table_input(args.first(), &name)?;
                if !partition.is_empty() {
                    return Err(format!(
                        "{name}: PARTITION BY is supported by the SESSION window TVF only"
                    ));
                }
                let time = descriptor(args.get(1), &name)?;
                let text = match (name.as_str(), args.len()) {
                    ("TUMBLE", 3) => {
                        let size = &args[2];
                        if interval_ms(size).is_some_and(|ms| ms <= 0) {
                            return Err(format!(
                                "TUMBLE: the window size must be positive, not {size}"
                            ));
                        }
                        let start = format!(
                            "date_bin({size}, {time}, TIMESTAMP '1970-01-01 00:00:00.000000000')"
                        );
                        format!(
                            "SELECT *, {start} AS window_start, {start} + {size} AS window_end, \
                             {start} + {size} - INTERVAL '1' MILLISECOND AS window_time FROM {table}"
                        )
                    }
                    ("HOP" | "CUMULATE", 4) => {
                        // HOP(…, slide, size): a row is in size/slide windows, the one starting
                        // at its slide boundary and the ones before it. CUMULATE(…, step, size):
                        // windows [start, start + j·step) of each size-long period.
                        let (step, size) = (&args[2], &args[3]);
                        let (Some(step_ms), Some(size_ms)) = (interval_ms(step), interval_ms(size))
                        else {
                            return Err(format!(
                                "{name}: window sizes must be literal intervals such as INTERVAL '10' SECOND"
                            ));
                        };
                        if step_ms <= 0 || size_ms <= 0 || size_ms % step_ms != 0 {
                            return Err(format!(
                                "{name}: the window size must be a positive multiple of the {}",
                                if name == "HOP" { "slide" } else { "step" }
                            ));
                        }
                        // One row per window, by unnesting the row's list of windows.
                        if name == "HOP" {
                            let starts = format!(
                                "{}({time}, {step_ms}, {size_ms})",
                                crate::window_lists::HOP_STARTS
                            );
                            format!(
                                "SELECT *, window_start + {size} AS window_end, \
                                 window_start + {size} - INTERVAL '1' MILLISECOND AS window_time \
                                 FROM (SELECT *, UNNEST({starts}) AS window_start FROM {table})"
                            )
                        } else {
                            let ends = format!(
                                "{}({time}, {step_ms}, {size_ms})",
                                crate::window_lists::CUMULATE_ENDS
                            );
                            let start = format!(
                                "date_bin({size}, {time}, TIMESTAMP '1970-01-01 00:00:00.000000000')"
                            );
                            format!(
                                "SELECT *, window_end - INTERVAL '1' MILLISECOND AS window_time \
                                 FROM (SELECT *, {start} AS window_start, UNNEST({ends}) AS window_end \
                                 FROM {table})"
                            )
                        }
                    }
                    ("SESSION", 3) => {
                        return Err(
                            "the SESSION window TVF is supported as the only relation of a window \
                             aggregate: SELECT … FROM TABLE(SESSION(TABLE t [PARTITION BY k], \
                             DESCRIPTOR(ts), gap)) GROUP BY window_start, window_end[, k]"
                                .into(),
                        );
                    }
                    _ => {
                        return Err(format!(
                            "window TVF {name} with {} arguments: expected {name}(TABLE t, DESCRIPTOR(ts), {})",
                            args.len(),
                            match name.as_str() {
                                "TUMBLE" => "size",
                                "HOP" => "slide, size",
                                "CUMULATE" => "step, size",
                                _ => "gap",
                            }
                        ));
                    }
                };
                let mut stmts = crate::parser::parse_script(&text).map_err(|e| e.to_string())?;
                let Some(crate::parser::WeirStatement::Select(subquery)) =
                    stmts.pop().map(|s| s.statement)
                else {
                    return Err("internal: window TVF rewrite".into());
                };
                *f = TableFactor::Derived {
                    lateral: false,
                    subquery,
                    alias: alias.clone(),
                    sample: None,
                };
                Ok(())
            }
            TableFactor::Derived { subquery, .. } => rewrite_window_tvfs(subquery),
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => {
                factor(&mut table_with_joins.relation)?;
                for j in &mut table_with_joins.joins {
                    factor(&mut j.relation)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    fn set_expr(body: &mut SetExpr) -> Result<(), String> {
        match body {
            SetExpr::Select(select) => {
                crate::window_forms::rewrite_select(select)?;
                for t in &mut select.from {
                    factor(&mut t.relation)?;
                    for j in &mut t.joins {
                        factor(&mut j.relation)?;
                    }
                }
                Ok(())
            }
            SetExpr::SetOperation { left, right, .. } => {
                set_expr(left)?;
                set_expr(right)
            }
            SetExpr::Query(q) => rewrite_window_tvfs(q),
            _ => Ok(()),
        }
    }
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            rewrite_window_tvfs(&mut cte.query)?;
        }
    }
    set_expr(&mut query.body)
}
