//! `table.local-time-zone`: the session zone in which `TIMESTAMP_LTZ` values (instants,
//! stored as UTC) meet local date-times — casts to and from `STRING`, `TIMESTAMP` and
//! `DATE`, `FROM_UNIXTIME`, `UNIX_TIMESTAMP`, `DATE_FORMAT`, `LOCALTIMESTAMP`,
//! `CURRENT_DATE`. `'default'`, Flink's default, is the machine's zone (`TZ`, else the
//! system's setting).
//!
//! The planner rewrites such casts on the logical plan ([`crate::flink_types`]): an instant
//! becomes the session zone's wall-clock time ([`LOCAL_TIME`]) before it is cast to a local
//! value, and a local value is cast to an instant of the session zone (Arrow reads a
//! zone-less timestamp as that zone's wall-clock time) and relabelled to UTC.

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::logical_expr::{
    Cast, ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::{Arc, LazyLock};

/// The configuration key.
pub const KEY: &str = "table.local-time-zone";

/// The Arrow zone of a Flink zone id: a region (`Asia/Shanghai`), `UTC`, an offset
/// (`GMT+08:00`, `UTC-8`, `+08:00`), or `default`.
pub fn resolve(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.eq_ignore_ascii_case("default") {
        return Ok(system());
    }
    if let Some(offset) = crate::flink_scalars::zone(name) {
        let secs = offset.local_minus_utc();
        if secs == 0 {
            return Ok("UTC".into());
        }
        let sign = if secs < 0 { '-' } else { '+' };
        let secs = secs.abs();
        return Ok(format!("{sign}{:02}:{:02}", secs / 3600, secs % 3600 / 60));
    }
    match name.parse::<chrono_tz::Tz>() {
        Ok(tz) => Ok(tz.name().to_string()),
        Err(_) => Err(format!(
            "invalid value '{name}' for '{KEY}': expected a zone id such as 'Asia/Shanghai', \
             'UTC' or 'GMT+08:00', or 'default' (the machine's zone)"
        )),
    }
}

/// The machine's zone: `TZ` when it names one, else the system setting, else UTC.
fn system() -> String {
    std::env::var("TZ")
        .ok()
        .map(|tz| tz.trim_start_matches(':').to_string())
        .filter(|tz| !tz.is_empty() && !tz.eq_ignore_ascii_case("default"))
        .and_then(|tz| resolve(&tz).ok())
        .or_else(|| {
            iana_time_zone::get_timezone()
                .ok()
                .and_then(|tz| resolve(&tz).ok())
        })
        .unwrap_or_else(|| "UTC".into())
}

/// Whether `zone` (a resolved zone) is UTC: then instants and local values coincide.
pub fn is_utc(zone: &str) -> bool {
    matches!(
        zone,
        "UTC" | "Etc/UTC" | "Etc/UCT" | "UCT" | "Zulu" | "Etc/Zulu" | "Universal"
    )
}

fn timestamp(unit: TimeUnit, zone: &str) -> DataType {
    DataType::Timestamp(unit, Some(zone.into()))
}

fn cast(e: Expr, to: DataType) -> Expr {
    Expr::Cast(Cast::new(Box::new(e), to))
}

/// `e`, an instant of `unit`, as the wall-clock time of `zone` (`TIMESTAMP`).
pub fn local(e: Expr, unit: TimeUnit, zone: &str) -> Expr {
    LOCAL_TIME.call(vec![cast(e, timestamp(unit, zone))])
}

/// `weir_local_time(instant)`: the wall-clock time of an instant in the zone of its type
/// (Arrow's cast to a zone-less timestamp keeps the UTC wall-clock time instead).
pub static LOCAL_TIME: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(LocalTime::default())));

#[derive(Debug, PartialEq, Eq, Hash)]
struct LocalTime {
    signature: Signature,
}

impl Default for LocalTime {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for LocalTime {
    fn name(&self) -> &str {
        "weir_local_time"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::common::Result<DataType> {
        match &args[0] {
            DataType::Timestamp(unit, _) => Ok(DataType::Timestamp(*unit, None)),
            other => datafusion::common::plan_err!("weir_local_time of a {other}"),
        }
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        use arrow::array::{Array, AsArray, PrimitiveArray};
        use arrow::datatypes::{
            ArrowTimestampType, TimestampMicrosecondType, TimestampMillisecondType,
            TimestampNanosecondType, TimestampSecondType,
        };
        use chrono::{Offset, TimeZone};
        fn shift<T: ArrowTimestampType>(
            a: &dyn Array,
            tz: &arrow::array::timezone::Tz,
        ) -> PrimitiveArray<T> {
            let per_second = match T::UNIT {
                TimeUnit::Second => 1,
                TimeUnit::Millisecond => 1_000,
                TimeUnit::Microsecond => 1_000_000,
                TimeUnit::Nanosecond => 1_000_000_000,
            };
            a.as_primitive::<T>().unary(|v| {
                let seconds = v.div_euclid(per_second);
                let offset = chrono::DateTime::from_timestamp(seconds, 0)
                    .map(|utc| {
                        tz.offset_from_utc_datetime(&utc.naive_utc())
                            .fix()
                            .local_minus_utc() as i64
                    })
                    .unwrap_or(0);
                v + offset * per_second
            })
        }
        let input = args.args[0].to_array(args.number_rows)?;
        let DataType::Timestamp(unit, Some(zone)) = input.data_type().clone() else {
            return datafusion::common::exec_err!("weir_local_time of {}", input.data_type());
        };
        let tz: arrow::array::timezone::Tz = zone.parse()?;
        let out: arrow::array::ArrayRef = match unit {
            TimeUnit::Second => Arc::new(shift::<TimestampSecondType>(&input, &tz)),
            TimeUnit::Millisecond => Arc::new(shift::<TimestampMillisecondType>(&input, &tz)),
            TimeUnit::Microsecond => Arc::new(shift::<TimestampMicrosecondType>(&input, &tz)),
            TimeUnit::Nanosecond => Arc::new(shift::<TimestampNanosecondType>(&input, &tz)),
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// A cast with the session zone applied, or `None` when `from` → `to` does not cross
/// between instants and local values.
pub fn zoned_cast(e: Expr, from: &DataType, to: &DataType, zone: &str) -> Option<Expr> {
    match (from, to) {
        // An instant to a local value: relabel it to the session zone first, Arrow then
        // takes that zone's wall-clock time.
        (
            DataType::Timestamp(unit, Some(_)),
            DataType::Timestamp(_, None)
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Utf8
            | DataType::Utf8View
            | DataType::LargeUtf8,
        ) => Some(cast(local(e, *unit, zone), to.clone())),
        // A local value to an instant: read it in the session zone, then relabel to UTC.
        (
            DataType::Timestamp(_, None)
            | DataType::Date32
            | DataType::Date64
            | DataType::Utf8
            | DataType::Utf8View
            | DataType::LargeUtf8,
            DataType::Timestamp(unit, Some(_)),
        ) => Some(cast(cast(e, timestamp(*unit, zone)), to.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_ids_resolve_as_flink_reads_them() {
        assert_eq!(resolve("Asia/Shanghai").unwrap(), "Asia/Shanghai");
        assert_eq!(resolve("UTC").unwrap(), "UTC");
        assert_eq!(resolve("GMT+08:00").unwrap(), "+08:00");
        assert_eq!(resolve("UTC-8").unwrap(), "-08:00");
        assert_eq!(resolve("GMT").unwrap(), "UTC");
        let bad = resolve("Mars/Olympus").unwrap_err();
        assert!(
            bad.contains("'Mars/Olympus'") && bad.contains("Asia/Shanghai"),
            "{bad}"
        );
        assert!(resolve("default").is_ok());
    }
}
