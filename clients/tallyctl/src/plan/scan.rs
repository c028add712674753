//! The file-system side of the planner: walks the first-pass results tree
//! `label_to_curricular/{state}/{school}/{year}/` (the allow-list decides
//! which groups exist) and lists the matching image directories. Only the
//! image directories of groups with results are read; the images tree is
//! never walked whole.

use super::{File, Group, GroupFiles};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The results tree's subdirectory the seed names.
pub const RESULTS_SUBDIR: &str = "label_to_curricular";

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Layout(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ScanError + '_ {
    move |source| ScanError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// `root/label_to_curricular`, or `root` itself when it is that directory.
pub fn results_dir(root: &Path) -> Result<PathBuf, ScanError> {
    let root = std::fs::canonicalize(root).map_err(io(root))?;
    if root.file_name().is_some_and(|n| n == RESULTS_SUBDIR) {
        return Ok(root);
    }
    let sub = root.join(RESULTS_SUBDIR);
    if sub.is_dir() {
        Ok(sub)
    } else {
        Err(ScanError::Layout(format!(
            "{} has no {RESULTS_SUBDIR}/ directory (expected {RESULTS_SUBDIR}/{{state}}/{{school}}/{{year}}/{{n}}.json)",
            root.display()
        )))
    }
}

/// Entries of a directory: `(name, path, is_dir)`, sorted by name. Hidden
/// entries (`.DS_Store`, `.git`) are skipped silently; names that are not
/// UTF-8 are skipped with a warning.
fn entries(
    dir: &Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<(String, PathBuf, bool)>, ScanError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            warnings.push(format!("ignored {}: name is not UTF-8", path.display()));
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        // Follows symlinks: a linked directory counts as a directory.
        let is_dir = std::fs::metadata(&path).map_err(io(&path))?.is_dir();
        out.push((name, path, is_dir));
    }
    out.sort();
    Ok(out)
}

/// Every group with a results directory, with its results files and the
/// files of its images directory (empty when that does not exist).
pub fn scan(
    images_root: &Path,
    results_root: &Path,
) -> Result<(BTreeMap<Group, GroupFiles>, Vec<String>), ScanError> {
    let images_root = std::fs::canonicalize(images_root).map_err(io(images_root))?;
    let results = results_dir(results_root)?;
    let mut warnings = Vec::new();
    let mut groups = BTreeMap::new();
    let unexpected = |path: &Path, what: &str| {
        format!(
            "ignored {}: {what} (expected {RESULTS_SUBDIR}/{{state}}/{{school}}/{{year}}/{{n}}.json)",
            path.display()
        )
    };
    for (state, state_path, is_dir) in entries(&results, &mut warnings)? {
        if !is_dir {
            warnings.push(unexpected(
                &state_path,
                "a file where a state directory belongs",
            ));
            continue;
        }
        for (school, school_path, is_dir) in entries(&state_path, &mut warnings)? {
            if !is_dir {
                warnings.push(unexpected(
                    &school_path,
                    "a file where a school directory belongs",
                ));
                continue;
            }
            for (year, year_path, is_dir) in entries(&school_path, &mut warnings)? {
                if !is_dir {
                    warnings.push(unexpected(
                        &year_path,
                        "a file where a year directory belongs",
                    ));
                    continue;
                }
                let mut files = GroupFiles::default();
                for (name, path, is_dir) in entries(&year_path, &mut warnings)? {
                    if is_dir {
                        warnings.push(unexpected(&path, "a directory inside a year directory"));
                        continue;
                    }
                    files.results.push(File {
                        name,
                        path: path.display().to_string(),
                    });
                }
                let image_dir = images_root.join(&state).join(&school).join(&year);
                if image_dir.is_dir() {
                    for (name, path, is_dir) in entries(&image_dir, &mut warnings)? {
                        if !is_dir {
                            files.images.push(File {
                                name,
                                path: path.display().to_string(),
                            });
                        }
                    }
                }
                groups.insert(
                    Group {
                        state: state.clone(),
                        school: school.clone(),
                        year,
                    },
                    files,
                );
            }
        }
    }
    Ok((groups, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{MissingImage, plan};

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "{}").unwrap();
    }

    #[test]
    fn walks_the_seed_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let images = tmp.path().join("images");
        let results = tmp.path().join("first_pass");
        for n in 1..=20 {
            touch(&images.join(format!("California/LincolnHigh/2023/{n}.jpg")));
        }
        for n in [3, 4, 5, 12] {
            touch(&results.join(format!(
                "label_to_curricular/California/LincolnHigh/2023/{n}.json"
            )));
        }
        touch(&results.join("label_to_curricular/README.md"));
        touch(&results.join("label_to_curricular/California/LincolnHigh/2023/.DS_Store"));
        let (groups, warnings) = scan(&images, &results).unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("README.md"));
        let (p, _) = plan(&groups, MissingImage::Error).unwrap();
        assert_eq!(p.nodes.len(), 4);
        assert!(p.nodes[0].image_path.starts_with('/'));
        assert!(
            p.nodes[0]
                .image_path
                .ends_with("images/California/LincolnHigh/2023/3.jpg")
        );
        // Pointing at label_to_curricular itself works too.
        let (again, _) = scan(&images, &results.join(RESULTS_SUBDIR)).unwrap();
        assert_eq!(again, groups);
        assert!(matches!(scan(&images, &images), Err(ScanError::Layout(_))));
    }
}
