//! Turns the planner's [`StreamPlan`]s into one runtime [`JobGraph`], creating the
//! connectors' sources and sinks. Vertex uids are derived from the statement and node
//! positions, so the same script always yields the same uids and restores its state.

use crate::operators::{
    CalcOperatorFactory, ChangelogNormalizeFactory, FinalTopNFactory, GroupAggregateFactory,
    JoinOperatorFactory, LimitFactory, LookupJoinFactory, MatchRecognizeFactory,
    OverAggregateFactory, SessionAggregateFactory, TemporalJoinFactory, TemporalSortFactory,
    TopNFactory, UnionOperatorFactory, WatermarkAssignerFactory, WindowAggregateFactory,
};
use std::sync::Arc;
use weir_common::{ConnectorOptions, Result};
use weir_runtime::{JobGraph, OperatorFactory, Partitioning, Vertex};
use weir_sql::{CalcStep, PlanNode, StreamPlan};

fn calc_label(steps: &[CalcStep]) -> String {
    let parts: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
    format!("Calc({})", parts.join("; "))
}

/// Adds a vertex running `factory` at the job's parallelism, fed by `from` hash-partitioned
/// on `keys`.
fn keyed_vertex(
    graph: &mut JobGraph,
    uid: String,
    factory: Arc<dyn OperatorFactory>,
    from: usize,
    keys: &[usize],
    parallelism: usize,
) -> usize {
    let v = graph.add_vertex(Vertex {
        uid,
        name: factory.name(),
        parallelism,
        source: None,
        operators: vec![factory],
    });
    graph.connect(from, v, Partitioning::Hash(keys.to_vec()), 0);
    v
}

/// Adds a vertex running `factory` over two inputs (ports 0 and 1), each hash-partitioned
/// on its keys.
fn two_input_vertex(
    graph: &mut JobGraph,
    uid: String,
    factory: Arc<dyn OperatorFactory>,
    inputs: [(usize, &[usize]); 2],
    parallelism: usize,
) -> usize {
    let v = graph.add_vertex(Vertex {
        uid,
        name: factory.name(),
        parallelism,
        source: None,
        operators: vec![factory],
    });
    for (port, (from, keys)) in inputs.into_iter().enumerate() {
        graph.connect(from, v, Partitioning::Hash(keys.to_vec()), port);
    }
    v
}

/// How a job's keyed state is kept.
#[derive(Default)]
pub struct StateOptions {
    /// `table.exec.state.ttl`.
    pub ttl: Option<std::time::Duration>,
    /// The memory budget of stored rows that can move to disk (see
    /// [`weir_state::spill`]); `None`: no budget.
    pub memory: Option<Arc<weir_state::spill::StateMemory>>,
}

/// Source vertices already in the graph, by table (its definition's address: a table
/// dropped and created again is another table) and whether they assign watermarks.
pub type ScanVertices = std::collections::HashMap<(usize, bool), usize>;

/// Adds `plan` (statement number `statement`) to `graph`. With `scans`
/// (`table.optimizer.reuse-source-enabled`), a table another scan of the job already reads
/// is not read again: its vertex feeds this plan too.
pub async fn compile_into(
    graph: &mut JobGraph,
    plan: &StreamPlan,
    statement: usize,
    default_parallelism: usize,
    state: &StateOptions,
    mut scans: Option<&mut ScanVertices>,
    collect: Option<&Arc<dyn OperatorFactory>>,
) -> Result<()> {
    let state_ttl = state.ttl;
    let mut vertex_of: Vec<usize> = Vec::with_capacity(plan.nodes.len());
    let edge = |graph: &JobGraph, from: usize, to_parallelism: usize| {
        if graph.vertices[from].parallelism == to_parallelism {
            Partitioning::Forward
        } else {
            Partitioning::Rebalance
        }
    };
    // A vertex of one subtask running `factory` over the rows of vertex `from` (in their
    // order: a forward edge from one subtask).
    let single = |graph: &mut JobGraph, uid: String, factory: Arc<dyn OperatorFactory>, from| {
        let v = graph.add_vertex(Vertex {
            uid,
            name: factory.name(),
            parallelism: 1,
            source: None,
            operators: vec![factory],
        });
        let p = edge(graph, from, 1);
        graph.connect(from, v, p, 0);
        v
    };
    for (i, node) in plan.nodes.iter().enumerate() {
        let uid = |kind: &str| format!("s{statement}-n{i}-{kind}");
        let v = match node {
            PlanNode::Scan {
                table,
                computed,
                watermark,
            } => {
                let key = (Arc::as_ptr(table) as usize, watermark.is_some());
                if let Some(v) = scans.as_ref().and_then(|s| s.get(&key)) {
                    vertex_of.push(*v);
                    continue;
                }
                let parallelism = table.scan_parallelism.unwrap_or(default_parallelism);
                let source = weir_connectors::create_source(
                    &table.options,
                    table.physical_schema.clone(),
                    &table.metadata_keys(),
                    &table.primary_key,
                )
                .await?;
                let mut operators: Vec<Arc<dyn OperatorFactory>> = Vec::new();
                if let Some(exprs) = computed {
                    let steps = vec![CalcStep::Project {
                        exprs: exprs.clone(),
                        schema: table.schema.clone(),
                    }];
                    operators.push(Arc::new(CalcOperatorFactory {
                        label: "ComputedColumns".into(),
                        steps,
                    }));
                }
                if let (Some(expr), Some((column, _))) = (watermark, &table.watermark) {
                    operators.push(Arc::new(WatermarkAssignerFactory {
                        expr: expr.clone(),
                        rowtime: table.schema.index_of(column)?,
                    }));
                }
                let mut name = format!("{} [{}]", source.name(), table.name);
                for o in &operators {
                    name.push_str(&format!(" -> {}", o.name()));
                }
                let mut v = graph.add_vertex(Vertex {
                    uid: uid(&format!("scan-{}", table.name)),
                    name,
                    parallelism,
                    source: Some(source),
                    operators,
                });
                if table.options.get("connector") == Some("upsert-kafka") {
                    // An upsert stream becomes a changelog keyed by the primary key.
                    let keys = table
                        .primary_key
                        .iter()
                        .map(|c| table.schema.index_of(c))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let factory = ChangelogNormalizeFactory {
                        keys: keys.clone(),
                        schema: table.schema.clone(),
                        state_ttl,
                        state_memory: state.memory.clone(),
                    };
                    v = keyed_vertex(
                        graph,
                        uid(&format!("normalize-{}", table.name)),
                        Arc::new(factory),
                        v,
                        &keys,
                        parallelism,
                    );
                }
                if let Some(scans) = scans.as_mut() {
                    scans.insert(key, v);
                }
                v
            }
            PlanNode::Calc { input, steps, .. } => {
                let from = vertex_of[*input];
                let parallelism = graph.vertices[from].parallelism;
                let factory = CalcOperatorFactory {
                    label: calc_label(steps),
                    steps: steps.clone(),
                };
                let v = graph.add_vertex(Vertex {
                    uid: uid("calc"),
                    name: factory.name(),
                    parallelism,
                    source: None,
                    operators: vec![Arc::new(factory)],
                });
                graph.connect(from, v, Partitioning::Forward, 0);
                v
            }
            PlanNode::Join {
                kind,
                left,
                right,
                left_keys,
                right_keys,
                filter,
                expiry,
                schema,
                null_aware,
            } => {
                let factory = JoinOperatorFactory {
                    kind: *kind,
                    keys: [left_keys.clone(), right_keys.clone()],
                    inputs: [plan.output_schema(*left), plan.output_schema(*right)],
                    filter: filter.clone(),
                    expiry: *expiry,
                    schema: schema.clone(),
                    state_ttl,
                    state_memory: state.memory.clone(),
                    updating: plan.updates(*left).is_some() || plan.updates(*right).is_some(),
                    null_aware: *null_aware,
                };
                two_input_vertex(
                    graph,
                    uid("join"),
                    Arc::new(factory),
                    [
                        (vertex_of[*left], left_keys),
                        (vertex_of[*right], right_keys),
                    ],
                    // A null-aware anti join's state is global (any NULL on the right).
                    if *null_aware { 1 } else { default_parallelism },
                )
            }
            PlanNode::TemporalJoin {
                left,
                right,
                left_keys,
                right_keys,
                left_time,
                right_time,
                kind,
                filter,
                schema,
            } => {
                let factory = TemporalJoinFactory {
                    keys: [left_keys.clone(), right_keys.clone()],
                    left_time: *left_time,
                    right_time: *right_time,
                    kind: *kind,
                    filter: filter.clone(),
                    inputs: [plan.output_schema(*left), plan.output_schema(*right)],
                    schema: schema.clone(),
                };
                two_input_vertex(
                    graph,
                    uid("temporal-join"),
                    Arc::new(factory),
                    [
                        (vertex_of[*left], left_keys),
                        (vertex_of[*right], right_keys),
                    ],
                    default_parallelism,
                )
            }
            PlanNode::LookupJoin {
                left,
                table,
                table_filter,
                left_keys,
                right_keys,
                kind,
                filter,
                schema,
            } => {
                let factory = LookupJoinFactory {
                    table: table.clone(),
                    table_filter: table_filter.clone(),
                    keys: [left_keys.clone(), right_keys.clone()],
                    kind: *kind,
                    filter: filter.clone(),
                    input_schema: plan.output_schema(*left),
                    schema: schema.clone(),
                };
                // Each subtask reads the whole table: the probe rows need no exchange.
                let from = vertex_of[*left];
                let parallelism = graph.vertices[from].parallelism;
                let v = graph.add_vertex(Vertex {
                    uid: uid("lookup-join"),
                    name: factory.name(),
                    parallelism,
                    source: None,
                    operators: vec![Arc::new(factory)],
                });
                graph.connect(from, v, Partitioning::Forward, 0);
                v
            }
            PlanNode::WindowAggregate {
                input,
                keys,
                window_end,
                processing_time,
                aggregates,
                schema,
            } => {
                let from = vertex_of[*input];
                let factory = WindowAggregateFactory {
                    keys: keys.clone(),
                    window_end: *window_end,
                    processing_time: *processing_time,
                    aggregates: aggregates.clone(),
                    input_schema: plan.output_schema(*input),
                    schema: schema.clone(),
                    state_memory: state.memory.clone(),
                };
                let partition = factory.partition_keys();
                keyed_vertex(
                    graph,
                    uid("window-aggregate"),
                    Arc::new(factory),
                    from,
                    &partition,
                    default_parallelism,
                )
            }
            PlanNode::SessionAggregate {
                input,
                keys,
                session,
                aggregates,
                schema,
                ..
            } => {
                let factory = SessionAggregateFactory {
                    keys: keys.clone(),
                    session: *session,
                    aggregates: aggregates.clone(),
                    input_schema: plan.output_schema(*input),
                    schema: schema.clone(),
                    state_memory: state.memory.clone(),
                };
                let partition = factory.partition_keys();
                keyed_vertex(
                    graph,
                    uid("session-aggregate"),
                    Arc::new(factory),
                    vertex_of[*input],
                    &partition,
                    default_parallelism,
                )
            }
            PlanNode::GroupAggregate {
                input,
                keys,
                aggregates,
                retract,
                schema,
            } => {
                let factory = GroupAggregateFactory {
                    keys: keys.clone(),
                    aggregates: aggregates.clone(),
                    retract: *retract,
                    input_schema: plan.output_schema(*input),
                    schema: schema.clone(),
                    state_ttl,
                    state_memory: state.memory.clone(),
                };
                keyed_vertex(
                    graph,
                    uid("group-aggregate"),
                    Arc::new(factory),
                    vertex_of[*input],
                    keys,
                    default_parallelism,
                )
            }
            PlanNode::TopN {
                input,
                partition,
                order,
                limit,
                offset,
                row_number,
                schema,
                retract,
                final_at,
                every_change,
            } => {
                let factory: Arc<dyn OperatorFactory> = match final_at {
                    Some(at) => Arc::new(FinalTopNFactory {
                        partition: partition.clone(),
                        order: order.clone(),
                        limit: *limit,
                        row_number: *row_number,
                        deadline: *at,
                        input_schema: plan.output_schema(*input),
                        schema: schema.clone(),
                        state_memory: state.memory.clone(),
                    }),
                    None => Arc::new(TopNFactory {
                        partition: partition.clone(),
                        order: order.clone(),
                        limit: *limit,
                        offset: *offset,
                        row_number: *row_number,
                        input_schema: plan.output_schema(*input),
                        schema: schema.clone(),
                        state_ttl,
                        retract: *retract,
                        every_change: *every_change,
                        state_memory: state.memory.clone(),
                    }),
                };
                keyed_vertex(
                    graph,
                    uid("top-n"),
                    factory,
                    vertex_of[*input],
                    partition,
                    default_parallelism,
                )
            }
            PlanNode::Values { batch } => {
                let source = weir_connectors::memory::MemorySourceFactory::from_batches(
                    batch.schema(),
                    vec![batch.clone()],
                );
                graph.add_vertex(Vertex {
                    uid: uid("values"),
                    name: format!("Source: VALUES ({} rows)", batch.num_rows()),
                    parallelism: 1,
                    source: Some(Arc::new(source)),
                    operators: Vec::new(),
                })
            }
            PlanNode::Limit { input, skip, fetch } => {
                let factory = LimitFactory {
                    skip: *skip,
                    fetch: *fetch,
                };
                single(graph, uid("limit"), Arc::new(factory), vertex_of[*input])
            }
            PlanNode::TemporalSort {
                input,
                order,
                processing_time,
                schema,
            } => {
                let factory = TemporalSortFactory {
                    order: order.clone(),
                    processing_time: *processing_time,
                    schema: schema.clone(),
                };
                single(
                    graph,
                    uid("temporal-sort"),
                    Arc::new(factory),
                    vertex_of[*input],
                )
            }
            PlanNode::OverAggregate {
                input,
                partition,
                time,
                processing_time,
                frame,
                aggregates,
                schema,
            } => {
                let factory = OverAggregateFactory {
                    partition: partition.clone(),
                    time: *time,
                    processing_time: *processing_time,
                    frame: *frame,
                    aggregates: aggregates.clone(),
                    input_schema: plan.output_schema(*input),
                    schema: schema.clone(),
                };
                keyed_vertex(
                    graph,
                    uid("over-aggregate"),
                    Arc::new(factory),
                    vertex_of[*input],
                    partition,
                    default_parallelism,
                )
            }
            PlanNode::MatchRecognize {
                input,
                program,
                processing_time,
            } => {
                let factory = MatchRecognizeFactory {
                    program: program.clone(),
                    processing_time: *processing_time,
                };
                keyed_vertex(
                    graph,
                    uid("match-recognize"),
                    Arc::new(factory),
                    vertex_of[*input],
                    &program.partition,
                    default_parallelism,
                )
            }
            PlanNode::Union { inputs, schema } => {
                let v = graph.add_vertex(Vertex {
                    uid: uid("union"),
                    name: "Union".into(),
                    parallelism: default_parallelism,
                    source: None,
                    operators: vec![Arc::new(UnionOperatorFactory {
                        schema: schema.clone(),
                        changelog: plan.updates(i).is_some(),
                    })],
                });
                for input in inputs {
                    let from = vertex_of[*input];
                    let p = edge(graph, from, default_parallelism);
                    graph.connect(from, v, p, 0);
                }
                v
            }
            PlanNode::Sink { input, table } => {
                let from = vertex_of[*input];
                let parallelism = table
                    .sink_parallelism
                    .unwrap_or(graph.vertices[from].parallelism);
                let sink = weir_connectors::create_sink(
                    &table.options,
                    table.sink_schema.clone(),
                    &table.partitioned_by,
                    &table.primary_key,
                    &table.sink_metadata_keys(),
                    plan.updates(i),
                    false,
                )
                .await?;
                let committer = sink.global_committer();
                let sink_uid = uid(&format!("sink-{}", table.name));
                let v = graph.add_vertex(Vertex {
                    uid: sink_uid.clone(),
                    name: format!("{} [{}]", sink.name(), table.name),
                    parallelism,
                    source: None,
                    operators: vec![sink],
                });
                let p = edge(graph, from, parallelism);
                graph.connect(from, v, p, 0);
                match committer {
                    None => v,
                    Some(committer) => {
                        // Every writer feeds the one committer (never chained with one).
                        let c = graph.add_vertex(Vertex {
                            uid: weir_runtime::committer_uid(&sink_uid),
                            name: format!("{} [{}]", committer.name(), table.name),
                            parallelism: 1,
                            source: None,
                            operators: vec![committer],
                        });
                        graph.connect(v, c, Partitioning::Rebalance, 0);
                        c
                    }
                }
            }
            // A reader of the rows (the shell) takes them in one place; otherwise they are
            // printed where they are.
            PlanNode::Collect { input, .. } if collect.is_some() => {
                let from = vertex_of[*input];
                let v = graph.add_vertex(Vertex {
                    uid: uid("collect"),
                    name: "Sink: collect (SELECT)".into(),
                    parallelism: 1,
                    source: None,
                    operators: vec![collect.expect("a collector").clone()],
                });
                let p = edge(graph, from, 1);
                graph.connect(from, v, p, 0);
                v
            }
            PlanNode::Collect { input, schema } => {
                let from = vertex_of[*input];
                let parallelism = graph.vertices[from].parallelism;
                let options = ConnectorOptions::new(
                    "select",
                    [("connector".to_string(), "print".to_string())]
                        .into_iter()
                        .collect(),
                );
                let sink = weir_connectors::create_sink(
                    &options,
                    schema.clone(),
                    &[],
                    &[],
                    &[],
                    plan.updates(i),
                    false,
                )
                .await?;
                let v = graph.add_vertex(Vertex {
                    uid: uid("collect"),
                    name: "Sink: print (SELECT)".into(),
                    parallelism,
                    source: None,
                    operators: vec![sink],
                });
                graph.connect(from, v, Partitioning::Forward, 0);
                v
            }
        };
        vertex_of.push(v);
    }
    Ok(())
}
