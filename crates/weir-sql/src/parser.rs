//! Splits a SQL script into statements and parses each: Flink DDL here, everything else
//! through sqlparser with the [`FlinkDialect`]. Errors carry line and column.

use crate::dialect::FlinkDialect;
use crate::types::parse_type;
use arrow::datatypes::DataType;
use sqlparser::ast::{Expr, ObjectName, Query, Statement};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan};
use std::collections::BTreeMap;
use weir_common::{Result, SqlLocation};

/// A physical column of a `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct ColumnSpec {
    pub name: String,
    pub data_type: DataType,
    pub nullable: bool,
    /// `METADATA [FROM 'key'] [VIRTUAL]`: a value the connector gives (or takes) beside
    /// the record, such as a file's name.
    pub metadata: Option<MetadataSpec>,
}

/// A metadata column: the connector's key for it and whether it is only read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataSpec {
    pub key: String,
    pub is_virtual: bool,
}

/// A parsed `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct CreateTable {
    pub name: String,
    pub if_not_exists: bool,
    /// Physical and computed columns in declaration order.
    pub columns: Vec<ColumnOrComputed>,
    pub watermark: Option<(String, Expr)>,
    pub primary_key: Vec<String>,
    pub partitioned_by: Vec<String>,
    pub options: BTreeMap<String, String>,
    /// `LIKE other [(…)]`: what to take from another table.
    pub like: Option<LikeClause>,
    pub location: SqlLocation,
    /// `CREATE TEMPORARY TABLE`: kept in the session only, also in a persistent catalog.
    pub temporary: bool,
}

impl CreateTable {
    /// A definition with a name and nothing else yet, for the parser to fill.
    pub fn empty(name: String, location: SqlLocation) -> Self {
        Self {
            name,
            if_not_exists: false,
            columns: Vec::new(),
            watermark: None,
            primary_key: Vec::new(),
            partitioned_by: Vec::new(),
            options: BTreeMap::new(),
            like: None,
            location,
            temporary: false,
        }
    }

    /// The metadata columns: (column, connector key, virtual).
    pub fn metadata_columns(&self) -> Vec<(String, MetadataSpec)> {
        self.columns
            .iter()
            .filter_map(|c| match c {
                ColumnOrComputed::Column(ColumnSpec {
                    name,
                    metadata: Some(m),
                    ..
                }) => Some((name.clone(), m.clone())),
                _ => None,
            })
            .collect()
    }

    /// The physical columns (what a connector reads, metadata included; no computed
    /// columns).
    pub fn physical_schema(&self) -> arrow::datatypes::SchemaRef {
        let fields: Vec<arrow::datatypes::Field> = self
            .columns
            .iter()
            .filter_map(|c| match c {
                ColumnOrComputed::Column(c) => Some(arrow::datatypes::Field::new(
                    &c.name,
                    c.data_type.clone(),
                    c.nullable,
                )),
                ColumnOrComputed::Computed { .. } => None,
            })
            .collect();
        std::sync::Arc::new(arrow::datatypes::Schema::new(fields))
    }
}

impl std::fmt::Display for CreateTable {
    /// The statement in Flink's syntax (without a `LIKE` clause, which has been resolved),
    /// sensitive option values masked as Flink masks them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write_sql(f, true)
    }
}

impl CreateTable {
    /// The statement with every option value as it is (for a persistent catalog).
    pub fn unmasked_sql(&self) -> String {
        struct Unmasked<'a>(&'a CreateTable);
        impl std::fmt::Display for Unmasked<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.write_sql(f, false)
            }
        }
        Unmasked(self).to_string()
    }

    fn write_sql(&self, f: &mut std::fmt::Formatter<'_>, mask: bool) -> std::fmt::Result {
        let quote = |s: &str| format!("`{}`", s.replace('`', "``"));
        let text = |s: &str| format!("'{}'", s.replace('\'', "''"));
        let mut items: Vec<String> = self
            .columns
            .iter()
            .map(|c| match c {
                ColumnOrComputed::Column(c) => format!(
                    "{} {}{}{}",
                    quote(&c.name),
                    crate::types::sql_name(&c.data_type),
                    if c.nullable { "" } else { " NOT NULL" },
                    match &c.metadata {
                        None => String::new(),
                        Some(m) => format!(
                            " METADATA FROM {}{}",
                            text(&m.key),
                            if m.is_virtual { " VIRTUAL" } else { "" }
                        ),
                    }
                ),
                ColumnOrComputed::Computed { name, expr } => format!("{} AS {expr}", quote(name)),
            })
            .collect();
        if let Some((column, expr)) = &self.watermark {
            items.push(format!("WATERMARK FOR {} AS {expr}", quote(column)));
        }
        if !self.primary_key.is_empty() {
            let keys: Vec<String> = self.primary_key.iter().map(|k| quote(k)).collect();
            items.push(format!("PRIMARY KEY ({}) NOT ENFORCED", keys.join(", ")));
        }
        let name: Vec<String> = crate::catalog::split_name(&self.name)
            .iter()
            .map(|p| quote(p))
            .collect();
        write!(
            f,
            "CREATE TABLE {} (\n  {}\n)",
            name.join("."),
            items.join(",\n  ")
        )?;
        if !self.partitioned_by.is_empty() {
            let keys: Vec<String> = self.partitioned_by.iter().map(|k| quote(k)).collect();
            write!(f, " PARTITIONED BY ({})", keys.join(", "))?;
        }
        let options: Vec<String> = self
            .options
            .iter()
            .map(|(k, v)| {
                let v = if mask {
                    weir_common::redact::display_value(k, v)
                } else {
                    v.as_str()
                };
                format!("{} = {}", text(k), text(v))
            })
            .collect();
        write!(f, " WITH (\n  {}\n)", options.join(",\n  "))
    }
}

/// Flink's `LIKE` clause of `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct LikeClause {
    pub table: String,
    /// The like options in their order (later ones win).
    pub options: Vec<(LikeStrategy, LikeFeature)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeStrategy {
    /// Take the feature; a clash with the new table's is an error.
    Including,
    Excluding,
    /// Take the feature; the new table's wins a clash.
    Overwriting,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeFeature {
    All,
    Constraints,
    Partitions,
    Generated,
    Options,
    Watermarks,
    Metadata,
}

#[derive(Debug, Clone)]
pub enum ColumnOrComputed {
    Column(ColumnSpec),
    Computed { name: String, expr: Box<Expr> },
}

impl ColumnOrComputed {
    pub fn name(&self) -> &str {
        match self {
            ColumnOrComputed::Column(c) => &c.name,
            ColumnOrComputed::Computed { name, .. } => name,
        }
    }
}

/// One statement of a script.
#[derive(Debug, Clone)]
pub enum WeirStatement {
    CreateTable(Box<CreateTable>),
    /// `CREATE TABLE t WITH (…) AS SELECT …`: a table with the query's columns, which the
    /// query then fills (Flink's CTAS).
    CreateTableAs {
        table: Box<CreateTable>,
        query: Box<Query>,
    },
    CreateView {
        name: String,
        /// `CREATE TEMPORARY VIEW`: kept in the session only, also in a persistent catalog.
        temporary: bool,
        or_replace: bool,
        query: Box<Query>,
        sql: String,
    },
    DropTable {
        name: String,
        if_exists: bool,
    },
    DropView {
        name: String,
        if_exists: bool,
    },
    /// `CREATE [TEMPORARY [SYSTEM]] FUNCTION name AS 'identifier'`: binds `name` to a
    /// registered function (see the engine).
    CreateFunction {
        name: String,
        identifier: String,
        if_not_exists: bool,
    },
    DropFunction {
        name: String,
        if_exists: bool,
    },
    Insert {
        table: String,
        /// `INSERT INTO t (a, b) …`: the columns written, in the query's order; empty:
        /// all of them, in the table's order.
        columns: Vec<String>,
        query: Box<Query>,
        /// `INSERT OVERWRITE`: replace what the table (or the partitions written) holds.
        overwrite: bool,
        /// `PARTITION (k = v, …)`: static partition values (column, literal).
        partition: Vec<(String, Expr)>,
    },
    Select(Box<Query>),
    Set {
        key: String,
        value: String,
    },
    ShowSet,
    Reset {
        key: Option<String>,
    },
    /// Catalogs, databases, `SHOW TABLES/VIEWS/COLUMNS …`, `ALTER TABLE/VIEW`.
    Catalog(crate::catalog_ddl::CatalogStatement),
    /// `SHOW FUNCTIONS`.
    ShowFunctions,
    /// `SHOW CREATE TABLE t`: the table's DDL, with any `LIKE` resolved.
    ShowCreateTable {
        name: String,
    },
    /// `SHOW JOBS` (shell).
    ShowJobs,
    /// `STOP JOB 'id' [WITH SAVEPOINT] [DRAIN]` (shell).
    StopJob {
        id: String,
        savepoint: bool,
        drain: bool,
    },
    Describe {
        name: String,
    },
    Explain(Box<WeirStatement>),
    /// `EXECUTE STATEMENT SET BEGIN INSERT …; … END` (or the SQL client's
    /// `BEGIN STATEMENT SET; INSERT …; … END`): `INSERT INTO` statements run as one job.
    StatementSet(Vec<Located>),
}

/// A statement with the position where it starts.
#[derive(Debug, Clone)]
pub struct Located {
    pub statement: WeirStatement,
    pub location: SqlLocation,
}

/// Whether `tok` is the unquoted word `word` (any case).
pub(crate) fn word_is(tok: &Token, word: &str) -> bool {
    matches!(tok, Token::Word(w) if w.value.eq_ignore_ascii_case(word) && w.quote_style.is_none())
}

/// Whether the `n`-th next token is the unquoted word `word`.
pub(crate) fn peek_word(p: &Parser, n: usize, word: &str) -> bool {
    word_is(&p.peek_nth_token(n).token, word)
}

/// Consumes `words` when the next tokens are exactly these words.
pub(crate) fn eat_words(p: &mut Parser, words: &[&str]) -> bool {
    if words.iter().enumerate().all(|(i, w)| peek_word(p, i, w)) {
        for _ in words {
            p.next_token();
        }
        true
    } else {
        false
    }
}

/// A (possibly compound) name as one string: parts joined by `.`, a part that holds `.`
/// or `` ` `` quoted with backticks (`catalog::split_name` takes it apart again).
pub(crate) fn object_name(name: &ObjectName) -> String {
    name.0
        .iter()
        .map(|p| {
            let part = p
                .as_ident()
                .map(|i| i.value.clone())
                .unwrap_or_else(|| p.to_string());
            if part.contains(['.', '`']) {
                crate::catalog::quote_identifier(&part)
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Parses a script of `;`-separated statements.
pub fn parse_script(sql: &str) -> Result<Vec<Located>> {
    let dialect = FlinkDialect;
    let tokens = sqlparser::tokenizer::Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(ParserError::from)?;
    let mut p = Parser::new(&dialect).with_tokens_with_locations(within_as_symbol(tokens));
    let mut out = Vec::new();
    loop {
        while p.consume_token(&Token::SemiColon) {}
        let start = p.peek_token();
        if start.token == Token::EOF {
            break;
        }
        let location = SqlLocation {
            line: start.span.start.line,
            column: start.span.start.column,
        };
        let statement = parse_statement(&mut p, sql)?;
        out.push(Located {
            statement,
            location,
        });
        let next = p.peek_token();
        if !p.consume_token(&Token::SemiColon) && next.token != Token::EOF {
            // The statement stopped early: at a Flink feature Weir does not run yet?
            let text = statement_text(sql, location.line, location.column);
            let feature = crate::ddl::feature_error(&text, start.span.start);
            return Err(feature
                .unwrap_or_else(|| {
                    p.expected::<()>("';' after the statement", next)
                        .unwrap_err()
                })
                .into());
        }
    }
    Ok(out)
}

/// `MATCH_RECOGNIZE (… PATTERN (…) WITHIN INTERVAL '1' HOUR DEFINE …)`: sqlparser does not
/// know Flink's `WITHIN`, so it travels as a symbol definition the planner takes out:
/// `DEFINE __weir_within AS INTERVAL '1' HOUR, …`.
fn within_as_symbol(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let significant = |t: &TokenWithSpan| !matches!(t.token, Token::Whitespace(_));
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        let after_paren = out
            .iter()
            .rev()
            .find(|t| significant(t))
            .is_some_and(|t| t.token == Token::RParen);
        let interval_next = tokens[i + 1..]
            .iter()
            .find(|t| significant(t))
            .is_some_and(|t| word_is(&t.token, "INTERVAL"));
        if word_is(&t.token, "WITHIN") && after_paren && interval_next {
            // The interval runs to the DEFINE keyword (within the statement).
            let define = (i + 1..tokens.len())
                .take_while(|j| tokens[*j].token != Token::SemiColon)
                .find(|j| word_is(&tokens[*j].token, "DEFINE"));
            if let Some(d) = define {
                let at = t.span;
                let word = |w: &str| TokenWithSpan::new(Token::make_word(w, None), at);
                out.push(tokens[d].clone());
                out.push(TokenWithSpan::new(
                    Token::Whitespace(sqlparser::tokenizer::Whitespace::Space),
                    at,
                ));
                out.push(word(crate::planner::WITHIN_SYMBOL));
                out.push(TokenWithSpan::new(
                    Token::Whitespace(sqlparser::tokenizer::Whitespace::Space),
                    at,
                ));
                out.push(word("AS"));
                out.extend(tokens[i + 1..d].iter().cloned());
                out.push(TokenWithSpan::new(Token::Comma, at));
                i = d + 1;
                continue;
            }
        }
        out.push(t.clone());
        i += 1;
    }
    out
}

fn parse_statement(p: &mut Parser, sql: &str) -> Result<WeirStatement, ParserError> {
    if let Some(refused) = crate::ddl::refused(p) {
        return Err(refused);
    }
    if let Some(statement) = crate::ddl::parse(p) {
        return statement;
    }
    if let Some(statement) = crate::catalog_ddl::parse(p, sql) {
        return statement;
    }
    // Flink's `EXECUTE INSERT …` is an INSERT.
    if word_is(&p.peek_token().token, "EXECUTE") && word_is(&p.peek_nth_token(1).token, "INSERT") {
        p.next_token();
    }
    let tok = p.peek_token().token;
    if word_is(&tok, "CREATE") {
        let is_table = word_is(&p.peek_nth_token(1).token, "TABLE")
            || (word_is(&p.peek_nth_token(1).token, "TEMPORARY")
                && word_is(&p.peek_nth_token(2).token, "TABLE"));
        if is_table {
            let loc = p.peek_token().span.start;
            p.next_token();
            let temporary = p.parse_keyword(Keyword::TEMPORARY);
            p.expect_keyword(Keyword::TABLE)?;
            let mut table = parse_create_table(
                p,
                SqlLocation {
                    line: loc.line,
                    column: loc.column,
                },
            )?;
            table.temporary = temporary;
            let at = |what: &str| {
                ParserError::ParserError(format!(
                    "CREATE TABLE '{}': {what} at Line: {}, Column: {}",
                    table.name, loc.line, loc.column
                ))
            };
            if p.parse_keyword(Keyword::AS) {
                if table.like.is_some() {
                    return Err(at("LIKE and AS SELECT do not go together"));
                }
                if !table.columns.is_empty() || table.watermark.is_some() {
                    return Err(at(
                        "CREATE TABLE … AS SELECT takes its columns from the query; remove the column list",
                    ));
                }
                if table.if_not_exists {
                    return Err(at("IF NOT EXISTS is not supported with AS SELECT"));
                }
                let query = p.parse_query()?;
                return Ok(WeirStatement::CreateTableAs {
                    table: Box::new(table),
                    query,
                });
            }
            if table.columns.is_empty() && table.like.is_none() {
                return Err(at("the table has no columns"));
            }
            return Ok(WeirStatement::CreateTable(Box::new(table)));
        }
    }
    if word_is(&tok, "SET") {
        p.next_token();
        let next = p.peek_token().token;
        if matches!(next, Token::SemiColon | Token::EOF) {
            return Ok(WeirStatement::ShowSet);
        }
        let key = parse_set_word(p, true)?;
        p.expect_token(&Token::Eq)?;
        let value = parse_set_word(p, false)?;
        return Ok(WeirStatement::Set { key, value });
    }
    if word_is(&tok, "RESET") {
        p.next_token();
        let next = p.peek_token().token;
        if matches!(next, Token::SemiColon | Token::EOF) {
            return Ok(WeirStatement::Reset { key: None });
        }
        return Ok(WeirStatement::Reset {
            key: Some(parse_set_word(p, false)?),
        });
    }
    if word_is(&tok, "SHOW") && word_is(&p.peek_nth_token(1).token, "JOBS") {
        p.next_token();
        p.next_token();
        return Ok(WeirStatement::ShowJobs);
    }
    if word_is(&tok, "STOP") && word_is(&p.peek_nth_token(1).token, "JOB") {
        p.next_token();
        p.next_token();
        let id = parse_key(p)?;
        let savepoint = p.parse_keywords(&[Keyword::WITH, Keyword::SAVEPOINT]);
        let drain = word_is(&p.peek_token().token, "DRAIN");
        if drain {
            p.next_token();
        }
        return Ok(WeirStatement::StopJob {
            id,
            savepoint,
            drain,
        });
    }
    if word_is(&tok, "SHOW")
        && word_is(&p.peek_nth_token(1).token, "CREATE")
        && word_is(&p.peek_nth_token(2).token, "TABLE")
    {
        for _ in 0..3 {
            p.next_token();
        }
        let name = p.parse_object_name(false)?;
        return Ok(WeirStatement::ShowCreateTable {
            name: object_name(&name),
        });
    }
    if word_is(&tok, "SHOW") && word_is(&p.peek_nth_token(1).token, "FUNCTIONS") {
        p.next_token();
        p.next_token();
        return Ok(WeirStatement::ShowFunctions);
    }
    if word_is(&tok, "DESCRIBE") || word_is(&tok, "DESC") {
        p.next_token();
        let name = p.parse_object_name(false)?;
        return Ok(WeirStatement::Describe {
            name: object_name(&name),
        });
    }
    // `EXECUTE STATEMENT SET BEGIN …`, and `STATEMENT SET BEGIN …` after EXPLAIN.
    let at = usize::from(word_is(&tok, "EXECUTE"));
    if word_is(&p.peek_nth_token(at).token, "STATEMENT")
        && word_is(&p.peek_nth_token(at + 1).token, "SET")
    {
        let open = p.peek_token().span.start;
        for _ in 0..at + 2 {
            p.next_token();
        }
        p.expect_keyword(Keyword::BEGIN)?;
        return statement_set(p, sql, open);
    }
    if word_is(&tok, "BEGIN")
        && word_is(&p.peek_nth_token(1).token, "STATEMENT")
        && word_is(&p.peek_nth_token(2).token, "SET")
    {
        let open = p.peek_token().span.start;
        p.next_token();
        p.next_token();
        p.next_token();
        p.expect_token(&Token::SemiColon)?;
        return statement_set(p, sql, open);
    }
    if word_is(&tok, "EXPLAIN") {
        p.next_token();
        let _ = p.parse_keywords(&[Keyword::PLAN, Keyword::FOR]);
        return Ok(WeirStatement::Explain(Box::new(parse_statement(p, sql)?)));
    }
    let start = p.peek_token().span.start;
    let feature_error =
        || crate::ddl::feature_error(&statement_text(sql, start.line, start.column), start);
    let stmt = match p.parse_statement() {
        Ok(stmt) => stmt,
        Err(e) => return Err(feature_error().unwrap_or(e)),
    };
    Ok(match stmt {
        Statement::Query(q) if matches!(q.body.as_ref(), sqlparser::ast::SetExpr::Insert(_)) => {
            return Err(ParserError::ParserError(format!(
                "WITH … INSERT INTO is not supported; write INSERT INTO t WITH … SELECT … at Line: {}, Column: {}",
                start.line, start.column
            )));
        }
        Statement::Query(q) => WeirStatement::Select(q),
        Statement::Insert(insert) => {
            let table = match &insert.table {
                sqlparser::ast::TableObject::TableName(n) => object_name(n),
                other => {
                    return Err(ParserError::ParserError(format!(
                        "INSERT INTO {other} is not supported at Line: {}, Column: {}",
                        start.line, start.column
                    )));
                }
            };
            let mut partition = Vec::new();
            for item in insert.partitioned.iter().flatten() {
                if let Expr::BinaryOp {
                    left,
                    op: sqlparser::ast::BinaryOperator::Eq,
                    right,
                } = item
                    && let Expr::Identifier(column) = left.as_ref()
                {
                    partition.push((column.value.clone(), (**right).clone()));
                    continue;
                }
                return Err(ParserError::ParserError(format!(
                    "PARTITION ({item}): write static partition values as column = value \
                     at Line: {}, Column: {}",
                    start.line, start.column
                )));
            }
            let Some(query) = insert.source else {
                return Err(ParserError::ParserError(format!(
                    "INSERT needs a SELECT or VALUES at Line: {}, Column: {}",
                    start.line, start.column
                )));
            };
            WeirStatement::Insert {
                table,
                columns: insert.columns.iter().map(object_name).collect(),
                query,
                overwrite: insert.overwrite,
                partition,
            }
        }
        Statement::CreateView(v) => {
            if v.materialized {
                return Err(ParserError::ParserError(format!(
                    "materialized views are not supported at Line: {}, Column: {}",
                    start.line, start.column
                )));
            }
            let text = statement_text(sql, start.line, start.column);
            WeirStatement::CreateView {
                name: object_name(&v.name),
                temporary: v.temporary,
                or_replace: v.or_replace,
                query: v.query,
                sql: text,
            }
        }
        Statement::Drop {
            object_type,
            if_exists,
            names,
            ..
        } => {
            let name = names.first().map(object_name).unwrap_or_default();
            match object_type {
                sqlparser::ast::ObjectType::Table => WeirStatement::DropTable { name, if_exists },
                sqlparser::ast::ObjectType::View => WeirStatement::DropView { name, if_exists },
                other => {
                    return Err(ParserError::ParserError(format!(
                        "DROP {other} is not supported at Line: {}, Column: {}",
                        start.line, start.column
                    )));
                }
            }
        }
        _ if feature_error().is_some() => return Err(feature_error().expect("checked")),
        other => {
            let kind = other
                .to_string()
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            return Err(ParserError::ParserError(format!(
                "unsupported statement '{kind} …'; Weir runs CREATE TABLE, CREATE VIEW, INSERT INTO, EXECUTE STATEMENT SET, SELECT, SET, RESET, SHOW TABLES, DESCRIBE and EXPLAIN at Line: {}, Column: {}",
                start.line, start.column
            )));
        }
    })
}

/// The `INSERT INTO` statements of a statement set, each ending with `;`, up to `END`.
fn statement_set(
    p: &mut Parser,
    sql: &str,
    open: sqlparser::tokenizer::Location,
) -> Result<WeirStatement, ParserError> {
    let mut inserts = Vec::new();
    loop {
        while p.consume_token(&Token::SemiColon) {}
        let start = p.peek_token();
        if word_is(&start.token, "END") {
            p.next_token();
            break;
        }
        let location = SqlLocation {
            line: start.span.start.line,
            column: start.span.start.column,
        };
        if start.token == Token::EOF {
            return Err(ParserError::ParserError(format!(
                "the STATEMENT SET is not closed with END at Line: {}, Column: {}",
                open.line, open.column
            )));
        }
        let statement = parse_statement(p, sql)?;
        if !matches!(statement, WeirStatement::Insert { .. }) {
            return Err(ParserError::ParserError(format!(
                "a STATEMENT SET holds only INSERT INTO statements at Line: {}, Column: {}",
                location.line, location.column
            )));
        }
        inserts.push(Located {
            statement,
            location,
        });
        let next = p.peek_token();
        if !p.consume_token(&Token::SemiColon) {
            return p.expected("';' after the INSERT INTO statement", next);
        }
    }
    if inserts.is_empty() {
        return p.expected("an INSERT INTO statement before END", p.peek_token());
    }
    Ok(WeirStatement::StatementSet(inserts))
}

/// The text of a statement from its start (for view definitions).
fn statement_text(sql: &str, line: u64, column: u64) -> String {
    let mut offset = 0;
    for (i, l) in sql.split_inclusive('\n').enumerate() {
        if i as u64 + 1 == line {
            offset += l
                .char_indices()
                .nth(column.saturating_sub(1) as usize)
                .map(|(o, _)| o)
                .unwrap_or(0);
            break;
        }
        offset += l.len();
    }
    let rest = &sql[offset.min(sql.len())..];
    rest.split(';').next().unwrap_or(rest).trim().to_string()
}

/// A `SET`/`RESET` key or value as Flink's SQL client reads it: a quoted string, or the
/// bare text up to `=` (a key) or the statement's end (a value), so that unquoted keys may
/// hold dots and dashes (`SET execution.runtime-mode = batch`).
fn parse_set_word(p: &mut Parser, key: bool) -> Result<String, ParserError> {
    if let Token::SingleQuotedString(_) | Token::DoubleQuotedString(_) = p.peek_token().token {
        return parse_key(p);
    }
    let mut text = String::new();
    loop {
        let tok = p.peek_token();
        match &tok.token {
            Token::Eq if key => break,
            Token::SemiColon | Token::EOF => break,
            t => text.push_str(&t.to_string()),
        }
        p.next_token();
    }
    if text.is_empty() {
        let tok = p.peek_token();
        return p.expected(
            if key {
                "a key, e.g. 'parallelism.default'"
            } else {
                "a value"
            },
            tok,
        );
    }
    Ok(text)
}

/// A key or value: a quoted string, or bare words joined by dots.
pub(crate) fn parse_key(p: &mut Parser) -> Result<String, ParserError> {
    let tok = p.next_token();
    match tok.token {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Ok(s),
        Token::Word(w) => {
            let mut s = w.value;
            while p.consume_token(&Token::Period) {
                s.push('.');
                s.push_str(&p.parse_identifier()?.value);
            }
            Ok(s)
        }
        Token::Number(n, _) => Ok(n),
        _ => p.expected("a quoted key or value, e.g. 'parallelism.default'", tok),
    }
}

fn parse_create_table(p: &mut Parser, location: SqlLocation) -> Result<CreateTable, ParserError> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = object_name(&p.parse_object_name(false)?);
    let mut table = CreateTable {
        if_not_exists,
        ..CreateTable::empty(name, location)
    };
    // No column list: CREATE TABLE … AS SELECT.
    let mut columns_open = p.consume_token(&Token::LParen);
    while columns_open {
        parse_table_item(p, &mut table)?;
        if !p.consume_token(&Token::Comma) {
            p.expect_token(&Token::RParen)?;
            columns_open = false;
        }
    }
    if p.parse_keyword(Keyword::COMMENT) {
        p.parse_literal_string()?;
    }
    if p.parse_keywords(&[Keyword::PARTITIONED, Keyword::BY]) {
        table.partitioned_by = p
            .parse_parenthesized_column_list(sqlparser::parser::IsOptional::Mandatory, false)?
            .into_iter()
            .map(|i| i.value)
            .collect();
    }
    if p.parse_keyword(Keyword::WITH) {
        table.options = parse_options(p)?;
    }
    if p.parse_keyword(Keyword::LIKE) {
        let source = object_name(&p.parse_object_name(false)?);
        let mut options = Vec::new();
        if p.consume_token(&Token::LParen) {
            loop {
                let strategy = match p.next_token() {
                    t if word_is(&t.token, "INCLUDING") => LikeStrategy::Including,
                    t if word_is(&t.token, "EXCLUDING") => LikeStrategy::Excluding,
                    t if word_is(&t.token, "OVERWRITING") => LikeStrategy::Overwriting,
                    t => return p.expected("INCLUDING, EXCLUDING or OVERWRITING", t),
                };
                let t = p.next_token();
                let word = match &t.token {
                    Token::Word(w) => w.value.to_ascii_uppercase(),
                    _ => String::new(),
                };
                let feature = match word.as_str() {
                    "ALL" => LikeFeature::All,
                    "CONSTRAINTS" => LikeFeature::Constraints,
                    "PARTITIONS" => LikeFeature::Partitions,
                    "GENERATED" => LikeFeature::Generated,
                    "OPTIONS" => LikeFeature::Options,
                    "WATERMARKS" => LikeFeature::Watermarks,
                    "METADATA" => LikeFeature::Metadata,
                    _ => {
                        return p.expected(
                            "ALL, CONSTRAINTS, PARTITIONS, GENERATED, OPTIONS, WATERMARKS or METADATA",
                            t,
                        );
                    }
                };
                if strategy == LikeStrategy::Overwriting
                    && matches!(
                        feature,
                        LikeFeature::All | LikeFeature::Constraints | LikeFeature::Partitions
                    )
                {
                    return Err(ParserError::ParserError(format!(
                        "OVERWRITING applies to GENERATED, OPTIONS, WATERMARKS and METADATA only at Line: {}, Column: {}",
                        t.span.start.line, t.span.start.column
                    )));
                }
                options.push((strategy, feature));
                if !p.consume_token(&Token::Comma) {
                    p.expect_token(&Token::RParen)?;
                    break;
                }
            }
        }
        table.like = Some(LikeClause {
            table: source,
            options,
        });
    }
    Ok(table)
}

/// One item of a `CREATE TABLE` column list (or of `ALTER TABLE … ADD`): a physical,
/// metadata or computed column, the watermark or the primary key, added to `table`.
pub(crate) fn parse_table_item(p: &mut Parser, table: &mut CreateTable) -> Result<(), ParserError> {
    let tok = p.peek_token().token;
    if word_is(&tok, "WATERMARK") {
        p.next_token();
        p.expect_keyword(Keyword::FOR)?;
        let column = p.parse_identifier()?.value;
        p.expect_keyword(Keyword::AS)?;
        let expr = p.parse_expr()?;
        table.watermark = Some((column, expr));
    } else if word_is(&tok, "PRIMARY") || word_is(&tok, "CONSTRAINT") {
        if p.parse_keyword(Keyword::CONSTRAINT) {
            p.parse_identifier()?;
        }
        p.expect_keywords(&[Keyword::PRIMARY, Keyword::KEY])?;
        table.primary_key = p
            .parse_parenthesized_column_list(sqlparser::parser::IsOptional::Mandatory, false)?
            .into_iter()
            .map(|i| i.value)
            .collect();
        let _ = p.parse_keywords(&[Keyword::NOT, Keyword::ENFORCED]);
    } else {
        let at = p.peek_token().span.start;
        let name = p.parse_identifier()?.value;
        if table.columns.iter().any(|c| c.name() == name) {
            return Err(ParserError::ParserError(format!(
                "table '{}' declares column '{name}' twice{at}",
                table.name
            )));
        }
        if p.parse_keyword(Keyword::AS) {
            let expr = Box::new(p.parse_expr()?);
            table
                .columns
                .push(ColumnOrComputed::Computed { name, expr });
        } else {
            let mut pending_gt = 0;
            let data_type = parse_type(p, &mut pending_gt)?;
            let mut nullable = true;
            let mut metadata = None;
            loop {
                if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
                    nullable = false;
                } else if p.parse_keyword(Keyword::NULL) {
                } else if p.parse_keyword(Keyword::COMMENT) {
                    p.parse_literal_string()?;
                } else if p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
                    let _ = p.parse_keywords(&[Keyword::NOT, Keyword::ENFORCED]);
                    table.primary_key = vec![name.clone()];
                } else if word_is(&p.peek_token().token, "METADATA") {
                    p.next_token();
                    let key = if p.parse_keyword(Keyword::FROM) {
                        p.parse_literal_string()?
                    } else {
                        name.clone()
                    };
                    let is_virtual = word_is(&p.peek_token().token, "VIRTUAL");
                    if is_virtual {
                        p.next_token();
                    }
                    metadata = Some(MetadataSpec { key, is_virtual });
                } else {
                    break;
                }
            }
            table.columns.push(ColumnOrComputed::Column(ColumnSpec {
                name,
                data_type,
                nullable,
                metadata,
            }));
        }
    }
    Ok(())
}

/// `('key' = 'value', …)`, as after `WITH`.
pub(crate) fn parse_options(p: &mut Parser) -> Result<BTreeMap<String, String>, ParserError> {
    let mut options = BTreeMap::new();
    p.expect_token(&Token::LParen)?;
    loop {
        if p.consume_token(&Token::RParen) {
            break;
        }
        let key = parse_key(p)?;
        p.expect_token(&Token::Eq)?;
        let value = parse_key(p)?;
        options.insert(key, value);
        if !p.consume_token(&Token::Comma) {
            p.expect_token(&Token::RParen)?;
            break;
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::Error;

    #[test]
    fn create_table_statements_print_as_they_parse() {
        let sql = "CREATE TABLE `my t` (id BIGINT NOT NULL, `name` STRING, r ROW<a INT, b ARRAY<STRING>>, \
                   ts AS TO_TIMESTAMP_LTZ(id, 3), WATERMARK FOR ts AS ts - INTERVAL '5' SECOND, \
                   PRIMARY KEY (id) NOT ENFORCED) PARTITIONED BY (`name`) \
                   WITH ('connector' = 'filesystem', 'path' = '/it''s', 'format' = 'csv')";
        let parse = |sql: &str| {
            let WeirStatement::CreateTable(t) = parse_script(sql).unwrap().remove(0).statement
            else {
                panic!()
            };
            t
        };
        let printed = parse(sql).to_string();
        let again = parse(&printed);
        assert_eq!(again.to_string(), printed);
        assert_eq!(again.name, "my t");
        assert_eq!(again.columns.len(), 4);
        assert_eq!(again.options["path"], "/it's");
        assert_eq!(again.primary_key, ["id"]);
        assert_eq!(again.partitioned_by, ["name"]);
        assert!(printed.contains("`id` BIGINT NOT NULL"), "{printed}");
    }

    #[test]
    fn parses_statement_sets_in_both_forms() {
        let set = |stmt: &WeirStatement| -> Vec<String> {
            let WeirStatement::StatementSet(inserts) = stmt else {
                panic!("{stmt:?}")
            };
            inserts
                .iter()
                .map(|l| match &l.statement {
                    WeirStatement::Insert { table, .. } => {
                        format!("{table}@{}:{}", l.location.line, l.location.column)
                    }
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let sql = "EXECUTE STATEMENT SET BEGIN\n  INSERT INTO a SELECT 1;\n  INSERT INTO b SELECT 2;\nEND;\n\
                   BEGIN STATEMENT SET;\nINSERT INTO c SELECT CASE WHEN 1 = 1 THEN 3 END;\nEND;\n\
                   EXPLAIN STATEMENT SET BEGIN INSERT INTO d SELECT 4; END;\nSET 'a' = 'b';";
        let stmts = parse_script(sql).unwrap();
        assert_eq!(stmts.len(), 4);
        assert_eq!(set(&stmts[0].statement), ["a@2:3", "b@3:3"]);
        assert_eq!(set(&stmts[1].statement), ["c@6:1"]);
        let WeirStatement::Explain(inner) = &stmts[2].statement else {
            panic!()
        };
        assert_eq!(set(inner), ["d@8:29"]);
        assert!(matches!(stmts[3].statement, WeirStatement::Set { .. }));
    }

    #[test]
    fn parses_flink_ddl() {
        let sql = "CREATE TABLE bid (\n  auction BIGINT,\n  `dateTime` TIMESTAMP(3),\n  person ROW<id BIGINT, `name` VARCHAR, nested ROW<a INT>>,\n  ts AS `dateTime` + INTERVAL '1' SECOND,\n  WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND\n) WITH ('connector' = 'datagen', 'number-of-rows' = '10');\nSET 'parallelism.default' = '2';";
        let stmts = parse_script(sql).unwrap();
        assert_eq!(stmts.len(), 2);
        let WeirStatement::CreateTable(t) = &stmts[0].statement else {
            panic!()
        };
        assert_eq!(t.columns.len(), 4);
        assert_eq!(t.watermark.as_ref().unwrap().0, "dateTime");
        assert_eq!(t.options["number-of-rows"], "10");
        let ColumnOrComputed::Column(c) = &t.columns[2] else {
            panic!()
        };
        let DataType::Struct(fields) = &c.data_type else {
            panic!()
        };
        assert_eq!(fields.len(), 3);
        assert!(
            matches!(&stmts[1].statement, WeirStatement::Set { key, value } if key == "parallelism.default" && value == "2")
        );
        assert_eq!(stmts[1].location, SqlLocation { line: 8, column: 1 });
    }

    #[test]
    fn set_takes_unquoted_keys_and_values_as_flinks_client_does() {
        let sql = "SET execution.runtime-mode = batch;\nSET sql-client.execution.result-mode=tableau;\n\
                   SET execution.checkpointing.interval = 10s;\nRESET table.exec.state.ttl;\nSET;";
        let pairs: Vec<(String, String)> = parse_script(sql)
            .unwrap()
            .into_iter()
            .map(|s| match s.statement {
                WeirStatement::Set { key, value } => (key, value),
                WeirStatement::Reset { key } => ("RESET".into(), key.unwrap()),
                WeirStatement::ShowSet => ("SET".into(), String::new()),
                other => panic!("{other:?}"),
            })
            .collect();
        let expected = [
            ("execution.runtime-mode", "batch"),
            ("sql-client.execution.result-mode", "tableau"),
            ("execution.checkpointing.interval", "10s"),
            ("RESET", "table.exec.state.ttl"),
            ("SET", ""),
        ];
        assert_eq!(pairs, expected.map(|(k, v)| (k.to_string(), v.to_string())));
        let err = parse_script("SET = 1;").unwrap_err().to_string();
        assert!(err.contains("a key"), "{err}");
    }

    #[test]
    fn errors_name_line_and_column() {
        let err = parse_script("SELECT 1;\nSELECT a FROM t WHERE;").unwrap_err();
        match err {
            Error::Sql {
                location: Some(l), ..
            } => assert_eq!(l.line, 2),
            other => panic!("{other:?}"),
        }
    }
}
