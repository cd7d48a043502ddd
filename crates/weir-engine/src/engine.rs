//! The engine: a session (catalog + configuration) that executes statements and starts
//! jobs. The CLI and the embedding library both drive this type.

use crate::compile::compile_into;
use std::collections::HashMap;
use std::sync::Arc;
use weir_common::{Config, Error, Result, RuntimeMode};
use weir_runtime::{JobGraph, JobHandle, JobOptions, RestoreFrom};
use weir_sql::{Located, Planner, StreamPlan, WeirStatement, parse_script};

/// What executing one statement produced.
#[derive(Debug)]
pub enum Outcome {
    /// A statement that changed the session (DDL, SET): a short message.
    Done(String),
    /// A result table (SHOW TABLES, DESCRIBE, SET;).
    Table {
        /// Column titles.
        header: Vec<String>,
        /// Rows of cells.
        rows: Vec<Vec<String>>,
    },
    /// Text to show as it is (EXPLAIN, SHOW CREATE TABLE).
    Explain(String),
    /// The planned parts of one job, not started yet: an INSERT INTO or a SELECT, or the
    /// INSERTs of a statement set.
    Job(Vec<StreamPlan>),
    /// Planned batch queries (`execution.runtime-mode` = `batch`), not run yet.
    Batch(Vec<crate::batch::BatchQuery>),
    /// `SHOW JOBS` / `STOP JOB …`: for whoever keeps the jobs (the shell).
    JobControl(WeirStatement),
}

/// Identifies a job by its statements (their optimized plans) and the definitions of the
/// tables they read and write: the same script gives the same fingerprint; another
/// option of a table (another path, another generator range) gives another. Secrets are
/// masked in the DDL text hashed here, so rotating a password keeps the job's identity.
fn fingerprint(plans: &[StreamPlan]) -> u64 {
    use std::hash::Hasher;
    let mut h = twox_hash::XxHash64::with_seed(0);
    for plan in plans {
        h.write(plan.logical_plan.to_string().as_bytes());
        for node in &plan.nodes {
            if let weir_sql::PlanNode::Scan { table, .. } | weir_sql::PlanNode::Sink { table, .. } =
                node
            {
                // The DDL under the table's stable name (the bare name in the default
                // catalog and database, as before catalogs existed).
                let mut ddl = (*table.ddl).clone();
                ddl.name = weir_sql::catalog::quote_identifier(&table.name);
                h.write(ddl.to_string().as_bytes());
            }
        }
    }
    h.finish()
}

/// A SQL session.
pub struct Engine {
    pub(crate) planner: Planner,
    config: Config,
    /// `CREATE FUNCTION` names → the registered function each is bound to.
    pub(crate) bound: std::collections::BTreeMap<String, String>,
    /// Names of the functions the program registered ([`Engine::register_udf`]).
    pub(crate) registered: std::collections::BTreeSet<String>,
    /// The files of the persistent catalogs, by catalog name.
    pub(crate) stores: std::collections::BTreeMap<String, crate::catalog_store::CatalogStore>,
    /// The REST API, dashboard and Prometheus endpoint, started with the first job when
    /// `rest.port` or `metrics.reporter.prom.port` is set.
    web: tokio::sync::OnceCell<Option<Arc<weir_web::WebServer>>>,
}

impl Default for Engine {
    fn default() -> Self {
        Self::new(Config::new())
    }
}

impl Engine {
    /// A session with `config` and an empty catalog.
    pub fn new(config: Config) -> Self {
        let mut planner = Planner::new();
        planner.set_batch_scan(Arc::new(crate::batch::ConnectorBatchScan));
        planner.session().register_udf(crate::udfs::count_char());
        if let Err(e) = planner.set_local_time_zone(config.local_time_zone()) {
            tracing::warn!("{e}; using the machine's zone");
        }
        Self {
            planner,
            config,
            bound: Default::default(),
            registered: Default::default(),
            stores: Default::default(),
            web: Default::default(),
        }
    }

    /// Runs a batch query (see [`crate::batch`]).
    pub async fn run_batch(
        &self,
        query: &crate::batch::BatchQuery,
    ) -> Result<crate::batch::BatchResult> {
        crate::batch::run(&self.planner, query).await
    }

    /// Batch queries run on a cluster from now on: in the DataFusion session `upgrade`
    /// makes of the planner's (see `weir_ballista`).
    pub fn set_batch_cluster(&mut self, upgrade: weir_sql::SessionUpgrade) {
        self.planner.set_batch_cluster(upgrade);
    }

    /// The session's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The session's configuration, to change (`SET`).
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// The planner, with the catalog of tables and views.
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// Registers a scalar function for SQL (e.g. a UDF).
    pub fn register_udf(&mut self, udf: datafusion::logical_expr::ScalarUDF) {
        self.registered.insert(udf.name().to_string());
        self.planner.session().register_udf(udf);
    }

    /// Parses `sql` into statements.
    pub fn parse(&self, sql: &str) -> Result<Vec<Located>> {
        parse_script(sql)
    }

    /// Executes one statement. Errors name the statement's position.
    pub async fn execute(&mut self, stmt: &Located) -> Result<Outcome> {
        // The configuration may have been changed through `config_mut`.
        self.planner
            .set_batch_parallelism(self.config.parallelism());
        let result = match self
            .planner
            .set_local_time_zone(self.config.local_time_zone())
            .and_then(|()| {
                self.planner
                    .set_batch_memory(self.config.managed_memory(), self.config.tmp_dir())
            }) {
            Ok(()) => self.execute_statement(&stmt.statement).await,
            Err(e) => Err(e),
        };
        result.map_err(|e| match e {
            Error::Plan(m) => Error::sql(m, Some(stmt.location)),
            Error::Config(m) => Error::Config(format!("{m} (statement at {})", stmt.location)),
            other => other,
        })
    }

    async fn execute_statement(&mut self, stmt: &WeirStatement) -> Result<Outcome> {
        match stmt {
            WeirStatement::CreateTable(ct) => {
                let ct = &self.planner.resolve_like(ct)?;
                // Validate options before the table exists.
                let mut options = ct.options.clone();
                options.remove("scan.parallelism");
                options.remove("sink.parallelism");
                weir_connectors::validate_options(
                    &weir_common::ConnectorOptions::new(ct.name.clone(), options),
                    ct.physical_schema(),
                    &ct.primary_key,
                )?;
                Ok(match self.planner.create_table(ct).await? {
                    Some(def) => {
                        self.persist_table(&def, ct.temporary).await?;
                        Outcome::Done(format!("table '{}' created", ct.name))
                    }
                    None => Outcome::Done(format!("table '{}' already exists", ct.name)),
                })
            }
            WeirStatement::CreateTableAs { table, query } => {
                // The query is planned first: a bad one creates no table.
                let logical = self.planner.optimized(query).await?;
                let mut ct = (**table).clone();
                for (i, f) in logical.schema().as_arrow().fields().iter().enumerate() {
                    let name = f.name();
                    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        return Err(Error::plan(format!(
                            "CREATE TABLE '{}' AS SELECT: name column {} ('{name}') with AS",
                            ct.name,
                            i + 1
                        )));
                    }
                    ct.columns.push(weir_sql::parser::ColumnOrComputed::Column(
                        weir_sql::parser::ColumnSpec {
                            name: name.clone(),
                            data_type: weir_sql::types::storable(f.data_type()),
                            nullable: true,
                            metadata: None,
                        },
                    ));
                }
                let name = ct.name.clone();
                Box::pin(self.execute_statement(&WeirStatement::CreateTable(Box::new(ct)))).await?;
                let insert = WeirStatement::Insert {
                    table: name.clone(),
                    columns: Vec::new(),
                    query: query.clone(),
                    overwrite: false,
                    partition: Vec::new(),
                };
                let outcome = Box::pin(self.execute_statement(&insert)).await;
                if outcome.is_err() {
                    // Leave the catalog as it was.
                    if let Ok(Some(path)) = self.planner.drop_table(&name, true) {
                        let _ = self.unpersist(&path).await;
                    }
                }
                outcome
            }
            WeirStatement::CreateView {
                name,
                temporary,
                or_replace,
                query,
                sql,
            } => {
                let existed = self.planner.catalogs.view(name).is_some();
                let path = self
                    .planner
                    .create_view(name, *or_replace, query, sql)
                    .await?;
                self.persist_view(&path, *temporary, existed).await?;
                Ok(Outcome::Done(format!("view '{name}' created")))
            }
            WeirStatement::DropTable { name, if_exists } => {
                if let Some(path) = self.planner.drop_table(name, *if_exists)? {
                    self.unpersist(&path).await?;
                }
                Ok(Outcome::Done(format!("table '{name}' dropped")))
            }
            WeirStatement::DropView { name, if_exists } => {
                if let Some(path) = self.planner.drop_view(name, *if_exists)? {
                    self.unpersist(&path).await?;
                }
                Ok(Outcome::Done(format!("view '{name}' dropped")))
            }
            WeirStatement::Catalog(statement) => self.execute_catalog(statement).await,
            WeirStatement::CreateFunction {
                name,
                identifier,
                if_not_exists,
            } => self.create_function(name, identifier, *if_not_exists),
            WeirStatement::DropFunction { name, if_exists } => self.drop_function(name, *if_exists),
            WeirStatement::Set { key, value } => {
                let mut config = self.config.clone();
                config.set(key, value)?;
                self.planner.set_local_time_zone(config.local_time_zone())?;
                self.config = config;
                let shown = weir_common::redact::display_value(key, value);
                Ok(Outcome::Done(format!("'{key}' = '{shown}'")))
            }
            WeirStatement::Reset { key } => {
                match key {
                    Some(k) => self.config.reset(k)?,
                    None => self.config = Config::new(),
                }
                self.planner
                    .set_local_time_zone(self.config.local_time_zone())?;
                Ok(Outcome::Done("configuration reset".into()))
            }
            // Every key with the value in force: set in this session, or the default.
            WeirStatement::ShowSet => Ok(Outcome::Table {
                header: vec!["key".into(), "value".into(), "origin".into()],
                rows: self
                    .config
                    .effective_entries()
                    .map(|(k, v, set)| {
                        let shown = match v {
                            Some(v) => weir_common::redact::display_value(k, v).to_string(),
                            None => "(unset)".into(),
                        };
                        let origin = if set { "session" } else { "default" };
                        vec![k.to_string(), shown, origin.into()]
                    })
                    .collect(),
            }),
            WeirStatement::ShowFunctions => {
                let state = self.planner.session().state();
                let mut names: Vec<String> = state
                    .scalar_functions()
                    .keys()
                    .chain(state.aggregate_functions().keys())
                    .chain(state.window_functions().keys())
                    .cloned()
                    .chain(
                        weir_sql::functions::FLINK_FUNCTIONS
                            .iter()
                            .chain(weir_sql::flink_functions::NAMES)
                            .map(|f| f.to_string()),
                    )
                    .collect();
                names.sort();
                names.dedup();
                Ok(Outcome::Table {
                    header: vec!["function name".into()],
                    rows: names.into_iter().map(|n| vec![n]).collect(),
                })
            }
            WeirStatement::ShowCreateTable { name } => self.show_create_table(name),
            WeirStatement::Describe { name } => self.describe(name, None),
            WeirStatement::Insert {
                table,
                columns,
                query,
                overwrite,
                partition,
            } if self.batch_mode() => {
                let sink = self.planner.sink_table(table)?;
                if *overwrite {
                    weir_connectors::check_overwrite(&sink.options)?;
                }
                let query = self
                    .planner
                    .insert_query(table, columns, partition, query)
                    .await?;
                let logical = self.planner.optimized(&query).await?;
                Ok(Outcome::Batch(vec![crate::batch::BatchQuery {
                    logical,
                    sink: Some(sink),
                    overwrite: *overwrite,
                }]))
            }
            WeirStatement::Select(query) if self.batch_mode() => {
                let logical = self.planner.optimized(query).await?;
                Ok(Outcome::Batch(vec![crate::batch::BatchQuery {
                    logical,
                    sink: None,
                    overwrite: false,
                }]))
            }
            WeirStatement::Insert {
                table,
                columns,
                query,
                overwrite,
                partition,
            } => {
                if *overwrite {
                    return Err(Error::plan(
                        "INSERT OVERWRITE is not supported in streaming mode (as in Flink); run \
                         it with SET 'execution.runtime-mode' = 'batch'",
                    ));
                }
                let plan = self
                    .planner
                    .plan_insert(table, columns, partition, query)
                    .await?;
                let sink = plan.nodes.len() - 1;
                if let Some(weir_sql::PlanNode::Sink { table, .. }) = plan.nodes.last() {
                    weir_connectors::check_changelog(&table.options, plan.updates(sink))?;
                }
                Ok(Outcome::Job(vec![plan]))
            }
            WeirStatement::Select(query) => {
                Ok(Outcome::Job(vec![self.planner.plan_select(query).await?]))
            }
            WeirStatement::StatementSet(inserts) => {
                let (mut jobs, mut batches) = (Vec::new(), Vec::new());
                for insert in inserts {
                    match Box::pin(self.execute(insert)).await? {
                        Outcome::Job(plans) => jobs.extend(plans),
                        Outcome::Batch(queries) => batches.extend(queries),
                        _ => return Err(Error::internal("a statement set holds only INSERTs")),
                    }
                }
                Ok(if batches.is_empty() {
                    Outcome::Job(jobs)
                } else {
                    Outcome::Batch(batches)
                })
            }
            WeirStatement::ShowJobs | WeirStatement::StopJob { .. } => {
                Ok(Outcome::JobControl(stmt.clone()))
            }
            WeirStatement::Explain(inner) => self.explain(inner).await,
        }
    }

    /// `EXPLAIN`: the optimized logical plan and what runs it, the job graph in streaming
    /// mode, DataFusion's physical plan in batch mode.
    async fn explain(&mut self, inner: &WeirStatement) -> Result<Outcome> {
        const WHAT: &str = "EXPLAIN takes a SELECT, an INSERT INTO or a STATEMENT SET";
        let explainable = matches!(
            inner,
            WeirStatement::Insert { .. }
                | WeirStatement::Select(_)
                | WeirStatement::StatementSet(_)
        );
        if !explainable {
            return Err(Error::plan(WHAT));
        }
        if self.batch_mode() {
            // What batch mode runs: DataFusion's physical plan of each query (planned as
            // the statement would be, nothing run).
            let Outcome::Batch(queries) = Box::pin(self.execute_statement(inner)).await? else {
                return Err(Error::internal("a batch statement plans batch queries"));
            };
            let (mut logical, mut physical) = (Vec::new(), Vec::new());
            for query in queries {
                logical.push(query.logical.to_string());
                physical.push(self.planner.explain_batch(query.logical).await?);
            }
            return Ok(Outcome::Explain(format!(
                "== Optimized Logical Plan ==\n{}\n\n== Physical Plan ==\n{}",
                logical.join("\n\n"),
                physical.join("\n")
            )));
        }
        let mut plans = Vec::new();
        let statements = match inner {
            WeirStatement::StatementSet(inserts) => inserts.iter().map(|l| &l.statement).collect(),
            other => vec![other],
        };
        for statement in statements {
            plans.push(match statement {
                WeirStatement::Insert {
                    table,
                    columns,
                    query,
                    partition,
                    ..
                } => {
                    self.planner
                        .plan_insert(table, columns, partition, query)
                        .await?
                }
                WeirStatement::Select(query) => self.planner.plan_select(query).await?,
                _ => return Err(Error::plan(WHAT)),
            });
        }
        let graph = self.build_job(&plans).await?;
        let logical: Vec<String> = plans.iter().map(|p| p.logical_plan.to_string()).collect();
        Ok(Outcome::Explain(format!(
            "== Optimized Logical Plan ==\n{}\n\n== Job Graph ==\n{}",
            logical.join("\n\n"),
            graph.chained().explain()
        )))
    }

    /// Registers Arrow data as a bounded table `name` (all batches share `schema`).
    pub async fn register_batches(
        &mut self,
        name: &str,
        schema: arrow::datatypes::SchemaRef,
        batches: Vec<arrow::array::RecordBatch>,
    ) -> Result<()> {
        let id = weir_connectors::memory::register(batches);
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                weir_sql::parser::ColumnOrComputed::Column(weir_sql::parser::ColumnSpec {
                    name: f.name().clone(),
                    data_type: f.data_type().clone(),
                    nullable: f.is_nullable(),
                    metadata: None,
                })
            })
            .collect();
        let table = weir_sql::parser::CreateTable {
            name: name.to_string(),
            if_not_exists: false,
            columns,
            watermark: None,
            primary_key: Vec::new(),
            partitioned_by: Vec::new(),
            options: [
                ("connector".to_string(), "memory".to_string()),
                ("memory.id".to_string(), id),
            ]
            .into_iter()
            .collect(),
            like: None,
            location: weir_common::SqlLocation { line: 1, column: 1 },
            temporary: true,
        };
        self.planner.create_table(&table).await?;
        Ok(())
    }

    /// Registers everything an Arrow `RecordBatchReader` yields as a bounded table.
    pub async fn register_reader(
        &mut self,
        name: &str,
        reader: impl arrow::record_batch::RecordBatchReader,
    ) -> Result<()> {
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>()?;
        self.register_batches(name, schema, batches).await
    }

    /// Registers everything a `Stream` of batches yields as a bounded table.
    pub async fn register_stream(
        &mut self,
        name: &str,
        schema: arrow::datatypes::SchemaRef,
        stream: impl futures::Stream<Item = Result<arrow::array::RecordBatch>>,
    ) -> Result<()> {
        use futures::TryStreamExt;
        let batches: Vec<_> = stream.try_collect().await?;
        self.register_batches(name, schema, batches).await
    }

    /// Runs a bounded query with DataFusion; its rows arrive as a stream of batches.
    pub async fn query_stream(
        &self,
        sql: &str,
    ) -> Result<datafusion::physical_plan::SendableRecordBatchStream> {
        let mut statements = self.parse(sql)?;
        let Some(WeirStatement::Select(query)) = statements.pop().map(|s| s.statement) else {
            return Err(Error::plan("query_stream() takes one SELECT"));
        };
        let plan = self.plan_batch_select(&query).await?;
        self.planner.execute_batch_stream(plan.logical).await
    }

    /// Runs a bounded query with DataFusion and returns its rows (the library's `SELECT`).
    pub async fn query(&self, sql: &str) -> Result<Vec<arrow::array::RecordBatch>> {
        let mut statements = self.parse(sql)?;
        let Some(WeirStatement::Select(query)) = statements.pop().map(|s| s.statement) else {
            return Err(Error::plan("query() takes one SELECT"));
        };
        match self
            .run_batch(&self.plan_batch_select(&query).await?)
            .await?
        {
            crate::batch::BatchResult::Rows(b) => Ok(b),
            crate::batch::BatchResult::Written(_) => Err(Error::internal("a SELECT wrote rows")),
        }
    }

    /// Executes every statement of `sql` and starts its `INSERT`/`SELECT` statements as one
    /// streaming job (`None` when the script has none).
    pub async fn submit(&mut self, sql: &str) -> Result<Option<JobHandle>> {
        let mut plans = Vec::new();
        for stmt in self.parse(sql)? {
            if let Outcome::Job(parts) = self.execute(&stmt).await? {
                plans.extend(parts);
            }
        }
        if plans.is_empty() {
            return Ok(None);
        }
        let graph = self.build_job(&plans).await?;
        Ok(Some(self.start(graph, None).await?))
    }

    /// True when every table `query` reads is bounded.
    pub async fn query_is_bounded(&self, query: &sqlparser::ast::Query) -> Result<bool> {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let logical = self.planner.optimized(query).await?;
        let mut tables = Vec::new();
        logical.apply(|node| {
            if let datafusion::logical_expr::LogicalPlan::TableScan(scan) = node {
                tables.extend(weir_sql::planner::table_of_scan(scan));
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        for t in tables {
            {
                let source = weir_connectors::create_source(
                    &t.options,
                    t.physical_schema.clone(),
                    &t.metadata_keys(),
                    &t.primary_key,
                )
                .await?;
                if !source.is_bounded() {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// A `SELECT` planned for batch execution (see [`Engine::run_batch`]).
    pub async fn plan_batch_select(
        &self,
        query: &sqlparser::ast::Query,
    ) -> Result<crate::batch::BatchQuery> {
        Ok(crate::batch::BatchQuery {
            overwrite: false,
            logical: self.planner.optimized(query).await?,
            sink: None,
        })
    }

    fn batch_mode(&self) -> bool {
        self.config.runtime_mode() == RuntimeMode::Batch
    }

    /// Compiles planned statements into one job graph (one job per script, like a Flink
    /// statement set), creating and validating sources and sinks.
    pub async fn build_job(&self, plans: &[StreamPlan]) -> Result<JobGraph> {
        self.build_graph(plans, None).await
    }

    /// Builds the job of a `SELECT` whose rows the caller reads (with their changelog
    /// kinds) from the returned channel, instead of having them printed (the shell).
    pub async fn build_collecting_job(
        &self,
        plans: &[StreamPlan],
    ) -> Result<(
        JobGraph,
        tokio::sync::mpsc::Receiver<arrow::record_batch::RecordBatch>,
    )> {
        let (sink, rows) = weir_connectors::collect::collector();
        let sink: Arc<dyn weir_runtime::OperatorFactory> = Arc::new(sink);
        Ok((self.build_graph(plans, Some(&sink)).await?, rows))
    }

    async fn build_graph(
        &self,
        plans: &[StreamPlan],
        collect: Option<&Arc<dyn weir_runtime::OperatorFactory>>,
    ) -> Result<JobGraph> {
        let mut graph = JobGraph::default();
        let mut scans = self.config.reuse_sources().then(HashMap::new);
        let state = crate::compile::StateOptions {
            ttl: self.config.state_ttl(),
            memory: Some(weir_state::spill::StateMemory::new(
                self.config.managed_memory(),
                self.config
                    .tmp_dir()
                    .map_or_else(std::env::temp_dir, std::path::PathBuf::from),
            )),
        };
        for (i, plan) in plans.iter().enumerate() {
            compile_into(
                &mut graph,
                plan,
                i,
                self.config.parallelism(),
                &state,
                scans.as_mut(),
                collect,
            )
            .await?;
        }
        graph.fingerprint = fingerprint(plans);
        graph.state_memory = state.memory.clone();
        Ok(graph)
    }

    /// Starts a job graph with the session's configuration.
    pub async fn start(&self, graph: JobGraph, restore: Option<RestoreFrom>) -> Result<JobHandle> {
        self.start_on(graph, restore, None).await
    }

    /// Starts a job graph with the session's configuration, its tasks on `cluster`'s
    /// workers when one is given (see `weir_runtime::remote`).
    pub async fn start_on(
        &self,
        graph: JobGraph,
        restore: Option<RestoreFrom>,
        cluster: Option<Arc<dyn weir_runtime::remote::Cluster>>,
    ) -> Result<JobHandle> {
        let mut opts = JobOptions::from_config(&self.config);
        opts.restore = restore.or_else(|| self.config.savepoint_path().map(RestoreFrom::Path));
        let name = self.config.pipeline_name().unwrap_or_else(|| {
            graph
                .vertices
                .last()
                .map(|v| v.name.clone())
                .unwrap_or_else(|| "job".into())
        });
        let web = self
            .web
            .get_or_try_init(|| async {
                Ok::<_, Error>(
                    weir_web::WebServer::start(&self.config)
                        .await?
                        .map(Arc::new),
                )
            })
            .await?;
        let job = match cluster {
            Some(cluster) => weir_runtime::start_on_cluster(graph, opts, cluster).await?,
            None => weir_runtime::start(graph, opts).await?,
        };
        if let Some(web) = web {
            web.jobs.add(
                job.job_id.to_string(),
                name,
                job.metrics.clone(),
                job.controller(),
                self.config.savepoint_dir(),
            );
        }
        Ok(job)
    }

    /// Registers this session's jobs with `web` (a coordinator's server, which outlives
    /// the session) instead of a server of its own; before its first job starts.
    pub fn share_web_server(&self, web: Arc<weir_web::WebServer>) -> Result<()> {
        self.web
            .set(Some(web))
            .map_err(|_| Error::internal("the session already has its web server"))
    }

    /// Where the REST API and dashboard listen, once a job started them (`rest.port`).
    pub fn rest_address(&self) -> Option<std::net::SocketAddr> {
        self.web.get().and_then(|w| w.as_ref()).and_then(|w| w.rest)
    }

    /// Where the Prometheus endpoint listens, once a job started it
    /// (`metrics.reporter.prom.port`).
    pub fn prometheus_address(&self) -> Option<std::net::SocketAddr> {
        self.web
            .get()
            .and_then(|w| w.as_ref())
            .and_then(|w| w.prometheus)
    }
}
