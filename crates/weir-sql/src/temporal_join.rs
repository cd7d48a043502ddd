//! Flink's event-time temporal joins: `FROM o JOIN versioned FOR SYSTEM_TIME AS OF o.ts AS
//! v ON o.k = v.k`, each row of `o` joined with the version of `v` valid at its time.
//!
//! DataFusion plans a table's `FOR SYSTEM_TIME AS OF` as if it were not there, so before
//! planning each one becomes a marker in its join's condition:
//!
//! ```sql
//! FROM o JOIN versioned AS v ON o.k = v.k AND weir_temporal(o.ts, v.c1, v.c2, …)
//! ```
//!
//! (every column of the versioned table: reading both sides keeps the marker in the
//! join's condition, and no column — the version time above all — is pruned away). The streaming planner turns a join with the marker into a temporal
//! join; evaluated anywhere else (batch mode), the marker fails, as Flink's batch mode
//! refuses temporal joins.

use arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, JoinConstraint, JoinOperator, ObjectName, Query, Select, SetExpr,
    TableFactor, TableVersion,
};

/// The marker's name.
pub const MARKER: &str = "weir_temporal";

/// The marker function (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Temporal {
    signature: Signature,
}

impl Temporal {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(Temporal {
            signature: Signature::variadic_any(Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for Temporal {
    fn name(&self) -> &str {
        MARKER
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!(
            "a temporal join (FOR SYSTEM_TIME AS OF) runs in streaming mode only, as in Flink"
        )
    }
}

/// The tables of `query` read `FOR SYSTEM_TIME AS OF` (to find their columns).
pub fn versioned_tables(query: &mut Query) -> Vec<ObjectName> {
    let mut found = Vec::new();
    let _ = walk(query, &mut |_, relation| {
        if let TableFactor::Table {
            name,
            version: Some(TableVersion::ForSystemTimeAsOf(_)),
            ..
        } = relation
        {
            found.push(name.clone());
        }
        Ok(())
    });
    found
}

/// Rewrites every `FOR SYSTEM_TIME AS OF` of `query` into its join's marker;
/// `columns_of(table)` names the columns of a versioned table.
pub fn rewrite(
    query: &mut Query,
    columns_of: &dyn Fn(&ObjectName) -> Option<Vec<String>>,
) -> Result<(), String> {
    walk(query, &mut |join_operator, relation| {
        let TableFactor::Table {
            name,
            alias,
            version: version @ Some(TableVersion::ForSystemTimeAsOf(_)),
            ..
        } = relation
        else {
            return Ok(());
        };
        let Some(TableVersion::ForSystemTimeAsOf(time)) = version.take() else {
            unreachable!("matched above")
        };
        let Some(join_operator) = join_operator else {
            return Err(format!(
                "{name} FOR SYSTEM_TIME AS OF …: a temporal join joins a table read FOR \
                 SYSTEM_TIME AS OF to the table before it (FROM o JOIN v FOR SYSTEM_TIME AS OF o.ts ON …)"
            ));
        };
        let Some(columns) = columns_of(name) else {
            return Ok(()); // an unknown table: planning names it
        };
        let qualifier = match alias {
            Some(a) => a.name.clone(),
            None => name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .cloned()
                .unwrap_or_else(|| Ident::new(name.to_string())),
        };
        let versioned = columns
            .into_iter()
            .map(|c| Expr::CompoundIdentifier(vec![qualifier.clone(), Ident::with_quote('`', c)]));
        let marker = Expr::Function(Function {
            name: ObjectName::from(vec![Ident::new(MARKER)]),
            uses_odbc_syntax: false,
            parameters: FunctionArguments::None,
            args: FunctionArguments::List(FunctionArgumentList {
                duplicate_treatment: None,
                args: std::iter::once(time)
                    .chain(versioned)
                    .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                    .collect(),
                clauses: Vec::new(),
            }),
            filter: None,
            null_treatment: None,
            over: None,
            within_group: Vec::new(),
        });
        match join_operator {
            JoinOperator::Join(JoinConstraint::On(on))
            | JoinOperator::Inner(JoinConstraint::On(on))
            | JoinOperator::Left(JoinConstraint::On(on))
            | JoinOperator::LeftOuter(JoinConstraint::On(on)) => {
                *on = Expr::BinaryOp {
                    left: Box::new(on.clone()),
                    op: BinaryOperator::And,
                    right: Box::new(marker),
                };
                Ok(())
            }
            _ => Err(format!(
                "{name} FOR SYSTEM_TIME AS OF …: a temporal join is a JOIN or LEFT JOIN … ON \
                 with the versioned table's key (as in Flink)"
            )),
        }
    })
}

/// What [`walk`] calls: a table factor and the operator of the join it is the right side
/// of (none for the first table of a `FROM`).
type Visit<'a> = dyn FnMut(Option<&mut JoinOperator>, &mut TableFactor) -> Result<(), String> + 'a;

/// Calls `f` with every table factor of `query` (also in subqueries of `FROM` and in
/// `WITH`), and the operator of the join it is the right side of.
fn walk(query: &mut Query, f: &mut Visit<'_>) -> Result<(), String> {
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            walk(&mut cte.query, f)?;
        }
    }
    set_expr(&mut query.body, f)
}

fn set_expr(body: &mut SetExpr, f: &mut Visit<'_>) -> Result<(), String> {
    match body {
        SetExpr::Select(select) => self::select(select, f),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left, f)?;
            set_expr(right, f)
        }
        SetExpr::Query(q) => walk(q, f),
        _ => Ok(()),
    }
}

fn select(select: &mut Select, f: &mut Visit<'_>) -> Result<(), String> {
    for t in &mut select.from {
        factor(None, &mut t.relation, f)?;
        for j in &mut t.joins {
            factor(Some(&mut j.join_operator), &mut j.relation, f)?;
        }
    }
    Ok(())
}

fn factor(
    join_operator: Option<&mut JoinOperator>,
    relation: &mut TableFactor,
    f: &mut Visit<'_>,
) -> Result<(), String> {
    match relation {
        TableFactor::Derived { subquery, .. } => walk(subquery, f),
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => {
            factor(None, &mut table_with_joins.relation, f)?;
            for j in &mut table_with_joins.joins {
                factor(Some(&mut j.join_operator), &mut j.relation, f)?;
            }
            Ok(())
        }
        other => f(join_operator, other),
    }
}
