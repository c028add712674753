//! EnrollRows: bulk, idempotent by key, in one insert statement per batch.
//!
//! Rows are inserted with `ON CONFLICT DO NOTHING`; keys that were already
//! there are then compared by content hash (ALREADY_PRESENT or CONFLICT) and
//! never touched. Dependencies may point at rows enrolled before (read and
//! share-locked here, so a concurrent report cannot settle them between our
//! read and our commit) or at rows of the same call.

mod copy;

use crate::codes::PgQueryAs;
use crate::settle::unless_all;
use crate::types::{EnrollOutcome, LedgerRecord, NewRow};
use crate::{Result, Store, StoreError, codes};
use sqlx::{Postgres, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use tally_core::status::RowStatus;
use tally_core::violation::Violations;

/// How many times a batch is retried when a concurrent enrollment of the
/// same keys races with it.
const RACE_RETRIES: usize = 5;

struct Existing {
    id: i64,
    status: RowStatus,
}

enum Attempt {
    Done(Vec<EnrollOutcome>),
    Raced,
}

/// The keys an insert added: all of the call's (the usual case, answered
/// without shipping them back), or only these.
enum Inserted {
    All,
    Only(HashSet<String>),
}

impl Inserted {
    fn contains(&self, key: &str) -> bool {
        match self {
            Inserted::All => true,
            Inserted::Only(keys) => keys.contains(key),
        }
    }
}

impl Store {
    /// Enrolls `rows` (validated by the caller: keys well-formed and unique
    /// within the call, payloads JSON objects, no cycle among them). Returns
    /// one outcome per row, in order.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.enroll",
        skip_all
    )]
    pub async fn enroll(&self, ledger: &str, rows: &[NewRow]) -> Result<Vec<EnrollOutcome>> {
        let ledger = self.ledger(ledger).await?;
        // Listing a model twice is harmless (ON CONFLICT DO NOTHING), so one
        // look-up serves every attempt below.
        let unknown = self.models.unknown(
            ledger.id,
            rows.iter().map(|r| r.model_or(&ledger.policy.model)),
        );
        if rows
            .iter()
            .all(|r| r.depends_on.is_empty() && r.prompt_name.is_empty())
        {
            // Nothing to check or lock first but the ledger (held against a
            // delete): the insert is one statement.
            let plan = plan_statuses(rows, &HashMap::new(), &HashMap::new());
            let columns = Columns::new(&ledger, rows, &plan, &HashMap::new(), &unknown);
            let mut tx = self.begin().await?;
            crate::ledgers::hold(&mut tx, &ledger).await?;
            let inserted = insert(&mut tx, columns).await?;
            tx.commit().await?;
            self.models.remember(ledger.id, &unknown);
            // ON CONFLICT waited for any concurrent insert of our keys to
            // end, so every key we did not insert is now committed and
            // visible.
            if let Some(outcomes) = outcomes(&self.pool, ledger.id, rows, &inserted).await? {
                return Ok(outcomes);
            }
        }
        for _ in 0..RACE_RETRIES {
            let mut tx = self.begin().await?;
            match enroll_once(&mut tx, &ledger, rows, &unknown).await {
                Ok(Attempt::Done(outcomes)) => {
                    tx.commit().await?;
                    self.models.remember(ledger.id, &unknown);
                    return Ok(outcomes);
                }
                Ok(Attempt::Raced) => tx.rollback().await?,
                // Deadlocked with an enrollment of the same keys in another
                // order (or a serialization failure): ours was rolled back,
                // so the batch can simply run again.
                Err(StoreError::Aborted(_)) => tx.rollback().await?,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Aborted(
            "enrollment kept racing with concurrent enrollments of the same keys; retry".into(),
        ))
    }
}

async fn enroll_once(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &LedgerRecord,
    rows: &[NewRow],
    unknown_models: &[&str],
) -> Result<Attempt> {
    crate::ledgers::hold(tx, ledger).await?;
    check_prompts(tx, rows).await?;
    let existing = lock_dependencies(tx, ledger.id, rows).await?;
    let batch: HashMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.key.as_str(), i))
        .collect();

    let mut violations = Violations::new();
    for (i, row) in rows.iter().enumerate() {
        for (j, dep) in row.depends_on.iter().enumerate() {
            if !existing.contains_key(dep.as_str()) && !batch.contains_key(dep.as_str()) {
                violations.add(
                    format!("rows[{i}].depends_on[{j}]"),
                    format!("unknown dependency key {dep:?}: enroll it first or in the same call"),
                );
            }
        }
    }
    violations.finish().map_err(StoreError::InvalidArgument)?;

    let plan = plan_statuses(rows, &batch, &existing);
    let columns = Columns::new(ledger, rows, &plan, &existing, unknown_models);
    let inserted = insert(tx, columns).await?;

    // A same-call dependency we took for new must have been inserted by us;
    // if a concurrent enrollment inserted it first, our counts are wrong.
    let raced = rows.iter().flat_map(|r| &r.depends_on).any(|dep| {
        batch.contains_key(dep.as_str())
            && !existing.contains_key(dep.as_str())
            && !inserted.contains(dep.as_str())
    });
    if raced {
        return Ok(Attempt::Raced);
    }

    Ok(
        match outcomes(&mut **tx, ledger.id, rows, &inserted).await? {
            Some(outcomes) => Attempt::Done(outcomes),
            None => Attempt::Raced,
        },
    )
}

/// One outcome per row: ENROLLED for the keys this call inserted, and for
/// the others ALREADY_PRESENT or CONFLICT by content hash. `None` when a key
/// is neither inserted nor visible (a concurrent insert we cannot see yet).
async fn outcomes<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    exec: E,
    ledger_id: i64,
    rows: &[NewRow],
    inserted: &Inserted,
) -> Result<Option<Vec<EnrollOutcome>>> {
    let others: Vec<&str> = rows
        .iter()
        .map(|r| r.key.as_str())
        .filter(|k| !inserted.contains(k))
        .collect();
    let hashes: HashMap<String, Vec<u8>> = if others.is_empty() {
        HashMap::new()
    } else {
        sqlx::query_as::<_, (String, Vec<u8>)>(
            "SELECT key, content_hash FROM rows WHERE ledger_id = $1 AND key = ANY($2)",
        )
        .bind(ledger_id)
        .bind(&others)
        .fetch_all(exec)
        .await?
        .into_iter()
        .collect()
    };
    let mut outcomes = Vec::with_capacity(rows.len());
    for row in rows {
        let outcome = if inserted.contains(row.key.as_str()) {
            EnrollOutcome::Enrolled
        } else {
            match hashes.get(&row.key) {
                Some(h) if h.as_slice() == row.content_hash => EnrollOutcome::AlreadyPresent,
                Some(_) => EnrollOutcome::Conflict,
                None => return Ok(None),
            }
        };
        outcomes.push(outcome);
    }
    Ok(Some(outcomes))
}

/// Every prompt a row names must be registered, and a row's values of its
/// prompt's media variables must be whole references: a URI and the
/// SHA-256 of the bytes, so the row's content hash covers the file
/// (`tally_core::media`; a native request's media parts are checked with
/// the rest of the request, before the store).
async fn check_prompts(tx: &mut Transaction<'static, Postgres>, rows: &[NewRow]) -> Result<()> {
    let mut wanted: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| !r.prompt_name.is_empty())
        .map(|r| (r.prompt_name.as_str(), r.prompt_version.as_str()))
        .collect();
    let mut violations = Violations::new();
    if !wanted.is_empty() {
        wanted.sort_unstable();
        wanted.dedup();
        let (names, versions): (Vec<&str>, Vec<&str>) = wanted.iter().copied().unzip();
        let found: HashMap<(String, String), Vec<String>> =
            sqlx::query_as::<_, (String, String, Vec<String>)>(
                "SELECT prompt_id, version, media FROM prompts
                 WHERE (prompt_id, version) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
            )
            .bind(&names)
            .bind(&versions)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .map(|(id, version, media)| ((id, version), media))
            .collect();
        for (i, r) in rows.iter().enumerate() {
            if r.prompt_name.is_empty() {
                continue;
            }
            match found.get(&(r.prompt_name.clone(), r.prompt_version.clone())) {
                None => violations.add(
                    format!("rows[{i}].prompt"),
                    format!(
                        "prompt {}/versions/{} is not registered",
                        r.prompt_name, r.prompt_version
                    ),
                ),
                Some(media) if !media.is_empty() => {
                    let payload: serde_json::Value =
                        serde_json::from_str(&r.payload).unwrap_or_default();
                    if let Err(e) = tally_core::media::variables(&payload, media) {
                        violations.add(format!("rows[{i}].payload"), e);
                    }
                }
                Some(_) => {}
            }
        }
    }
    violations.finish().map_err(StoreError::InvalidArgument)
}

/// Reads, and share-locks, every row named as a dependency that already
/// exists.
async fn lock_dependencies(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    rows: &[NewRow],
) -> Result<HashMap<String, Existing>> {
    let mut deps: Vec<&str> = rows
        .iter()
        .flat_map(|r| r.depends_on.iter().map(String::as_str))
        .collect();
    if deps.is_empty() {
        return Ok(HashMap::new());
    }
    deps.sort_unstable();
    deps.dedup();
    let found = sqlx::query_as::<_, (String, i64, i16)>(
        "SELECT key, id, status FROM rows WHERE ledger_id = $1 AND key = ANY($2)
         ORDER BY id FOR SHARE",
    )
    .bind(ledger_id)
    .bind(&deps)
    .fetch_all(&mut **tx)
    .await?;
    found
        .into_iter()
        .map(|(key, id, code)| {
            let status = RowStatus::from_code(code)
                .ok_or_else(|| StoreError::Internal(format!("row {key} has status {code}")))?;
            Ok((key, Existing { id, status }))
        })
        .collect()
}

struct Planned {
    status: RowStatus,
    unmet: i32,
}

/// Status and unmet-dependency count of each row if it is new: BLOCKED when
/// any dependency is (or, within the call, will be) PERMANENT or BLOCKED.
fn plan_statuses(
    rows: &[NewRow],
    batch: &HashMap<&str, usize>,
    existing: &HashMap<String, Existing>,
) -> Vec<Planned> {
    let mut blocked: Vec<Option<bool>> = vec![None; rows.len()];
    fn is_blocked(
        i: usize,
        rows: &[NewRow],
        batch: &HashMap<&str, usize>,
        existing: &HashMap<String, Existing>,
        memo: &mut [Option<bool>],
    ) -> bool {
        // Iterative over the call's (acyclic) dependencies.
        let mut stack = vec![(i, false)];
        while let Some((n, expanded)) = stack.pop() {
            if memo[n].is_some() {
                continue;
            }
            let deps = &rows[n].depends_on;
            if !expanded {
                stack.push((n, true));
                for d in deps {
                    if let (None, Some(&j)) = (existing.get(d), batch.get(d.as_str()))
                        && memo[j].is_none()
                    {
                        stack.push((j, false));
                    }
                }
                continue;
            }
            let b = deps.iter().any(|d| match existing.get(d) {
                Some(e) => e.status.fails_dependants(),
                None => batch
                    .get(d.as_str())
                    .and_then(|&j| memo[j])
                    .unwrap_or(false),
            });
            memo[n] = Some(b);
        }
        memo[i].unwrap_or(false)
    }
    (0..rows.len())
        .map(|i| {
            let mut deps: Vec<&str> = rows[i].depends_on.iter().map(String::as_str).collect();
            deps.sort_unstable();
            deps.dedup();
            let unmet = deps
                .iter()
                .filter(|d| {
                    existing
                        .get(**d)
                        .is_none_or(|e| e.status != RowStatus::Succeeded)
                })
                .count() as i32;
            let status = RowStatus::enrolled(is_blocked(i, rows, batch, existing, &mut blocked));
            Planned { status, unmet }
        })
        .collect()
}

/// The enrollment statement's parameters, one field each, in the order
/// `queries/enroll/insert.sql` documents them. Rows go in in key order
/// (byte order, sorted here rather than by an `ORDER BY` in the statement,
/// which costs a collation-aware sort): every enrollment takes the key
/// index in one order, so two enrollments of overlapping keys wait for each
/// other instead of deadlocking.
///
/// A column whose every value is the default (no dependencies, no prompt,
/// the ledger's model, PENDING with nothing unmet) is sent as an empty
/// array; `unnest` pads it with NULLs and the statement fills in the
/// default. Most enrollments send three arrays instead of nine.
struct Columns<'a> {
    ledger_id: i64,
    keys: Vec<&'a str>,
    payloads: Vec<&'a str>,
    hashes: Vec<&'a [u8]>,
    deps_csv: Vec<String>,
    prompt_names: Vec<&'a str>,
    prompt_versions: Vec<&'a str>,
    models: Vec<&'a str>,
    statuses: Vec<i16>,
    unmet: Vec<i32>,
    /// Each row's depth within the call (`tally_core::deps::depths`).
    depths: Vec<i32>,
    /// One element per dependency edge: the dependant's key, the
    /// dependency's key, its id when it is already stored, and the name the
    /// dependant gives it ('' for none).
    edge_children: Vec<&'a str>,
    edge_deps: Vec<&'a str>,
    edge_dep_ids: Vec<Option<i64>>,
    edge_names: Vec<&'a str>,
    unknown_models: &'a [&'a str],
    default_model: &'a str,
    given: i64,
}

impl<'a> Columns<'a> {
    fn new(
        ledger: &'a LedgerRecord,
        rows: &'a [NewRow],
        plan: &[Planned],
        existing: &HashMap<String, Existing>,
        unknown_models: &'a [&'a str],
    ) -> Self {
        let default_model = ledger.policy.model.as_str();
        let n = rows.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| rows[a].key.cmp(&rows[b].key));
        let mut c = Columns {
            ledger_id: ledger.id,
            keys: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            hashes: Vec::with_capacity(n),
            deps_csv: Vec::with_capacity(n),
            prompt_names: Vec::with_capacity(n),
            prompt_versions: Vec::with_capacity(n),
            models: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            unmet: Vec::with_capacity(n),
            depths: Vec::with_capacity(n),
            edge_children: Vec::new(),
            edge_deps: Vec::new(),
            edge_dep_ids: Vec::new(),
            edge_names: Vec::new(),
            unknown_models,
            default_model,
            given: n as i64,
        };
        let deps: Vec<Vec<&str>> = rows
            .iter()
            .map(|r| r.depends_on.iter().map(String::as_str).collect())
            .collect();
        let graph: Vec<(&str, &[&str])> = rows
            .iter()
            .zip(&deps)
            .map(|(r, d)| (r.key.as_str(), d.as_slice()))
            .collect();
        let depths = tally_core::deps::depths(&graph);
        for i in order {
            let (row, p) = (&rows[i], &plan[i]);
            c.depths.push(i32::try_from(depths[i]).unwrap_or(i32::MAX));
            c.keys.push(row.key.as_str());
            c.payloads.push(row.payload.as_str());
            c.hashes.push(&row.content_hash);
            c.deps_csv.push(row.depends_on.join(","));
            c.prompt_names.push(row.prompt_name.as_str());
            c.prompt_versions.push(row.prompt_version.as_str());
            c.models.push(row.model_or(default_model));
            c.statuses.push(p.status.code());
            c.unmet.push(p.unmet);
            let mut seen = HashSet::new();
            for d in &row.depends_on {
                if seen.insert(d.as_str()) {
                    c.edge_children.push(row.key.as_str());
                    c.edge_deps.push(d.as_str());
                    c.edge_dep_ids.push(existing.get(d).map(|e| e.id));
                    c.edge_names
                        .push(row.dependency_names.get(d).map_or("", String::as_str));
                }
            }
        }
        c
    }

    /// The provider of each model not yet listed for the ledger.
    fn providers(&self) -> Vec<String> {
        self.unknown_models
            .iter()
            .map(|&m| tally_core::provider::provider_of(m).to_owned())
            .collect()
    }

    /// The rows' models, empty when every one is the ledger's.
    fn models_unless_default(&self) -> Vec<&'a str> {
        unless_all(self.models.clone(), &self.default_model)
    }

    /// Binds `$1`…`$19`, columns of defaults sent empty.
    fn bind<O>(self, q: PgQueryAs<'a, O>) -> PgQueryAs<'a, O> {
        let providers = self.providers();
        let models = self.models_unless_default();
        q.bind(self.ledger_id)
            .bind(self.keys)
            .bind(self.payloads)
            .bind(self.hashes)
            .bind(unless_all(self.deps_csv, &String::new()))
            .bind(unless_all(self.prompt_names, &""))
            .bind(unless_all(self.prompt_versions, &""))
            .bind(models)
            .bind(unless_all(self.statuses, &RowStatus::Pending.code()))
            .bind(unless_all(self.unmet, &0))
            .bind(self.edge_children)
            .bind(self.edge_deps)
            .bind(self.edge_dep_ids)
            .bind(self.unknown_models)
            .bind(self.default_model)
            .bind(self.given)
            .bind(providers)
            .bind(unless_all(self.depths, &1))
            .bind(unless_all(self.edge_names, &""))
    }
}

/// Inserts the rows, their dependency edges, their queue chunks and the
/// models not yet in the ledger's model list: by `COPY` when the call is
/// all new rows that [`copy::fits`], and otherwise (or when a key was
/// already there) by the one enrollment statement. Returns the keys
/// actually inserted; the statement ships them back only when it did not
/// insert them all (its `CASE` evaluates the `array_agg` subquery only
/// then).
async fn insert(tx: &mut Transaction<'static, Postgres>, columns: Columns<'_>) -> Result<Inserted> {
    if copy::fits(&columns) && copy::insert(tx, &columns).await? {
        return Ok(Inserted::All);
    }
    static SQL: LazyLock<String> =
        LazyLock::new(|| codes::render(include_str!("queries/enroll/insert.sql")));
    let given = columns.given;
    let query = sqlx::query_as(sqlx::AssertSqlSafe(SQL.as_str()));
    let (count, keys_back): (i64, Option<Vec<String>>) =
        columns.bind(query).fetch_one(&mut **tx).await?;
    Ok(if count == given {
        Inserted::All
    } else {
        Inserted::Only(keys_back.unwrap_or_default().into_iter().collect())
    })
}
