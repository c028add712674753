//! How results are printed: `-o table|wide|json|jsonl|yaml` and
//! `--no-headers`.
//!
//! Machine output is made from the proto messages *generically*: a message
//! is encoded, decoded as a [`prost_reflect::DynamicMessage`] against
//! tally-proto's descriptor set, and walked field by field, so a field added
//! to a `.proto` file appears in `-o json|jsonl|yaml` with no code here. The
//! walk keeps tallyctl's conventions (which the hand-written projections it
//! replaces had): proto field names in snake_case, enum names without their
//! type prefix (`PERMANENT`, not `ROW_STATUS_PERMANENT`; `UNKNOWN(n)` for a
//! number this build does not know), 64-bit integers as JSON numbers, times
//! as RFC 3339 UTC strings, durations in human form (`30m`), unset messages
//! and unset `optional` fields as `null`, and the string fields that hold
//! JSON text (a row's payload and result, a prompt's schema) as the JSON
//! they hold.
//!
//! YAML is emitted by `yaml-rust2` from the same JSON value: a pure-Rust,
//! maintained YAML 1.2 library (serde_yaml is deprecated, its fork serde_yml
//! is flagged unsound, and the other forks carry a machine-translated C
//! libyaml); the tests read its output back with an independent parser.

use crate::error::CliError;
use crate::table::Table;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, ReflectMessage as _};
use serde_json::{Map, Value};
use std::sync::OnceLock;
use tally_proto::v1 as pb;

/// `-o`: how results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people (the default).
    #[default]
    Table,
    /// The table with more columns.
    Wide,
    /// One pretty JSON document.
    Json,
    /// One compact JSON object per line (a list prints one line per item).
    Jsonl,
    /// One YAML document.
    Yaml,
}

impl Format {
    /// JSON, JSONL or YAML: no tables, no progress bars, errors as JSON.
    pub fn is_machine(self) -> bool {
        match self {
            Format::Json | Format::Jsonl | Format::Yaml => true,
            Format::Table | Format::Wide => false,
        }
    }
}

/// A generated tally.v1 message whose descriptor is in tally-proto's
/// descriptor set.
pub trait ProtoMessage: prost::Message + Sized {
    /// The message's full proto name (`tally.v1.Row`).
    const FULL_NAME: &'static str;
}

macro_rules! proto_messages {
    ($($t:ident),* $(,)?) => {
        $(impl ProtoMessage for pb::$t {
            const FULL_NAME: &'static str = concat!("tally.v1.", stringify!($t));
        })*
        /// Every message tallyctl prints (the tests check each one).
        pub const PRINTED: &[&str] = &[$(concat!("tally.v1.", stringify!($t))),*];
    };
}

proto_messages!(
    Ledger,
    LedgerSummary,
    Row,
    Attempt,
    Job,
    Lock,
    Operation,
    OperationEventRecord,
    GoldenSet,
    Prompt,
    RedriveRowsResponse,
    ResultDelivery,
);

/// String fields that hold JSON text, shown as the JSON they hold (a string
/// when they do not parse, null when empty).
const JSON_TEXT_FIELDS: &[&str] = &[
    "tally.v1.Row.payload",
    "tally.v1.Row.result",
    "tally.v1.Row.response",
    "tally.v1.SupersededResult.result",
    "tally.v1.Prompt.response_schema",
    "tally.v1.GoldenRow.payload",
    "tally.v1.GoldenRow.expected",
    "tally.v1.ResultDelivery.result",
    "tally.v1.ResultDelivery.payload",
];

/// tally-proto's descriptors, decoded once.
pub fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(tally_proto::FILE_DESCRIPTOR_SET)
            .expect("tally-proto's descriptor set decodes (it is built with the same protos)")
    })
}

/// The descriptor of a printed message.
pub fn descriptor(full_name: &str) -> MessageDescriptor {
    pool()
        .get_message_by_name(full_name)
        .unwrap_or_else(|| panic!("{full_name} is in tally-proto's descriptor set"))
}

/// A message as JSON, every field of its descriptor present.
pub fn to_json<M: ProtoMessage>(m: &M) -> Value {
    let bytes = m.encode_to_vec();
    let dynamic = DynamicMessage::decode(descriptor(M::FULL_NAME), bytes.as_slice())
        .expect("a message decodes against its own descriptor");
    message_json(&dynamic)
}

/// A dynamic message as JSON (see the module doc for the conventions).
pub fn message_json(m: &DynamicMessage) -> Value {
    let desc = m.descriptor();
    match desc.full_name() {
        "google.protobuf.Timestamp" => return timestamp_json(m),
        "google.protobuf.Duration" => return duration_json(m),
        _ => {}
    }
    let mut out = Map::new();
    for field in desc.fields() {
        let unset_message = matches!(field.kind(), Kind::Message(_))
            && !field.is_list()
            && !field.is_map()
            && !m.has_field(&field);
        let unset_optional = field.supports_presence() && !m.has_field(&field);
        let value = if unset_message || unset_optional {
            Value::Null
        } else {
            let v = m.get_field(&field);
            if JSON_TEXT_FIELDS.contains(&field.full_name()) {
                embedded_json(v.as_str().unwrap_or_default())
            } else {
                value_json(&v, &field.kind())
            }
        };
        out.insert(field.name().to_string(), value);
    }
    Value::Object(out)
}

fn value_json(v: &prost_reflect::Value, kind: &Kind) -> Value {
    use prost_reflect::Value as V;
    match v {
        V::Bool(b) => Value::Bool(*b),
        V::I32(n) => Value::from(*n),
        V::I64(n) => Value::from(*n),
        V::U32(n) => Value::from(*n),
        V::U64(n) => Value::from(*n),
        V::F32(x) => float_json(f64::from(*x)),
        V::F64(x) => float_json(*x),
        V::String(s) => Value::String(s.clone()),
        V::Bytes(b) => Value::String(hex(b)),
        V::EnumNumber(n) => match kind {
            Kind::Enum(e) => Value::String(enum_name(e, *n)),
            _ => Value::from(*n),
        },
        V::Message(m) => message_json(m),
        V::List(items) => Value::Array(items.iter().map(|i| value_json(i, kind)).collect()),
        V::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            let mut pairs: Vec<(String, Value)> = entries
                .iter()
                .map(|(k, v)| (map_key(k), value_json(v, &value_kind)))
                .collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(pairs.into_iter().collect())
        }
    }
}

fn map_key(k: &prost_reflect::MapKey) -> String {
    use prost_reflect::MapKey as K;
    match k {
        K::Bool(b) => b.to_string(),
        K::I32(n) => n.to_string(),
        K::I64(n) => n.to_string(),
        K::U32(n) => n.to_string(),
        K::U64(n) => n.to_string(),
        K::String(s) => s.clone(),
    }
}

/// Finite numbers as numbers; NaN and infinities as their names.
fn float_json(x: f64) -> Value {
    serde_json::Number::from_f64(x)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(x.to_string()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `PERMANENT` for `ROW_STATUS_PERMANENT` of `RowStatus`.
fn enum_name(e: &prost_reflect::EnumDescriptor, n: i32) -> String {
    let Some(value) = e.get_value(n) else {
        return format!("UNKNOWN({n})");
    };
    let mut prefix = String::new();
    for (i, c) in e.name().chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            prefix.push('_');
        }
        prefix.push(c.to_ascii_uppercase());
    }
    prefix.push('_');
    let name = value.name();
    name.strip_prefix(&prefix).unwrap_or(name).to_string()
}

fn int_field(m: &DynamicMessage, name: &str) -> i64 {
    match m.get_field_by_name(name).as_deref() {
        Some(prost_reflect::Value::I64(n)) => *n,
        Some(prost_reflect::Value::I32(n)) => i64::from(*n),
        _ => 0,
    }
}

fn timestamp_json(m: &DynamicMessage) -> Value {
    let t = prost_types::Timestamp {
        seconds: int_field(m, "seconds"),
        nanos: int_field(m, "nanos") as i32,
    };
    Value::String(crate::timefmt::time(Some(&t)))
}

fn duration_json(m: &DynamicMessage) -> Value {
    let d = prost_types::Duration {
        seconds: int_field(m, "seconds"),
        nanos: int_field(m, "nanos") as i32,
    };
    match std::time::Duration::try_from(d) {
        Ok(_) => Value::String(crate::timefmt::duration(Some(&d))),
        // Negative: not human-formattable; exact seconds instead.
        Err(_) => Value::String(format!("{}s", d.seconds)),
    }
}

/// A JSON text field as the JSON it holds; a string when it does not
/// parse; null when empty.
pub fn embedded_json(text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

// ---- YAML ---------------------------------------------------------------------

fn to_yaml_value(v: &Value) -> yaml_rust2::Yaml {
    use yaml_rust2::Yaml;
    match v {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            // u64 past i64 and floats: their JSON spelling is a YAML 1.2
            // number too.
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(items) => Yaml::Array(items.iter().map(to_yaml_value).collect()),
        Value::Object(map) => Yaml::Hash(
            map.iter()
                .map(|(k, v)| (Yaml::String(k.clone()), to_yaml_value(v)))
                .collect(),
        ),
    }
}

/// A JSON value as one YAML document (`---` first, a newline last).
pub fn yaml(v: &Value) -> String {
    let mut out = String::new();
    let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
    emitter.multiline_strings(true);
    emitter
        .dump(&to_yaml_value(v))
        .expect("writing YAML to a String cannot fail");
    out.push('\n');
    out
}

// ---- printing -----------------------------------------------------------------

/// How the global flags asked for results to be printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Printer {
    pub format: Format,
    pub no_headers: bool,
}

impl Printer {
    /// One document (a get, or a command's report).
    pub fn document(&self, v: &Value) -> String {
        match self.format {
            Format::Jsonl => format!("{v}\n"),
            Format::Yaml => yaml(v),
            Format::Json | Format::Table | Format::Wide => format!(
                "{}\n",
                serde_json::to_string_pretty(v).expect("JSON values always serialize")
            ),
        }
    }

    /// A list: `-o json|yaml` print `{key: [items], truncated}`; `-o jsonl`
    /// one item per line (a truncation is said on stderr by the caller).
    pub fn list(&self, key: &str, items: Vec<Value>, truncated: Option<bool>) -> String {
        if self.format == Format::Jsonl {
            return items.iter().map(|i| format!("{i}\n")).collect();
        }
        let mut doc = Map::new();
        doc.insert(key.to_string(), Value::Array(items));
        if let Some(t) = truncated {
            doc.insert("truncated".to_string(), Value::Bool(t));
        }
        self.document(&Value::Object(doc))
    }

    /// A table, with or without its header line.
    pub fn table(&self, t: &Table) -> String {
        if self.no_headers {
            t.render_rows()
        } else {
            t.render()
        }
    }

    pub fn wide(&self) -> bool {
        self.format == Format::Wide
    }
}

/// `-o` and `--json` together: `--json` is `-o json`; anything else with
/// it is a contradiction.
pub fn resolve(output: Option<Format>, json: bool) -> Result<Format, CliError> {
    match (output, json) {
        (None, false) => Ok(Format::Table),
        (None, true) | (Some(Format::Json), true) => Ok(Format::Json),
        (Some(f), false) => Ok(f),
        (Some(_), true) => Err(CliError::usage(
            "--json is -o json: give one of them, not both",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use prost_reflect::Value as V;

    /// Every field of `desc` set to a value that is not its default,
    /// recursively (each list and map with one entry), so nothing can hide
    /// behind "unset".
    fn populated(desc: &MessageDescriptor, depth: usize) -> DynamicMessage {
        let mut m = DynamicMessage::new(desc.clone());
        if desc.full_name() == "google.protobuf.Timestamp" {
            m.set_field_by_name("seconds", V::I64(1_700_000_000));
            return m;
        }
        if desc.full_name() == "google.protobuf.Duration" {
            m.set_field_by_name("seconds", V::I64(90));
            return m;
        }
        for field in desc.fields() {
            let one = |kind: &Kind| -> V {
                match kind {
                    Kind::Bool => V::Bool(true),
                    Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => V::I32(7),
                    Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => V::I64(7),
                    Kind::Uint32 | Kind::Fixed32 => V::U32(7),
                    Kind::Uint64 | Kind::Fixed64 => V::U64(7),
                    Kind::Float => V::F32(0.5),
                    Kind::Double => V::F64(0.5),
                    Kind::String => V::String(format!("{{\"{}\":1}}", field.name())),
                    Kind::Bytes => V::Bytes(vec![1, 2].into()),
                    Kind::Enum(e) => V::EnumNumber(e.values().last().unwrap().number()),
                    Kind::Message(d) => V::Message(populated(d, depth + 1)),
                }
            };
            if depth > 4 {
                break;
            }
            let value = if field.is_map() {
                let Kind::Message(entry) = field.kind() else {
                    unreachable!()
                };
                let mut map = std::collections::HashMap::new();
                let key = match one(&entry.map_entry_key_field().kind()) {
                    V::String(s) => prost_reflect::MapKey::String(s),
                    V::I32(n) => prost_reflect::MapKey::I32(n),
                    V::I64(n) => prost_reflect::MapKey::I64(n),
                    V::Bool(b) => prost_reflect::MapKey::Bool(b),
                    other => panic!("map key {other:?}"),
                };
                map.insert(key, one(&entry.map_entry_value_field().kind()));
                V::Map(map)
            } else if field.is_list() {
                V::List(vec![one(&field.kind())])
            } else {
                one(&field.kind())
            };
            m.set_field(&field, value);
        }
        m
    }

    fn same_message<M: ProtoMessage + Default>() {
        // Invariant: every field of every printed message appears in the
        // JSON, with a value (not null) when the field is set, at every
        // level; and the Rust type and the descriptor name agree (decoding
        // the populated message as `M` and printing it loses nothing).
        let desc = descriptor(M::FULL_NAME);
        let dynamic = populated(&desc, 0);
        let typed = M::decode(dynamic.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            typed.encode_to_vec(),
            dynamic.encode_to_vec(),
            "{} does not match its Rust type (unknown fields were dropped)",
            M::FULL_NAME
        );
        let json = to_json(&typed);
        assert_eq!(json, message_json(&dynamic));
        fn check(desc: &MessageDescriptor, v: &Value, path: &str) {
            if matches!(
                desc.full_name(),
                "google.protobuf.Timestamp" | "google.protobuf.Duration"
            ) {
                assert!(v.is_string(), "{path}: {v}");
                return;
            }
            let obj = v
                .as_object()
                .unwrap_or_else(|| panic!("{path} is not an object: {v}"));
            for field in desc.fields() {
                let p = format!("{path}.{}", field.name());
                let got = obj.get(field.name());
                assert!(got.is_some_and(|g| !g.is_null()), "{p} missing in {v}");
                if let (Kind::Message(d), false) = (field.kind(), field.is_map()) {
                    let got = got.unwrap();
                    if field.is_list() {
                        check(&d, &got[0], &p);
                    } else {
                        check(&d, got, &p);
                    }
                }
            }
            assert_eq!(obj.len(), desc.fields().count(), "{path}: extra keys");
        }
        check(&desc, &json, M::FULL_NAME);
    }

    #[test]
    fn every_field_of_every_printed_message_appears() {
        same_message::<pb::Ledger>();
        same_message::<pb::LedgerSummary>();
        same_message::<pb::Row>();
        same_message::<pb::Attempt>();
        same_message::<pb::Job>();
        same_message::<pb::Lock>();
        same_message::<pb::Operation>();
        same_message::<pb::OperationEventRecord>();
        same_message::<pb::Prompt>();
        same_message::<pb::RedriveRowsResponse>();
        same_message::<pb::GoldenSet>();
        same_message::<pb::ResultDelivery>();
        assert_eq!(PRINTED.len(), 12, "a printed message is not checked above");
    }

    #[test]
    fn conventions_enums_times_json_text_and_unset() {
        let row = pb::Row {
            key: "k".into(),
            payload: r#"{"a":1}"#.into(),
            result: "not json".into(),
            status: pb::RowStatus::Succeeded as i32,
            create_time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let v = to_json(&row);
        assert_eq!(v["status"], "SUCCEEDED");
        assert_eq!(v["payload"]["a"], 1);
        assert_eq!(v["result"], "not json");
        assert_eq!(v["create_time"], "2023-11-14T22:13:20Z");
        assert_eq!(v["prompt"], Value::Null);
        assert_eq!(v["update_time"], Value::Null);
        assert_eq!(v["history"], serde_json::json!([]));
        let unknown = pb::Row {
            status: 99,
            ..Default::default()
        };
        assert_eq!(to_json(&unknown)["status"], "UNKNOWN(99)");
        let ledger = pb::Ledger {
            pause: Some(pb::LedgerPause {
                reason: pb::LedgerPauseReason::SpendCap as i32,
                ..Default::default()
            }),
            policy: Some(pb::LedgerPolicy {
                lease: Some(prost_types::Duration {
                    seconds: 2700,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            purge: Some(pb::LedgerPurge::default()),
            ..Default::default()
        };
        let v = to_json(&ledger);
        assert_eq!(v["pause"]["reason"], "SPEND_CAP");
        assert_eq!(v["policy"]["lease"], "45m");
        // `optional int64 rows_total` unset is null, not 0.
        assert_eq!(v["purge"]["rows_total"], Value::Null);
        assert_eq!(v["purge"]["rows_purged"], 0);
    }

    #[test]
    fn yaml_reads_back_as_the_same_value() {
        // Invariant: the YAML of a value parses back to that value, for the
        // strings YAML would otherwise read as something else.
        let v = serde_json::json!({
            "plain": "abc",
            "looks_bool": "yes", "looks_null": "null", "tilde": "~",
            "looks_int": "12", "looks_float": "1.5", "empty": "",
            "colon": "a: b", "hash": "# no", "dash": "- x", "lead": " space",
            "multi": "line one\nline two\n", "quote": "it's \"q\"",
            "unicode": "é ✓", "int": -3, "big": 9_007_199_254_740_993_i64,
            "float": 0.25, "t": true, "n": null,
            "list": [1, "two", {"k": []}], "obj": {}, "nested": {"a": {"b": [{}]}},
        });
        let text = yaml(&v);
        assert!(text.starts_with("---"), "{text}");
        let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
        assert_eq!(docs.len(), 1);
        fn back(y: &yaml_rust2::Yaml) -> Value {
            use yaml_rust2::Yaml;
            match y {
                Yaml::Null => Value::Null,
                Yaml::Boolean(b) => Value::Bool(*b),
                Yaml::Integer(i) => Value::from(*i),
                Yaml::Real(r) => Value::from(r.parse::<f64>().unwrap()),
                Yaml::String(s) => Value::String(s.clone()),
                Yaml::Array(a) => Value::Array(a.iter().map(back).collect()),
                Yaml::Hash(h) => Value::Object(
                    h.iter()
                        .map(|(k, v)| (k.as_str().unwrap().to_string(), back(v)))
                        .collect(),
                ),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back(&docs[0]), v, "{text}");
    }

    #[test]
    fn lists_per_format() {
        let items = vec![serde_json::json!({"a": 1}), serde_json::json!({"a": 2})];
        let p = |format| Printer {
            format,
            no_headers: false,
        };
        assert_eq!(
            p(Format::Jsonl).list("rows", items.clone(), Some(true)),
            "{\"a\":1}\n{\"a\":2}\n"
        );
        let json: Value =
            serde_json::from_str(&p(Format::Json).list("rows", items.clone(), Some(false)))
                .unwrap();
        assert_eq!(json["rows"][1]["a"], 2);
        assert_eq!(json["truncated"], false);
        assert!(p(Format::Yaml).list("rows", items, None).contains("rows:"));
        assert_eq!(resolve(None, true).unwrap(), Format::Json);
        assert_eq!(resolve(Some(Format::Yaml), false).unwrap(), Format::Yaml);
        assert!(resolve(Some(Format::Yaml), true).is_err());
    }
}
