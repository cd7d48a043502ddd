//! Flink's output names for a query whose SELECT list names a column more than once.
//!
//! Flink (Calcite) keeps every column of `SELECT id, id FROM t` and makes the result's
//! names unique: `id, id0`. DataFusion refuses such a list ("Projections require unique
//! expression names"), so the query's own SELECT list gets Flink's names before
//! DataFusion plans it. A nested query keeps its names, as in Flink, where a reference
//! to one of them is then ambiguous (and Weir refuses the nested list).

use sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr};
use std::collections::{HashMap, HashSet};

/// Renames the items of `query`'s result (each branch's, for a set operation) whose name
/// an earlier item has: a column or alias `x` becomes the first of `x0`, `x1`, … not used
/// yet, as Calcite's `SqlValidatorUtil.uniquify` does. An unnamed expression written more
/// than once is named `EXPR$n` after its position, Flink's name for it.
pub fn unique_result_names(query: &mut Query) {
    set_expr(&mut query.body);
}

fn set_expr(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => unique_names(&mut select.projection),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left);
            set_expr(right);
        }
        SetExpr::Query(query) => set_expr(&mut query.body),
        _ => {}
    }
}

/// The name an item's column gets: its alias, or a column's own name.
fn name_of(item: &SelectItem) -> Option<&str> {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => Some(&alias.value),
        SelectItem::UnnamedExpr(Expr::Identifier(i)) => Some(&i.value),
        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
            parts.last().map(|i| i.value.as_str())
        }
        _ => None,
    }
}

fn unique_names(items: &mut [SelectItem]) {
    let mut unnamed: HashMap<String, usize> = HashMap::new();
    for item in items.iter() {
        if let SelectItem::UnnamedExpr(e) = item
            && name_of(item).is_none()
        {
            *unnamed.entry(e.to_string()).or_default() += 1;
        }
    }
    let mut used = HashSet::new();
    for (position, item) in items.iter_mut().enumerate() {
        let new_name = match name_of(item).map(str::to_string) {
            Some(name) if used.insert(name.clone()) => continue,
            Some(name) => (0..)
                .map(|n| format!("{name}{n}"))
                .find(|candidate| used.insert(candidate.clone()))
                .expect("an unbounded range"),
            None => match &*item {
                SelectItem::UnnamedExpr(e) if unnamed.get(&e.to_string()) > Some(&1) => {
                    format!("EXPR${position}")
                }
                _ => continue,
            },
        };
        let alias = Ident::with_quote('`', new_name);
        match item {
            SelectItem::ExprWithAlias { alias: old, .. } => *old = alias,
            SelectItem::UnnamedExpr(expr) => {
                *item = SelectItem::ExprWithAlias {
                    expr: expr.clone(),
                    alias,
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renamed(sql: &str) -> String {
        let dialect = sqlparser::dialect::GenericDialect {};
        let mut statements = sqlparser::parser::Parser::parse_sql(&dialect, sql).unwrap();
        let sqlparser::ast::Statement::Query(query) = &mut statements[0] else {
            panic!("not a query")
        };
        unique_result_names(query);
        query.to_string()
    }

    #[test]
    fn names_are_made_unique_as_calcite_does() {
        assert_eq!(
            renamed("SELECT id, t.id, name, id, id0 FROM t"),
            "SELECT id, t.id AS `id0`, name, id AS `id1`, id0 AS `id00` FROM t"
        );
        assert_eq!(
            renamed("SELECT a AS k, b AS k FROM t UNION ALL SELECT c, c FROM u"),
            "SELECT a AS k, b AS `k0` FROM t UNION ALL SELECT c, c AS `c0` FROM u"
        );
        assert_eq!(
            renamed("SELECT x + 1, x + 1, x * 2, x * 3 FROM t"),
            "SELECT x + 1 AS `EXPR$0`, x + 1 AS `EXPR$1`, x * 2, x * 3 FROM t"
        );
        // A nested query keeps its names.
        assert_eq!(
            renamed("SELECT * FROM (SELECT id, id FROM t)"),
            "SELECT * FROM (SELECT id, id FROM t)"
        );
        assert_eq!(renamed("SELECT id, name FROM t"), "SELECT id, name FROM t");
    }
}
