//! Rate limits and quotas: each account's request rate and daily quota of billed calls
//! (set per account with `crosstab account limits`), and per client address, the pace of
//! failed authentications and of sign-ins. Over a limit a caller gets `rate_limited`
//! (429) with the seconds to wait; nothing over a limit is computed or billed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crosstab_contract::ApiError;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::principal::Principal;
use super::ServiceError;
use crate::clock::Clock;
use crate::store::accounts::AccountLimits;
use crate::store::{ledger, usage, Database};

const DAY_MS: i64 = 86_400_000;

/// How far behind another replica's clock a replica's may be without any of its bills
/// escaping the other's quota count.
const CLOCK_SKEW_MS: i64 = 10_000;

/// The ledger's rows older than this are final, and counted once: as long as a bill may
/// take to commit after the time it carries ([`ledger::committed_within`]) and the clocks'
/// skew, and at least a minute.
fn settled_after(db: &Database) -> i64 {
    // Past a day it is the whole day: each read counts today's bills anew.
    let within = i64::try_from(ledger::committed_within(db).as_millis()).unwrap_or(DAY_MS);
    within.saturating_add(CLOCK_SKEW_MS).clamp(60_000, DAY_MS)
}

/// An account whose calls were admitted within this keeps its quota count in step with
/// the database's (every replica's bills).
const SHARED_WHILE_ACTIVE_MS: i64 = 60_000;

/// Addresses remembered as blocked at most (past this, the soonest to end are dropped).
const MAX_BLOCKED: usize = 100_000;

/// Per-address paces (attempts per minute).
#[derive(Debug, Clone, Copy)]
pub struct AddressLimits {
    /// Failed authentications per client address and minute before its calls get 429.
    pub failed_auth_per_minute: u32,
    /// Sign-in attempts per client address and minute.
    pub sign_in_per_minute: u32,
}

/// The service's [`Clock`] as the rate limiters read time, so that tests move their time
/// as they move the rest of the service's.
#[derive(Debug, Clone)]
struct PaceClock(Arc<dyn Clock>);

impl governor::clock::Clock for PaceClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.0.monotonic()
    }
}

type AccountRate = RateLimiter<NotKeyed, InMemoryState, PaceClock, NoOpMiddleware<Duration>>;
type AddressRate =
    RateLimiter<IpAddr, DefaultKeyedStateStore<IpAddr>, PaceClock, NoOpMiddleware<Duration>>;

/// One account's state: its rate limiter, and its billed calls today.
#[derive(Debug)]
struct Account {
    per_second: Option<(NonZeroU32, Arc<AccountRate>)>,
    day: i64,
    /// Calls billed today plus those admitted and not yet settled.
    used: u64,
    /// Calls admitted here and not yet billed or given back.
    pending: u64,
    /// The ledger's final count so far today.
    tally: Tally,
    /// When a call was last admitted (Unix ms; `i64::MIN` for none yet), and whether the
    /// account has a quota.
    last_admitted: i64,
    has_quota: bool,
    /// When a call here last read the tally from the ledger (Unix ms): an account refused
    /// all minute is read once a minute, not on each refusal.
    last_read: i64,
}

/// `account_id`'s state on `day`, begun anew (its rate kept) when its own is an earlier
/// one. A later one stays: a call that read the clock just before midnight counts in the
/// day another call has begun since.
fn on_day(accounts: &mut HashMap<i64, Account>, account_id: i64, day: i64) -> &mut Account {
    let account = accounts
        .entry(account_id)
        .or_insert_with(|| Account::new(day));
    if account.day < day {
        *account = Account {
            per_second: account.per_second.take(),
            ..Account::new(day)
        };
    }
    account
}

/// An account's calls in the ledger today before `before` (Unix ms): final (see
/// [`settled_after`]), so counted once, and a refresh reads only the minutes since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tally {
    counted: u64,
    before: i64,
}

impl Tally {
    /// Nothing counted yet on `day`.
    fn day(day: i64) -> Tally {
        Tally {
            counted: 0,
            before: day * DAY_MS,
        }
    }
}

impl Account {
    /// An account with no call admitted or read here yet on `day`.
    fn new(day: i64) -> Account {
        Account {
            per_second: None,
            day,
            used: 0,
            pending: 0,
            tally: Tally::day(day),
            last_admitted: i64::MIN,
            has_quota: false,
            last_read: i64::MIN,
        }
    }

    /// Takes one request from the account's per-second `rate` (none: unpaced), refused
    /// with the time to wait when there is none left.
    fn pace(&mut self, rate: Option<NonZeroU32>, clock: &Arc<dyn Clock>) -> Result<(), ApiError> {
        let Some(rate) = rate else {
            self.per_second = None;
            return Ok(());
        };
        let limiter = match &self.per_second {
            Some((current, limiter)) if *current == rate => limiter,
            _ => {
                let limiter = RateLimiter::direct_with_clock(
                    Quota::per_second(rate),
                    PaceClock(Arc::clone(clock)),
                );
                &self.per_second.insert((rate, Arc::new(limiter))).1
            }
        };
        limiter.check().map_err(|not_until| {
            let wait = not_until.wait_time_from(clock.monotonic());
            ApiError::RateLimited {
                retry_after_s: seconds_until(wait),
            }
        })
    }

    /// Today's count from the ledger, read from `read` (unless another read moved the
    /// tally meanwhile, or a new day began): the ledger's calls and this replica's not yet
    /// billed. Whether it was taken.
    fn apply(&mut self, read: Tally, (tally, recent): (Tally, u64)) -> bool {
        let taken = self.tally == read;
        if taken {
            self.tally = tally;
            self.used = tally.counted + recent + self.pending;
        }
        taken
    }
}

/// An admitted request: settle it with [`Admission::billed`] once billed, else dropping
/// it gives its places in the daily quota back.
#[derive(Debug)]
pub struct Admission<'a> {
    limits: &'a RateLimits,
    /// The account, the day and the calls taken from its quota.
    reserved: Option<(i64, i64, u64)>,
}

impl Admission<'_> {
    /// The call was billed: its place in the quota stays taken.
    pub fn billed(mut self) {
        self.settle(false);
    }

    /// No longer pending; its places given `back` to the quota or not.
    fn settle(&mut self, back: bool) {
        if let Some((account_id, day, calls)) = self.reserved.take() {
            let mut accounts = self.limits.accounts();
            if let Some(account) = accounts.get_mut(&account_id).filter(|a| a.day == day) {
                account.pending = account.pending.saturating_sub(calls);
                if back {
                    account.used = account.used.saturating_sub(calls);
                }
            }
        }
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.settle(true);
    }
}

/// A per-address limiter and the addresses it currently refuses, until when (on the
/// clock's [`Clock::monotonic`] time).
#[derive(Debug)]
struct AddressPace {
    clock: PaceClock,
    limiter: AddressRate,
    blocked: Mutex<HashMap<IpAddr, Duration>>,
}

impl AddressPace {
    fn new(per_minute: u32, clock: &Arc<dyn Clock>) -> AddressPace {
        let quota = Quota::per_minute(NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN));
        let clock = PaceClock(Arc::clone(clock));
        AddressPace {
            limiter: RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock.clone()),
            clock,
            blocked: Mutex::new(HashMap::new()),
        }
    }

    fn blocked(&self) -> MutexGuard<'_, HashMap<IpAddr, Duration>> {
        // Deadlines only: a map a panic left half-written is still usable.
        self.blocked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seconds `address` must still wait, without counting an attempt.
    fn waiting(&self, address: IpAddr) -> Option<u64> {
        let address = paced_as(address);
        let now = self.clock.0.monotonic();
        let mut blocked = self.blocked();
        match blocked.get(&address) {
            Some(until) if *until > now => Some(seconds_until(*until - now)),
            Some(_) => {
                blocked.remove(&address);
                None
            }
            None => None,
        }
    }

    /// Counts an attempt by `address`: the seconds to wait if it is one too many.
    fn attempt(&self, address: IpAddr) -> Option<u64> {
        let address = paced_as(address);
        let not_until = self.limiter.check_key(&address).err()?;
        let now = self.clock.0.monotonic();
        let wait = not_until.wait_time_from(now);
        let mut blocked = self.blocked();
        if blocked.len() >= MAX_BLOCKED {
            blocked.retain(|_, until| *until > now);
        }
        if blocked.len() < MAX_BLOCKED {
            blocked.insert(address, now + wait);
        }
        Some(seconds_until(wait))
    }

    fn forget_idle(&self) {
        self.limiter.retain_recent();
        let now = self.clock.0.monotonic();
        self.blocked().retain(|_, until| *until > now);
    }
}

/// The address `address` is paced as: an IPv6 client's whole /64 (one host is given a
/// /64, and would otherwise have 2^64 addresses to spread its attempts over), an IPv4
/// one (mapped into IPv6 or not) as itself.
fn paced_as(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
        v4 => v4,
    }
}

/// Whole seconds to wait, at least 1 (what `Retry-After` says).
fn seconds_until(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// The service's limits.
#[derive(Debug)]
pub struct RateLimits {
    db: Database,
    clock: Arc<dyn Clock>,
    accounts: Mutex<HashMap<i64, Account>>,
    failed_auth: AddressPace,
    sign_in: AddressPace,
    /// Session cookies naming no session: their own pace (at the failed-authentication
    /// rate), so bad API keys from an address never stop its researchers' sessions.
    unknown_sessions: AddressPace,
    /// Reads of an account's count from the ledger.
    tally_reads: AtomicU64,
    /// [`settled_after`] the ledger's database, in ms.
    settled_ms: i64,
}

impl RateLimits {
    /// Limits over `db`'s ledger (for today's calls) with the addresses' paces.
    pub fn new(db: Database, clock: Arc<dyn Clock>, addresses: AddressLimits) -> RateLimits {
        RateLimits {
            settled_ms: settled_after(&db),
            db,
            failed_auth: AddressPace::new(addresses.failed_auth_per_minute, &clock),
            sign_in: AddressPace::new(addresses.sign_in_per_minute, &clock),
            unknown_sessions: AddressPace::new(addresses.failed_auth_per_minute, &clock),
            clock,
            accounts: Mutex::new(HashMap::new()),
            tally_reads: AtomicU64::new(0),
        }
    }

    /// How many times an account's count was read from the ledger.
    pub fn tally_reads(&self) -> u64 {
        self.tally_reads.load(Ordering::Relaxed)
    }

    fn accounts(&self) -> MutexGuard<'_, HashMap<i64, Account>> {
        // Counters only: a map a panic left half-written is still usable.
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a call by `principal` within its account's rate and daily quota.
    pub async fn admit(&self, principal: &Principal) -> Result<Admission<'_>, ServiceError> {
        self.admit_calls(principal, 1).await
    }

    /// Admits one request that bills `calls` calls (an app table): one request against
    /// the account's rate, `calls` against its daily quota, which must hold them all.
    pub async fn admit_calls(
        &self,
        principal: &Principal,
        calls: u64,
    ) -> Result<Admission<'_>, ServiceError> {
        let limits = principal.limits;
        let account_id = principal.account_id;
        if limits == AccountLimits::default() {
            return Ok(Admission {
                limits: self,
                reserved: None,
            });
        }
        let now = self.clock.now_ms();
        let today = now.div_euclid(DAY_MS);
        // The rate first: a caller past it is refused without a query.
        let (tally, admitted, read) = {
            let mut accounts = self.accounts();
            let account = on_day(&mut accounts, account_id, today);
            account.pace(limits.per_second, &self.clock)?;
            (account.tally, account.last_admitted, account.last_read)
        };
        // Today's count from the ledger (every replica's bills) when this replica's is
        // not kept in step: the day's first call here, or the first after a quiet minute
        // (read before deciding, not under the lock: it's a query). An account refused
        // all along is read again only a minute after its last read here.
        let stale = now.saturating_sub(admitted) > SHARED_WHILE_ACTIVE_MS
            && now.saturating_sub(read) > SHARED_WHILE_ACTIVE_MS;
        let fresh = match limits.daily_quota {
            Some(_) if stale => Some(self.read_tally(account_id, tally, now).await?),
            _ => None,
        };
        let mut accounts = self.accounts();
        let account = on_day(&mut accounts, account_id, today);
        let day = account.day;
        // Only a read taken is this account's last: one begun on a day now over leaves
        // the new day's count still to read.
        if fresh.is_some_and(|fresh| account.apply(tally, fresh)) {
            account.last_read = now;
        }
        account.has_quota = limits.daily_quota.is_some();
        let Some(quota) = limits.daily_quota else {
            return Ok(Admission {
                limits: self,
                reserved: None,
            });
        };
        if calls > quota && calls > 1 {
            return Err(ServiceError::OverQuota { calls, quota });
        }
        if account.used.saturating_add(calls) > quota {
            // Calls admitted and not yet settled may still be given back (an unbilled
            // failure): a refusal that rests on them is worth a retry in a second.
            let settled = account.used.saturating_sub(account.pending);
            let wait = if settled.saturating_add(calls) <= quota {
                Duration::from_secs(1)
            } else {
                let tomorrow_ms = (day + 1) * DAY_MS - now;
                Duration::from_millis(u64::try_from(tomorrow_ms).unwrap_or(0))
            };
            return Err(ApiError::OverDailyQuota {
                retry_after_s: seconds_until(wait),
            }
            .into());
        }
        account.used += calls;
        account.pending += calls;
        account.last_admitted = now;
        Ok(Admission {
            limits: self,
            reserved: Some((account_id, day, calls)),
        })
    }

    /// Takes a request that bills nothing (an answer given again for its idempotency
    /// key) from `principal`'s account rate: such a request is answered, so a client
    /// retrying one key in a loop is held to the rate, but its daily quota is not spent.
    pub fn pace(&self, principal: &Principal) -> Result<(), ServiceError> {
        let Some(rate) = principal.limits.per_second else {
            return Ok(());
        };
        let day = self.clock.now_ms().div_euclid(DAY_MS);
        let mut accounts = self.accounts();
        let account = on_day(&mut accounts, principal.account_id, day);
        Ok(account.pace(Some(rate), &self.clock)?)
    }

    /// Brings the daily count of every account with a quota that called lately in step
    /// with the ledger, which holds every replica's bills: run every second, so replicas
    /// together go past a quota by at most about a second of the others' calls. Reads
    /// only the last minutes of each account's bills (older ones are counted once). A
    /// failed read is the first error, after every other account is read.
    pub async fn share_quotas(&self) -> Result<(), ServiceError> {
        let now = self.clock.now_ms();
        let day = now.div_euclid(DAY_MS);
        let active: Vec<(i64, Tally)> = self
            .accounts()
            .iter()
            .filter(|(_, a)| a.has_quota && a.day == day)
            .filter(|(_, a)| now.saturating_sub(a.last_admitted) <= SHARED_WHILE_ACTIVE_MS)
            .map(|(id, a)| (*id, a.tally))
            .collect();
        // One account's failed read leaves the others' counts to be brought in step.
        let mut failed = None;
        for (account_id, tally) in active {
            match self.read_tally(account_id, tally, now).await {
                Ok(fresh) => {
                    if let Some(account) = self
                        .accounts()
                        .get_mut(&account_id)
                        .filter(|a| a.day == day)
                    {
                        account.apply(tally, fresh);
                    }
                }
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// `tally` moved up to the bills now final, and the calls billed since.
    async fn read_tally(
        &self,
        account_id: i64,
        mut tally: Tally,
        now: i64,
    ) -> Result<(Tally, u64), ServiceError> {
        self.tally_reads.fetch_add(1, Ordering::Relaxed);
        let settled = now - self.settled_ms;
        if settled - tally.before >= self.settled_ms {
            tally.counted +=
                usage::calls_between(&self.db, account_id, tally.before, settled).await?;
            tally.before = settled;
        }
        let recent = usage::calls_since(&self.db, account_id, tally.before).await?;
        Ok((tally, recent))
    }

    /// Counts a failed authentication by `address`: the seconds to wait if one too many.
    pub fn auth_failed(&self, address: Option<IpAddr>) -> Option<u64> {
        self.failed_auth.attempt(address?)
    }

    /// Seconds `address` must still wait for its failed authentications, without
    /// counting one (to refuse before costly checks).
    pub fn auth_waiting(&self, address: Option<IpAddr>) -> Option<u64> {
        self.failed_auth.waiting(address?)
    }

    /// Counts a session cookie from `address` that names no session: the seconds to wait
    /// if it is one too many.
    pub fn unknown_session(&self, address: Option<IpAddr>) -> Option<u64> {
        self.unknown_sessions.attempt(address?)
    }

    /// Seconds `address` must still wait for its unknown session cookies, without
    /// counting one.
    pub fn unknown_sessions_waiting(&self, address: Option<IpAddr>) -> Option<u64> {
        self.unknown_sessions.waiting(address?)
    }

    /// Counts a sign-in attempt by `address`: the seconds to wait if one too many.
    pub fn sign_in_attempt(&self, address: Option<IpAddr>) -> Option<u64> {
        match address {
            Some(address) => self
                .sign_in
                .waiting(address)
                .or_else(|| self.sign_in.attempt(address)),
            None => None,
        }
    }

    /// Drops the state of addresses and limits not seen lately (run now and then).
    pub fn forget_idle(&self) {
        self.failed_auth.forget_idle();
        self.sign_in.forget_idle();
        self.unknown_sessions.forget_idle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// A day's state is begun anew on a later day, its rate kept; a call that read the
    /// clock just before midnight leaves the day another call began as it is.
    #[test]
    fn an_accounts_day_only_moves_on() {
        let clock: Arc<dyn Clock> = ManualClock::at(0);
        let mut accounts = HashMap::new();
        let account = on_day(&mut accounts, 7, 5);
        account.used = 3;
        account.pending = 1;
        account.last_admitted = 10;
        account.pace(NonZeroU32::new(1), &clock).unwrap();
        let late = on_day(&mut accounts, 7, 4);
        assert_eq!((late.day, late.used, late.pending), (5, 3, 1));
        let next = on_day(&mut accounts, 7, 6);
        assert_eq!((next.day, next.used, next.pending), (6, 0, 0));
        assert_eq!((next.last_admitted, next.last_read), (i64::MIN, i64::MIN));
        assert_eq!(next.tally, Tally::day(6));
        // The same bucket: its one request a second was spent on day 5.
        assert!(next.pace(NonZeroU32::new(1), &clock).is_err());
    }

    /// Bills are final once none can still commit, with the clocks' skew on top: 62 s and
    /// 10 s at the default statement timeout, a minute at least, a day at most.
    #[tokio::test]
    async fn bills_are_final_once_none_can_still_commit_on_any_replicas_clock() {
        let dir = tempfile::tempdir().unwrap();
        let url = crate::store::default_url(dir.path());
        let settled = |seconds| {
            let url = url.clone();
            async move {
                let options = crate::store::DatabaseOptions {
                    statement_timeout: Duration::from_secs(seconds),
                    ..Default::default()
                };
                let db = Database::connect_with(&url, options).await.unwrap();
                let settled = settled_after(&db);
                db.close().await;
                settled
            }
        };
        assert_eq!(settled(10).await, 72_000);
        assert_eq!(settled(1).await, 60_000);
        assert_eq!(settled(30).await, 2 * 91_000 + 10_000);
        assert_eq!(settled(86_400).await, DAY_MS);
    }

    #[test]
    fn retry_after_is_whole_seconds_and_at_least_one() {
        assert_eq!(seconds_until(Duration::ZERO), 1);
        assert_eq!(seconds_until(Duration::from_millis(1)), 1);
        assert_eq!(seconds_until(Duration::from_millis(1000)), 1);
        assert_eq!(seconds_until(Duration::from_millis(1001)), 2);
    }

    #[test]
    fn an_ipv6_network_is_paced_as_one_and_a_mapped_ipv4_as_itself() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(paced_as(a), paced_as(b));
        assert_ne!(paced_as(a), paced_as(other));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(paced_as(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
        // Attempts from anywhere in the /64 count together.
        let clock = ManualClock::at(1_700_000_000_000);
        let pace = AddressPace::new(2, &(Arc::clone(&clock) as Arc<dyn Clock>));
        assert_eq!(pace.attempt(a), None);
        assert_eq!(pace.attempt(b), None);
        assert!(pace.attempt("2001:db8:1:2::77".parse().unwrap()).is_some());
        assert!(pace.waiting(a).is_some());
        assert_eq!(pace.attempt(other), None);
    }

    #[test]
    fn an_address_over_its_pace_waits_its_turn_and_others_do_not() {
        let clock = ManualClock::at(1_700_000_000_000);
        let pace = AddressPace::new(3, &(Arc::clone(&clock) as Arc<dyn Clock>));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert_eq!(pace.attempt(a), None);
        }
        // Three a minute: the fourth waits 20 s for the first of them to wear off.
        assert_eq!(pace.attempt(a), Some(20));
        assert_eq!(pace.waiting(a), Some(20));
        assert_eq!(pace.waiting(b), None);
        assert_eq!(pace.attempt(b), None);
        clock.advance(19_001);
        assert_eq!(pace.waiting(a), Some(1));
        clock.advance(999);
        assert_eq!(pace.waiting(a), None);
        assert_eq!(pace.attempt(a), None);
        assert_eq!(pace.attempt(a), Some(20));
        // Forgetting idle addresses keeps one still blocked, and drops it once it is not.
        pace.forget_idle();
        assert_eq!(pace.waiting(a), Some(20));
        clock.advance(120_000);
        pace.forget_idle();
        assert!(pace.blocked().is_empty());
        assert!(pace.limiter.is_empty());
    }
}
