//! Flink's `DECIMAL` division: `DECIMAL(p1, s1) / DECIMAL(p2, s2)` is
//! `DECIMAL(p1 - s1 + s2 + s, s)` with `s = max(6, s1 + p2 + 1)` (both capped at 38, the
//! scale kept at 6 or more), rounded half up; an integer operand counts as
//! `DECIMAL(3|5|10|19, 0)`. A quotient that does not fit the precision is NULL, as in
//! Flink. DataFusion's division keeps fewer digits and truncates.

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Decimal128Type, i256};
use arrow::error::ArrowError;
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The decimal an exact numeric type counts as in Flink's decimal arithmetic.
pub fn as_decimal(t: &DataType) -> Option<(u8, i8)> {
    match t {
        DataType::Int8 => Some((3, 0)),
        DataType::Int16 => Some((5, 0)),
        DataType::Int32 => Some((10, 0)),
        DataType::Int64 => Some((19, 0)),
        DataType::Decimal128(p, s) => Some((*p, *s)),
        _ => None,
    }
}

/// Flink's result type of `l / r`, when it is a decimal division (one side `DECIMAL`, the
/// other `DECIMAL` or an integer).
pub fn division_type(l: &DataType, r: &DataType) -> Option<DataType> {
    if !matches!(l, DataType::Decimal128(..)) && !matches!(r, DataType::Decimal128(..)) {
        return None;
    }
    let ((p1, s1), (p2, s2)) = (as_decimal(l)?, as_decimal(r)?);
    let (p1, s1, p2, s2) = (p1 as i32, s1 as i32, p2 as i32, s2 as i32);
    let mut scale = 6.max(s1 + p2 + 1);
    let mut precision = p1 - s1 + s2 + scale;
    if precision > 38 {
        scale = 6.max(38 - (precision - scale));
        precision = 38;
    }
    Some(DataType::Decimal128(precision as u8, scale as i8))
}

/// The function `l / r` is rewritten to for decimal operands.
pub static DIVIDE: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(FlinkDivide::default())));

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FlinkDivide {
    signature: Signature,
}

impl Default for FlinkDivide {
    fn default() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for FlinkDivide {
    fn name(&self) -> &str {
        "flink_decimal_divide"
    }

    /// Named like the division it replaces.
    fn schema_name(&self, args: &[datafusion::prelude::Expr]) -> Result<String> {
        Ok(format!(
            "{} / {}",
            args[0].schema_name(),
            args[1].schema_name()
        ))
    }

    fn display_name(&self, args: &[datafusion::prelude::Expr]) -> Result<String> {
        Ok(format!("{} / {}", args[0], args[1]))
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match division_type(&args[0], &args[1]) {
            Some(t) => Ok(t),
            None => plan_err!("decimal division of {} by {}", args[0], args[1]),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let DataType::Decimal128(precision, scale) = args.return_field.data_type().clone() else {
            return plan_err!("decimal division returns a decimal");
        };
        let rows = args.number_rows;
        let decimals = |v: &ColumnarValue| -> Result<(ArrayRef, i8)> {
            let array = v.to_array(rows)?;
            let (p, s) = as_decimal(array.data_type()).unwrap_or((38, 0));
            let array = arrow::compute::cast(&array, &DataType::Decimal128(p, s))?;
            Ok((array, s))
        };
        let (l, s1) = decimals(&args.args[0])?;
        let (r, s2) = decimals(&args.args[1])?;
        let (l, r) = (
            l.as_primitive::<Decimal128Type>(),
            r.as_primitive::<Decimal128Type>(),
        );
        // l / r at `scale`: (l * 10^(scale - s1 + s2)) / r, rounded half up. The power of
        // ten scales the dividend up, or the divisor when the shift is negative; it is the
        // same for every row (at most 10^76, within i256).
        let shift = scale as i32 - s1 as i32 + s2 as i32;
        let ten = i256::from_i128(10);
        let limit = ten.wrapping_pow(precision as u32);
        let factor = ten.wrapping_pow(shift.unsigned_abs());
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            if l.is_null(i) || r.is_null(i) {
                out.push(None);
                continue;
            }
            let (n, d) = (i256::from_i128(l.value(i)), i256::from_i128(r.value(i)));
            if d == i256::ZERO {
                return Err(ArrowError::DivideByZero.into());
            }
            let scaled = if shift >= 0 {
                n.checked_mul(factor).map(|n| (n, d))
            } else {
                d.checked_mul(factor).map(|d| (n, d))
            };
            let Some((n, d)) = scaled else {
                out.push(None);
                continue;
            };
            let (q, rem) = (n.wrapping_div(d), n.wrapping_rem(d));
            let rounded = if rem.wrapping_abs().wrapping_mul(i256::from_i128(2)) >= d.wrapping_abs()
            {
                if (n < i256::ZERO) == (d < i256::ZERO) {
                    q.wrapping_add(i256::ONE)
                } else {
                    q.wrapping_sub(i256::ONE)
                }
            } else {
                q
            };
            out.push((rounded.wrapping_abs() < limit).then(|| rounded.as_i128()));
        }
        let array = Decimal128Array::from(out).with_precision_and_scale(precision, scale)?;
        Ok(ColumnarValue::Array(Arc::new(array)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_types_are_flinks() {
        let t = |l: DataType, r: DataType| division_type(&l, &r).unwrap().to_string();
        assert_eq!(
            t(DataType::Decimal128(3, 1), DataType::Int32),
            "Decimal128(14, 12)"
        );
        assert_eq!(
            t(DataType::Int32, DataType::Decimal128(2, 1)),
            "Decimal128(17, 6)"
        );
        assert_eq!(
            t(DataType::Decimal128(5, 2), DataType::Int32),
            "Decimal128(16, 13)"
        );
        assert_eq!(division_type(&DataType::Int32, &DataType::Int32), None);
    }
}
