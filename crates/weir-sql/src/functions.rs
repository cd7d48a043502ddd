//! Flink built-in functions that DataFusion spells differently, rewritten on the AST
//! before planning: `MOD(a, b)` → `a % b`, `CHAR_LENGTH(s)` → `CHARACTER_LENGTH(s)`,
//! `TO_TIMESTAMP_LTZ(n, 0|3|6|9)` → `to_timestamp_{seconds|millis|micros|nanos}(n)`.

use sqlparser::ast::VisitMut;
use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName,
    visit_expressions_mut,
};
use std::ops::ControlFlow;

fn plain_args(args: &FunctionArguments) -> Option<Vec<Expr>> {
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

/// Rewrites Flink function names and forms inside any AST node.
pub fn rewrite<V: VisitMut>(node: &mut V) {
    let _ = visit_expressions_mut(node, |expr| {
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
                "TO_TIMESTAMP_LTZ" => {
                    if let Some(args) = plain_args(&f.args).filter(|a| a.len() == 2) {
                        let unit = match args[1].to_string().as_str() {
                            "0" => Some("to_timestamp_seconds"),
                            "3" => Some("to_timestamp_millis"),
                            "6" => Some("to_timestamp_micros"),
                            "9" => Some("to_timestamp_nanos"),
                            _ => None,
                        };
                        if let (Some(unit), FunctionArguments::List(list)) = (unit, &mut f.args) {
                            f.name = ObjectName::from(vec![Ident::new(unit)]);
                            list.args.truncate(1);
                        }
                    }
                }
                "CHAR_LENGTH" => f.name = ObjectName::from(vec![Ident::new("character_length")]),
                _ => {}
            }
        }
        ControlFlow::<()>::Continue(())
    });
}
