//! `--format csv`: a header, then one RFC 4180 record per row (fields
//! quoted when they hold a comma, quote or line break), in the columns of
//! [`super::record`]; `update_time` as RFC 3339.

use super::record::{COLUMNS, Record, TIME_COLUMN};
use super::{Out, Sink};
use std::io;
use tally_proto::v1 as pb;

pub struct CsvSink {
    writer: csv::Writer<Out>,
}

impl CsvSink {
    /// `header`: false when continuing a file that has one.
    pub fn new(out: Out, header: bool) -> io::Result<Self> {
        let mut writer = csv::WriterBuilder::new()
            .terminator(csv::Terminator::CRLF)
            .from_writer(out);
        if header {
            writer
                .write_record(COLUMNS.iter().chain([&TIME_COLUMN]))
                .map_err(io::Error::other)?;
        }
        Ok(Self { writer })
    }
}

impl Sink for CsvSink {
    fn write_page(&mut self, rows: &[pb::Row]) -> io::Result<()> {
        for r in rows {
            self.writer
                .write_record(Record::of(r).fields())
                .map_err(io::Error::other)?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<Out> {
        self.writer
            .into_inner()
            .map_err(|e| io::Error::other(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quotes, commas and line breaks in a field survive a round trip
    /// through a CSV reader; the header names every column.
    #[test]
    fn fields_are_quoted_per_rfc_4180() {
        let mut sink = Box::new(CsvSink::new(Out::Memory(Vec::new()), true).unwrap());
        let row = pb::Row {
            key: "a".into(),
            result: "\"say \"\"hi\"\"\",\nnext".into(),
            status: pb::RowStatus::Succeeded as i32,
            ..Default::default()
        };
        sink.write_page(std::slice::from_ref(&row)).unwrap();
        let bytes = sink.finish().unwrap().into_bytes();
        let mut reader = csv::Reader::from_reader(bytes.as_slice());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header.len(), COLUMNS.len() + 1);
        assert_eq!(header[0], "key");
        assert_eq!(header.last().unwrap(), "update_time");
        let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 1);
        let result_at = COLUMNS.iter().position(|c| *c == "result").unwrap();
        assert_eq!(&records[0][result_at], row.result);
        assert_eq!(&records[0][1], "SUCCEEDED");
    }

    /// Continuing a file writes no second header.
    #[test]
    fn no_header_when_continuing() {
        let mut sink = Box::new(CsvSink::new(Out::Memory(Vec::new()), false).unwrap());
        sink.write_page(&[pb::Row {
            key: "b".into(),
            ..Default::default()
        }])
        .unwrap();
        let text = String::from_utf8(sink.finish().unwrap().into_bytes()).unwrap();
        assert!(text.starts_with("b,"), "{text}");
        assert_eq!(text.lines().count(), 1);
    }
}
