//! The ledger alone: `C` tasks bill in a loop for a few seconds each, on a temporary
//! SQLite file (and on PostgreSQL when `CROSSTAB_BENCH_POSTGRES_URL` names one). Prints
//! bills per second and the process's CPU time per bill, which is what a billed request
//! pays on top of its answer. No HTTP, no wrk: the figure moves only with the ledger.
//!
//! `cargo bench -p crosstab-server --bench ledger`; `SECONDS=5 CONCURRENCY=16,64` to change.
#![allow(clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crosstab_server::grants::GrantSpec;
use crosstab_server::keys::KeyEnv;
use crosstab_server::store::accounts;
use crosstab_server::store::ledger::{Bill, Caller, Ledger};
use crosstab_server::store::{self as db, Database};

fn main() {
    let seconds: u64 = env_or("SECONDS", "3")
        .parse()
        .expect("SECONDS: a whole number");
    let concurrency: Vec<usize> = env_or("CONCURRENCY", "1,16,64")
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .expect("CONCURRENCY: whole numbers, comma-separated")
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut stores = vec![("sqlite", db::default_url(dir.path()))];
        if let Ok(url) = std::env::var("CROSSTAB_BENCH_POSTGRES_URL") {
            stores.push(("postgres", url));
        }
        for (name, url) in stores {
            let db = Database::connect(&url).await.expect("database");
            let account = format!("ledger-bench-{}", std::process::id());
            let account_id = account_of(&db, &account).await;
            for &tasks in &concurrency {
                let (bills, cpu, machine) =
                    run(&db, account_id, tasks, Duration::from_secs(seconds)).await;
                let per_bill = |time: Duration| time.as_secs_f64() * 1e6 / bills as f64;
                println!(
                    "ledger {name:<8} {tasks:>3} tasks: {:>8.0} bills/s, {:>6.2} µs CPU/bill in this process, {:>6.2} on the machine",
                    bills as f64 / seconds as f64,
                    per_bill(cpu),
                    per_bill(machine),
                );
            }
            db.close().await;
        }
    });
}

/// Bills from `tasks` tasks for `length`; how many bills, the process's CPU time and the
/// machine's (which counts PostgreSQL's backends too).
async fn run(
    db: &Database,
    account_id: i64,
    tasks: usize,
    length: Duration,
) -> (u64, Duration, Duration) {
    let (ledger, writer) = Ledger::start(db.clone(), Arc::new(crosstab_server::clock::SystemClock));
    let billed = Arc::new(AtomicU64::new(0));
    let cpu_before = process_cpu();
    let machine_before = machine_cpu();
    let end = Instant::now() + length;
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let ledger = ledger.clone();
            let billed = Arc::clone(&billed);
            tokio::spawn(async move {
                let key: Arc<str> = format!("k{task:015x}").into();
                let mut n = 0u64;
                while Instant::now() < end {
                    n += 1;
                    ledger
                        .bill(bill(account_id, &key, n))
                        .await
                        .expect("billed");
                    billed.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("task");
    }
    let cpu = process_cpu().saturating_sub(cpu_before);
    let machine = machine_cpu().saturating_sub(machine_before);
    drop(ledger);
    writer.finish().await;
    (billed.load(Ordering::Relaxed), cpu, machine)
}

fn bill(account_id: i64, key: &Arc<str>, n: u64) -> Bill {
    Bill {
        account_id,
        caller: Caller::Key(Arc::clone(key)),
        survey: "DEMO".into(),
        group: None,
        base: "ADULTS".into(),
        targets: 2,
        request_id: format!("{n:032x}").into(),
    }
}

async fn account_of(db: &Database, name: &str) -> i64 {
    let grant: GrantSpec = "DEMO".parse().expect("grant");
    accounts::create_key(db, name, &[grant], KeyEnv::Live, None)
        .await
        .expect("account");
    accounts::account_id(db, name)
        .await
        .expect("read")
        .expect("account")
}

/// User plus system CPU time of this process so far (from `/proc/self/stat`, in ticks of
/// 10 ms: a run of seconds keeps the error under a percent).
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("stat format")
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

/// Busy CPU time of the whole machine so far (`/proc/stat`: all but idle and iowait).
fn machine_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat.lines().next().expect("cpu line");
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().expect("ticks"))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Duration::from_millis(busy * 10)
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}
