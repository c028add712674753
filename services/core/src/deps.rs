//! Dependency checks at enrollment. Rows may depend on rows enrolled before
//! or in the same call. Rows enrolled before cannot depend on new ones, so a
//! cycle can only form inside one call: finding it needs only that call's
//! rows.

use std::collections::HashMap;

/// Most dependencies one row may name. A row waits for each of them, and
/// every one is read and locked when it is enrolled; a thousand is far past
/// any real fan-in and keeps one row's check bounded.
pub const MAX_DEPENDS_ON: usize = 1000;

/// Longest name a row may give a dependency for its prompt.
pub const MAX_NAME_LEN: usize = 64;

/// Checks a dependency's name (`RowInput.dependency_names`): a template
/// identifier, so `deps.name` reads it.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok_start = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if name.len() > MAX_NAME_LEN {
        Err(format!(
            "is {} characters; the limit is {MAX_NAME_LEN}",
            name.len()
        ))
    } else if !ok_start || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Err(format!(
            "{name:?} is not a name: 1-{MAX_NAME_LEN} characters of [A-Za-z0-9_], not starting with a digit"
        ))
    } else {
        Ok(())
    }
}

/// Finds a dependency cycle among `rows` (key, its dependencies). Edges to
/// keys outside `rows` are ignored (they point at already-enrolled rows).
/// Returns one cycle as a list of keys, first key repeated at the end.
pub fn find_cycle<'a>(rows: &[(&'a str, &[&'a str])]) -> Option<Vec<&'a str>> {
    let index: HashMap<&str, usize> = rows.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark = vec![Mark::New; rows.len()];
    for root in 0..rows.len() {
        if mark[root] != Mark::New {
            continue;
        }
        // Iterative depth-first search: (node, next edge to look at).
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::Open;
        while let Some(&mut (node, ref mut edge)) = stack.last_mut() {
            let deps = rows[node].1;
            if *edge == deps.len() {
                mark[node] = Mark::Done;
                stack.pop();
                continue;
            }
            let dep = deps[*edge];
            *edge += 1;
            let Some(&next) = index.get(dep) else {
                continue;
            };
            match mark[next] {
                Mark::Done => {}
                Mark::Open => {
                    let start = stack.iter().position(|(n, _)| *n == next).unwrap_or(0);
                    let mut cycle: Vec<&str> =
                        stack[start..].iter().map(|(n, _)| rows[*n].0).collect();
                    cycle.push(rows[next].0);
                    return Some(cycle);
                }
                Mark::New => {
                    mark[next] = Mark::Open;
                    stack.push((next, 0));
                }
            }
        }
    }
    None
}

/// Each row's depth within one call (acyclic: [`find_cycle`] found none):
/// the links of the longest chain of the call's rows that starts at it (a
/// row depends on the one before it), 1 for a row nothing in the call
/// depends on. Rows enrolled later can only add to it (the store lifts the
/// depths of stored dependencies as their dependants arrive).
pub fn depths(rows: &[(&str, &[&str])]) -> Vec<u32> {
    let index: HashMap<&str, usize> = rows.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    // Dependants of each row within the call.
    let mut below: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    for (child, (_, deps)) in rows.iter().enumerate() {
        for d in deps.iter() {
            if let Some(&parent) = index.get(d) {
                below[parent].push(child);
            }
        }
    }
    let mut depth = vec![0u32; rows.len()];
    for root in 0..rows.len() {
        // Iterative post-order: a row's depth once all its dependants have
        // theirs.
        let mut stack = vec![(root, 0usize)];
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if depth[node] > 0 {
                stack.pop();
                continue;
            }
            if let Some(&child) = below[node].get(*next) {
                *next += 1;
                if depth[child] == 0 {
                    stack.push((child, 0));
                }
                continue;
            }
            depth[node] = 1 + below[node].iter().map(|&c| depth[c]).max().unwrap_or(0);
            stack.pop();
        }
    }
    depth
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name is what a template can read as `deps.name`; anything else
    /// is refused with the rule spelled out.
    #[test]
    fn dependency_names_are_identifiers() {
        for ok in ["prev", "_x", "page_2", &"a".repeat(MAX_NAME_LEN)] {
            assert_eq!(validate_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "2nd", "a-b", "a b", "é", &"a".repeat(MAX_NAME_LEN + 1)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    // Invariant: a chain's head has the chain's length, its tail 1; a row
    // with two branches takes the longer; edges out of the call count not.
    #[test]
    fn depths_are_the_longest_chains_behind_each_row() {
        let rows: Vec<(&str, &[&str])> = vec![
            ("p1", &["stored"]),
            ("p2", &["p1"]),
            ("p3", &["p2"]),
            ("side", &["p1"]),
            ("alone", &[]),
        ];
        assert_eq!(depths(&rows), vec![3, 2, 1, 1, 1]);
        let long: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        let deps: Vec<Vec<&str>> = (0..5000)
            .map(|i| {
                if i == 0 {
                    vec![]
                } else {
                    vec![long[i - 1].as_str()]
                }
            })
            .collect();
        let rows: Vec<(&str, &[&str])> = long
            .iter()
            .zip(&deps)
            .map(|(k, d)| (k.as_str(), d.as_slice()))
            .collect();
        assert_eq!(depths(&rows)[0], 5000, "deep chains need no deep recursion");
    }

    #[test]
    fn a_chain_has_no_cycle() {
        let rows: Vec<(&str, &[&str])> =
            vec![("3", &[]), ("4", &["3"]), ("5", &["4"]), ("12", &[])];
        assert_eq!(find_cycle(&rows), None);
    }

    #[test]
    fn finds_a_self_loop_and_a_long_cycle() {
        let rows: Vec<(&str, &[&str])> = vec![("a", &["a"])];
        assert_eq!(find_cycle(&rows), Some(vec!["a", "a"]));
        let rows: Vec<(&str, &[&str])> =
            vec![("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])];
        let cycle = find_cycle(&rows).unwrap();
        assert_eq!(cycle.first(), cycle.last());
        assert_eq!(cycle.len(), 4);
    }

    #[test]
    fn edges_to_existing_rows_are_not_followed() {
        let rows: Vec<(&str, &[&str])> = vec![("a", &["old"]), ("b", &["a", "old"])];
        assert_eq!(find_cycle(&rows), None);
    }

    #[test]
    fn a_diamond_is_not_a_cycle() {
        let rows: Vec<(&str, &[&str])> = vec![
            ("top", &[]),
            ("l", &["top"]),
            ("r", &["top"]),
            ("bottom", &["l", "r"]),
        ];
        assert_eq!(find_cycle(&rows), None);
    }

    #[test]
    fn deep_chains_do_not_overflow() {
        let keys: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
        let deps: Vec<Vec<&str>> = (0..keys.len())
            .map(|i| {
                if i == 0 {
                    vec![]
                } else {
                    vec![keys[i - 1].as_str()]
                }
            })
            .collect();
        let rows: Vec<(&str, &[&str])> = keys
            .iter()
            .zip(&deps)
            .map(|(k, d)| (k.as_str(), d.as_slice()))
            .collect();
        assert_eq!(find_cycle(&rows), None);
    }
}
