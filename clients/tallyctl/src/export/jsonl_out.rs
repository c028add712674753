//! `--format jsonl`: each row as the object `tallyctl rows list --full -o
//! jsonl` prints (every field of the Row message, the payload and result as
//! the JSON they hold), without the attempts history (`tallyctl rows get`
//! shows it).

use super::{Out, Sink, write_json_line};
use crate::render;
use serde_json::Value;
use std::io;
use tally_proto::v1 as pb;

pub struct JsonlSink {
    out: Out,
}

impl JsonlSink {
    pub fn new(out: Out) -> Self {
        Self { out }
    }
}

/// One row's line.
pub fn row_line(r: &pb::Row) -> Value {
    let mut v = render::row_json(r);
    if let Some(o) = v.as_object_mut() {
        // An export carries no history or superseded results (ListRows
        // has neither), so nothing of them is counted either.
        for key in [
            "history",
            "history_omitted",
            "superseded",
            "superseded_omitted",
        ] {
            o.remove(key);
        }
    }
    v
}

impl Sink for JsonlSink {
    fn write_page(&mut self, rows: &[pb::Row]) -> io::Result<()> {
        for r in rows {
            write_json_line(&mut self.out, &row_line(r))?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<Out> {
        let mut out = self.out;
        io::Write::flush(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Payload and result come out as JSON values, not strings holding JSON,
    /// and the history is left out.
    #[test]
    fn a_row_is_one_object_with_its_json_embedded() {
        let r = pb::Row {
            key: "k".into(),
            status: pb::RowStatus::Succeeded as i32,
            payload: r#"{"a":1}"#.into(),
            result: r#"{"answer":"yes"}"#.into(),
            rule: "success".into(),
            history: vec![pb::Attempt::default()],
            history_omitted: 3,
            ..Default::default()
        };
        let v = row_line(&r);
        assert_eq!(v["key"], "k");
        assert_eq!(v["status"], "SUCCEEDED");
        assert_eq!(v["payload"]["a"], 1);
        assert_eq!(v["result"]["answer"], "yes");
        assert_eq!(v["rule"], "success");
        assert!(v.get("history").is_none());
        assert!(v.get("history_omitted").is_none());
    }
}
