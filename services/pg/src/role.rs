//! The role tally's server connects as, and the database it owns.
//!
//! A private cluster has two roles. The superuser (`postgres`) is used only by this crate,
//! to set the cluster up; the server gets the URL of [`APP_ROLE`], an ordinary login role
//! (`NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS`) that owns the
//! application database and everything in it. Owning the database is all the migrations
//! need (tables, functions, statistics objects; none needs an extension), and it keeps a
//! compromised server from reading files through `COPY … TO PROGRAM`, changing server
//! settings or making roles. Test databases are created by the superuser and given to the
//! role the same way, so the role needs no `CREATEDB`.
//!
//! Provisioning runs on every start, so it also upgrades clusters made before the role
//! existed: the role is created, the database and the objects that older versions'
//! migrations made as the superuser are given to it.

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use crate::PgError;
use crate::conn::{CONNECT_TIMEOUT, SUPERUSER, connect, quote_ident};

/// The login role the server connects as.
pub const APP_ROLE: &str = "tally";

/// What that role may not do; restated on every start so a changed role is put back.
const ATTRIBUTES: &str = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS";

/// Objects of a database still owned by the superuser (binds: the superuser's name).
const SUPERUSER_OBJECTS: &str = include_str!("queries/superuser_objects.sql");

/// Creates [`APP_ROLE`] (or restores its attributes) with `password`. `conn` is a
/// superuser connection. Returns whether the role was created.
pub(crate) async fn ensure_role(conn: &mut PgConnection, password: &str) -> Result<bool, PgError> {
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_roles where rolname = $1)")
            .bind(APP_ROLE)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| PgError::db("could not look up the application role", e))?;
    // Utility statements take no bind parameters, so the password is in the text: keep
    // the server from logging it, even should the statement fail.
    sqlx::raw_sql("set log_statement = 'none'; set log_min_error_statement = 'panic'")
        .execute(&mut *conn)
        .await
        .map_err(|e| PgError::db("could not turn statement logging off", e))?;
    let verb = if exists { "alter" } else { "create" };
    let sql = format!(
        "{verb} role {} {ATTRIBUTES} password {}",
        quote_ident(APP_ROLE),
        quote_literal(password)
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut *conn)
        .await
        .map_err(|e| PgError::db(format!("could not {verb} role {APP_ROLE}"), e))?;
    if !exists {
        tracing::info!(role = APP_ROLE, "application role created");
    }
    Ok(!exists)
}

/// Makes `database` exist and belong to [`APP_ROLE`], with every object in it that the
/// superuser owns handed over. `port`/`password` reach the superuser; `conn` is a
/// superuser connection to another database.
pub(crate) async fn ensure_database(
    conn: &mut PgConnection,
    port: u16,
    superuser_password: &str,
    database: &str,
) -> Result<(), PgError> {
    let owner: Option<String> = sqlx::query_scalar(
        "select pg_get_userbyid(datdba)::text from pg_database where datname = $1",
    )
    .bind(database)
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| PgError::db("could not list databases", e))?;
    let role = quote_ident(APP_ROLE);
    let db = quote_ident(database);
    match owner.as_deref() {
        None => {
            let sql = format!("create database {db} owner {role}");
            match sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut *conn)
                .await
            {
                Ok(_) => tracing::info!(database, owner = APP_ROLE, "database created"),
                // Created concurrently by someone else: give it to the role below.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {
                    alter_database_owner(conn, &db, &role, database).await?;
                }
                Err(e) => {
                    return Err(PgError::db(
                        format!("could not create database {database}"),
                        e,
                    ));
                }
            }
        }
        Some(APP_ROLE) => {}
        Some(other) => {
            alter_database_owner(conn, &db, &role, database).await?;
            tracing::info!(
                database,
                from = other,
                to = APP_ROLE,
                "database handed over"
            );
        }
    }
    hand_over_objects(port, superuser_password, database).await
}

async fn alter_database_owner(
    conn: &mut PgConnection,
    db: &str,
    role: &str,
    database: &str,
) -> Result<(), PgError> {
    let sql = format!("alter database {db} owner to {role}");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut *conn)
        .await
        .map_err(|e| {
            PgError::db(
                format!("could not give database {database} to {APP_ROLE}"),
                e,
            )
        })?;
    Ok(())
}

/// Gives the superuser's objects in `database` to [`APP_ROLE`] (a cluster whose
/// migrations ran as the superuser). Nothing to do, and one catalog query, otherwise.
async fn hand_over_objects(port: u16, password: &str, database: &str) -> Result<(), PgError> {
    let mut conn = connect(port, SUPERUSER, password, database, CONNECT_TIMEOUT)
        .await
        .map_err(|e| PgError::db(format!("could not connect to database {database}"), e))?;
    let objects: Vec<(String, String)> = sqlx::query_as(SUPERUSER_OBJECTS)
        .bind(SUPERUSER)
        .fetch_all(&mut conn)
        .await
        .map_err(|e| PgError::db("could not list the superuser's objects", e))?;
    if !objects.is_empty() {
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| PgError::db("could not begin", e))?;
        for (kind, name) in &objects {
            // Safe: `kind` is one of the query's constants, `name` a quoted identifier
            // from the catalog.
            let sql = format!("alter {kind} {name} owner to {}", quote_ident(APP_ROLE));
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    PgError::db(format!("could not give {kind} {name} to {APP_ROLE}"), e)
                })?;
        }
        tx.commit()
            .await
            .map_err(|e| PgError::db("could not commit the change of owners", e))?;
        tracing::info!(
            database,
            objects = objects.len(),
            to = APP_ROLE,
            "objects made by the superuser handed over"
        );
    }
    let _ = conn.close().await;
    Ok(())
}

/// Single-quotes an SQL string literal (standard_conforming_strings is on by default and
/// never turned off here).
fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_quoted() {
        assert_eq!(quote_literal("abc"), "'abc'");
        assert_eq!(quote_literal("a'b"), "'a''b'");
    }
}
