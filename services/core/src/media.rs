//! Media references: a file (an image, a PDF) a row sends to the model.
//!
//! A row names its media, never carries it: a reference is the file's URI
//! (a path under the worker's media root, `file://`, `https://`, `gs://`,
//! `s3://`), the SHA-256 of its bytes (so the row's content hash covers the
//! bytes, not only the name: re-enrolling a page whose image changed is a
//! CONFLICT) and optionally its MIME type (else taken from the name's
//! extension). The enroller hashes the bytes; the worker reads them when
//! it sends the row, checks the hash, and sends them as the provider takes
//! them (inline, or uploaded once and referenced).
//!
//! Where references go:
//! - a prompt declares template variables as media (`media`): each such
//!   variable of a row is a reference (`{"uri", "sha256", "mime_type"}`);
//!   the prompt's text renders without them and the media follow it;
//! - a native request (no prompt) puts `{"media": {…}}` as a part of
//!   `contents[].parts[]` where the provider's file part goes.
//!
//! Pure: parsing and checking only.

use serde_json::Value;

/// Longest URI taken.
pub const MAX_URI: usize = 2048;
/// Longest MIME type taken.
pub const MAX_MIME: usize = 255;
/// Most media variables a prompt declares, and media one row references.
pub const MAX_MEDIA_PER_ROW: usize = 16;
/// Most media uploads one batch references (MarkCreating).
pub const MAX_BATCH_MEDIA: usize = 10_000;
/// Most hashes one LookupMediaUploads names.
pub const MAX_LOOKUP: usize = 1000;

/// One reference, checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MediaRef {
    pub uri: String,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    /// Given, or from the name's extension.
    pub mime_type: String,
}

/// Why a reference is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    #[error("a media reference is an object {{\"uri\", \"sha256\", \"mime_type\"?}}")]
    NotAnObject,
    #[error("`uri` is required: a string of 1 to {MAX_URI} characters")]
    Uri,
    #[error(
        "`uri` {0:?} names no supported place: a path (under the worker's media root), file://, https://, gs:// or s3://"
    )]
    Scheme(String),
    #[error("`sha256` is required: the 64 hex digits of the SHA-256 of the file's bytes")]
    Sha256,
    #[error("`mime_type` must be a type/subtype of at most {MAX_MIME} characters")]
    Mime,
    #[error("no `mime_type` given, and none follows from the name {0:?}: give one")]
    UnknownMime(String),
    #[error("unknown field {0:?} (uri, sha256, mime_type)")]
    Unknown(String),
    #[error("more than {MAX_MEDIA_PER_ROW} media in one row")]
    TooMany,
}

/// Parses and checks one reference.
pub fn parse(v: &Value) -> Result<MediaRef, MediaError> {
    let o = v.as_object().ok_or(MediaError::NotAnObject)?;
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "uri" | "sha256" | "mime_type"))
    {
        return Err(MediaError::Unknown(k.clone()));
    }
    let uri = o
        .get("uri")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty() && u.len() <= MAX_URI && !u.contains('\0'))
        .ok_or(MediaError::Uri)?;
    if let Some((scheme, _)) = uri.split_once("://")
        && !matches!(scheme, "file" | "https" | "gs" | "s3")
    {
        return Err(MediaError::Scheme(uri.to_owned()));
    }
    let sha256 = o
        .get("sha256")
        .and_then(Value::as_str)
        .filter(|h| valid_sha256(h))
        .ok_or(MediaError::Sha256)?
        .to_ascii_lowercase();
    let mime_type = match o.get("mime_type") {
        None | Some(Value::Null) => mime_from_name(uri)
            .ok_or_else(|| MediaError::UnknownMime(uri.to_owned()))?
            .to_owned(),
        Some(Value::String(m)) if valid_mime(m) => m.to_ascii_lowercase(),
        Some(_) => return Err(MediaError::Mime),
    };
    Ok(MediaRef {
        uri: uri.to_owned(),
        sha256,
        mime_type,
    })
}

/// Whether `m` is a MIME type (`type/subtype`, at most [`MAX_MIME`]).
pub fn valid_mime(m: &str) -> bool {
    m.len() <= MAX_MIME
        && m.split_once('/').is_some_and(|(t, s)| {
            !t.is_empty()
                && !s.is_empty()
                && m.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"/.+-_".contains(&b))
        })
}

/// The MIME type the provider expects for a file named `name` (its
/// extension), for the types the batch APIs take.
pub fn mime_from_name(name: &str) -> Option<&'static str> {
    let path = name.split(['?', '#']).next().unwrap_or(name);
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "heic" => "image/heic",
        "heif" => "image/heif",
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        _ => return None,
    })
}

/// The media variables of a row's payload (an object of template
/// variables), each checked: `(variable, reference)` in the order `names`
/// declares them. An error names the variable.
pub fn variables(payload: &Value, names: &[String]) -> Result<Vec<(String, MediaRef)>, String> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let v = payload
            .get(name)
            .ok_or_else(|| format!("media variable `{name}` is missing"))?;
        let r = parse(v).map_err(|e| format!("media variable `{name}`: {e}"))?;
        out.push((name.clone(), r));
    }
    Ok(out)
}

/// The media parts (`{"media": {…}}`) of a native Gemini request, checked,
/// in order; an error names the part.
pub fn native_parts(request: &Value) -> Result<Vec<MediaRef>, String> {
    let mut out = Vec::new();
    for (c, content) in request["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (p, part) in content["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(m) = part.get("media") {
                if out.len() == MAX_MEDIA_PER_ROW {
                    return Err(MediaError::TooMany.to_string());
                }
                out.push(parse(m).map_err(|e| format!("contents[{c}].parts[{p}].media: {e}"))?);
            }
        }
    }
    Ok(out)
}

/// Refuses a prompt whose template reads one of its media variables
/// whole, as a value: `{{ page }}` would print the file's reference where a
/// data field of that name (the page number) was meant. Its attributes
/// (`{{ image.uri }}`) are the reference's own fields and pass. A template
/// that does not parse is left to the worker, which says so at render.
pub fn check_media_unused_in_text(template: &str, media: &[String]) -> Result<(), String> {
    if media.is_empty() {
        return Ok(());
    }
    let env = minijinja::Environment::new();
    let Ok(t) = env.template_from_str(template) else {
        return Ok(());
    };
    // Nested: an attribute read is `image.uri`, the variable itself `image`.
    let used = t.undeclared_variables(true);
    let mut clash: Vec<&str> = media
        .iter()
        .filter(|m| used.contains(m.as_str()))
        .map(String::as_str)
        .collect();
    clash.sort_unstable();
    match clash.as_slice() {
        [] => Ok(()),
        names => Err(format!(
            "media variable(s) {} also used in the template's text: a media variable holds a file sent after the text, so the text cannot read it; name the file another variable (e.g. `image`) and keep `{}` for its data",
            names.join(", "),
            names[0]
        )),
    }
}

/// Longest id in an uploaded file's provider name.
pub const MAX_FILE_ID: usize = 128;

/// Whether `name` has the form of an uploaded file's name at a provider,
/// and so names nothing else when it is deleted: Gemini's `files/{id}`,
/// OpenAI's `file-{id}`, Anthropic's `file_{id}`, the id of ASCII letters,
/// digits, `-` and `_` (no `/`, no `..`: never a batch or another path).
pub fn valid_file_name(name: &str) -> bool {
    let id = name
        .strip_prefix("files/")
        .or_else(|| name.strip_prefix("file-"))
        .or_else(|| name.strip_prefix("file_"));
    id.is_some_and(|id| {
        !id.is_empty()
            && id.len() <= MAX_FILE_ID
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// Whether `h` is a SHA-256 in hex (64 digits).
pub fn valid_sha256(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Checks a prompt's media variable names: at most [`MAX_MEDIA_PER_ROW`],
/// each a template identifier, no repeats.
pub fn check_declared(names: &[String]) -> Result<(), String> {
    if names.len() > MAX_MEDIA_PER_ROW {
        return Err(format!("at most {MAX_MEDIA_PER_ROW} media variables"));
    }
    let mut seen = std::collections::HashSet::new();
    for n in names {
        let ident = !n.is_empty()
            && n.len() <= 63
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !n.as_bytes()[0].is_ascii_digit();
        if !ident {
            return Err(format!(
                "media variable {n:?} is not a template identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63)"
            ));
        }
        if !seen.insert(n.as_str()) {
            return Err(format!("media variable {n:?} declared twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    // Invariant (issue 55): a media variable can never also be read as
    // text, so a data field of that name is never taken for a file.
    #[test]
    fn a_media_variable_used_as_text_is_refused() {
        let media = vec!["page".to_string()];
        let e = check_media_unused_in_text("Transcribe page {{ page }}.", &media).unwrap_err();
        assert!(e.contains("page") && e.contains("image"), "{e}");
        assert!(check_media_unused_in_text("{% if page %}x{% endif %}", &media).is_err());
        assert!(check_media_unused_in_text("Page {{ n }} of {{ book }}.", &media).is_ok());
        assert!(check_media_unused_in_text("({{ page.mime_type }})", &media).is_ok());
        assert!(check_media_unused_in_text("{{ page }}", &[]).is_ok());
        assert!(
            check_media_unused_in_text("{{ broken", &media).is_ok(),
            "left to the worker"
        );
    }

    // Invariant (issue 51): only an uploaded file's name passes, so a
    // register entry can never make the janitor delete a batch or a path
    // outside the provider's files.
    #[test]
    fn only_file_names_are_file_names() {
        for ok in [
            "files/abc-123",
            "file-AbC09",
            "file_011CNha8iCJcU1wXNR6q4V8w",
        ] {
            assert!(valid_file_name(ok), "{ok}");
        }
        for bad in [
            "files/../batches/x",
            "files/a/b",
            "batches/x",
            "files/",
            "file-",
            "",
            "files/a b",
            "/files/a",
        ] {
            assert!(!valid_file_name(bad), "{bad}");
        }
        assert!(!valid_file_name(&format!(
            "files/{}",
            "a".repeat(MAX_FILE_ID + 1)
        )));
    }

    use super::*;
    use serde_json::json;

    const H: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_reference_is_checked_field_by_field() {
        let ok = parse(&json!({"uri": "pages/b1/p001.png", "sha256": H.to_uppercase()})).unwrap();
        assert_eq!(ok.mime_type, "image/png");
        assert_eq!(ok.sha256, H, "hex is lowered");
        let given = parse(&json!({"uri": "s3://bucket/x", "sha256": H, "mime_type": "Image/JPEG"}));
        assert_eq!(given.unwrap().mime_type, "image/jpeg");
        for (bad, want) in [
            (json!("pages/1.png"), MediaError::NotAnObject),
            (json!({"sha256": H}), MediaError::Uri),
            (json!({"uri": "", "sha256": H}), MediaError::Uri),
            (
                json!({"uri": "ftp://h/x.png", "sha256": H}),
                MediaError::Scheme("ftp://h/x.png".into()),
            ),
            (json!({"uri": "x.png"}), MediaError::Sha256),
            (json!({"uri": "x.png", "sha256": "abc"}), MediaError::Sha256),
            (
                json!({"uri": "x.bin", "sha256": H}),
                MediaError::UnknownMime("x.bin".into()),
            ),
            (
                json!({"uri": "x.png", "sha256": H, "mime_type": "png"}),
                MediaError::Mime,
            ),
            (
                json!({"uri": "x.png", "sha256": H, "hash": H}),
                MediaError::Unknown("hash".into()),
            ),
        ] {
            assert_eq!(parse(&bad), Err(want), "{bad}");
        }
        assert_eq!(
            parse(&json!({"uri": "x".repeat(MAX_URI + 1), "sha256": H})),
            Err(MediaError::Uri)
        );
    }

    #[test]
    fn variables_and_native_parts_name_what_is_wrong() {
        let names = vec!["page".to_string()];
        let row = json!({"book": "b", "page": {"uri": "p.png", "sha256": H}});
        let got = variables(&row, &names).unwrap();
        assert_eq!(got[0].0, "page");
        let missing = variables(&json!({"book": "b"}), &names).unwrap_err();
        assert!(missing.contains("`page` is missing"), "{missing}");
        let bad = variables(&json!({"page": {"uri": "p.png"}}), &names).unwrap_err();
        assert!(bad.contains("`page`") && bad.contains("sha256"), "{bad}");

        let req = json!({"contents": [{"parts": [{"text": "t"}, {"media": {"uri": "a.pdf", "sha256": H}}]}]});
        let parts = native_parts(&req).unwrap();
        assert_eq!(parts[0].mime_type, "application/pdf");
        let bad = json!({"contents": [{"parts": [{"media": {"uri": "a.pdf"}}]}]});
        assert!(
            native_parts(&bad)
                .unwrap_err()
                .starts_with("contents[0].parts[0].media")
        );
        assert!(
            native_parts(&json!({"contents": [{"parts": [{"text": "t"}]}]}))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn declared_names_are_identifiers_once() {
        assert!(check_declared(&["page".into(), "cover_2".into()]).is_ok());
        assert!(check_declared(&["2page".into()]).is_err());
        assert!(check_declared(&["a-b".into()]).is_err());
        assert!(check_declared(&["p".into(), "p".into()]).is_err());
        let many: Vec<String> = (0..=MAX_MEDIA_PER_ROW).map(|i| format!("m{i}")).collect();
        assert!(check_declared(&many).is_err());
    }

    #[test]
    fn mime_types_come_from_extensions() {
        assert_eq!(mime_from_name("a/B.JPG"), Some("image/jpeg"));
        assert_eq!(mime_from_name("https://h/x.webp?sig=1"), Some("image/webp"));
        assert_eq!(mime_from_name("noext"), None);
    }
}
