//! `tallyctl export`: rows out in the formats data people use. Each format
//! is a [`Sink`] that takes pages of FULL rows and writes them as they come,
//! holding at most one page (or, for Parquet, one row group) in memory:
//! - [`jsonl_out`]: tally's own shape, one row per line;
//! - [`openai_out`]: the OpenAI batch *output* format;
//! - [`csv_out`] and [`parquet_out`]: the flat, typed columns of [`record`].
//!
//! The row mappings are pure functions, tested without a server; the
//! command that pages, shows progress and prints the cursor is
//! [`crate::commands::export`].

pub mod csv_out;
pub mod jsonl_out;
pub mod openai_out;
pub mod parquet_out;
pub mod record;

use clap::ValueEnum;
use std::io::{self, Write};
use tally_proto::v1 as pb;

/// The format of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ExportFormat {
    /// One JSON object per row, tally's own shape.
    #[default]
    Jsonl,
    /// OpenAI batch output lines (`id`, `custom_id`, `response`, `error`).
    Openai,
    /// A header and one record per row (RFC 4180).
    Csv,
    /// Typed columns in row groups.
    Parquet,
}

impl ExportFormat {
    /// Whether a file can be continued (`--after` into an existing file):
    /// every line-based format can; a Parquet file ends with its footer.
    pub fn appendable(self) -> bool {
        match self {
            ExportFormat::Jsonl | ExportFormat::Openai | ExportFormat::Csv => true,
            ExportFormat::Parquet => false,
        }
    }
}

/// Where an export goes; the file is kept to be fsynced at the end.
pub enum Out {
    File(io::BufWriter<std::fs::File>),
    Stdout(io::BufWriter<io::Stdout>),
    /// For tests.
    Memory(Vec<u8>),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::File(w) => w.write(buf),
            Out::Stdout(w) => w.write(buf),
            Out::Memory(v) => v.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Out::File(w) => w.write_all(buf),
            Out::Stdout(w) => w.write_all(buf),
            Out::Memory(v) => v.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::File(w) => w.flush(),
            Out::Stdout(w) => w.flush(),
            Out::Memory(_) => Ok(()),
        }
    }
}

impl Out {
    /// Flushes, and for a file waits until its bytes are on disk.
    pub fn sync(self) -> io::Result<()> {
        match self {
            Out::File(w) => {
                let file = w.into_inner().map_err(|e| e.into_error())?;
                file.sync_all()
            }
            Out::Stdout(mut w) => w.flush(),
            Out::Memory(_) => Ok(()),
        }
    }

    /// The bytes written (tests).
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Out::Memory(v) => v,
            Out::File(_) | Out::Stdout(_) => Vec::new(),
        }
    }
}

/// A format's writer.
pub trait Sink {
    /// Writes one page of rows (FULL view), in order.
    fn write_page(&mut self, rows: &[pb::Row]) -> io::Result<()>;
    /// Writes what is buffered (and the footer, for Parquet); the output
    /// holds every row written so far, complete, afterwards.
    fn finish(self: Box<Self>) -> io::Result<Out>;
}

/// The sink of a format. `header`: whether a CSV header is written (not
/// when continuing a file that has one). `ledger` names the ledger in
/// OpenAI output ids.
pub fn sink(
    format: ExportFormat,
    out: Out,
    ledger: &str,
    header: bool,
) -> io::Result<Box<dyn Sink>> {
    Ok(match format {
        ExportFormat::Jsonl => Box::new(jsonl_out::JsonlSink::new(out)),
        ExportFormat::Openai => Box::new(openai_out::OpenaiSink::new(out, ledger)),
        ExportFormat::Csv => Box::new(csv_out::CsvSink::new(out, header)?),
        ExportFormat::Parquet => Box::new(parquet_out::ParquetSink::new(out)?),
    })
}

/// Writes each value as one compact JSON line.
pub(crate) fn write_json_line(out: &mut Out, value: &serde_json::Value) -> io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}
