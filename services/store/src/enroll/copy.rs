//! Enrolling a call's rows with `COPY` instead of the enrollment statement.
//!
//! `INSERT … SELECT FROM unnest(…)` writes one heap tuple, and one WAL
//! record, at a time; `COPY` fills a page before it writes it
//! (`heap_multi_insert`), which on a wide row is most of an enrollment's
//! cost. `COPY` knows no `ON CONFLICT`, so it serves the usual call: rows
//! that are all new, PENDING, without dependencies. It runs in a savepoint;
//! when a key is already there (a re-run, or a concurrent enrollment of the
//! same keys, which `COPY` waits for like any insert) it stops at the unique
//! violation, the savepoint is rolled back, and the caller runs the
//! statement, which sorts each key out. Ids are taken from the rows'
//! sequence first, in key order, so the queue chunks and the claim order are
//! what the statement would have made.

use super::Columns;
use crate::Result;
use crate::codes::{self, PgQuery};
use crate::copy_binary::CopyRows;
use crate::error::{Sqlstate, sqlstate};
use sqlx::{Acquire, Postgres, Transaction};
use std::sync::LazyLock;
use tally_core::status::RowStatus;

/// Calls of fewer rows take the statement: `COPY` costs four more round
/// trips (the savepoint and its release, the ids, the stream), which a few
/// rows do not pay back.
const MIN_ROWS: usize = 32;

const COPY: &str = "COPY rows (id, ledger_id, key, payload, content_hash, prompt_name, \
                    prompt_version, model, status) FROM STDIN (FORMAT binary)";

/// Whether `columns` can go in by `COPY`: enough rows, all PENDING, none
/// with a dependency (what `COPY` does not write: edges, unmet counts, a
/// BLOCKED row's rule and error).
pub(super) fn fits(columns: &Columns<'_>) -> bool {
    columns.keys.len() >= MIN_ROWS
        && columns.edge_children.is_empty()
        && columns.unmet.iter().all(|&u| u == 0)
        && columns
            .statuses
            .iter()
            .all(|&s| s == RowStatus::Pending.code())
}

/// Inserts every row of `columns` (which [`fits`]), queues them and lists
/// the ledger's new models, in a savepoint of `tx`. `false` when a key was
/// already stored: nothing is kept then.
pub(super) async fn insert(
    tx: &mut Transaction<'static, Postgres>,
    columns: &Columns<'_>,
) -> Result<bool> {
    let mut sp = tx.begin().await?;
    let mut ids: Vec<i64> =
        sqlx::query_scalar("SELECT nextval('rows_id_seq') FROM generate_series(1, $1)")
            .bind(columns.given)
            .fetch_all(&mut *sp)
            .await?;
    ids.sort_unstable();
    let stream = encode(columns, &ids);
    let copied = async {
        let mut copy = sp.copy_in_raw(COPY).await?;
        copy.send(stream).await?;
        copy.finish().await
    }
    .await;
    match copied {
        Ok(_) => {}
        Err(e) if sqlstate(&e) == Sqlstate::UniqueViolation => {
            sp.rollback().await?;
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    }
    static QUEUE: LazyLock<String> =
        LazyLock::new(|| codes::render(include_str!("../queries/enroll/copied.sql")));
    let query: PgQuery<'_> = sqlx::query(sqlx::AssertSqlSafe(QUEUE.as_str()));
    query
        .bind(columns.ledger_id)
        .bind(&ids)
        .bind(columns.models_unless_default())
        .bind(columns.default_model)
        .bind(columns.unknown_models)
        .bind(columns.providers())
        .execute(&mut *sp)
        .await?;
    sp.commit().await?;
    Ok(true)
}

/// The rows as a binary `COPY` stream, in the column order of [`COPY`].
fn encode(c: &Columns<'_>, ids: &[i64]) -> Vec<u8> {
    let bytes: usize = c.payloads.iter().map(|p| p.len() + 120).sum();
    let mut rows = CopyRows::with_capacity(bytes);
    for (i, &id) in ids.iter().enumerate() {
        rows.row(9)
            .int8(id)
            .int8(c.ledger_id)
            .bytes(c.keys[i].as_bytes())
            .bytes(c.payloads[i].as_bytes())
            .bytes(c.hashes[i])
            .bytes(c.prompt_names[i].as_bytes())
            .bytes(c.prompt_versions[i].as_bytes())
            .bytes(c.models[i].as_bytes())
            .int2(c.statuses[i]);
    }
    rows.finish()
}
