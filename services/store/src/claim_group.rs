//! Group commit of single-row claims: concurrent claims of one row each, for
//! the same ledger, model and provider, made through one server, share one
//! claim statement instead of running one each (`claims::take_group`).
//!
//! How a group forms: a claim that finds no statement of its group running
//! runs at once, alone, so a lone caller never waits. Claims that arrive
//! while one runs wait for it to end; then the first of them runs one
//! statement for itself and the others waiting (at most [`MAX_GROUP`]). A
//! claim so waits at most one statement longer than alone, and groups grow
//! only when calls overlap, under load, where one statement for each call
//! is what the database would pay for.
//!
//! A claim finding [`MAX_GROUP`] claims already waiting claims alone.
//!
//! Nothing here knows SQL: the statement is the `take` the caller passes,
//! which answers one result per member, in order. A member whose caller has
//! gone is left out of the next statement; one told to run it that went
//! away before it looked passes the turn on. When the statement fails, or
//! the caller leading it goes away, the others are told to claim alone.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The most claims one statement takes rows for.
pub(crate) const MAX_GROUP: usize = 64;

/// Which claims may share a statement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct GroupKey {
    pub ledger_id: i64,
    /// `None`: that of the oldest ready row.
    pub model: Option<String>,
    /// `None`: any provider.
    pub provider: Option<String>,
}

/// What a claim got from its group.
#[derive(Debug)]
pub(crate) enum Grouped<T> {
    /// Its own result of a statement.
    Taken(T),
    /// No statement ran for it: the caller claims alone.
    Alone,
}

/// A claim waiting for the statement after the running one.
struct Waiting<M, T> {
    member: M,
    turn: oneshot::Sender<Turn<M, T>>,
}

/// What a waiting claim is told.
enum Turn<M, T> {
    /// The statement ran: its result.
    Done(T),
    /// Run the next statement, for yourself and these.
    Lead(Vec<Waiting<M, T>>),
    /// Claim alone.
    Alone,
}

/// The groups of one process: for each key whose statement is running, the
/// claims waiting for the next.
pub(crate) struct Groups<K, M, T> {
    open: Mutex<HashMap<K, VecDeque<Waiting<M, T>>>>,
}

impl<K, M, T> std::fmt::Debug for Groups<K, M, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Groups")
            .field("running", &open.len())
            .finish()
    }
}

impl<K, M, T> Default for Groups<K, M, T> {
    fn default() -> Self {
        Groups {
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone, M: Clone, T> Groups<K, M, T> {
    /// Takes `member`'s result from a statement of its group: `take` runs
    /// with the members of one statement (the caller's own first) and must
    /// answer one result per member, in their order.
    pub(crate) async fn claim<E, F, Fut>(&self, key: K, member: M, take: F) -> Result<Grouped<T>, E>
    where
        F: FnOnce(Vec<M>) -> Fut,
        Fut: Future<Output = Result<Vec<T>, E>>,
    {
        let others = match self.join(&key, member.clone()) {
            Joined::Lead => Vec::new(),
            Joined::Full => return Ok(Grouped::Alone),
            Joined::Wait(mut told) => match told.turn().await {
                Some(Turn::Done(taken)) => return Ok(Grouped::Taken(taken)),
                Some(Turn::Lead(others)) => others,
                Some(Turn::Alone) | None => return Ok(Grouped::Alone),
            },
        };
        // From here this call runs its group's statement; whatever becomes
        // of it, the turn passes on (`Leading`'s drop).
        let _leading = Leading { groups: self, key };
        let mut members = Vec::with_capacity(others.len() + 1);
        members.push(member);
        members.extend(others.iter().map(|w| w.member.clone()));
        match take(members).await {
            Ok(taken) => {
                let mut taken = taken.into_iter();
                let own = taken.next();
                for (waiting, result) in others.into_iter().zip(taken.by_ref()) {
                    // A caller gone meanwhile: its claim expires unused.
                    let _ = waiting.turn.send(Turn::Done(result));
                }
                Ok(own.map_or(Grouped::Alone, Grouped::Taken))
            }
            Err(e) => {
                for waiting in others {
                    let _ = waiting.turn.send(Turn::Alone);
                }
                Err(e)
            }
        }
    }

    /// Runs at once (no statement of the group is running; one is now),
    /// waits for the turn it is told, or, with the next statement full
    /// already, claims alone.
    fn join(&self, key: &K, member: M) -> Joined<'_, K, M, T> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        match open.get_mut(key) {
            None => {
                open.insert(key.clone(), VecDeque::new());
                Joined::Lead
            }
            Some(waiting) if waiting.len() >= MAX_GROUP => Joined::Full,
            Some(waiting) => {
                let (turn, told) = oneshot::channel();
                waiting.push_back(Waiting { member, turn });
                Joined::Wait(Told {
                    groups: self,
                    key: key.clone(),
                    told: Some(told),
                })
            }
        }
    }

    /// The statement of `key`'s group ended: the first claim still waiting
    /// runs the next, for itself and up to [`MAX_GROUP`] − 1 more; with none
    /// waiting, the group closes.
    fn hand_over(&self, key: &K) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(waiting) = open.get_mut(key) else {
            return;
        };
        waiting.retain(|w| !w.turn.is_closed());
        while let Some(next) = waiting.pop_front() {
            let n = waiting.len().min(MAX_GROUP - 1);
            let others: Vec<_> = waiting.drain(..n).collect();
            match next.turn.send(Turn::Lead(others)) {
                Ok(()) => return,
                // Gone since: the others wait for the next one.
                Err(Turn::Lead(others)) => requeue(waiting, others),
                Err(_) => unreachable!("the turn sent was Lead"),
            }
        }
        open.remove(key);
    }

    /// A claim told to lead went away before it looked: the claims it was
    /// to take rows for wait again, first, and the turn passes on.
    fn lead_refused(&self, key: &K, others: Vec<Waiting<M, T>>) {
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(waiting) = open.get_mut(key) {
                requeue(waiting, others);
            }
        }
        self.hand_over(key);
    }

    /// How many claims wait for `key`'s next statement (tests).
    #[cfg(test)]
    fn waiting(&self, key: &K) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(key).map_or(0, VecDeque::len)
    }
}

/// Puts `others` back at the head of `waiting`, in their order.
fn requeue<M, T>(waiting: &mut VecDeque<Waiting<M, T>>, others: Vec<Waiting<M, T>>) {
    for w in others.into_iter().rev() {
        waiting.push_front(w);
    }
}

/// How a claim joined its group.
enum Joined<'a, K: Hash + Eq + Clone, M: Clone, T> {
    /// It runs the group's statement now.
    Lead,
    /// It waits for its turn.
    Wait(Told<'a, K, M, T>),
    /// The next statement is full: it claims alone.
    Full,
}

/// A claim waiting for its turn. Dropped before it was told (its call
/// cancelled), or told to lead and dropped before it looked, it passes the
/// turn on: the group is never left without a statement running for the
/// claims waiting in it.
struct Told<'a, K: Hash + Eq + Clone, M: Clone, T> {
    groups: &'a Groups<K, M, T>,
    key: K,
    /// `None` once the turn was taken.
    told: Option<oneshot::Receiver<Turn<M, T>>>,
}

impl<K: Hash + Eq + Clone, M: Clone, T> Told<'_, K, M, T> {
    /// The turn; `None` when nobody can tell it any more.
    async fn turn(&mut self) -> Option<Turn<M, T>> {
        let turn = self.told.as_mut()?.await.ok();
        self.told = None;
        turn
    }
}

impl<K: Hash + Eq + Clone, M: Clone, T> Drop for Told<'_, K, M, T> {
    fn drop(&mut self) {
        let Some(mut told) = self.told.take() else {
            return;
        };
        // From here no turn can be sent; one sent before is still here.
        told.close();
        if let Ok(Turn::Lead(others)) = told.try_recv() {
            self.groups.lead_refused(&self.key, others);
        }
    }
}

/// The turn of the call running its group's statement; passed on when
/// dropped (the statement ended, or the call was cancelled).
struct Leading<'a, K: Hash + Eq + Clone, M: Clone, T> {
    groups: &'a Groups<K, M, T>,
    key: K,
}

impl<K: Hash + Eq + Clone, M: Clone, T> Drop for Leading<'_, K, M, T> {
    fn drop(&mut self) {
        self.groups.hand_over(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Notify;

    type G = Groups<&'static str, u32, u32>;

    /// Waits (yielding, no timer) until `n` claims wait for `key`.
    async fn until_waiting(g: &G, key: &'static str, n: usize) {
        while g.waiting(&key) != n {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_lone_claim_runs_at_once_by_itself() {
        let g = G::default();
        let out = g
            .claim("k", 7, |members| async move {
                assert_eq!(members, [7]);
                Ok::<_, ()>(vec![70])
            })
            .await;
        assert!(matches!(out, Ok(Grouped::Taken(70))));
        assert_eq!(g.waiting(&"k"), 0);
        assert!(g.open.lock().unwrap().is_empty(), "the group closed");
    }

    /// Claims that arrive while a statement runs share the next one, each
    /// with its own result; a claim of another key does not wait for them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claims_arriving_during_a_statement_share_the_next() {
        let g = Arc::new(G::default());
        let release = Arc::new(Notify::new());
        let statements = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let run = |g: Arc<G>, member: u32| {
            let (release, statements) = (release.clone(), statements.clone());
            tokio::spawn(async move {
                g.claim("k", member, |members| async move {
                    statements.lock().unwrap().push(members.clone());
                    if members[0] == 0 {
                        release.notified().await;
                    }
                    Ok::<_, ()>(members.iter().map(|m| m * 10).collect())
                })
                .await
            })
        };
        let first = run(g.clone(), 0);
        while statements.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let later: Vec<_> = (1..=3).map(|m| run(g.clone(), m)).collect();
        until_waiting(&g, "k", 3).await;
        let other = g.claim("other", 9, |m| async move { Ok::<_, ()>(m) }).await;
        assert!(
            matches!(other, Ok(Grouped::Taken(9))),
            "another key runs at once"
        );
        release.notify_one();
        assert!(matches!(first.await.unwrap(), Ok(Grouped::Taken(0))));
        for (m, h) in (1..=3).zip(later) {
            match h.await.unwrap() {
                Ok(Grouped::Taken(r)) => assert_eq!(r, m * 10, "each claim gets its own result"),
                other => panic!("claim {m}: {other:?}"),
            }
        }
        let mut ran = statements.lock().unwrap().clone();
        assert_eq!(ran.len(), 2, "two statements for four claims: {ran:?}");
        ran[1].sort();
        assert_eq!(ran[1], [1, 2, 3]);
        assert!(g.open.lock().unwrap().is_empty(), "the group closed");
    }

    /// A failed statement fails its leader's call; the others claim alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn when_the_statement_fails_the_others_claim_alone() {
        let g = Arc::new(G::default());
        let release = Arc::new(Notify::new());
        let first = {
            let (g, release) = (g.clone(), release.clone());
            tokio::spawn(async move {
                g.claim("k", 0, |_| async move {
                    release.notified().await;
                    Ok::<_, &str>(vec![0])
                })
                .await
            })
        };
        until_started(&g).await;
        let failing = {
            let g = g.clone();
            tokio::spawn(async move {
                g.claim("k", 1, |_| async { Err::<Vec<u32>, _>("database gone") })
                    .await
            })
        };
        until_waiting(&g, "k", 1).await;
        let alone = {
            let g = g.clone();
            tokio::spawn(
                async move { g.claim("k", 2, |_| async { Ok::<_, &str>(vec![99]) }).await },
            )
        };
        until_waiting(&g, "k", 2).await;
        release.notify_one();
        assert!(matches!(first.await.unwrap(), Ok(Grouped::Taken(0))));
        // Claim 1 leads the next statement (it waited first) and fails.
        assert!(matches!(failing.await.unwrap(), Err("database gone")));
        assert!(matches!(alone.await.unwrap(), Ok(Grouped::Alone)));
        assert!(g.open.lock().unwrap().is_empty(), "the group closed");
    }

    /// The call leading a statement is cancelled: the claims waiting for
    /// the next are not stranded; one of them leads it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_leader_passes_the_turn_on() {
        let g = Arc::new(G::default());
        let ran = Arc::new(AtomicUsize::new(0));
        let first = {
            let g = g.clone();
            tokio::spawn(async move {
                g.claim("k", 0, |_| std::future::pending::<Result<Vec<u32>, ()>>())
                    .await
            })
        };
        until_started(&g).await;
        let later: Vec<_> = (1..=2)
            .map(|m| {
                let (g, ran) = (g.clone(), ran.clone());
                tokio::spawn(async move {
                    g.claim("k", m, |members| async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ()>(members)
                    })
                    .await
                })
            })
            .collect();
        until_waiting(&g, "k", 2).await;
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        for (m, h) in (1..=2).zip(later) {
            assert!(matches!(h.await.unwrap(), Ok(Grouped::Taken(r)) if r == m));
        }
        assert_eq!(ran.load(Ordering::SeqCst), 1, "one statement for both");
        assert!(g.open.lock().unwrap().is_empty(), "the group closed");
    }

    /// A claim told to lead that went away before it looked (its call
    /// cancelled between the telling and its next poll) passes the turn on:
    /// the claim it was to take rows for leads instead, nobody is stranded.
    #[tokio::test]
    async fn a_claim_gone_before_it_looked_at_its_turn_passes_it_on() {
        let g = G::default();
        assert!(matches!(g.join(&"k", 0), Joined::Lead));
        let Joined::Wait(gone) = g.join(&"k", 1) else {
            panic!("1 waits")
        };
        let Joined::Wait(mut next) = g.join(&"k", 2) else {
            panic!("2 waits")
        };
        // The running statement ends: 1 is told to lead, for itself and 2.
        g.hand_over(&"k");
        drop(gone);
        assert!(matches!(next.turn().await, Some(Turn::Lead(others)) if others.is_empty()));
        g.hand_over(&"k");
        assert!(g.open.lock().unwrap().is_empty(), "the group closed");
    }

    /// A claim finding the next statement full claims alone at once.
    #[tokio::test]
    async fn a_claim_finding_the_next_statement_full_claims_alone() {
        let g = G::default();
        assert!(matches!(g.join(&"k", 0), Joined::Lead));
        let waiting: Vec<_> = (1..=MAX_GROUP as u32).map(|m| g.join(&"k", m)).collect();
        assert!(waiting.iter().all(|j| matches!(j, Joined::Wait(_))));
        let out = g.claim("k", 999, |_| async { Ok::<_, ()>(vec![0]) }).await;
        assert!(matches!(out, Ok(Grouped::Alone)));
        assert_eq!(g.waiting(&"k"), MAX_GROUP);
    }

    /// Waits until a statement of "k" runs.
    async fn until_started(g: &G) {
        while !g.open.lock().unwrap().contains_key("k") {
            tokio::task::yield_now().await;
        }
    }
}
