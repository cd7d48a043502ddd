//! Numbers as Java writes them, which is how Flink writes values as text (`CAST(… AS
//! STRING)`, the json and csv formats): `Double.toString`, `Float.toString` and
//! `BigDecimal.toString`.

/// Java's `Double.toString(v)`: plain between 10^-3 and 10^7 (always a digit after the
/// point), otherwise `d.dddE±n`; the shortest digits that read back as `v`.
pub fn double(v: f64) -> String {
    floating(v, format!("{v}"), format!("{v:e}"))
}

/// Java's `Float.toString(v)` (the shortest digits that read back as the `f32`).
pub fn float(v: f32) -> String {
    floating(v as f64, format!("{v}"), format!("{v:e}"))
}

fn floating(v: f64, plain: String, scientific: String) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let a = v.abs();
    if a == 0.0 || (1e-3..1e7).contains(&a) {
        let mut s = if v == 0.0 && v.is_sign_negative() {
            "-0".to_string()
        } else {
            plain
        };
        if !s.contains('.') {
            s.push_str(".0");
        }
        return s;
    }
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let mantissa = if mantissa.contains('.') {
        mantissa.to_string()
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}E{exponent}")
}

/// Java's `new BigDecimal(unscaled, scale).toString()`, given the unscaled value's sign
/// and decimal digits: plain when `scale >= 0` and the adjusted exponent is at least -6,
/// otherwise scientific (`1.0E+2`, `1E-7`).
pub fn big_decimal(negative: bool, digits: &str, scale: i64) -> String {
    let digits = match digits.trim_start_matches('0') {
        "" => "0",
        d => d,
    };
    let sign = if negative && digits != "0" { "-" } else { "" };
    let adjusted = -scale + digits.len() as i64 - 1;
    if scale >= 0 && adjusted >= -6 {
        let scale = scale as usize;
        if scale == 0 {
            return format!("{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (whole, fraction) = padded.split_at(padded.len() - scale);
        return format!("{sign}{whole}.{fraction}");
    }
    let (first, rest) = digits.split_at(1);
    let point = if rest.is_empty() { "" } else { "." };
    let exp_sign = if adjusted >= 0 { "+" } else { "" };
    format!("{sign}{first}{point}{rest}E{exp_sign}{adjusted}")
}

/// Java's `BigDecimal.toString()` of a written number (`1.50`, `-2e3`): the digits and
/// scale it denotes.
pub fn big_decimal_of_text(raw: &str) -> String {
    let (mantissa, exponent) = match raw.find(['e', 'E']) {
        Some(i) => (&raw[..i], raw[i + 1..].parse::<i64>().unwrap_or(0)),
        None => (raw, 0),
    };
    let negative = mantissa.starts_with('-');
    let mantissa = mantissa.trim_start_matches(['-', '+']);
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    big_decimal(
        negative,
        &format!("{whole}{fraction}"),
        fraction.len() as i64 - exponent,
    )
}

/// Java's `new BigDecimal(unscaled, scale).stripTrailingZeros().toString()`, as Flink's
/// json and csv formats write a DECIMAL (`100.00` is `1E+2`, `0.00` is `0`).
pub fn big_decimal_stripped(unscaled: i128, scale: i8) -> String {
    if unscaled == 0 {
        return "0".into();
    }
    let digits = unscaled.unsigned_abs().to_string();
    let trimmed = digits.trim_end_matches('0');
    let scale = scale as i64 - (digits.len() - trimmed.len()) as i64;
    big_decimal(unscaled < 0, trimmed, scale)
}

/// `s` as a JSON string, escaped as Jackson escapes it (quote, backslash and control
/// characters; `/` and non-ASCII as they are).
pub fn json_string(s: &str, out: &mut String) {
    use std::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_floats_read_as_in_java() {
        assert_eq!(double(1.0), "1.0");
        assert_eq!(double(0.1), "0.1");
        assert_eq!(double(1e20), "1.0E20");
        assert_eq!(double(-1.5e-5), "-1.5E-5");
        assert_eq!(double(12345678.0), "1.2345678E7");
        assert_eq!(double(0.0), "0.0");
        assert_eq!(double(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(float(0.1), "0.1");
        assert_eq!(float(1.5), "1.5");
    }

    #[test]
    fn big_decimals_read_as_in_java() {
        for (raw, java) in [
            ("1.0e2", "1.0E+2"),
            ("1e2", "1E+2"),
            ("1.50", "1.50"),
            ("-0.001", "-0.001"),
            ("12e-2", "0.12"),
            ("1.5E-10", "1.5E-10"),
            ("100", "100"),
        ] {
            assert_eq!(big_decimal_of_text(raw), java, "{raw}");
        }
        assert_eq!(big_decimal_stripped(10000, 2), "1E+2");
        assert_eq!(big_decimal_stripped(0, 2), "0");
        assert_eq!(big_decimal_stripped(-50, 2), "-0.5");
        assert_eq!(big_decimal_stripped(1234567890, 2), "12345678.9");
        assert_eq!(big_decimal_stripped(-7, 0), "-7");
    }
}
