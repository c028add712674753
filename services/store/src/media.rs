//! The media uploads register: files workers uploaded to a provider for
//! rows' media (by the caller's team, the provider account it names and
//! the SHA-256 of the bytes: a team reaches only its own entries), reused by
//! later attempts and other rows while they live at the provider, and the
//! jobs whose batches reference them (so none is deleted under an open
//! job). Rules: a worker looks up what it may reference, uploads what is
//! missing and records it; MarkCreating links the batch's uploads to the
//! job (`link_job`); the janitor lists, deletes at the provider what no
//! open job needs, and forgets it.

use crate::types::{MediaUploadRecord, Time};
use crate::{Result, Store, StoreError};
use sqlx::{Postgres, Transaction};

#[derive(sqlx::FromRow)]
struct UploadRow {
    provider_account: String,
    sha256: String,
    file: String,
    uri: String,
    mime_type: String,
    size_bytes: i64,
    expire_time: Time,
    create_time: Time,
    in_use: bool,
}

impl From<UploadRow> for MediaUploadRecord {
    fn from(r: UploadRow) -> Self {
        MediaUploadRecord {
            provider_account: r.provider_account,
            sha256: r.sha256,
            file: r.file,
            uri: r.uri,
            mime_type: r.mime_type,
            size_bytes: r.size_bytes,
            expire_time: r.expire_time,
            create_time: r.create_time,
            in_use: r.in_use,
        }
    }
}

/// An upload's columns, and whether an open job references it.
const SELECT: &str = "SELECT u.provider_account, u.sha256, u.file, u.uri, u.mime_type, \
     u.size_bytes, u.expire_time, u.create_time, EXISTS (SELECT 1 FROM job_media m \
     JOIN jobs j ON j.id = m.job_id WHERE m.team = u.team \
     AND m.provider_account = u.provider_account AND m.sha256 = u.sha256 \
     AND j.end_time IS NULL) AS in_use FROM media_uploads u";

impl Store {
    /// The unexpired uploads of `team` in `account` among `hashes`, and the
    /// bytes of the team's own unexpired uploads in the account (another
    /// team's records, which it could forge, never count against it).
    pub async fn lookup_media_uploads(
        &self,
        team: &str,
        account: &str,
        hashes: &[String],
    ) -> Result<(Vec<MediaUploadRecord>, i64)> {
        let sql = format!(
            "{SELECT} WHERE u.team = $1 AND u.provider_account = $2 AND u.sha256 = ANY ($3) \
             AND u.expire_time > now()"
        );
        let found: Vec<UploadRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(team)
            .bind(account)
            .bind(hashes)
            .fetch_all(&self.pool)
            .await?;
        // The team's own uploads: another team's records (which it could
        // forge) never hold this team's back; the account's real storage
        // limit answers the upload itself (a 429 the worker waits on).
        let stored: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(size_bytes), 0)::int8 FROM media_uploads
             WHERE team = $2 AND provider_account = $1 AND expire_time > now()",
        )
        .bind(account)
        .bind(team)
        .fetch_one(&self.pool)
        .await?;
        Ok((found.into_iter().map(Into::into).collect(), stored))
    }

    /// Records `team`'s upload; a newer upload of the same bytes replaces
    /// the team's entry (never another team's).
    pub async fn record_media_upload(
        &self,
        team: &str,
        u: &MediaUploadRecord,
    ) -> Result<MediaUploadRecord> {
        sqlx::query(
            "INSERT INTO media_uploads (team, provider_account, sha256, file, uri, mime_type,
                                        size_bytes, expire_time)
             VALUES ($8, $1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (team, provider_account, sha256) DO UPDATE
             SET file = excluded.file, uri = excluded.uri, mime_type = excluded.mime_type,
                 size_bytes = excluded.size_bytes, expire_time = excluded.expire_time,
                 create_time = now()",
        )
        .bind(&u.provider_account)
        .bind(&u.sha256)
        .bind(&u.file)
        .bind(&u.uri)
        .bind(&u.mime_type)
        .bind(u.size_bytes)
        .bind(u.expire_time)
        .bind(team)
        .execute(&self.pool)
        .await?;
        let sql =
            format!("{SELECT} WHERE u.team = $3 AND u.provider_account = $1 AND u.sha256 = $2");
        Ok(sqlx::query_as::<_, UploadRow>(sqlx::AssertSqlSafe(sql))
            .bind(&u.provider_account)
            .bind(&u.sha256)
            .bind(team)
            .fetch_one(&self.pool)
            .await?
            .into())
    }

    /// Up to `limit` uploads of `team` in `account` after `after` (a
    /// SHA-256 from the previous page), in hash order.
    pub async fn list_media_uploads(
        &self,
        team: &str,
        account: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<MediaUploadRecord>> {
        let sql = format!(
            "{SELECT} WHERE u.team = $4 AND u.provider_account = $1 AND u.sha256 > $2 \
             ORDER BY u.sha256 LIMIT $3"
        );
        let rows: Vec<UploadRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(account)
            .bind(after.unwrap_or(""))
            .bind(limit)
            .bind(team)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Forgets `team`'s upload `file` of `sha256`, deleted at the provider
    /// by its caller: FAILED_PRECONDITION (MEDIA_IN_USE) while an open job
    /// references it; nothing when another file was recorded since.
    pub async fn forget_media_upload(
        &self,
        team: &str,
        account: &str,
        sha256: &str,
        file: &str,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let out = async {
            let in_use: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM job_media m JOIN jobs j ON j.id = m.job_id
                                WHERE m.team = $3 AND m.provider_account = $1 AND m.sha256 = $2
                                  AND j.end_time IS NULL)",
            )
            .bind(account)
            .bind(sha256)
            .bind(team)
            .fetch_one(&mut *tx)
            .await?;
            if in_use {
                return Err(StoreError::precondition(
                    "MEDIA_IN_USE",
                    format!("the upload {file} ({sha256}) is referenced by an open job"),
                ));
            }
            sqlx::query(
                "DELETE FROM media_uploads
                 WHERE team = $4 AND provider_account = $1 AND sha256 = $2 AND file = $3",
            )
            .bind(account)
            .bind(sha256)
            .bind(file)
            .bind(team)
            .execute(&mut *tx)
            .await?;
            Ok(())
        }
        .await;
        crate::end_tx(tx, out).await
    }
}

/// Links a job to the uploads its batch references, in the job's team and
/// account (in MarkCreating's transaction, which holds the job).
pub(crate) async fn link_job(
    tx: &mut Transaction<'static, Postgres>,
    job_id: i64,
    hashes: &[String],
) -> Result<()> {
    if hashes.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO job_media (job_id, team, provider_account, sha256)
         SELECT j.id, j.team, j.provider_account, h
         FROM jobs j, unnest($2::text[]) AS h WHERE j.id = $1
         ON CONFLICT DO NOTHING",
    )
    .bind(job_id)
    .bind(hashes)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
