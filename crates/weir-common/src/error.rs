//! One error type for the whole engine. Variants separate *user* errors (bad SQL, bad
//! options, bad input files), *external* failures (I/O, object store) and *internal*
//! errors, which are bugs and say so.

use std::fmt;

/// Line and column (1-based) of a position in SQL text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlLocation {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for SqlLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Errors of every Weir crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The SQL text does not parse, or names something that does not exist.
    #[error("SQL error{}: {message}", .location.map(|l| format!(" at {l}")).unwrap_or_default())]
    Sql {
        message: String,
        location: Option<SqlLocation>,
    },

    /// The SQL is valid but cannot be planned (an unsupported feature, a type mismatch).
    #[error("planning error: {0}")]
    Plan(String),

    /// A connector option, a `SET` key or a command-line value is wrong.
    #[error("configuration error: {0}")]
    Config(String),

    /// Input data that cannot be read: a missing path, a corrupt file, a schema mismatch.
    #[error("input error: {0}")]
    Input(String),

    /// Failure of the outside world: file system, object store, network.
    #[error("I/O error: {0}")]
    External(String),

    /// Reading or writing checkpoint state failed or found inconsistent data.
    #[error("checkpoint error: {0}")]
    Checkpoint(String),

    /// A checkpoint's files do not match the checksums it recorded (or do not decode):
    /// it must not be restored. `--restore latest` falls back to an older checkpoint.
    #[error("corrupt checkpoint: {0}")]
    CorruptCheckpoint(String),

    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),

    #[error(transparent)]
    DataFusion(#[from] datafusion::error::DataFusionError),

    #[error("object store error: {0}")]
    ObjectStore(#[from] object_store::Error),

    /// An error another Weir process reported (a worker, a coordinator), as it said it.
    #[error("{0}")]
    Remote(String),

    /// The job was cancelled (by the user or because another task failed).
    #[error("job cancelled")]
    Cancelled,

    /// A bug in Weir. Please report it.
    #[error("internal error (this is a bug in Weir): {0}")]
    Internal(String),
}

/// Result alias used throughout Weir.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn plan(msg: impl Into<String>) -> Self {
        Error::Plan(msg.into())
    }
    pub fn config(msg: impl Into<String>) -> Self {
        Error::Config(msg.into())
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Error::Internal(msg.into())
    }
    pub fn external(msg: impl Into<String>) -> Self {
        Error::External(msg.into())
    }
    pub fn input(msg: impl Into<String>) -> Self {
        Error::Input(msg.into())
    }
    pub fn sql(msg: impl Into<String>, location: Option<SqlLocation>) -> Self {
        Error::Sql {
            message: msg.into(),
            location,
        }
    }

    /// True for errors caused by what the user wrote (SQL, options, input files).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Error::Sql { .. } | Error::Plan(_) | Error::Config(_) | Error::Input(_)
        )
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::External(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Checkpoint(format!("cannot (de)serialize state: {e}"))
    }
}

impl From<sqlparser::parser::ParserError> for Error {
    fn from(e: sqlparser::parser::ParserError) -> Self {
        let text = e.to_string();
        let location = parse_location(&text);
        let message = text
            .trim_start_matches("sql parser error: ")
            .split(" at Line: ")
            .next()
            .unwrap_or_default()
            .to_string();
        Error::Sql { message, location }
    }
}

/// sqlparser puts "at Line: L, Column: C" into its messages; take it back out.
fn parse_location(text: &str) -> Option<SqlLocation> {
    let rest = &text[text.find("Line: ")? + 6..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let column: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some(SqlLocation {
        line: line.trim().parse().ok()?,
        column: column.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_error_keeps_line_and_column() {
        let e = Error::from(sqlparser::parser::ParserError::ParserError(
            "Expected: an expression, found: FROM at Line: 3, Column: 8".into(),
        ));
        match e {
            Error::Sql { location, message } => {
                assert_eq!(location, Some(SqlLocation { line: 3, column: 8 }));
                assert_eq!(message, "Expected: an expression, found: FROM");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
