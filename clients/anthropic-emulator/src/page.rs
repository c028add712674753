//! Cursor pages of a list, as the API pages its lists: `limit` (default 20,
//! 1 to 1000) items after `after_id` or, with `before_id`, the `limit`
//! items just before it, in the list's own order; `has_more` says whether
//! the list goes on in the direction of travel; `first_id` and `last_id`
//! name the page's ends (the SDK's next cursor). Pure.

use crate::error::ApiError;

pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 1000;

/// The cursor and size of a list call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub after_id: Option<String>,
    pub before_id: Option<String>,
    pub limit: Option<usize>,
}

/// Which items a page holds: `items[start..end]`, and whether there are more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: usize,
    pub end: usize,
    pub has_more: bool,
}

impl Page {
    /// The page of a list of `ids` (an unknown cursor gives an empty page).
    pub fn window(&self, ids: &[&str]) -> Result<Window, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::invalid(format!(
                "limit: Input should be between 1 and {MAX_LIMIT}"
            )));
        }
        let position = |cursor: &str| ids.iter().position(|id| *id == cursor);
        Ok(match (&self.after_id, &self.before_id) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "after_id and before_id cannot both be given",
                ));
            }
            (None, Some(before)) => {
                let end = position(before).unwrap_or(0);
                let start = end.saturating_sub(limit);
                Window {
                    start,
                    end,
                    has_more: start > 0,
                }
            }
            (after, None) => {
                let start = match after {
                    Some(after) => position(after).map_or(ids.len(), |i| i + 1),
                    None => 0,
                };
                let end = (start + limit).min(ids.len());
                Window {
                    start,
                    end,
                    has_more: end < ids.len(),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(after: Option<&str>, before: Option<&str>, limit: usize) -> Page {
        Page {
            after_id: after.map(str::to_owned),
            before_id: before.map(str::to_owned),
            limit: Some(limit),
        }
    }

    // Invariant: walking forward by `last_id` and backward by `first_id`
    // visits every item once, in list order, and `has_more` is false only
    // at the list's end in the direction of travel.
    #[test]
    fn pages_walk_both_ways() {
        let ids = ["e", "d", "c", "b", "a"];
        let w = page(None, None, 2).window(&ids).unwrap();
        assert_eq!((w.start, w.end, w.has_more), (0, 2, true));
        let w = page(Some("d"), None, 2).window(&ids).unwrap();
        assert_eq!((w.start, w.end, w.has_more), (2, 4, true));
        let w = page(Some("b"), None, 2).window(&ids).unwrap();
        assert_eq!((w.start, w.end, w.has_more), (4, 5, false));
        let w = page(None, Some("a"), 2).window(&ids).unwrap();
        assert_eq!((w.start, w.end, w.has_more), (2, 4, true));
        let w = page(None, Some("c"), 2).window(&ids).unwrap();
        assert_eq!((w.start, w.end, w.has_more), (0, 2, false));
        let w = page(None, Some("e"), 2).window(&ids).unwrap();
        assert_eq!((w.start, w.end, w.has_more), (0, 0, false));
        let w = page(Some("zz"), None, 2).window(&ids).unwrap();
        assert_eq!(w.start, w.end);
        assert!(page(None, None, 0).window(&ids).is_err());
        assert!(page(None, None, 1001).window(&ids).is_err());
        assert!(page(Some("a"), Some("b"), 1).window(&ids).is_err());
        assert_eq!(Page::default().window(&ids).unwrap().end, 5);
    }
}
