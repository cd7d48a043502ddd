//! Weir's tables, scans and functions on Ballista's wire.
//!
//! - A table (a `TableScan`'s provider) is its DDL: the scheduler plans it again as
//!   `CREATE TABLE` plans it, and scans it through the connectors.
//! - A scan ([`TaskScanExec`], a [`SourceScanExec`] whose task chooses its partitions)
//!   is its table's DDL, the restrictions and projection it was planned with and its
//!   partition count; an executor opens the connector when a task first reads the scan,
//!   and reads the shares of the splits its task was given.
//! - Weir's functions go by name. Ballista's processes that Weir starts know them all,
//!   including those the planner calls without registering them (Flink's decimal
//!   division, `CAST(… AS STRING)`, local time).
//!
//! Everything else is Ballista's own codec's. A Weir payload starts with [`MAGIC`],
//! which no protobuf message of Ballista's starts with (its first byte would be a field
//! with wire type 7, which does not exist).

use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, TableReference};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, Extension, LogicalPlan, ScalarUDF, WindowUDF};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use weir_engine::batch::ConnectorBatchScan;
use weir_sql::planner::StreamTableProvider;
use weir_sql::source_scan::{Restriction, SourceScanExec, TableReader};
use weir_sql::{BatchScan, TableDef};

use crate::task_scan::TaskScanExec;

type DfResult<T> = datafusion::error::Result<T>;

/// The first bytes of every payload Weir's codecs write.
pub const MAGIC: &[u8] = b"\x07WEIR1";

/// A table of a logical plan.
#[derive(Serialize, Deserialize)]
struct TablePayload {
    ddl: String,
}

/// A scan of a physical plan.
#[derive(Serialize, Deserialize)]
struct ScanPayload {
    ddl: String,
    restrictions: Vec<Restriction>,
    projection: Option<Vec<usize>>,
    partitions: usize,
}

fn encode<T: Serialize>(payload: &T, buf: &mut Vec<u8>) -> DfResult<()> {
    buf.extend_from_slice(MAGIC);
    serde_json::to_writer(buf, payload).map_err(|e| DataFusionError::External(Box::new(e)))
}

fn decode<'a, T: Deserialize<'a>>(json: &'a [u8]) -> DfResult<T> {
    serde_json::from_slice(json).map_err(|e| DataFusionError::External(Box::new(e)))
}

fn external(e: weir_common::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Every function Weir's SQL may call, by name: the planner's registry, the functions
/// the engine adds, and those the planner calls without registering.
static FUNCTIONS: LazyLock<Functions> = LazyLock::new(|| {
    let state = weir_engine::Engine::default().planner().session().state();
    let mut scalar = state.scalar_functions().clone();
    for f in [
        weir_sql::flink_decimal::DIVIDE.clone(),
        weir_sql::flink_cast::TO_STRING.clone(),
        weir_sql::local_time_zone::LOCAL_TIME.clone(),
    ] {
        scalar.insert(f.name().to_string(), f);
    }
    Functions {
        scalar,
        aggregate: state.aggregate_functions().clone(),
        window: state.window_functions().clone(),
    }
});

struct Functions {
    scalar: HashMap<String, Arc<ScalarUDF>>,
    aggregate: HashMap<String, Arc<AggregateUDF>>,
    window: HashMap<String, Arc<WindowUDF>>,
}

/// Functions the program registered for this process's Ballista scheduler and executor
/// ([`crate::register_udf`]).
static REGISTERED: LazyLock<std::sync::RwLock<HashMap<String, Arc<ScalarUDF>>>> =
    LazyLock::new(Default::default);

/// Makes `udf` known to this process's Ballista processes (see [`crate::register_udf`]).
pub(crate) fn register(udf: ScalarUDF) {
    REGISTERED
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(udf.name().to_string(), Arc::new(udf));
}

/// Weir's scalar functions and those the program registered.
fn scalar_functions() -> HashMap<String, Arc<ScalarUDF>> {
    let mut all = FUNCTIONS.scalar.clone();
    all.extend(
        REGISTERED
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, f)| (name.clone(), f.clone())),
    );
    all
}

/// The registry of Weir's functions, for Ballista's executors.
pub fn function_registry() -> ballista_core::registry::BallistaFunctionRegistry {
    let mut registry = ballista_core::registry::BallistaFunctionRegistry::default();
    registry.scalar_functions.extend(scalar_functions());
    registry
        .aggregate_functions
        .extend(FUNCTIONS.aggregate.clone());
    registry.window_functions.extend(FUNCTIONS.window.clone());
    registry
}

/// A DataFusion session with Weir's functions and batch-mode settings over `config`:
/// how a Ballista scheduler plans a Weir client's queries.
pub fn session_state(
    config: datafusion::prelude::SessionConfig,
) -> DfResult<datafusion::execution::SessionState> {
    use datafusion::execution::session_state::SessionStateBuilder;
    let base = weir_engine::Engine::default().planner().session().state();
    let rules = ballista_core::optimizer::with_ballista_optimizer_rules(base.optimizers());
    let mut state = SessionStateBuilder::new_from_existing(base)
        .with_config(config)
        .with_optimizer_rules(rules)
        .with_physical_optimizer_rule(Arc::new(crate::task_scan::ScanPerTask))
        .build();
    for f in scalar_functions().into_values() {
        datafusion::execution::FunctionRegistry::register_udf(&mut state, f)?;
    }
    Ok(state)
}

fn scalar_udf(name: &str) -> DfResult<Arc<ScalarUDF>> {
    let registered = || {
        REGISTERED
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    };
    FUNCTIONS
        .scalar
        .get(name)
        .cloned()
        .or_else(registered)
        .ok_or_else(|| {
            DataFusionError::Plan(format!(
                "function '{name}' is not known to this Ballista process: a function registered \
             through the library (Engine::register_udf) runs on a cluster whose scheduler \
             and executors the program runs itself, with the function registered there \
             too (weir::ballista::register_udf, then process::run_scheduler and \
             process::run_executor)"
            ))
        })
}

/// Plans `ddl` into a table definition. The planner's futures are not `Send`, and codecs
/// are called where nothing may block the runtime: this runs on a thread of its own.
fn table_of_ddl(ddl: &str) -> DfResult<Arc<TableDef>> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let engine = weir_engine::Engine::default();
            runtime
                .block_on(engine.planner().table_of_ddl(ddl))
                .map_err(external)
        })
        .join()
        .map_err(|_| DataFusionError::Internal("planning a table's DDL panicked".into()))?
    })
}

/// Ballista's logical codec, with Weir's tables.
#[derive(Debug, Default)]
pub struct WeirLogicalCodec {
    ballista: BallistaLogicalExtensionCodec,
}

impl LogicalExtensionCodec for WeirLogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> DfResult<Extension> {
        self.ballista.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> DfResult<()> {
        self.ballista.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        ctx: &TaskContext,
    ) -> DfResult<Arc<dyn TableProvider>> {
        let Some(json) = buf.strip_prefix(MAGIC) else {
            return self
                .ballista
                .try_decode_table_provider(buf, table_ref, schema, ctx);
        };
        let payload: TablePayload = decode(json)?;
        let table = table_of_ddl(&payload.ddl)?;
        Ok(Arc::new(StreamTableProvider {
            schema: table.schema.clone(),
            table: Some(table),
            batch: Some(Arc::new(ConnectorBatchScan)),
        }))
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> DfResult<()> {
        let Some(provider) = node.downcast_ref::<StreamTableProvider>() else {
            return self
                .ballista
                .try_encode_table_provider(table_ref, node, buf);
        };
        let Some(table) = &provider.table else {
            return Err(DataFusionError::Internal(format!(
                "table '{table_ref}' is one of the planner's own and is not sent to a cluster"
            )));
        };
        encode(
            &TablePayload {
                ddl: table.ddl.unmasked_sql(),
            },
            buf,
        )
    }

    fn try_decode_file_format(
        &self,
        buf: &[u8],
        ctx: &TaskContext,
    ) -> DfResult<Arc<dyn datafusion::datasource::file_format::FileFormatFactory>> {
        self.ballista.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(
        &self,
        buf: &mut Vec<u8>,
        node: Arc<dyn datafusion::datasource::file_format::FileFormatFactory>,
    ) -> DfResult<()> {
        self.ballista.try_encode_file_format(buf, node)
    }

    fn try_decode_udf(&self, name: &str, _buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        scalar_udf(name)
    }
}

/// Ballista's physical codec, with Weir's scans.
#[derive(Debug, Default)]
pub struct WeirPhysicalCodec {
    ballista: BallistaPhysicalExtensionCodec,
}

impl PhysicalExtensionCodec for WeirPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let Some(json) = buf.strip_prefix(MAGIC) else {
            return self.ballista.try_decode(buf, inputs, ctx, converter);
        };
        let payload: ScanPayload = decode(json)?;
        let [numbers] = inputs else {
            return Err(DataFusionError::Internal(format!(
                "a Weir scan has one input, its partition numbers, not {}",
                inputs.len()
            )));
        };
        let table = table_of_ddl(&payload.ddl)?;
        let reader = Arc::new(LazyReader {
            table: table.clone(),
            restrictions: payload.restrictions.clone(),
            projection: payload.projection.clone(),
        });
        let scan = SourceScanExec::try_new(
            table,
            reader,
            payload.restrictions,
            payload.projection.as_ref(),
            payload.partitions,
        )
        .map_err(external)?;
        Ok(Arc::new(TaskScanExec::new(Arc::new(scan), numbers.clone())))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        if node.is::<SourceScanExec>() {
            // Every task would read all of it (see `task_scan`).
            return Err(DataFusionError::Internal(
                "a Weir scan reaches a Ballista executor only as a TaskScanExec".into(),
            ));
        }
        if let Some(scan) = node.downcast_ref::<TaskScanExec>() {
            let scan = scan.scan();
            return encode(
                &ScanPayload {
                    ddl: scan.table().ddl.unmasked_sql(),
                    restrictions: scan.restrictions().to_vec(),
                    projection: scan.projection().cloned(),
                    partitions: scan.partitions(),
                },
                buf,
            );
        }
        self.ballista
            .try_encode(node.clone(), buf, converter)
            .map_err(|e| match node.name() {
                // Weir's own batch operators (MATCH_RECOGNIZE) have no codec yet.
                "MatchExec" => DataFusionError::NotImplemented(
                    "MATCH_RECOGNIZE does not run on a Ballista cluster yet; run it in one \
                     process (without --cluster)"
                        .into(),
                ),
                _ => e,
            })
    }

    fn try_decode_udf(&self, name: &str, _buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        scalar_udf(name)
    }
}

/// A scan's table on an executor: its connector is opened when a task first reads it.
#[derive(Debug)]
struct LazyReader {
    table: Arc<TableDef>,
    restrictions: Vec<Restriction>,
    projection: Option<Vec<usize>>,
}

impl TableReader for LazyReader {
    fn scan_partition(
        &self,
        partition: usize,
        partitions: usize,
    ) -> weir_common::Result<SendableRecordBatchStream> {
        let (table, restrictions, projection) = (
            self.table.clone(),
            self.restrictions.clone(),
            self.projection.clone(),
        );
        let schema = table.schema.clone();
        tracing::debug!(table = %table.name, partition, partitions, "reading a share of a table");
        let opened = async move {
            let reader = ConnectorBatchScan
                .open(table, &restrictions, projection.as_deref())
                .await
                .map_err(external)?;
            reader
                .scan_partition(partition, partitions)
                .map_err(external)
        };
        let rows = futures::stream::once(opened).try_flatten();
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, rows),
        ))
    }

    fn estimated_rows(&self) -> Option<u64> {
        None
    }
}
