//! Dependency checks at enrollment. Rows may depend on rows enrolled before
//! or in the same call. Rows enrolled before cannot depend on new ones, so a
//! cycle can only form inside one call: finding it needs only that call's
//! rows.

use std::collections::HashMap;

/// Most dependencies one row may name. A row waits for each of them, and
/// every one is read and locked when it is enrolled; a thousand is far past
/// any real fan-in and keeps one row's check bounded.
pub const MAX_DEPENDS_ON: usize = 1000;

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

#[cfg(test)]
mod tests {
    use super::*;

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
