//! The Flink SQL dialect on top of sqlparser: backtick and double-quote identifiers,
//! `FILTER (WHERE …)` on aggregates. Flink-only DDL (computed columns, `WATERMARK FOR`,
//! `ROW<…>` types, `WITH` options) is parsed in [`crate::parser`] with the same parser.

use sqlparser::dialect::Dialect;

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
}
