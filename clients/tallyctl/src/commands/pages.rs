//! The page-token loop every list command shares.

use std::future::Future;
use tonic::{Response, Status};

/// The largest page asked for.
pub const PAGE_SIZE: usize = 1000;

/// Collects the pages of one list call in order. `fetch(page_size, token)`
/// asks for one page; `split` takes a response apart into its items and the
/// next page's token (empty on the last page). Stops after the last page,
/// or once `limit` items are in (`0`: no limit, every page); answers the
/// items and whether the server had more.
pub async fn collect<R, T, Fut>(
    limit: usize,
    mut fetch: impl FnMut(i32, String) -> Fut,
    split: impl Fn(R) -> (Vec<T>, String),
) -> Result<(Vec<T>, bool), Status>
where
    Fut: Future<Output = Result<Response<R>, Status>>,
{
    let mut items = Vec::new();
    let mut token = String::new();
    loop {
        let want = if limit == 0 {
            PAGE_SIZE
        } else {
            (limit - items.len()).min(PAGE_SIZE)
        };
        let (page, next) = split(fetch(want as i32, token).await?.into_inner());
        items.extend(page);
        if next.is_empty() {
            return Ok((items, false));
        }
        if limit != 0 && items.len() >= limit {
            return Ok((items, true));
        }
        token = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server holding `0..total`, answering pages of at most `max`; it
    /// records each request's (page size, token).
    async fn list(
        total: usize,
        max: usize,
        limit: usize,
    ) -> (Vec<usize>, bool, Vec<(i32, String)>) {
        let mut asked = Vec::new();
        let fetch = |size, token: String| {
            asked.push((size, token.clone()));
            let start: usize = if token.is_empty() {
                0
            } else {
                token.parse().unwrap()
            };
            let end = (start + (size as usize).min(max)).min(total);
            let next = if end < total {
                end.to_string()
            } else {
                String::new()
            };
            std::future::ready(Ok(Response::new(((start..end).collect(), next))))
        };
        let (items, more) = collect(limit, fetch, |page| page).await.unwrap();
        (items, more, asked)
    }

    #[tokio::test]
    async fn without_a_limit_every_page_is_read_in_order() {
        let (items, more, asked) = list(2500, PAGE_SIZE, 0).await;
        assert_eq!(items, (0..2500).collect::<Vec<_>>());
        assert!(!more);
        assert_eq!(
            asked,
            vec![
                (1000, String::new()),
                (1000, "1000".into()),
                (1000, "2000".into())
            ]
        );
    }

    #[tokio::test]
    async fn a_limit_asks_for_what_is_left_and_says_whether_more_remain() {
        let (items, more, asked) = list(100, 30, 50).await;
        assert_eq!(items, (0..50).collect::<Vec<_>>());
        assert!(more);
        assert_eq!(asked, vec![(50, String::new()), (20, "30".into())]);
        let (items, more, _) = list(40, 30, 40).await;
        assert_eq!(items.len(), 40);
        assert!(!more, "the last page ends the list, however many came");
    }

    #[tokio::test]
    async fn an_error_ends_the_list() {
        let mut calls = 0;
        let fetch = |_, _| {
            calls += 1;
            std::future::ready(Err(Status::unavailable("boom")))
        };
        let result = collect(0, fetch, |page: (Vec<u8>, String)| page).await;
        assert_eq!(result.unwrap_err().message(), "boom");
        assert_eq!(calls, 1);
    }
}
