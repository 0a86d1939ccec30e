//! `POST /v1/crosstab` without HTTP: the cache, validation, entitlement, the engine and
//! the bill, in the contract's order. The `/v1` handler and the app backend both answer
//! through [`Crosstab::answer`], so a query is checked and billed one way whoever asks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use crosstab_contract::app::{Table, ValidTable};
use crosstab_contract::idempotency::KEY_KEPT_MS;
use crosstab_contract::{validate_body, ApiError, CrosstabResponse, ValidRequest};
use crosstab_engine::store::Catalog;
use crosstab_engine::{QueryError, Survey};
use sha2::{Digest, Sha256};

use super::cache::{Entry, ResponseCache};
use super::limits::RateLimits;
use super::principal::Principal;
use super::{RequestId, ServiceError};
use crate::clock::Clock;
use crate::store::idempotency::{self, Reservation};
use crate::store::ledger::{Bill, KeptAnswer, Ledger, LedgerError};
use crate::store::Database;

/// Surveys larger than this are queried on the blocking pool, off the async workers.
const INLINE_QUERY_MAX_RESPONDENTS: usize = 1_000_000;

/// How often a request looks again at a key another request is answering.
const IN_PROGRESS_POLL: Duration = Duration::from_millis(20);
/// The longest wait between two looks, the wait doubling from [`IN_PROGRESS_POLL`].
const IN_PROGRESS_POLL_MAX: Duration = Duration::from_millis(200);

/// A 200 body, and whether it is the stored answer to an earlier request with the same
/// `Idempotency-Key` (then not billed again).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The serialized `CrosstabResponse` (or `Table`).
    pub body: Bytes,
    /// Whether it was answered before.
    pub replayed: bool,
    /// The calls billed for it now: 0 when replayed.
    pub billed_calls: u32,
}

/// What a request's `Idempotency-Key` stands for: the SHA-256 of its body, for a table
/// prefixed with a name of its own, so a key taken by a crosstab is never a table's
/// answer, or the other way round. (A crosstab's is the body's alone, as keys were kept
/// before tables had any; no crosstab body can begin with the table's prefix and be
/// valid, which a replay checks first.)
enum Asked<'a> {
    Crosstab(&'a [u8]),
    Table(&'a [u8]),
}

impl Asked<'_> {
    fn sha256(&self) -> String {
        let digest = match self {
            Asked::Crosstab(body) => Sha256::digest(body),
            Asked::Table(body) => Sha256::new()
                .chain_update(b"crosstab table\n")
                .chain_update(body)
                .finalize(),
        };
        crate::keys::to_hex(&digest)
    }
}

/// What an `Idempotency-Key` gave this request.
enum Held {
    /// The key is this request's.
    Ours(Reserved),
    /// The answer it got before.
    Answered(Bytes),
}

/// A reserved key: given back when its request ends unbilled, before its error is
/// answered (or, dropped with its client, as soon as may be), so a retry is answered anew.
struct Reserved {
    db: Database,
    account_id: i64,
    key: Arc<str>,
    /// This reservation's own token (see [`idempotency::Claim::owner`]).
    owner: Arc<str>,
    /// Billed or given back: nothing left to do when dropped.
    settled: bool,
}

impl Reserved {
    /// The bill's transaction stored the answer with the key: it stays.
    fn billed(mut self) {
        self.settled = true;
    }

    /// Gives the key back now, so a retry sent as soon as the error arrives finds it free.
    async fn give_back(mut self) {
        self.release().await;
        // Only now: dropped during the release (its client gone), `drop` gives it back.
        self.settled = true;
    }

    /// Giving back this reservation, if its request was not billed (a future of its own,
    /// so a drop can spawn it).
    fn release(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (db, account_id, key, owner) = (
            self.db.clone(),
            self.account_id,
            Arc::clone(&self.key),
            Arc::clone(&self.owner),
        );
        async move {
            if let Err(error) = idempotency::release(&db, account_id, &key, &owner).await {
                // Held until it counts as abandoned (twice the query deadline).
                tracing::warn!(%error, "an unbilled idempotency key was not given back");
            }
        }
    }

    /// The answer to keep with the key in the bill's transaction.
    fn keeping(&self, body: &Bytes) -> KeptAnswer {
        KeptAnswer {
            account_id: self.account_id,
            key: Arc::clone(&self.key),
            owner: Arc::clone(&self.owner),
            body: body.clone(),
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // Tracked, so the pool closes only after it (at shutdown too).
        if tokio::runtime::Handle::try_current().is_ok() {
            self.db.spawn_after_request(self.release());
        }
    }
}

/// An `Idempotency-Key` header's value: 1 to 255 printable ASCII characters.
fn idempotency_key_of(value: &str) -> Result<Arc<str>, ApiError> {
    if crosstab_contract::idempotency::is_valid_key(value) {
        Ok(Arc::from(value))
    } else {
        Err(ApiError::InvalidRequest {
            field: Some("Idempotency-Key".to_owned()),
            message: "Idempotency-Key must be 1 to 255 printable ASCII characters.".to_owned(),
            hint: Some("Send a fresh random value, e.g. a UUID, per logical query.".to_owned()),
        })
    }
}

/// Answers crosstab queries and bills them.
#[derive(Debug)]
pub struct Crosstab {
    db: Database,
    catalog: Arc<Catalog>,
    cache: ResponseCache,
    ledger: Ledger,
    limits: Arc<RateLimits>,
    deadline: Duration,
    clock: Arc<dyn Clock>,
}

/// What a bill records of a request, whether computed now or answered from the cache.
#[derive(Clone)]
struct Billable {
    survey: Arc<str>,
    group: Option<Arc<str>>,
    base: Arc<str>,
    targets: i64,
}

impl Crosstab {
    /// Answers over `catalog`, reusing answers in `cache`, billing to `ledger`.
    /// Queries not answered within `deadline` are refused, unbilled.
    pub fn new(
        db: Database,
        catalog: Arc<Catalog>,
        cache: ResponseCache,
        ledger: Ledger,
        limits: Arc<RateLimits>,
        deadline: Duration,
        clock: Arc<dyn Clock>,
    ) -> Crosstab {
        Crosstab {
            db,
            catalog,
            cache,
            ledger,
            limits,
            deadline,
            clock,
        }
    }

    /// Whether bills can be committed (the ledger writer runs).
    pub fn can_bill(&self) -> bool {
        self.ledger.is_alive()
    }

    /// The answers cached so far.
    pub fn cache(&self) -> &ResponseCache {
        &self.cache
    }

    /// The serialized 200 body for `body` asked by `principal`, billed to its account
    /// before it is returned; or why not (and then nothing is billed). With an
    /// `Idempotency-Key`, a retry of the same body is given the first answer, unbilled.
    pub async fn answer(
        &self,
        principal: &Principal,
        body: Bytes,
        request_id: &RequestId,
        idempotency_key: Option<&str>,
    ) -> Result<Answer, ServiceError> {
        let reservation = match self
            .hold(principal, idempotency_key, Asked::Crosstab(&body))
            .await?
        {
            Some(Held::Answered(answer)) => {
                // Given again only to a caller its grants still let ask it: keys are the
                // account's, so another of its callers may hold one.
                let valid = validate_body(&body)?;
                let request = &valid.request;
                return self.replay(
                    principal,
                    &request.survey_code,
                    request.group_filter(),
                    || Ok(answer),
                );
            }
            Some(Held::Ours(reservation)) => Some(reservation),
            None => None,
        };
        let answer = self
            .billed_answer(principal, body, request_id, reservation.as_ref())
            .await;
        let body = settle(reservation, answer).await?;
        Ok(Answer {
            body,
            replayed: false,
            billed_calls: 1,
        })
    }

    /// What `idempotency_key`, if the request sent one, gives it: the key itself, or the
    /// answer given before to the same `asked`.
    async fn hold(
        &self,
        principal: &Principal,
        idempotency_key: Option<&str>,
        asked: Asked<'_>,
    ) -> Result<Option<Held>, ServiceError> {
        match idempotency_key {
            Some(key) => {
                let key = idempotency_key_of(key)?;
                Ok(Some(self.reserve(principal, &key, &asked.sha256()).await?))
            }
            None => Ok(None),
        }
    }

    /// The answer kept with a key, given again, unbilled, to a caller whose grants still
    /// let it ask about `survey` and `group` (keys are the account's, so another of its
    /// callers may hold one), within the account's rate; only then is it made `ready`.
    fn replay(
        &self,
        principal: &Principal,
        survey: &str,
        group: Option<&str>,
        ready: impl FnOnce() -> Result<Bytes, ServiceError>,
    ) -> Result<Answer, ServiceError> {
        if !principal.grants.permits(survey, group) {
            return Err(ApiError::ForbiddenSurvey.into());
        }
        self.limits.pace(principal)?;
        Ok(Answer {
            body: ready()?,
            replayed: true,
            billed_calls: 0,
        })
    }

    /// The answer, from the cache or computed, billed (with the answer kept for `held`'s
    /// key, if the request sent one).
    async fn billed_answer(
        &self,
        principal: &Principal,
        body: Bytes,
        request_id: &RequestId,
        held: Option<&Reserved>,
    ) -> Result<Bytes, ServiceError> {
        // A request refused for what it asks is refused so whatever the account's rate
        // and quota (retried unchanged, it fails the same way): the checks come first,
        // and only then the limits, over which nothing is computed or billed. A body
        // answered before passed them then; the caller's grants are checked again.
        if let Some((billable, answer)) = self.cached_answer(principal, &body)? {
            let admission = self.limits.admit(principal).await?;
            self.bill(principal, billable, request_id, held, &answer)
                .await?;
            admission.billed();
            return Ok(answer);
        }
        let valid = validate_body(&body)?;
        let request = &valid.request;
        let survey = self.entitled(
            principal,
            &request.survey_code,
            request.group_filter(),
            &request.population_base_code,
        )?;
        let admission = self.limits.admit(principal).await?;
        let answer = self
            .computed_answer(principal, survey, valid, body, request_id, held)
            .await?;
        admission.billed();
        Ok(answer)
    }

    /// Takes `key` for this request, or finds the answer it was given (waiting, within
    /// the deadline, for a request with the same key that is being answered now).
    async fn reserve(
        &self,
        principal: &Principal,
        key: &Arc<str>,
        hash: &str,
    ) -> Result<Held, ServiceError> {
        let owner: Arc<str> = Arc::from(crate::keys::to_hex(&rand::random::<[u8; 16]>()));
        let claim = idempotency::Claim {
            account_id: principal.account_id,
            key,
            body_sha256: hash,
            owner: &owner,
        };
        let started = Instant::now();
        let mut poll = IN_PROGRESS_POLL;
        let mut waiting = false;
        loop {
            let now = self.clock.now_ms();
            let abandoned = i64::try_from(self.deadline.as_millis())
                .unwrap_or(i64::MAX)
                .saturating_mul(2);
            let (expired_before, abandoned_before) =
                (now - KEY_KEPT_MS, now.saturating_sub(abandoned));
            // Waiting on a request in flight: read, and write only once the key is free
            // (many retries of one key must not each write many times a second).
            let looked = if waiting {
                idempotency::look(&self.db, claim, expired_before, abandoned_before).await?
            } else {
                None
            };
            let reservation = match looked {
                Some(held) => held,
                None => {
                    idempotency::reserve(&self.db, claim, now, expired_before, abandoned_before)
                        .await?
                }
            };
            match reservation {
                Reservation::Reserved => {
                    return Ok(Held::Ours(Reserved {
                        db: self.db.clone(),
                        account_id: principal.account_id,
                        key: Arc::clone(key),
                        owner,
                        settled: false,
                    }))
                }
                Reservation::Answered { status: 200, body } => {
                    return Ok(Held::Answered(Bytes::from(body)))
                }
                Reservation::Answered { status, .. } => {
                    return Err(ServiceError::Internal(format!(
                        "an idempotency key holds a {status}: only 200s are kept"
                    )))
                }
                Reservation::OtherBody => return Err(ApiError::IdempotencyKeyReused.into()),
                Reservation::InProgress if started.elapsed() > self.deadline => {
                    return Err(ApiError::DeadlineExceeded.into())
                }
                Reservation::InProgress => {
                    waiting = true;
                    tokio::time::sleep(poll).await;
                    poll = (poll * 2).min(IN_PROGRESS_POLL_MAX);
                }
            }
        }
    }

    /// Computes a valid request on the `survey` it is entitled to, within the deadline,
    /// caches and bills it.
    async fn computed_answer(
        &self,
        principal: &Principal,
        survey: Arc<Survey>,
        valid: ValidRequest,
        body: Bytes,
        request_id: &RequestId,
        held: Option<&Reserved>,
    ) -> Result<Bytes, ServiceError> {
        let started = Instant::now();
        let request = &valid.request;
        let group = request.group_filter();
        let billable = Billable {
            survey: Arc::from(request.survey_code.as_str()),
            group: group.map(Arc::from),
            base: Arc::from(request.population_base_code.as_str()),
            targets: i64::try_from(request.target_codes.len())
                .map_err(|_| ServiceError::Internal("target count out of range".into()))?,
        };
        let cacheable = self.cache.enabled().then(|| Arc::clone(&survey));
        let response = compute(survey, valid, self.deadline).await?;
        // An answer computed past the deadline is not sent: the client was told the
        // deadline, and an unbilled 503 is what it asked for then.
        if started.elapsed() > self.deadline {
            return Err(ApiError::DeadlineExceeded.into());
        }
        let answer = Bytes::from(serde_json::to_vec(&response).map_err(|error| {
            ServiceError::Internal(format!("response serialization failed: {error}"))
        })?);
        if let Some(survey) = cacheable {
            let entry = Entry::new(
                &survey,
                Arc::clone(&billable.survey),
                billable.group.clone(),
                Arc::clone(&billable.base),
                billable.targets,
            );
            self.cache.insert(&body, &answer, entry);
        }
        self.bill(principal, billable, request_id, held, &answer)
            .await?;
        Ok(answer)
    }

    /// The answer to a body seen before, and what billing it means, when it was computed
    /// on the survey version the catalog serves now and the caller may see it (validation
    /// depends on the bytes alone, and the group and base were checked on this very
    /// survey instance).
    fn cached_answer(
        &self,
        principal: &Principal,
        body: &Bytes,
    ) -> Result<Option<(Billable, Bytes)>, ApiError> {
        let Some(hit) = self.cache.get(body) else {
            return Ok(None);
        };
        let current = self
            .catalog
            .get(&hit.survey_code)
            .is_some_and(|survey| hit.is_for(&survey));
        if !current {
            return Ok(None);
        }
        if !principal
            .grants
            .permits(&hit.survey_code, hit.group.as_deref())
        {
            return Err(ApiError::ForbiddenSurvey);
        }
        let billable = Billable {
            survey: Arc::clone(&hit.survey_code),
            group: hit.group.clone(),
            base: Arc::clone(&hit.base),
            targets: hit.targets,
        };
        Ok(Some((billable, hit.body())))
    }

    /// The one place a bill is made: committed before the answer may go out, with the
    /// answer kept for `held`'s key when the request sent one.
    async fn bill(
        &self,
        principal: &Principal,
        billable: Billable,
        request_id: &RequestId,
        held: Option<&Reserved>,
        answer: &Bytes,
    ) -> Result<(), ServiceError> {
        let bill = self.bill_of(principal, billable, request_id);
        let billed = match held {
            None => self.ledger.bill(bill).await,
            Some(held) => self.ledger.bill_keeping(bill, held.keeping(answer)).await,
        };
        billed.map_err(lost_key)
    }

    fn bill_of(&self, principal: &Principal, billable: Billable, request_id: &RequestId) -> Bill {
        Bill {
            account_id: principal.account_id,
            caller: principal.caller(),
            survey: billable.survey,
            group: billable.group,
            base: billable.base,
            targets: billable.targets,
            request_id: Arc::clone(&request_id.0),
        }
    }

    /// A table for `principal`: the same entitlement checks as a crosstab, within the
    /// account's rate (one request) and daily quota (every call), computed within the
    /// deadline, and billed as the calls `/v1` would have taken to ask the same targets
    /// ([`ValidTable::billed_calls`]: one per two targets) before it is returned.
    ///
    /// With an `Idempotency-Key`, a retry of the same body is given the first answer,
    /// unbilled, as a crosstab is (`body` is the request as sent, which the key stands for).
    pub async fn table(
        &self,
        principal: &Principal,
        valid: ValidTable,
        body: &[u8],
        request_id: &RequestId,
        idempotency_key: Option<&str>,
    ) -> Result<Answer, ServiceError> {
        let reservation = match self
            .hold(principal, idempotency_key, Asked::Table(body))
            .await?
        {
            Some(Held::Answered(kept)) => {
                return self.replay(
                    principal,
                    &valid.request.survey,
                    valid.group_filter(),
                    || inflated(&kept),
                )
            }
            Some(Held::Ours(reservation)) => Some(reservation),
            None => None,
        };
        let calls = valid.billed_calls();
        let table = self
            .billed_table(principal, valid, request_id, reservation.as_ref())
            .await;
        let body = settle(reservation, table).await?;
        Ok(Answer {
            body,
            replayed: false,
            billed_calls: calls,
        })
    }

    /// The table computed and billed (with its answer kept for `held`'s key, if the
    /// request sent one), serialized.
    async fn billed_table(
        &self,
        principal: &Principal,
        valid: ValidTable,
        request_id: &RequestId,
        held: Option<&Reserved>,
    ) -> Result<Bytes, ServiceError> {
        let started = Instant::now();
        let request = &valid.request;
        let group = valid.group_filter();
        let survey = self.entitled(principal, &request.survey, group, &request.population_base)?;
        let calls = valid.billed_calls();
        let targets = valid.targets();
        // Two targets a call.
        let count = targets.div_ceil(2);
        let asked = Billable {
            survey: Arc::from(request.survey.as_str()),
            group: group.map(Arc::from),
            base: Arc::from(request.population_base.as_str()),
            targets: 2,
        };
        let bills: Vec<Bill> = (0..count)
            .map(|call| {
                // An odd count of targets leaves one for the last call.
                let targets = if call * 2 + 1 == targets { 1 } else { 2 };
                self.bill_of(
                    principal,
                    Billable {
                        targets,
                        ..asked.clone()
                    },
                    request_id,
                )
            })
            .collect();
        if u32::try_from(count).ok() != Some(calls) {
            return Err(ServiceError::Internal(format!(
                "a table of {targets} targets makes {count} bills, not {calls}"
            )));
        }
        // Refused for what it asks, before the limits (as every such refusal is).
        if let Some(filter) = &valid.filter {
            survey.check_filter(filter).map_err(ApiError::from)?;
        }
        let admission = self.limits.admit_calls(principal, u64::from(calls)).await?;
        let mut table = compute_table(survey, valid, self.deadline).await?;
        if started.elapsed() > self.deadline {
            return Err(ApiError::DeadlineExceeded.into());
        }
        table.billed_calls = calls;
        let (answer, packed) = serialized(table, held.is_some()).await?;
        let kept = held.zip(packed).map(|(held, packed)| held.keeping(&packed));
        self.ledger.bill_all(bills, kept).await.map_err(lost_key)?;
        admission.billed();
        Ok(answer)
    }

    /// The survey `principal` may query with `group` and `base`, in the contract's order:
    /// unknown and not granted look the same (403), then the base must exist.
    fn entitled(
        &self,
        principal: &Principal,
        survey_code: &str,
        group: Option<&str>,
        base: &str,
    ) -> Result<Arc<Survey>, ApiError> {
        let survey = self
            .catalog
            .get(survey_code)
            .filter(|_| principal.grants.permits(survey_code, group))
            .filter(|survey| group.is_none_or(|g| survey.has_group(g)))
            .ok_or(ApiError::ForbiddenSurvey)?;
        if !survey.has_base(base) {
            return Err(ApiError::InvalidPopulationBase {
                base: base.to_owned(),
            });
        }
        Ok(survey)
    }
}

/// A table's 200 body, and (when `keep`) the same as kept with its key ([`deflated`]),
/// made on the blocking pool: megabytes of JSON for a large table.
async fn serialized(table: Table, keep: bool) -> Result<(Bytes, Option<Bytes>), ServiceError> {
    tokio::task::spawn_blocking(move || {
        let answer = Bytes::from(serde_json::to_vec(&table).map_err(|error| {
            ServiceError::Internal(format!("table serialization failed: {error}"))
        })?);
        let kept = keep.then(|| deflated(&answer)).transpose()?;
        Ok((answer, kept))
    })
    .await
    .map_err(|error| ServiceError::Internal(format!("table serialization task failed: {error}")))?
}

/// A table's answer as kept with its key: zlib-compressed, since a large table is
/// megabytes of JSON (3.5 MB for 200 × 50, 148 KB compressed) written in the ledger's one
/// transaction with every other account's bills. Zlib's header and checksum make a blob
/// that is not one (a kept crosstab's JSON, say) fail to inflate rather than inflate to
/// something else.
fn deflated(answer: &[u8]) -> Result<Bytes, ServiceError> {
    use std::io::Write as _;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(answer)
        .and_then(|()| encoder.finish())
        .map(Bytes::from)
        .map_err(|error| ServiceError::Internal(format!("compressing a kept table: {error}")))
}

/// A kept table's answer as it was sent ([`deflated`]'s inverse).
fn inflated(kept: &[u8]) -> Result<Bytes, ServiceError> {
    use std::io::Read as _;
    let mut answer = Vec::new();
    flate2::read::ZlibDecoder::new(kept)
        .read_to_end(&mut answer)
        .map(|_| Bytes::from(answer))
        .map_err(|error| ServiceError::Internal(format!("a kept table does not inflate: {error}")))
}

/// A ledger's refusal as the request's.
fn lost_key(error: LedgerError) -> ServiceError {
    match error {
        // Its key was taken over by a retry once this request counted as abandoned (twice
        // the deadline): this one is past its deadline, and unbilled.
        LedgerError::KeyLost => ApiError::DeadlineExceeded.into(),
        other => other.into(),
    }
}

/// `answer`, once the key it held (if any) is settled: kept with the answer if it was
/// billed, else given back, so a retry sent as soon as the error arrives is answered anew.
async fn settle<T>(
    reservation: Option<Reserved>,
    answer: Result<T, ServiceError>,
) -> Result<T, ServiceError> {
    if let Some(reservation) = reservation {
        match &answer {
            Ok(_) => reservation.billed(),
            Err(_) => reservation.give_back().await,
        }
    }
    answer
}

/// The engine's table, on the blocking pool (a table is many queries' work), within the
/// deadline ([`within_deadline`]).
async fn compute_table(
    survey: Arc<Survey>,
    valid: ValidTable,
    deadline: Duration,
) -> Result<Table, ServiceError> {
    within_deadline(deadline, "table", move |give_up| {
        survey.table_until(&valid, give_up)
    })
    .await
}

/// The engine's answer: inline for a survey small enough to answer at once, else on the
/// blocking pool within the deadline ([`within_deadline`]).
async fn compute(
    survey: Arc<Survey>,
    valid: ValidRequest,
    deadline: Duration,
) -> Result<CrosstabResponse, ServiceError> {
    if survey.respondents() <= INLINE_QUERY_MAX_RESPONDENTS {
        return Ok(survey.crosstab(&valid).map_err(ApiError::from)?);
    }
    within_deadline(deadline, "query", move |give_up| {
        survey.crosstab_until(&valid, give_up)
    })
    .await
}

/// `work` on the blocking pool, told to give up (the engine asks before each block) once
/// `deadline` has passed; past it, refused without waiting for it. Work abandoned, or
/// queued behind others until its caller was refused, would go on taking a core, unbilled.
async fn within_deadline<T: Send + 'static>(
    deadline: Duration,
    what: &'static str,
    work: impl FnOnce(&dyn Fn() -> bool) -> Result<T, QueryError> + Send + 'static,
) -> Result<T, ServiceError> {
    // No instant that far ahead (a deadline of centuries): never given up.
    let until = Instant::now().checked_add(deadline);
    let task = tokio::task::spawn_blocking(move || {
        work(&|| until.is_some_and(|until| Instant::now() >= until)).map_err(ApiError::from)
    });
    tokio::time::timeout(deadline, task)
        .await
        .map_err(|_| ApiError::DeadlineExceeded)?
        .map_err(|error| ServiceError::Internal(format!("{what} task failed: {error}")))?
        .map_err(ServiceError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_stands_for_a_crosstab_or_a_table_never_both() {
        let body = br#"{"SurveyCode":"S"}"#;
        // A crosstab's as before tables had keys, so keys kept across an upgrade match.
        assert_eq!(
            Asked::Crosstab(body).sha256(),
            crate::keys::to_hex(&Sha256::digest(body))
        );
        assert_ne!(Asked::Table(body).sha256(), Asked::Crosstab(body).sha256());
        assert_eq!(Asked::Table(body).sha256(), Asked::Table(body).sha256());
        assert_ne!(Asked::Table(body).sha256(), Asked::Table(b"{}").sha256());
    }

    #[test]
    fn a_kept_table_inflates_to_the_answer_sent() {
        let answer = br#"{"cells":[[{"weight":1.5}]],"billedCalls":2}"#.repeat(100);
        let kept = deflated(&answer).unwrap();
        assert!(kept.len() < answer.len() / 10);
        assert_eq!(inflated(&kept).unwrap(), Bytes::from(answer));
        assert!(inflated(b"not deflated").is_err());
        // JSON kept raw (a crosstab's) is refused, not inflated to something else.
        assert!(inflated(br#"{"cells":[]}"#).is_err());
    }
}
