//! The SQL shell: statements end with `;` and may span lines; `SET`, `RESET`, `SHOW`,
//! `DESCRIBE`, `EXPLAIN` act at once; a `SELECT` over bounded tables prints a table, over
//! unbounded ones it shows rows as [`crate::results`] describes until Ctrl-C (which
//! cancels the query, not the shell, in both cases); `INSERT INTO` starts a job in the
//! background (a statement set, one job for all its INSERTs, is read up to its `END;`),
//! which `weir list`/`weir stop` and the REST API see too; `SHOW JOBS` and
//! `STOP JOB 'id' [WITH SAVEPOINT] [DRAIN]` manage them; `HELP;`, `QUIT;`/`EXIT;`. Errors
//! never end the interactive shell (`-f` stops at the first one and exits with 1); SQL
//! errors show the statement line with a caret under the position.

use crate::remote_jobs::{Coordinator, Following};
use crate::results::{ResultMode, ResultView};
use anyhow::{Context, bail};
use rustyline::error::ReadlineError;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::signal::unix::{Signal, SignalKind};
use weir::sql::{PlanNode, StreamPlan, WeirStatement};
use weir::{Engine, Outcome};

struct Job {
    id: String,
    statement: String,
    handle: Option<weir::JobHandle>,
    status: String,
    metrics: std::sync::Arc<weir::runtime::JobMetrics>,
    /// Lets `weir list`/`weir stop` reach the job while it runs.
    _control: Option<crate::control::SocketGuard>,
    /// A job on the coordinator, followed while it runs.
    remote: Option<Following>,
}

struct Shell {
    engine: Engine,
    jobs: Vec<Job>,
    /// Ctrl-C, caught for the shell's whole life: it cancels the query running, never the
    /// shell (a first Ctrl-C before any handler was installed would end the process).
    interrupt: Signal,
    /// Where control sockets go; `None` until the first job, `Some(Err)` if unusable.
    control_dir: Option<Result<PathBuf, String>>,
    /// The Ballista cluster batch queries run on (`df://host:port`), if any.
    ballista: Option<String>,
    /// The Weir coordinator streaming INSERTs run on, if any.
    coordinator: Option<Coordinator>,
}

/// What the shell does after a piece of input.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Failed,
    Quit,
}

const HELP: &str = "\
Statements end with ';' and may span lines. Ctrl-C cancels the running query; Ctrl-D, QUIT; or EXIT; leaves.

  CREATE TABLE / VIEW / FUNCTION / CATALOG / DATABASE …, DROP …, ALTER TABLE …
  SHOW TABLES | VIEWS | FUNCTIONS | CATALOGS | DATABASES | CREATE TABLE t | JOBS;
  DESCRIBE t;   EXPLAIN SELECT …;
  SELECT …;                      bounded input: a table; unbounded: rows until Ctrl-C
  INSERT INTO t SELECT …;        starts a job in the background (see SHOW JOBS, weir list)
  EXECUTE STATEMENT SET BEGIN INSERT …; INSERT …; END;   several INSERTs as one job
  STOP JOB 'id' [WITH SAVEPOINT] [DRAIN];
  SET;                           every key with its value (set or default)
  SET 'key' = 'value';  SET key = value;  RESET ['key'];
  SET 'sql-client.execution.result-mode' = 'table' | 'changelog' | 'tableau';
  SET 'execution.savepoint.path' = '…';   the next job starts from that savepoint
  HELP;  QUIT;  EXIT;
";

/// `HELP`, `QUIT` or `EXIT` (any case, `;` optional), which the shell answers itself.
fn shell_command(sql: &str) -> Option<&'static str> {
    let word = sql.trim().trim_end_matches(';').trim().to_ascii_uppercase();
    match word.as_str() {
        "HELP" => Some("HELP"),
        "QUIT" | "EXIT" => Some("QUIT"),
        _ => None,
    }
}

/// Consumes Ctrl-C presses nobody waited for, so that they do not cancel the next query.
fn drain_interrupts(signal: &mut Signal) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while let std::task::Poll::Ready(Some(())) = signal.poll_recv(&mut cx) {}
}

fn history_path() -> PathBuf {
    if let Ok(p) = std::env::var("WEIR_HISTORY") {
        return PathBuf::from(p);
    }
    std::env::var("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir())
        .join(".weir_history")
}

/// True when `buffer` holds at least one complete statement (a `;` outside quotes and
/// comments) and no statement set left open (`… STATEMENT SET …` without `; END;`).
fn complete(buffer: &str) -> bool {
    let (mut quote, mut line_comment) = (None::<char>, false);
    let mut chars = buffer.chars().peekable();
    let mut ended = false;
    // The text outside quotes and comments, `;` apart.
    let mut code = String::new();
    while let Some(c) = chars.next() {
        if line_comment {
            line_comment = c != '\n';
            continue;
        }
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '-') if chars.peek() == Some(&'-') => line_comment = true,
            (None, ';') => {
                ended = true;
                code.push_str(" ; ");
            }
            (None, c) => {
                if !c.is_whitespace() {
                    ended = false;
                }
                code.push(if c.is_alphanumeric() || c == '_' {
                    c
                } else {
                    ' '
                });
            }
        }
    }
    let words: Vec<String> = code.split_whitespace().map(str::to_uppercase).collect();
    let mut open_set = false;
    for (i, w) in words.iter().enumerate() {
        let next = words.get(i + 1).map(String::as_str);
        if w == "STATEMENT" && next == Some("SET") {
            open_set = true;
        }
        // A set's END follows its last INSERT's `;` (a CASE's END never does).
        if w == "END" && next == Some(";") && i > 0 && words[i - 1] == ";" {
            open_set = false;
        }
    }
    ended && !open_set
}

/// The error, with the offending line and a caret under the column when it has one.
fn show_error(sql: &str, e: &weir::Error) {
    eprintln!("[ERROR] {e}");
    if let weir::Error::Sql {
        location: Some(l), ..
    } = e
        && let Some(line) = sql.lines().nth(l.line.saturating_sub(1) as usize)
    {
        eprintln!("  {line}");
        eprintln!("  {}^", " ".repeat(l.column.saturating_sub(1) as usize));
    }
}

impl Shell {
    /// Runs the statements of `sql`, stopping at the first that fails.
    async fn execute_text(&mut self, sql: &str) -> Flow {
        match shell_command(sql) {
            Some("HELP") => {
                out!("{HELP}");
                return Flow::Continue;
            }
            Some(_) => return Flow::Quit,
            _ => {}
        }
        let statements = match self.engine.parse(sql) {
            Ok(s) => s,
            Err(e) => {
                show_error(sql, &e);
                return Flow::Failed;
            }
        };
        let starts: Vec<_> = statements.iter().map(|s| s.location).collect();
        let texts = crate::remote_jobs::statement_texts(sql, &starts);
        for (stmt, text) in statements.iter().zip(&texts) {
            drain_interrupts(&mut self.interrupt);
            if let Err(e) = self.execute(stmt, sql, text).await {
                match e.downcast::<weir::Error>() {
                    Ok(e) => show_error(sql, &e),
                    Err(e) => eprintln!("[ERROR] {e:#}"),
                }
                return Flow::Failed;
            }
        }
        Flow::Continue
    }

    /// A `SELECT` over bounded input (or in batch mode), run to the end as a batch query
    /// and shown as one table; Ctrl-C abandons it.
    async fn bounded_select(
        &mut self,
        query: &weir::datafusion::sql::sqlparser::ast::Query,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let engine = &self.engine;
        let run = async {
            let query = engine.plan_batch_select(query).await?;
            engine.run_batch(&query).await
        };
        let result = tokio::select! {
            r = run => r?,
            _ = self.interrupt.recv() => {
                out!("\n[INFO] query cancelled");
                return Ok(());
            }
        };
        if let weir::engine::BatchResult::Rows(batches) = result {
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            if let Some(b) = batches.first() {
                let types: Vec<String> = b
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), weir::sql::types::sql_name(f.data_type())))
                    .collect();
                out!("{}", arrow::util::pretty::pretty_format_batches(&batches)?);
                out!("columns: {}", types.join(", "));
            }
            out!(
                "{rows} row(s) in set ({:.2} sec)",
                started.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }

    /// A `SELECT` over unbounded input: a job whose rows are shown in the configured
    /// result mode until it ends, its LIMIT is reached or Ctrl-C cancels it.
    async fn streaming_select(&mut self, plans: &[StreamPlan]) -> anyhow::Result<()> {
        let Some(PlanNode::Collect { schema, .. }) = plans.last().and_then(|p| p.nodes.last())
        else {
            bail!("internal error: a SELECT without a result");
        };
        let config = self.engine.config();
        let mode = ResultMode::parse(&config.result_mode());
        let max_rows = config.max_table_result_rows();
        let (graph, mut rows) = self.engine.build_collecting_job(plans).await?;
        let mut job = self.engine.start(graph, None).await?;
        let live =
            std::io::stdout().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
        out!(
            "[INFO] streaming results in {}; press Ctrl-C to stop",
            match mode {
                ResultMode::Table if !live => "table mode (shown when the query ends)",
                ResultMode::Table => "table mode",
                ResultMode::Changelog => "changelog mode",
                ResultMode::Tableau => "tableau mode",
            }
        );
        let mut view = ResultView::new(mode, schema, max_rows, live);
        let limit = plans.last().and_then(|p| p.shown_limit()).map(|n| n as u64);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let ended = loop {
            tokio::select! {
                Some(batch) = rows.recv() => {
                    view.add(&batch)?;
                    if let Some(n) = limit.filter(|n| view.received() >= *n) {
                        break Some(format!("[INFO] LIMIT {n} reached; query ended"));
                    }
                }
                r = job.finished() => {
                    // Every row was handed over before the sink's task could end.
                    while let Ok(batch) = rows.try_recv() {
                        view.add(&batch)?;
                    }
                    view.finish();
                    r?;
                    return Ok(());
                }
                _ = tick.tick() => view.tick(),
                _ = self.interrupt.recv() => break Some("\n[INFO] query cancelled".to_string()),
            }
        };
        job.cancel();
        drop(rows);
        let _ = job.finished().await;
        view.finish();
        if let Some(message) = ended {
            out!("{message}");
        }
        Ok(())
    }

    async fn execute(
        &mut self,
        stmt: &weir::sql::Located,
        sql: &str,
        text: &str,
    ) -> anyhow::Result<()> {
        if let WeirStatement::Select(query) = &stmt.statement
            && (self.engine.config().runtime_mode() == weir::common::RuntimeMode::Batch
                || self.engine.query_is_bounded(query).await?)
        {
            return self.bounded_select(query).await;
        }
        match self.engine.execute(stmt).await? {
            Outcome::Done(msg) => {
                if let Some(coordinator) = &mut self.coordinator {
                    coordinator.record(text);
                }
                out!("[INFO] {msg}")
            }
            Outcome::Table { header, rows } => crate::print_table(&header, &rows),
            Outcome::Explain(text) => out!("{text}"),
            Outcome::Batch(queries) => {
                for query in &queries {
                    match self.engine.run_batch(query).await? {
                        weir::engine::BatchResult::Rows(batches) => {
                            out!("{}", arrow::util::pretty::pretty_format_batches(&batches)?)
                        }
                        weir::engine::BatchResult::Written(n) => {
                            out!("[INFO] {n} rows committed")
                        }
                    }
                }
            }
            Outcome::Job(_) if self.ballista.is_some() => {
                bail!(
                    "{} is a Ballista cluster, which runs batch jobs only: SET \
                     'execution.runtime-mode' = 'batch' (or run the streaming job on a Weir \
                     coordinator with `weir run --cluster host:port`)",
                    self.ballista.as_deref().unwrap_or_default()
                )
            }
            Outcome::Job(plans) if matches!(stmt.statement, WeirStatement::Select(_)) => {
                self.streaming_select(&plans).await?;
            }
            Outcome::Job(_) if self.coordinator.is_some() => {
                let coordinator = self.coordinator.as_ref().expect("a coordinator");
                let (id, following) = coordinator.submit(text).await?;
                out!(
                    "[INFO] Submitted job {id} to the cluster at {}",
                    coordinator.address
                );
                self.jobs.push(Job {
                    id,
                    statement: statement_text(sql, stmt.location.line),
                    metrics: Default::default(),
                    handle: None,
                    status: "RUNNING".into(),
                    _control: None,
                    remote: Some(following),
                });
            }
            Outcome::Job(plans) => {
                let graph = self.engine.build_job(&plans).await?;
                let job = self.engine.start(graph, None).await?;
                let id = job.job_id.to_string();
                out!("[INFO] Submitted job {id}");
                if let Some(from) = &job.restored_from {
                    out!("[INFO] restored from {from}");
                }
                let control = self.control(&job);
                self.jobs.push(Job {
                    id,
                    statement: statement_text(sql, stmt.location.line),
                    metrics: job.metrics.clone(),
                    handle: Some(job),
                    status: "RUNNING".into(),
                    _control: control,
                    remote: None,
                });
            }
            Outcome::JobControl(WeirStatement::ShowJobs) => self.show_jobs().await,
            Outcome::JobControl(WeirStatement::StopJob {
                id,
                savepoint,
                drain,
            }) => self.stop_job(&id, savepoint, drain).await?,
            Outcome::JobControl(_) => {}
        }
        Ok(())
    }

    /// `SHOW JOBS`: the shell's jobs, with their figures (a cluster job's from its
    /// coordinator).
    async fn show_jobs(&mut self) {
        self.refresh().await;
        let running = match &self.coordinator {
            Some(c) if self.jobs.iter().any(|j| j.remote.is_some()) => c.running().await,
            _ => Vec::new(),
        };
        let rows = self
            .jobs
            .iter()
            .map(|j| {
                let remote = running
                    .iter()
                    .find(|r| j.remote.is_some() && r.job_id == j.id);
                let (status, rows_in, rows_out, restarts) = match remote {
                    Some(r) => (r.status.clone(), r.rows_in, r.rows_out, r.restarts),
                    None => (
                        if j.handle.is_some() && j.metrics.is_restarting() {
                            "RESTARTING".to_string()
                        } else {
                            j.status.clone()
                        },
                        j.metrics.rows_in(),
                        j.metrics.rows_out(),
                        j.metrics.restarts(),
                    ),
                };
                vec![
                    j.id.clone(),
                    status,
                    rows_in.to_string(),
                    rows_out.to_string(),
                    restarts.to_string(),
                    j.statement.clone(),
                ]
            })
            .collect::<Vec<_>>();
        let header = [
            "job id",
            "status",
            "rows in",
            "rows out",
            "restarts",
            "statement",
        ]
        .map(String::from)
        .to_vec();
        crate::print_table(&header, &rows);
    }

    /// `STOP JOB 'id' [WITH SAVEPOINT] [WITH DRAIN]`.
    async fn stop_job(&mut self, id: &str, savepoint: bool, drain: bool) -> anyhow::Result<()> {
        self.refresh().await;
        // Checked before the job's handle is taken: a refused STOP leaves the job
        // running and stoppable.
        let savepoint_dir = if savepoint {
            Some(self.engine.config().savepoint_dir().context(
                "STOP JOB … WITH SAVEPOINT needs SET 'execution.checkpointing.savepoint-dir' = '…'",
            )?)
        } else {
            None
        };
        let job = self
            .jobs
            .iter_mut()
            .find(|j| j.id.starts_with(id) && (j.handle.is_some() || j.remote.is_some()))
            .with_context(|| format!("no running job '{id}' (see SHOW JOBS)"))?;
        if job.remote.is_some() {
            let coordinator = self.coordinator.as_ref().expect("a coordinator");
            let Some(dir) = savepoint_dir else {
                coordinator.cancel(&job.id).await?;
                if let Some(following) = job.remote.take() {
                    let _ = following.await;
                }
                job.status = "CANCELED".into();
                out!("[INFO] job {} cancelled", job.id);
                return Ok(());
            };
            let path = coordinator.stop(&job.id, drain, Some(dir)).await?;
            if let Some(following) = job.remote.take() {
                let _ = following.await;
            }
            job.status = "STOPPED".into();
            out!("[INFO] job stopped with savepoint {path}");
            return Ok(());
        }
        let handle = job.handle.take().expect("running job");
        if let Some(dir) = savepoint_dir {
            match handle.stop_with_savepoint(drain, &dir).await {
                Ok(path) => {
                    handle.wait().await?;
                    job.status = "STOPPED".into();
                    out!("[INFO] job stopped with savepoint {path}");
                }
                Err(e) => {
                    job.handle = Some(handle);
                    return Err(e.into());
                }
            }
        } else {
            handle.cancel();
            let _ = handle.wait().await;
            job.status = "CANCELED".into();
            out!("[INFO] job {} cancelled", job.id);
        }
        Ok(())
    }

    /// Makes `job` reachable by `weir list`/`weir stop`; without a usable control folder
    /// (said once) the job runs all the same.
    fn control(&mut self, job: &weir::JobHandle) -> Option<crate::control::SocketGuard> {
        let first = self.control_dir.is_none();
        let dir = self
            .control_dir
            .get_or_insert_with(|| crate::control::prepare().map_err(|e| format!("{e:#}")));
        let warn = |e: &dyn std::fmt::Display| {
            eprintln!("[WARN] `weir list`/`weir stop` cannot reach this job: {e}");
        };
        match dir {
            Ok(dir) => crate::control::serve(dir, job, self.engine.config().savepoint_dir())
                .map_err(|e| warn(&format!("{e:#}")))
                .ok(),
            // An unusable folder is said once, at the first job.
            Err(e) => {
                if first {
                    warn(e);
                }
                None
            }
        }
    }

    /// Records jobs that ended since the last look.
    async fn refresh(&mut self) {
        for job in &mut self.jobs {
            if job.handle.as_ref().is_some_and(|h| h.is_finished()) {
                let handle = job.handle.take().expect("handle");
                job.status = match handle.wait().await {
                    Ok(_) => "FINISHED".into(),
                    Err(e) => format!("FAILED: {e}"),
                };
                job._control = None;
            }
            if job.remote.as_ref().is_some_and(|f| f.is_finished()) {
                let following = job.remote.take().expect("a follower");
                job.status = ended(following.await);
            }
        }
    }
}

/// The status of a cluster job whose follower ended.
fn ended(
    followed: Result<weir::Result<weir_cluster::coordinator::JobUpdate>, tokio::task::JoinError>,
) -> String {
    match followed {
        Ok(Ok(_)) => "FINISHED".into(),
        Ok(Err(e)) => format!("FAILED: {e}"),
        Err(e) => format!("FAILED: {e}"),
    }
}

fn statement_text(sql: &str, line: u64) -> String {
    let text: String = sql
        .lines()
        .skip(line.saturating_sub(1) as usize)
        .collect::<Vec<_>>()
        .join(" ");
    let text = text
        .split(';')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if text.len() > 60 {
        format!(
            "{}…",
            &text[..text
                .char_indices()
                .nth(59)
                .map(|(i, _)| i)
                .unwrap_or(text.len())]
        )
    } else {
        text
    }
}

pub async fn run(
    init: Option<PathBuf>,
    file: Option<PathBuf>,
    cluster: Option<String>,
) -> anyhow::Result<i32> {
    let mut engine = Engine::default();
    let mut coordinator = None;
    let mut ballista = None;
    if let Some(address) = cluster.as_ref().filter(|c| !weir_ballista::is_ballista(c)) {
        coordinator = Some(Coordinator::connect(address).await?);
        eprintln!(
            "[INFO] streaming INSERTs run on the Weir cluster at {address}; queries run here"
        );
    } else if let Some(address) = &cluster {
        ballista = Some(address.clone());
        weir_ballista::check_scheduler(address).await?;
        engine.set_batch_cluster(weir_ballista::client_session(
            address,
            engine.config().slot_request_timeout(),
        )?);
        engine.config_mut().set("execution.runtime-mode", "batch")?;
        eprintln!("[INFO] batch mode: queries run on the Ballista cluster at {address}");
    }
    let mut shell = Shell {
        engine,
        jobs: Vec::new(),
        interrupt: tokio::signal::unix::signal(SignalKind::interrupt())
            .context("cannot catch Ctrl-C")?,
        control_dir: None,
        ballista,
        coordinator,
    };
    for script in init.iter().chain(file.iter()) {
        let sql = std::fs::read_to_string(script)
            .with_context(|| format!("cannot read '{}'", script.display()))?;
        match shell.execute_text(&sql).await {
            Flow::Continue => {}
            // Flink's -f and -i stop at the first error.
            Flow::Failed => {
                shell.cancel_all();
                return Ok(1);
            }
            Flow::Quit => {
                shell.cancel_all();
                return Ok(0);
            }
        }
    }
    if file.is_some() {
        // Non-interactive: wait for the jobs the script started.
        let mut code = 0;
        for job in &mut shell.jobs {
            if let Some(h) = job.handle.take()
                && let Err(e) = h.wait().await
            {
                eprintln!("[ERROR] job {} failed: {e}", job.id);
                code = 1;
            }
            if let Some(following) = job.remote.take() {
                let status = ended(following.await);
                if status != "FINISHED" {
                    eprintln!("[ERROR] job {} on the cluster: {status}", job.id);
                    code = 1;
                }
            }
        }
        return Ok(code);
    }
    let mut editor = rustyline::DefaultEditor::new()?;
    let history = history_path();
    let _ = editor.load_history(&history);
    out!("Weir SQL shell. Statements end with ';'. HELP; lists them; Ctrl-D quits.");
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "weir> "
        } else {
            "   -> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                buffer.push_str(&line);
                buffer.push('\n');
                // HELP, QUIT and EXIT need no `;` on a line of their own.
                if complete(&buffer) || shell_command(&buffer).is_some() {
                    // The history file outlives the session: no secrets in it.
                    let entry = weir::common::redact::redact_sql(buffer.trim_end());
                    let _ = editor.add_history_entry(entry.as_ref());
                    let sql = std::mem::take(&mut buffer);
                    let flow = shell.execute_text(&sql).await;
                    let _ = std::io::stdout().flush();
                    if flow == Flow::Quit {
                        break;
                    }
                }
            }
            Err(ReadlineError::Interrupted) => buffer.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let _ = editor.save_history(&history);
    shell.cancel_all();
    Ok(0)
}

impl Shell {
    /// Leaving the shell cancels the jobs it started.
    fn cancel_all(&self) {
        for job in &self.jobs {
            if let Some(h) = &job.handle {
                h.cancel();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::complete;

    #[test]
    fn statements_end_at_semicolons_outside_quotes_and_comments() {
        assert!(complete("SELECT 1;"));
        assert!(!complete("SELECT ';'"));
        assert!(!complete("SELECT 1 -- ;\n"));
        assert!(complete("SET 'a' = 'b';\n"));
        assert!(!complete("SELECT 1; SELECT"));
        assert!(!complete(
            "EXECUTE STATEMENT SET BEGIN\nINSERT INTO a SELECT 1;"
        ));
        assert!(!complete(
            "BEGIN STATEMENT SET;\nINSERT INTO a SELECT CASE WHEN x THEN 1 END;"
        ));
        assert!(complete(
            "BEGIN STATEMENT SET;\nINSERT INTO a SELECT 1;\nINSERT INTO b SELECT 2;\nEND;"
        ));
        assert!(complete(
            "EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT 'end;'; END;"
        ));
    }
}
