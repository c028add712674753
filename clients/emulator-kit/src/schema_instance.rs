//! A deterministic minimal JSON value that validates against a response
//! schema: Gemini's OpenAPI-subset `responseSchema` (`type: "OBJECT"`,
//! `nullable`, `propertyOrdering`, …) or a JSON Schema `responseJsonSchema`
//! (`$ref`/`$defs`, `anyOf`, `const`, type arrays, …). One walker serves both:
//! type names are read case-insensitively.
//!
//! Objects get every declared property (required ones always; optional ones
//! unless nesting is deep), strings are derived from the prompt (respecting
//! `enum`, `format` and length bounds), numbers respect their bounds, arrays
//! get one item (or `minItems`). Not honoured: `pattern`, `multipleOf`,
//! `not`, `if/then/else`, `dependentRequired`; a schema leaning on those may
//! get an instance that does not validate.

use serde_json::{Map, Value, json};

use crate::mix::{Mix, hash_str};

/// Nesting past which optional properties are left out and arrays allowed
/// to be empty, so recursive schemas terminate.
const DEEP: usize = 6;
/// Nesting past which we give up and answer `null`.
const TOO_DEEP: usize = 24;

/// An instance of `schema`, with strings and choices derived from `prompt`.
pub fn instance(schema: &Value, prompt: &str) -> Value {
    let walker = Walker {
        root: schema,
        words: prompt_words(prompt),
        seed: hash_str(prompt),
    };
    walker.value(schema, "", 0)
}

struct Walker<'a> {
    root: &'a Value,
    words: String,
    seed: u64,
}

impl Walker<'_> {
    fn value(&self, schema: &Value, path: &str, depth: usize) -> Value {
        if depth > TOO_DEEP {
            return Value::Null;
        }
        let obj = match schema {
            Value::Bool(_) => return json!(self.words.clone()),
            Value::Object(obj) => obj,
            _ => return json!(self.words.clone()),
        };
        if let Some(target) = obj.get("$ref").and_then(Value::as_str) {
            return match self.resolve(target) {
                Some(resolved) => self.value(resolved, path, depth + 1),
                None => Value::Null,
            };
        }
        if let Some(value) = obj.get("const") {
            return value.clone();
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array)
            && !values.is_empty()
        {
            let index = self.pick(path, values.len());
            return values[index].clone();
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
            return self.value(&merge_all_of(obj, all), path, depth + 1);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(options) = obj.get(key).and_then(Value::as_array)
                && let Some(first) = options
                    .iter()
                    .find(|o| type_of(o).as_deref() != Some("null"))
                    .or(options.first())
            {
                return self.value(first, path, depth + 1);
            }
        }
        match type_of(schema).as_deref() {
            Some("object") => self.object(obj, path, depth),
            Some("array") => self.array(obj, path, depth),
            Some("string") => self.string(obj, path),
            Some("integer") => self.integer(obj, path),
            Some("number") => self.number(obj, path),
            Some("boolean") => json!(self.pick(path, 2) == 0),
            Some("null") => Value::Null,
            Some(_) | None => {
                if obj.contains_key("properties") {
                    self.object(obj, path, depth)
                } else if obj.contains_key("items") || obj.contains_key("prefixItems") {
                    self.array(obj, path, depth)
                } else {
                    self.string(obj, path)
                }
            }
        }
    }

    fn resolve(&self, target: &str) -> Option<&Value> {
        let pointer = target.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    fn pick(&self, path: &str, n: usize) -> usize {
        Mix::new(self.seed ^ hash_str(path)).below(n)
    }

    fn object(&self, obj: &Map<String, Value>, path: &str, depth: usize) -> Value {
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        let Some(props) = obj.get("properties").and_then(Value::as_object) else {
            return Value::Object(out);
        };
        // Gemini's `propertyOrdering` says in which order the model writes
        // properties; follow it, then the declaration order.
        let mut names: Vec<&str> = obj
            .get("propertyOrdering")
            .and_then(Value::as_array)
            .map(|o| o.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for name in props.keys() {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        for name in names {
            let Some(prop) = props.get(name) else {
                continue;
            };
            if depth >= DEEP && !required.contains(&name) {
                continue;
            }
            let child = format!("{path}/{name}");
            out.insert(name.to_owned(), self.value(prop, &child, depth + 1));
        }
        Value::Object(out)
    }

    fn array(&self, obj: &Map<String, Value>, path: &str, depth: usize) -> Value {
        let min = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = obj
            .get("maxItems")
            .and_then(Value::as_u64)
            .map_or(usize::MAX, |m| m as usize);
        let prefix: &[Value] = obj
            .get("prefixItems")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let wanted = if depth >= DEEP { min } else { min.max(1) };
        let count = wanted.max(prefix.len().min(max)).min(max);
        let items = obj.get("items").filter(|i| i.is_object());
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let child = format!("{path}/{i}");
            let schema = match (prefix.get(i), items) {
                (Some(p), _) => p,
                (None, Some(items)) => items,
                (None, None) => &Value::Bool(true),
            };
            out.push(self.value(schema, &child, depth + 1));
        }
        Value::Array(out)
    }

    fn string(&self, obj: &Map<String, Value>, path: &str) -> Value {
        let mut text = match obj.get("format").and_then(Value::as_str) {
            Some("date-time") => "2025-01-01T00:00:00Z".to_owned(),
            Some("date") => "2025-01-01".to_owned(),
            Some("time") => "00:00:00Z".to_owned(),
            Some("email") => "someone@example.com".to_owned(),
            Some("uri" | "url" | "iri") => "https://example.com/emulated".to_owned(),
            Some("uuid") => {
                let h = hash_str(&format!("{}{path}", self.words));
                let g = Mix::new(h).next_u64();
                format!(
                    "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                    h >> 32,
                    (h >> 16) & 0xffff,
                    h & 0xfff,
                    g & 0xfff,
                    g >> 16
                )
            }
            Some("ipv4") => "192.0.2.1".to_owned(),
            Some("hostname") => "example.com".to_owned(),
            _ => self.words.clone(),
        };
        let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = obj
            .get("maxLength")
            .and_then(Value::as_u64)
            .map(|m| m as usize);
        if let Some(max) = max
            && text.chars().count() > max
        {
            text = text.chars().take(max).collect();
        }
        while text.chars().count() < min {
            text.push('x');
        }
        json!(text)
    }

    fn integer(&self, obj: &Map<String, Value>, path: &str) -> Value {
        let (lo, hi) = bounds(obj);
        let lo = lo.map(|(v, exclusive)| {
            if exclusive {
                v.floor() as i64 + 1
            } else {
                v.ceil() as i64
            }
        });
        let hi = hi.map(|(v, exclusive)| {
            if exclusive {
                v.ceil() as i64 - 1
            } else {
                v.floor() as i64
            }
        });
        let guess = 1 + self.pick(path, 9) as i64;
        let value = match (lo, hi) {
            (Some(lo), Some(hi)) if lo <= hi => guess.clamp(lo, hi),
            (Some(lo), _) => guess.max(lo),
            (None, Some(hi)) => guess.min(hi),
            (None, None) => guess,
        };
        json!(value)
    }

    fn number(&self, obj: &Map<String, Value>, path: &str) -> Value {
        let guess = 0.5 + self.pick(path, 9) as f64;
        let value = match bounds(obj) {
            (Some((lo, lx)), Some((hi, hx))) => {
                if guess > lo && guess < hi || (guess == lo && !lx) || (guess == hi && !hx) {
                    guess
                } else if lo == hi {
                    lo
                } else {
                    (lo + hi) / 2.0
                }
            }
            (Some((lo, exclusive)), None) => {
                if guess > lo || (guess == lo && !exclusive) {
                    guess
                } else {
                    lo + 1.0
                }
            }
            (None, Some((hi, exclusive))) => {
                if guess < hi || (guess == hi && !exclusive) {
                    guess
                } else {
                    hi - 1.0
                }
            }
            (None, None) => guess,
        };
        json!(value)
    }
}

/// The schema's type, lowercased; the first non-null one of a type array;
/// `nullable` is irrelevant because we never choose null.
fn type_of(schema: &Value) -> Option<String> {
    match schema.get("type")? {
        Value::String(t) => Some(t.to_ascii_lowercase()),
        Value::Array(types) => {
            let names: Vec<String> = types
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_ascii_lowercase)
                .collect();
            names
                .iter()
                .find(|t| *t != "null")
                .or(names.first())
                .cloned()
        }
        _ => None,
    }
}

/// A numeric bound: the value and whether it is exclusive.
type Bound = Option<(f64, bool)>;

/// Lower and upper bounds, from JSON Schema's numeric `exclusiveMinimum`
/// or draft-4/OpenAPI's boolean form.
fn bounds(obj: &Map<String, Value>) -> (Bound, Bound) {
    let side = |inclusive: &str, exclusive: &str| {
        let value = obj.get(inclusive).and_then(Value::as_f64);
        match obj.get(exclusive) {
            Some(Value::Number(n)) => n.as_f64().map(|v| (v, true)),
            Some(Value::Bool(flag)) => value.map(|v| (v, *flag)),
            _ => value.map(|v| (v, false)),
        }
    };
    (
        side("minimum", "exclusiveMinimum"),
        side("maximum", "exclusiveMaximum"),
    )
}

/// Folds `allOf` parts into one schema (properties and required merged,
/// other keywords of the first part that has them).
fn merge_all_of(obj: &Map<String, Value>, parts: &[Value]) -> Value {
    let mut merged: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| k.as_str() != "allOf")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for part in parts.iter().filter_map(Value::as_object) {
        for (k, v) in part {
            match (k.as_str(), merged.get_mut(k)) {
                ("properties", Some(Value::Object(existing))) => {
                    if let Value::Object(more) = v {
                        for (pk, pv) in more {
                            existing.entry(pk.clone()).or_insert_with(|| pv.clone());
                        }
                    }
                }
                ("required", Some(Value::Array(existing))) => {
                    if let Value::Array(more) = v {
                        existing.extend(more.iter().cloned());
                    }
                }
                (_, Some(_)) => {}
                (_, None) => {
                    merged.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Value::Object(merged)
}

/// The first few words of the prompt, as the "answer" text of strings.
pub fn prompt_words(prompt: &str) -> String {
    let words: Vec<&str> = prompt.split_whitespace().take(6).collect();
    if words.is_empty() {
        "emulated".to_owned()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemini's OpenAPI subset expressed as JSON Schema, for validation.
    fn openapi_to_json_schema(schema: &Value) -> Value {
        match schema {
            Value::Object(obj) => {
                let mut out = Map::new();
                let nullable = obj.get("nullable") == Some(&Value::Bool(true));
                for (k, v) in obj {
                    match k.as_str() {
                        "nullable" | "propertyOrdering" => {}
                        "type" => {
                            let t = v.as_str().unwrap().to_ascii_lowercase();
                            out.insert(
                                k.clone(),
                                if nullable {
                                    json!([t, "null"])
                                } else {
                                    json!(t)
                                },
                            );
                        }
                        "properties" => {
                            let props = v
                                .as_object()
                                .unwrap()
                                .iter()
                                .map(|(pk, pv)| (pk.clone(), openapi_to_json_schema(pv)))
                                .collect();
                            out.insert(k.clone(), Value::Object(props));
                        }
                        "items" => {
                            out.insert(k.clone(), openapi_to_json_schema(v));
                        }
                        "anyOf" => {
                            let alts = v
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(openapi_to_json_schema)
                                .collect();
                            out.insert(k.clone(), Value::Array(alts));
                        }
                        _ => {
                            out.insert(k.clone(), v.clone());
                        }
                    }
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    fn assert_valid(schema: &Value, prompt: &str) -> Value {
        assert_valid_against(schema, schema, prompt)
    }

    /// Generates from `schema`, validates against `json_schema`.
    fn assert_valid_against(schema: &Value, json_schema: &Value, prompt: &str) -> Value {
        let value = instance(schema, prompt);
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(json_schema)
            .expect("schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{value} does not validate: {errors:?}");
        value
    }

    #[test]
    fn openapi_subset_schemas() {
        let schema = json!({
            "type": "OBJECT",
            "properties": {
                "category": {"type": "STRING", "enum": ["bug", "praise", "question"]},
                "score": {"type": "INTEGER", "minimum": 1, "maximum": 5},
                "confidence": {"type": "NUMBER", "minimum": 0, "maximum": 1},
                "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
                "urgent": {"type": "BOOLEAN"},
                "note": {"type": "STRING", "nullable": true},
                "when": {"type": "STRING", "format": "date-time"}
            },
            "required": ["category", "score"],
            "propertyOrdering": ["score", "category"]
        });
        let converted = openapi_to_json_schema(&schema);
        let value = assert_valid_against(&schema, &converted, "The app crashes on start");
        assert_eq!(
            value.as_object().unwrap().len(),
            7,
            "every property is filled"
        );
        assert_eq!(value["tags"].as_array().unwrap().len(), 1);
        assert_eq!(value, instance(&schema, "The app crashes on start"));
    }

    #[test]
    fn json_schema_features() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "item": {"type": "object", "properties": {"sku": {"type": "string", "minLength": 40}, "qty": {"type": "integer", "exclusiveMinimum": 10}}, "required": ["sku", "qty"], "additionalProperties": false}
            },
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 2, "maxItems": 3},
                "kind": {"const": "order"},
                "label": {"type": ["string", "null"], "maxLength": 3},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5},
                "either": {"anyOf": [{"type": "null"}, {"type": "integer", "maximum": -3}]},
                "both": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
                "id": {"type": "string", "format": "uuid"},
                "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false}
            },
            "required": ["items", "kind", "label", "ratio", "either", "both", "id", "pair"],
            "additionalProperties": false
        });
        let value = assert_valid(&schema, "order two widgets please");
        assert_eq!(value["items"].as_array().unwrap().len(), 2);
        assert_eq!(value["kind"], "order");
        assert_eq!(value["label"], "ord");
    }

    #[test]
    fn enums_are_chosen_deterministically_from_the_prompt() {
        let schema = json!({"type": "string", "enum": ["a", "b", "c", "d"]});
        let picks: std::collections::HashSet<String> = (0..40)
            .map(|i| {
                instance(&schema, &format!("prompt {i}"))
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert!(picks.len() > 1, "enum choice should vary with the prompt");
        assert_eq!(instance(&schema, "same"), instance(&schema, "same"));
    }

    #[test]
    fn recursive_schemas_terminate() {
        let schema = json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["name"]
        });
        assert_valid(&schema, "tree");
    }

    #[test]
    fn strings_come_from_the_prompt() {
        assert_eq!(
            instance(
                &json!({"type": "string"}),
                "  Summarize   this review: great app, love it "
            ),
            json!("Summarize this review: great app, love")
        );
        assert_eq!(instance(&json!({"type": "string"}), ""), json!("emulated"));
    }
}
