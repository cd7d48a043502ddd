//! Flink function syntax that is not a plain call, parsed into plain calls of Weir's
//! functions: `JSON_VALUE(doc, path [RETURNING t] [… ON EMPTY] [… ON ERROR])`,
//! `JSON_QUERY(… [WITH [CONDITIONAL] ARRAY WRAPPER] …)`, `JSON_EXISTS(… [… ON ERROR])`,
//! `JSON_OBJECT([KEY] k VALUE v, … [NULL|ABSENT ON NULL])`, `JSON_ARRAY(v, … [NULL|ABSENT
//! ON NULL])`, `x IS [NOT] JSON [kind]` (see [`crate::flink_json`]) and the map
//! constructor `MAP[k1, v1, k2, v2, …]`.

use crate::flink_json::OnBehavior;
use crate::parser::{eat_words, peek_word};
use sqlparser::ast::{
    CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, ObjectName, UnaryOperator, Value,
};
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

type Parsed = Result<Expr, ParserError>;

fn text(s: &str) -> Expr {
    Expr::value(Value::SingleQuotedString(s.to_string()))
}

fn null() -> Expr {
    Expr::value(Value::Null)
}

pub(crate) fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// The special forms this module parses, when the next tokens start one.
pub fn parse_prefix(p: &mut Parser) -> Option<Parsed> {
    if peek_word(p, 0, "MAP") && p.peek_nth_token(1).token == Token::LBracket {
        p.next_token();
        p.next_token();
        return Some(map_constructor(p));
    }
    let Token::Word(w) = p.peek_token().token else {
        return None;
    };
    if p.peek_nth_token(1).token != Token::LParen {
        return None;
    }
    let form: fn(&mut Parser) -> Parsed = match w.value.to_ascii_uppercase().as_str() {
        "JSON_VALUE" => json_value,
        "JSON_QUERY" => json_query,
        "JSON_EXISTS" => json_exists,
        "JSON_OBJECT" => json_object,
        "JSON_ARRAY" => json_array,
        _ => return None,
    };
    p.next_token();
    p.next_token();
    Some(form(p).and_then(|e| {
        p.expect_token(&Token::RParen)?;
        Ok(e)
    }))
}

/// `MAP[k1, v1, …]` (after the `[`): `map([k1, …], [v1, …])`.
fn map_constructor(p: &mut Parser) -> Parsed {
    let at = p.peek_token().span.start;
    let items = p.parse_comma_separated(Parser::parse_expr)?;
    p.expect_token(&Token::RBracket)?;
    if items.len() % 2 != 0 {
        return Err(ParserError::ParserError(format!(
            "MAP[…] takes keys and values in pairs: MAP[k1, v1, k2, v2, …]{at}"
        )));
    }
    let (keys, values): (Vec<_>, Vec<_>) = items
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .unzip();
    Ok(call(
        "map",
        vec![call("make_array", keys), call("make_array", values)],
    ))
}

/// The two arguments every JSON query function starts with.
fn doc_and_path(p: &mut Parser) -> Result<(Expr, Expr), ParserError> {
    let doc = p.parse_expr()?;
    p.expect_token(&Token::Comma)?;
    Ok((doc, p.parse_expr()?))
}

/// `NULL | ERROR | DEFAULT expr | EMPTY ARRAY | EMPTY OBJECT` before `ON EMPTY|ERROR`.
fn behavior(p: &mut Parser, query: bool) -> Result<Option<(OnBehavior, Expr)>, ParserError> {
    let found = if peek_word(p, 0, "NULL") && peek_word(p, 1, "ON") {
        p.next_token();
        (OnBehavior::Null, null())
    } else if peek_word(p, 0, "ERROR") && peek_word(p, 1, "ON") {
        p.next_token();
        (OnBehavior::Error, null())
    } else if !query && eat_words(p, &["DEFAULT"]) {
        (OnBehavior::Default, p.parse_expr()?)
    } else if query && eat_words(p, &["EMPTY", "ARRAY"]) {
        (OnBehavior::EmptyArray, null())
    } else if query && eat_words(p, &["EMPTY", "OBJECT"]) {
        (OnBehavior::EmptyObject, null())
    } else {
        return Ok(None);
    };
    Ok(Some(found))
}

/// The `… ON EMPTY` and `… ON ERROR` clauses: (on empty, on error).
fn behaviors(p: &mut Parser, query: bool) -> Result<[(OnBehavior, Expr); 2], ParserError> {
    let mut out = [(OnBehavior::Null, null()), (OnBehavior::Null, null())];
    while let Some(b) = behavior(p, query)? {
        if eat_words(p, &["ON", "EMPTY"]) {
            out[0] = b;
        } else if eat_words(p, &["ON", "ERROR"]) {
            out[1] = b;
        } else {
            return p.expected("ON EMPTY or ON ERROR", p.peek_token());
        }
    }
    Ok(out)
}

fn json_value(p: &mut Parser) -> Parsed {
    let (doc, path) = doc_and_path(p)?;
    let at = p.peek_nth_token(1).span.start;
    let returning = if eat_words(p, &["RETURNING"]) {
        Some(p.parse_data_type()?)
    } else {
        None
    };
    let text_wanted = match &returning {
        None | Some(DataType::String(_) | DataType::Varchar(_) | DataType::Char(_)) => true,
        Some(DataType::Boolean | DataType::Int(_) | DataType::Integer(_) | DataType::Double(_)) => {
            false
        }
        Some(other) => {
            return Err(ParserError::ParserError(format!(
                "Unsupported type '{other}' for RETURNING in JSON_VALUE() (Flink's: STRING, \
                 BOOLEAN, INT, DOUBLE){at}"
            )));
        }
    };
    let [(empty, empty_default), (error, error_default)] = behaviors(p, false)?;
    let value = call(
        "json_value",
        vec![
            doc,
            path,
            text(if text_wanted { "STRING" } else { "OTHER" }),
            text(empty.name()),
            empty_default,
            text(error.name()),
            error_default,
        ],
    );
    Ok(match returning {
        Some(data_type) if !text_wanted => Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(value),
            data_type,
            array: false,
            format: None,
        },
        _ => value,
    })
}

fn json_query(p: &mut Parser) -> Parsed {
    let (doc, path) = doc_and_path(p)?;
    if eat_words(p, &["RETURNING"]) {
        let at = p.peek_token().span.start;
        let t = p.parse_data_type()?;
        if !matches!(t, DataType::String(_) | DataType::Varchar(_)) {
            return Err(ParserError::ParserError(format!(
                "JSON_QUERY(… RETURNING {t}) is not supported yet (STRING is){at}"
            )));
        }
    }
    let wrapper = if eat_words(p, &["WITHOUT"]) {
        eat_words(p, &["ARRAY"]);
        if !eat_words(p, &["WRAPPER"]) {
            return p.expected("WRAPPER", p.peek_token());
        }
        "WITHOUT"
    } else if eat_words(p, &["WITH"]) {
        let kind = if eat_words(p, &["CONDITIONAL"]) {
            "CONDITIONAL"
        } else {
            eat_words(p, &["UNCONDITIONAL"]);
            "UNCONDITIONAL"
        };
        eat_words(p, &["ARRAY"]);
        if !eat_words(p, &["WRAPPER"]) {
            return p.expected("WRAPPER", p.peek_token());
        }
        kind
    } else {
        "WITHOUT"
    };
    let [(empty, _), (error, _)] = behaviors(p, true)?;
    Ok(call(
        "json_query",
        vec![
            doc,
            path,
            text(wrapper),
            text(empty.name()),
            text(error.name()),
        ],
    ))
}

fn json_exists(p: &mut Parser) -> Parsed {
    let (doc, path) = doc_and_path(p)?;
    let mut args = vec![doc, path];
    for b in ["TRUE", "FALSE", "UNKNOWN", "ERROR"] {
        if eat_words(p, &[b, "ON", "ERROR"]) {
            args.push(text(b));
            break;
        }
    }
    Ok(call("json_exists", args))
}

/// `NULL ON NULL` (false) or `ABSENT ON NULL` (true), when next.
fn null_clause(p: &mut Parser) -> Option<bool> {
    if eat_words(p, &["NULL", "ON", "NULL"]) {
        Some(false)
    } else if eat_words(p, &["ABSENT", "ON", "NULL"]) {
        Some(true)
    } else {
        None
    }
}

/// Whether `e` is the result of a JSON constructor (inserted as JSON, not as text).
fn is_constructor(e: &Expr) -> bool {
    matches!(e, Expr::Function(f) if ["json_object", "json_array"].contains(&f.name.to_string().as_str()))
}

/// The arguments of `json_object`/`json_array`: null mode, raw flags, then `items`.
fn constructor(name: &str, absent: bool, items: Vec<Expr>, raw: String) -> Expr {
    let mut args = vec![text(if absent { "ABSENT" } else { "NULL" }), text(&raw)];
    args.extend(items);
    call(name, args)
}

fn json_object(p: &mut Parser) -> Parsed {
    let (mut items, mut raw, mut absent) = (Vec::new(), String::new(), false);
    if p.peek_token().token != Token::RParen {
        loop {
            if let Some(a) = null_clause(p) {
                absent = a;
                break;
            }
            if peek_word(p, 0, "KEY") && !peek_word(p, 1, "VALUE") {
                p.next_token();
            }
            let key = p.parse_expr()?;
            if !eat_words(p, &["VALUE"]) {
                return p.expected("VALUE after the JSON_OBJECT key", p.peek_token());
            }
            let value = p.parse_expr()?;
            raw.push(if is_constructor(&value) { '1' } else { '0' });
            items.extend([key, value]);
            if p.consume_token(&Token::Comma) {
                continue;
            }
            absent = null_clause(p).unwrap_or(false);
            break;
        }
    }
    Ok(constructor("json_object", absent, items, raw))
}

fn json_array(p: &mut Parser) -> Parsed {
    // Flink's default for arrays is ABSENT ON NULL.
    let (mut items, mut raw, mut absent) = (Vec::new(), String::new(), true);
    if p.peek_token().token != Token::RParen {
        loop {
            if let Some(a) = null_clause(p) {
                absent = a;
                break;
            }
            let value = p.parse_expr()?;
            raw.push(if is_constructor(&value) { '1' } else { '0' });
            items.push(value);
            if p.consume_token(&Token::Comma) {
                continue;
            }
            absent = null_clause(p).unwrap_or(true);
            break;
        }
    }
    Ok(constructor("json_array", absent, items, raw))
}

/// `x IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]`, when the next tokens are that.
pub fn parse_is_json(p: &mut Parser, expr: &Expr) -> Option<Parsed> {
    let negated = peek_word(p, 1, "NOT");
    let json_at = if negated { 2 } else { 1 };
    if !peek_word(p, 0, "IS") || !peek_word(p, json_at, "JSON") {
        return None;
    }
    for _ in 0..=json_at {
        p.next_token();
    }
    let kind = ["VALUE", "SCALAR", "ARRAY", "OBJECT"]
        .into_iter()
        .find(|k| eat_words(p, &[k]))
        .unwrap_or("VALUE");
    let test = call("is_json", vec![expr.clone(), text(kind)]);
    Some(Ok(if negated {
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(Expr::Nested(Box::new(test))),
        }
    } else {
        test
    }))
}
