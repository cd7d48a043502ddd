//! Statements about catalogs and definitions: `CREATE/DROP CATALOG`, `CREATE/DROP
//! DATABASE`, `USE`, the `SHOW …` statements, `DESCRIBE`, `SHOW CREATE TABLE`, `ALTER
//! TABLE/VIEW`, and keeping `CREATE/DROP TABLE/VIEW` in a persistent catalog's files.

use crate::catalog_store::{CatalogStore, ObjectKind, StoredObject};
use crate::engine::{Engine, Outcome};
use std::collections::BTreeMap;
use weir_common::{Error, Result};
use weir_sql::catalog::{CatalogDef, CatalogKind, Database, ObjectPath, TableDef};
use weir_sql::catalog_ddl::{
    AlterTableAction, AlterViewAction, CatalogStatement, LikeFilter, alter_table,
};
use weir_sql::parser::{CreateTable, WeirStatement, parse_script};
use weir_sql::types::sql_name;

fn names(rows: impl IntoIterator<Item = String>, like: &Option<LikeFilter>) -> Vec<Vec<String>> {
    rows.into_iter()
        .filter(|n| like.as_ref().is_none_or(|l| l.matches(n)))
        .map(|n| vec![n])
        .collect()
}

fn table(header: &str, rows: Vec<Vec<String>>) -> Outcome {
    Outcome::Table {
        header: vec![header.to_string()],
        rows,
    }
}

impl Engine {
    /// The persistent store of the catalog `path` is in, if it has one.
    fn store_of(&self, catalog: &str) -> Option<&CatalogStore> {
        self.stores.get(catalog)
    }

    /// After `CREATE TABLE` planned `def`: keeps it in a persistent catalog's files (not a
    /// temporary one). When that fails, the table is dropped again.
    pub(crate) async fn persist_table(&mut self, def: &TableDef, temporary: bool) -> Result<()> {
        let path = self.planner.catalogs.resolve(&def.ddl.name)?;
        let Some(store) = self.store_of(&path.catalog).filter(|_| !temporary) else {
            return Ok(());
        };
        let object = StoredObject::table(def.ddl.unmasked_sql());
        if let Err(e) = store
            .create_object(&path.database, &path.object, &object)
            .await
        {
            self.planner.drop_table(&path.to_name(), true)?;
            return Err(e);
        }
        Ok(())
    }

    /// After `CREATE VIEW` added the view at `path`: keeps it in a persistent catalog's
    /// files. When that fails, the view is dropped again.
    pub(crate) async fn persist_view(
        &mut self,
        path: &ObjectPath,
        temporary: bool,
        replaced: bool,
    ) -> Result<()> {
        let Some(store) = self.store_of(&path.catalog).filter(|_| !temporary) else {
            return Ok(());
        };
        let view = self
            .planner
            .catalogs
            .view_at(path)
            .cloned()
            .ok_or_else(|| Error::internal(format!("view {path} vanished")))?;
        let object = StoredObject::view(view.sql.clone(), view.resolved_in.clone());
        let written = if replaced {
            store
                .replace_object(&path.database, &path.object, &object)
                .await
        } else {
            store
                .create_object(&path.database, &path.object, &object)
                .await
        };
        if let Err(e) = written {
            self.planner.drop_view(&path.to_name(), true)?;
            return Err(e);
        }
        Ok(())
    }

    /// After `DROP TABLE/VIEW` removed `path`: removes it from a persistent catalog's files.
    pub(crate) async fn unpersist(&self, path: &ObjectPath) -> Result<()> {
        match self.store_of(&path.catalog) {
            Some(store) => store.delete_object(&path.database, &path.object).await,
            None => Ok(()),
        }
    }

    pub(crate) async fn execute_catalog(&mut self, stmt: &CatalogStatement) -> Result<Outcome> {
        use CatalogStatement as S;
        match stmt {
            S::CreateCatalog {
                name,
                if_not_exists,
                options,
            } => self.create_catalog(name, *if_not_exists, options).await,
            S::DropCatalog { name, if_exists } => {
                Ok(match self.planner.drop_catalog(name, *if_exists)? {
                    Some(_) => {
                        self.stores.remove(name);
                        Outcome::Done(format!("catalog '{name}' dropped"))
                    }
                    None => Outcome::Done(format!("catalog '{name}' does not exist")),
                })
            }
            S::CreateDatabase {
                name,
                if_not_exists,
                comment,
            } => {
                let (catalog, database) = self.planner.catalogs.resolve_database(name)?;
                self.planner.catalogs.catalog(&catalog)?;
                if self.planner.catalogs.database(&catalog, &database).is_ok() {
                    if *if_not_exists {
                        return Ok(Outcome::Done(format!("database '{name}' already exists")));
                    }
                    return Err(Error::plan(format!(
                        "database '{database}' already exists in catalog '{catalog}'"
                    )));
                }
                if let Some(store) = self.store_of(&catalog)
                    && !store.create_database(&database, comment.clone()).await?
                    && !*if_not_exists
                {
                    return Err(Error::plan(format!(
                        "database '{database}' already exists in catalog '{catalog}' \
                         (created by another session)"
                    )));
                }
                let db = Database {
                    comment: comment.clone(),
                    ..Default::default()
                };
                self.planner.create_database(&catalog, &database, db)?;
                Ok(Outcome::Done(format!("database '{name}' created")))
            }
            S::DropDatabase {
                name,
                if_exists,
                cascade,
            } => {
                let (catalog, database) = self.planner.catalogs.resolve_database(name)?;
                if !self
                    .planner
                    .catalogs
                    .check_drop_database(&catalog, &database, *if_exists, *cascade)?
                {
                    return Ok(Outcome::Done(format!("database '{name}' does not exist")));
                }
                if let Some(store) = self.store_of(&catalog) {
                    store.drop_database(&database).await?;
                }
                self.planner.drop_database(&catalog, &database)?;
                Ok(Outcome::Done(format!("database '{name}' dropped")))
            }
            S::UseCatalog(name) => {
                self.planner.use_catalog(name)?;
                Ok(Outcome::Done(format!("using catalog '{name}'")))
            }
            S::UseDatabase(name) => {
                let (catalog, database) = self.planner.catalogs.resolve_database(name)?;
                self.planner.use_database(&catalog, &database)?;
                Ok(Outcome::Done(format!(
                    "using database '{catalog}.{database}'"
                )))
            }
            S::ShowCatalogs(like) => Ok(table(
                "catalog name",
                names(self.planner.catalogs.catalog_names().cloned(), like),
            )),
            S::ShowCurrentCatalog => Ok(table(
                "current catalog name",
                vec![vec![self.planner.catalogs.current_catalog().to_string()]],
            )),
            S::ShowDatabases { from, like } => {
                let catalog = from
                    .clone()
                    .unwrap_or_else(|| self.planner.catalogs.current_catalog().to_string());
                let c = self.planner.catalogs.catalog(&catalog)?;
                Ok(table(
                    "database name",
                    names(c.databases.keys().cloned(), like),
                ))
            }
            S::ShowCurrentDatabase => Ok(table(
                "current database name",
                vec![vec![self.planner.catalogs.current_database().to_string()]],
            )),
            S::ShowTables { from, like } | S::ShowViews { from, like } => {
                let (catalog, database) = match from {
                    Some(name) => self.planner.catalogs.resolve_database(name)?,
                    None => (
                        self.planner.catalogs.current_catalog().to_string(),
                        self.planner.catalogs.current_database().to_string(),
                    ),
                };
                let db = self.planner.catalogs.database(&catalog, &database)?;
                Ok(if matches!(stmt, S::ShowTables { .. }) {
                    // Flink lists views among the tables too.
                    let mut all: Vec<String> =
                        db.tables.keys().chain(db.views.keys()).cloned().collect();
                    all.sort();
                    table("table name", names(all, like))
                } else {
                    table("view name", names(db.views.keys().cloned(), like))
                })
            }
            S::ShowColumns { table, like } => self.describe(table, like.as_ref()),
            S::AlterTable {
                name,
                if_exists,
                action,
            } => self.alter_table(name, *if_exists, action).await,
            S::AlterView { name, action } => self.alter_view(name, action).await,
        }
    }

    async fn create_catalog(
        &mut self,
        name: &str,
        if_not_exists: bool,
        options: &BTreeMap<String, String>,
    ) -> Result<Outcome> {
        if self.planner.catalogs.catalog(name).is_ok() {
            if if_not_exists {
                return Ok(Outcome::Done(format!("catalog '{name}' already exists")));
            }
            return Err(Error::plan(format!("catalog '{name}' already exists")));
        }
        let kind =
            CatalogKind::parse(options.get("type").map(String::as_str).ok_or_else(|| {
                Error::config(format!(
                    "CREATE CATALOG {name}: the 'type' option is missing (types: {})",
                    CatalogKind::NAMES
                ))
            })?)?;
        let allowed: &[&str] = match kind {
            CatalogKind::InMemory => &["type", "default-database"],
            CatalogKind::Persistent => &["type", "default-database", "path"],
        };
        if let Some(k) = options.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(Error::config(format!(
                "CREATE CATALOG {name}: unknown option '{k}' (options: {})",
                allowed.join(", ")
            )));
        }
        let def = CatalogDef::new(kind, options.clone());
        if kind == CatalogKind::InMemory {
            self.planner.create_catalog(name, def)?;
            return Ok(Outcome::Done(format!("catalog '{name}' created")));
        }
        let location = options.get("path").ok_or_else(|| {
            Error::config(format!(
                "CREATE CATALOG {name}: a 'weir' catalog needs a 'path' (a folder or an object-store URL)"
            ))
        })?;
        let store = CatalogStore::open(location)?;
        store.create_database(&def.default_database, None).await?;
        let loaded = store.load().await?;
        self.planner.create_catalog(name, def)?;
        self.stores.insert(name.to_string(), store);
        if let Err(e) = self.load_catalog(name, loaded).await {
            self.stores.remove(name);
            let _ = self.planner.drop_catalog(name, true);
            return Err(e);
        }
        Ok(Outcome::Done(format!("catalog '{name}' created")))
    }

    /// Defines what a persistent catalog's files hold: databases, then tables, then views
    /// (which may read tables and other views of any catalog).
    async fn load_catalog(
        &mut self,
        catalog: &str,
        loaded: crate::catalog_store::Loaded,
    ) -> Result<()> {
        let mut views = Vec::new();
        for (database, (comment, objects)) in loaded.databases {
            self.planner.create_database(
                catalog,
                &database,
                Database {
                    comment,
                    ..Default::default()
                },
            )?;
            for (object, stored) in objects {
                let path = ObjectPath {
                    catalog: catalog.to_string(),
                    database: database.clone(),
                    object,
                };
                match stored.kind {
                    ObjectKind::Table => {
                        let ct = stored_table(&stored.sql).map_err(|e| {
                            Error::plan(format!("catalog '{catalog}': table {path}: {e}"))
                        })?;
                        self.planner.load_table(&path, &ct).await.map_err(|e| {
                            Error::plan(format!("catalog '{catalog}': table {path}: {e}"))
                        })?;
                    }
                    ObjectKind::View => views.push((path, stored)),
                }
            }
        }
        // Views in rounds: one may read another that is not defined yet.
        while !views.is_empty() {
            let mut next = Vec::new();
            let mut last_error = None;
            let before = views.len();
            for (path, stored) in views {
                let resolved_in = stored
                    .resolved_in
                    .clone()
                    .unwrap_or_else(|| (path.catalog.clone(), path.database.clone()));
                if let Err(e) = self
                    .planner
                    .load_view(&path, &stored.sql, resolved_in)
                    .await
                {
                    last_error = Some(format!("view {path}: {e}"));
                    next.push((path, stored));
                }
            }
            if next.len() == before {
                return Err(Error::plan(format!(
                    "catalog '{catalog}': {}",
                    last_error.unwrap_or_default()
                )));
            }
            views = next;
        }
        Ok(())
    }

    async fn alter_table(
        &mut self,
        name: &str,
        if_exists: bool,
        action: &AlterTableAction,
    ) -> Result<Outcome> {
        let path = self.planner.catalogs.resolve(name)?;
        let Some(old) = self.planner.catalogs.table_at(&path) else {
            if if_exists {
                return Ok(Outcome::Done(format!("table '{name}' does not exist")));
            }
            if self.planner.catalogs.view_at(&path).is_some() {
                return Err(Error::plan(format!("'{path}' is a view; use ALTER VIEW")));
            }
            return Err(Error::plan(format!("table '{path}' does not exist")));
        };
        let new_path = match action {
            AlterTableAction::RenameTo(new) => self.renamed(&path, new)?,
            _ => path.clone(),
        };
        let ct = alter_table(&old.ddl, action)?;
        let mut options = ct.options.clone();
        options.remove("scan.parallelism");
        options.remove("sink.parallelism");
        weir_connectors::validate_options(
            &weir_common::ConnectorOptions::new(new_path.stable_name(), options),
            ct.physical_schema(),
            &ct.primary_key,
        )?;
        let def = self.planner.replace_table(&path, &new_path, &ct).await?;
        if let Some(store) = self.store_of(&path.catalog).cloned() {
            let object = StoredObject::table(def.ddl.unmasked_sql());
            let written = if new_path == path {
                store
                    .replace_object(&path.database, &path.object, &object)
                    .await
            } else {
                match store
                    .create_object(&new_path.database, &new_path.object, &object)
                    .await
                {
                    Ok(()) => store.delete_object(&path.database, &path.object).await,
                    Err(e) => Err(e),
                }
            };
            if let Err(e) = written {
                self.planner
                    .replace_table(&new_path, &path, &old.ddl)
                    .await?;
                return Err(e);
            }
        }
        Ok(Outcome::Done(format!("table '{name}' altered")))
    }

    /// The path of `RENAME TO new`: same catalog and database (as in Flink).
    fn renamed(&self, path: &ObjectPath, new: &str) -> Result<ObjectPath> {
        let parts = weir_sql::catalog::split_name(new);
        let target = ObjectPath {
            catalog: path.catalog.clone(),
            database: path.database.clone(),
            object: parts.last().cloned().unwrap_or_default(),
        };
        let full = match parts.len() {
            1 => target.clone(),
            _ => self.planner.catalogs.resolve(new)?,
        };
        if full != target {
            return Err(Error::plan(format!(
                "RENAME TO '{new}': a table or view is renamed within its database ({}.{})",
                path.catalog, path.database
            )));
        }
        Ok(target)
    }

    async fn alter_view(&mut self, name: &str, action: &AlterViewAction) -> Result<Outcome> {
        let path = self.planner.catalogs.resolve(name)?;
        if self.planner.catalogs.view_at(&path).is_none() {
            return Err(Error::plan(format!("view '{path}' does not exist")));
        }
        match action {
            AlterViewAction::RenameTo(new) => {
                let new_path = self.renamed(&path, new)?;
                self.planner.rename_view(&path, &new_path).await?;
                if let Some(store) = self.store_of(&path.catalog).cloned() {
                    let view = self.planner.catalogs.view_at(&new_path).cloned();
                    let view = view.ok_or_else(|| Error::internal("renamed view vanished"))?;
                    let object = StoredObject::view(view.sql, view.resolved_in);
                    store
                        .create_object(&new_path.database, &new_path.object, &object)
                        .await?;
                    store.delete_object(&path.database, &path.object).await?;
                }
            }
            AlterViewAction::As { query, sql } => {
                let text = format!("CREATE VIEW {} AS {sql}", path.quoted());
                self.planner
                    .create_view(&path.to_name(), true, query, &text)
                    .await?;
                self.persist_view(&path, false, true).await?;
            }
        }
        Ok(Outcome::Done(format!("view '{name}' altered")))
    }

    /// `SHOW CREATE TABLE`.
    pub(crate) fn show_create_table(&self, name: &str) -> Result<Outcome> {
        let table =
            self.planner.catalogs.table(name).ok_or_else(|| {
                Error::plan(format!("SHOW CREATE TABLE: no table named '{name}'"))
            })?;
        Ok(Outcome::Explain(format!("{};", table.ddl)))
    }

    /// `DESCRIBE t` and `SHOW COLUMNS FROM t [LIKE …]`.
    pub(crate) fn describe(&self, name: &str, like: Option<&LikeFilter>) -> Result<Outcome> {
        let catalogs = &self.planner.catalogs;
        let table = catalogs.table(name);
        let schema = if let Some(t) = &table {
            t.schema.clone()
        } else if let Some(v) = catalogs.view(name) {
            v.schema.clone()
        } else {
            return Err(Error::plan(format!("no table or view named '{name}'")));
        };
        let wm = table.and_then(|t| t.ddl.watermark.clone());
        Ok(Outcome::Table {
            header: vec![
                "name".into(),
                "type".into(),
                "null".into(),
                "watermark".into(),
            ],
            rows: schema
                .fields()
                .iter()
                .filter(|f| like.is_none_or(|l| l.matches(f.name())))
                .map(|f| {
                    vec![
                        f.name().clone(),
                        sql_name(f.data_type()),
                        f.is_nullable().to_string().to_uppercase(),
                        wm.as_ref()
                            .filter(|(c, _)| c == f.name())
                            .map(|(_, e)| e.to_string())
                            .unwrap_or_default(),
                    ]
                })
                .collect(),
        })
    }
}

/// The `CREATE TABLE` a persistent catalog keeps.
fn stored_table(sql: &str) -> Result<CreateTable> {
    match parse_script(sql)?.pop().map(|s| s.statement) {
        Some(WeirStatement::CreateTable(ct)) => Ok(*ct),
        _ => Err(Error::plan(format!("not a CREATE TABLE statement: {sql}"))),
    }
}
