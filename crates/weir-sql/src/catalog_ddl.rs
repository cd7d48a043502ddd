//! Statements about catalogs, databases and table definitions, with Flink's syntax:
//! `CREATE/DROP CATALOG`, `CREATE/DROP DATABASE`, `USE [CATALOG]`, `SHOW CATALOGS /
//! DATABASES / TABLES / VIEWS / COLUMNS / CURRENT …`, `ALTER TABLE` and `ALTER VIEW`;
//! and [`alter_table`], which applies an `ALTER TABLE` to a table's DDL.

use crate::parser::{
    CreateTable, WeirStatement, eat_words, object_name, parse_options, parse_table_item, peek_word,
};
use sqlparser::ast::Query;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;
use std::collections::BTreeMap;
use weir_common::{Error, Result};

/// `[NOT] LIKE|ILIKE 'pattern'` of the SHOW statements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LikeFilter {
    pub not: bool,
    pub case_insensitive: bool,
    pub pattern: String,
}

impl LikeFilter {
    /// Whether `name` passes: SQL's LIKE (`%` any run, `_` one character, `\` escapes).
    pub fn matches(&self, name: &str) -> bool {
        fn like(p: &[char], s: &[char]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some(('%', rest)) => (0..=s.len()).any(|i| like(rest, &s[i..])),
                Some(('_', rest)) => !s.is_empty() && like(rest, &s[1..]),
                Some(('\\', rest)) if !rest.is_empty() => {
                    s.first() == Some(&rest[0]) && like(&rest[1..], &s[1..])
                }
                Some((c, rest)) => s.first() == Some(c) && like(rest, &s[1..]),
            }
        }
        let fold = |t: &str| -> Vec<char> {
            if self.case_insensitive {
                t.to_lowercase().chars().collect()
            } else {
                t.chars().collect()
            }
        };
        like(&fold(&self.pattern), &fold(name)) != self.not
    }
}

/// What an `ALTER TABLE` changes.
#[derive(Debug, Clone)]
pub enum AlterTableAction {
    /// `RENAME TO new_name` (in the same catalog and database).
    RenameTo(String),
    /// `SET ('k' = 'v', …)`: options added or replaced.
    Set(BTreeMap<String, String>),
    /// `RESET ('k', …)`: options removed.
    Reset(Vec<String>),
    /// `ADD column | WATERMARK … | PRIMARY KEY … | (…, …)`: what is added, as the items
    /// of a table, each column with its position (`FIRST`, `AFTER c`; none: last).
    Add {
        items: Box<CreateTable>,
        positions: BTreeMap<String, ColumnPosition>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnPosition {
    First,
    After(String),
}

/// What an `ALTER VIEW` changes.
#[derive(Debug, Clone)]
pub enum AlterViewAction {
    RenameTo(String),
    /// `AS query`: the view's new query (and the statement's text).
    As {
        query: Box<Query>,
        sql: String,
    },
}

/// Catalog, database and definition statements.
#[derive(Debug, Clone)]
pub enum CatalogStatement {
    CreateCatalog {
        name: String,
        if_not_exists: bool,
        options: BTreeMap<String, String>,
    },
    DropCatalog {
        name: String,
        if_exists: bool,
    },
    CreateDatabase {
        name: String,
        if_not_exists: bool,
        comment: Option<String>,
    },
    DropDatabase {
        name: String,
        if_exists: bool,
        cascade: bool,
    },
    UseCatalog(String),
    UseDatabase(String),
    ShowCatalogs(Option<LikeFilter>),
    ShowCurrentCatalog,
    ShowDatabases {
        from: Option<String>,
        like: Option<LikeFilter>,
    },
    ShowCurrentDatabase,
    ShowTables {
        from: Option<String>,
        like: Option<LikeFilter>,
    },
    ShowViews {
        from: Option<String>,
        like: Option<LikeFilter>,
    },
    ShowColumns {
        table: String,
        like: Option<LikeFilter>,
    },
    AlterTable {
        name: String,
        if_exists: bool,
        action: AlterTableAction,
    },
    AlterView {
        name: String,
        action: AlterViewAction,
    },
}

/// Parses the statement when it is one of these.
pub fn parse(p: &mut Parser, sql: &str) -> Option<Result<WeirStatement, ParserError>> {
    let starts = |words: &[&str]| words.iter().enumerate().all(|(i, w)| peek_word(p, i, w));
    let is_ours = starts(&["CREATE", "CATALOG"])
        || starts(&["DROP", "CATALOG"])
        || starts(&["CREATE", "DATABASE"])
        || starts(&["DROP", "DATABASE"])
        || starts(&["USE"])
        || starts(&["ALTER", "TABLE"])
        || starts(&["ALTER", "VIEW"])
        || [
            "CATALOGS",
            "DATABASES",
            "TABLES",
            "VIEWS",
            "COLUMNS",
            "CURRENT",
        ]
        .iter()
        .any(|w| starts(&["SHOW", w]));
    if !is_ours {
        return None;
    }
    Some(statement(p, sql).map(WeirStatement::Catalog))
}

fn name(p: &mut Parser) -> Result<String, ParserError> {
    Ok(object_name(&p.parse_object_name(false)?))
}

fn statement(p: &mut Parser, sql: &str) -> Result<CatalogStatement, ParserError> {
    use CatalogStatement as S;
    if eat_words(p, &["CREATE", "CATALOG"]) {
        let if_not_exists = eat_words(p, &["IF", "NOT", "EXISTS"]);
        let name = p.parse_identifier()?.value;
        if !p.parse_keyword(Keyword::WITH) {
            return p.expected("WITH ('type' = …) after the catalog's name", p.peek_token());
        }
        let options = parse_options(p)?;
        return Ok(S::CreateCatalog {
            name,
            if_not_exists,
            options,
        });
    }
    if eat_words(p, &["DROP", "CATALOG"]) {
        let if_exists = eat_words(p, &["IF", "EXISTS"]);
        let name = p.parse_identifier()?.value;
        return Ok(S::DropCatalog { name, if_exists });
    }
    if eat_words(p, &["CREATE", "DATABASE"]) {
        let if_not_exists = eat_words(p, &["IF", "NOT", "EXISTS"]);
        let name = name(p)?;
        let comment = if p.parse_keyword(Keyword::COMMENT) {
            Some(p.parse_literal_string()?)
        } else {
            None
        };
        if p.parse_keyword(Keyword::WITH) {
            // Database properties: accepted and ignored, as Flink's in-memory catalog does.
            parse_options(p)?;
        }
        return Ok(S::CreateDatabase {
            name,
            if_not_exists,
            comment,
        });
    }
    if eat_words(p, &["DROP", "DATABASE"]) {
        let if_exists = eat_words(p, &["IF", "EXISTS"]);
        let name = name(p)?;
        let cascade = eat_words(p, &["CASCADE"]);
        if !cascade {
            eat_words(p, &["RESTRICT"]);
        }
        return Ok(S::DropDatabase {
            name,
            if_exists,
            cascade,
        });
    }
    if eat_words(p, &["USE", "CATALOG"]) {
        return Ok(S::UseCatalog(p.parse_identifier()?.value));
    }
    if eat_words(p, &["USE"]) {
        return Ok(S::UseDatabase(name(p)?));
    }
    if eat_words(p, &["SHOW", "CURRENT", "CATALOG"]) {
        return Ok(S::ShowCurrentCatalog);
    }
    if eat_words(p, &["SHOW", "CURRENT", "DATABASE"]) {
        return Ok(S::ShowCurrentDatabase);
    }
    if eat_words(p, &["SHOW", "CATALOGS"]) {
        return Ok(S::ShowCatalogs(like_filter(p)?));
    }
    if eat_words(p, &["SHOW", "COLUMNS"]) {
        if !(eat_words(p, &["FROM"]) || eat_words(p, &["IN"])) {
            return p.expected("FROM or IN after SHOW COLUMNS", p.peek_token());
        }
        let table = name(p)?;
        return Ok(S::ShowColumns {
            table,
            like: like_filter(p)?,
        });
    }
    for (word, databases) in [("DATABASES", true), ("TABLES", false), ("VIEWS", false)] {
        if eat_words(p, &["SHOW", word]) {
            let from = if eat_words(p, &["FROM"]) || eat_words(p, &["IN"]) {
                Some(name(p)?)
            } else {
                None
            };
            let like = like_filter(p)?;
            return Ok(match (word, databases) {
                (_, true) => S::ShowDatabases { from, like },
                ("TABLES", _) => S::ShowTables { from, like },
                _ => S::ShowViews { from, like },
            });
        }
    }
    if eat_words(p, &["ALTER", "TABLE"]) {
        let if_exists = eat_words(p, &["IF", "EXISTS"]);
        let name = name(p)?;
        let action = alter_table_action(p)?;
        return Ok(S::AlterTable {
            name,
            if_exists,
            action,
        });
    }
    if eat_words(p, &["ALTER", "VIEW"]) {
        let name = name(p)?;
        if eat_words(p, &["RENAME", "TO"]) {
            return Ok(S::AlterView {
                action: AlterViewAction::RenameTo(self::name(p)?),
                name,
            });
        }
        if !p.parse_keyword(Keyword::AS) {
            return p.expected("RENAME TO or AS after ALTER VIEW name", p.peek_token());
        }
        let start = p.peek_token().span.start;
        let query = p.parse_query()?;
        let end = p.peek_token().span.start;
        return Ok(S::AlterView {
            name,
            action: AlterViewAction::As {
                query,
                sql: text_between(sql, start, end),
            },
        });
    }
    unreachable!("parse() checked the statement's first words")
}

/// The script's text from `start` up to (not including) `end`.
fn text_between(
    sql: &str,
    start: sqlparser::tokenizer::Location,
    end: sqlparser::tokenizer::Location,
) -> String {
    let offset = |l: sqlparser::tokenizer::Location| -> usize {
        if l.line == 0 {
            return sql.len();
        }
        let mut at = 0;
        for (i, line) in sql.split_inclusive('\n').enumerate() {
            if i as u64 + 1 == l.line {
                return at
                    + line
                        .char_indices()
                        .nth(l.column.saturating_sub(1) as usize)
                        .map(|(o, _)| o)
                        .unwrap_or(line.len());
            }
            at += line.len();
        }
        sql.len()
    };
    let (a, b) = (offset(start), offset(end).max(offset(start)));
    sql[a..b].trim().to_string()
}

fn like_filter(p: &mut Parser) -> Result<Option<LikeFilter>, ParserError> {
    let not = eat_words(p, &["NOT"]);
    let case_insensitive = if eat_words(p, &["LIKE"]) {
        false
    } else if eat_words(p, &["ILIKE"]) {
        true
    } else if not {
        return p.expected("LIKE or ILIKE after NOT", p.peek_token());
    } else {
        return Ok(None);
    };
    Ok(Some(LikeFilter {
        not,
        case_insensitive,
        pattern: p.parse_literal_string()?,
    }))
}

fn alter_table_action(p: &mut Parser) -> Result<AlterTableAction, ParserError> {
    if eat_words(p, &["RENAME", "TO"]) {
        return Ok(AlterTableAction::RenameTo(name(p)?));
    }
    if p.parse_keyword(Keyword::SET) {
        return Ok(AlterTableAction::Set(parse_options(p)?));
    }
    if eat_words(p, &["RESET"]) {
        p.expect_token(&Token::LParen)?;
        let mut keys = Vec::new();
        loop {
            keys.push(crate::parser::parse_key(p)?);
            if !p.consume_token(&Token::Comma) {
                p.expect_token(&Token::RParen)?;
                break;
            }
        }
        return Ok(AlterTableAction::Reset(keys));
    }
    if eat_words(p, &["ADD"]) {
        let mut items = CreateTable::empty(
            String::new(),
            weir_common::SqlLocation { line: 0, column: 0 },
        );
        let mut positions = BTreeMap::new();
        let list = p.consume_token(&Token::LParen);
        loop {
            let columns_before = items.columns.len();
            parse_table_item(p, &mut items)?;
            if items.columns.len() > columns_before {
                let column = items.columns.last().expect("added").name().to_string();
                if eat_words(p, &["FIRST"]) {
                    positions.insert(column, ColumnPosition::First);
                } else if eat_words(p, &["AFTER"]) {
                    positions.insert(column, ColumnPosition::After(p.parse_identifier()?.value));
                }
            }
            if !list || !p.consume_token(&Token::Comma) {
                break;
            }
        }
        if list {
            p.expect_token(&Token::RParen)?;
        }
        return Ok(AlterTableAction::Add {
            items: Box::new(items),
            positions,
        });
    }
    let at = p.peek_token();
    if ["DROP", "MODIFY"].iter().any(|w| peek_word(p, 0, w)) {
        return Err(ParserError::ParserError(format!(
            "ALTER TABLE … {} is not supported yet (RENAME TO, SET, RESET and ADD are){}",
            at.token, at.span.start
        )));
    }
    p.expected("RENAME TO, SET, RESET or ADD after ALTER TABLE name", at)
}

/// The DDL of a table after `action` (other than `RENAME TO`, which keeps the DDL).
pub fn alter_table(ddl: &CreateTable, action: &AlterTableAction) -> Result<CreateTable> {
    let mut out = ddl.clone();
    match action {
        AlterTableAction::RenameTo(_) => {}
        AlterTableAction::Set(options) => {
            for (k, v) in options {
                out.options.insert(k.clone(), v.clone());
            }
        }
        AlterTableAction::Reset(keys) => {
            for k in keys {
                if k == "connector" {
                    return Err(Error::plan(
                        "ALTER TABLE … RESET ('connector'): a table needs its connector",
                    ));
                }
                out.options.remove(k);
            }
        }
        AlterTableAction::Add { items, positions } => {
            for column in &items.columns {
                let name = column.name();
                if out.columns.iter().any(|c| c.name() == name) {
                    return Err(Error::plan(format!(
                        "ALTER TABLE … ADD: table '{}' already has a column '{name}'",
                        ddl.name
                    )));
                }
                let at = match positions.get(name) {
                    None => out.columns.len(),
                    Some(ColumnPosition::First) => 0,
                    Some(ColumnPosition::After(c)) => {
                        out.columns
                            .iter()
                            .position(|x| x.name() == c)
                            .ok_or_else(|| {
                                Error::plan(format!(
                                    "ALTER TABLE … ADD {name} AFTER {c}: table '{}' has no column '{c}'",
                                    ddl.name
                                ))
                            })?
                            + 1
                    }
                };
                out.columns.insert(at, column.clone());
            }
            if let Some(w) = &items.watermark {
                if out.watermark.is_some() {
                    return Err(Error::plan(format!(
                        "ALTER TABLE … ADD WATERMARK: table '{}' already has a watermark",
                        ddl.name
                    )));
                }
                out.watermark = Some(w.clone());
            }
            if !items.primary_key.is_empty() {
                if !out.primary_key.is_empty() {
                    return Err(Error::plan(format!(
                        "ALTER TABLE … ADD PRIMARY KEY: table '{}' already has a primary key",
                        ddl.name
                    )));
                }
                out.primary_key = items.primary_key.clone();
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse_script;

    fn parse_one(sql: &str) -> CatalogStatement {
        match parse_script(sql).unwrap().remove(0).statement {
            WeirStatement::Catalog(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn like_patterns() {
        let f = |pattern: &str, not, ci| LikeFilter {
            not,
            case_insensitive: ci,
            pattern: pattern.into(),
        };
        assert!(f("ord%", false, false).matches("orders"));
        assert!(!f("ord%", false, false).matches("Orders"));
        assert!(f("ord%", false, true).matches("Orders"));
        assert!(f("o_d", false, false).matches("odd") && !f("o_d", false, false).matches("od"));
        assert!(
            f("a\\_b", false, false).matches("a_b") && !f("a\\_b", false, false).matches("axb")
        );
        assert!(f("%x%", true, false).matches("abc"));
    }

    #[test]
    fn parses_flinks_catalog_statements() {
        assert!(matches!(
            parse_one("CREATE CATALOG c WITH ('type' = 'weir', 'path' = '/tmp/c')"),
            CatalogStatement::CreateCatalog { name, options, .. } if name == "c" && options["path"] == "/tmp/c"
        ));
        assert!(matches!(
            parse_one("DROP DATABASE IF EXISTS c.db CASCADE"),
            CatalogStatement::DropDatabase { name, if_exists: true, cascade: true } if name == "c.db"
        ));
        assert!(matches!(parse_one("USE CATALOG c"), CatalogStatement::UseCatalog(c) if c == "c"));
        assert!(matches!(parse_one("USE c.db"), CatalogStatement::UseDatabase(d) if d == "c.db"));
        assert!(matches!(
            parse_one("SHOW TABLES FROM c.db NOT LIKE 'x%'"),
            CatalogStatement::ShowTables { from: Some(f), like: Some(l) } if f == "c.db" && l.not
        ));
        assert!(matches!(
            parse_one("ALTER TABLE t ADD (a INT FIRST, b AS a + 1 AFTER x, WATERMARK FOR ts AS ts)"),
            CatalogStatement::AlterTable { action: AlterTableAction::Add { items, positions }, .. }
                if items.columns.len() == 2 && items.watermark.is_some()
                && positions["a"] == ColumnPosition::First
                && positions["b"] == ColumnPosition::After("x".into())
        ));
        assert!(matches!(
            parse_one("ALTER TABLE t RESET ('k1', 'k2')"),
            CatalogStatement::AlterTable { action: AlterTableAction::Reset(k), .. } if k == ["k1", "k2"]
        ));
        assert!(matches!(
            parse_one("ALTER VIEW v AS SELECT 1 AS x;"),
            CatalogStatement::AlterView { action: AlterViewAction::As { sql, .. }, .. } if sql == "SELECT 1 AS x"
        ));
        let err = parse_script("ALTER TABLE t DROP COLUMN x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("DROP is not supported yet"), "{err}");
    }
}
