//! `'connector' = 'print'`: writes every row to standard output (or standard error) as
//! Flink does: `+I[1, foo]` (or `-U`, `+U`, `-D` for the rows of an updating query), prefixed by `identifier:` and by `N> ` (the 1-based subtask)
//! when the parallelism is above one.

use arrow::array::Array;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use std::io::Write;
use weir_common::changelog::RowKind;
use weir_common::{ConnectorOptions, Result};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};

pub const OPTIONS: &[&str] = &["connector", "print-identifier", "standard-error"];

pub struct PrintSinkFactory {
    identifier: Option<String>,
    stderr: bool,
}

impl PrintSinkFactory {
    pub fn new(options: &ConnectorOptions) -> Result<Self> {
        options.check_known("print", OPTIONS)?;
        Ok(Self {
            identifier: options.get("print-identifier").map(str::to_string),
            stderr: options.get_bool("standard-error")?.unwrap_or(false),
        })
    }
}

struct PrintSink {
    prefix: String,
    stderr: bool,
}

/// Each row of `batch` (which may be a changelog) as its kind and its values as text,
/// a null written as `null`.
pub fn text_rows(batch: &RecordBatch, null: &str) -> Result<Vec<(RowKind, Vec<String>)>> {
    let (batch, ops) = weir_common::changelog::split(batch);
    let options = FormatOptions::default().with_null(null);
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref() as &dyn Array, &options))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|row| {
            let kind = weir_common::changelog::kind_at(ops.as_ref(), row);
            (
                kind,
                formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect(),
            )
        })
        .collect())
}

/// Formats each row of `batch` as Flink's `+I[a, b]`.
/// A changelog batch shows each row's kind (`-U[…]`, `+U[…]`, `-D[…]`).
pub fn format_rows(batch: &RecordBatch) -> Result<Vec<String>> {
    Ok(text_rows(batch, "null")?
        .into_iter()
        .map(|(kind, values)| format!("{}[{}]", kind.short(), values.join(", ")))
        .collect())
}

#[async_trait]
impl Operator for PrintSink {
    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        let mut text = String::new();
        for row in format_rows(&batch)? {
            text.push_str(&self.prefix);
            text.push_str(&row);
            text.push('\n');
        }
        if self.stderr {
            std::io::stderr().lock().write_all(text.as_bytes())?;
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
        Ok(())
    }
}

impl OperatorFactory for PrintSinkFactory {
    fn name(&self) -> String {
        "Sink: print".into()
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let mut prefix = String::new();
        if let Some(id) = &self.identifier {
            prefix.push_str(id);
            prefix.push(':');
        }
        if task.parallelism > 1 {
            prefix.push_str(&format!("{}> ", task.subtask + 1));
        } else if !prefix.is_empty() {
            prefix.push(' ');
        }
        Ok(Box::new(PrintSink {
            prefix,
            stderr: self.stderr,
        }))
    }
    fn is_sink(&self) -> bool {
        true
    }
}
