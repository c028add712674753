//! The dataset planner: from what files exist, the immutable plan of page
//! rows and their dependencies. Everything here is pure (file names in, plan
//! out); [`scan`] walks the file system, [`page_prompt`] is the prompt pages
//! are enrolled with when none is named, and [`crate::commands::plan`] writes
//! and enrolls.
//!
//! Rules (the seed's, plus the decisions for what it leaves open):
//! - Only pages with a first-pass `{n}.json` are eligible; images without one
//!   are ignored.
//! - Within a `{state}/{school}/{year}` group, eligible pages sorted
//!   numerically; a page depends on the previous eligible page only when
//!   that is the adjacent number (3→4→5; 12 alone when 11 is not eligible).
//! - File names that are not `{digits}.json` are ignored with a warning;
//!   `03.json` is page 3, and `3.json` next to `03.json` is an error (which
//!   one is page 3?).
//! - An eligible page needs its image (`{n}.jpg`, `{n}.jpeg`, `{n}.png`,
//!   `{n}.webp`, `{n}.gif` or `{n}.pdf`, any case: what the providers read
//!   as a page; a type one provider does not take fails that row there):
//!   without one planning fails and lists every such page, unless
//!   [`MissingImage::Skip`], which leaves the page out of the plan (it is
//!   then not eligible, so it also breaks the dependency chain, like any
//!   ineligible page).
//! - Keys are `state:school:year:page`. Name characters outside
//!   `[A-Za-z0-9._@+=-]` (spaces, `'`, `/`, `:` and `~` itself, non-ASCII)
//!   are escaped as `~HH` per UTF-8 byte, so keys stay valid and unambiguous
//!   (`New York` → `New~20York`). A key over 256 characters is an error.

pub mod page_prompt;
pub mod scan;

use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use tally_core::keys::MAX_KEY_LEN;

/// A `{state}/{school}/{year}` group, as the directory names spell it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    pub state: String,
    pub school: String,
    pub year: String,
}

/// A file found in a group directory: its name and full path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub name: String,
    pub path: String,
}

/// What a group directory holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFiles {
    /// Files of the first-pass results directory of the group.
    pub results: Vec<File>,
    /// Files of the images directory of the group.
    pub images: Vec<File>,
}

/// What to do with an eligible page whose image is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingImage {
    /// Refuse to plan (the default: a row without its image cannot run).
    #[default]
    Error,
    /// Leave the page out of the plan, with a warning.
    Skip,
}

/// One page row of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub key: String,
    pub group: Group,
    pub page: u64,
    pub image_path: String,
    pub filter_json: String,
    /// The previous adjacent eligible page's key.
    pub depends_on: Option<String>,
}

/// The plan: nodes in group order, pages ascending (every dependency comes
/// before its dependant).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub nodes: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{group}: page {page} is named by more than one results file: {files}")]
    DuplicatePage {
        group: String,
        page: u64,
        files: String,
    },
    #[error("{group}: page {page} has more than one image: {files}")]
    DuplicateImage {
        group: String,
        page: u64,
        files: String,
    },
    #[error(
        "{} eligible pages have no image ({}{}): a page's image is {{page}}.jpg, .jpeg, .png, .webp, .gif or .pdf beside its results file's group; add the images (or name them so), or pass --skip-missing-images to leave those pages out",
        .0.len(),
        .0.iter().take(10).cloned().collect::<Vec<_>>().join(", "),
        if .0.len() > 10 { ", …" } else { "" }
    )]
    MissingImages(Vec<String>),
    #[error("key {key:?} is longer than {MAX_KEY_LEN} characters")]
    KeyTooLong { key: String },
    #[error("plan file: {0}")]
    BadPlanFile(String),
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.state, self.school, self.year)
    }
}

/// Escapes one key component: `[A-Za-z0-9._@+=-]` stays, every other byte
/// of the UTF-8 encoding becomes `~HH` (upper-case hex).
pub fn escape_component(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"._@+=-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("~{b:02X}"));
        }
    }
    out
}

/// The inverse of [`escape_component`]; `None` for text it never produces.
pub fn unescape_component(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'~' {
            let hex = text.get(i + 1..i + 3)?;
            if hex.to_ascii_uppercase() != hex {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `state:school:year:page`, escaped.
pub fn node_key(group: &Group, page: u64) -> String {
    format!(
        "{}:{}:{}:{page}",
        escape_component(&group.state),
        escape_component(&group.school),
        escape_component(&group.year)
    )
}

/// The page number of `{digits}.{ext}` (extension compared without case);
/// `None` for any other name.
pub fn page_number(file_name: &str, extensions: &[&str]) -> Option<u64> {
    let (stem, ext) = file_name.rsplit_once('.')?;
    if !extensions.iter().any(|e| e.eq_ignore_ascii_case(ext)) {
        return None;
    }
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

const RESULT_EXTENSIONS: &[&str] = &["json"];
const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp", "gif", "pdf"];

/// Plans every group. Warnings (ignored files, skipped pages) come back
/// with the plan; anything that makes the plan ambiguous is an error.
pub fn plan(
    groups: &BTreeMap<Group, GroupFiles>,
    missing: MissingImage,
) -> Result<(Plan, Vec<String>), PlanError> {
    let mut warnings = Vec::new();
    let mut nodes = Vec::new();
    let mut missing_images = Vec::new();
    for (group, files) in groups {
        let mut pages: BTreeMap<u64, &File> = BTreeMap::new();
        for f in &files.results {
            let Some(page) = page_number(&f.name, RESULT_EXTENSIONS) else {
                warnings.push(format!(
                    "ignored {}: not a page results file ({{number}}.json)",
                    f.path
                ));
                continue;
            };
            if let Some(other) = pages.insert(page, f) {
                return Err(PlanError::DuplicatePage {
                    group: group.to_string(),
                    page,
                    files: format!("{}, {}", other.name, f.name),
                });
            }
        }
        let mut images: HashMap<u64, Vec<&File>> = HashMap::new();
        for f in &files.images {
            if let Some(page) = page_number(&f.name, IMAGE_EXTENSIONS) {
                images.entry(page).or_default().push(f);
            }
        }
        let mut previous: Option<(u64, String)> = None;
        for (page, result) in pages {
            let image = match images.get(&page).map(Vec::as_slice) {
                Some([one]) => one,
                Some(many @ [_, _, ..]) => {
                    return Err(PlanError::DuplicateImage {
                        group: group.to_string(),
                        page,
                        files: many
                            .iter()
                            .map(|f| f.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
                Some([]) | None => {
                    match missing {
                        MissingImage::Error => missing_images.push(format!("{group}/{page}")),
                        MissingImage::Skip => warnings.push(format!(
                            "skipped {group} page {page}: no image {page}.jpg, .jpeg, .png, .webp, .gif or .pdf (its successor, if any, starts a new chain)"
                        )),
                    }
                    previous = None;
                    continue;
                }
            };
            let key = node_key(group, page);
            if key.len() > MAX_KEY_LEN {
                return Err(PlanError::KeyTooLong { key });
            }
            let depends_on = match &previous {
                Some((p, k)) if *p + 1 == page => Some(k.clone()),
                _ => None,
            };
            previous = Some((page, key.clone()));
            nodes.push(Node {
                key,
                group: group.clone(),
                page,
                image_path: image.path.clone(),
                filter_json: result.path.clone(),
                depends_on,
            });
        }
    }
    if !missing_images.is_empty() {
        return Err(PlanError::MissingImages(missing_images));
    }
    Ok((Plan { nodes }, warnings))
}

impl serde::Serialize for Plan {
    /// `{"nodes": {key: {image_path, filter_json}}, "deps": {key: key|null}}`
    /// in plan order (readable: pages ascend numerically).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Nodes<'a>(&'a [Node]);
        impl serde::Serialize for Nodes<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(self.0.len()))?;
                for n in self.0 {
                    m.serialize_entry(
                        &n.key,
                        &json!({"image_path": n.image_path, "filter_json": n.filter_json}),
                    )?;
                }
                m.end()
            }
        }
        struct Deps<'a>(&'a [Node]);
        impl serde::Serialize for Deps<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(self.0.len()))?;
                for n in self.0 {
                    m.serialize_entry(&n.key, &n.depends_on)?;
                }
                m.end()
            }
        }
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("nodes", &Nodes(&self.nodes))?;
        m.serialize_entry("deps", &Deps(&self.nodes))?;
        m.end()
    }
}

impl Plan {
    /// The plan file's text (pretty JSON, trailing newline).
    pub fn to_json_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a plan always serializes");
        text.push('\n');
        text
    }

    /// The plan as a JSON value (for comparing with a file's).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a plan always serializes")
    }

    /// Reads a plan file's JSON back (for `plan --from`). Keys must be
    /// `state:school:year:page` as the planner writes them; nodes come back
    /// ordered so that every dependency precedes its dependants.
    pub fn from_value(v: &Value) -> Result<Plan, PlanError> {
        let bad = |m: String| PlanError::BadPlanFile(m);
        let nodes = v
            .get("nodes")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("missing object \"nodes\"".into()))?;
        let deps = v
            .get("deps")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("missing object \"deps\"".into()))?;
        let mut out = Vec::with_capacity(nodes.len());
        for (key, node) in nodes {
            let field = |name: &str| {
                node.get(name)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| bad(format!("node {key}: missing string {name:?}")))
            };
            let parts: Vec<&str> = key.split(':').collect();
            let [state, school, year, page] = parts.as_slice() else {
                return Err(bad(format!(
                    "node key {key:?} is not state:school:year:page"
                )));
            };
            let name = |p: &str| {
                unescape_component(p).ok_or_else(|| bad(format!("node key {key:?}: bad escape")))
            };
            let page: u64 = page
                .parse()
                .map_err(|_| bad(format!("node key {key:?}: page is not a number")))?;
            let depends_on = match deps.get(key) {
                Some(Value::Null) => None,
                Some(Value::String(d)) if nodes.contains_key(d) => Some(d.clone()),
                Some(Value::String(d)) => {
                    return Err(bad(format!(
                        "node {key} depends on {d}, which is not a node"
                    )));
                }
                Some(_) => return Err(bad(format!("deps of {key} must be a key or null"))),
                None => return Err(bad(format!("node {key} has no entry in \"deps\""))),
            };
            out.push(Node {
                key: key.clone(),
                group: Group {
                    state: name(state)?,
                    school: name(school)?,
                    year: name(year)?,
                },
                page,
                image_path: field("image_path")?,
                filter_json: field("filter_json")?,
                depends_on,
            });
        }
        if let Some(extra) = deps.keys().find(|k| !nodes.contains_key(*k)) {
            return Err(bad(format!("deps names {extra}, which is not a node")));
        }
        out.sort_by(|a, b| (&a.group, a.page).cmp(&(&b.group, b.page)));
        Ok(Plan {
            nodes: topological(out)?,
        })
    }
}

/// Orders nodes so each dependency comes first (keeping the given order
/// where it already does); a cycle is an error.
fn topological(nodes: Vec<Node>) -> Result<Vec<Node>, PlanError> {
    let index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.key.clone(), i))
        .collect();
    let mut placed = vec![false; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    for start in 0..nodes.len() {
        let mut chain = Vec::new();
        let mut at = Some(start);
        while let Some(i) = at {
            if placed[i] {
                break;
            }
            if chain.contains(&i) {
                return Err(PlanError::BadPlanFile(format!(
                    "dependency cycle through {}",
                    nodes[i].key
                )));
            }
            chain.push(i);
            at = nodes[i].depends_on.as_ref().map(|d| index[d]);
        }
        for &i in chain.iter().rev() {
            placed[i] = true;
            order.push(i);
        }
    }
    let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    Ok(order
        .into_iter()
        .map(|i| slots[i].take().expect("each node placed once"))
        .collect())
}

/// What the row's payload holds: the page's identity, both paths, and the
/// first-pass result (its parsed content, or `null` when only paths are
/// sent).
/// The fields [`payload`] writes: a prompt's media variable may be none of
/// them (the image would take the page number's place).
pub const PAYLOAD_FIELDS: [&str; 7] = [
    "state",
    "school",
    "year",
    "page",
    "image_path",
    "filter_json",
    "first_pass",
];

pub fn payload(node: &Node, first_pass: Option<Value>) -> String {
    let mut v = json!({
        "state": node.group.state,
        "school": node.group.school,
        "year": node.group.year,
        "page": node.page,
        "image_path": node.image_path,
        "filter_json": node.filter_json,
    });
    if let Some(content) = first_pass {
        v["first_pass"] = content;
    }
    // serde_json's map is ordered by key: the same node always gives the
    // same bytes, so re-enrolling an unchanged plan is ALREADY_PRESENT.
    serde_json::to_string(&v).expect("a payload always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &str, names: impl IntoIterator<Item = String>) -> Vec<File> {
        names
            .into_iter()
            .map(|name| File {
                path: format!("{dir}/{name}"),
                name,
            })
            .collect()
    }

    fn group(state: &str, school: &str, year: &str) -> Group {
        Group {
            state: state.into(),
            school: school.into(),
            year: year.into(),
        }
    }

    fn deps(plan: &Plan) -> Vec<(String, Option<String>)> {
        plan.nodes
            .iter()
            .map(|n| (n.key.clone(), n.depends_on.clone()))
            .collect()
    }

    /// The seed's example: images 1..20, first-pass JSON for 3, 4, 5, 12.
    fn seed_example() -> BTreeMap<Group, GroupFiles> {
        let mut groups = BTreeMap::new();
        groups.insert(
            group("California", "LincolnHigh", "2023"),
            GroupFiles {
                results: files(
                    "/r/label_to_curricular/California/LincolnHigh/2023",
                    [12, 3, 5, 4].map(|n| format!("{n}.json")),
                ),
                images: files(
                    "/i/California/LincolnHigh/2023",
                    (1..=20).map(|n| format!("{n}.jpg")),
                ),
            },
        );
        groups
    }

    #[test]
    fn the_seed_example_is_3_4_5_and_12_alone() {
        let (plan, warnings) = plan(&seed_example(), MissingImage::Error).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let k = |n: u32| format!("California:LincolnHigh:2023:{n}");
        assert_eq!(
            deps(&plan),
            vec![
                (k(3), None),
                (k(4), Some(k(3))),
                (k(5), Some(k(4))),
                (k(12), None),
            ]
        );
        assert_eq!(
            plan.nodes[0].image_path,
            "/i/California/LincolnHigh/2023/3.jpg"
        );
        assert_eq!(
            plan.nodes[3].filter_json,
            "/r/label_to_curricular/California/LincolnHigh/2023/12.json"
        );
        let v = plan.to_value();
        assert_eq!(v["deps"][k(3)], Value::Null);
        assert_eq!(v["deps"][k(5)], k(4));
        assert_eq!(
            v["nodes"][k(12)]["image_path"],
            "/i/California/LincolnHigh/2023/12.jpg"
        );
        assert_eq!(v["nodes"].as_object().unwrap().len(), 4);
        // The text keeps pages in numeric order.
        let text = plan.to_json_text();
        assert!(text.find(&k(5)).unwrap() < text.find(&k(12)).unwrap());
    }

    #[test]
    fn plans_round_trip_through_their_json() {
        let (plan, _) = plan(&seed_example(), MissingImage::Error).unwrap();
        let back = Plan::from_value(&serde_json::from_str(&plan.to_json_text()).unwrap()).unwrap();
        assert_eq!(back, plan);
    }

    #[test]
    fn groups_are_independent() {
        let mut groups = seed_example();
        groups.insert(
            group("Texas", "Central", "2022"),
            GroupFiles {
                results: files("/r/T", ["1.json", "2.json", "4.json"].map(String::from)),
                images: files("/i/T", (1..=4).map(|n| format!("{n}.jpg"))),
            },
        );
        groups.insert(
            group("California", "LincolnHigh", "2024"),
            GroupFiles {
                results: files("/r/C24", ["6.json"].map(String::from)),
                images: files("/i/C24", ["6.jpg"].map(String::from)),
            },
        );
        let (plan, _) = plan(&groups, MissingImage::Error).unwrap();
        assert_eq!(
            deps(&plan),
            vec![
                ("California:LincolnHigh:2023:3".into(), None),
                (
                    "California:LincolnHigh:2023:4".into(),
                    Some("California:LincolnHigh:2023:3".into())
                ),
                (
                    "California:LincolnHigh:2023:5".into(),
                    Some("California:LincolnHigh:2023:4".into())
                ),
                ("California:LincolnHigh:2023:12".into(), None),
                ("California:LincolnHigh:2024:6".into(), None),
                ("Texas:Central:2022:1".into(), None),
                (
                    "Texas:Central:2022:2".into(),
                    Some("Texas:Central:2022:1".into())
                ),
                ("Texas:Central:2022:4".into(), None),
            ]
        );
    }

    #[test]
    fn odd_file_names_are_ignored_with_a_warning() {
        let mut groups = BTreeMap::new();
        groups.insert(
            group("S", "X", "2020"),
            GroupFiles {
                results: files(
                    "/r",
                    [
                        "cover.json",
                        "2.json",
                        "3.txt",
                        "-1.json",
                        "1.5.json",
                        "002.json",
                    ]
                    .map(String::from)
                    .into_iter()
                    .filter(|n| n != "002.json"),
                ),
                images: files("/i", ["2.jpg", "cover.jpg", "notes.txt"].map(String::from)),
            },
        );
        let (plan, warnings) = plan(&groups, MissingImage::Error).unwrap();
        assert_eq!(deps(&plan), vec![("S:X:2020:2".into(), None)]);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0].contains("/r/cover.json"));
    }

    #[test]
    fn leading_zeros_name_the_same_page_and_duplicates_are_refused() {
        let mut groups = BTreeMap::new();
        groups.insert(
            group("S", "X", "2020"),
            GroupFiles {
                results: files("/r", ["03.json", "4.json"].map(String::from)),
                images: files("/i", ["3.JPG", "0004.jpeg"].map(String::from)),
            },
        );
        let (p, _) = plan(&groups, MissingImage::Error).unwrap();
        assert_eq!(
            deps(&p),
            vec![
                ("S:X:2020:3".into(), None),
                ("S:X:2020:4".into(), Some("S:X:2020:3".into()))
            ]
        );
        assert_eq!(p.nodes[1].image_path, "/i/0004.jpeg");
        groups.get_mut(&group("S", "X", "2020")).unwrap().results =
            files("/r", ["3.json", "03.json"].map(String::from));
        assert!(matches!(
            plan(&groups, MissingImage::Error),
            Err(PlanError::DuplicatePage { page: 3, .. })
        ));
        groups.get_mut(&group("S", "X", "2020")).unwrap().results =
            files("/r", ["3.json"].map(String::from));
        groups.get_mut(&group("S", "X", "2020")).unwrap().images =
            files("/i", ["3.jpg", "3.jpeg"].map(String::from));
        assert!(matches!(
            plan(&groups, MissingImage::Error),
            Err(PlanError::DuplicateImage { page: 3, .. })
        ));
    }

    // Invariant: a page's image may be any type the providers read as a
    // page (PNG, WebP, GIF and PDF as well as JPEG), in any case.
    #[test]
    fn png_webp_gif_and_pdf_pages_are_planned() {
        let mut groups = BTreeMap::new();
        groups.insert(
            group("S", "X", "2020"),
            GroupFiles {
                results: files(
                    "/r",
                    ["1.json", "2.json", "3.json", "4.json"].map(String::from),
                ),
                images: files(
                    "/i",
                    ["1.png", "2.WebP", "3.gif", "4.PDF"].map(String::from),
                ),
            },
        );
        let (p, _) = plan(&groups, MissingImage::Error).unwrap();
        let images: Vec<&str> = p.nodes.iter().map(|n| n.image_path.as_str()).collect();
        assert_eq!(images, ["/i/1.png", "/i/2.WebP", "/i/3.gif", "/i/4.PDF"]);
    }

    #[test]
    fn missing_images_fail_or_break_the_chain() {
        let mut groups = BTreeMap::new();
        groups.insert(
            group("S", "X", "2020"),
            GroupFiles {
                results: files("/r", ["1.json", "2.json", "3.json"].map(String::from)),
                images: files("/i", ["1.jpg", "3.jpg"].map(String::from)),
            },
        );
        let err = plan(&groups, MissingImage::Error).unwrap_err();
        assert_eq!(err, PlanError::MissingImages(vec!["S/X/2020/2".into()]));
        assert!(err.to_string().contains("--skip-missing-images"));
        let (p, warnings) = plan(&groups, MissingImage::Skip).unwrap();
        assert_eq!(
            deps(&p),
            vec![("S:X:2020:1".into(), None), ("S:X:2020:3".into(), None)]
        );
        assert!(warnings[0].contains("page 2"));
    }

    #[test]
    fn names_outside_the_key_alphabet_are_escaped_reversibly() {
        let g = group("New York", "St. Mary's: Upper~School", "2023");
        let key = node_key(&g, 7);
        assert_eq!(key, "New~20York:St.~20Mary~27s~3A~20Upper~7ESchool:2023:7");
        assert_eq!(tally_core::keys::validate_key(&key), Ok(()));
        assert_eq!(escape_component("Zürich"), "Z~C3~BCrich");
        for name in [
            "New York",
            "St. Mary's: Upper~School",
            "Zürich",
            "a~b",
            "plain",
        ] {
            assert_eq!(unescape_component(&escape_component(name)).unwrap(), name);
        }
        assert_eq!(unescape_component("bad~2"), None);
        assert_eq!(unescape_component("lower~7e"), None);
        let long = group(&"s".repeat(200), &"x".repeat(60), "2023");
        let mut groups = BTreeMap::new();
        groups.insert(
            long,
            GroupFiles {
                results: files("/r", ["1.json"].map(String::from)),
                images: files("/i", ["1.jpg"].map(String::from)),
            },
        );
        assert!(matches!(
            plan(&groups, MissingImage::Error),
            Err(PlanError::KeyTooLong { .. })
        ));
    }

    #[test]
    fn plan_files_are_checked_and_ordered_on_read() {
        let v = json!({
            "nodes": {
                "S:X:1:2": {"image_path": "i2", "filter_json": "f2"},
                "S:X:1:10": {"image_path": "i10", "filter_json": "f10"},
                "S:X:1:1": {"image_path": "i1", "filter_json": "f1"},
            },
            "deps": {"S:X:1:2": "S:X:1:1", "S:X:1:1": null, "S:X:1:10": null},
        });
        let p = Plan::from_value(&v).unwrap();
        let keys: Vec<_> = p.nodes.iter().map(|n| n.key.as_str()).collect();
        assert_eq!(keys, ["S:X:1:1", "S:X:1:2", "S:X:1:10"]);
        // A hand-written dependency on a later page is still enrolled first.
        let v = json!({
            "nodes": {
                "S:X:1:1": {"image_path": "i1", "filter_json": "f1"},
                "S:X:1:2": {"image_path": "i2", "filter_json": "f2"},
            },
            "deps": {"S:X:1:1": "S:X:1:2", "S:X:1:2": null},
        });
        let keys: Vec<_> = Plan::from_value(&v)
            .unwrap()
            .nodes
            .into_iter()
            .map(|n| n.key)
            .collect();
        assert_eq!(keys, ["S:X:1:2", "S:X:1:1"]);
        let cycle = json!({
            "nodes": {
                "S:X:1:1": {"image_path": "i1", "filter_json": "f1"},
                "S:X:1:2": {"image_path": "i2", "filter_json": "f2"},
            },
            "deps": {"S:X:1:1": "S:X:1:2", "S:X:1:2": "S:X:1:1"},
        });
        assert!(
            Plan::from_value(&cycle)
                .unwrap_err()
                .to_string()
                .contains("cycle")
        );
        let dangling = json!({
            "nodes": {"S:X:1:1": {"image_path": "i1", "filter_json": "f1"}},
            "deps": {"S:X:1:1": "S:X:1:0"},
        });
        assert!(Plan::from_value(&dangling).is_err());
        assert!(Plan::from_value(&json!({"nodes": {"a:b": {}}, "deps": {}})).is_err());
    }

    #[test]
    fn payloads_are_deterministic() {
        let (p, _) = plan(&seed_example(), MissingImage::Error).unwrap();
        let a = payload(&p.nodes[1], Some(json!({"z": 1, "a": 2})));
        let b = payload(&p.nodes[1], Some(json!({"a": 2, "z": 1})));
        assert_eq!(a, b);
        let v: Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v["page"], 4);
        assert_eq!(v["first_pass"]["z"], 1);
        let paths_only: Value = serde_json::from_str(&payload(&p.nodes[1], None)).unwrap();
        assert!(paths_only.get("first_pass").is_none());
    }
}
