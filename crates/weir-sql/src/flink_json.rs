//! Flink's JSON functions as DataFusion UDFs: `JSON_VALUE`, `JSON_QUERY`, `JSON_EXISTS`,
//! `IS [NOT] JSON [VALUE|SCALAR|ARRAY|OBJECT]`, `JSON_OBJECT`, `JSON_ARRAY` and
//! `JSON_STRING`. Their SQL forms (`RETURNING`, `… ON EMPTY`, `KEY … VALUE …`,
//! `ABSENT ON NULL`) are parsed by [`crate::dialect`] into calls of the functions here.
//!
//! Semantics follow Flink (Calcite's JSON functions over Jackson and Jayway JsonPath):
//! documents keep their key order and number text (numbers with a fraction or an exponent
//! read as Java's `BigDecimal`, so `1.50` stays `1.50` and `1.0e2` becomes `1.0E+2`);
//! paths are `lax` (a missing member is empty) unless written `strict …` (it is an
//! error); `JSON_VALUE` of a non-scalar is empty; output is compact.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanBuilder, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// A parsed JSON document: objects keep their members in document order, numbers their
/// text.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

const MAX_DEPTH: usize = 1000;

/// Parses a whole JSON text (RFC 8259, nothing after the value but whitespace).
pub fn parse(text: &str) -> std::result::Result<Json, String> {
    let mut p = JsonParser {
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("unexpected text at offset {}", p.i));
    }
    Ok(v)
}

struct JsonParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl JsonParser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn err<T>(&self, what: &str) -> std::result::Result<T, String> {
        Err(format!("{what} at offset {}", self.i))
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> std::result::Result<Json, String> {
        if depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        match self.s.get(self.i) {
            None => self.err("unexpected end"),
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.eat("}") {
                    return Ok(Json::Object(members));
                }
                loop {
                    self.ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return self.err("expected a member name");
                    }
                    let key = self.string()?;
                    self.ws();
                    if !self.eat(":") {
                        return self.err("expected ':'");
                    }
                    self.ws();
                    let v = self.value(depth + 1)?;
                    members.push((key, v));
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    if self.eat("}") {
                        return Ok(Json::Object(members));
                    }
                    return self.err("expected ',' or '}'");
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat("]") {
                    return Ok(Json::Array(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    if self.eat("]") {
                        return Ok(Json::Array(items));
                    }
                    return self.err("expected ',' or ']'");
                }
            }
            Some(b'"') => self.string().map(Json::String),
            Some(b't') if self.eat("true") => Ok(Json::Bool(true)),
            Some(b'f') if self.eat("false") => Ok(Json::Bool(false)),
            Some(b'n') if self.eat("null") => Ok(Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => self.err("unexpected character"),
        }
    }

    fn number(&mut self) -> std::result::Result<Json, String> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let from = p.i;
            while p.i < p.s.len() && p.s[p.i].is_ascii_digit() {
                p.i += 1;
            }
            p.i > from
        };
        self.eat("-");
        let int_start = self.i;
        if !digits(self) {
            return self.err("expected a digit");
        }
        if self.s[int_start] == b'0' && self.i - int_start > 1 {
            return self.err("leading zero");
        }
        if self.eat(".") && !digits(self) {
            return self.err("expected a digit after '.'");
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if !self.eat("+") {
                self.eat("-");
            }
            if !digits(self) {
                return self.err("expected an exponent");
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
        Ok(Json::Number(java_number_text(text)))
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        self.i += 1; // the opening quote
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.s.len() && !matches!(self.s[self.i], b'"' | b'\\' | 0..=0x1f) {
                self.i += 1;
            }
            out.push_str(std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?);
            match self.s.get(self.i) {
                None => return self.err("unterminated string"),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = match self.s.get(self.i) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            let hi = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&hi) && self.eat("\\u") {
                                self.i -= 1;
                                let lo = self.hex4()?;
                                0x10000 + ((hi - 0xd800) << 10) + (lo.wrapping_sub(0xdc00) & 0x3ff)
                            } else {
                                hi
                            };
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                            self.i += 1;
                            continue;
                        }
                        _ => return self.err("bad escape"),
                    };
                    out.push(c);
                    self.i += 1;
                }
                Some(_) => return self.err("control character in a string"),
            }
        }
    }

    /// The four hex digits after `\u` (the cursor is on the `u`; left on the last digit).
    fn hex4(&mut self) -> std::result::Result<u32, String> {
        let digits = self
            .s
            .get(self.i + 1..self.i + 5)
            .ok_or("short \\u escape")?;
        let text = std::str::from_utf8(digits).map_err(|e| e.to_string())?;
        let v = u32::from_str_radix(text, 16).map_err(|_| "bad \\u escape".to_string())?;
        self.i += 4;
        Ok(v)
    }
}

/// The text Java gives a JSON number Jackson read: integers as written, others as
/// `BigDecimal.toString()` of the written value (`1.50`, `1.0E+2`).
fn java_number_text(raw: &str) -> String {
    if !raw.contains(['.', 'e', 'E']) {
        return raw.to_string();
    }
    weir_common::java_text::big_decimal_of_text(raw)
}

/// Compact JSON text (Jackson's: `/` and non-ASCII unescaped).
pub fn write(v: &Json, out: &mut String) {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => out.push_str(n),
        Json::String(s) => write_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Json::Object(members) => {
            out.push('{');
            for (i, (k, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write(item, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    weir_common::java_text::json_string(s, out);
}

fn to_text(v: &Json) -> String {
    let mut out = String::new();
    write(v, &mut out);
    out
}

// ------------------------------------------------------------------------------ paths

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Member(String),
    Index(i64),
    Wildcard,
}

#[derive(Debug, Clone, PartialEq)]
struct Path {
    strict: bool,
    steps: Vec<Step>,
}

/// `[lax|strict] $ (.name | .* | ['name'] | [n] | [*])*`.
fn parse_path(text: &str) -> std::result::Result<Path, String> {
    let t = text.trim();
    let (strict, t) = if let Some(rest) = t.strip_prefix("strict ") {
        (true, rest.trim_start())
    } else {
        (false, t.strip_prefix("lax ").map_or(t, str::trim_start))
    };
    let bad = |why: &str| format!("invalid JSON path '{text}': {why}");
    let mut rest = t
        .strip_prefix('$')
        .ok_or_else(|| bad("it must start with '$'"))?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix(".*") {
            steps.push(Step::Wildcard);
            rest = r;
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err(bad("empty member name"));
            }
            steps.push(Step::Member(r[..end].trim().to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(|| bad("missing ']'"))?;
            let inner = r[..end].trim();
            let step = if inner == "*" {
                Step::Wildcard
            } else if let Some(q) = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
            {
                Step::Member(q.to_string())
            } else {
                Step::Index(inner.parse().map_err(|_| bad("bad array index"))?)
            };
            steps.push(step);
            rest = &r[end + 1..];
        } else {
            return Err(bad("expected '.' or '['"));
        }
    }
    Ok(Path { strict, steps })
}

/// The value at `steps` of `v`: `Ok(None)` when missing (an error in strict mode).
/// Wildcards collect their matches into an array.
fn select(v: &Json, steps: &[Step], strict: bool) -> std::result::Result<Option<Json>, String> {
    let Some((step, rest)) = steps.split_first() else {
        return Ok(Some(v.clone()));
    };
    let missing = |what: String| if strict { Err(what) } else { Ok(None) };
    match (step, v) {
        (Step::Member(name), Json::Object(members)) => {
            match members.iter().find(|(k, _)| k == name) {
                Some((_, child)) => select(child, rest, strict),
                None => missing(format!("no member '{name}'")),
            }
        }
        (Step::Index(i), Json::Array(items)) => {
            let at = if *i < 0 { items.len() as i64 + i } else { *i };
            match usize::try_from(at).ok().and_then(|at| items.get(at)) {
                Some(child) => select(child, rest, strict),
                None => missing(format!("no array element {i}")),
            }
        }
        (Step::Wildcard, Json::Array(items)) => collect(items.iter(), rest, strict),
        (Step::Wildcard, Json::Object(members)) => {
            collect(members.iter().map(|(_, v)| v), rest, strict)
        }
        (step, _) => missing(format!("{step:?} does not apply to {}", to_text(v))),
    }
}

fn collect<'a>(
    items: impl Iterator<Item = &'a Json>,
    rest: &[Step],
    strict: bool,
) -> std::result::Result<Option<Json>, String> {
    let mut found = Vec::new();
    for item in items {
        if let Some(v) = select(item, rest, false)? {
            found.push(v);
        }
    }
    if found.is_empty() && strict {
        return Err("no match".into());
    }
    Ok(Some(Json::Array(found)))
}

/// The parsed path of each row; a path is usually one literal, parsed once.
#[derive(Default)]
struct Paths {
    last: Option<(String, std::result::Result<Path, String>)>,
}

impl Paths {
    fn get(&mut self, text: &str) -> &std::result::Result<Path, String> {
        if self.last.as_ref().is_none_or(|(t, _)| t != text) {
            self.last = Some((text.to_string(), parse_path(text)));
        }
        &self.last.as_ref().expect("just set").1
    }
}

/// Parses `doc` and selects `path` in it; the error is Flink's "error" case (bad JSON,
/// bad path, strict-mode miss).
fn query(
    doc: &str,
    path: &std::result::Result<Path, String>,
) -> std::result::Result<Option<Json>, String> {
    let path = path.as_ref().map_err(String::clone)?;
    let v = parse(doc)?;
    select(&v, &path.steps, path.strict)
}

fn is_scalar(v: &Json) -> bool {
    !matches!(v, Json::Array(_) | Json::Object(_))
}

// ------------------------------------------------------------------------------ UDFs

/// What an `ON EMPTY` / `ON ERROR` clause asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBehavior {
    Null,
    Error,
    Default,
    EmptyArray,
    EmptyObject,
}

impl OnBehavior {
    pub fn name(self) -> &'static str {
        match self {
            OnBehavior::Null => "NULL",
            OnBehavior::Error => "ERROR",
            OnBehavior::Default => "DEFAULT",
            OnBehavior::EmptyArray => "EMPTY ARRAY",
            OnBehavior::EmptyObject => "EMPTY OBJECT",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "NULL" => OnBehavior::Null,
            "ERROR" => OnBehavior::Error,
            "DEFAULT" => OnBehavior::Default,
            "EMPTY ARRAY" => OnBehavior::EmptyArray,
            "EMPTY OBJECT" => OnBehavior::EmptyObject,
            other => return plan_err!("unknown JSON behaviour '{other}'"),
        })
    }
}

fn rows_of(args: &[ColumnarValue], n: usize) -> Result<Vec<ArrayRef>> {
    args.iter().map(|a| a.clone().into_array(n)).collect()
}

fn literal_text(args: &[ColumnarValue], i: usize, what: &str) -> Result<String> {
    match args.get(i) {
        Some(ColumnarValue::Scalar(s)) => match s {
            ScalarValue::Utf8(Some(t)) | ScalarValue::LargeUtf8(Some(t)) => Ok(t.clone()),
            _ => exec_err!("{what} must be a text literal"),
        },
        _ => exec_err!("{what} must be a literal"),
    }
}

/// Text of row `i` of a string array (any string type), `None` when NULL.
fn text_at(a: &ArrayRef, i: usize) -> Option<String> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Utf8 => Some(a.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Some(a.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Some(a.as_string_view().value(i).to_string()),
        _ => ScalarValue::try_from_array(a, i)
            .ok()
            .map(|s| s.to_string()),
    }
}

fn num_rows(args: &ScalarFunctionArgs) -> usize {
    args.number_rows
}

macro_rules! json_udf {
    ($name:ident, $sql:literal, $ret:expr, $sig:expr, $invoke:ident) => {
        #[derive(Debug, PartialEq, Eq, Hash)]
        pub struct $name {
            signature: Signature,
        }

        impl $name {
            pub fn udf() -> ScalarUDF {
                ScalarUDF::new_from_impl(Self { signature: $sig })
            }
        }

        impl ScalarUDFImpl for $name {
            fn name(&self) -> &str {
                $sql
            }
            fn signature(&self) -> &Signature {
                &self.signature
            }
            fn return_type(&self, _: &[DataType]) -> Result<DataType> {
                Ok($ret)
            }
            fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
                $invoke(args)
            }
        }
    };
}

json_udf!(
    JsonValue,
    "json_value",
    DataType::Utf8,
    Signature::variadic_any(Volatility::Immutable),
    json_value
);
json_udf!(
    JsonQuery,
    "json_query",
    DataType::Utf8,
    Signature::variadic_any(Volatility::Immutable),
    json_query
);
json_udf!(
    JsonExists,
    "json_exists",
    DataType::Boolean,
    Signature::variadic_any(Volatility::Immutable),
    json_exists
);
json_udf!(
    IsJson,
    "is_json",
    DataType::Boolean,
    Signature::any(2, Volatility::Immutable),
    is_json
);
json_udf!(
    JsonObject,
    "json_object",
    DataType::Utf8,
    Signature::variadic_any(Volatility::Immutable),
    json_object
);
json_udf!(
    JsonArray,
    "json_array",
    DataType::Utf8,
    Signature::variadic_any(Volatility::Immutable),
    json_array
);
json_udf!(
    JsonString,
    "json_string",
    DataType::Utf8,
    Signature::any(1, Volatility::Immutable),
    json_string
);

/// Every JSON function, to register in a session.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        JsonValue::udf(),
        JsonQuery::udf(),
        JsonExists::udf(),
        IsJson::udf(),
        JsonObject::udf(),
        JsonArray::udf(),
        JsonString::udf(),
    ]
}

/// `json_value(doc, path, returning_text, on_empty, empty_default, on_error,
/// error_default)`: the scalar at `path` as text. `returning_text` is `'STRING'` when the
/// SQL asked for text (the default); otherwise a JSON string fails the query, as in Flink.
fn json_value(args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let a = &args.args;
    if a.len() != 7 {
        return exec_err!("json_value takes 7 arguments (use JSON_VALUE(doc, path …))");
    }
    let text_wanted = literal_text(a, 2, "the RETURNING kind")? == "STRING";
    let on_empty = OnBehavior::parse(&literal_text(a, 3, "ON EMPTY")?)?;
    let on_error = OnBehavior::parse(&literal_text(a, 5, "ON ERROR")?)?;
    let n = num_rows(&args);
    let cols = rows_of(a, n)?;
    let mut paths = Paths::default();
    let mut out = StringBuilder::new();
    for i in 0..n {
        let (Some(doc), Some(path)) = (text_at(&cols[0], i), text_at(&cols[1], i)) else {
            out.append_null();
            continue;
        };
        let v = match query(&doc, paths.get(&path)) {
            Err(e) => match on_error {
                OnBehavior::Error => return exec_err!("JSON_VALUE: {e} in '{doc}'"),
                OnBehavior::Default => text_at(&cols[6], i),
                _ => None,
            },
            Ok(Some(v)) if is_scalar(&v) && v != Json::Null => Some(match v {
                Json::String(s) if !text_wanted => {
                    return exec_err!(
                        "JSON_VALUE: the value at '{path}' is the JSON string \"{s}\", which Flink \
                         cannot return as a non-text type"
                    );
                }
                Json::String(s) => s,
                other => to_text(&other),
            }),
            Ok(_) => match on_empty {
                OnBehavior::Error => {
                    return exec_err!("JSON_VALUE: no scalar value at '{path}' in '{doc}'");
                }
                OnBehavior::Default => text_at(&cols[4], i),
                _ => None,
            },
        };
        out.append_option(v);
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

/// `json_query(doc, path, wrapper, on_empty, on_error)`; `wrapper` is `'WITHOUT'`,
/// `'CONDITIONAL'` or `'UNCONDITIONAL'`.
fn json_query(args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let a = &args.args;
    if a.len() != 5 {
        return exec_err!("json_query takes 5 arguments (use JSON_QUERY(doc, path …))");
    }
    let wrapper = literal_text(a, 2, "the wrapper")?;
    let on_empty = OnBehavior::parse(&literal_text(a, 3, "ON EMPTY")?)?;
    let on_error = OnBehavior::parse(&literal_text(a, 4, "ON ERROR")?)?;
    let n = num_rows(&args);
    let cols = rows_of(&a[..2], n)?;
    let mut paths = Paths::default();
    let mut out = StringBuilder::new();
    let fallback = |behavior: OnBehavior, what: &str| -> Result<Option<String>> {
        match behavior {
            OnBehavior::Error => exec_err!("JSON_QUERY: {what}"),
            OnBehavior::EmptyArray => Ok(Some("[]".into())),
            OnBehavior::EmptyObject => Ok(Some("{}".into())),
            _ => Ok(None),
        }
    };
    for i in 0..n {
        let (Some(doc), Some(path)) = (text_at(&cols[0], i), text_at(&cols[1], i)) else {
            out.append_null();
            continue;
        };
        let parsed = paths.get(&path);
        let strict = parsed.as_ref().is_ok_and(|p| p.strict);
        let v = match query(&doc, parsed) {
            Err(e) => fallback(on_error, &format!("{e} in '{doc}'"))?,
            Ok(found) => {
                let wrapped = match (wrapper.as_str(), found) {
                    ("UNCONDITIONAL", v) => Some(Json::Array(vec![v.unwrap_or(Json::Null)])),
                    ("CONDITIONAL", Some(v)) if is_scalar(&v) => Some(Json::Array(vec![v])),
                    (_, v) => v,
                };
                match wrapped {
                    Some(v) if !is_scalar(&v) => Some(to_text(&v)),
                    Some(v) if strict && v != Json::Null => fallback(
                        on_error,
                        &format!("the value at '{path}' is a scalar ({})", to_text(&v)),
                    )?,
                    _ => fallback(on_empty, &format!("no value at '{path}' in '{doc}'"))?,
                }
            }
        };
        out.append_option(v);
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

/// `json_exists(doc, path[, on_error])`; `on_error` is `'TRUE'`, `'FALSE'` (the default),
/// `'UNKNOWN'` or `'ERROR'`.
fn json_exists(args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let a = &args.args;
    let on_error = if a.len() == 3 {
        literal_text(a, 2, "ON ERROR")?
    } else {
        "FALSE".to_string()
    };
    let n = num_rows(&args);
    let cols = rows_of(&a[..2], n)?;
    let mut paths = Paths::default();
    let mut out = BooleanBuilder::new();
    for i in 0..n {
        let (Some(doc), Some(path)) = (text_at(&cols[0], i), text_at(&cols[1], i)) else {
            out.append_null();
            continue;
        };
        match query(&doc, paths.get(&path)) {
            Ok(v) => out.append_value(v.is_some_and(|v| v != Json::Null)),
            Err(e) => match on_error.as_str() {
                "TRUE" => out.append_value(true),
                "UNKNOWN" => out.append_null(),
                "ERROR" => return exec_err!("JSON_EXISTS: {e} in '{doc}'"),
                _ => out.append_value(false),
            },
        }
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

/// `is_json(text, kind)`, kind `'VALUE'`, `'SCALAR'`, `'ARRAY'` or `'OBJECT'`: never NULL
/// (a NULL text is not JSON).
fn is_json(args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let kind = literal_text(&args.args, 1, "the IS JSON kind")?;
    let n = num_rows(&args);
    let text = args.args[0].clone().into_array(n)?;
    let out: arrow::array::BooleanArray = (0..n)
        .map(|i| {
            let ok = text_at(&text, i)
                .and_then(|t| parse(&t).ok())
                .is_some_and(|v| match kind.as_str() {
                    "SCALAR" => is_scalar(&v),
                    "ARRAY" => matches!(v, Json::Array(_)),
                    "OBJECT" => matches!(v, Json::Object(_)),
                    _ => true,
                });
            Some(ok)
        })
        .collect();
    Ok(ColumnarValue::Array(Arc::new(out)))
}

/// The JSON of row `i` of `a`; `raw` marks text that is already JSON (the result of a
/// nested `JSON_OBJECT`/`JSON_ARRAY`).
fn json_of(a: &ArrayRef, i: usize, raw: bool) -> Result<Json> {
    if a.is_null(i) {
        return Ok(Json::Null);
    }
    if raw && let Some(t) = text_at(a, i) {
        return parse(&t).or_else(|e| exec_err!("nested JSON is invalid: {e}"));
    }
    let v = ScalarValue::try_from_array(a, i)?;
    Ok(match v {
        ScalarValue::Boolean(Some(b)) => Json::Bool(b),
        ScalarValue::Int8(Some(_))
        | ScalarValue::Int16(Some(_))
        | ScalarValue::Int32(Some(_))
        | ScalarValue::Int64(Some(_))
        | ScalarValue::UInt8(Some(_))
        | ScalarValue::UInt16(Some(_))
        | ScalarValue::UInt32(Some(_))
        | ScalarValue::UInt64(Some(_))
        | ScalarValue::Decimal128(Some(_), _, _)
        | ScalarValue::Decimal256(Some(_), _, _) => Json::Number(v.to_string()),
        // Written as Jackson writes the `BigDecimal` of the double's text (`1.0E+20`).
        ScalarValue::Float32(Some(f)) => {
            Json::Number(java_number_text(&weir_common::java_text::float(f)))
        }
        ScalarValue::Float64(Some(f)) => {
            Json::Number(java_number_text(&weir_common::java_text::double(f)))
        }
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Json::String(s),
        ScalarValue::List(l) => {
            let values = l.value(0);
            Json::Array(
                (0..values.len())
                    .map(|j| json_of(&values, j, false))
                    .collect::<Result<_>>()?,
            )
        }
        other => {
            return exec_err!(
                "type {} is not scalar or cannot be converted into JSON",
                other.data_type()
            );
        }
    })
}

/// Splits `(null_mode, raw_flags, values…)`: `raw_flags` has a `1` per value that is
/// already JSON.
fn constructor_args(a: &[ColumnarValue], what: &str) -> Result<(bool, Vec<bool>)> {
    if a.len() < 2 {
        return exec_err!("{what} needs its null mode and flags");
    }
    let absent = literal_text(a, 0, "the null mode")? == "ABSENT";
    let raw = literal_text(a, 1, "the raw flags")?
        .chars()
        .map(|c| c == '1')
        .collect();
    Ok((absent, raw))
}

/// `json_object(null_mode, raw_flags, k1, v1, k2, v2, …)`.
fn json_object(args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let (absent, raw) = constructor_args(&args.args, "json_object")?;
    let n = num_rows(&args);
    let cols = rows_of(&args.args[2..], n)?;
    let mut out = StringBuilder::new();
    for i in 0..n {
        let mut members = Vec::new();
        for (p, pair) in cols.chunks(2).enumerate() {
            let Some(key) = text_at(&pair[0], i) else {
                return exec_err!("JSON_OBJECT: a key is NULL");
            };
            let v = json_of(&pair[1], i, raw.get(p).copied().unwrap_or(false))?;
            if !(absent && v == Json::Null) {
                members.push((key, v));
            }
        }
        out.append_value(to_text(&Json::Object(members)));
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

/// `json_array(null_mode, raw_flags, v1, v2, …)`.
fn json_array(args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let (absent, raw) = constructor_args(&args.args, "json_array")?;
    let n = num_rows(&args);
    let cols = rows_of(&args.args[2..], n)?;
    let mut out = StringBuilder::new();
    for i in 0..n {
        let mut items = Vec::new();
        for (p, c) in cols.iter().enumerate() {
            let v = json_of(c, i, raw.get(p).copied().unwrap_or(false))?;
            if !(absent && v == Json::Null) {
                items.push(v);
            }
        }
        out.append_value(to_text(&Json::Array(items)));
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

/// `JSON_STRING(v)`: the value as JSON text, NULL for NULL.
fn json_string(args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let n = num_rows(&args);
    let col = args.args[0].clone().into_array(n)?;
    let mut out = StringBuilder::new();
    for i in 0..n {
        if col.is_null(i) {
            out.append_null();
        } else {
            out.append_value(to_text(&json_of(&col, i, false)?));
        }
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_keep_order_and_number_text() {
        let v = parse(r#"{"b": 1.50, "a": [1, -2e3, 0.0000001], "s": "x\u00e9\n\"", "z": null}"#)
            .unwrap();
        assert_eq!(
            to_text(&v),
            r#"{"b":1.50,"a":[1,-2E+3,1E-7],"s":"xé\n\"","z":null}"#
        );
        for bad in ["", "{", "[1,]", "01", "{'a': 1}", "1 2", "\"a\tb\"", "nul"] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn paths_select_lax_and_strict() {
        let doc = r#"{"a": {"b": [10, {"c": "x"}]}, "a.b": 5}"#;
        let get = |p: &str| query(doc, &parse_path(p)).map(|v| v.map(|v| to_text(&v)));
        assert_eq!(get("$.a.b[0]").unwrap().as_deref(), Some("10"));
        assert_eq!(get("$.a.b[-1].c").unwrap().as_deref(), Some("\"x\""));
        assert_eq!(get("$['a.b']").unwrap().as_deref(), Some("5"));
        assert_eq!(
            get("$.a.b[*]").unwrap().as_deref(),
            Some(r#"[10,{"c":"x"}]"#)
        );
        assert_eq!(get("lax $.zz").unwrap(), None);
        assert!(get("strict $.zz").is_err());
        assert!(get("a.b").is_err());
    }
}
