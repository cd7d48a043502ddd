//! The SQL shell: statements end with `;` and may span lines; `SET`, `RESET`, `SHOW`,
//! `DESCRIBE`, `EXPLAIN` act at once; a `SELECT` over bounded tables prints a table, over
//! unbounded ones it streams rows until Ctrl-C (which cancels the query, not the shell);
//! `INSERT INTO` starts a job in the background (a statement set, one job for all its
//! INSERTs, is read up to its `END;`); `SHOW JOBS` and
//! `STOP JOB 'id' [WITH SAVEPOINT] [DRAIN]` manage them. Errors never end the shell; SQL
//! errors show the statement line with a caret under the position.

use anyhow::Context;
use rustyline::error::ReadlineError;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use weir::sql::WeirStatement;
use weir::{Engine, Outcome};

struct Job {
    id: String,
    statement: String,
    handle: Option<weir::JobHandle>,
    status: String,
    metrics: std::sync::Arc<weir::runtime::JobMetrics>,
}

struct Shell {
    engine: Engine,
    jobs: Vec<Job>,
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
    async fn execute_text(&mut self, sql: &str) {
        let statements = match self.engine.parse(sql) {
            Ok(s) => s,
            Err(e) => return show_error(sql, &e),
        };
        for stmt in statements {
            if let Err(e) = self.execute(&stmt, sql).await {
                match e.downcast::<weir::Error>() {
                    Ok(e) => show_error(sql, &e),
                    Err(e) => eprintln!("[ERROR] {e:#}"),
                }
            }
        }
    }

    async fn execute(&mut self, stmt: &weir::sql::Located, sql: &str) -> anyhow::Result<()> {
        if let WeirStatement::Select(query) = &stmt.statement
            && (self.engine.config().runtime_mode() == weir::common::RuntimeMode::Batch
                || self.engine.query_is_bounded(query).await?)
        {
            let started = Instant::now();
            let query = self.engine.plan_batch_select(query).await?;
            if let weir::engine::BatchResult::Rows(batches) = self.engine.run_batch(&query).await? {
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                if let Some(b) = batches.first() {
                    let types: Vec<String> = b
                        .schema()
                        .fields()
                        .iter()
                        .map(|f| {
                            format!("{} {}", f.name(), weir::sql::types::sql_name(f.data_type()))
                        })
                        .collect();
                    out!("{}", arrow::util::pretty::pretty_format_batches(&batches)?);
                    out!("columns: {}", types.join(", "));
                }
                out!(
                    "{rows} row(s) in set ({:.2} sec)",
                    started.elapsed().as_secs_f64()
                );
            }
            return Ok(());
        }
        match self.engine.execute(stmt).await? {
            Outcome::Done(msg) => out!("[INFO] {msg}"),
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
            Outcome::Job(plans) => {
                let is_select = matches!(stmt.statement, WeirStatement::Select(_));
                let graph = self.engine.build_job(&plans).await?;
                let mut job = self.engine.start(graph, None).await?;
                if is_select {
                    out!("[INFO] streaming results; press Ctrl-C to stop");
                    let limit = plans.last().and_then(|p| p.shown_limit());
                    let metrics = job.metrics.clone();
                    let all_shown = async {
                        match limit {
                            Some(n) => {
                                while metrics.rows_out() < n as u64 {
                                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                                }
                            }
                            None => std::future::pending().await,
                        }
                    };
                    let ended = tokio::select! {
                        r = job.finished() => { r?; None }
                        _ = tokio::signal::ctrl_c() => Some("\n[INFO] query cancelled".to_string()),
                        _ = all_shown => Some(format!("[INFO] LIMIT {} reached; query ended", limit.unwrap_or(0))),
                    };
                    if let Some(message) = ended {
                        job.cancel();
                        let _ = job.finished().await;
                        out!("{message}");
                    }
                } else {
                    let id = job.job_id.to_string();
                    out!("[INFO] Submitted job {id}");
                    let text = statement_text(sql, stmt.location.line);
                    self.jobs.push(Job {
                        id,
                        statement: text,
                        metrics: job.metrics.clone(),
                        handle: Some(job),
                        status: "RUNNING".into(),
                    });
                }
            }
            Outcome::JobControl(WeirStatement::ShowJobs) => {
                self.refresh().await;
                let rows = self
                    .jobs
                    .iter()
                    .map(|j| {
                        let status = if j.handle.is_some() && j.metrics.is_restarting() {
                            "RESTARTING".to_string()
                        } else {
                            j.status.clone()
                        };
                        vec![
                            j.id.clone(),
                            status,
                            j.metrics.rows_in().to_string(),
                            j.metrics.rows_out().to_string(),
                            j.metrics.restarts().to_string(),
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
            Outcome::JobControl(WeirStatement::StopJob {
                id,
                savepoint,
                drain,
            }) => {
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
                    .find(|j| j.id.starts_with(id.as_str()) && j.handle.is_some())
                    .with_context(|| format!("no running job '{id}' (see SHOW JOBS)"))?;
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
            }
            Outcome::JobControl(_) => {}
        }
        Ok(())
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
            }
        }
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

pub async fn run(init: Option<PathBuf>, file: Option<PathBuf>) -> anyhow::Result<i32> {
    let mut shell = Shell {
        engine: Engine::default(),
        jobs: Vec::new(),
    };
    for script in init.iter().chain(file.iter()) {
        let sql = std::fs::read_to_string(script)
            .with_context(|| format!("cannot read '{}'", script.display()))?;
        shell.execute_text(&sql).await;
    }
    if file.is_some() {
        // Non-interactive: wait for the jobs the script started.
        for job in &mut shell.jobs {
            if let Some(h) = job.handle.take() {
                h.wait().await?;
            }
        }
        return Ok(0);
    }
    let mut editor = rustyline::DefaultEditor::new()?;
    let history = history_path();
    let _ = editor.load_history(&history);
    out!("Weir SQL shell. Statements end with ';'. Ctrl-D quits.");
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
                if complete(&buffer) {
                    // The history file outlives the session: no secrets in it.
                    let entry = weir::common::redact::redact_sql(buffer.trim_end());
                    let _ = editor.add_history_entry(entry.as_ref());
                    let sql = std::mem::take(&mut buffer);
                    shell.execute_text(&sql).await;
                    let _ = std::io::stdout().flush();
                }
            }
            Err(ReadlineError::Interrupted) => buffer.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let _ = editor.save_history(&history);
    for job in &shell.jobs {
        if let Some(h) = &job.handle {
            h.cancel();
        }
    }
    Ok(0)
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
