//! Changes other processes made, pushed: on PostgreSQL every change to keys, grants or
//! limits is a `NOTIFY` in its own transaction, and each server listens, so no request
//! reads the database to learn of one. (On SQLite the key signal file does this job.)

use std::time::Duration;

use sqlx::postgres::PgListener;

use super::{Backend, Database};

/// The channel key, grant and limit changes are announced on.
pub const KEYS_CHANNEL: &str = "crosstab_keys";
/// The channel a newly published survey is announced on (its code as the payload).
pub const SURVEYS_CHANNEL: &str = "crosstab_surveys";

/// What the feed says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Keys, grants or limits changed.
    Keys,
    /// A survey was published.
    Surveys,
    /// The feed (re)connected: anything may have changed meanwhile.
    Resync,
}

/// A reconnecting listener on the change channels.
#[derive(Debug)]
pub struct ChangeFeed {
    url: String,
    listener: Option<PgListener>,
}

impl ChangeFeed {
    /// The feed of `db`'s changes, if it pushes any (PostgreSQL).
    pub fn of(db: &Database) -> Option<ChangeFeed> {
        (db.backend() == Backend::Postgres).then(|| ChangeFeed {
            url: db.url().to_owned(),
            listener: None,
        })
    }

    /// The next change; reconnects (saying [`Change::Resync`]) whenever the connection
    /// was lost, since notifications sent meanwhile are gone.
    pub async fn next(&mut self) -> Change {
        loop {
            let Some(listener) = self.listener.as_mut() else {
                match connect(&self.url).await {
                    Ok(listener) => {
                        self.listener = Some(listener);
                        return Change::Resync;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "change feed not connected; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                }
            };
            match listener.try_recv().await {
                Ok(Some(notification)) if notification.channel() == KEYS_CHANNEL => {
                    return Change::Keys
                }
                Ok(Some(notification)) if notification.channel() == SURVEYS_CHANNEL => {
                    return Change::Surveys
                }
                Ok(Some(_)) => {}
                // Lost; `try_recv` reconnects on its next call.
                Ok(None) => return Change::Resync,
                Err(error) => {
                    tracing::warn!(%error, "change feed lost; reconnecting in 1 s");
                    self.listener = None;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

async fn connect(url: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    listener.listen_all([KEYS_CHANNEL, SURVEYS_CHANNEL]).await?;
    Ok(listener)
}
