//! Planning: DDL into the [`Catalog`], queries through DataFusion's SQL planner and
//! optimizer, then the optimized `LogicalPlan` into a [`StreamPlan`].
//!
//! Tables are registered with DataFusion as [`StreamTableProvider`]s that only carry a
//! schema; DataFusion never executes them in streaming mode. Views are DataFusion views.
//! Identifiers are case-sensitive, as in Flink.

use crate::catalog::{CatalogManager, ObjectPath, TableDef};
use crate::parser::{ColumnOrComputed, CreateTable, WeirStatement, parse_script};
use crate::plan::{CalcStep, PhysicalExprRef, PlanNode, StreamPlan};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, TableReference};
use datafusion::logical_expr::{Expr, LogicalPlan, TableType};
use datafusion::physical_expr::expressions::{Column, cast};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use sqlparser::ast::{Query, Statement};
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};

mod catalogs;
mod match_recognize;
pub use match_recognize::WITHIN_SYMBOL;
mod translate;
use catalogs::reference;
use translate::materialize;

const PHYSICAL: &str = "__weir_physical";
const FULL: &str = "__weir_full";

pub use crate::source_scan::BatchScan;

/// A table as DataFusion sees it: a schema and the table's definition. In streaming mode
/// DataFusion never scans it; in batch mode `scan` reads it through [`BatchScan`], a
/// partition per share of the source's splits ([`crate::source_scan::SourceScanExec`]).
#[derive(Debug)]
pub struct StreamTableProvider {
    pub schema: SchemaRef,
    pub table: Option<Arc<TableDef>>,
    pub batch: Option<Arc<dyn BatchScan>>,
}

#[async_trait]
impl TableProvider for StreamTableProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    /// `column = v` and `column IN (…)` over integer columns reach the batch scan
    /// ([`crate::source_scan::Restriction`]); DataFusion filters again after it, and the
    /// streaming planner ignores them (the filter stays above the scan).
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<datafusion::logical_expr::TableProviderFilterPushDown>> {
        use datafusion::logical_expr::TableProviderFilterPushDown as Push;
        Ok(filters
            .iter()
            .map(|f| match &self.table {
                Some(t) if crate::source_scan::Restriction::of(f, t).is_some() => Push::Inexact,
                _ => Push::Unsupported,
            })
            .collect())
    }
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let (Some(scanner), Some(table)) = (&self.batch, &self.table) else {
            return Err(datafusion::error::DataFusionError::NotImplemented(
                "streaming tables are read by Weir's runtime, not by DataFusion".into(),
            ));
        };
        if let Some(plan) = native_parquet_scan(state, table, projection).await? {
            return Ok(plan);
        }
        let restrictions: Vec<_> = filters
            .iter()
            .filter_map(|f| crate::source_scan::Restriction::of(f, table))
            .collect();
        let reader = scanner
            .open(
                table.clone(),
                &restrictions,
                projection.map(|p| p.as_slice()),
            )
            .await
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let partitions = state.config().target_partitions();
        let scan = crate::source_scan::SourceScanExec::try_new(
            table.clone(),
            reader,
            restrictions,
            projection,
            partitions,
        )
        .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        Ok(Arc::new(scan))
    }
}

/// Local Parquet folders are read by DataFusion's own Parquet scan (streaming, with
/// projection), the table's computed columns computed on top; anything else is scanned
/// through the connectors (`None`).
async fn native_parquet_scan(
    state: &dyn Session,
    table: &TableDef,
    projection: Option<&Vec<usize>>,
) -> datafusion::error::Result<Option<Arc<dyn ExecutionPlan>>> {
    use datafusion::datasource::file_format::parquet::ParquetFormat;
    use datafusion::datasource::listing::{
        ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
    };
    use datafusion::physical_plan::projection::ProjectionExec;
    let options = &table.options;
    let path = match (
        options.get("connector"),
        options.get("format"),
        options.get("path"),
    ) {
        (Some("filesystem"), Some(f), Some(p)) if f.eq_ignore_ascii_case("parquet") => p,
        _ => return Ok(None),
    };
    // Remote, partitioned and monitored (unbounded) tables go through the connector.
    if path.contains("://")
        || !table.partitioned_by.is_empty()
        || options.get("source.monitor-interval").is_some()
    {
        return Ok(None);
    }
    let dir = std::path::Path::new(path);
    if !dir.is_dir() || !table.metadata.is_empty() {
        return Ok(None); // the connector reports a missing folder with its own words
    }
    let url = ListingTableUrl::parse(format!("{}/", dir.display()))?;
    let listing =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new(url)
        .with_listing_options(listing)
        .with_schema(table.physical_schema.clone());
    let scan = ListingTable::try_new(config)?
        .scan(state, None, &[], None)
        .await?;
    // Computed columns, then the requested projection.
    let full: Vec<(Arc<dyn datafusion::physical_plan::PhysicalExpr>, String)> =
        match computed_physical(table)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?
        {
            Some(exprs) => exprs
                .into_iter()
                .zip(table.schema.fields())
                .map(|(e, f)| (e, f.name().clone()))
                .collect(),
            None => table
                .physical_schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    (
                        Arc::new(Column::new(f.name(), i))
                            as Arc<dyn datafusion::physical_plan::PhysicalExpr>,
                        f.name().clone(),
                    )
                })
                .collect(),
        };
    let picked: Vec<_> = match projection {
        Some(p) => p.iter().map(|i| full[*i].clone()).collect(),
        None => full,
    };
    Ok(Some(Arc::new(ProjectionExec::try_new(picked, scan)?)))
}

/// Refuses what a cluster cannot run: a plan goes there as DataFusion's protobuf, and
/// of Weir's own plan parts only its tables have a codec (`weir_ballista::codec`).
fn check_for_cluster(plan: &LogicalPlan) -> Result<()> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut refused = None;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let provider = datafusion::datasource::source_as_provider(&scan.source)?;
            if provider
                .downcast_ref::<match_recognize::MatchTable>()
                .is_some()
            {
                refused = Some(
                    "MATCH_RECOGNIZE does not run on a Ballista cluster yet; run the query \
                     in one process (without --cluster)",
                );
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(plan_error)?;
    match refused {
        Some(why) => Err(Error::plan(why)),
        None => Ok(()),
    }
}

/// Holds the catalog and a DataFusion session configured for Flink SQL.
pub struct Planner {
    ctx: SessionContext,
    /// Catalogs, databases, tables and views. Change it through the planner's methods,
    /// which keep DataFusion's catalogs in step.
    pub catalogs: CatalogManager,
    batch: Option<Arc<dyn BatchScan>>,
    /// `table.local-time-zone`, resolved ([`crate::local_time_zone`]).
    zone: String,
    /// Batch mode's memory pool size and spill directory, as DataFusion's runtime has
    /// them (`None` before [`Planner::set_batch_memory`]).
    memory: Option<(u64, Option<String>)>,
    /// Where batch queries spill, removed with the planner ([`crate::spill_dir`]).
    spill: Option<crate::spill_dir::SpillDir>,
    /// Batch queries run elsewhere (on a Ballista cluster): the session they run in is
    /// this planner's, changed by this function ([`Planner::set_batch_cluster`]).
    batch_cluster: Option<SessionUpgrade>,
}

/// Turns a planner's DataFusion session into one that runs its batch queries elsewhere.
pub type SessionUpgrade = Arc<
    dyn Fn(
            datafusion::execution::session_state::SessionState,
        ) -> Result<datafusion::execution::session_state::SessionState>
        + Send
        + Sync,
>;

impl Default for Planner {
    fn default() -> Self {
        Self::new()
    }
}

fn plan_error(e: datafusion::error::DataFusionError) -> Error {
    use datafusion::error::DataFusionError as DF;
    // DataFusion attaches a diagnostic with the span of the offending SQL.
    let location = e
        .diagnostic()
        .and_then(|d| d.span)
        .filter(|s| s.start.line > 0)
        .map(|s| weir_common::SqlLocation {
            line: s.start.line,
            column: s.start.column,
        });
    let root = e.find_root();
    let user_error = matches!(
        root,
        DF::Plan(_) | DF::SchemaError(..) | DF::NotImplemented(_)
    );
    let text = root.to_string();
    let text = text
        .strip_prefix("Error during planning: ")
        .or_else(|| text.strip_prefix("This feature is not implemented: "))
        .unwrap_or(&text)
        .to_string();
    match (user_error, location) {
        (true, Some(_)) => Error::Sql {
            message: text,
            location,
        },
        (true, None) => Error::Plan(text),
        (false, _) => Error::DataFusion(e),
    }
}

impl Planner {
    pub fn new() -> Self {
        let mut config = SessionConfig::new().with_default_catalog_and_schema(
            crate::catalog::DEFAULT_CATALOG,
            crate::catalog::DEFAULT_DATABASE,
        );
        config.options_mut().sql_parser.enable_ident_normalization = false;
        // Flink: an exact numeric literal (`0.1`, `1.255`) is a DECIMAL, not a DOUBLE
        // (`0.1 + 0.2 = 0.3` holds; `CAST(1.255 AS DECIMAL(4, 2))` is 1.26).
        config.options_mut().sql_parser.parse_float_as_decimal = true;
        // Flink (Calcite's default collation): NULL is the smallest value, first in an
        // ascending order and last in a descending one, where neither is written.
        config.options_mut().sql_parser.default_null_ordering = "nulls_min".into();
        // Batch joins build on the input estimated smaller, with Flink's estimates
        // (`batch_statistics`).
        config.options_mut().optimizer.use_statistics_registry = true;
        let state = datafusion::execution::session_state::SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_statistics_registry(crate::batch_statistics::registry())
            .build();
        let ctx = SessionContext::new_with_state(state);
        for name in [crate::group_windows::TUMBLE, crate::group_windows::SESSION] {
            ctx.register_udf(crate::group_windows::WindowKey::udf(name));
        }
        ctx.register_udf(crate::group_windows::ProcTime::udf());
        ctx.register_udf(crate::temporal_join::Temporal::udf());
        for f in crate::window_lists::WindowList::udfs()
            .into_iter()
            .chain(crate::unnest::udfs())
        {
            ctx.register_udf(f);
        }
        ctx.register_udf(crate::current_watermark::CurrentWatermark::udf());
        ctx.register_udaf(crate::flink_collect::udaf());
        for f in crate::flink_json::udfs()
            .into_iter()
            .chain(crate::flink_scalars::udfs())
        {
            ctx.register_udf(f);
        }
        for f in crate::flink_types::BigintRanking::all() {
            ctx.register_udwf(f);
        }
        Self {
            ctx,
            catalogs: CatalogManager::default(),
            batch: None,
            zone: crate::local_time_zone::resolve("default").unwrap_or_else(|_| "UTC".into()),
            memory: None,
            spill: None,
            batch_cluster: None,
        }
    }

    /// Sets batch mode's memory budget (`taskmanager.memory.managed.size`): DataFusion's
    /// operators share a fair spilling pool of `limit` bytes (sorts, aggregates and
    /// joins' probe sides spill into a folder of this planner's under `tmp_dir` or the
    /// system's temporary directory).
    pub fn set_batch_memory(&mut self, limit: u64, tmp_dir: Option<String>) -> Result<()> {
        use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
        use datafusion::execution::runtime_env::RuntimeEnvBuilder;
        use datafusion::execution::session_state::SessionStateBuilder;
        let wanted = Some((limit, tmp_dir.clone()));
        if self.memory == wanted {
            return Ok(());
        }
        let state = self.ctx.state();
        let pool = TrackConsumersPool::new(
            FairSpillPool::new(limit as usize),
            std::num::NonZeroUsize::new(3).expect("3"),
        );
        let spill = crate::spill_dir::SpillDir::create(tmp_dir.as_deref()).map_err(|e| {
            Error::config(format!(
                "cannot create a spill folder under 'io.tmp.dirs' ({}): {e}",
                tmp_dir
                    .as_deref()
                    .unwrap_or("the system's temporary folder")
            ))
        })?;
        let runtime = RuntimeEnvBuilder::from_runtime_env(state.runtime_env())
            .with_memory_pool(Arc::new(pool))
            .with_temp_file_path(spill.path());
        let state = SessionStateBuilder::new_from_existing(state)
            .with_runtime_env(runtime.build_arc()?)
            .build();
        self.ctx = SessionContext::new_with_state(state);
        self.memory = wanted;
        self.spill = Some(spill);
        Ok(())
    }

    /// How many partitions a batch query's scans and exchanges have
    /// (`parallelism.default`, as Flink's batch jobs read it).
    pub fn set_batch_parallelism(&mut self, partitions: usize) {
        let state = self.ctx.state_ref();
        let mut state = state.write();
        state.config_mut().options_mut().execution.target_partitions = partitions.max(1);
    }

    /// Sets `table.local-time-zone` (a Flink zone id, or `default`).
    pub fn set_local_time_zone(&mut self, name: &str) -> Result<()> {
        self.zone = crate::local_time_zone::resolve(name).map_err(Error::config)?;
        Ok(())
    }

    /// How tables are read in batch mode (set once, before tables are created).
    pub fn set_batch_scan(&mut self, scan: Arc<dyn BatchScan>) {
        self.batch = Some(scan);
    }

    /// Batch queries run in the session `upgrade` makes of this planner's (a Ballista
    /// client's: the plan goes to the cluster's scheduler, the rows come back).
    pub fn set_batch_cluster(&mut self, upgrade: SessionUpgrade) {
        self.batch_cluster = Some(upgrade);
    }

    /// The definition of a table from its DDL (as [`CreateTable::unmasked_sql`] writes
    /// it, with its full path as name), planned as `CREATE TABLE` plans it: how a process
    /// that did not run the script (a Ballista scheduler or executor) learns a table.
    pub async fn table_of_ddl(&self, ddl: &str) -> Result<Arc<TableDef>> {
        let statements = parse_script(ddl)?;
        let [
            crate::parser::Located {
                statement: WeirStatement::CreateTable(ct),
                ..
            },
        ] = statements.as_slice()
        else {
            // Not the text itself: it holds the table's options, secrets unmasked.
            return Err(Error::plan(
                "a table's definition must be one CREATE TABLE statement",
            ));
        };
        let path = self.catalogs.resolve(&ct.name)?;
        self.table_def(ct, &path).await
    }

    /// Runs an optimized logical plan with DataFusion (batch mode).
    pub async fn execute_batch(&self, plan: LogicalPlan) -> Result<Vec<arrow::array::RecordBatch>> {
        use futures::TryStreamExt;
        self.execute_batch_each(plan).await?.try_collect().await
    }

    /// Runs an optimized logical plan with DataFusion (batch mode), its rows as a stream
    /// (with Weir's errors: a connector's own, or a data error naming its suspects).
    pub async fn execute_batch_each(
        &self,
        plan: LogicalPlan,
    ) -> Result<impl futures::Stream<Item = Result<arrow::array::RecordBatch>> + Send + use<>> {
        use futures::StreamExt;
        let frame = self.batch_frame(plan).await?;
        let plan_for_errors = frame.logical_plan().clone();
        let limit = self.memory.as_ref().map(|(limit, _)| *limit);
        let to_weir = move |e: datafusion::error::DataFusionError| {
            if let Some(message) = data_error_suspects(&plan_for_errors, &e) {
                return Error::Input(message);
            }
            if let (Some(limit), datafusion::error::DataFusionError::ResourcesExhausted(why)) =
                (limit, e.find_root())
            {
                return Error::Config(format!(
                    "the batch query needs more memory than 'taskmanager.memory.managed.size' \
                     ({} MiB) allows, in an operator that cannot spill to disk; raise it \
                     (e.g. SET 'taskmanager.memory.managed.size' = '{} mb'). DataFusion: {why}",
                    limit >> 20,
                    (limit >> 20).max(1) * 4
                ));
            }
            match e {
                datafusion::error::DataFusionError::External(inner) => {
                    match inner.downcast::<Error>() {
                        Ok(weir) => *weir,
                        Err(other) => Error::External(other.to_string()),
                    }
                }
                other => Error::DataFusion(other),
            }
        };
        let stream = match frame.execute_stream().await {
            Ok(stream) => stream,
            Err(e) => return Err(to_weir(e)),
        };
        Ok(stream.map(move |b| b.map_err(&to_weir)))
    }

    /// Runs an optimized logical plan with DataFusion and returns its rows as a stream.
    pub async fn execute_batch_stream(
        &self,
        plan: LogicalPlan,
    ) -> Result<datafusion::physical_plan::SendableRecordBatchStream> {
        let frame = self.batch_frame(plan).await?;
        frame.execute_stream().await.map_err(Error::DataFusion)
    }

    /// DataFusion's physical plan of `plan` in batch mode (EXPLAIN), indented.
    pub async fn explain_batch(&self, plan: LogicalPlan) -> Result<String> {
        let physical = self
            .batch_frame(plan)
            .await?
            .create_physical_plan()
            .await
            .map_err(plan_error)?;
        Ok(datafusion::physical_plan::displayable(physical.as_ref())
            .indent(false)
            .to_string())
    }

    /// `plan` checked for batch mode and handed to DataFusion.
    async fn batch_frame(&self, plan: LogicalPlan) -> Result<datafusion::dataframe::DataFrame> {
        crate::current_watermark::check_batch(&plan)?;
        let plan = crate::batch_sessions::rewrite(plan).map_err(plan_error)?;
        let plan = crate::batch_distinct::rewrite(plan).map_err(plan_error)?;
        let ctx = match &self.batch_cluster {
            Some(upgrade) => {
                check_for_cluster(&plan)?;
                SessionContext::new_with_state(upgrade(self.ctx.state())?)
            }
            None => self.ctx.clone(),
        };
        ctx.execute_logical_plan(plan).await.map_err(plan_error)
    }

    /// The DataFusion session (to register functions).
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// Registers a table (or view) with DataFusion at its path.
    fn register(&self, path: &ObjectPath, provider: Arc<dyn TableProvider>) -> Result<()> {
        self.ctx.register_table(reference(path), provider)?;
        Ok(())
    }

    fn deregister(&self, path: &ObjectPath) {
        let _ = self.ctx.deregister_table(reference(path));
    }

    /// Registers a helper table under a bare name in the current database, for planning
    /// table definitions.
    fn register_bare(&self, name: &str, provider: Arc<dyn TableProvider>) -> Result<()> {
        self.ctx
            .register_table(TableReference::bare(name.to_string()), provider)?;
        Ok(())
    }

    fn deregister_bare(&self, name: &str) {
        let _ = self
            .ctx
            .deregister_table(TableReference::bare(name.to_string()));
    }

    /// Plans a query to an unoptimized logical plan.
    async fn logical(&self, query: &Query) -> Result<LogicalPlan> {
        let mut query = query.clone();
        Box::pin(self.plan_match_recognize(&mut query)).await?;
        let versioned = crate::temporal_join::versioned_tables(&mut query);
        if !versioned.is_empty() {
            let mut columns = std::collections::HashMap::new();
            for name in versioned {
                let text = name.to_string();
                if let Ok(table) = self.ctx.table_provider(text.as_str()).await {
                    let schema = table.schema();
                    let names = schema.fields().iter().map(|f| f.name().clone());
                    columns.insert(text, names.collect::<Vec<_>>());
                }
            }
            crate::temporal_join::rewrite(&mut query, &|name| {
                columns.get(&name.to_string()).cloned()
            })
            .map_err(Error::plan)?;
        }
        crate::functions::rewrite_window_tvfs(&mut query).map_err(Error::plan)?;
        crate::unnest::rewrite_unnest_joins(&mut query).map_err(Error::plan)?;
        crate::select_names::unique_result_names(&mut query);
        crate::functions::rewrite(&mut query);
        crate::functions::alias_nested_fields(&mut query);
        crate::flink_types::distinct_cast_names(&mut query);
        crate::flink_types::flink_type_casts(&mut query);
        crate::flink_types::int_literals(&mut query);
        let stmt = datafusion::sql::parser::Statement::Statement(Box::new(Statement::Query(
            Box::new(query),
        )));
        let plan = self
            .ctx
            .state()
            .statement_to_plan(stmt)
            .await
            .map_err(plan_error)?;
        crate::flink_types::result_types(plan, &self.zone).map_err(plan_error)
    }

    async fn logical_of_text(&self, sql: &str) -> Result<LogicalPlan> {
        let mut stmts = parse_script(sql)?;
        match stmts.pop().map(|s| s.statement) {
            Some(WeirStatement::Select(q)) => self.logical(&q).await,
            _ => Err(Error::internal(format!("not a query: {sql}"))),
        }
    }

    /// `CREATE TABLE`: plans computed columns and the watermark, records the table.
    /// `ct` with its `LIKE` clause applied (Flink's merging rules; without like options,
    /// `INCLUDING ALL OVERWRITING OPTIONS`): the other table's physical columns come first,
    /// then, by feature, its computed columns, watermark, primary key, partitioning and
    /// options, merged with `ct`'s own.
    pub fn resolve_like(&self, ct: &CreateTable) -> Result<CreateTable> {
        use crate::parser::{LikeFeature as F, LikeStrategy as S};
        let Some(like) = &ct.like else {
            return Ok(ct.clone());
        };
        let source = self.catalogs.table(&like.table).ok_or_else(|| {
            Error::plan(format!(
                "CREATE TABLE '{}' LIKE '{}': no such table",
                ct.name, like.table
            ))
        })?;
        let src = &source.ddl;
        let features = [
            F::Constraints,
            F::Partitions,
            F::Generated,
            F::Metadata,
            F::Options,
            F::Watermarks,
        ];
        let mut strategy: Vec<(F, S)> = features
            .iter()
            .map(|f| {
                (
                    *f,
                    if *f == F::Options {
                        S::Overwriting
                    } else {
                        S::Including
                    },
                )
            })
            .collect();
        for (s, f) in &like.options {
            for (feature, current) in strategy.iter_mut() {
                if *f == F::All || f == feature {
                    *current = *s;
                }
            }
        }
        let of = |f: F| {
            strategy
                .iter()
                .find(|(g, _)| *g == f)
                .map(|(_, s)| *s)
                .unwrap_or(S::Including)
        };
        let clash = |what: String| {
            Error::plan(format!(
                "CREATE TABLE '{}' LIKE '{}': {what} (use OVERWRITING or EXCLUDING for it)",
                ct.name, like.table
            ))
        };
        let mut out = ct.clone();
        out.like = None;
        // Columns: the source's physical (always) and computed ones, then the new ones.
        let mut columns: Vec<ColumnOrComputed> = Vec::new();
        for c in &src.columns {
            let computed = matches!(c, ColumnOrComputed::Computed { .. });
            if computed && of(F::Generated) == S::Excluding {
                continue;
            }
            let metadata = matches!(
                c,
                ColumnOrComputed::Column(crate::parser::ColumnSpec {
                    metadata: Some(_),
                    ..
                })
            );
            if metadata && of(F::Metadata) == S::Excluding {
                continue;
            }
            let mine = ct.columns.iter().find(|n| n.name() == c.name());
            match mine {
                Some(ColumnOrComputed::Computed { .. })
                    if computed && of(F::Generated) == S::Overwriting => {}
                Some(_) => {
                    return Err(clash(format!(
                        "column '{}' is defined in both tables",
                        c.name()
                    )));
                }
                None => columns.push(c.clone()),
            }
        }
        columns.extend(ct.columns.iter().cloned());
        out.columns = columns;
        match (of(F::Watermarks), &src.watermark, &ct.watermark) {
            (S::Excluding, _, _) | (_, None, _) => {}
            (S::Including, Some(_), Some(_)) => {
                return Err(clash("both tables define a watermark".into()));
            }
            (_, Some(w), None) => out.watermark = Some(w.clone()),
            (S::Overwriting, Some(_), Some(_)) => {}
        }
        if of(F::Constraints) == S::Including && !src.primary_key.is_empty() {
            if !ct.primary_key.is_empty() {
                return Err(clash("both tables define a primary key".into()));
            }
            out.primary_key = src.primary_key.clone();
        }
        if of(F::Partitions) == S::Including && !src.partitioned_by.is_empty() {
            if !ct.partitioned_by.is_empty() {
                return Err(clash("both tables are PARTITIONED BY".into()));
            }
            out.partitioned_by = src.partitioned_by.clone();
        }
        match of(F::Options) {
            S::Excluding => {}
            strategy => {
                let mut options = src.options.clone();
                for (k, v) in &ct.options {
                    if strategy == S::Including && options.contains_key(k) {
                        return Err(clash(format!("option '{k}' is set in both tables")));
                    }
                    options.insert(k.clone(), v.clone());
                }
                out.options = options;
            }
        }
        Ok(out)
    }

    /// `CREATE TABLE`: `None` when it exists and `IF NOT EXISTS` says that is fine.
    pub async fn create_table(&mut self, ct: &CreateTable) -> Result<Option<Arc<TableDef>>> {
        let path = self.catalogs.resolve(&ct.name)?;
        self.catalogs.database(&path.catalog, &path.database)?;
        if self.catalogs.exists(&path) {
            if ct.if_not_exists {
                return Ok(None);
            }
            return Err(Error::sql(
                format!("table or view '{path}' already exists"),
                Some(ct.location),
            ));
        }
        let def = self.table_def(ct, &path).await?;
        self.add_table(&path, def.clone())?;
        Ok(Some(def))
    }

    /// Adds a planned table at `path` (replacing what is there).
    fn add_table(&mut self, path: &ObjectPath, def: Arc<TableDef>) -> Result<()> {
        self.deregister(path);
        self.register(
            path,
            Arc::new(StreamTableProvider {
                schema: def.schema.clone(),
                table: Some(def.clone()),
                batch: self.batch.clone(),
            }),
        )?;
        self.catalogs.insert_table(path, def)
    }

    /// Plans a table's definition (computed columns, watermark, options) for `path`.
    async fn table_def(&self, ct: &CreateTable, path: &ObjectPath) -> Result<Arc<TableDef>> {
        let physical_schema = ct.physical_schema();
        let has_computed = ct
            .columns
            .iter()
            .any(|c| matches!(c, ColumnOrComputed::Computed { .. }));
        let (schema, computed) = if has_computed {
            let items: Vec<String> = ct
                .columns
                .iter()
                .map(|c| match c {
                    ColumnOrComputed::Column(c) => format!("`{}`", c.name),
                    ColumnOrComputed::Computed { name, expr } => format!("({expr}) AS `{name}`"),
                })
                .collect();
            self.register_bare(
                PHYSICAL,
                Arc::new(StreamTableProvider {
                    schema: physical_schema.clone(),
                    table: None,
                    batch: None,
                }),
            )?;
            let plan = self
                .logical_of_text(&format!("SELECT {} FROM `{PHYSICAL}`", items.join(", ")))
                .await;
            self.deregister_bare(PHYSICAL);
            let plan = plan.map_err(|e| {
                Error::sql(
                    format!("in a computed column of table '{}': {e}", ct.name),
                    Some(ct.location),
                )
            })?;
            let LogicalPlan::Projection(p) = &plan else {
                return Err(Error::internal(
                    "computed columns did not plan to a projection",
                ));
            };
            (
                Arc::new(plan.schema().as_arrow().clone()),
                Some(p.expr.clone()),
            )
        } else {
            (physical_schema.clone(), None)
        };

        let watermark = match &ct.watermark {
            None => None,
            Some((column, expr)) => {
                let field = schema.field_with_name(column).map_err(|_| {
                    Error::sql(
                        format!(
                            "WATERMARK FOR '{column}': table '{}' has no such column",
                            ct.name
                        ),
                        Some(ct.location),
                    )
                })?;
                if !matches!(field.data_type(), DataType::Timestamp(..)) {
                    return Err(Error::sql(
                        format!(
                            "WATERMARK FOR '{column}': the rowtime column must be TIMESTAMP(3) or TIMESTAMP_LTZ(3), not {}",
                            crate::types::sql_name(field.data_type())
                        ),
                        Some(ct.location),
                    ));
                }
                self.register_bare(
                    FULL,
                    Arc::new(StreamTableProvider {
                        schema: schema.clone(),
                        table: None,
                        batch: None,
                    }),
                )?;
                let plan = self
                    .logical_of_text(&format!("SELECT {expr} FROM `{FULL}`"))
                    .await;
                self.deregister_bare(FULL);
                let plan = plan.map_err(|e| {
                    Error::sql(
                        format!("in the WATERMARK of table '{}': {e}", ct.name),
                        Some(ct.location),
                    )
                })?;
                let LogicalPlan::Projection(p) = &plan else {
                    return Err(Error::internal("watermark did not plan to a projection"));
                };
                let out = plan.schema().field(0).data_type();
                if !matches!(out, DataType::Timestamp(..)) {
                    return Err(Error::sql(
                        format!(
                            "the WATERMARK expression of table '{}' must return a timestamp, not {out}",
                            ct.name
                        ),
                        Some(ct.location),
                    ));
                }
                Some((column.clone(), p.expr[0].clone()))
            }
        };

        for c in ct.partitioned_by.iter().chain(&ct.primary_key) {
            if physical_schema.field_with_name(c).is_err() {
                return Err(Error::sql(
                    format!("table '{}' has no physical column '{c}'", ct.name),
                    Some(ct.location),
                ));
            }
        }
        let mut options = ct.options.clone();
        let mut take_parallelism = |key: &str| -> Result<Option<usize>> {
            options
                .remove(key)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| {
                            Error::config(format!(
                                "table '{}': '{key}' must be a positive integer, got '{v}'",
                                ct.name
                            ))
                        })
                })
                .transpose()
        };
        let scan_parallelism = take_parallelism("scan.parallelism")?;
        let sink_parallelism = take_parallelism("sink.parallelism")?;
        let metadata = ct.metadata_columns();
        let sink_schema = Arc::new(arrow::datatypes::Schema::new(
            physical_schema
                .fields()
                .iter()
                .filter(|f| !metadata.iter().any(|(c, m)| c == f.name() && m.is_virtual))
                .cloned()
                .collect::<Vec<_>>(),
        ));
        let mut ddl = ct.clone();
        ddl.name = path.to_name();
        ddl.if_not_exists = false;
        ddl.like = None;
        let name = path.stable_name();
        Ok(Arc::new(TableDef {
            options: ConnectorOptions::new(name.clone(), options),
            name,
            metadata,
            sink_schema,
            physical_schema,
            schema: schema.clone(),
            computed,
            watermark,
            partitioned_by: ct.partitioned_by.clone(),
            primary_key: ct.primary_key.clone(),
            scan_parallelism,
            sink_parallelism,
            ddl: Arc::new(ddl),
        }))
    }

    /// Plans and optimizes a query with DataFusion.
    pub async fn optimized(&self, query: &Query) -> Result<LogicalPlan> {
        let plan = self.logical(query).await?;
        self.ctx.state().optimize(&plan).map_err(plan_error)
    }

    /// `SELECT …` shown to the user.
    pub async fn plan_select(&self, query: &Query) -> Result<StreamPlan> {
        let logical = self.optimized(query).await?;
        let mut plan = StreamPlan {
            logical_plan: logical.display_indent().to_string(),
            ..Default::default()
        };
        let input = self.translate_into_node(&logical, &mut plan.nodes)?;
        let schema = Arc::new(logical.schema().as_arrow().clone());
        plan.nodes.push(PlanNode::Collect { input, schema });
        Ok(plan)
    }

    /// `INSERT INTO table SELECT …`.
    /// The table an `INSERT INTO` writes.
    pub fn sink_table(&self, table: &str) -> Result<Arc<TableDef>> {
        let path = self.catalogs.resolve(table)?;
        let def = self.catalogs.table_at(&path).ok_or_else(|| {
            let known: Vec<_> = self
                .catalogs
                .database(&path.catalog, &path.database)
                .map(|d| d.tables.keys().cloned().collect())
                .unwrap_or_default();
            Error::plan(format!(
                "INSERT INTO '{table}': no table '{path}' (tables of {}.{}: {})",
                path.catalog,
                path.database,
                known.join(", ")
            ))
        })?;
        // Which metadata a connector writes is the connector's to check (create_sink).
        Ok(def)
    }

    /// The query of `INSERT INTO table [PARTITION (k = v, …)] [(columns)] query` as one
    /// returning every column of the table in its order: listed columns from the query,
    /// static partition values as given, the others NULL (as Flink does). With static
    /// values and no column list, the query gives the other columns in the table's order.
    /// Without either, `query` itself.
    pub async fn insert_query(
        &self,
        table: &str,
        columns: &[String],
        partition: &[(String, sqlparser::ast::Expr)],
        query: &Query,
    ) -> Result<Query> {
        if columns.is_empty() && partition.is_empty() {
            return Ok(query.clone());
        }
        let def = self.sink_table(table)?;
        let names: Vec<&str> = def
            .sink_schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        for (c, _) in partition {
            if !def.partitioned_by.contains(c) {
                return Err(Error::plan(format!(
                    "INSERT INTO '{table}' PARTITION ({c} = …): '{c}' is not a partition column \
                     (PARTITIONED BY: {})",
                    def.partitioned_by.join(", ")
                )));
            }
        }
        let is_static = |c: &str| partition.iter().any(|(p, _)| p == c);
        let columns: Vec<String> = if columns.is_empty() {
            names
                .iter()
                .filter(|n| !is_static(n))
                .map(|n| n.to_string())
                .collect()
        } else {
            columns.to_vec()
        };
        for (i, c) in columns.iter().enumerate() {
            if !names.contains(&c.as_str()) {
                return Err(Error::plan(format!(
                    "INSERT INTO '{table}': no column '{c}' (columns: {})",
                    names.join(", ")
                )));
            }
            if columns[..i].contains(c) {
                return Err(Error::plan(format!(
                    "INSERT INTO '{table}': column '{c}' is listed twice"
                )));
            }
            if is_static(c) {
                return Err(Error::plan(format!(
                    "INSERT INTO '{table}': column '{c}' is listed and has a static PARTITION value"
                )));
            }
        }
        let width = self.logical(query).await?.schema().fields().len();
        if width != columns.len() {
            return Err(Error::plan(format!(
                "INSERT INTO '{table}': the query returns {width} columns for the {} listed ({})",
                columns.len(),
                columns.join(", ")
            )));
        }
        // SELECT <column or NULL>, … FROM (query) AS __weir_insert(__weir_c0, …)
        use sqlparser::ast::{
            Expr as SqlExpr, Ident, SelectItem, SetExpr, TableAliasColumnDef, TableFactor,
        };
        let template = "SELECT NULL FROM (SELECT 1) AS __weir_insert(c)";
        let mut parsed =
            sqlparser::parser::Parser::parse_sql(&crate::dialect::FlinkDialect, template)
                .map_err(|e| Error::internal(format!("INSERT column list template: {e}")))?;
        let Some(Statement::Query(mut outer)) = parsed.pop() else {
            return Err(Error::internal("INSERT column list template"));
        };
        let SetExpr::Select(select) = outer.body.as_mut() else {
            return Err(Error::internal("INSERT column list template"));
        };
        let null = select.projection[0].clone();
        let alias = |i: usize| format!("__weir_c{i}");
        select.projection = names
            .iter()
            .map(|n| {
                if let Some((_, value)) = partition.iter().find(|(p, _)| p == n) {
                    return SelectItem::UnnamedExpr(value.clone());
                }
                match columns.iter().position(|c| c == n) {
                    Some(i) => SelectItem::UnnamedExpr(SqlExpr::Identifier(Ident::new(alias(i)))),
                    None => null.clone(),
                }
            })
            .collect();
        let TableFactor::Derived {
            subquery,
            alias: Some(a),
            ..
        } = &mut select.from[0].relation
        else {
            return Err(Error::internal("INSERT column list template"));
        };
        **subquery = query.clone();
        a.columns = (0..columns.len())
            .map(|i| TableAliasColumnDef::from_name(alias(i)))
            .collect();
        Ok(*outer)
    }

    /// Plans `INSERT INTO table [(columns)] query` for streaming.
    pub async fn plan_insert(
        &self,
        table: &str,
        columns: &[String],
        partition: &[(String, sqlparser::ast::Expr)],
        query: &Query,
    ) -> Result<StreamPlan> {
        let def = self.sink_table(table)?;
        let query = self.insert_query(table, columns, partition, query).await?;
        let logical = self.optimized(&query).await?;
        let mut plan = StreamPlan {
            logical_plan: logical.display_indent().to_string(),
            ..Default::default()
        };
        let (node, mut steps) = self.translate(&logical, &mut plan.nodes)?;
        // Cast to the sink's physical columns, by position.
        let out = logical.schema().as_arrow().clone();
        let sink = &def.sink_schema;
        if out.fields().len() != sink.fields().len() {
            return Err(Error::plan(format!(
                "INSERT INTO '{table}': the query returns {} columns, the table has {} ({})",
                out.fields().len(),
                sink.fields().len(),
                sink.fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut exprs: Vec<PhysicalExprRef> = Vec::new();
        for (i, (from, to)) in out.fields().iter().zip(sink.fields()).enumerate() {
            let column: PhysicalExprRef = Arc::new(Column::new(from.name(), i));
            if from.data_type() == to.data_type() {
                exprs.push(column);
            } else if arrow::compute::can_cast_types(from.data_type(), to.data_type()) {
                exprs.push(cast(column, &out, to.data_type().clone())?);
            } else {
                return Err(Error::plan(format!(
                    "INSERT INTO '{table}': column {} ('{}') has type {}, which cannot be written to column '{}' of type {}",
                    i + 1,
                    from.name(),
                    crate::types::sql_name(from.data_type()),
                    to.name(),
                    crate::types::sql_name(to.data_type())
                )));
            }
        }
        let sink_schema = Arc::new(Schema::new(
            sink.fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        steps.push(CalcStep::Project {
            exprs,
            schema: sink_schema.clone(),
        });
        let input = materialize(node, steps, sink_schema, &mut plan.nodes)?;
        plan.nodes.push(PlanNode::Sink { input, table: def });
        Ok(plan)
    }
}

/// The computed columns of `table` as physical expressions over its physical columns
/// (producing its full schema), if it has any.
/// The declared table a scan reads (`None` for tables registered otherwise).
pub fn table_of_scan(scan: &datafusion::logical_expr::TableScan) -> Option<Arc<TableDef>> {
    let provider = datafusion::datasource::source_as_provider(&scan.source).ok()?;
    provider
        .downcast_ref::<StreamTableProvider>()
        .and_then(|p| p.table.clone())
}

pub fn computed_physical(table: &TableDef) -> Result<Option<Vec<PhysicalExprRef>>> {
    let Some(exprs) = &table.computed else {
        return Ok(None);
    };
    let state = SessionContext::new().state();
    let schema = DFSchema::try_from_qualified_schema(PHYSICAL, &table.physical_schema)?;
    // Unoptimized expressions: `arrow_cast` (a `CAST(… AS TIMESTAMP_LTZ(p))`) must be
    // simplified into a cast before it can run.
    let simplifier = datafusion::optimizer::simplify_expressions::ExprSimplifier::new(
        datafusion::logical_expr::simplify::SimplifyContext::builder()
            .with_schema(Arc::new(schema.clone()))
            .build(),
    );
    let exprs = exprs
        .iter()
        .map(|e| {
            let e = simplifier.simplify(e.clone()).map_err(plan_error)?;
            physical_expr(&state, &e, &schema)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(exprs))
}

/// `e`, over the columns of `schema`, as a physical expression.
fn physical_expr(
    state: &datafusion::execution::SessionState,
    e: &Expr,
    schema: &DFSchema,
) -> Result<PhysicalExprRef> {
    let subquery = {
        use datafusion::common::tree_node::TreeNode;
        e.exists(|e| Ok(matches!(e, Expr::ScalarSubquery(_))))
            .unwrap_or(false)
    };
    if subquery {
        return Err(Error::plan(
            "a scalar subquery in an expression ((SELECT …) used as a value) is not supported \
             in streaming mode yet; it runs in batch mode (SET 'execution.runtime-mode' = 'batch')",
        ));
    }
    state
        .create_physical_expr(e.clone(), schema)
        .map_err(plan_error)
}

/// The plain message of an error a row's values cause (a failed cast, a division by zero,
/// another compute error), without the wrappers that repeat it; `None` for other errors.
pub fn row_error_message(e: &datafusion::error::DataFusionError) -> Option<String> {
    let datafusion::error::DataFusionError::ArrowError(arrow_error, _) = e.find_root() else {
        return None;
    };
    match arrow_error.as_ref() {
        arrow::error::ArrowError::DivideByZero => Some("division by zero".into()),
        arrow::error::ArrowError::CastError(m) | arrow::error::ArrowError::ComputeError(m) => {
            Some(m.clone())
        }
        _ => None,
    }
}

/// For an error a row's values cause (a failed cast, a division by zero), a message that
/// names the expressions of `plan` that can cause it: DataFusion's says neither which
/// expression nor which column.
fn data_error_suspects(
    plan: &LogicalPlan,
    e: &datafusion::error::DataFusionError,
) -> Option<String> {
    use datafusion::common::tree_node::TreeNode;
    let datafusion::error::DataFusionError::ArrowError(arrow_error, _) = e.find_root() else {
        return None;
    };
    let marks: &[&str] = match arrow_error.as_ref() {
        arrow::error::ArrowError::DivideByZero => &[" / ", " % "],
        arrow::error::ArrowError::CastError(_) => &["CAST("],
        _ => return None,
    };
    let what = row_error_message(e)?;
    let mut found: Vec<String> = Vec::new();
    let _ = plan.apply(|node| {
        if matches!(node, LogicalPlan::Projection(_) | LogicalPlan::Filter(_)) {
            for expr in node.expressions() {
                let text = expr.to_string();
                if marks.iter().any(|m| text.contains(m)) && !found.contains(&text) {
                    found.push(text);
                }
            }
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    Some(if found.is_empty() {
        what
    } else {
        found.truncate(3);
        format!("{what} in {}", found.join(", "))
    })
}
