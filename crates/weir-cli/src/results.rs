//! How the shell shows the rows of a streaming `SELECT`, by Flink's
//! `sql-client.execution.result-mode`:
//!
//! - `table` keeps the result up to date (inserts add rows, retractions remove them) and
//!   shows it as one table: redrawn each second on a terminal, and once more when the
//!   query ends (Ctrl-C, a LIMIT reached, bounded input read);
//! - `changelog` lists every change as it comes, with its kind (`+I`, `-U`, `+U`, `-D`);
//! - `tableau` lists the changes as the rows of one bordered table, as Flink's tableau
//!   mode does, with column widths taken from the column types.
//!
//! Rows come from every subtask through one collect sink, so nothing shows which subtask
//! produced a row.

use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};
use weir::common::changelog::{self, RowKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultMode {
    Table,
    Changelog,
    Tableau,
}

impl ResultMode {
    pub fn parse(s: &str) -> ResultMode {
        match s {
            "changelog" => ResultMode::Changelog,
            "tableau" => ResultMode::Tableau,
            _ => ResultMode::Table,
        }
    }
}

/// The widest a cell is shown in the changelog and tableau modes; longer values are cut
/// with `...`.
const MAX_WIDTH: usize = 30;

/// How wide a column of `data_type` is shown when rows arrive one by one (the widths
/// cannot wait for the data).
fn type_width(data_type: &DataType) -> usize {
    match data_type {
        DataType::Boolean => 5,
        DataType::Int8 | DataType::UInt8 => 4,
        DataType::Int16 | DataType::UInt16 => 6,
        DataType::Int32 | DataType::UInt32 => 11,
        DataType::Int64 | DataType::UInt64 => 20,
        DataType::Float32 | DataType::Float64 => 20,
        DataType::Decimal128(p, _) | DataType::Decimal256(p, _) => *p as usize + 2,
        DataType::Date32 | DataType::Date64 => 10,
        DataType::Time32(_) | DataType::Time64(_) => 12,
        DataType::Timestamp(_, _) => 23,
        _ => MAX_WIDTH,
    }
}

pub struct ResultView {
    mode: ResultMode,
    header: Vec<String>,
    /// Changelog and tableau modes: the fixed width of each column, `op` first.
    widths: Vec<usize>,
    /// Table mode: the current result, oldest row first.
    rows: VecDeque<Vec<String>>,
    /// Table mode: at most this many rows are kept (the oldest go first).
    max_rows: usize,
    /// Changes received.
    received: u64,
    /// Table mode on a terminal: redrawn while the query runs.
    live: bool,
    changed: bool,
    last_draw: Instant,
}

fn write_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

impl ResultView {
    /// A view of rows of `schema` (which may carry the changelog column). `live`: the
    /// table mode may redraw the screen.
    pub fn new(mode: ResultMode, schema: &Schema, max_rows: usize, live: bool) -> Self {
        let fields: Vec<_> = schema
            .fields()
            .iter()
            .filter(|f| f.name() != changelog::OP_COLUMN)
            .collect();
        let header: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
        let widths = std::iter::once(2)
            .chain(
                fields
                    .iter()
                    .map(|f| type_width(f.data_type()).max(f.name().chars().count())),
            )
            .collect();
        let view = Self {
            mode,
            header,
            widths,
            rows: VecDeque::new(),
            max_rows: max_rows.max(1),
            received: 0,
            live,
            changed: false,
            last_draw: Instant::now(),
        };
        match mode {
            ResultMode::Tableau => {
                let mut text = view.border();
                text.push_str(&view.line(&view.op_header()));
                text.push_str(&view.border());
                write_out(&text);
            }
            ResultMode::Changelog => write_out(&view.plain_line(&view.op_header())),
            ResultMode::Table => {}
        }
        view
    }

    /// Changes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    fn op_header(&self) -> Vec<String> {
        std::iter::once("op".to_string())
            .chain(self.header.iter().cloned())
            .collect()
    }

    fn fit(cell: &str, width: usize) -> String {
        if cell.chars().count() <= width {
            cell.to_string()
        } else {
            let cut: String = cell.chars().take(width.saturating_sub(3)).collect();
            format!("{cut}...")
        }
    }

    fn border(&self) -> String {
        let parts: Vec<String> = self.widths.iter().map(|w| "-".repeat(w + 2)).collect();
        format!("+{}+\n", parts.join("+"))
    }

    /// A tableau row: cells right-aligned, as Flink's tableau mode shows them.
    fn line(&self, cells: &[String]) -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&self.widths)
            .map(|(c, w)| format!(" {:>w$} ", Self::fit(c, *w)))
            .collect();
        format!("|{}|\n", parts.join("|"))
    }

    fn plain_line(&self, cells: &[String]) -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&self.widths)
            .map(|(c, w)| format!("{:>w$}", Self::fit(c, *w)))
            .collect();
        format!("{}\n", parts.join("  ").trim_end())
    }

    /// Takes a batch of changes.
    pub fn add(&mut self, batch: &RecordBatch) -> anyhow::Result<()> {
        let mut text = String::new();
        for (kind, cells) in weir::connectors::print::text_rows(batch, "<NULL>")? {
            self.received += 1;
            match self.mode {
                ResultMode::Table => self.apply(kind, cells),
                ResultMode::Tableau | ResultMode::Changelog => {
                    let cells: Vec<String> = std::iter::once(kind.short().to_string())
                        .chain(cells)
                        .collect();
                    if self.mode == ResultMode::Tableau {
                        text.push_str(&self.line(&cells));
                    } else {
                        text.push_str(&self.plain_line(&cells));
                    }
                }
            }
        }
        if !text.is_empty() {
            write_out(&text);
        }
        Ok(())
    }

    fn apply(&mut self, kind: RowKind, cells: Vec<String>) {
        self.changed = true;
        if kind.is_retraction() {
            if let Some(at) = self.rows.iter().rposition(|r| *r == cells) {
                self.rows.remove(at);
            }
        } else {
            if self.rows.len() == self.max_rows {
                self.rows.pop_front();
            }
            self.rows.push_back(cells);
        }
    }

    /// Table mode on a terminal: redraws the result if it changed in the last second.
    pub fn tick(&mut self) {
        if self.mode == ResultMode::Table
            && self.live
            && self.changed
            && self.last_draw.elapsed() >= Duration::from_secs(1)
        {
            // Clear the screen, then the table from the top.
            write_out("\x1b[2J\x1b[H");
            self.draw_table();
            out!(
                "{} row(s), refreshed each second; Ctrl-C ends the query",
                self.rows.len()
            );
            self.changed = false;
            self.last_draw = Instant::now();
        }
    }

    fn draw_table(&mut self) {
        crate::print_table(&self.header, self.rows.make_contiguous());
    }

    /// The query ended: closes the table (tableau) or shows the final result (table).
    pub fn finish(&mut self) {
        match self.mode {
            ResultMode::Tableau => {
                write_out(&self.border());
                out!("Received a total of {} rows", self.received);
            }
            ResultMode::Changelog => out!("Received a total of {} changes", self.received),
            ResultMode::Table => {
                self.draw_table();
                out!(
                    "{} row(s) in result ({} changes received)",
                    self.rows.len(),
                    self.received
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int8Array, Int64Array, StringArray};
    use arrow::datatypes::Field;
    use std::sync::Arc;

    #[test]
    fn table_mode_applies_retractions() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("n", DataType::Int64, false),
        ]));
        let mut view = ResultView::new(ResultMode::Table, &schema, 10, false);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "a", "a", "b"])),
                Arc::new(Int64Array::from(vec![1, 1, 2, 1])),
            ],
        )
        .unwrap();
        let ops = Arc::new(Int8Array::from(vec![
            RowKind::Insert as i8,
            RowKind::UpdateBefore as i8,
            RowKind::UpdateAfter as i8,
            RowKind::Insert as i8,
        ]));
        let batch = changelog::attach(&batch, ops).unwrap();
        view.add(&batch).unwrap();
        assert_eq!(view.received(), 4);
        let rows: Vec<_> = view.rows.iter().cloned().collect();
        assert_eq!(rows, [vec!["a", "2"], vec!["b", "1"]]);
    }

    #[test]
    fn tableau_cells_are_cut_to_the_type_width() {
        let schema = Schema::new(vec![Field::new("id", DataType::Int32, true)]);
        let view = ResultView::new(ResultMode::Changelog, &schema, 10, false);
        assert_eq!(view.widths, [2, 11]);
        assert_eq!(ResultView::fit("abcdefghij", 6), "abc...");
        assert_eq!(
            view.line(&["+I".into(), "7".into()]),
            "| +I |           7 |\n"
        );
    }
}
