//! `CAST(x AS STRING)` as Flink writes values: `TRUE`/`FALSE`, doubles as Java's
//! `Double.toString` (`1.0`, `0.1`, `1.0E20`), timestamps as `yyyy-MM-dd HH:mm:ss` with as
//! many fractional digits as the type's precision (`TIMESTAMP(3)`: `.000`). Other types
//! cast as DataFusion does (their text already matches Flink's).

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, Float32Type, Float64Type, TimeUnit};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::Expr;

/// Whether DataFusion's text for `t` differs from Flink's.
pub fn needs_flink_text(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Boolean
            | DataType::Float32
            | DataType::Float64
            | DataType::Timestamp(..)
            | DataType::Time32(_)
            | DataType::Time64(_)
    )
}

/// The function `CAST(x AS STRING)` is rewritten to where [`needs_flink_text`].
pub static TO_STRING: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(FlinkToString::default())));

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FlinkToString {
    signature: Signature,
}

impl Default for FlinkToString {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

fn timestamp_text(t: &chrono::NaiveDateTime, digits: usize) -> String {
    let base = t.format("%Y-%m-%d %H:%M:%S").to_string();
    if digits == 0 {
        return base;
    }
    let nanos = format!("{:09}", t.and_utc().timestamp_subsec_nanos());
    format!("{base}.{}", &nanos[..digits])
}

fn digits(unit: &TimeUnit) -> usize {
    match unit {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 3,
        TimeUnit::Microsecond => 6,
        TimeUnit::Nanosecond => 9,
    }
}

/// Flink's text of every value of `array` (NULL stays NULL).
pub fn flink_text(array: &ArrayRef) -> Result<ArrayRef> {
    let n = array.len();
    let mut out = StringBuilder::with_capacity(n, n * 8);
    match array.data_type() {
        DataType::Boolean => {
            let a = array.as_boolean();
            for v in a.iter() {
                out.append_option(v.map(|b| if b { "TRUE" } else { "FALSE" }));
            }
        }
        DataType::Float64 => {
            for v in array.as_primitive::<Float64Type>().iter() {
                out.append_option(v.map(weir_common::java_text::double));
            }
        }
        DataType::Float32 => {
            for v in array.as_primitive::<Float32Type>().iter() {
                out.append_option(v.map(|v| weir_common::java_text::double(v as f64)));
            }
        }
        DataType::Timestamp(unit, _) => {
            // Wall-clock time of the value (a TIMESTAMP_LTZ's UTC time; the planner has
            // already turned it into the session zone's, see `local_time_zone`).
            let naive =
                arrow::compute::cast(array, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
            let naive = naive.as_primitive::<arrow::datatypes::TimestampNanosecondType>();
            for i in 0..n {
                if naive.is_null(i) {
                    out.append_null();
                    continue;
                }
                match naive.value_as_datetime(i) {
                    Some(t) => out.append_value(timestamp_text(&t, digits(unit))),
                    None => out.append_null(),
                }
            }
        }
        DataType::Time32(unit) | DataType::Time64(unit) => {
            let text = arrow::compute::cast(array, &DataType::Utf8)?;
            let places = match unit {
                TimeUnit::Second => 0,
                _ => 3.min(digits(unit)),
            };
            for v in text.as_string::<i32>().iter() {
                out.append_option(v.map(|s| {
                    let (hms, frac) = s.split_once('.').unwrap_or((s, ""));
                    if places == 0 {
                        hms.to_string()
                    } else {
                        format!("{hms}.{:0<places$}", &frac[..frac.len().min(places)])
                    }
                }));
            }
        }
        _ => return Ok(arrow::compute::cast(array, &DataType::Utf8)?),
    }
    Ok(Arc::new(out.finish()))
}

impl ScalarUDFImpl for FlinkToString {
    fn name(&self) -> &str {
        "flink_to_string"
    }

    /// Named like the cast it replaces (DataFusion names a cast after its operand).
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        Ok(args[0].schema_name().to_string())
    }

    fn display_name(&self, args: &[Expr]) -> Result<String> {
        Ok(format!("CAST({} AS STRING)", args[0]))
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match &args.args[0] {
            ColumnarValue::Array(a) => Ok(ColumnarValue::Array(flink_text(a)?)),
            ColumnarValue::Scalar(s) => {
                let text = flink_text(&s.to_array()?)?;
                Ok(ColumnarValue::Scalar(
                    datafusion::common::ScalarValue::try_from_array(&text, 0)?,
                ))
            }
        }
    }
}
