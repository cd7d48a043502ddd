//! The Flink SQL dialect on top of sqlparser: backtick and double-quote identifiers,
//! `FILTER (WHERE …)` on aggregates. Flink-only DDL (computed columns, `WATERMARK FOR`,
//! `ROW<…>` types, `WITH` options) is parsed in [`crate::parser`] with the same parser.

use sqlparser::ast::{Expr, Ident};
use sqlparser::dialect::Dialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

#[derive(Debug, Default, Clone, Copy)]
pub struct FlinkDialect;

impl Dialect for FlinkDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        ch.is_alphabetic() || ch == '_' || ch == '$'
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        ch.is_alphanumeric() || ch == '_' || ch == '$'
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`' || ch == '"'
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        true
    }

    /// `FOR SYSTEM_TIME AS OF` (temporal joins).
    fn supports_table_versioning(&self) -> bool {
        true
    }

    fn supports_group_by_expr(&self) -> bool {
        true
    }

    fn supports_match_recognize(&self) -> bool {
        true
    }

    /// `SELECT * EXCLUDE (c)`: not Flink SQL, but what the rewrite of a lateral `UNNEST`
    /// ([`crate::unnest`]) produces.
    fn supports_select_wildcard_exclude(&self) -> bool {
        true
    }

    /// `TABLE t` as an argument of a window TVF (`TUMBLE(TABLE t, …)`): parsed as the
    /// identifier `__weir_table__.t`, which [`crate::functions::rewrite_window_tvfs`] consumes;
    /// `TABLE (SELECT …)` as a subquery. `TABLE t PARTITION BY k` (or `PARTITION BY (k1,
    /// k2)`, the SESSION TVF's form) becomes the tuple `(table, k1, k2)`.
    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        if let Some(special) = crate::dialect_functions::parse_prefix(parser) {
            return Some(special);
        }
        let is_table =
            matches!(&parser.peek_token().token, Token::Word(w) if w.keyword == Keyword::TABLE);
        if !is_table {
            return None;
        }
        let table = if parser.peek_nth_token(1).token == Token::LParen {
            // `TABLE (SELECT …)`: a query as the TVF's input.
            parser.next_token();
            parser.next_token();
            parser.parse_query().and_then(|q| {
                parser.expect_token(&Token::RParen)?;
                Ok(Expr::Subquery(q))
            })
        } else if matches!(parser.peek_nth_token(1).token, Token::Word(_)) {
            parser.next_token();
            parser.parse_object_name(false).map(|name| {
                let mut parts = vec![Ident::new(crate::functions::TABLE_ARG)];
                parts.extend(name.0.iter().filter_map(|p| p.as_ident().cloned()));
                Expr::CompoundIdentifier(parts)
            })
        } else {
            return None;
        };
        Some(table.and_then(|table| {
            if !parser.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
                return Ok(table);
            }
            let keys = if parser.consume_token(&Token::LParen) {
                let keys = parser.parse_comma_separated(|p| p.parse_identifier())?;
                parser.expect_token(&Token::RParen)?;
                keys
            } else {
                vec![parser.parse_identifier()?]
            };
            let mut tuple = vec![table];
            tuple.extend(keys.into_iter().map(Expr::Identifier));
            Ok(Expr::Tuple(tuple))
        }))
    }

    /// `x IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]`.
    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        _precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        crate::dialect_functions::parse_is_json(parser, expr)
    }
}
