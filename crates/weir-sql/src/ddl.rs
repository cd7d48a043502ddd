//! Statements beside tables and queries: `CREATE`/`DROP [TEMPORARY [SYSTEM]] FUNCTION`,
//! `DROP [TEMPORARY] TABLE|VIEW`, the Flink statements Weir refuses with a reason
//! (`LOAD MODULE`, `ADD JAR`, …), and the names of Flink features a parse error met.

use crate::parser::{WeirStatement, eat_words, peek_word, word_is};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token, Tokenizer};

fn error_at(message: impl std::fmt::Display, at: Location) -> ParserError {
    ParserError::ParserError(format!("{message}{at}"))
}

/// `[TEMPORARY [SYSTEM]]` after CREATE/DROP: how many words, and whether there.
fn temporary_words(p: &Parser, from: usize) -> usize {
    if !peek_word(p, from, "TEMPORARY") {
        0
    } else if peek_word(p, from + 1, "SYSTEM") {
        2
    } else {
        1
    }
}

/// `CREATE [TEMPORARY [SYSTEM]] FUNCTION …` or `DROP [TEMPORARY [SYSTEM]] FUNCTION|TABLE|
/// VIEW …`, when the statement is one of these.
pub fn parse(p: &mut Parser) -> Option<Result<WeirStatement, ParserError>> {
    let create = peek_word(p, 0, "CREATE");
    if !create && !peek_word(p, 0, "DROP") {
        return None;
    }
    let temporary = temporary_words(p, 1);
    let kind = p.peek_nth_token(1 + temporary).token;
    let is_function = word_is(&kind, "FUNCTION");
    // CREATE TABLE/VIEW go through their own parsers; DROP TABLE/VIEW only here when
    // TEMPORARY (sqlparser reads the plain form).
    if !is_function && (create || temporary == 0) {
        return None;
    }
    if !(is_function || word_is(&kind, "TABLE") || word_is(&kind, "VIEW")) {
        return None;
    }
    for _ in 0..2 + temporary {
        p.next_token();
    }
    Some(if is_function && create {
        create_function(p)
    } else {
        drop_object(p, &kind)
    })
}

fn create_function(p: &mut Parser) -> Result<WeirStatement, ParserError> {
    let if_not_exists = eat_words(p, &["IF", "NOT", "EXISTS"]);
    let name = p.parse_object_name(false)?.to_string();
    if !eat_words(p, &["AS"]) {
        return p.expected("AS 'identifier' after the function name", p.peek_token());
    }
    let at = p.peek_token();
    let identifier = match at.token {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => s,
        _ => return p.expected("the function's identifier as a quoted string", at),
    };
    p.next_token();
    if eat_words(p, &["LANGUAGE"]) {
        let language = p.next_token();
        match &language.token {
            Token::Word(w)
                if ["JAVA", "SCALA"].contains(&w.value.to_ascii_uppercase().as_str()) => {}
            Token::Word(w) if w.value.eq_ignore_ascii_case("PYTHON") => {
                return Err(error_at(
                    "LANGUAGE PYTHON: Weir cannot run Python functions; register a Rust function \
                     through the library (Engine::register_udf) and bind it with CREATE FUNCTION",
                    language.span.start,
                ));
            }
            _ => return p.expected("JAVA, SCALA or PYTHON after LANGUAGE", language),
        }
    }
    if peek_word(p, 0, "USING") {
        return Err(error_at(
            "CREATE FUNCTION … USING JAR: Weir cannot load JARs; register a Rust function \
             through the library (Engine::register_udf) and bind it by name",
            p.peek_token().span.start,
        ));
    }
    Ok(WeirStatement::CreateFunction {
        name,
        identifier,
        if_not_exists,
    })
}

fn drop_object(p: &mut Parser, kind: &Token) -> Result<WeirStatement, ParserError> {
    let if_exists = eat_words(p, &["IF", "EXISTS"]);
    let name = p.parse_object_name(false)?.to_string();
    Ok(if word_is(kind, "FUNCTION") {
        WeirStatement::DropFunction { name, if_exists }
    } else if word_is(kind, "TABLE") {
        WeirStatement::DropTable { name, if_exists }
    } else {
        WeirStatement::DropView { name, if_exists }
    })
}

/// Flink statements Weir refuses, with the reason, when the statement starts with one.
pub fn refused(p: &Parser) -> Option<ParserError> {
    let at = p.peek_token().span.start;
    let starts = |words: &[&str]| words.iter().enumerate().all(|(i, w)| peek_word(p, i, w));
    let why = if starts(&["LOAD", "MODULE"]) || starts(&["UNLOAD", "MODULE"]) {
        "LOAD/UNLOAD MODULE: Weir has no module system; Flink's built-in functions are always \
         there and more are registered through the library (Engine::register_udf)"
    } else if starts(&["ADD", "JAR"]) || starts(&["REMOVE", "JAR"]) || starts(&["SHOW", "JARS"]) {
        "ADD/REMOVE JAR: Weir cannot load JARs (Java code); register a Rust function through \
         the library (Engine::register_udf) and bind it with CREATE FUNCTION"
    } else if starts(&["SHOW", "MODULES"]) || starts(&["SHOW", "FULL", "MODULES"]) {
        "SHOW MODULES: Weir has no module system (SHOW FUNCTIONS lists what can be called)"
    } else {
        return None;
    };
    Some(error_at(why, at))
}

/// Flink SQL features Weir does not run yet, by the words that start them.
const NOT_YET: &[(&[&str], &str)] = &[
    (
        &["LATERAL", "TABLE"],
        "table functions (LATERAL TABLE(…)) are not supported yet",
    ),
    (&["TABLESAMPLE"], "TABLESAMPLE is not supported"),
    (&["ANALYZE", "TABLE"], "ANALYZE TABLE is not supported"),
    (&["TRUNCATE", "TABLE"], "TRUNCATE TABLE is not supported"),
    (
        &["DELETE", "FROM"],
        "DELETE is not supported (Weir's sinks are append or changelog streams)",
    ),
    (
        &["UPDATE"],
        "UPDATE is not supported (Weir's sinks are append or changelog streams)",
    ),
    (
        &["CALL"],
        "CALL is not supported (Weir has no stored procedures)",
    ),
];

/// When a statement failed to parse: the first Flink feature Weir does not support in
/// `statement` (its text, starting at `start` of the script), as an error at its place.
pub fn feature_error(statement: &str, start: Location) -> Option<ParserError> {
    let tokens = Tokenizer::new(&GenericDialect {}, statement)
        .tokenize_with_location()
        .ok()?;
    let words: Vec<_> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    for (i, t) in words.iter().enumerate() {
        for (pattern, message) in NOT_YET {
            let matches = pattern
                .iter()
                .enumerate()
                .all(|(k, w)| words.get(i + k).is_some_and(|t| word_is(&t.token, w)));
            // Statement-level patterns only count at the statement's start.
            let statement_level = matches!(
                pattern[0],
                "ANALYZE" | "TRUNCATE" | "DELETE" | "UPDATE" | "CALL"
            );
            if matches && (!statement_level || i == 0) {
                let l = t.span.start;
                let at = Location {
                    line: start.line + l.line - 1,
                    column: if l.line == 1 {
                        start.column + l.column - 1
                    } else {
                        l.column
                    },
                };
                return Some(error_at(message, at));
            }
        }
    }
    None
}
