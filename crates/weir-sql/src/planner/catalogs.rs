//! The planner's side of catalogs: views, dropping and altering tables, catalogs and
//! databases, kept in step with DataFusion's catalogs (a table `c.d.t` is DataFusion's
//! catalog `c`, schema `d`, table `t`; the current catalog and database are DataFusion's
//! defaults, so one- and two-part names resolve as Flink resolves them).

use super::Planner;
use crate::catalog::{CatalogDef, Database, ObjectPath, TableDef, ViewDef};
use crate::parser::{CreateTable, WeirStatement, parse_script};
use datafusion::catalog::{
    CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider, TableProvider,
};
use datafusion::common::TableReference;
use datafusion::logical_expr::LogicalPlan;
use sqlparser::ast::Query;
use std::sync::Arc;
use weir_common::{Error, Result};

/// DataFusion's reference to the table at `path`.
pub(super) fn reference(path: &ObjectPath) -> TableReference {
    TableReference::full(
        path.catalog.clone(),
        path.database.clone(),
        path.object.clone(),
    )
}

/// The query of a view's `CREATE VIEW` text.
fn view_query(sql: &str) -> Result<Box<Query>> {
    match parse_script(sql)?.pop().map(|s| s.statement) {
        Some(WeirStatement::CreateView { query, .. }) => Ok(query),
        _ => Err(Error::internal(format!(
            "not a CREATE VIEW statement: {sql}"
        ))),
    }
}

impl Planner {
    /// Points DataFusion's default catalog and schema at `(catalog, database)`.
    fn set_defaults(&self, (catalog, database): (&str, &str)) {
        let state = self.ctx.state_ref();
        let mut state = state.write();
        let options = state.config_mut().options_mut();
        options.catalog.default_catalog = catalog.to_string();
        options.catalog.default_schema = database.to_string();
    }

    fn current(&self) -> (String, String) {
        (
            self.catalogs.current_catalog().to_string(),
            self.catalogs.current_database().to_string(),
        )
    }

    /// Plans a view's query with names resolved in `resolved_in`.
    async fn plan_view(&self, sql: &str, resolved_in: &(String, String)) -> Result<LogicalPlan> {
        let query = view_query(sql)?;
        self.set_defaults((&resolved_in.0, &resolved_in.1));
        let plan = self.logical(&query).await;
        let (c, d) = self.current();
        self.set_defaults((&c, &d));
        plan
    }

    fn register_view(&self, path: &ObjectPath, plan: LogicalPlan, sql: &str) -> Result<()> {
        self.deregister(path);
        let view: Arc<dyn TableProvider> = Arc::new(datafusion::catalog::view::ViewTable::new(
            plan,
            Some(sql.to_string()),
        ));
        self.register(path, view)
    }

    /// `CREATE [OR REPLACE] VIEW name AS query` (`sql`: the statement's text).
    pub async fn create_view(
        &mut self,
        name: &str,
        or_replace: bool,
        query: &Query,
        sql: &str,
    ) -> Result<ObjectPath> {
        let path = self.catalogs.resolve(name)?;
        self.catalogs.database(&path.catalog, &path.database)?;
        if self.catalogs.table_at(&path).is_some()
            || (self.catalogs.view_at(&path).is_some() && !or_replace)
        {
            return Err(Error::plan(format!(
                "table or view '{path}' already exists"
            )));
        }
        let plan = self.logical(query).await?;
        self.add_view(&path, plan, sql, self.current())?;
        Ok(path)
    }

    fn add_view(
        &mut self,
        path: &ObjectPath,
        plan: LogicalPlan,
        sql: &str,
        resolved_in: (String, String),
    ) -> Result<()> {
        let schema = Arc::new(plan.schema().as_arrow().clone());
        self.register_view(path, plan, sql)?;
        self.catalogs.insert_view(
            path,
            ViewDef {
                name: path.object.clone(),
                sql: sql.to_string(),
                schema,
                resolved_in,
            },
        )
    }

    /// Adds a view kept by a persistent catalog (its `CREATE VIEW` text, and where its
    /// names resolve).
    pub async fn load_view(
        &mut self,
        path: &ObjectPath,
        sql: &str,
        resolved_in: (String, String),
    ) -> Result<()> {
        let plan = self.plan_view(sql, &resolved_in).await?;
        self.add_view(path, plan, sql, resolved_in)
    }

    /// Adds a table kept by a persistent catalog at `path` (its DDL's name is ignored).
    pub async fn load_table(&mut self, path: &ObjectPath, ct: &CreateTable) -> Result<()> {
        let def = self.table_def(ct, path).await?;
        self.add_table(path, def)
    }

    /// Plans every view again, so that views see tables as they are now (after `ALTER
    /// TABLE`). A view whose query no longer plans keeps its old plan; the errors are
    /// returned, one per such view.
    pub async fn replan_views(&mut self) -> Vec<(ObjectPath, Error)> {
        let mut failed = Vec::new();
        // A view may read another: plan in rounds until nothing changes.
        let mut pending = self.catalogs.views();
        for _round in 0..=pending.len() {
            let mut next = Vec::new();
            failed.clear();
            for (path, view) in pending {
                match self.plan_view(&view.sql, &view.resolved_in).await {
                    Ok(plan) => {
                        if let Err(e) = self.add_view(&path, plan, &view.sql, view.resolved_in) {
                            failed.push((path, e));
                        }
                    }
                    Err(e) => {
                        failed.push((path.clone(), e));
                        next.push((path, view));
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            pending = next;
        }
        failed
    }

    /// `DROP TABLE`: the path dropped (`None`: none there and `if_exists`).
    pub fn drop_table(&mut self, name: &str, if_exists: bool) -> Result<Option<ObjectPath>> {
        let path = self.catalogs.resolve(name)?;
        if self.catalogs.remove_table(&path).is_none() {
            return if if_exists {
                Ok(None)
            } else if self.catalogs.view_at(&path).is_some() {
                Err(Error::plan(format!("'{path}' is a view; use DROP VIEW")))
            } else {
                Err(Error::plan(format!("table '{path}' does not exist")))
            };
        }
        self.deregister(&path);
        Ok(Some(path))
    }

    /// `DROP VIEW`: the path dropped (`None`: none there and `if_exists`).
    pub fn drop_view(&mut self, name: &str, if_exists: bool) -> Result<Option<ObjectPath>> {
        let path = self.catalogs.resolve(name)?;
        if self.catalogs.remove_view(&path).is_none() {
            return if if_exists {
                Ok(None)
            } else if self.catalogs.table_at(&path).is_some() {
                Err(Error::plan(format!("'{path}' is a table; use DROP TABLE")))
            } else {
                Err(Error::plan(format!("view '{path}' does not exist")))
            };
        }
        self.deregister(&path);
        Ok(Some(path))
    }

    /// Replaces the table at `old` with one planned from `ct` at `new` (the same path
    /// unless renamed), then plans the views again. On error nothing changes.
    pub async fn replace_table(
        &mut self,
        old: &ObjectPath,
        new: &ObjectPath,
        ct: &CreateTable,
    ) -> Result<Arc<TableDef>> {
        if old != new && self.catalogs.exists(new) {
            return Err(Error::plan(format!("table or view '{new}' already exists")));
        }
        let def = self.table_def(ct, new).await?;
        let previous = self
            .catalogs
            .remove_table(old)
            .ok_or_else(|| Error::plan(format!("table '{old}' does not exist")))?;
        self.deregister(old);
        if let Err(e) = self.add_table(new, def.clone()) {
            self.add_table(old, previous)?;
            return Err(e);
        }
        for (path, e) in self.replan_views().await {
            tracing::warn!("view {path} no longer plans after ALTER TABLE {old}: {e}");
        }
        Ok(def)
    }

    /// Renames the view at `old` to `new` (same query).
    pub async fn rename_view(&mut self, old: &ObjectPath, new: &ObjectPath) -> Result<()> {
        if self.catalogs.exists(new) {
            return Err(Error::plan(format!("table or view '{new}' already exists")));
        }
        let view = self
            .catalogs
            .view_at(old)
            .cloned()
            .ok_or_else(|| Error::plan(format!("view '{old}' does not exist")))?;
        let plan = self.plan_view(&view.sql, &view.resolved_in).await?;
        self.add_view(new, plan, &view.sql, view.resolved_in)?;
        self.catalogs.remove_view(old);
        self.deregister(old);
        Ok(())
    }

    /// `CREATE CATALOG`: `false` when one of that name exists.
    pub fn create_catalog(&mut self, name: &str, def: CatalogDef) -> Result<bool> {
        let databases: Vec<String> = def.databases.keys().cloned().collect();
        if !self.catalogs.add_catalog(name, def) {
            return Ok(false);
        }
        let provider = Arc::new(MemoryCatalogProvider::new());
        for d in databases {
            provider.register_schema(&d, Arc::new(MemorySchemaProvider::new()))?;
        }
        self.ctx.register_catalog(name, provider);
        Ok(true)
    }

    /// `DROP CATALOG`: the catalog dropped (`None`: none there and `if_exists`).
    pub fn drop_catalog(&mut self, name: &str, if_exists: bool) -> Result<Option<CatalogDef>> {
        let dropped = self.catalogs.drop_catalog(name, if_exists)?;
        if dropped.is_some() {
            // DataFusion cannot forget a catalog: leave it without schemas.
            self.ctx
                .register_catalog(name, Arc::new(MemoryCatalogProvider::new()));
        }
        Ok(dropped)
    }

    pub fn use_catalog(&mut self, name: &str) -> Result<()> {
        self.catalogs.use_catalog(name)?;
        let (c, d) = self.current();
        self.set_defaults((&c, &d));
        Ok(())
    }

    pub fn use_database(&mut self, catalog: &str, database: &str) -> Result<()> {
        self.catalogs.use_database(catalog, database)?;
        self.set_defaults((catalog, database));
        Ok(())
    }

    /// `CREATE DATABASE`: `false` when it exists.
    pub fn create_database(&mut self, catalog: &str, database: &str, db: Database) -> Result<bool> {
        if !self.catalogs.add_database(catalog, database, db)? {
            return Ok(false);
        }
        if let Some(c) = self.ctx.catalog(catalog) {
            c.register_schema(database, Arc::new(MemorySchemaProvider::new()))?;
        }
        Ok(true)
    }

    /// `DROP DATABASE` after [`crate::catalog::CatalogManager::check_drop_database`].
    pub fn drop_database(&mut self, catalog: &str, database: &str) -> Result<Option<Database>> {
        let dropped = self.catalogs.remove_database(catalog, database);
        if let Some(c) = self.ctx.catalog(catalog) {
            c.deregister_schema(database, true)?;
        }
        Ok(dropped)
    }
}
