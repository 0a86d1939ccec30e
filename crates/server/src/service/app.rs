//! The researcher app's backend, without HTTP: sign-in and sessions, the surveys and
//! codebooks an account may see, its keys and usage, and its queries, which run through
//! the same [`Crosstab`](super::crosstab::Crosstab) as `/v1`, billed to the signed-in
//! user's own account (or, with `serve --upstream`, sent to another `/v1` service with
//! the key held here for that account).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use base64::Engine as _;
use crosstab_contract::app::{
    Codebook, CodebookSearch, DailyQuota, SurveySummary, TableRequest, Totals, UsageQuery,
};
use crosstab_contract::{validate_body, ApiError, Expr};
use crosstab_engine::{Bitset, Survey};
use rand::RngCore;

use super::crosstab::Answer;
use super::principal::{Credential, Principal};
use super::upstream::Upstream;
use super::usage::{Period, PeriodError};
use super::users::{self, SignIn, User, UserError};
use super::{RequestId, ServiceError, Services};
use crate::grants::{Grants, SurveyGrant};
use crate::keys::{KeyEnv, NewKey, MAX_LIFETIME_DAYS};
use crate::store::accounts::{self, KeyCreation, KeyInfo, KeyLimits};
use crate::store::usage::{self, DailyUsage};
use crate::store::{sessions, upstream_keys, DbError};

/// How long a session lasts.
pub const SESSION_LIFETIME_MS: i64 = 12 * 60 * 60 * 1000;

/// Usable (unrevoked, unexpired) keys an account may hold before the app creates no more:
/// every new key is a write and drops every server's key cache, so a loop of creations
/// must stop somewhere. Operators' `crosstab key create` is not limited.
pub const MAX_USABLE_KEYS: usize = 20;

/// Keys the app creates for an account in 24 hours, revoked ones too: creating and
/// revoking in turn would otherwise never reach [`MAX_USABLE_KEYS`].
pub const MAX_KEYS_PER_DAY: usize = 50;

/// Why an app call failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A rule of the contract, or a fault of ours.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// No live session.
    #[error("Sign in first.")]
    NotSignedIn,
    /// Wrong username or password.
    #[error("The username or password is not right.")]
    InvalidCredentials,
    /// Locked after too many failed sign-ins, for this many more seconds.
    #[error("Too many failed sign-ins: try again in {0} seconds.")]
    Locked(i64),
    /// Too many session cookies naming no session came from this address: this many
    /// more seconds before another is looked up.
    #[error("Too many requests with unknown session cookies from your address: sign in again, or wait {0} seconds.")]
    UnknownSessions(i64),
    /// Nothing here by that name.
    #[error("Not found.")]
    NotFound,
    /// A bad request to the app backend itself.
    #[error("{0}")]
    BadRequest(String),
    /// `--upstream` is set but this account has no upstream key.
    #[error("Queries are not configured for this account on this server (no upstream key).")]
    NotConfigured,
    /// The upstream could not be reached, even after retries.
    #[error("The query service could not be reached; try again shortly.")]
    Unreachable(String),
    /// The account already holds as many usable keys as the app lets it create.
    #[error("An account holds at most {MAX_USABLE_KEYS} usable keys: revoke one first.")]
    TooManyKeys,
    /// The account created as many keys in the last 24 hours as the app allows.
    #[error(
        "The app creates at most {MAX_KEYS_PER_DAY} keys a day for an account: try again \
         tomorrow, or ask an operator (`crosstab key create`)."
    )]
    KeysPerDay,
    /// Tables need this server's engine (their reliability figures need sums `/v1` does
    /// not give), and with `--upstream` queries run elsewhere.
    #[error(
        "Tables are not available on this server: it sends queries to another service \
         (--upstream), whose answers lack what a table's reliability figures need. Run \
         single queries, or open the survey file in the page."
    )]
    TablesUpstream,
    /// A table of more billed calls than the account's whole daily quota.
    #[error(
        "This table takes {calls} billed calls, more than your account's daily quota of \
         {quota}: make it smaller (fewer rows or columns), or ask your administrator for a \
         larger quota."
    )]
    TableOverQuota {
        /// What it would bill.
        calls: u64,
        /// The account's daily quota.
        quota: u64,
    },
}

impl From<DbError> for AppError {
    fn from(error: DbError) -> Self {
        AppError::Service(error.into())
    }
}

impl From<ApiError> for AppError {
    fn from(error: ApiError) -> Self {
        AppError::Service(error.into())
    }
}

impl From<UserError> for AppError {
    fn from(error: UserError) -> Self {
        match error {
            UserError::Invalid(reason) => AppError::BadRequest(reason),
            other @ UserError::OtherAccount { .. } => AppError::BadRequest(other.to_string()),
            UserError::Db(error) => error.into(),
            UserError::Hash(reason) => AppError::Service(ServiceError::Internal(reason)),
        }
    }
}

/// A session just started.
#[derive(Debug)]
pub struct Session {
    /// Who signed in.
    pub user: User,
    /// The token the browser keeps (only its hash is stored).
    pub token: String,
}

/// A crosstab asked in the app.
#[derive(Debug)]
pub enum AppAnswer {
    /// Answered here and billed to the user's account (or given again, unbilled).
    Answered(Answer),
    /// Answered by the upstream: its status and body, unchanged.
    Forwarded {
        /// HTTP status the upstream sent.
        status: u16,
        /// Its body.
        body: Bytes,
    },
}

/// The app backend.
#[derive(Debug)]
pub struct AppService {
    services: Arc<Services>,
    upstream: Option<Upstream>,
    /// Sessions found live lately (by the token's SHA-256): looked up even from an
    /// address past its pace, so a guesser does not sign out the others behind it.
    live_sessions: std::sync::Mutex<std::collections::HashSet<[u8; 32]>>,
}

/// Sessions remembered as live before the set starts over.
const MAX_LIVE_SESSIONS: usize = 100_000;

/// A session token's SHA-256, as the set of live sessions keeps it.
fn session_digest(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

impl AppService {
    /// The backend over `services`; queries run here unless an `upstream` is given.
    pub fn new(services: Arc<Services>, upstream: Option<Upstream>) -> AppService {
        AppService {
            services,
            upstream,
            live_sessions: std::sync::Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Checks a sign-in and starts a session; a failure is answered more slowly the
    /// more failures came before it, then the name is locked for a while.
    pub async fn sign_in(&self, username: &str, password: &str) -> Result<Session, AppError> {
        let db = &self.services.db;
        let now = self.services.clock.now_ms();
        match users::sign_in(db, username, password, now).await? {
            SignIn::Accepted(user) => {
                let token = new_token();
                sessions::start(db, &user, &token, now, now + SESSION_LIFETIME_MS).await?;
                self.seen_live(session_digest(&token));
                Ok(Session { user, token })
            }
            SignIn::Rejected { failures } => {
                let delay = users::DELAY_PER_FAILURE_MS * u64::try_from(failures).unwrap_or(0);
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                Err(AppError::InvalidCredentials)
            }
            SignIn::Locked { retry_after_s } => Err(AppError::Locked(retry_after_s)),
        }
    }

    /// Ends the session `token`.
    pub async fn sign_out(
        &self,
        token: &str,
        address: Option<std::net::IpAddr>,
    ) -> Result<(), AppError> {
        let limits = &self.services.limits;
        let was_live = self.live_sessions().remove(&session_digest(token));
        // Past the address's pace, a token not seen live is not looked for: the sign-out
        // is refused (said, not silently skipped), as any use of such a cookie is.
        if !was_live {
            if let Some(seconds) = limits.unknown_sessions_waiting(address) {
                return Err(AppError::UnknownSessions(
                    i64::try_from(seconds).unwrap_or(i64::MAX),
                ));
            }
        }
        if !sessions::end(&self.services.db, token).await? {
            // Naming no session, it counts as any unknown cookie does.
            let _ = limits.unknown_session(address);
        }
        Ok(())
    }

    /// The user of the live session `token`, sent from `address`. A token that names no
    /// session at all (not an expired one) counts against the address's pace of unknown
    /// session cookies (its own, not that of bad API keys); past it, only tokens seen
    /// live here lately (signed in or looked up) are looked up, so a flood of made-up
    /// cookies holds no database connection.
    pub async fn session_user(
        &self,
        token: Option<&str>,
        address: Option<std::net::IpAddr>,
    ) -> Result<User, AppError> {
        let token = token.ok_or(AppError::NotSignedIn)?;
        let digest = session_digest(token);
        let limits = &self.services.limits;
        let paced =
            |seconds: u64| AppError::UnknownSessions(i64::try_from(seconds).unwrap_or(i64::MAX));
        if let Some(seconds) = limits.unknown_sessions_waiting(address) {
            if !self.live_sessions().contains(&digest) {
                return Err(paced(seconds));
            }
        }
        let now = self.services.clock.now_ms();
        match sessions::lookup(&self.services.db, token, now).await? {
            sessions::Lookup::Live(user) => {
                self.seen_live(digest);
                Ok(user)
            }
            sessions::Lookup::Ended => {
                self.live_sessions().remove(&digest);
                Err(AppError::NotSignedIn)
            }
            sessions::Lookup::Unknown => {
                self.live_sessions().remove(&digest);
                match limits.unknown_session(address) {
                    Some(seconds) => Err(paced(seconds)),
                    None => Err(AppError::NotSignedIn),
                }
            }
        }
    }

    fn live_sessions(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<[u8; 32]>> {
        // Digests only: a set a panic left half-written is still usable.
        self.live_sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn seen_live(&self, digest: [u8; 32]) {
        let mut live = self.live_sessions();
        if live.len() >= MAX_LIVE_SESSIONS {
            live.clear();
        }
        live.insert(digest);
    }

    /// What `user`'s account may query now.
    pub async fn grants(&self, user: &User) -> Result<Grants, AppError> {
        Ok(accounts::grants_of(&self.services.db, user.account_id).await?)
    }

    /// The services underneath (catalog, clock).
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Answers a crosstab body for `user`: here, billed to the user's account, or with
    /// `--upstream`, there, with the account's upstream key.
    pub async fn crosstab(
        &self,
        user: &User,
        body: Bytes,
        request_id: &RequestId,
        idempotency_key: Option<&str>,
    ) -> Result<AppAnswer, AppError> {
        let Some(upstream) = &self.upstream else {
            let principal = self.principal(user).await?;
            let answer = self
                .services
                .crosstab
                .answer(&principal, body, request_id, idempotency_key)
                .await?;
            return Ok(AppAnswer::Answered(answer));
        };
        // The contract's own checks first: a bad request never costs an upstream call.
        let valid = validate_body(&body)?;
        let grants = self.grants(user).await?;
        if !grants.permits(&valid.request.survey_code, valid.request.group_filter()) {
            return Err(ApiError::ForbiddenSurvey.into());
        }
        let key = upstream_keys::get(&self.services.db, user.account_id)
            .await?
            .ok_or(AppError::NotConfigured)?;
        let (status, body) = upstream
            .crosstab(&key, body, idempotency_key)
            .await
            .map_err(|error| AppError::Unreachable(error.to_string()))?;
        Ok(AppAnswer::Forwarded { status, body })
    }

    /// Answers a table body for `user`, billed to the user's account as the `/v1` calls
    /// the same targets would take. Not with `--upstream` ([`AppError::TablesUpstream`]).
    /// With an `Idempotency-Key`, a retry of the same body is given the first answer,
    /// unbilled.
    pub async fn table(
        &self,
        user: &User,
        body: &[u8],
        request_id: &RequestId,
        idempotency_key: Option<&str>,
    ) -> Result<Answer, AppError> {
        let valid = TableRequest::from_json(body)
            .and_then(TableRequest::validate)
            .map_err(ApiError::from)?;
        if self.upstream.is_some() {
            return Err(AppError::TablesUpstream);
        }
        let principal = self.principal(user).await?;
        self.services
            .crosstab
            .table(&principal, valid, body, request_id, idempotency_key)
            .await
            .map_err(|error| match error {
                ServiceError::OverQuota { calls, quota } => {
                    AppError::TableOverQuota { calls, quota }
                }
                other => AppError::Service(other),
            })
    }

    /// `user` as the caller its account is billed for.
    async fn principal(&self, user: &User) -> Result<Principal, AppError> {
        Ok(Principal {
            account_id: user.account_id,
            account: Arc::from(user.account.as_str()),
            grants: self.grants(user).await?,
            limits: accounts::limits_of(&self.services.db, user.account_id).await?,
            credential: Credential::User {
                id: user.id,
                username: Arc::from(user.username.as_str()),
            },
        })
    }

    /// The keys of `user`'s account.
    pub async fn keys(&self, user: &User) -> Result<Vec<KeyInfo>, AppError> {
        Ok(accounts::list_keys(&self.services.db, Some(&user.account)).await?)
    }

    /// Creates a key for `user`'s account, within [`MAX_USABLE_KEYS`].
    pub async fn create_key(
        &self,
        user: &User,
        env: &str,
        expires_in_days: Option<u32>,
    ) -> Result<NewKey, AppError> {
        let env = KeyEnv::from_name(env)
            .ok_or_else(|| AppError::BadRequest("env is 'live' or 'test'.".into()))?;
        let now = self.services.clock.now_ms();
        let days = expires_in_days.filter(|d| *d > 0);
        if days.is_some_and(|days| days > MAX_LIFETIME_DAYS) {
            return Err(AppError::BadRequest(format!(
                "expiresInDays is at most {MAX_LIFETIME_DAYS} (100 years); leave it out \
                 for a key that never expires."
            )));
        }
        let expires_at = days.map(|d| now + i64::from(d) * 86_400_000);
        let limits = KeyLimits {
            usable: i64::try_from(MAX_USABLE_KEYS).unwrap_or(i64::MAX),
            per_day: i64::try_from(MAX_KEYS_PER_DAY).unwrap_or(i64::MAX),
        };
        match accounts::create_key_within(&self.services.db, &user.account, env, expires_at, limits)
            .await?
        {
            KeyCreation::Created(key) => Ok(key),
            KeyCreation::TooManyUsable => Err(AppError::TooManyKeys),
            KeyCreation::TooManyToday => Err(AppError::KeysPerDay),
        }
    }

    /// Revokes key `id` if it is one of `user`'s account's.
    pub async fn revoke_key(&self, user: &User, id: &str) -> Result<(), AppError> {
        if !self.keys(user).await?.iter().any(|k| k.id == id) {
            return Err(AppError::NotFound);
        }
        accounts::revoke_key(&self.services.db, id).await?;
        Ok(())
    }

    /// `user`'s account's billed calls per day, survey and user, over the period `query`
    /// names (a 400 when it names none).
    pub async fn usage(&self, user: &User, query: &UsageQuery) -> Result<Usage, AppError> {
        let now = self.services.clock.now_ms();
        let clock_fault = |e: PeriodError| AppError::Service(ServiceError::Internal(e.to_string()));
        let period = Period::of(query, now).map_err(|e| match e {
            PeriodError::Clock(_) => clock_fault(e),
            e => AppError::BadRequest(e.to_string()),
        })?;
        let (from, to) = period.millis();
        let rows = usage::daily(&self.services.db, user.account_id, from, to).await?;
        let limits = accounts::limits_of(&self.services.db, user.account_id).await?;
        let quota = match limits.daily_quota {
            None => None,
            Some(calls) => {
                let today = Period::today(now).map_err(clock_fault)?;
                let (start, end) = today.millis();
                let used =
                    usage::calls_between(&self.services.db, user.account_id, start, end).await?;
                Some(DailyQuota {
                    day: today.to.to_string(),
                    calls,
                    used,
                })
            }
        };
        Ok(Usage {
            period,
            rows,
            quota,
        })
    }
}

/// An account's usage over a period, as the app's usage page shows it.
#[derive(Debug)]
pub struct Usage {
    /// The days reported.
    pub period: Period,
    /// Billed calls per day, survey and caller, newest day first.
    pub rows: Vec<DailyUsage>,
    /// The daily quota and today's use of it, when the account has one.
    pub quota: Option<DailyQuota>,
}

/// A fresh session token: 32 random bytes, base64url.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl AppService {
    /// The surveys `user`'s account may query.
    pub async fn surveys(&self, user: &User) -> Result<Vec<SurveySummary>, AppError> {
        let grants = self.grants(user).await?;
        Ok(self
            .services
            .catalog
            .all()
            .iter()
            .filter_map(|survey| {
                let grant = grants.survey(survey.code())?;
                // A partial grant sees the count of its own groups, not the survey's.
                let respondents = match grant {
                    SurveyGrant::Whole => survey.respondents() as u64,
                    SurveyGrant::Groups(groups) => groups
                        .iter()
                        .filter_map(|group| survey.group_set(group))
                        .map(|set| set.count())
                        .sum(),
                };
                Some(SurveySummary {
                    code: survey.code().to_owned(),
                    name: survey.name().to_owned(),
                    respondents,
                    all_groups: matches!(grant, SurveyGrant::Whole),
                })
            })
            .collect())
    }

    /// Survey `code`'s codebook as `user`'s account may see it (granted groups only, each
    /// base's totals within each of them), with only the entries matching `search`.
    pub async fn codebook(
        &self,
        user: &User,
        code: &str,
        search: Option<CodebookSearch>,
    ) -> Result<Codebook, AppError> {
        let grants = self.grants(user).await?;
        let (Some(grant), Some(survey)) = (
            grants.survey(code).cloned(),
            self.services.catalog.get(code),
        ) else {
            return Err(ApiError::ForbiddenSurvey.into());
        };
        tokio::task::spawn_blocking(move || codebook_for(&survey, &grant, search.as_ref()))
            .await
            .map_err(|error| ServiceError::Internal(format!("codebook task failed: {error}")))?
    }
}

/// The codebook as an account with `grant` may see it: granted groups only, each base's
/// totals within each of them (and, for a partial grant, the base's totals are those of
/// the granted groups together, since whole-survey totals would reveal the groups not
/// granted), and, with a search, only the codes and variables that match.
fn codebook_for(
    survey: &Survey,
    grant: &SurveyGrant,
    search: Option<&CodebookSearch>,
) -> Result<Codebook, AppError> {
    let mut book = survey.codebook();
    let visible = |value: &str| match grant {
        SurveyGrant::Whole => true,
        SurveyGrant::Groups(groups) => groups.contains(value),
    };
    book.groups.retain(|g| visible(&g.value));
    let group_set = |value: &str| {
        survey.group_set(value).ok_or_else(|| {
            AppError::from(ServiceError::Internal(format!(
                "group {value} of the codebook has no set"
            )))
        })
    };
    // The respondents a partial grant sees, as one set, so that each of its totals is one
    // exact sum rounded once (a sum of the groups' rounded totals is rounded twice).
    let granted = match grant {
        SurveyGrant::Whole => None,
        SurveyGrant::Groups(_) => {
            let mut union = Bitset::empty(survey.respondents());
            for group in &book.groups {
                union.or_with(group_set(&group.value)?);
            }
            Some(union)
        }
    };
    // The engine's exact sums, as /v1/crosstab gives them.
    let totals_within = |base_set: &Bitset, set: &Bitset| {
        let mut within = base_set.clone();
        within.and_with(set);
        let tally = survey.tally(&Expr::All, &within);
        Totals {
            respondents: tally.count,
            weighted: tally.weight,
        }
    };
    for base in &mut book.bases {
        let base_set = survey.base_set(&base.code).ok_or_else(|| {
            ServiceError::Internal(format!("base {} of the codebook has no set", base.code))
        })?;
        let mut totals = BTreeMap::new();
        for group in &book.groups {
            let within = totals_within(base_set, group_set(&group.value)?);
            totals.insert(group.value.clone(), within);
        }
        if let Some(granted) = &granted {
            let within = totals_within(base_set, granted);
            base.respondents = within.respondents;
            base.weighted = within.weighted;
        }
        base.group_totals = Some(totals);
    }
    if let Some(granted) = &granted {
        // The survey's own totals, like its bases', only within the granted groups.
        let tally = survey.tally(&Expr::All, granted);
        book.respondents = tally.count;
        book.weight_total = tally.weight;
    }
    if let Some(search) = search {
        search.retain_in(&mut book);
    }
    Ok(book)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Three groups; group N's weights add up to a total that rounds away its small
    /// weights, which group S's small weight then tips over a rounding boundary.
    fn three_groups() -> Survey {
        let definition = r#"
code = "TRI"
name = "Three groups"
respondents = "respondents.csv"
id_column = "ID"
weight_column = "W"
group_column = "REGION"
audience_report_units = 1

[groups]
"N" = "North"
"S" = "South"
"E" = "East"

[[variables]]
name = "GENDER"
label = "Gender"
values = { "1" = "Male", "2" = "Female" }

[[population_bases]]
code = "ALL"
label = "Everyone"
expr = "*"

[[population_bases]]
code = "MEN"
label = "Men"
expr = "GENDER = 1"
"#;
        let (tiny, tinier) = (2f64.powi(-54), 2f64.powi(-55));
        let csv = format!(
            "ID,W,REGION,GENDER\na,1,N,1\nb,{tinier},N,1\nc,{tiny},N,2\nd,{tiny},S,1\ne,7,E,1\n"
        );
        let bytes = crosstab_engine::import::compile(
            definition,
            "survey.toml",
            csv.as_bytes(),
            "respondents.csv",
        )
        .unwrap();
        Survey::from_bytes(&bytes).unwrap()
    }

    #[test]
    fn a_partial_grants_totals_are_its_groups_summed_once() {
        let survey = three_groups();
        let grant = SurveyGrant::Groups(["N".to_owned(), "S".to_owned()].into());
        let book = codebook_for(&survey, &grant, None).unwrap();
        let values: Vec<&str> = book.groups.iter().map(|g| g.value.as_str()).collect();
        assert_eq!(values, ["N", "S"]);

        // 1 + 5·2^-55 rounds up to the next f64 above 1; the groups' own totals, 1 and
        // 2^-54, added after rounding, stay at 1.
        let next_above_one = 1.0 + f64::EPSILON;
        let all = &book.bases[0];
        let groups = all.group_totals.as_ref().unwrap();
        assert_eq!(groups["N"].weighted, 1.0);
        assert_eq!(groups["S"].weighted, 2f64.powi(-54));
        assert_eq!(groups["N"].weighted + groups["S"].weighted, 1.0);
        assert_eq!((all.respondents, all.weighted), (4, next_above_one));
        assert_eq!((book.respondents, book.weight_total), (4, next_above_one));
        let men = &book.bases[1];
        // 1 + 3·2^-55 is below the midpoint: 1.
        assert_eq!((men.respondents, men.weighted), (3, 1.0));

        // A whole grant keeps the survey's own totals, group E's weight among them.
        let book = codebook_for(&survey, &SurveyGrant::Whole, None).unwrap();
        assert_eq!(book.groups.len(), 3);
        assert_eq!((book.respondents, book.bases[0].respondents), (5, 5));
        assert_eq!(book.weight_total, 8.0);
    }
}
