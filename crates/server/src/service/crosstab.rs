//! `POST /v1/crosstab` without HTTP: the cache, validation, entitlement, the engine and
//! the bill, in the contract's order. The `/v1` handler and the app backend both answer
//! through [`Crosstab::answer`], so a query is checked and billed one way whoever asks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use crosstab_contract::{validate_body, ApiError, CrosstabResponse, ValidRequest};
use crosstab_engine::store::Catalog;
use crosstab_engine::Survey;

use super::cache::{Entry, ResponseCache};
use super::limits::RateLimits;
use super::principal::Principal;
use super::{RequestId, ServiceError};
use crate::clock::Clock;
use crate::store::ledger::{Bill, Ledger};

/// Surveys larger than this are queried on the blocking pool, off the async workers.
const INLINE_QUERY_MAX_RESPONDENTS: usize = 1_000_000;

/// Answers crosstab queries and bills them.
#[derive(Debug)]
pub struct Crosstab {
    catalog: Arc<Catalog>,
    cache: ResponseCache,
    ledger: Ledger,
    limits: Arc<RateLimits>,
    deadline: Duration,
    clock: Arc<dyn Clock>,
}

/// What a bill records of a request, whether computed now or answered from the cache.
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
        catalog: Arc<Catalog>,
        cache: ResponseCache,
        ledger: Ledger,
        limits: Arc<RateLimits>,
        deadline: Duration,
        clock: Arc<dyn Clock>,
    ) -> Crosstab {
        Crosstab {
            catalog,
            cache,
            ledger,
            limits,
            deadline,
            clock,
        }
    }

    /// The answers cached so far.
    pub fn cache(&self) -> &ResponseCache {
        &self.cache
    }

    /// The serialized 200 body for `body` asked by `principal`, billed to its account
    /// before it is returned; or why not (and then nothing is billed).
    pub async fn answer(
        &self,
        principal: &Principal,
        body: Bytes,
        request_id: &RequestId,
    ) -> Result<Bytes, ServiceError> {
        // Within the account's rate and quota first: nothing over them is even computed.
        let admission = self.limits.admit(principal).await?;
        let answer = match self.cached_answer(principal, &body, request_id).await? {
            Some(answer) => answer,
            None => self.computed_answer(principal, body, request_id).await?,
        };
        admission.billed();
        Ok(answer)
    }

    /// Validates, checks entitlement, computes within the deadline, caches and bills.
    async fn computed_answer(
        &self,
        principal: &Principal,
        body: Bytes,
        request_id: &RequestId,
    ) -> Result<Bytes, ServiceError> {
        let started = Instant::now();
        let valid = validate_body(&body)?;
        let request = &valid.request;
        let group = request.group_filter();
        // Entitlement: unknown and not granted look the same.
        let survey = self
            .catalog
            .get(&request.survey_code)
            .filter(|_| principal.grants.permits(&request.survey_code, group))
            .filter(|survey| group.is_none_or(|g| survey.has_group(g)))
            .ok_or(ApiError::ForbiddenSurvey)?;
        if !survey.has_base(&request.population_base_code) {
            return Err(ApiError::InvalidPopulationBase {
                base: request.population_base_code.clone(),
            }
            .into());
        }
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
                billable.group.clone(),
                Arc::clone(&billable.base),
                billable.targets,
                answer.clone(),
            );
            self.cache.insert(body, entry);
        }
        self.bill(principal, billable, request_id).await?;
        Ok(answer)
    }

    /// The answer to a body seen before, when it was computed on the survey version the
    /// catalog serves now and the caller may see it (validation depends on the bytes
    /// alone, and the group and base were checked on this very survey instance).
    async fn cached_answer(
        &self,
        principal: &Principal,
        body: &Bytes,
        request_id: &RequestId,
    ) -> Result<Option<Bytes>, ServiceError> {
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
            return Err(ApiError::ForbiddenSurvey.into());
        }
        let billable = Billable {
            survey: Arc::clone(&hit.survey_code),
            group: hit.group.clone(),
            base: Arc::clone(&hit.base),
            targets: hit.targets,
        };
        self.bill(principal, billable, request_id).await?;
        Ok(Some(hit.body.clone()))
    }

    /// The one place a bill is made: committed before the answer may go out.
    async fn bill(
        &self,
        principal: &Principal,
        billable: Billable,
        request_id: &RequestId,
    ) -> Result<(), ServiceError> {
        let bill = Bill {
            at: self.clock.now_ms(),
            account_id: principal.account_id,
            caller: principal.caller(),
            survey: billable.survey,
            group: billable.group,
            base: billable.base,
            targets: billable.targets,
            request_id: Arc::clone(&request_id.0),
        };
        Ok(self.ledger.bill(bill).await?)
    }
}

/// The engine's answer, on the blocking pool for large surveys; past `deadline` there,
/// refused without waiting for it (the computation finishes on its own, unused).
async fn compute(
    survey: Arc<Survey>,
    valid: ValidRequest,
    deadline: Duration,
) -> Result<CrosstabResponse, ServiceError> {
    if survey.respondents() <= INLINE_QUERY_MAX_RESPONDENTS {
        return Ok(survey.crosstab(&valid).map_err(ApiError::from)?);
    }
    let task = tokio::task::spawn_blocking(move || survey.crosstab(&valid).map_err(ApiError::from));
    tokio::time::timeout(deadline, task)
        .await
        .map_err(|_| ApiError::DeadlineExceeded)?
        .map_err(|error| ServiceError::Internal(format!("query task failed: {error}")))?
        .map_err(ServiceError::from)
}
