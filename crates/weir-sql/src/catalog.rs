//! The catalog: tables (with their connector options, computed columns and watermark)
//! and views, as declared by DDL.

use arrow::datatypes::SchemaRef;
use datafusion::logical_expr::Expr;
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_common::ConnectorOptions;

/// A declared table.
#[derive(Debug, Clone)]
pub struct TableDef {
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
    /// The table's DDL (with any `LIKE` resolved), for `CREATE TABLE … LIKE` this table.
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
    pub sql: String,
    pub schema: SchemaRef,
}

/// Tables and views by name (names are case-sensitive, as in Flink).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub tables: BTreeMap<String, Arc<TableDef>>,
    pub views: BTreeMap<String, ViewDef>,
}

impl Catalog {
    pub fn exists(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.views.contains_key(name)
    }
}
