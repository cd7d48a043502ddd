//! Window forms Weir plans through another, equivalent form, rewritten per `SELECT` before
//! the window TVFs are expanded (see [`crate::functions::rewrite_window_tvfs`]):
//!
//! * the `SESSION` window TVF under a window aggregate,
//!   `SELECT … FROM TABLE(SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(ts), gap))
//!   GROUP BY window_start, window_end[, k]`, becomes the legacy group window
//!   `SELECT … FROM t GROUP BY SESSION(ts, gap)[, k]` with `window_start`/`window_end`/
//!   `window_time` read as `SESSION_START`/`SESSION_END`/`SESSION_ROWTIME`: a session
//!   window has no per-row value, so it is only planned as a session aggregate;
//! * the legacy `GROUP BY HOP(ts, slide, size)` group window with `HOP_START`/`HOP_END`/
//!   `HOP_ROWTIME` becomes a window aggregate over the `HOP` TVF.

use crate::functions::{descriptor, parse_expr, plain_args, table_input};
use sqlparser::ast::{Expr, GroupByExpr, Ident, Select, SelectItem, TableFactor};
use sqlparser::ast::{visit_expressions, visit_expressions_mut};
use std::ops::ControlFlow;

const WINDOW_COLUMNS: [&str; 3] = ["window_start", "window_end", "window_time"];

/// Rewrites the window forms of one `SELECT` (not of its subqueries).
pub(crate) fn rewrite_select(select: &mut Select) -> Result<(), String> {
    session_tvf(select)?;
    legacy_hop(select)
}

fn function_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Function(f) => Some(f.name.to_string().to_ascii_uppercase()),
        _ => None,
    }
}

/// The last part of a (maybe qualified) column name, lowercased.
fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(i) => Some(i.value.to_ascii_lowercase()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.to_ascii_lowercase()),
        _ => None,
    }
}

/// The relation of `SELECT * FROM <text>`.
fn parse_relation(text: &str) -> Result<TableFactor, String> {
    let sql = format!("SELECT * FROM {text}");
    let mut stmts = crate::parser::parse_script(&sql).map_err(|e| e.to_string())?;
    if let Some(crate::parser::WeirStatement::Select(q)) = stmts.pop().map(|s| s.statement)
        && let sqlparser::ast::SetExpr::Select(s) = *q.body
        && let Some(t) = s.from.into_iter().next()
    {
        return Ok(t.relation);
    }
    Err(format!("internal: cannot rewrite window relation {text}"))
}

fn group_by_exprs<'a>(select: &'a mut Select, form: &str) -> Result<&'a mut Vec<Expr>, String> {
    match &mut select.group_by {
        GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => Ok(exprs),
        _ => Err(format!(
            "{form}: GROUP BY ALL and grouping modifiers are not supported with windows"
        )),
    }
}

/// Replaces, in the select list and HAVING, every expression `replace` maps; a select
/// item that is such an expression alone keeps its name.
fn replace_in_outputs(select: &mut Select, replace: &dyn Fn(&Expr) -> Option<(Expr, String)>) {
    for item in &mut select.projection {
        if let SelectItem::UnnamedExpr(e) = item
            && let Some((new, name)) = replace(e)
        {
            *item = SelectItem::ExprWithAlias {
                expr: new,
                alias: Ident::new(name),
            };
            continue;
        }
        let _ = visit_expressions_mut(item, |e| {
            if let Some((new, _)) = replace(e) {
                *e = new;
            }
            ControlFlow::<()>::Continue(())
        });
    }
    if let Some(having) = &mut select.having {
        let _ = visit_expressions_mut(having, |e| {
            if let Some((new, _)) = replace(e) {
                *e = new;
            }
            ControlFlow::<()>::Continue(())
        });
    }
}

fn mentions(e: &Expr, names: &[&str]) -> bool {
    visit_expressions(e, |e| match column_name(e) {
        Some(c) if names.contains(&c.as_str()) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

fn session_tvf(select: &mut Select) -> Result<(), String> {
    let is_session = |f: &TableFactor| {
        matches!(f, TableFactor::TableFunction { expr, .. }
            if function_name(expr).as_deref() == Some("SESSION"))
    };
    let relations = select
        .from
        .iter()
        .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)));
    if !relations.clone().any(is_session) {
        return Ok(());
    }
    const FORM: &str = "the SESSION window TVF";
    if relations.count() != 1 {
        return Err(format!(
            "{FORM} must be the only relation of its SELECT (join its aggregated result in an outer query)"
        ));
    }
    let TableFactor::TableFunction {
        expr: Expr::Function(func),
        alias,
    } = &select.from[0].relation
    else {
        unreachable!("checked above");
    };
    let args = plain_args(&func.args).unwrap_or_default();
    if args.len() != 3 {
        return Err(format!(
            "{FORM} takes three arguments: SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(ts), gap)"
        ));
    }
    let (input, partition) = table_input(args.first(), "SESSION")?;
    let time = descriptor(args.get(1), "SESSION")?;
    let gap = args[2].clone();
    let input = match alias.as_ref().map(|a| a.name.to_string()) {
        Some(a) if !input.ends_with("__weir_tvf_input") => format!("{input} AS {a}"),
        Some(a) => input.replace("__weir_tvf_input", &a),
        None => input,
    };
    if select
        .selection
        .as_ref()
        .is_some_and(|w| mentions(w, &WINDOW_COLUMNS))
    {
        return Err(format!(
            "{FORM}: WHERE cannot read window columns, which exist only after the aggregation (use HAVING)"
        ));
    }
    let exprs = group_by_exprs(select, "SESSION")?;
    let before = exprs.len();
    exprs.retain(|e| {
        !matches!(
            column_name(e).as_deref(),
            Some("window_start" | "window_end")
        )
    });
    if before - exprs.len() != 2 {
        return Err(format!(
            "{FORM} is supported under a window aggregate only: GROUP BY window_start, window_end[, keys]"
        ));
    }
    for key in &partition {
        let k = key.trim_matches('`').to_ascii_lowercase();
        if !exprs.iter().any(|e| column_name(e).as_deref() == Some(&k)) {
            return Err(format!(
                "SESSION: the PARTITION BY column {key} must also be a GROUP BY key (sessions are \
                 kept per group key)"
            ));
        }
    }
    let call = |f: &str| {
        parse_expr(&format!("{f}({time}, {gap})"))
            .ok_or_else(|| format!("SESSION: cannot read the gap {gap}"))
    };
    exprs.push(call("SESSION")?);
    let parts = [
        ("window_start", call("SESSION_START")?),
        ("window_end", call("SESSION_END")?),
        ("window_time", call("SESSION_ROWTIME")?),
    ];
    replace_in_outputs(select, &|e| {
        let name = column_name(e)?;
        parts
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, new)| (new.clone(), n.to_string()))
    });
    select.from[0].relation = parse_relation(&input)?;
    Ok(())
}

fn legacy_hop(select: &mut Select) -> Result<(), String> {
    let GroupByExpr::Expressions(exprs, _) = &select.group_by else {
        return Ok(());
    };
    let Some(pos) = exprs
        .iter()
        .position(|e| function_name(e).as_deref() == Some("HOP"))
    else {
        return Ok(());
    };
    const FORM: &str = "GROUP BY HOP(ts, slide, size)";
    let args = match &exprs[pos] {
        Expr::Function(f) => plain_args(&f.args).filter(|a| a.len() == 3),
        _ => None,
    }
    .ok_or_else(|| format!("{FORM} takes three arguments: the time column, the slide, the size"))?;
    if select.from.len() != 1 || !select.from[0].joins.is_empty() {
        return Err(format!(
            "{FORM} needs a single relation in FROM (join in a subquery, or use the HOP window TVF)"
        ));
    }
    // The column's own spelling (quotes kept): it is read inside a subquery, unqualified.
    let time = match &args[0] {
        Expr::Identifier(i) => Some(i.to_string()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.to_string()),
        _ => None,
    }
    .ok_or_else(|| format!("{FORM}: the first argument must be a time column"))?;
    let relation = &select.from[0].relation;
    let alias = match relation {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            a.name.to_string()
        }
        TableFactor::Table { name, .. } => name.0.last().map(|p| p.to_string()).unwrap_or_default(),
        _ => "__weir_hop_input".into(),
    };
    let text = format!(
        "TABLE(HOP(TABLE (SELECT * FROM {relation}), DESCRIPTOR({time}), {}, {})) AS {alias}",
        args[1], args[2]
    );
    let exprs = group_by_exprs(select, FORM)?;
    exprs.splice(
        pos..=pos,
        [
            Expr::Identifier(Ident::new("window_start")),
            Expr::Identifier(Ident::new("window_end")),
        ],
    );
    replace_in_outputs(select, &|e| {
        let column = match function_name(e)?.as_str() {
            "HOP_START" => "window_start",
            "HOP_END" => "window_end",
            "HOP_ROWTIME" => "window_time",
            _ => return None,
        };
        let name = match e {
            Expr::Function(f) => f.name.to_string(),
            _ => column.to_string(),
        };
        Some((Expr::Identifier(Ident::new(column)), name))
    });
    select.from[0].relation = parse_relation(&text)?;
    Ok(())
}
