//! `--format parquet`: the columns of [`super::record`], typed (text as
//! UTF-8 strings, counts as int32/int64, `update_time` as a UTC timestamp in
//! microseconds; optional text null when unset), Snappy-compressed, written
//! through the parquet crate's column writers (no Arrow) in row groups of at
//! most [`ROW_GROUP_ROWS`] rows or about [`ROW_GROUP_BYTES`] bytes, so memory
//! stays bounded whatever the ledger's size.

use super::record::Record;
use super::{Out, Sink};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::io;
use std::sync::Arc;
use tally_proto::v1 as pb;

/// Most rows in one row group.
pub const ROW_GROUP_ROWS: usize = 100_000;
/// Row groups are closed once their text reaches about this many bytes.
pub const ROW_GROUP_BYTES: usize = 64 * 1024 * 1024;

/// The schema, in the order of [`super::record::COLUMNS`] then the time.
pub const SCHEMA: &str = "message tally_row {
  required binary key (STRING);
  required binary status (STRING);
  optional binary rule (STRING);
  required int32 attempts_provider;
  required int32 attempts_content;
  required int32 attempts_infra;
  required int32 attempts_total;
  required int64 input_tokens;
  required int64 output_tokens;
  required int64 thinking_tokens;
  required int64 cached_tokens;
  optional binary model (STRING);
  optional binary prompt_name (STRING);
  optional binary prompt_version (STRING);
  optional binary job (STRING);
  optional binary last_error (STRING);
  optional binary result (STRING);
  optional binary payload (STRING);
  optional int64 update_time (TIMESTAMP(MICROS,true));
}";

/// A nullable column being filled: the values present and a definition
/// level per row (1 present, 0 null).
#[derive(Default)]
struct Nullable<T> {
    values: Vec<T>,
    defs: Vec<i16>,
}

impl<T> Nullable<T> {
    fn push(&mut self, v: Option<T>) {
        match v {
            Some(v) => {
                self.values.push(v);
                self.defs.push(1);
            }
            None => self.defs.push(0),
        }
    }
}

/// One row group's columns.
#[derive(Default)]
struct Group {
    key: Vec<ByteArray>,
    status: Vec<ByteArray>,
    attempts: [Vec<i32>; 4],
    tokens: [Vec<i64>; 4],
    /// rule, model, prompt_name, prompt_version, job, last_error, result, payload.
    text: [Nullable<ByteArray>; 8],
    time: Nullable<i64>,
    rows: usize,
    bytes: usize,
}

impl Group {
    fn push(&mut self, r: &Record<'_>) {
        self.key.push(ByteArray::from(r.key));
        self.status.push(ByteArray::from(r.status.as_str()));
        for (col, v) in self.attempts.iter_mut().zip(r.attempts) {
            col.push(v);
        }
        for (col, v) in self.tokens.iter_mut().zip(r.tokens) {
            col.push(v);
        }
        for (col, t) in self.text.iter_mut().zip(r.text) {
            col.push((!t.is_empty()).then(|| ByteArray::from(t)));
            self.bytes += t.len();
        }
        self.time.push(r.update_micros);
        self.bytes += r.key.len() + 64;
        self.rows += 1;
    }
}

pub struct ParquetSink {
    writer: SerializedFileWriter<Out>,
    group: Group,
}

fn err(e: parquet::errors::ParquetError) -> io::Error {
    io::Error::other(e)
}

impl ParquetSink {
    pub fn new(out: Out) -> io::Result<Self> {
        let schema = Arc::new(parse_message_type(SCHEMA).map_err(err)?);
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_created_by(format!("tallyctl {}", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        Ok(Self {
            writer: SerializedFileWriter::new(out, schema, props).map_err(err)?,
            group: Group::default(),
        })
    }

    /// Writes the buffered rows as one row group.
    fn flush_group(&mut self) -> io::Result<()> {
        if self.group.rows == 0 {
            return Ok(());
        }
        let g = std::mem::take(&mut self.group);
        let mut rg = self.writer.next_row_group().map_err(err)?;
        let mut i = 0;
        while let Some(mut col) = rg.next_column().map_err(err)? {
            match i {
                0 | 1 => {
                    let v = if i == 0 { &g.key } else { &g.status };
                    col.typed::<ByteArrayType>().write_batch(v, None, None)
                }
                2 => {
                    let t = &g.text[0];
                    col.typed::<ByteArrayType>()
                        .write_batch(&t.values, Some(&t.defs), None)
                }
                3..=6 => col
                    .typed::<Int32Type>()
                    .write_batch(&g.attempts[i - 3], None, None),
                7..=10 => col
                    .typed::<Int64Type>()
                    .write_batch(&g.tokens[i - 7], None, None),
                11..=17 => {
                    let t = &g.text[i - 10];
                    col.typed::<ByteArrayType>()
                        .write_batch(&t.values, Some(&t.defs), None)
                }
                18 => {
                    col.typed::<Int64Type>()
                        .write_batch(&g.time.values, Some(&g.time.defs), None)
                }
                _ => unreachable!("the schema has 19 columns"),
            }
            .map_err(err)?;
            col.close().map_err(err)?;
            i += 1;
        }
        rg.close().map_err(err)?;
        Ok(())
    }
}

impl Sink for ParquetSink {
    fn write_page(&mut self, rows: &[pb::Row]) -> io::Result<()> {
        for r in rows {
            self.group.push(&Record::of(r));
            if self.group.rows >= ROW_GROUP_ROWS || self.group.bytes >= ROW_GROUP_BYTES {
                self.flush_group()?;
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<Out> {
        self.flush_group()?;
        self.writer.into_inner().map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::record::{COLUMNS, TIME_COLUMN};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    /// The schema's columns are the record's, in order.
    #[test]
    fn the_schema_matches_the_record_columns() {
        let schema = parse_message_type(SCHEMA).unwrap();
        let names: Vec<&str> = schema.get_fields().iter().map(|f| f.name()).collect();
        let mut want: Vec<&str> = COLUMNS.to_vec();
        want.push(TIME_COLUMN);
        assert_eq!(names, want);
    }

    /// Rows written across several row groups read back with their values,
    /// unset text as null.
    #[test]
    fn rows_read_back_across_row_groups() {
        let mut sink = Box::new(ParquetSink::new(Out::Memory(Vec::new())).unwrap());
        let rows: Vec<pb::Row> = (0..(ROW_GROUP_ROWS + 5))
            .map(|i| pb::Row {
                key: format!("k{i}"),
                status: pb::RowStatus::Succeeded as i32,
                result: if i == 0 {
                    String::new()
                } else {
                    format!("{i}")
                },
                usage: Some(pb::Usage {
                    input_tokens: i as i64,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        for page in rows.chunks(1000) {
            sink.write_page(page).unwrap();
        }
        let bytes = bytes::Bytes::from(sink.finish().unwrap().into_bytes());
        let reader = SerializedFileReader::new(bytes).unwrap();
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows(), rows.len() as i64);
        assert_eq!(meta.num_row_groups(), 2);
        let got: Vec<_> = reader
            .get_row_iter(None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let col = |row: &parquet::record::Row, name: &str| {
            row.get_column_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| f.clone())
                .unwrap()
        };
        assert_eq!(col(&got[0], "key"), Field::Str("k0".into()));
        assert_eq!(col(&got[0], "result"), Field::Null);
        assert_eq!(col(&got[7], "result"), Field::Str("7".into()));
        assert_eq!(col(&got[7], "input_tokens"), Field::Long(7));
        assert_eq!(col(&got[7], "status"), Field::Str("SUCCEEDED".into()));
        assert_eq!(
            col(&got[rows.len() - 1], "key"),
            Field::Str(format!("k{}", rows.len() - 1))
        );
    }
}
