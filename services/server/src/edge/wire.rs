//! A walk over an encoded protobuf message, at every depth, without
//! decoding it: what decoding it would cost, judged from its bytes.
//!
//! The walk follows the schema of the request's message type (read once
//! from the generated file descriptor set) and
//! - refuses what it cannot judge: groups (wire types 3 and 4, which
//!   prost skips unread when the field is unknown), a field sent with a
//!   wire type its declaration does not allow, truncated or malformed
//!   bytes, nesting deeper than [`MAX_DEPTH`];
//! - counts every repeated field in every message it contains (a row's
//!   `depends_on` as well as the request's rows) against that field's
//!   bound, naming the first over it by its path (`rows[12].depends_on`);
//! - adds up what decoding would allocate: string and bytes contents, and
//!   each repeated entry's in-memory size, twice (a `Vec` grown one push at
//!   a time holds up to twice its length). An empty row is 2 bytes on the
//!   wire and hundreds in memory; this sum sees that.
//!
//! Unknown fields of the other wire types are skipped, as prost skips them
//! (they cost nothing decoded), so newer clients still work.

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use std::collections::HashMap;

/// Deepest nesting of messages walked (prost's own limit is 100; tally's
/// requests nest a few levels).
pub const MAX_DEPTH: usize = 16;
/// Most occurrences of one singular message field taken in one message
/// (the decoder merges them; no encoder sends more than one).
const MAX_MERGED: usize = 64;
/// What one entry of a map field is taken to cost (a hash table slot with
/// its key and value).
const MAP_ENTRY_BYTES: usize = 64;

/// The shape of one field on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// int32, int64, uint*, sint*, bool, enum: a varint (or packed).
    Varint,
    /// fixed32, sfixed32, float.
    Fixed32,
    /// fixed64, sfixed64, double.
    Fixed64,
    /// string or bytes: length-delimited contents.
    Text,
    /// A message, by its index in [`Schema::messages`].
    Message(usize),
}

#[derive(Debug, Clone)]
struct Field {
    number: u32,
    name: String,
    shape: Shape,
    /// For a repeated field: its bound and its slot in the per-message
    /// counters.
    repeated: Option<Repeated>,
}

#[derive(Debug, Clone, Copy)]
struct Repeated {
    bound: usize,
    slot: usize,
    entry_bytes: usize,
}

#[derive(Debug, Clone)]
struct MessageSchema {
    name: String,
    /// Sorted by number.
    fields: Vec<Field>,
    repeated: usize,
}

impl MessageSchema {
    fn field(&self, number: u32) -> Option<&Field> {
        self.fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &self.fields[i])
    }
}

/// The request messages of a set of gRPC methods, ready to be walked.
#[derive(Debug, Clone)]
pub struct Schema {
    messages: Vec<MessageSchema>,
    /// `/package.Service/Method` → its request message.
    methods: HashMap<String, usize>,
}

/// What a message would cost decoded, as far as the walk can tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Bytes decoding would allocate (strings, bytes, repeated entries).
    pub decoded_bytes: usize,
    /// Repeated entries, at every depth.
    pub entries: usize,
}

/// Why a message was not judged acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Bytes that are not an encoding of the message (or use groups, or
    /// nest too deep); `path` is where the walk stopped.
    Malformed { path: String, reason: &'static str },
    /// A repeated field with more entries than its bound; `field` is its
    /// full name (`tally.v1.RowInput.depends_on`).
    TooMany {
        path: String,
        field: String,
        count: usize,
        limit: usize,
    },
}

/// One step of the path to where the walk is: a field, and the entry of it
/// when it is repeated.
#[derive(Clone, Copy)]
struct Step<'a> {
    field: &'a str,
    index: Option<usize>,
}

fn path_of(steps: &[Step<'_>], last: Option<&str>) -> String {
    let mut out = String::new();
    for s in steps {
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(s.field);
        if let Some(i) = s.index {
            out.push_str(&format!("[{i}]"));
        }
    }
    if let Some(last) = last {
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(last);
    }
    out
}

/// How a schema is built: which methods' requests, each repeated field's
/// bound, each message's in-memory size.
pub struct Plan<'a> {
    /// Encoded `FileDescriptorSet`s holding the messages.
    pub descriptor_sets: &'a [&'a [u8]],
    /// The methods, as `/package.Service/Method`.
    pub methods: &'a [&'a str],
    /// The bound of repeated field `field` of message `message` (full
    /// names, e.g. `tally.v1.RowInput`, `depends_on`).
    pub bound: &'a dyn Fn(&str, &str) -> Option<usize>,
    /// The in-memory size of a message type (`size_of` of its generated
    /// struct), when known.
    pub size: &'a dyn Fn(&str) -> Option<usize>,
}

impl Schema {
    /// Reads the request messages of `plan.methods`. Fails naming every
    /// repeated field without a bound and every message reachable in a
    /// repeated field whose size is unknown: nothing is walked without
    /// being judged.
    pub fn build(plan: &Plan<'_>) -> Result<Schema, String> {
        let mut descriptors: HashMap<String, prost_types::DescriptorProto> = HashMap::new();
        let mut inputs: HashMap<String, String> = HashMap::new();
        for bytes in plan.descriptor_sets {
            let set = prost_types::FileDescriptorSet::decode(*bytes)
                .map_err(|e| format!("descriptor set: {e}"))?;
            for file in set.file {
                let package = file.package.clone().unwrap_or_default();
                for m in &file.message_type {
                    collect(&package, m, &mut descriptors);
                }
                for s in &file.service {
                    for m in &s.method {
                        let path = format!(
                            "/{package}.{}/{}",
                            s.name.as_deref().unwrap_or_default(),
                            m.name.as_deref().unwrap_or_default()
                        );
                        let input = m.input_type.as_deref().unwrap_or_default();
                        inputs.insert(path, input.trim_start_matches('.').to_string());
                    }
                }
            }
        }
        let mut builder = Builder {
            descriptors: &descriptors,
            plan,
            index: HashMap::new(),
            messages: Vec::new(),
            sizes: Vec::new(),
            problems: Vec::new(),
        };
        let mut methods = HashMap::new();
        for method in plan.methods {
            let Some(input) = inputs.get(*method) else {
                return Err(format!("{method} is not in the descriptor sets"));
            };
            let i = builder.message(input)?;
            methods.insert(method.to_string(), i);
        }
        if !builder.problems.is_empty() {
            builder.problems.sort();
            builder.problems.dedup();
            return Err(builder.problems.join("; "));
        }
        Ok(Schema {
            messages: builder.messages,
            methods,
        })
    }

    /// Whether `method`'s requests can be walked.
    pub fn knows(&self, method: &str) -> bool {
        self.methods.contains_key(method)
    }

    /// Walks `message`, a request of `method` (which must be known).
    pub fn walk(&self, method: &str, message: &[u8]) -> Result<Cost, WireError> {
        let Some(&root) = self.methods.get(method) else {
            return Err(WireError::Malformed {
                path: String::new(),
                reason: "a method without a schema",
            });
        };
        let mut cost = Cost::default();
        let mut steps = Vec::with_capacity(MAX_DEPTH);
        self.message(root, &[message], &mut steps, &mut cost)?;
        Ok(cost)
    }

    /// Walks one message of type `index`, sent as `parts`: the occurrences
    /// of a singular field, which the decoder merges (one part otherwise).
    fn message<'s, 'b>(
        &'s self,
        index: usize,
        parts: &[&'b [u8]],
        steps: &mut Vec<Step<'s>>,
        cost: &mut Cost,
    ) -> Result<(), WireError> {
        if steps.len() > MAX_DEPTH {
            return Err(WireError::Malformed {
                path: path_of(steps, None),
                reason: "messages nested too deep",
            });
        }
        let schema = &self.messages[index];
        let mut counts = vec![0usize; schema.repeated];
        // A singular message field sent more than once is merged by the
        // decoder (protobuf's rule), its repeated fields concatenated: its
        // occurrences are walked as one message, with one set of counters,
        // after the loop, so each bound holds for the decoded message, not
        // per occurrence on the wire. No encoder repeats one: more than
        // MAX_MERGED occurrences are refused, so the list stays small.
        let mut singular: Vec<(&Field, usize, Vec<&'b [u8]>)> = Vec::new();
        let mut over: Option<&Field> = None;
        let malformed = |steps: &[Step<'_>], last: Option<&str>, reason| WireError::Malformed {
            path: path_of(steps, last),
            reason,
        };
        for bytes in parts.iter().copied() {
            let mut at = 0;
            while at < bytes.len() {
                let tag =
                    varint(bytes, &mut at).ok_or_else(|| malformed(steps, None, "a bad tag"))?;
                let number = u32::try_from(tag >> 3)
                    .ok()
                    .filter(|n| *n != 0)
                    .ok_or_else(|| malformed(steps, None, "a bad field number"))?;
                let wire = tag & 7;
                let field = schema.field(number);
                let name = field.map(|f| f.name.as_str());
                // Where the field's value lies, for length-delimited ones.
                let value: Option<&[u8]> = match wire {
                    0 => {
                        varint(bytes, &mut at)
                            .ok_or_else(|| malformed(steps, name, "a bad varint"))?;
                        None
                    }
                    1 => {
                        at = skip(bytes, at, 8)
                            .ok_or_else(|| malformed(steps, name, "cut short"))?;
                        None
                    }
                    5 => {
                        at = skip(bytes, at, 4)
                            .ok_or_else(|| malformed(steps, name, "cut short"))?;
                        None
                    }
                    2 => {
                        let len = varint(bytes, &mut at)
                            .and_then(|l| usize::try_from(l).ok())
                            .ok_or_else(|| malformed(steps, name, "a bad length"))?;
                        let start = at;
                        at = skip(bytes, at, len)
                            .ok_or_else(|| malformed(steps, name, "cut short"))?;
                        Some(&bytes[start..at])
                    }
                    // Groups (3, 4) and the unused wire types 6 and 7: prost
                    // would skip a whole group of an unknown field unread.
                    _ => return Err(malformed(steps, name, "groups are not accepted")),
                };
                let Some(field) = field else {
                    // Unknown: skipped by the decoder, costs nothing decoded.
                    continue;
                };
                let packed = field.repeated.is_some()
                    && wire == 2
                    && matches!(field.shape, Shape::Varint | Shape::Fixed32 | Shape::Fixed64);
                let fits = match field.shape {
                    Shape::Varint => wire == 0 || packed,
                    Shape::Fixed32 => wire == 5 || packed,
                    Shape::Fixed64 => wire == 1 || packed,
                    Shape::Text | Shape::Message(_) => wire == 2,
                };
                if !fits {
                    return Err(malformed(
                        steps,
                        Some(&field.name),
                        "a wire type the field does not have",
                    ));
                }
                let entries = if packed {
                    let v = value.unwrap_or_default();
                    match field.shape {
                        Shape::Varint => v.iter().filter(|b| **b & 0x80 == 0).count(),
                        Shape::Fixed32 if v.len().is_multiple_of(4) => v.len() / 4,
                        Shape::Fixed64 if v.len().is_multiple_of(8) => v.len() / 8,
                        _ => return Err(malformed(steps, Some(&field.name), "a bad packed field")),
                    }
                } else {
                    1
                };
                if let Some(r) = field.repeated {
                    let count = &mut counts[r.slot];
                    let index = *count;
                    *count += entries;
                    cost.entries += entries;
                    cost.decoded_bytes = cost
                        .decoded_bytes
                        .saturating_add(entries.saturating_mul(2 * r.entry_bytes));
                    if *count > r.bound {
                        // Keep counting, to say how many there were; nothing
                        // over the bound is looked into.
                        over.get_or_insert(field);
                        continue;
                    }
                    if let (Shape::Message(m), Some(v)) = (field.shape, value) {
                        steps.push(Step {
                            field: &field.name,
                            index: Some(index),
                        });
                        self.message(m, &[v], steps, cost)?;
                        steps.pop();
                        continue;
                    }
                } else if let (Shape::Message(m), Some(v)) = (field.shape, value) {
                    match singular
                        .iter_mut()
                        .find(|(f, _, _)| f.number == field.number)
                    {
                        Some((_, _, seen)) if seen.len() >= MAX_MERGED => {
                            return Err(malformed(
                                steps,
                                Some(&field.name),
                                "a singular message field sent too many times",
                            ));
                        }
                        Some((_, _, seen)) => seen.push(v),
                        None => singular.push((field, m, vec![v])),
                    }
                    continue;
                }
                if field.shape == Shape::Text {
                    cost.decoded_bytes = cost
                        .decoded_bytes
                        .saturating_add(value.map_or(0, <[u8]>::len));
                }
            }
        }
        for (field, m, seen) in singular {
            steps.push(Step {
                field: &field.name,
                index: None,
            });
            self.message(m, &seen, steps, cost)?;
            steps.pop();
        }
        if let Some(field) = over {
            let r = field.repeated.expect("only repeated fields are over");
            return Err(WireError::TooMany {
                path: path_of(steps, Some(&field.name)),
                field: format!("{}.{}", schema.name, field.name),
                count: counts[r.slot],
                limit: r.bound,
            });
        }
        Ok(())
    }
}

/// Gathers `m` and its nested messages under their full names.
fn collect(
    scope: &str,
    m: &prost_types::DescriptorProto,
    out: &mut HashMap<String, prost_types::DescriptorProto>,
) {
    let name = if scope.is_empty() {
        m.name().to_string()
    } else {
        format!("{scope}.{}", m.name())
    };
    for nested in &m.nested_type {
        collect(&name, nested, out);
    }
    out.insert(name, m.clone());
}

struct Builder<'a> {
    descriptors: &'a HashMap<String, prost_types::DescriptorProto>,
    plan: &'a Plan<'a>,
    index: HashMap<String, usize>,
    messages: Vec<MessageSchema>,
    /// In-memory size of each message, by index, when known.
    sizes: Vec<Option<usize>>,
    problems: Vec<String>,
}

impl Builder<'_> {
    /// The index of message `name`, reading it (and what it holds) once.
    fn message(&mut self, name: &str) -> Result<usize, String> {
        if let Some(i) = self.index.get(name) {
            return Ok(*i);
        }
        let d = self
            .descriptors
            .get(name)
            .ok_or_else(|| format!("message {name} is not in the descriptor sets"))?;
        let i = self.messages.len();
        self.index.insert(name.to_string(), i);
        self.messages.push(MessageSchema {
            name: name.to_string(),
            fields: Vec::new(),
            repeated: 0,
        });
        let map_entry = d.options.as_ref().is_some_and(|o| o.map_entry());
        self.sizes.push(if map_entry {
            Some(MAP_ENTRY_BYTES)
        } else {
            (self.plan.size)(name)
        });
        let mut fields = Vec::new();
        let mut repeated = 0;
        for f in &d.field {
            let shape = match f.r#type() {
                Type::Int32
                | Type::Int64
                | Type::Uint32
                | Type::Uint64
                | Type::Sint32
                | Type::Sint64
                | Type::Bool
                | Type::Enum => Shape::Varint,
                Type::Fixed32 | Type::Sfixed32 | Type::Float => Shape::Fixed32,
                Type::Fixed64 | Type::Sfixed64 | Type::Double => Shape::Fixed64,
                Type::String | Type::Bytes => Shape::Text,
                Type::Message => {
                    let nested = f.type_name().trim_start_matches('.').to_string();
                    Shape::Message(self.message(&nested)?)
                }
                Type::Group => return Err(format!("{name}.{} is a group", f.name())),
            };
            let is_repeated = f.label() == Label::Repeated;
            let repeated_info = if is_repeated {
                let bound = match (self.plan.bound)(name, f.name()) {
                    Some(b) => b,
                    None => {
                        self.problems
                            .push(format!("repeated field {name}.{} has no bound", f.name()));
                        0
                    }
                };
                let entry_bytes = match shape {
                    Shape::Varint | Shape::Fixed32 => 4,
                    Shape::Fixed64 => 8,
                    Shape::Text => std::mem::size_of::<String>(),
                    Shape::Message(m) => self.sizes[m].unwrap_or_else(|| {
                        self.problems.push(format!(
                            "message {} (in {name}.{}) has no in-memory size",
                            self.messages[m].name,
                            f.name()
                        ));
                        0
                    }),
                };
                let slot = repeated;
                repeated += 1;
                Some(Repeated {
                    bound,
                    slot,
                    entry_bytes,
                })
            } else {
                None
            };
            fields.push(Field {
                number: u32::try_from(f.number()).map_err(|_| format!("{name}: bad number"))?,
                name: f.name().to_string(),
                shape,
                repeated: repeated_info,
            });
        }
        fields.sort_by_key(|f| f.number);
        self.messages[i].fields = fields;
        self.messages[i].repeated = repeated;
        Ok(i)
    }
}

fn skip(bytes: &[u8], at: usize, len: usize) -> Option<usize> {
    let end = at.checked_add(len)?;
    (end <= bytes.len()).then_some(end)
}

fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tally_proto::v1 as pb;

    const ENROLL: &str = "/tally.v1.LedgerService/EnrollRows";
    const LIST_JOBS: &str = "/tally.v1.JobService/ListJobs";
    const LIST_ROWS: &str = "/tally.v1.LedgerService/ListRows";

    fn schema(limit: usize) -> Schema {
        let bound = move |m: &str, f: &str| match (m, f) {
            ("tally.v1.EnrollRowsRequest", "rows") => Some(limit),
            ("tally.v1.RowInput", "depends_on") => Some(2),
            ("tally.v1.RowInput", "dependency_names") => Some(2),
            ("tally.v1.ListJobsRequest", "states") => Some(3),
            ("tally.v1.RowFilter", "statuses") => Some(3),
            _ => None,
        };
        let size = |m: &str| match m {
            "tally.v1.RowInput" => Some(std::mem::size_of::<pb::RowInput>()),
            _ => Some(64),
        };
        Schema::build(&Plan {
            descriptor_sets: &[tally_proto::FILE_DESCRIPTOR_SET],
            methods: &[ENROLL, LIST_JOBS, LIST_ROWS],
            bound: &bound,
            size: &size,
        })
        .unwrap()
    }

    fn row(key: &str, deps: &[&str]) -> pb::RowInput {
        pb::RowInput {
            key: key.into(),
            payload: "{}".into(),
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    fn enroll(rows: Vec<pb::RowInput>) -> Vec<u8> {
        pb::EnrollRowsRequest {
            parent: "ledgers/l".into(),
            rows,
        }
        .encode_to_vec()
    }

    /// Entries are counted at every depth; what decoding would allocate
    /// is added up.
    #[test]
    fn counts_entries_at_every_depth_and_their_cost() {
        let s = schema(3);
        let cost = s
            .walk(ENROLL, &enroll(vec![row("a", &["b"]), row("b", &[])]))
            .unwrap();
        assert_eq!(cost.entries, 3);
        let size = std::mem::size_of::<pb::RowInput>();
        // Strings: parent 9, keys 1+1, payloads 2+2, one dependency 1.
        assert_eq!(cost.decoded_bytes, 9 + 2 + 4 + 1 + 2 * 2 * size + 2 * 24);
        assert_eq!(s.walk(ENROLL, &[]).unwrap(), Cost::default());
    }

    /// Invariant: a repeated field over its bound is refused, at the top
    /// level or nested, naming its path and how many entries it had.
    #[test]
    fn fields_over_their_bound_are_named_by_path() {
        let s = schema(3);
        assert_eq!(
            s.walk(ENROLL, &enroll(vec![row("a", &[]); 5])),
            Err(WireError::TooMany {
                path: "rows".into(),
                field: "tally.v1.EnrollRowsRequest.rows".into(),
                count: 5,
                limit: 3
            })
        );
        assert_eq!(
            s.walk(
                ENROLL,
                &enroll(vec![row("a", &[]), row("b", &["x", "y", "z", "w"])])
            ),
            Err(WireError::TooMany {
                path: "rows[1].depends_on".into(),
                field: "tally.v1.RowInput.depends_on".into(),
                count: 4,
                limit: 2
            })
        );
        // Packed enums count each value.
        let list = pb::ListJobsRequest {
            states: vec![1, 2, 3, 4],
            ..Default::default()
        }
        .encode_to_vec();
        assert!(matches!(
            s.walk(LIST_JOBS, &list),
            Err(WireError::TooMany { count: 4, .. })
        ));
    }

    /// Invariant (issue 51): a singular message sent many times is judged
    /// as the decoder sees it, merged: its repeated fields' bounds hold for
    /// all occurrences together (a filter of 3 statuses sent twice is 6,
    /// over a bound of 3), while one occurrence within the bound passes.
    #[test]
    fn a_repeated_singular_message_is_bounded_as_it_decodes() {
        let s = schema(3);
        let filter = |n: usize| pb::ListRowsRequest {
            parent: "ledgers/l".into(),
            filter: Some(pb::RowFilter {
                statuses: vec![1; n],
                ..Default::default()
            }),
            ..Default::default()
        };
        let once = filter(3).encode_to_vec();
        assert!(s.walk(LIST_ROWS, &once).is_ok());
        let mut twice = once.clone();
        twice.extend(filter(3).encode_to_vec());
        let decoded = pb::ListRowsRequest::decode(&twice[..]).unwrap();
        assert_eq!(decoded.filter.unwrap().statuses.len(), 6, "prost merges");
        let mut many = Vec::new();
        for _ in 0..=MAX_MERGED {
            many.extend(filter(0).encode_to_vec());
        }
        assert!(matches!(
            s.walk(LIST_ROWS, &many),
            Err(WireError::Malformed { reason, .. }) if reason.contains("too many times")
        ));
        assert_eq!(
            s.walk(LIST_ROWS, &twice),
            Err(WireError::TooMany {
                path: "filter.statuses".into(),
                field: "tally.v1.RowFilter.statuses".into(),
                count: 6,
                limit: 3
            })
        );
    }

    /// Invariant: what the walk cannot judge is refused: groups (known or
    /// unknown field), wrong wire types, truncated bytes.
    #[test]
    fn groups_wrong_wire_types_and_cut_bytes_are_refused() {
        let s = schema(3);
        // An empty group of unknown field 9 in front of a valid request:
        // prost would skip it.
        let mut grouped = vec![(9 << 3) | 3, (9 << 3) | 4];
        grouped.extend(enroll(vec![row("a", &[])]));
        assert!(matches!(
            s.walk(ENROLL, &grouped),
            Err(WireError::Malformed { reason, .. }) if reason.contains("group")
        ));
        // A group inside a row.
        let inner = [(9 << 3) | 3, (9 << 3) | 4];
        let mut bytes = vec![0x12, inner.len() as u8];
        bytes.extend(inner);
        assert!(matches!(
            s.walk(ENROLL, &bytes),
            Err(WireError::Malformed { path, .. }) if path == "rows[0]"
        ));
        // rows as a varint.
        assert!(matches!(
            s.walk(ENROLL, &[0x10, 0x01]),
            Err(WireError::Malformed { .. })
        ));
        let whole = enroll(vec![row("a", &[])]);
        assert!(s.walk(ENROLL, &whole[..whole.len() - 1]).is_err());
        assert!(s.walk(ENROLL, &[0x80; 20]).is_err());
        // Unknown fields of the other wire types are skipped.
        let mut unknown = vec![(9 << 3), 0x01, (10 << 3) | 2, 0x01, b'x'];
        unknown.extend(enroll(vec![row("a", &[])]));
        assert!(s.walk(ENROLL, &unknown).is_ok());
    }

    /// A schema is refused while any repeated field it reaches has no
    /// bound.
    #[test]
    fn every_repeated_field_needs_a_bound() {
        let e = Schema::build(&Plan {
            descriptor_sets: &[tally_proto::FILE_DESCRIPTOR_SET],
            methods: &[ENROLL],
            bound: &|_, _| None,
            size: &|_| Some(1),
        })
        .unwrap_err();
        assert!(
            e.contains("tally.v1.RowInput.depends_on has no bound"),
            "{e}"
        );
        assert!(
            e.contains("tally.v1.EnrollRowsRequest.rows has no bound"),
            "{e}"
        );
    }
}
