//! The Flink differential suite: SQL cases under `tests/flink/cases/` whose expected
//! results were produced by Apache Flink (`tests/flink/generate.py`, see
//! `tests/flink/README.md`). Weir runs every query in batch mode and in streaming mode
//! (parallelism 2, checkpoints every 100 ms) and must give Flink's column types, changelog
//! mode (append or updating) and rows — or refuse a query Flink refuses.
//!
//! Where Weir still differs, the block is listed in `tests/flink/known-differences.txt`
//! with the reason. The test fails when a block differs that is not listed, and when a
//! listed block matches (so the list only shrinks). `WEIR_FLINK_VERBOSE=1` prints every
//! difference, listed or not.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir::runtime::{Operator, OperatorFactory, Output, TaskInfo};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/flink")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Batch,
    Streaming,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Batch => "batch",
            Mode::Streaming => "streaming",
        }
    }
}

/// One `== query N (mode)` block of an expected file.
#[derive(Debug, Default, Clone, PartialEq)]
struct Expected {
    columns: Vec<String>,
    changelog: String,
    ordered: bool,
    error: Option<String>,
    rows: Vec<String>,
}

fn parse_expected(text: &str) -> Vec<((usize, Mode), Expected)> {
    let mut blocks = Vec::new();
    let mut current: Option<((usize, Mode), Expected)> = None;
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("== query ") {
            blocks.extend(current.take());
            let (n, mode) = head.split_once(' ').expect("== query N (mode)");
            let mode = match mode {
                "(batch)" => Mode::Batch,
                "(streaming)" => Mode::Streaming,
                other => panic!("unknown mode {other}"),
            };
            current = Some(((n.parse().unwrap(), mode), Expected::default()));
            continue;
        }
        let Some((_, e)) = current.as_mut() else {
            continue;
        };
        if let Some(c) = line.strip_prefix("-- columns: ") {
            e.columns = split_columns(c).into_iter().map(base_type).collect();
        } else if let Some(c) = line.strip_prefix("-- changelog: ") {
            e.changelog = c.trim().to_string();
        } else if line == "-- ordered" {
            e.ordered = true;
        } else if let Some(m) = line.strip_prefix("-- error: ") {
            e.error = Some(m.to_string());
        } else if line.starts_with("-- ") || line.is_empty() {
        } else {
            e.rows.push(line.to_string());
        }
    }
    blocks.extend(current);
    blocks
}

/// `a INT, b DECIMAL(10, 2)` → `["a INT", "b DECIMAL(10, 2)"]`: commas inside a
/// type's parentheses do not separate columns.
fn split_columns(text: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(text[start..].trim());
    out
}

/// `name TYPE [NOT NULL]` → `name TYPE` (nullability is not compared: DataFusion infers
/// it differently and it changes no row).
fn base_type(column: &str) -> String {
    // Nullability is not compared, and Weir has one text type and one binary type:
    // Flink's CHAR(n)/VARCHAR(n) (the types of literals) compare as STRING, BINARY(n)/
    // VARBINARY(n) as BYTES.
    let mut out = column.trim().replace(" NOT NULL", "");
    for (sized, plain) in [
        ("VARCHAR(", "STRING"),
        ("CHAR(", "STRING"),
        ("VARBINARY(", "BYTES"),
        ("BINARY(", "BYTES"),
    ] {
        while let Some(at) = out.find(sized) {
            let end = out[at..].find(')').map_or(out.len(), |e| at + e + 1);
            out.replace_range(at..end, plain);
        }
    }
    out
}

/// A column's type as Flink prints it.
fn flink_type(dt: &DataType) -> String {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTES".into(),
        other => weir::sql::types::sql_name(other),
    }
}

/// A value as the expected files write it (see `tests/flink/README.md`).
fn canonical(array: &ArrayRef, row: usize) -> String {
    if array.is_null(row) {
        return "NULL".into();
    }
    let fmt = |a: &ArrayRef| {
        arrow::util::display::ArrayFormatter::try_new(a.as_ref(), &Default::default())
            .unwrap()
            .value(row)
            .to_string()
    };
    match array.data_type() {
        DataType::Boolean => {
            if array.as_boolean().value(row) {
                "TRUE".into()
            } else {
                "FALSE".into()
            }
        }
        DataType::Float64 => float(
            array
                .as_primitive::<arrow::datatypes::Float64Type>()
                .value(row),
        ),
        DataType::Float32 => float(
            array
                .as_primitive::<arrow::datatypes::Float32Type>()
                .value(row) as f64,
        ),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => escape(&fmt(array)),
        // `{k1=v1, k2=v2}`, entries sorted.
        DataType::Map(..) => {
            let entries = array.as_map().value(row);
            let mut items: Vec<String> = (0..entries.len())
                .map(|i| {
                    format!(
                        "{}={}",
                        canonical(entries.column(0), i),
                        canonical(entries.column(1), i)
                    )
                })
                .collect();
            items.sort();
            format!("{{{}}}", items.join(", "))
        }
        DataType::Timestamp(unit, _) => {
            let text = fmt(array).replace('T', " ");
            let text = text
                .split(['+', 'Z'])
                .next()
                .unwrap_or_default()
                .to_string();
            let digits = match unit {
                TimeUnit::Second | TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
            format!("{whole}.{:0<digits$}", &frac[..frac.len().min(digits)])
        }
        _ => fmt(array),
    }
}

fn float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{v:?}")
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('\n', "\\n")
}

/// Rows of `batches` (a changelog when they carry row kinds), materialized.
fn rows_of(batches: &[RecordBatch], ordered: bool) -> (Vec<String>, bool) {
    let mut rows: Vec<String> = Vec::new();
    let mut updating = false;
    for batch in batches {
        let (data, ops) = weir::common::changelog::split(batch);
        for r in 0..data.num_rows() {
            let text = data
                .columns()
                .iter()
                .map(|c| canonical(c, r))
                .collect::<Vec<_>>()
                .join(" | ");
            let kind = weir::common::changelog::kind_at(ops.as_ref(), r);
            if kind.short() != "+I" {
                updating = true;
            }
            if kind.is_retraction() {
                if let Some(at) = rows.iter().position(|x| *x == text) {
                    rows.remove(at);
                } else {
                    rows.push(format!("RETRACTED WITHOUT INSERT: {text}"));
                }
            } else {
                rows.push(text);
            }
        }
    }
    if !ordered {
        rows.sort();
    }
    (rows, updating)
}

/// A sink that keeps what reaches it (the streaming `SELECT`'s collect vertex).
struct Collector(Arc<Mutex<Vec<RecordBatch>>>);

impl OperatorFactory for Collector {
    fn name(&self) -> String {
        "Sink: collect".into()
    }
    fn create(&self, _: &TaskInfo) -> weir::Result<Box<dyn Operator>> {
        Ok(Box::new(Collecting(self.0.clone())))
    }
    fn is_sink(&self) -> bool {
        true
    }
}

struct Collecting(Arc<Mutex<Vec<RecordBatch>>>);

#[weir::runtime::async_trait]
impl Operator for Collecting {
    async fn process_batch(
        &mut self,
        _: usize,
        b: RecordBatch,
        _: &mut Output,
    ) -> weir::Result<()> {
        self.0.lock().unwrap().push(b);
        Ok(())
    }
}

/// What Weir gave for one query.
#[derive(Debug)]
struct Got {
    columns: Vec<String>,
    updating: bool,
    rows: Vec<String>,
}

async fn run_query(
    engine: &mut weir::Engine,
    stmt: &weir::sql::Located,
    mode: Mode,
    ordered: bool,
) -> weir::Result<Got> {
    match engine.execute(stmt).await? {
        weir::Outcome::Batch(queries) => {
            let query = &queries[0];
            let columns = query
                .logical
                .schema()
                .fields()
                .iter()
                .map(|f| format!("{} {}", f.name(), flink_type(f.data_type())))
                .collect();
            match engine.run_batch(query).await? {
                weir::engine::BatchResult::Rows(batches) => {
                    let (rows, _) = rows_of(&batches, ordered);
                    Ok(Got {
                        columns,
                        updating: false,
                        rows,
                    })
                }
                other => panic!("a SELECT wrote rows: {other:?}"),
            }
        }
        weir::Outcome::Job(plans) => {
            assert_eq!(mode, Mode::Streaming);
            let mut graph = engine.build_job(&plans).await?;
            let got = Arc::new(Mutex::new(Vec::new()));
            let collect = graph
                .vertices
                .iter_mut()
                .find(|v| v.name == "Sink: print (SELECT)")
                .expect("the SELECT's collect vertex");
            collect.operators = vec![Arc::new(Collector(got.clone()))];
            let schema = plans[0].output_schema(plans[0].nodes.len() - 1);
            let columns = schema
                .fields()
                .iter()
                .filter(|f| f.name() != weir::common::changelog::op_field().name())
                .map(|f| format!("{} {}", f.name(), flink_type(f.data_type())))
                .collect();
            // The changelog mode is the plan's (as Flink's is its planner's), not what a
            // small input happens to produce.
            let sink = plans[0].nodes.len() - 1;
            let declared_updating = plans[0].updates(sink).is_some();
            let job = engine.start(graph, None).await?;
            tokio::time::timeout(Duration::from_secs(60), job.wait())
                .await
                .map_err(|_| weir::Error::internal("the streaming query did not end in 60 s"))??;
            let batches = got.lock().unwrap().clone();
            let (rows, produced_updates) = rows_of(&batches, ordered);
            Ok(Got {
                columns,
                updating: declared_updating || produced_updates,
                rows,
            })
        }
        other => panic!("a SELECT gave {other:?}"),
    }
}

/// Runs case `name` and returns one line per block that differs from Flink's.
async fn differences(name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("cases").join(format!("{name}.sql")))
        .unwrap()
        .replace("${DATA}", root().join("data").to_str().unwrap());
    let expected = parse_expected(
        &std::fs::read_to_string(root().join("expected").join(format!("{name}.out"))).unwrap(),
    );
    let modes: BTreeSet<Mode> = expected.iter().map(|((_, m), _)| *m).collect();
    let mut out = Vec::new();
    for mode in modes {
        let mut engine = weir::Engine::default();
        let config = engine.config_mut();
        config.set("execution.runtime-mode", mode.name()).unwrap();
        config.set("parallelism.default", "2").unwrap();
        config.set("table.local-time-zone", "UTC").unwrap();
        config
            .set("execution.checkpointing.interval", "100 ms")
            .unwrap();
        // `-- set: key=value, …`: the case's own session options.
        for line in text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("-- set:"))
        {
            for (key, value) in line.split(',').filter_map(|kv| kv.split_once('=')) {
                config.set(key.trim(), value.trim()).unwrap();
            }
        }
        let statements = match engine.parse(&text) {
            Ok(s) => s,
            Err(e) => {
                out.push(format!(
                    "{name} ({}): the case does not parse: {e}",
                    mode.name()
                ));
                continue;
            }
        };
        let mut query = 0;
        for stmt in &statements {
            if !matches!(stmt.statement, weir::sql::WeirStatement::Select(_)) {
                if let Err(e) = engine.execute(stmt).await {
                    out.push(format!("{name} ({}): {e}", mode.name()));
                }
                continue;
            }
            query += 1;
            let Some((_, want)) = expected.iter().find(|(k, _)| *k == (query, mode)) else {
                continue;
            };
            let mut want = want;
            // `-- batch: as streaming`: where Flink's batch mode refuses a query that its
            // streaming mode runs (session windows), Weir's batch mode runs it and must
            // give the streaming rows.
            if mode == Mode::Batch
                && want.error.is_some()
                && text.contains("\n-- batch: as streaming")
                && let Some((_, streaming)) = expected
                    .iter()
                    .find(|(k, _)| *k == (query, Mode::Streaming))
            {
                want = streaming;
            }
            let at = format!("{name} query {query} ({})", mode.name());
            let got = run_query(&mut engine, stmt, mode, want.ordered).await;
            match (&want.error, got) {
                (Some(_), Err(_)) => {}
                (Some(flink), Ok(_)) => {
                    out.push(format!("{at}: Flink refuses it ({flink}), Weir runs it"))
                }
                (None, Err(e)) => out.push(format!(
                    "{at}: Weir fails: {}",
                    e.to_string().lines().next().unwrap_or_default()
                )),
                (None, Ok(got)) => {
                    if got.columns != want.columns {
                        out.push(format!(
                            "{at}: columns {:?}, Flink {:?}",
                            got.columns, want.columns
                        ));
                    }
                    if mode == Mode::Streaming {
                        let mode_got = if got.updating { "updating" } else { "append" };
                        if mode_got != want.changelog {
                            out.push(format!(
                                "{at}: changelog {mode_got}, Flink {}",
                                want.changelog
                            ));
                        }
                    }
                    if got.rows != want.rows {
                        let missing: Vec<_> = want
                            .rows
                            .iter()
                            .filter(|r| !got.rows.contains(r))
                            .take(3)
                            .collect();
                        let extra: Vec<_> = got
                            .rows
                            .iter()
                            .filter(|r| !want.rows.contains(r))
                            .take(3)
                            .collect();
                        out.push(format!(
                            "{at}: rows differ ({} vs Flink's {}; Flink's not in Weir's: {missing:?}; Weir's not in Flink's: {extra:?})",
                            got.rows.len(),
                            want.rows.len()
                        ));
                    }
                }
            }
        }
    }
    out
}

/// `tests/flink/known-differences.txt`: `case query N (mode): reason` per line.
fn known_differences() -> BTreeSet<String> {
    std::fs::read_to_string(root().join("known-differences.txt"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once(':').map_or(l, |(k, _)| k).trim().to_string())
        .collect()
}

#[test]
fn weir_gives_flinks_results() {
    let mut cases: Vec<String> = std::fs::read_dir(root().join("cases"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".sql")
                .map(str::to_string)
        })
        .collect();
    cases.sort();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let known = known_differences();
    let (mut blocks, mut unexpected, mut fixed) = (0, Vec::new(), Vec::new());
    let mut differing = BTreeSet::new();
    for case in &cases {
        let text =
            std::fs::read_to_string(root().join("expected").join(format!("{case}.out"))).unwrap();
        blocks += parse_expected(&text).len();
        for d in runtime.block_on(differences(case)) {
            if std::env::var_os("WEIR_FLINK_VERBOSE").is_some() {
                eprintln!("{d}");
            }
            let key = d
                .split_once(": ")
                .map_or(d.as_str(), |(k, _)| k)
                .to_string();
            if !known.contains(&key) {
                unexpected.push(d);
            }
            differing.insert(key);
        }
    }
    for k in &known {
        if !differing.contains(k) {
            fixed.push(k.clone());
        }
    }
    eprintln!(
        "Flink differential suite: {} cases, {blocks} query blocks, {} differ from Flink ({} known)",
        cases.len(),
        differing.len(),
        known.len()
    );
    assert!(
        unexpected.is_empty() && fixed.is_empty(),
        "differences from Flink not in known-differences.txt:\n{}\n\nlisted but now matching Flink (remove them):\n{}",
        unexpected.join("\n"),
        fixed.join("\n")
    );
}

/// The files Weir's filesystem sink writes are the files Flink writes for the same
/// statements in batch mode: json and csv with their options, `INSERT OVERWRITE` and static
/// partitions (`tests/flink/sinks.py` wrote `expected/sinks.out` with Flink from
/// `tests/flink/sinks/*.sql`).
#[test]
fn sink_files_are_flinks() {
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(root().join("sinks"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    scripts.sort();
    let mut got = Vec::new();
    for script in scripts {
        let name = script.file_stem().unwrap().to_string_lossy().to_string();
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let sql = std::fs::read_to_string(&script)
            .unwrap()
            .replace("${OUT}", out.to_str().unwrap());
        let script = crate::common::write_script(
            tmp.path(),
            "sinks.sql",
            &format!("SET 'execution.runtime-mode' = 'batch';\n{sql}"),
        );
        crate::common::run_ok(&[script.to_str().unwrap()]);
        // Committed files by folder (partitions are folders), hidden ones left out.
        let mut folders: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut pending = vec![out.clone()];
        while let Some(dir) = pending.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let file_name = e.file_name().to_string_lossy().to_string();
                if file_name.starts_with(['.', '_']) {
                    continue;
                }
                if e.path().is_dir() {
                    pending.push(e.path());
                    continue;
                }
                let folder = dir
                    .strip_prefix(&out)
                    .unwrap()
                    .to_string_lossy()
                    .to_string();
                let text = std::fs::read_to_string(e.path()).unwrap();
                folders
                    .entry(folder)
                    .or_default()
                    .extend(text.lines().map(str::to_string));
            }
        }
        for (folder, mut rows) in folders {
            got.push(format!("== {name}/{folder}"));
            rows.sort();
            got.extend(rows);
        }
    }
    let expected: Vec<String> = std::fs::read_to_string(root().join("expected/sinks.out"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(got, expected);
}
