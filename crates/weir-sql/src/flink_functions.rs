//! Flink's built-in functions that are DataFusion expressions under other names, rewritten
//! on the AST with Flink's argument order, result types and numbering: `REGEXP_EXTRACT`,
//! `REGEXP_REPLACE`, `REGEXP`, `SPLIT_INDEX`, `DATE_FORMAT`, conditionals (`IF`, `IFNULL`),
//! `LOCATE`, `TO_BASE64`/`FROM_BASE64`, `SHA2`, date parts (`YEAR` … `DAYOFWEEK`, `HOUR`, `MINUTE`, `SECOND`, `EXTRACT`
//! as `BIGINT`, Sunday = 1), `TIMESTAMPADD`, `TIMESTAMPDIFF`, `FLOOR`/`CEIL(t TO unit)`,
//! `TO_DATE`, `TO_TIMESTAMP`, `UNIX_TIMESTAMP` and `FROM_UNIXTIME` (Java date patterns).

use sqlparser::ast::{CeilFloorKind, DateTimeField, Expr};

/// Names this module rewrites, for `SHOW FUNCTIONS`.
pub const NAMES: &[&str] = &[
    "cardinality",
    "concat",
    "date_format",
    "dayofmonth",
    "dayofweek",
    "dayofyear",
    "decode",
    "encode",
    "from_base64",
    "from_unixtime",
    "hour",
    "if",
    "ifnull",
    "listagg",
    "locate",
    "minute",
    "overlay",
    "month",
    "quarter",
    "regexp",
    "regexp_extract",
    "regexp_replace",
    "second",
    "sha2",
    "split_index",
    "timestampadd",
    "timestampdiff",
    "to_base64",
    "to_date",
    "to_timestamp",
    "unix_timestamp",
    "week",
    "year",
];

/// A string literal's text.
fn literal(e: &Expr) -> Option<&str> {
    match e {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::SingleQuotedString(s) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// The unit of `TIMESTAMPADD`/`TIMESTAMPDIFF` (written as a bare word).
fn unit(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(i) => Some(i.value.to_ascii_uppercase()),
        _ => None,
    }
    .map(|u| u.trim_start_matches("SQL_TSI_").to_string())
}

/// Milliseconds since the epoch of a timestamp expression.
fn epoch_ms(t: &str) -> String {
    format!("CAST(arrow_cast({t}, 'Timestamp(Millisecond, None)') AS BIGINT)")
}

/// The DataFusion text of Flink's `name(args)`, where this module rewrites it. `a` are the
/// arguments as text (parenthesized), `args` the expressions.
pub fn rewrite_call(name: &str, args: &[Expr], a: &[String]) -> Option<String> {
    let strftime = |i: usize| literal(args.get(i)?).map(crate::functions::java_to_strftime);
    Some(match (name, a.len()) {
        // Group `n` of the first match (0, the default: the whole match). The pattern is
        // wrapped in a group so that the whole match is group 1 of DataFusion's
        // `regexp_match`.
        ("REGEXP_EXTRACT", 2 | 3) => format!(
            "array_element(regexp_match({}, concat('(', {}, ')')), {} + 1)",
            a[0],
            a[1],
            a.get(2).map_or("0", String::as_str)
        ),
        // Every match is replaced, and the replacement is literal text (`$1` is not a
        // group reference in Flink).
        ("REGEXP_REPLACE", 3) => format!(
            "regexp_replace({}, {}, replace({}, '$', '$$'), 'g')",
            a[0], a[1], a[2]
        ),
        // A match anywhere in the string (Java's `find`).
        ("REGEXP", 2) => format!("regexp_like({}, {})", a[0], a[1]),
        // Part `n` (from 0) split at a literal separator: NULL when out of range or when
        // the string is empty; an empty part is ''.
        ("SPLIT_INDEX", 3) => format!(
            "CASE WHEN {s} = '' THEN NULL \
             WHEN {i} >= 0 AND {i} < array_length(string_to_array({s}, {d})) \
             THEN split_part({s}, {d}, CAST({i} AS BIGINT) + 1) END",
            s = a[0],
            d = a[1],
            i = a[2]
        ),
        ("DATE_FORMAT", 2) => format!("to_char({}, '{}')", a[0], strftime(1)?),
        ("IF", 3) => format!("CASE WHEN {} THEN {} ELSE {} END", a[0], a[1], a[2]),
        ("IFNULL", 2) => format!("coalesce({}, {})", a[0], a[1]),
        // Position of the first occurrence (from 1, 0 when absent), searching from `pos`.
        ("LOCATE", 2) => format!("CAST(strpos({}, {}) AS INT)", a[1], a[0]),
        ("LOCATE", 3) => format!(
            "CAST(CASE WHEN strpos(substr({s}, {p}), {n}) = 0 THEN 0 \
             ELSE strpos(substr({s}, {p}), {n}) + {p} - 1 END AS INT)",
            n = a[0],
            s = a[1],
            p = a[2]
        ),
        // Base64 with padding (DataFusion's encoding leaves it out).
        ("TO_BASE64", 1) => format!(
            "concat(encode(CAST({s} AS BYTEA), 'base64'), repeat('=', (3 - octet_length({s}) % 3) % 3))",
            s = a[0]
        ),
        ("FROM_BASE64", 1) => format!("CAST(decode(rtrim({}, '='), 'base64') AS STRING)", a[0]),
        ("SHA2", 2) => {
            let bits = args[1].to_string();
            if !["224", "256", "384", "512"].contains(&bits.as_str()) {
                return None;
            }
            format!("encode(digest({}, 'sha{bits}'), 'hex')", a[0])
        }
        (
            "YEAR" | "QUARTER" | "MONTH" | "WEEK" | "DAYOFYEAR" | "DAYOFMONTH" | "HOUR" | "MINUTE"
            | "SECOND",
            1,
        ) => {
            let part = match name {
                "DAYOFYEAR" => "doy",
                "DAYOFMONTH" => "day",
                other => &other.to_ascii_lowercase(),
            };
            format!("CAST(date_part('{part}', {}) AS BIGINT)", a[0])
        }
        // Sunday = 1 … Saturday = 7.
        ("DAYOFWEEK", 1) => format!("CAST(date_part('dow', {}) + 1 AS BIGINT)", a[0]),
        // `n` units as an interval (`'5 hour'`), added to the timestamp.
        ("TIMESTAMPADD", 3) => {
            let (n, u) = match unit(&args[0])?.as_str() {
                "QUARTER" => (format!("{} * 3", a[1]), "month".to_string()),
                u @ ("SECOND" | "MINUTE" | "HOUR" | "DAY" | "WEEK" | "MONTH" | "YEAR") => {
                    (a[1].clone(), u.to_ascii_lowercase())
                }
                _ => return None,
            };
            format!(
                "{} + arrow_cast(concat(CAST({n} AS STRING), ' {u}'), 'Interval(MonthDayNano)')",
                a[2]
            )
        }
        // NULL when any argument is NULL (DataFusion's `concat` skips NULLs).
        ("CONCAT", n) if n > 0 => format!("({})", a.join(" || ")),
        ("TIMESTAMPDIFF", 3) => {
            let u = unit(&args[0])?;
            let (t1, t2) = (&a[1], &a[2]);
            let ms = match u.as_str() {
                "SECOND" => Some(1_000),
                "MINUTE" => Some(60_000),
                "HOUR" => Some(3_600_000),
                "DAY" => Some(86_400_000),
                "WEEK" => Some(7 * 86_400_000),
                _ => None,
            };
            if let Some(ms) = ms {
                format!("CAST(({} - {}) / {ms} AS INT)", epoch_ms(t2), epoch_ms(t1))
            } else {
                let months_per = match u.as_str() {
                    "MONTH" => 1,
                    "QUARTER" => 3,
                    "YEAR" => 12,
                    _ => return None,
                };
                // Whole months: the month difference, less one where the later value's
                // day and time of month come before the earlier one's.
                let month =
                    |t: &str| format!("(date_part('year', {t}) * 12 + date_part('month', {t}))");
                let rest = |t: &str| {
                    format!(
                        "({} - {})",
                        epoch_ms(t),
                        epoch_ms(&format!("date_trunc('month', {t})"))
                    )
                };
                let (m, r1, r2) = (
                    format!("({} - {})", month(t2), month(t1)),
                    rest(t1),
                    rest(t2),
                );
                format!(
                    "CAST(CAST(CASE WHEN {m} > 0 AND {r2} < {r1} THEN {m} - 1 \
                     WHEN {m} < 0 AND {r2} > {r1} THEN {m} + 1 ELSE {m} END AS BIGINT) \
                     / {months_per} AS INT)"
                )
            }
        }
        ("TO_DATE", 1) => format!("CAST({} AS DATE)", a[0]),
        ("TO_DATE", 2) => format!("to_date({}, '{}')", a[0], strftime(1)?),
        ("TO_TIMESTAMP", 1) => format!("CAST({} AS TIMESTAMP(3))", a[0]),
        ("TO_TIMESTAMP", 2) => format!(
            "CAST(to_timestamp({}, '{}') AS TIMESTAMP(3))",
            a[0],
            strftime(1)?
        ),
        // Text is read as a local date-time of the session zone.
        ("UNIX_TIMESTAMP", 0) => "CAST(to_unixtime(now()) AS BIGINT)".to_string(),
        ("UNIX_TIMESTAMP", 1) => format!(
            "CAST(to_unixtime(arrow_cast(CAST({} AS TIMESTAMP(3)), '{}')) AS BIGINT)",
            a[0],
            ltz_type()
        ),
        ("UNIX_TIMESTAMP", 2) => format!(
            "CAST(to_unixtime(arrow_cast(to_timestamp({}, '{}'), '{}')) AS BIGINT)",
            a[0],
            strftime(1)?,
            ltz_type()
        ),
        // Seconds (precision 0) or milliseconds (3) since the epoch, as TIMESTAMP_LTZ(3).
        ("TO_TIMESTAMP_LTZ", 1) => epoch_to_ltz(&a[0], "3")?,
        ("TO_TIMESTAMP_LTZ", 2) => epoch_to_ltz(&a[0], &args[1].to_string())?,
        ("NOW", 0) => current_timestamp(),
        // Flink's charset forms (DataFusion's `encode`/`decode` are base64/hex).
        ("ENCODE", 2) => format!("flink_encode({}, {})", a[0], a[1]),
        ("DECODE", 2) => format!("flink_decode({}, {})", a[0], a[1]),
        // Flink's CARDINALITY is an INT.
        ("CARDINALITY", 1) => format!("CAST(cardinality({}) AS INT)", a[0]),
        ("LISTAGG", 1) => format!("CAST(string_agg({}, ',') AS STRING)", a[0]),
        ("LISTAGG", 2) => format!("CAST(string_agg({}, {}) AS STRING)", a[0], a[1]),
        // Shown in the session zone (`to_char` of an instant, see `local_time_zone`).
        ("FROM_UNIXTIME", 1) => format!(
            "to_char({}, '%Y-%m-%d %H:%M:%S')",
            epoch_to_ltz(&a[0], "0")?
        ),
        ("FROM_UNIXTIME", 2) => {
            format!("to_char({}, '{}')", epoch_to_ltz(&a[0], "0")?, strftime(1)?)
        }
        _ => return None,
    })
}

/// Weir's `TIMESTAMP_LTZ(3)` as `arrow_cast` spells it.
fn ltz_type() -> String {
    arrow::datatypes::DataType::Timestamp(
        arrow::datatypes::TimeUnit::Millisecond,
        Some("UTC".into()),
    )
    .to_string()
}

/// `TO_TIMESTAMP_LTZ(n, precision)`: `n` seconds (0), milliseconds (3), microseconds (6)
/// or nanoseconds (9) since the epoch, as a `TIMESTAMP_LTZ(3)`.
fn epoch_to_ltz(n: &str, precision: &str) -> Option<String> {
    let millis = match precision {
        "0" => format!("CAST(CAST({n} AS DECIMAL(38, 3)) * 1000 AS BIGINT)"),
        "3" => format!("CAST({n} AS BIGINT)"),
        "6" => format!("CAST({n} / 1000 AS BIGINT)"),
        "9" => format!("CAST({n} / 1000000 AS BIGINT)"),
        _ => return None,
    };
    Some(format!("arrow_cast({millis}, '{}')", ltz_type()))
}

/// `CURRENT_TIMESTAMP`: the query's start as a `TIMESTAMP_LTZ(3)`.
pub fn current_timestamp() -> String {
    format!(
        "arrow_cast(arrow_cast(now(), 'Int64') / 1000000, '{}')",
        ltz_type()
    )
}

fn unit_name(field: &DateTimeField) -> Option<&'static str> {
    Some(match field {
        DateTimeField::Year | DateTimeField::Years => "year",
        DateTimeField::Quarter => "quarter",
        DateTimeField::Month | DateTimeField::Months => "month",
        DateTimeField::Week(_) | DateTimeField::Weeks => "week",
        DateTimeField::Day | DateTimeField::Days => "day",
        DateTimeField::Hour | DateTimeField::Hours => "hour",
        DateTimeField::Minute | DateTimeField::Minutes => "minute",
        DateTimeField::Second | DateTimeField::Seconds => "second",
        _ => return None,
    })
}

/// `EXTRACT(part FROM t)` (a `BIGINT`; `DOW` counts Sunday as 1, as Flink does) and
/// `FLOOR`/`CEIL(t TO unit)`, as DataFusion text.
pub fn rewrite_special(e: &Expr) -> Option<String> {
    match e {
        // `TIMESTAMP '2024-01-01 00:00:00'` is a TIMESTAMP(0) in Flink: the precision is
        // the number of fractional digits written (DataFusion: always nanoseconds).
        Expr::TypedString(t)
            if matches!(
                t.data_type,
                sqlparser::ast::DataType::Timestamp(None, sqlparser::ast::TimezoneInfo::None)
            ) =>
        {
            let sqlparser::ast::Value::SingleQuotedString(v) = &t.value.value else {
                return None;
            };
            let digits = v.split_once('.').map_or(0, |(_, f)| f.trim().len()).min(9);
            Some(format!(
                "CAST('{}' AS TIMESTAMP({digits}))",
                v.replace('\'', "''")
            ))
        }
        // Flink leaves the text as it is when the position is outside it, and drops the
        // rest of the text when the length is 0.
        Expr::Overlay {
            expr,
            overlay_what,
            overlay_from,
            overlay_for,
        } => {
            let (s, r, p) = (
                format!("({expr})"),
                format!("({overlay_what})"),
                format!("({overlay_from})"),
            );
            let l = overlay_for
                .as_ref()
                .map_or(format!("char_length({r})"), |l| format!("({l})"));
            Some(format!(
                "CASE WHEN {p} < 1 OR {p} > char_length({s}) THEN {s} \
                 WHEN {l} = 0 THEN substr({s}, 1, {p} - 1) || {r} \
                 ELSE overlay({s} PLACING {r} FROM {p} FOR {l}) END"
            ))
        }
        Expr::Extract { field, expr, .. } => {
            let part = match field {
                DateTimeField::Dow | DateTimeField::DayOfWeek => {
                    return Some(format!("CAST(date_part('dow', ({expr})) + 1 AS BIGINT)"));
                }
                DateTimeField::Doy | DateTimeField::DayOfYear => "doy",
                other => unit_name(other)?,
            };
            Some(format!("CAST(date_part('{part}', ({expr})) AS BIGINT)"))
        }
        Expr::Floor {
            expr,
            field: CeilFloorKind::DateTimeField(field),
        } => Some(format!("date_trunc('{}', ({expr}))", unit_name(field)?)),
        Expr::Ceil {
            expr,
            field: CeilFloorKind::DateTimeField(field),
        } => {
            let u = unit_name(field)?;
            let floor = format!("date_trunc('{u}', ({expr}))");
            Some(format!(
                "CASE WHEN {floor} = ({expr}) THEN {floor} ELSE {floor} + INTERVAL '1' {u} END"
            ))
        }
        _ => None,
    }
}
