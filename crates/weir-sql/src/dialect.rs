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

    fn supports_group_by_expr(&self) -> bool {
        true
    }

    /// `TABLE t` as an argument of a window TVF (`TUMBLE(TABLE t, …)`): parsed as the
    /// identifier `__weir_table__.t`, which [`crate::functions::rewrite_window_tvfs`] consumes;
    /// `TABLE (SELECT …)` as a subquery.
    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        let is_table =
            matches!(&parser.peek_token().token, Token::Word(w) if w.keyword == Keyword::TABLE);
        if !is_table {
            return None;
        }
        if parser.peek_nth_token(1).token == Token::LParen {
            // `TABLE (SELECT …)`: a query as the TVF's input.
            parser.next_token();
            parser.next_token();
            return Some(parser.parse_query().and_then(|q| {
                parser.expect_token(&Token::RParen)?;
                Ok(Expr::Subquery(q))
            }));
        }
        if !matches!(parser.peek_nth_token(1).token, Token::Word(_)) {
            return None;
        }
        parser.next_token();
        Some(parser.parse_object_name(false).map(|name| {
            let mut parts = vec![Ident::new(crate::functions::TABLE_ARG)];
            parts.extend(name.0.iter().filter_map(|p| p.as_ident().cloned()));
            Expr::CompoundIdentifier(parts)
        }))
    }
}
