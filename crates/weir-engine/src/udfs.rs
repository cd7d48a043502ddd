//! Scalar functions Weir registers in every session, written against DataFusion's UDF API
//! (the same API users call through [`crate::Engine::register_udf`]).

use arrow::array::{Array, AsArray, Int64Array};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use std::sync::Arc;

/// `count_char(s, c)`: how many times the character `c` occurs in `s` (Nexmark q14).
pub fn count_char() -> ScalarUDF {
    create_udf(
        "count_char",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let rows = args
                .iter()
                .find_map(|a| match a {
                    ColumnarValue::Array(a) => Some(a.len()),
                    _ => None,
                })
                .unwrap_or(1);
            let text = args[0].clone().into_array(rows)?;
            let chars = args[1].clone().into_array(rows)?;
            let (text, chars) = (text.as_string::<i32>(), chars.as_string::<i32>());
            let counts: Int64Array = (0..rows)
                .map(|i| {
                    if text.is_null(i) || chars.is_null(i) {
                        return None;
                    }
                    let c = chars.value(i).chars().next()?;
                    Some(text.value(i).chars().filter(|x| *x == c).count() as i64)
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(counts)))
        }),
    )
}
