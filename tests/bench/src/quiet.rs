//! Waiting out the server's own ANALYZEs between rounds.
//!
//! The server under test analyzes a hot table once it has doubled
//! (tally-store's `maintenance`), which an enrollment of hundreds of
//! thousands of rows sets off several times, each running for seconds
//! beside whatever comes next. Left alone, an ANALYZE set off by one side's
//! round runs during the other side's next round and is charged to it.
//! So each enroll round ends once no such ANALYZE has run for longer than
//! the server's maintenance interval; the time they ran is reported apart.

use sqlx::PgPool;
use std::time::{Duration, Instant};

/// Longer than the server's maintenance interval (the bench runs it at
/// the default `--queue-vacuum-interval`, 2 s).
const QUIET: Duration = Duration::from_millis(2_500);
const POLL: Duration = Duration::from_millis(100);
/// Give up waiting (and say so) after this long.
const LIMIT: Duration = Duration::from_secs(300);

/// Waits until no ANALYZE of the server's (autovacuum's are left alone:
/// they fall on both sides alike) has run in this database for [`QUIET`].
/// Returns about how long ANALYZEs ran meanwhile (in steps of the poll).
pub async fn analyzes_done(pool: &PgPool) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let (mut quiet_since, mut analyzing) = (Instant::now(), Duration::ZERO);
    while quiet_since.elapsed() < QUIET {
        if start.elapsed() > LIMIT {
            eprintln!("  (an ANALYZE still running after {LIMIT:?}; going on)");
            break;
        }
        let running: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                            WHERE datname = current_database() AND pid <> pg_backend_pid()
                              AND state = 'active' AND query ILIKE 'ANALYZE%')",
        )
        .fetch_one(pool)
        .await?;
        if running {
            analyzing += POLL;
            quiet_since = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(analyzing)
}
