//! The catalogs: tables (with their connector options, computed columns and watermark)
//! and views, as declared by DDL, in databases of catalogs, as in Flink.
//!
//! A name in SQL has one to three parts (`t`, `db.t`, `cat.db.t`); missing parts are the
//! current catalog and database (`USE CATALOG …`, `USE …`), at first Flink's
//! `default_catalog` and `default_database`. This module holds the names and definitions
//! only: persisting a catalog is the engine's (see `weir_engine::catalog_store`).

use arrow::datatypes::SchemaRef;
use datafusion::logical_expr::Expr;
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};

/// The catalog every session starts in (Flink's name).
pub const DEFAULT_CATALOG: &str = "default_catalog";
/// The database every catalog starts with unless told otherwise (Flink's name).
pub const DEFAULT_DATABASE: &str = "default_database";

/// A declared table.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// The name the table's operators and state are known by: the bare name in
    /// `default_catalog.default_database` (jobs written before catalogs existed keep
    /// their state), the full path elsewhere ([`ObjectPath::stable_name`]).
    pub name: String,
    /// Columns the connector reads or writes.
    pub physical_schema: SchemaRef,
    /// Physical and computed columns, in declaration order: what queries see.
    pub schema: SchemaRef,
    /// When the table has computed columns: one expression per column of `schema`, over
    /// `physical_schema`.
    pub computed: Option<Vec<Expr>>,
    /// The watermark: rowtime column and expression over `schema`.
    pub watermark: Option<(String, Expr)>,
    pub options: ConnectorOptions,
    pub partitioned_by: Vec<String>,
    pub primary_key: Vec<String>,
    /// `scan.parallelism` / `sink.parallelism` (Flink's names), taken out of `options`.
    pub scan_parallelism: Option<usize>,
    pub sink_parallelism: Option<usize>,
    /// The table's DDL (with any `LIKE` resolved and its full path as name), for `CREATE
    /// TABLE … LIKE` this table, `SHOW CREATE TABLE`, `ALTER TABLE` and persistent catalogs.
    pub ddl: Arc<crate::parser::CreateTable>,
    /// Metadata columns of `physical_schema`: (column, connector key, virtual).
    pub metadata: Vec<(String, crate::parser::MetadataSpec)>,
    /// What an `INSERT INTO` the table writes: the physical columns but the virtual
    /// metadata ones.
    pub sink_schema: SchemaRef,
}

impl TableDef {
    /// (column, connector key) of the metadata columns, for the source.
    pub fn metadata_keys(&self) -> Vec<(String, String)> {
        self.metadata
            .iter()
            .map(|(c, m)| (c.clone(), m.key.clone()))
            .collect()
    }

    /// (column, connector key) of the metadata columns an `INSERT` writes (those not
    /// `VIRTUAL`), for the sink.
    pub fn sink_metadata_keys(&self) -> Vec<(String, String)> {
        self.metadata
            .iter()
            .filter(|(_, m)| !m.is_virtual)
            .map(|(c, m)| (c.clone(), m.key.clone()))
            .collect()
    }
}

/// A declared view.
#[derive(Debug, Clone)]
pub struct ViewDef {
    pub name: String,
    /// The view's query as written.
    pub sql: String,
    pub schema: SchemaRef,
    /// The catalog and database that were current when the view was created: its query's
    /// names are resolved there, also when a persistent catalog loads it again.
    pub resolved_in: (String, String),
}

/// The full name of a table or view (Flink's `ObjectIdentifier`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectPath {
    pub catalog: String,
    pub database: String,
    pub object: String,
}

impl ObjectPath {
    /// See [`TableDef::name`].
    pub fn stable_name(&self) -> String {
        if self.catalog == DEFAULT_CATALOG && self.database == DEFAULT_DATABASE {
            self.object.clone()
        } else {
            self.to_string()
        }
    }

    /// The path as one name the way the parser writes names (`catalog::split_name`).
    pub fn to_name(&self) -> String {
        [&self.catalog, &self.database, &self.object]
            .map(|p| {
                if p.contains(['.', '`']) {
                    quote_identifier(p)
                } else {
                    p.clone()
                }
            })
            .join(".")
    }

    /// The path as SQL, each part quoted: `` `cat`.`db`.`t` ``.
    pub fn quoted(&self) -> String {
        [&self.catalog, &self.database, &self.object]
            .map(|p| quote_identifier(p))
            .join(".")
    }
}

impl std::fmt::Display for ObjectPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.catalog, self.database, self.object)
    }
}

/// `` `name` `` with backticks doubled.
pub fn quote_identifier(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The parts of a name as the parser writes it: parts joined by `.`, a part that
/// contains `.` or `` ` `` quoted with backticks (see `parser::object_name`).
pub fn split_name(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut chars = name.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '`' if quoted && chars.peek() == Some(&'`') => {
                chars.next();
                part.push('`');
            }
            '`' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut part)),
            c => part.push(c),
        }
    }
    parts.push(part);
    parts
}

/// Tables and views of one database.
#[derive(Debug, Clone, Default)]
pub struct Database {
    pub tables: BTreeMap<String, Arc<TableDef>>,
    pub views: BTreeMap<String, ViewDef>,
    pub comment: Option<String>,
}

impl Database {
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.views.is_empty()
    }
}

/// Catalog types (`'type'` of `CREATE CATALOG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    /// Flink's `generic_in_memory`: gone when the session ends.
    InMemory,
    /// `weir`: tables, views and databases kept as files under `'path'` (a folder or
    /// an object-store URL), there for every later session that creates the catalog.
    Persistent,
}

impl CatalogKind {
    pub const NAMES: &'static str = "'generic_in_memory', 'weir'";

    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "generic_in_memory" => Ok(Self::InMemory),
            "weir" => Ok(Self::Persistent),
            "hive" | "jdbc" | "paimon" | "iceberg" => Err(Error::plan(format!(
                "catalog type '{name}' is not supported by Weir (types: {})",
                Self::NAMES
            ))),
            other => Err(Error::plan(format!(
                "unknown catalog type '{other}' (types: {})",
                Self::NAMES
            ))),
        }
    }
}

/// One catalog: its options (as given to `CREATE CATALOG`) and databases.
#[derive(Debug, Clone)]
pub struct CatalogDef {
    pub kind: CatalogKind,
    pub options: BTreeMap<String, String>,
    pub default_database: String,
    pub databases: BTreeMap<String, Database>,
}

impl CatalogDef {
    pub fn new(kind: CatalogKind, options: BTreeMap<String, String>) -> Self {
        let default_database = options
            .get("default-database")
            .cloned()
            .unwrap_or_else(|| DEFAULT_DATABASE.to_string());
        let databases = [(default_database.clone(), Database::default())].into();
        Self {
            kind,
            options,
            default_database,
            databases,
        }
    }
}

/// Every catalog of a session, and the current catalog and database (Flink's
/// `CatalogManager`).
#[derive(Debug, Clone)]
pub struct CatalogManager {
    catalogs: BTreeMap<String, CatalogDef>,
    current_catalog: String,
    current_database: String,
}

impl Default for CatalogManager {
    fn default() -> Self {
        Self {
            catalogs: [(
                DEFAULT_CATALOG.to_string(),
                CatalogDef::new(CatalogKind::InMemory, BTreeMap::new()),
            )]
            .into(),
            current_catalog: DEFAULT_CATALOG.to_string(),
            current_database: DEFAULT_DATABASE.to_string(),
        }
    }
}

impl CatalogManager {
    pub fn current_catalog(&self) -> &str {
        &self.current_catalog
    }

    pub fn current_database(&self) -> &str {
        &self.current_database
    }

    pub fn catalog_names(&self) -> impl Iterator<Item = &String> {
        self.catalogs.keys()
    }

    pub fn catalog(&self, name: &str) -> Result<&CatalogDef> {
        self.catalogs.get(name).ok_or_else(|| {
            Error::plan(format!(
                "catalog '{name}' does not exist (catalogs: {})",
                self.catalogs.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    fn catalog_mut(&mut self, name: &str) -> Result<&mut CatalogDef> {
        self.catalog(name)?;
        Ok(self.catalogs.get_mut(name).expect("checked"))
    }

    /// The full path of a one- to three-part name.
    pub fn resolve(&self, name: &str) -> Result<ObjectPath> {
        let mut parts = split_name(name);
        if parts.iter().any(|p| p.is_empty()) || parts.len() > 3 {
            return Err(Error::plan(format!(
                "'{name}' is not a valid name (expected [catalog.][database.]name)"
            )));
        }
        let object = parts.pop().expect("one part at least");
        let database = parts.pop().unwrap_or_else(|| self.current_database.clone());
        let catalog = parts.pop().unwrap_or_else(|| self.current_catalog.clone());
        Ok(ObjectPath {
            catalog,
            database,
            object,
        })
    }

    /// `(catalog, database)` of a one- or two-part database name.
    pub fn resolve_database(&self, name: &str) -> Result<(String, String)> {
        let mut parts = split_name(name);
        if parts.iter().any(|p| p.is_empty()) || parts.len() > 2 {
            return Err(Error::plan(format!(
                "'{name}' is not a valid database name (expected [catalog.]database)"
            )));
        }
        let database = parts.pop().expect("one part at least");
        let catalog = parts.pop().unwrap_or_else(|| self.current_catalog.clone());
        Ok((catalog, database))
    }

    pub fn database(&self, catalog: &str, database: &str) -> Result<&Database> {
        let c = self.catalog(catalog)?;
        c.databases.get(database).ok_or_else(|| {
            Error::plan(format!(
                "database '{database}' does not exist in catalog '{catalog}' (databases: {})",
                c.databases.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    fn database_mut(&mut self, catalog: &str, database: &str) -> Result<&mut Database> {
        self.database(catalog, database)?;
        Ok(self
            .catalogs
            .get_mut(catalog)
            .and_then(|c| c.databases.get_mut(database))
            .expect("checked"))
    }

    /// The table a name stands for, if there is one.
    pub fn table(&self, name: &str) -> Option<Arc<TableDef>> {
        let path = self.resolve(name).ok()?;
        self.table_at(&path)
    }

    pub fn table_at(&self, path: &ObjectPath) -> Option<Arc<TableDef>> {
        self.database(&path.catalog, &path.database)
            .ok()?
            .tables
            .get(&path.object)
            .cloned()
    }

    /// The view a name stands for, if there is one.
    pub fn view(&self, name: &str) -> Option<&ViewDef> {
        let path = self.resolve(name).ok()?;
        self.view_at(&path)
    }

    pub fn view_at(&self, path: &ObjectPath) -> Option<&ViewDef> {
        self.database(&path.catalog, &path.database)
            .ok()?
            .views
            .get(&path.object)
    }

    pub fn exists(&self, path: &ObjectPath) -> bool {
        self.table_at(path).is_some() || self.view_at(path).is_some()
    }

    /// Adds a table or view at `path`, whose database must exist. An existing table or
    /// view of that name is replaced.
    pub fn insert_table(&mut self, path: &ObjectPath, def: Arc<TableDef>) -> Result<()> {
        let db = self.database_mut(&path.catalog, &path.database)?;
        db.views.remove(&path.object);
        db.tables.insert(path.object.clone(), def);
        Ok(())
    }

    pub fn insert_view(&mut self, path: &ObjectPath, def: ViewDef) -> Result<()> {
        let db = self.database_mut(&path.catalog, &path.database)?;
        db.tables.remove(&path.object);
        db.views.insert(path.object.clone(), def);
        Ok(())
    }

    pub fn remove_table(&mut self, path: &ObjectPath) -> Option<Arc<TableDef>> {
        self.database_mut(&path.catalog, &path.database)
            .ok()?
            .tables
            .remove(&path.object)
    }

    pub fn remove_view(&mut self, path: &ObjectPath) -> Option<ViewDef> {
        self.database_mut(&path.catalog, &path.database)
            .ok()?
            .views
            .remove(&path.object)
    }

    /// Every view, with its path.
    pub fn views(&self) -> Vec<(ObjectPath, ViewDef)> {
        let mut out = Vec::new();
        for (c, cat) in &self.catalogs {
            for (d, db) in &cat.databases {
                for (v, def) in &db.views {
                    let path = ObjectPath {
                        catalog: c.clone(),
                        database: d.clone(),
                        object: v.clone(),
                    };
                    out.push((path, def.clone()));
                }
            }
        }
        out
    }

    /// `CREATE CATALOG`: `false` when it exists already.
    pub fn add_catalog(&mut self, name: &str, def: CatalogDef) -> bool {
        if self.catalogs.contains_key(name) {
            return false;
        }
        self.catalogs.insert(name.to_string(), def);
        true
    }

    /// `DROP CATALOG`: the current catalog cannot be dropped (as in Flink).
    pub fn drop_catalog(&mut self, name: &str, if_exists: bool) -> Result<Option<CatalogDef>> {
        if !self.catalogs.contains_key(name) {
            return if if_exists {
                Ok(None)
            } else {
                self.catalog(name).map(|_| None)
            };
        }
        if name == self.current_catalog {
            return Err(Error::plan(format!(
                "cannot drop catalog '{name}': it is the current catalog (USE CATALOG another one first)"
            )));
        }
        Ok(self.catalogs.remove(name))
    }

    /// `USE CATALOG`: its default database becomes the current one.
    pub fn use_catalog(&mut self, name: &str) -> Result<()> {
        let database = self.catalog(name)?.default_database.clone();
        self.current_catalog = name.to_string();
        self.current_database = database;
        Ok(())
    }

    /// `USE [catalog.]database`.
    pub fn use_database(&mut self, catalog: &str, database: &str) -> Result<()> {
        self.database(catalog, database)?;
        self.current_catalog = catalog.to_string();
        self.current_database = database.to_string();
        Ok(())
    }

    /// `CREATE DATABASE`: `false` when it exists already.
    pub fn add_database(&mut self, catalog: &str, database: &str, db: Database) -> Result<bool> {
        let c = self.catalog_mut(catalog)?;
        if c.databases.contains_key(database) {
            return Ok(false);
        }
        c.databases.insert(database.to_string(), db);
        Ok(true)
    }

    /// Checks that `DROP DATABASE` may go ahead: the database exists (unless `if_exists`;
    /// `Ok(false)` then), is not the current one, and is empty unless `cascade`.
    pub fn check_drop_database(
        &self,
        catalog: &str,
        database: &str,
        if_exists: bool,
        cascade: bool,
    ) -> Result<bool> {
        let db = match self.database(catalog, database) {
            Ok(db) => db,
            Err(_) if if_exists && self.catalogs.contains_key(catalog) => return Ok(false),
            Err(e) => return Err(e),
        };
        if catalog == self.current_catalog && database == self.current_database {
            return Err(Error::plan(format!(
                "cannot drop database '{database}': it is the current database (USE another one first)"
            )));
        }
        if !cascade && !db.is_empty() {
            return Err(Error::plan(format!(
                "database '{database}' in catalog '{catalog}' is not empty ({} tables, {} views); \
                 drop them first or use DROP DATABASE … CASCADE",
                db.tables.len(),
                db.views.len()
            )));
        }
        Ok(true)
    }

    /// Removes a database, returning what it held.
    pub fn remove_database(&mut self, catalog: &str, database: &str) -> Option<Database> {
        self.catalogs.get_mut(catalog)?.databases.remove(database)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_against_the_current_catalog_and_database() {
        let mut m = CatalogManager::default();
        let p = m.resolve("t").unwrap();
        assert_eq!(p.to_string(), "default_catalog.default_database.t");
        assert_eq!(p.stable_name(), "t");
        assert_eq!(
            m.resolve("db.t").unwrap().to_string(),
            "default_catalog.db.t"
        );
        assert_eq!(m.resolve("c.db.t").unwrap().stable_name(), "c.db.t");
        assert!(m.resolve("a.b.c.d").is_err());
        assert_eq!(
            m.resolve("`a.b`.t").unwrap().database,
            "a.b",
            "a quoted part keeps its dot"
        );
        m.add_catalog("c", CatalogDef::new(CatalogKind::InMemory, BTreeMap::new()));
        m.add_database("c", "db", Database::default()).unwrap();
        m.use_database("c", "db").unwrap();
        assert_eq!(m.resolve("t").unwrap().to_string(), "c.db.t");
        assert!(m.drop_catalog("c", false).is_err(), "current catalog");
        assert!(m.check_drop_database("c", "db", false, false).is_err());
        m.use_catalog(DEFAULT_CATALOG).unwrap();
        assert_eq!(m.current_database(), DEFAULT_DATABASE);
        assert!(m.check_drop_database("c", "db", false, false).unwrap());
        assert!(!m.check_drop_database("c", "nope", true, false).unwrap());
        assert!(m.check_drop_database("c", "nope", false, false).is_err());
    }

    #[test]
    fn split_name_undoes_quoting() {
        assert_eq!(split_name("a.b"), ["a", "b"]);
        assert_eq!(split_name("`x.y`.`q``t`"), ["x.y", "q`t"]);
    }
}
