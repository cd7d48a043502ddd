//! Flink's `UNNEST` in a `FROM` clause: `FROM t CROSS JOIN UNNEST(t.arr) AS u(x)` (also
//! `JOIN … ON TRUE`, `LEFT JOIN … ON TRUE`, `WITH ORDINALITY`, arrays of rows and maps).
//!
//! DataFusion unnests in a select list; a lateral `UNNEST` table factor over a column
//! of the table before it is rewritten into one, as a derived table in `t`'s place:
//!
//! ```sql
//! (SELECT * EXCLUDE (__weir_unnest), weir_unnest_field(__weir_unnest, '0', '1') AS x
//!  FROM (SELECT t.*, UNNEST(weir_unnest_list(t.arr, false, false)) AS __weir_unnest
//!        FROM t) AS t) AS t
//! ```
//!
//! and references `u.x` become `t.x`. `weir_unnest_list` turns a map into its entries, and
//! for a `LEFT JOIN` an empty or `NULL` array into `[NULL]` (the row is kept, padded);
//! `weir_unnest_field` takes field `i` of an element that is a row (the alias names the
//! row's fields) or the element itself. `WITH ORDINALITY` unnests the positions
//! (`weir_unnest_list(…, true)`) next to the elements.

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, ListArray, new_null_array};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, Ident, JoinConstraint, JoinOperator, Query, Select,
    SetExpr, TableAlias, TableFactor, Value, VisitMut, VisitorMut,
};
use std::ops::ControlFlow;
use std::sync::Arc;

/// Name of the list function.
pub const LIST: &str = "weir_unnest_list";
/// Name of the field function.
pub const FIELD: &str = "weir_unnest_field";
const COLUMN: &str = "__weir_unnest";
const ORDINAL: &str = "__weir_ordinal";

/// Rewrites every `UNNEST` table factor of `query` (and of its subqueries in `FROM`).
pub fn rewrite_unnest_joins(query: &mut Query) -> Result<(), String> {
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            rewrite_unnest_joins(&mut cte.query)?;
        }
    }
    set_expr(&mut query.body)
}

fn set_expr(body: &mut SetExpr) -> Result<(), String> {
    match body {
        SetExpr::Select(select) => rewrite_select(select),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left)?;
            set_expr(right)
        }
        SetExpr::Query(q) => rewrite_unnest_joins(q),
        _ => Ok(()),
    }
}

fn is_unnest(f: &TableFactor) -> bool {
    matches!(f, TableFactor::Table { name, args: Some(_), .. }
        if name.to_string().eq_ignore_ascii_case("UNNEST"))
}

fn derived(f: &mut TableFactor) -> Result<(), String> {
    match f {
        TableFactor::Derived { subquery, .. } => rewrite_unnest_joins(subquery),
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => {
            derived(&mut table_with_joins.relation)?;
            for j in &mut table_with_joins.joins {
                derived(&mut j.relation)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn rewrite_select(select: &mut Select) -> Result<(), String> {
    let mut renames: Vec<(String, String)> = Vec::new();
    for t in &mut select.from {
        if is_unnest(&t.relation) {
            return Err(
                "UNNEST expands a column of the table before it: FROM t CROSS JOIN UNNEST(t.arr) AS u(x)"
                    .into(),
            );
        }
        derived(&mut t.relation)?;
        for j in &mut t.joins {
            derived(&mut j.relation)?;
        }
        while t.joins.first().is_some_and(|j| is_unnest(&j.relation)) {
            let join = t.joins.remove(0);
            let keep_empty = match &join.join_operator {
                JoinOperator::CrossJoin(JoinConstraint::None) => false,
                JoinOperator::Join(c) | JoinOperator::Inner(c) if is_on_true(c) => false,
                JoinOperator::Left(c) | JoinOperator::LeftOuter(c) if is_on_true(c) => true,
                _ => {
                    return Err(
                        "UNNEST is joined with CROSS JOIN, JOIN … ON TRUE or LEFT JOIN … ON TRUE"
                            .into(),
                    );
                }
            };
            let renamed = expand(&mut t.relation, join.relation, keep_empty)?;
            renames.push(renamed);
        }
        if t.joins.iter().any(|j| is_unnest(&j.relation)) {
            return Err(
                "UNNEST must directly follow the table whose column it expands (FROM t CROSS JOIN \
                 UNNEST(t.arr) AS u(x) JOIN …): join other tables after it"
                    .into(),
            );
        }
    }
    if !renames.is_empty() {
        // `u.x` is now `t.x`.
        struct Rename<'a>(&'a [(String, String)]);
        impl VisitorMut for Rename<'_> {
            type Break = ();
            fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
                if let Expr::CompoundIdentifier(parts) = e
                    && parts.len() == 2
                    && let Some((_, to)) = self.0.iter().find(|(from, _)| parts[0].value == *from)
                {
                    parts[0] = Ident::new(to.clone());
                }
                ControlFlow::Continue(())
            }
        }
        let _ = select.visit(&mut Rename(&renames));
    }
    Ok(())
}

fn is_on_true(c: &JoinConstraint) -> bool {
    matches!(c, JoinConstraint::On(Expr::Value(v)) if v.value == Value::Boolean(true))
}

/// Replaces `relation` by the derived table that expands `unnest` over it; returns the
/// rename of the `UNNEST`'s alias to the relation's name.
fn expand(
    relation: &mut TableFactor,
    unnest: TableFactor,
    keep_empty: bool,
) -> Result<(String, String), String> {
    let TableFactor::Table {
        args: Some(args),
        alias,
        with_ordinality,
        ..
    } = unnest
    else {
        unreachable!("checked by is_unnest");
    };
    let array = match args.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => e.clone(),
        _ => return Err("UNNEST takes one array or map".into()),
    };
    let Some(TableAlias {
        name: unnest_name,
        columns,
        ..
    }) = alias
    else {
        return Err(format!(
            "name UNNEST's columns: UNNEST({array}) AS u(x){}",
            if with_ordinality {
                " with the position last: AS u(x, pos)"
            } else {
                ""
            }
        ));
    };
    let mut columns: Vec<String> = columns.into_iter().map(|c| c.name.value).collect();
    let ordinal = if with_ordinality {
        let Some(name) = columns.pop().filter(|_| !columns.is_empty()) else {
            return Err(format!(
                "UNNEST({array}) WITH ORDINALITY names the element's columns and then the position: AS {unnest_name}(x, pos)"
            ));
        };
        Some(name)
    } else {
        None
    };
    if columns.is_empty() {
        return Err(format!(
            "name UNNEST's columns: UNNEST({array}) AS {unnest_name}(x)"
        ));
    }
    let name = match &*relation {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            a.name.value.clone()
        }
        TableFactor::Table {
            name, alias: None, ..
        } => name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.clone())
            .ok_or("UNNEST over an unnamed table")?,
        _ => return Err(
            "give the table before UNNEST an alias: FROM (…) AS t CROSS JOIN UNNEST(t.arr) AS u(x)"
                .into(),
        ),
    };
    let quoted = |s: &str| format!("`{}`", s.replace('`', "``"));
    let mut inner_items = vec![format!(
        "{}.*, UNNEST({LIST}({array}, {keep_empty}, false)) AS {COLUMN}",
        quoted(&name)
    )];
    let mut outer_items: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "{FIELD}({COLUMN}, '{i}', '{}') AS {}",
                columns.len(),
                quoted(c)
            )
        })
        .collect();
    let mut excluded = vec![COLUMN];
    if let Some(pos) = &ordinal {
        inner_items.push(format!(
            "UNNEST({LIST}({array}, {keep_empty}, true)) AS {ORDINAL}"
        ));
        outer_items.push(format!("{ORDINAL} AS {}", quoted(pos)));
        excluded.push(ORDINAL);
    }
    let text = format!(
        "SELECT * EXCLUDE ({}), {} FROM (SELECT {} FROM __weir_unnest_input) AS {}",
        excluded.join(", "),
        outer_items.join(", "),
        inner_items.join(", "),
        quoted(&name),
    );
    let mut statements = crate::parser::parse_script(&text).map_err(|e| e.to_string())?;
    let Some(crate::parser::WeirStatement::Select(mut outer)) =
        statements.pop().map(|s| s.statement)
    else {
        return Err("internal: UNNEST rewrite".into());
    };
    // Put the relation itself where the placeholder is.
    let SetExpr::Select(outer_select) = outer.body.as_mut() else {
        return Err("internal: UNNEST rewrite".into());
    };
    let TableFactor::Derived { subquery, .. } = &mut outer_select.from[0].relation else {
        return Err("internal: UNNEST rewrite".into());
    };
    let SetExpr::Select(inner_select) = subquery.body.as_mut() else {
        return Err("internal: UNNEST rewrite".into());
    };
    inner_select.from[0].relation = relation.clone();
    *relation = TableFactor::Derived {
        lateral: false,
        subquery: outer,
        alias: Some(TableAlias {
            explicit: true,
            name: Ident::new(name.clone()),
            columns: Vec::new(),
            at: None,
        }),
        sample: None,
    };
    Ok((unnest_name.value, name))
}

/// `weir_unnest_list(value, keep_empty, positions)`: the list to unnest: an array as it
/// is, a map as its entries (rows of key and value); with `keep_empty`, an empty or `NULL`
/// one as `[NULL]`; with `positions`, 1, 2, … in place of the elements.
#[derive(Debug, PartialEq, Eq, Hash)]
struct UnnestList {
    signature: Signature,
}

/// `weir_unnest_field(element, 'i', 'n')`: field `i` of a row element, or the element itself
/// when it is not a row and `n` (the number of names) is 1.
#[derive(Debug, PartialEq, Eq, Hash)]
struct UnnestField {
    signature: Signature,
}

/// Both functions.
pub fn udfs() -> [ScalarUDF; 2] {
    [
        ScalarUDF::new_from_impl(UnnestList {
            signature: Signature::any(3, Volatility::Immutable),
        }),
        ScalarUDF::new_from_impl(UnnestField {
            signature: Signature::any(3, Volatility::Immutable),
        }),
    ]
}

fn literal_bool(v: Option<&ScalarValue>) -> bool {
    matches!(v, Some(ScalarValue::Boolean(Some(true))))
}

/// A position, written as a string literal (integer literals become casts to Flink's INT
/// before DataFusion sees them, and casts are no literals when return types are found).
fn literal_usize(v: Option<&ScalarValue>) -> Option<usize> {
    match v? {
        ScalarValue::Utf8(Some(s)) => s.parse().ok(),
        _ => None,
    }
}

/// The value of a constant argument of a scalar function (the planner may hand it over as
/// a column of equal values).
pub(crate) fn constant(v: &ColumnarValue) -> Option<ScalarValue> {
    match v {
        ColumnarValue::Scalar(s) => Some(s.clone()),
        ColumnarValue::Array(a) if !a.is_empty() => ScalarValue::try_from_array(a, 0).ok(),
        ColumnarValue::Array(_) => None,
    }
}

impl ScalarUDFImpl for UnnestList {
    fn name(&self) -> &str {
        LIST
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        unreachable!("return_field_from_args is implemented")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let positions = literal_bool(args.scalar_arguments.get(2).copied().flatten());
        let item = match args.arg_fields[0].data_type() {
            _ if positions => Arc::new(Field::new("item", DataType::Int32, true)),
            DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
                item.clone()
            }
            DataType::Map(entries, _) => entries.clone(),
            other => return plan_err!("UNNEST expands an array or a map, not {other}"),
        };
        Ok(Arc::new(Field::new(LIST, DataType::List(item), true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let keep_empty = literal_bool(constant(&args.args[1]).as_ref());
        let positions = literal_bool(constant(&args.args[2]).as_ref());
        let value = args.args[0].clone().into_array(args.number_rows)?;
        let list: ListArray = match value.data_type() {
            DataType::Map(..) => {
                let map = value.as_map();
                let (field, offsets, entries, nulls, _) = map.clone().into_parts();
                ListArray::try_new(field, offsets, Arc::new(entries), nulls)?
            }
            _ => {
                let cast = arrow::compute::cast(
                    &value,
                    &DataType::List(match value.data_type() {
                        DataType::List(f)
                        | DataType::LargeList(f)
                        | DataType::FixedSizeList(f, _) => f.clone(),
                        other => return exec_err!("UNNEST expands an array or a map, not {other}"),
                    }),
                )?;
                cast.as_list::<i32>().clone()
            }
        };
        let DataType::List(out_item) = args.return_field.data_type() else {
            return exec_err!("{LIST}: unexpected return type");
        };
        // Per row: its elements (a range of `list`'s values) or, kept empty, one NULL.
        let mut take: Vec<Option<u32>> = Vec::new();
        let mut lengths = Vec::with_capacity(list.len());
        for row in 0..list.len() {
            let (start, end) = (list.value_offsets()[row], list.value_offsets()[row + 1]);
            let len = if list.is_valid(row) {
                (end - start) as usize
            } else {
                0
            };
            if len == 0 && keep_empty {
                take.push(None);
                lengths.push(1);
                continue;
            }
            take.extend((start..start + len as i32).map(|i| Some(i as u32)));
            lengths.push(len);
        }
        let values: ArrayRef = if positions {
            let mut ordinal = Vec::with_capacity(take.len());
            for len in &lengths {
                ordinal.extend(1..=*len as i32);
            }
            // A padded row's position is NULL.
            let nulls = NullBuffer::from(take.iter().map(|t| t.is_some()).collect::<Vec<_>>());
            Arc::new(Int32Array::new(ordinal.into(), Some(nulls)))
        } else if take.iter().all(|t| t.is_some()) && take.len() == list.values().len() {
            list.values().clone()
        } else if take.is_empty() {
            new_null_array(out_item.data_type(), 0)
        } else {
            let indices = arrow::array::UInt32Array::from(take);
            arrow::compute::take(list.values().as_ref(), &indices, None)?
        };
        Ok(ColumnarValue::Array(Arc::new(ListArray::try_new(
            out_item.clone(),
            OffsetBuffer::from_lengths(lengths),
            values,
            None,
        )?)))
    }
}

impl ScalarUDFImpl for UnnestField {
    fn name(&self) -> &str {
        FIELD
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        unreachable!("return_field_from_args is implemented")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let i = literal_usize(args.scalar_arguments.get(1).copied().flatten());
        let n = literal_usize(args.scalar_arguments.get(2).copied().flatten());
        let (Some(i), Some(n)) = (i, n) else {
            return plan_err!("{FIELD}: literal positions expected");
        };
        let t = match args.arg_fields[0].data_type() {
            DataType::Struct(fields) if i < fields.len() => fields[i].data_type().clone(),
            DataType::Struct(fields) => {
                return plan_err!(
                    "UNNEST names {n} columns, its rows have {} fields",
                    fields.len()
                );
            }
            t if n == 1 => t.clone(),
            t => {
                return plan_err!("UNNEST names {n} columns for elements of type {t} (one column)");
            }
        };
        Ok(Arc::new(Field::new(FIELD, t, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let i = literal_usize(constant(&args.args[1]).as_ref()).unwrap_or(0);
        let value = args.args[0].clone().into_array(args.number_rows)?;
        let Some(row) = value.as_struct_opt() else {
            return Ok(ColumnarValue::Array(value));
        };
        // A NULL row has NULL fields.
        let field = row.column(i).clone();
        let field = match row.nulls() {
            Some(nulls) => {
                let merged = NullBuffer::union(Some(nulls), field.nulls());
                arrow::array::make_array(field.into_data().into_builder().nulls(merged).build()?)
            }
            None => field,
        };
        Ok(ColumnarValue::Array(field))
    }
}
