//! Flink's scalar functions that DataFusion has no equivalent of, as UDFs with Flink's
//! names, types and edge cases: `SIGN`, `TRUNCATE` and `ROUND` (the argument's type;
//! DECIMAL scale as Flink derives it, half up), `BIN`/`HEX` (64-bit two's complement),
//! `SHA1`, `ELEMENT`, `STR_TO_MAP`, `SPLIT`, `ENCODE`/`DECODE` (Java charset names),
//! `CONVERT_TZ` and `TYPEOF`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, Decimal128Array, Int64Array, ListBuilder, MapBuilder,
    StringBuilder, UInt32Array,
};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Decimal128Type, Field, FieldRef, Float32Type, Float64Type,
    Int8Type, Int16Type, Int32Type, Int64Type,
};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

type ReturnFn = fn(&[FieldRef], &[Option<&ScalarValue>]) -> Result<DataType>;
type EvalFn = fn(&[ArrayRef], &ScalarFunctionArgs) -> Result<ArrayRef>;

/// A scalar function given by its return-type rule and its evaluation over arrays. Two
/// are the same function when their names are.
#[derive(Debug)]
pub struct FlinkScalar {
    name: &'static str,
    signature: Signature,
    ret: ReturnFn,
    eval: EvalFn,
}

impl PartialEq for FlinkScalar {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for FlinkScalar {}

impl std::hash::Hash for FlinkScalar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl FlinkScalar {
    fn udf(name: &'static str, signature: Signature, ret: ReturnFn, eval: EvalFn) -> ScalarUDF {
        ScalarUDF::new_from_impl(Self {
            name,
            signature,
            ret,
            eval,
        })
    }
}

impl ScalarUDFImpl for FlinkScalar {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let fields: Vec<FieldRef> = arg_types
            .iter()
            .map(|t| Arc::new(Field::new("", t.clone(), true)))
            .collect();
        (self.ret)(&fields, &vec![None; fields.len()])
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let t = (self.ret)(args.arg_fields, args.scalar_arguments)?;
        Ok(Arc::new(Field::new(self.name, t, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.clone().into_array(n))
            .collect::<Result<_>>()?;
        Ok(ColumnarValue::Array((self.eval)(&arrays, &args)?))
    }
}

/// Every function of this module, to register in a session.
pub fn udfs() -> Vec<ScalarUDF> {
    let any = |n| Signature::any(n, Volatility::Immutable);
    let variadic = || Signature::variadic_any(Volatility::Immutable);
    vec![
        FlinkScalar::udf("sign", any(1), same_number, sign),
        FlinkScalar::udf("truncate", variadic(), rounded_type, truncate),
        FlinkScalar::udf("round", variadic(), rounded_type, round),
        FlinkScalar::udf("bin", any(1), text_type, bin),
        FlinkScalar::udf("hex", any(1), text_type, hex),
        FlinkScalar::udf("sha1", any(1), text_type, sha1),
        FlinkScalar::udf("element", any(1), element_type, element),
        FlinkScalar::udf("str_to_map", variadic(), string_map_type, str_to_map),
        FlinkScalar::udf("split", any(2), string_list_type, split),
        FlinkScalar::udf("flink_encode", any(2), |_, _| Ok(DataType::Binary), encode),
        FlinkScalar::udf("flink_decode", any(2), text_type, decode),
        FlinkScalar::udf("convert_tz", any(3), text_type, convert_tz),
        FlinkScalar::udf("typeof", variadic(), text_type, type_of),
    ]
}

fn text_type(_: &[FieldRef], _: &[Option<&ScalarValue>]) -> Result<DataType> {
    Ok(DataType::Utf8)
}

fn string_list_type(_: &[FieldRef], _: &[Option<&ScalarValue>]) -> Result<DataType> {
    Ok(DataType::List(Arc::new(Field::new_list_field(
        DataType::Utf8,
        true,
    ))))
}

fn string_map_type(_: &[FieldRef], _: &[Option<&ScalarValue>]) -> Result<DataType> {
    Ok(map_builder().finish().data_type().clone())
}

fn map_builder() -> MapBuilder<StringBuilder, StringBuilder> {
    MapBuilder::new(None, StringBuilder::new(), StringBuilder::new())
}

fn same_number(args: &[FieldRef], _: &[Option<&ScalarValue>]) -> Result<DataType> {
    let t = args[0].data_type();
    if !(t.is_numeric() || t.is_null()) {
        return plan_err!("SIGN takes a number, not {}", crate::types::sql_name(t));
    }
    Ok(if t.is_null() {
        DataType::Int32
    } else {
        t.clone()
    })
}

// ---------------------------------------------------------------------------- numbers

fn sign(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    fn ints<T: ArrowPrimitiveType>(a: &ArrayRef) -> ArrayRef
    where
        T::Native: num_sign::Signum,
    {
        Arc::new(
            a.as_primitive::<T>()
                .unary::<_, T>(num_sign::Signum::signum),
        )
    }
    let x = &a[0];
    Ok(match x.data_type() {
        DataType::Int8 => ints::<Int8Type>(x),
        DataType::Int16 => ints::<Int16Type>(x),
        DataType::Int32 => ints::<Int32Type>(x),
        DataType::Int64 => ints::<Int64Type>(x),
        DataType::Float32 => Arc::new(x.as_primitive::<Float32Type>().unary::<_, Float32Type>(
            |v| {
                if v == 0.0 || v.is_nan() {
                    v
                } else {
                    v.signum()
                }
            },
        )),
        DataType::Float64 => Arc::new(x.as_primitive::<Float64Type>().unary::<_, Float64Type>(
            |v| {
                if v == 0.0 || v.is_nan() {
                    v
                } else {
                    v.signum()
                }
            },
        )),
        DataType::Decimal128(p, s) => {
            let one = 10i128.pow(*s as u32);
            let d: Decimal128Array = x
                .as_primitive::<Decimal128Type>()
                .unary(|v: i128| v.signum() * one);
            Arc::new(d.with_precision_and_scale(*p, *s)?)
        }
        DataType::Null => Arc::new(arrow::array::Int32Array::new_null(x.len())),
        other => return exec_err!("SIGN of {other}"),
    })
}

mod num_sign {
    pub trait Signum {
        fn signum(self) -> Self;
    }
    macro_rules! signum {
        ($($t:ty),*) => {$(impl Signum for $t { fn signum(self) -> Self { <$t>::signum(self) } })*};
    }
    signum!(i8, i16, i32, i64);
}

/// The number of digits of `ROUND`/`TRUNCATE` (a constant; 0 when not given).
fn digits_arg(args: &[Option<&ScalarValue>], n_args: usize) -> Result<i32> {
    if n_args < 2 {
        return Ok(0);
    }
    match args.get(1).copied().flatten() {
        Some(v) if !v.is_null() => Ok(v
            .cast_to(&DataType::Int32)?
            .to_string()
            .parse()
            .unwrap_or(0)),
        _ => plan_err!("the number of digits of ROUND/TRUNCATE must be a constant integer"),
    }
}

/// Flink's `LogicalTypeMerging.findRoundDecimalType`.
fn rounded_type(args: &[FieldRef], scalars: &[Option<&ScalarValue>]) -> Result<DataType> {
    if args.is_empty() || args.len() > 2 {
        return plan_err!("ROUND/TRUNCATE take a number and an optional number of digits");
    }
    let t = args[0].data_type();
    match t {
        DataType::Decimal128(p, s) => {
            let r = if scalars.is_empty() {
                0 // planning without constants: the type is settled later
            } else {
                digits_arg(scalars, args.len())?
            };
            let (p, s) = (*p as i32, *s as i32);
            let (p2, s2) = if r >= s {
                (p, s)
            } else if r < 0 {
                ((1 + p - s).min(38), 0)
            } else {
                (1 + p - s + r, r)
            };
            Ok(DataType::Decimal128(p2.clamp(1, 38) as u8, s2 as i8))
        }
        t if t.is_numeric() => Ok(t.clone()),
        DataType::Null => Ok(DataType::Int32),
        other => plan_err!(
            "ROUND/TRUNCATE take a number, not {}",
            crate::types::sql_name(other)
        ),
    }
}

fn truncate(a: &[ArrayRef], args: &ScalarFunctionArgs) -> Result<ArrayRef> {
    round_or_truncate(a, args, false)
}

fn round(a: &[ArrayRef], args: &ScalarFunctionArgs) -> Result<ArrayRef> {
    round_or_truncate(a, args, true)
}

/// `v` without its last `drop` decimal digits, rounded half up (away from zero) or cut.
fn drop_digits(v: i128, drop: u32, half_up: bool) -> i128 {
    let Some(factor) = 10i128.checked_pow(drop) else {
        return 0;
    };
    let (q, rem) = (v / factor, v % factor);
    if half_up && rem.unsigned_abs() * 2 >= factor.unsigned_abs() {
        q + v.signum()
    } else {
        q
    }
}

fn round_or_truncate(a: &[ArrayRef], args: &ScalarFunctionArgs, half_up: bool) -> Result<ArrayRef> {
    let r = match args.args.get(1) {
        None => 0,
        Some(ColumnarValue::Scalar(v)) => digits_arg(&[None, Some(v)], 2)?,
        Some(ColumnarValue::Array(_)) => {
            return exec_err!("the number of digits of ROUND/TRUNCATE must be a constant");
        }
    };
    let x = &a[0];
    let ints = |x: &ArrayRef| -> Result<ArrayRef> {
        if r >= 0 {
            return Ok(x.clone());
        }
        let wide = arrow::compute::cast(x, &DataType::Int64)?;
        let drop = (-r) as u32;
        let out: Int64Array = wide.as_primitive::<Int64Type>().unary(|v| {
            let kept = drop_digits(v as i128, drop, half_up);
            (kept * 10i128.checked_pow(drop).unwrap_or(0)) as i64
        });
        Ok(arrow::compute::cast(
            &(Arc::new(out) as ArrayRef),
            x.data_type(),
        )?)
    };
    let floats = |v: f64| {
        let f = 10f64.powi(r);
        let scaled = v * f;
        let cut = if half_up {
            scaled.round()
        } else {
            scaled.trunc()
        };
        if cut.is_finite() { cut / f } else { v }
    };
    Ok(match x.data_type() {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => ints(x)?,
        DataType::Float64 => Arc::new(
            x.as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(floats),
        ),
        DataType::Float32 => Arc::new(
            x.as_primitive::<Float32Type>()
                .unary::<_, Float32Type>(|v| floats(v as f64) as f32),
        ),
        DataType::Decimal128(_, s) => {
            let s = *s as i32;
            let DataType::Decimal128(p2, s2) = args.return_type().clone() else {
                return exec_err!("ROUND/TRUNCATE of a DECIMAL must return a DECIMAL");
            };
            let out: Decimal128Array = if r >= s {
                x.as_primitive::<Decimal128Type>().clone()
            } else {
                let drop = (s - r) as u32;
                let up = if r < 0 { 10i128.pow((-r) as u32) } else { 1 };
                x.as_primitive::<Decimal128Type>()
                    .unary(|v: i128| drop_digits(v, drop, half_up) * up)
            };
            Arc::new(out.with_precision_and_scale(p2, s2)?)
        }
        DataType::Null => Arc::new(arrow::array::Int32Array::new_null(x.len())),
        other => return exec_err!("ROUND/TRUNCATE of {other}"),
    })
}

fn integers(x: &ArrayRef, what: &str) -> Result<Int64Array> {
    if !x.data_type().is_integer() && !x.data_type().is_null() {
        return exec_err!("{what} takes an integer");
    }
    Ok(arrow::compute::cast(x, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// `BIN(n)`: the binary digits of the 64-bit two's complement.
fn bin(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let n = integers(&a[0], "BIN")?;
    let out: arrow::array::StringArray = n
        .iter()
        .map(|v| v.map(|v| format!("{:b}", v as u64)))
        .collect();
    Ok(Arc::new(out))
}

/// `HEX(n)` (64-bit two's complement) or `HEX(text)` (its UTF-8 bytes), upper case.
fn hex(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let x = &a[0];
    let out: arrow::array::StringArray = match x.data_type() {
        t if t.is_integer() || t.is_null() => integers(x, "HEX")?
            .iter()
            .map(|v| v.map(|v| format!("{:X}", v as u64)))
            .collect(),
        _ => bytes_of(x)?
            .iter()
            .map(|b| b.map(|b| b.iter().map(|c| format!("{c:02X}")).collect::<String>()))
            .collect(),
    };
    Ok(Arc::new(out))
}

/// Text or binary values as bytes.
fn bytes_of(x: &ArrayRef) -> Result<arrow::array::BinaryArray> {
    Ok(arrow::compute::cast(x, &DataType::Binary)?
        .as_binary::<i32>()
        .clone())
}

fn sha1(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    use sha1::{Digest, Sha1};
    let out: arrow::array::StringArray = bytes_of(&a[0])?
        .iter()
        .map(|b| {
            b.map(|b| {
                Sha1::digest(b)
                    .iter()
                    .map(|c| format!("{c:02x}"))
                    .collect::<String>()
            })
        })
        .collect();
    Ok(Arc::new(out))
}

// ------------------------------------------------------------------------ collections

fn element_type(args: &[FieldRef], _: &[Option<&ScalarValue>]) -> Result<DataType> {
    match args[0].data_type() {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Ok(f.data_type().clone())
        }
        other => plan_err!(
            "ELEMENT takes an ARRAY, not {}",
            crate::types::sql_name(other)
        ),
    }
}

/// `ELEMENT(array)`: NULL when empty, the element when there is one, an error otherwise.
fn element(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let list = arrow::compute::cast(
        &a[0],
        &DataType::List(Arc::new(Field::new_list_field(
            element_type(
                &[Arc::new(Field::new("", a[0].data_type().clone(), true))],
                &[],
            )?,
            true,
        ))),
    )?;
    let list = list.as_list::<i32>();
    let offsets = list.value_offsets();
    let mut indices = Vec::with_capacity(list.len());
    for i in 0..list.len() {
        let len = offsets[i + 1] - offsets[i];
        indices.push(match len {
            _ if list.is_null(i) => None,
            0 => None,
            1 => Some(offsets[i] as u32),
            _ => return exec_err!("ELEMENT: the array has more than one element"),
        });
    }
    Ok(arrow::compute::take(
        list.values(),
        &UInt32Array::from(indices),
        None,
    )?)
}

/// Java's `String.split(regex)`: trailing empty strings are removed; no match gives the
/// whole text.
fn java_split<'a>(text: &'a str, re: &regex::Regex) -> Vec<&'a str> {
    let mut parts: Vec<&str> = re.split(text).collect();
    while parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    if parts == [""] && !text.is_empty() {
        parts.clear();
    }
    parts
}

/// `STR_TO_MAP(text[, pair_delimiter = ',', key_value_delimiter = '='])`; both delimiters
/// are regular expressions, as in Flink. A pair without a key-value delimiter maps to
/// NULL; a later duplicate key wins.
fn str_to_map(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    if a.is_empty() || a.len() > 3 || a.len() == 2 {
        return exec_err!("STR_TO_MAP takes the text, or the text and both delimiters");
    }
    let text = arrow::compute::cast(&a[0], &DataType::Utf8)?;
    let delims: Vec<ArrayRef> = a[1..]
        .iter()
        .map(|d| arrow::compute::cast(d, &DataType::Utf8))
        .collect::<std::result::Result<_, _>>()?;
    let mut cache: HashMap<String, regex::Regex> = HashMap::new();
    let mut regex = |p: &str| -> Result<regex::Regex> {
        if let Some(r) = cache.get(p) {
            return Ok(r.clone());
        }
        let r =
            regex::Regex::new(p).or_else(|e| exec_err!("STR_TO_MAP: bad delimiter '{p}': {e}"))?;
        cache.insert(p.to_string(), r.clone());
        Ok(r)
    };
    let mut out = map_builder();
    let text = text.as_string::<i32>();
    for i in 0..text.len() {
        let d = |k: usize, default: &'static str| -> Option<String> {
            match delims.get(k) {
                None => Some(default.to_string()),
                Some(d) if d.is_null(i) => None,
                Some(d) => Some(d.as_string::<i32>().value(i).to_string()),
            }
        };
        let (Some(pairs), Some(kv)) = (d(0, ","), d(1, "=")) else {
            out.append(false)?;
            continue;
        };
        if text.is_null(i) {
            out.append(false)?;
            continue;
        }
        let (pair_re, kv_re) = (regex(&pairs)?, regex(&kv)?);
        let mut entries: Vec<(String, Option<String>)> = Vec::new();
        let s = text.value(i);
        if !s.is_empty() {
            for pair in java_split(s, &pair_re) {
                let mut kv = kv_re.splitn(pair, 2);
                let key = kv.next().unwrap_or("").to_string();
                let value = kv.next().map(str::to_string);
                match entries.iter_mut().find(|(k, _)| *k == key) {
                    Some(e) => e.1 = value,
                    None => entries.push((key, value)),
                }
            }
        }
        for (k, v) in entries {
            out.keys().append_value(k);
            out.values().append_option(v);
        }
        out.append(true)?;
    }
    Ok(Arc::new(out.finish()))
}

/// `SPLIT(text, delimiter)`: split at a literal delimiter; an empty text gives an empty
/// array, an empty delimiter the whole text.
fn split(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let text = arrow::compute::cast(&a[0], &DataType::Utf8)?;
    let delim = arrow::compute::cast(&a[1], &DataType::Utf8)?;
    let (text, delim) = (text.as_string::<i32>(), delim.as_string::<i32>());
    let mut out = ListBuilder::new(StringBuilder::new());
    for i in 0..text.len() {
        if text.is_null(i) || delim.is_null(i) {
            out.append(false);
            continue;
        }
        let (s, d) = (text.value(i), delim.value(i));
        if s.is_empty() {
        } else if d.is_empty() {
            out.values().append_value(s);
        } else {
            for part in s.split(d) {
                out.values().append_value(part);
            }
        }
        out.append(true);
    }
    Ok(Arc::new(out.finish()))
}

// ----------------------------------------------------------------- charsets and zones

#[derive(Clone, Copy)]
enum Charset {
    Ascii,
    Latin1,
    Utf8,
    Utf16Be,
    Utf16Le,
    Utf16,
}

fn charset(name: &str) -> Result<Charset> {
    Ok(match name.to_ascii_uppercase().as_str() {
        "US-ASCII" => Charset::Ascii,
        "ISO-8859-1" => Charset::Latin1,
        "UTF-8" => Charset::Utf8,
        "UTF-16BE" => Charset::Utf16Be,
        "UTF-16LE" => Charset::Utf16Le,
        "UTF-16" => Charset::Utf16,
        other => {
            return exec_err!(
                "unsupported charset '{other}' (supported: US-ASCII, ISO-8859-1, UTF-8, UTF-16BE, \
                 UTF-16LE, UTF-16)"
            );
        }
    })
}

fn encode_text(s: &str, c: Charset) -> Vec<u8> {
    let narrow = |limit: u32| {
        s.chars()
            .map(|ch| if (ch as u32) < limit { ch as u8 } else { b'?' })
            .collect()
    };
    match c {
        Charset::Ascii => narrow(0x80),
        Charset::Latin1 => narrow(0x100),
        Charset::Utf8 => s.as_bytes().to_vec(),
        Charset::Utf16Be => s.encode_utf16().flat_map(u16::to_be_bytes).collect(),
        Charset::Utf16Le => s.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        // Java writes a big-endian byte order mark.
        Charset::Utf16 => [0xfe, 0xff]
            .into_iter()
            .chain(s.encode_utf16().flat_map(u16::to_be_bytes))
            .collect(),
    }
}

fn decode_bytes(b: &[u8], c: Charset) -> String {
    let utf16 = |b: &[u8], be: bool| {
        let units: Vec<u16> = b
            .chunks(2)
            .map(|p| match (p, be) {
                ([x, y], true) => u16::from_be_bytes([*x, *y]),
                ([x, y], false) => u16::from_le_bytes([*x, *y]),
                _ => 0xfffd,
            })
            .collect();
        String::from_utf16_lossy(&units)
    };
    match c {
        Charset::Ascii => b
            .iter()
            .map(|&x| if x < 0x80 { x as char } else { '\u{fffd}' })
            .collect(),
        Charset::Latin1 => b.iter().map(|&x| x as char).collect(),
        Charset::Utf8 => String::from_utf8_lossy(b).into_owned(),
        Charset::Utf16Be => utf16(b, true),
        Charset::Utf16Le => utf16(b, false),
        Charset::Utf16 => match b {
            [0xff, 0xfe, rest @ ..] => utf16(rest, false),
            [0xfe, 0xff, rest @ ..] => utf16(rest, true),
            _ => utf16(b, true),
        },
    }
}

/// The charset of every row (NULL: `None`), the names read once.
fn charsets(a: &ArrayRef) -> Result<Vec<Option<Charset>>> {
    let names = arrow::compute::cast(a, &DataType::Utf8)?;
    names
        .as_string::<i32>()
        .iter()
        .map(|n| n.map(charset).transpose())
        .collect()
}

/// `ENCODE(text, charset)`: the text's bytes in that charset (a BINARY).
fn encode(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let text = arrow::compute::cast(&a[0], &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    let mut out = BinaryBuilder::new();
    for (i, c) in charsets(&a[1])?.into_iter().enumerate() {
        match c {
            Some(c) if !text.is_null(i) => out.append_value(encode_text(text.value(i), c)),
            _ => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// `DECODE(bytes, charset)`: the text the bytes hold in that charset.
fn decode(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let bytes = bytes_of(&a[0])?;
    let mut out = StringBuilder::new();
    for (i, c) in charsets(&a[1])?.into_iter().enumerate() {
        match c {
            Some(c) if !bytes.is_null(i) => out.append_value(decode_bytes(bytes.value(i), c)),
            _ => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// A time zone as Java's `TimeZone.getTimeZone` reads it: a region (`Asia/Shanghai`),
/// `UTC`/`GMT`, or an offset `GMT+08:00` / `UTC-8` / `+08:00`.
pub(crate) fn zone(name: &str) -> Option<chrono::FixedOffset> {
    None.or_else(|| {
        let rest = name
            .strip_prefix("GMT")
            .or_else(|| name.strip_prefix("UTC"))
            .unwrap_or(name);
        if rest.is_empty() {
            return chrono::FixedOffset::east_opt(0);
        }
        let (sign, rest) = match rest.as_bytes().first()? {
            b'+' => (1, &rest[1..]),
            b'-' => (-1, &rest[1..]),
            _ => return None,
        };
        let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
        let secs = h.parse::<i32>().ok()? * 3600 + m.parse::<i32>().ok()? * 60;
        chrono::FixedOffset::east_opt(sign * secs)
    })
}

/// The wall-clock time in zone `to` of wall-clock `t` in zone `from`.
fn shift(t: chrono::NaiveDateTime, from: &str, to: &str) -> Option<chrono::NaiveDateTime> {
    use chrono::TimeZone;
    let instant = match zone(from) {
        Some(z) => z.from_local_datetime(&t).earliest()?.naive_utc(),
        None => from
            .parse::<chrono_tz::Tz>()
            .ok()?
            .from_local_datetime(&t)
            .earliest()?
            .naive_utc(),
    };
    Some(match zone(to) {
        Some(z) => z.from_utc_datetime(&instant).naive_local(),
        None => to
            .parse::<chrono_tz::Tz>()
            .ok()?
            .from_utc_datetime(&instant)
            .naive_local(),
    })
}

/// `CONVERT_TZ(text, from_zone, to_zone)`: `yyyy-MM-dd HH:mm:ss` text moved between zones;
/// NULL when the text or a zone cannot be read.
fn convert_tz(a: &[ArrayRef], _: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let cols: Vec<ArrayRef> = a
        .iter()
        .map(|c| arrow::compute::cast(c, &DataType::Utf8))
        .collect::<std::result::Result<_, _>>()?;
    let s = |k: usize, i: usize| -> Option<&str> {
        let c = cols[k].as_string::<i32>();
        (!c.is_null(i)).then(|| c.value(i))
    };
    let mut out = StringBuilder::new();
    for i in 0..cols[0].len() {
        let v = (|| {
            let t = chrono::NaiveDateTime::parse_from_str(s(0, i)?.trim(), "%Y-%m-%d %H:%M:%S%.f")
                .ok()?;
            let moved = shift(t, s(1, i)?, s(2, i)?)?;
            Some(moved.format("%Y-%m-%d %H:%M:%S").to_string())
        })();
        out.append_option(v);
    }
    Ok(Arc::new(out.finish()))
}

/// Flink's name of a type with its nullability (`INT NOT NULL`, `ARRAY<INT NOT NULL>`).
fn type_text(t: &DataType, nullable: bool) -> String {
    let base = match t {
        DataType::List(f) | DataType::LargeList(f) => {
            format!("ARRAY<{}>", type_text(f.data_type(), f.is_nullable()))
        }
        DataType::Map(entries, _) if entries.name() == crate::flink_collect::MULTISET_ENTRIES => {
            match entries.data_type() {
                // Arrow map keys cannot be nullable; Flink's COLLECT of a nullable column
                // is a MULTISET of nullable elements.
                DataType::Struct(kv) if kv.len() == 2 => {
                    format!("MULTISET<{}>", type_text(kv[0].data_type(), true))
                }
                _ => "MULTISET".into(),
            }
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                type_text(kv[0].data_type(), kv[0].is_nullable()),
                type_text(kv[1].data_type(), kv[1].is_nullable())
            ),
            _ => "MAP".into(),
        },
        DataType::Struct(fields) => format!(
            "ROW<{}>",
            fields
                .iter()
                .map(|f| format!(
                    "`{}` {}",
                    f.name(),
                    type_text(f.data_type(), f.is_nullable())
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::Null => "NULL".into(),
        other => crate::types::sql_name(other),
    };
    if nullable || t.is_null() {
        base
    } else {
        format!("{base} NOT NULL")
    }
}

/// `TYPEOF(x[, force_serializable])`: the Flink type of `x`.
fn type_of(a: &[ArrayRef], args: &ScalarFunctionArgs) -> Result<ArrayRef> {
    if a.is_empty() || a.len() > 2 {
        return exec_err!("TYPEOF takes one argument (and an optional BOOLEAN)");
    }
    let f = &args.arg_fields[0];
    let text = type_text(f.data_type(), f.is_nullable());
    Ok(Arc::new(arrow::array::StringArray::from(vec![
        text;
        a[0].len()
    ])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits_are_dropped_half_up_or_cut() {
        assert_eq!(drop_digits(12345, 2, false), 123);
        assert_eq!(drop_digits(-15678, 3, true), -16);
        assert_eq!(drop_digits(-15678, 2, true), -157);
        assert_eq!(drop_digits(15, 1, true), 2);
        assert_eq!(drop_digits(5, 40, true), 0);
    }

    #[test]
    fn java_split_drops_trailing_empty_parts() {
        let comma = regex::Regex::new(",").unwrap();
        assert_eq!(java_split("a=1,,b", &comma), vec!["a=1", "", "b"]);
        assert_eq!(java_split("a,b,,", &comma), vec!["a", "b"]);
        assert_eq!(java_split("solo", &comma), vec!["solo"]);
    }

    #[test]
    fn charsets_round_trip_and_replace() {
        for c in [
            Charset::Utf8,
            Charset::Utf16,
            Charset::Utf16Le,
            Charset::Utf16Be,
            Charset::Latin1,
        ] {
            assert_eq!(decode_bytes(&encode_text("häx", c), c), "häx");
        }
        assert_eq!(encode_text("hä", Charset::Ascii), b"h?");
    }

    #[test]
    fn zones_as_java_reads_them() {
        let t = chrono::NaiveDateTime::parse_from_str("2024-01-01 00:00:00", "%Y-%m-%d %H:%M:%S")
            .unwrap();
        let text = |from: &str, to: &str| shift(t, from, to).map(|t| t.to_string());
        assert_eq!(
            text("UTC", "Asia/Shanghai").as_deref(),
            Some("2024-01-01 08:00:00")
        );
        assert_eq!(
            text("UTC", "GMT-08:00").as_deref(),
            Some("2023-12-31 16:00:00")
        );
        assert_eq!(
            text("Europe/Berlin", "UTC").as_deref(),
            Some("2023-12-31 23:00:00")
        );
        assert_eq!(text("Nowhere/City", "UTC"), None);
    }
}
