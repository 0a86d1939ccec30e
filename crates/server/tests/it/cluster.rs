//! Three replicas behind nginx (deploy/nginx.conf) on one PostgreSQL, under 64 clients
//! that send an Idempotency-Key with each logical query and retry connection errors and
//! 5xx: one replica is killed (`kill -9`) and restarted, the survey is re-imported, a
//! key is revoked and PostgreSQL is restarted, all during the load. Every 200 a client
//! saw is billed exactly once and nothing else is; every answer is wholly one survey
//! version; each replica serves the new version within 2 s and refuses the revoked key
//! within 1 s. Runs when `CROSSTAB_TEST_CLUSTER=1` (scripts/test sets it; it needs
//! Debian's postgresql and nginx, which scripts/setup installs).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

const CLIENTS: usize = 64;
/// The 30 s of load; the faults all land in its first half.
const LOAD: Duration = Duration::from_secs(30);

fn with_db<'a>(args: &[&'a str], url: &'a str) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--database", url]);
    all
}

/// The survey SMALL with its weights multiplied by `factor` (a new version).
fn small_version(dir: &Path, factor: u32) -> std::path::PathBuf {
    let toml = write_small_survey(dir, "SMALL");
    let csv = std::fs::read_to_string(dir.join("respondents.csv")).unwrap();
    let scaled: Vec<String> = csv
        .lines()
        .enumerate()
        .map(|(n, line)| {
            if n == 0 {
                return line.to_owned();
            }
            let mut cells: Vec<String> = line.split(',').map(str::to_owned).collect();
            cells[1] = (cells[1].parse::<u32>().unwrap() * factor).to_string();
            cells.join(",")
        })
        .collect();
    std::fs::write(dir.join("respondents.csv"), scaled.join("\n") + "\n").unwrap();
    toml
}

fn body() -> Value {
    json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]})
}

/// What `crosstab query` answers from the survey installed in `data`.
fn expected(data: &Path) -> Value {
    let text = cli(
        data,
        &[
            "query", "--survey", "SMALL", "--base", "ALL", "--target", "WOMEN",
        ],
    );
    serde_json::from_str(text.trim()).unwrap()
}

async fn post(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    idem: Option<&str>,
) -> Result<(u16, Value), reqwest::Error> {
    let mut request = client
        .post(format!("{base}/v1/crosstab"))
        .header("Service-Engine-Authorizer", key)
        .json(&body());
    if let Some(idem) = idem {
        request = request.header("Idempotency-Key", idem);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let value = response.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_behind_nginx_bill_every_200_once_through_kills_reimports_and_a_database_restart()
{
    if std::env::var("CROSSTAB_TEST_CLUSTER").as_deref() != Ok("1") {
        eprintln!("CROSSTAB_TEST_CLUSTER not set: cluster test skipped");
        return;
    }
    let (Some(pg_bin), Some(nginx_bin)) = (Postgres::binaries(), Nginx::binary()) else {
        panic!("CROSSTAB_TEST_CLUSTER=1 needs Debian's postgresql and nginx (scripts/setup)");
    };
    let _heavy = HEAVY.lock().await;
    let temp = tempfile::tempdir().unwrap();
    let pg = Postgres::start(pg_bin, &temp.path().join("pg"));
    let url = pg.url();

    // Version 1, published; three accounts: the load's, a prober's, and one to revoke.
    let v1 = temp.path().join("v1");
    let publisher = temp.path().join("publisher");
    let toml = small_version(&v1, 1);
    // A database not migrated yet is refused before anything is installed, so a survey
    // is never installed here but missing from the cluster.
    let refused = cli_output(
        &publisher,
        &with_db(&["survey", "import", toml.to_str().unwrap()], &url),
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("crosstab db migrate"),
        "{said}"
    );
    // Nothing installed (`survey list` finds not even a data dir made).
    let listed = cli_output(&publisher, &["survey", "list"]);
    assert!(!String::from_utf8_lossy(&listed.stdout).contains("SMALL"));
    migrate(&publisher, &with_db(&[], &url));
    cli(
        &publisher,
        &with_db(&["survey", "import", toml.to_str().unwrap()], &url),
    );
    let v1_answer = expected(&publisher);
    let load_key = create_key(&publisher, "load", &with_db(&["--grant", "SMALL"], &url));
    let probe_key = create_key(&publisher, "probe", &with_db(&["--grant", "SMALL"], &url));
    let doomed_key = create_key(&publisher, "doomed", &with_db(&["--grant", "SMALL"], &url));

    let ports: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let start = |n: usize| {
        let data = temp.path().join(format!("replica{n}"));
        Server::start_at(
            &data,
            &ports[n],
            // As deploy/ has them: nginx (on loopback) names the client.
            &[
                "--database",
                &url,
                "--query-deadline",
                "1",
                "--trust-proxy-header",
                "X-Forwarded-For",
                "--trusted-proxy",
                "127.0.0.1",
            ],
        )
    };
    let mut replicas: Vec<Option<Server>> = (0..3).map(|n| Some(start(n))).collect();
    let front = format!("127.0.0.1:{}", free_port());
    let _nginx = Nginx::start(&nginx_bin, &temp.path().join("nginx"), &front, &ports);
    let front = format!("http://{front}");
    app_through_nginx(&publisher, &url, &front).await;

    // The load: logical queries, each with its own key, retried until answered.
    let answers: Arc<Mutex<HashMap<String, (u16, Value)>>> = Arc::default();
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (answers, front, key) = (Arc::clone(&answers), front.clone(), load_key.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(5))
                    .build()
                    .unwrap();
                while started.elapsed() < LOAD {
                    let idem = uuid::Uuid::new_v4().to_string();
                    let mut last = (0, Value::Null);
                    for _ in 0..200 {
                        match post(&client, &front, &key, Some(&idem)).await {
                            Ok((status, value)) if status < 500 => {
                                last = (status, value);
                                break;
                            }
                            Ok(other) => last = other,
                            Err(_) => {}
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    answers.lock().unwrap().insert(idem, last);
                }
            })
        })
        .collect();

    let probe = reqwest::Client::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // kill -9 one replica mid-run, and bring it back on its port.
    replicas[1].take().unwrap().kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    replicas[1] = Some(start(1));

    // Re-import: every replica serves version 2 within 2 s.
    let v2 = temp.path().join("v2");
    let toml = small_version(&v2, 3);
    cli(
        &publisher,
        &with_db(&["survey", "import", toml.to_str().unwrap()], &url),
    );
    let v2_answer = expected(&publisher);
    assert_ne!(v1_answer, v2_answer);
    let reimported = Instant::now();
    for port in &ports {
        let base = format!("http://{port}");
        loop {
            let (status, value) = post(&probe, &base, &probe_key, None).await.unwrap();
            assert_eq!(status, 200, "{value}");
            if value == v2_answer {
                break;
            }
            assert_eq!(value, v1_answer, "a mix of versions");
            assert!(
                reimported.elapsed() < Duration::from_secs(2),
                "{port} still on version 1"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // A key revoked through one connection is refused by every replica within 1 s.
    for port in &ports {
        let (status, _) = post(&probe, &format!("http://{port}"), &doomed_key, None)
            .await
            .unwrap();
        assert_eq!(status, 200);
    }
    let id = key_id(&doomed_key).to_owned();
    cli(&publisher, &with_db(&["key", "revoke", &id], &url));
    let revoked = Instant::now();
    for port in &ports {
        while post(&probe, &format!("http://{port}"), &doomed_key, None)
            .await
            .unwrap()
            .0
            != 401
        {
            assert!(
                revoked.elapsed() < Duration::from_secs(1),
                "{port} still takes the key"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // PostgreSQL restarted under the load: 5xx meanwhile, then service by itself.
    assert!(
        started.elapsed() < LOAD / 2,
        "the faults must land under the load"
    );
    pg.stop();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (status, _) = post(&probe, &front, &probe_key, Some("during-outage"))
        .await
        .unwrap();
    assert!(status >= 500, "a {status} while the database is down");
    pg.start_again();

    for client in clients {
        client.await.unwrap();
    }
    let resumed = Instant::now();
    loop {
        let (status, _) = post(&probe, &front, &probe_key, None).await.unwrap();
        if status == 200 {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(10),
            "no service after the restart: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for replica in replicas.into_iter().flatten() {
        replica.stop();
    }

    let answers = std::mem::take(&mut *answers.lock().unwrap());
    let oks: Vec<&Value> = answers
        .values()
        .filter(|(s, _)| *s == 200)
        .map(|(_, v)| v)
        .collect();
    assert!(oks.len() > 100, "only {} answered", oks.len());
    for answer in &oks {
        assert!(**answer == v1_answer || **answer == v2_answer, "{answer}");
    }
    let unanswered = answers.values().filter(|(s, _)| *s != 200).count();
    eprintln!(
        "cluster: {} logical queries answered 200, {unanswered} not",
        oks.len()
    );
    let db = crosstab_server::store::Database::connect(&url)
        .await
        .unwrap();
    let billed: i64 = crosstab_server::store::usage::report(&db, Some("load"), 0)
        .await
        .unwrap()
        .iter()
        .map(|row| row.calls)
        .sum();
    assert_eq!(
        billed,
        i64::try_from(oks.len()).unwrap(),
        "bills = 200s, each once"
    );
    // And query by query: the keys whose answer was kept with a bill (one bill each, in
    // the same transaction) are exactly the keys clients saw a 200 for.
    let mut kept: Vec<String> = sqlx::query_scalar(
        "SELECT k.key FROM idempotency_keys k JOIN accounts a ON a.id = k.account_id \
         WHERE a.name = 'load' AND k.status = 200",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    let mut seen: Vec<String> = answers
        .iter()
        .filter(|(_, (status, _))| *status == 200)
        .map(|(key, _)| key.clone())
        .collect();
    kept.sort();
    seen.sort();
    assert!(
        kept == seen,
        "keys kept with a bill differ from the keys answered 200"
    );
}

/// A researcher signs in to the app through nginx on its own port (the browser's Origin
/// has the port, so nginx must pass the Host with it) and runs a table whose body is over
/// /v1's 64 KiB (nginx must let a table's larger body through), and sends the token
/// endpoint a form as large as a SAML assertion may make it.
async fn app_through_nginx(publisher: &Path, url: &str, front: &str) {
    create_key(publisher, "app", &with_db(&["--grant", "SMALL"], url));
    create_user(
        publisher,
        "ann",
        "app",
        "ann-password-1",
        &["--database", url],
    );
    let client = reqwest::Client::new();
    let login = client
        .post(format!("{front}/app/login"))
        .header("origin", front)
        .json(&serde_json::json!({"username": "ann", "password": "ann-password-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200, "{}", login.text().await.unwrap());
    let cookie = session_cookie(login.headers());
    let label = "é".repeat(crosstab_contract::limits::MAX_TABLE_LABEL_CHARS);
    let rows: Vec<Value> = (0..150)
        .map(|_| serde_json::json!({"expression": "GENDER = 1", "label": label}))
        .collect();
    let table = serde_json::json!({"survey": "SMALL", "populationBase": "ALL",
        "rows": rows, "columns": [{"expression": "AGE >= 40"}]});
    assert!(table.to_string().len() > crosstab_contract::limits::MAX_BODY_BYTES);
    let answered = client
        .post(format!("{front}/app/api/table"))
        .header("origin", front)
        .header("cookie", &cookie)
        .json(&table)
        .send()
        .await
        .unwrap();
    let status = answered.status();
    let text = answered.text().await.unwrap();
    assert_eq!(status, 200, "{:.300}", text);
    // The token endpoint reads up to 256 KiB (a SAML assertion is large): nginx passes
    // such a form on, and the server, not nginx, answers it.
    let assertion = "a".repeat(crosstab_contract::oauth::MAX_TOKEN_REQUEST_BYTES - 1024);
    let exchanged = client
        .post(format!("{front}/v1/oauth/token"))
        .form(&[
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:saml2-bearer",
            ),
            ("assertion", assertion.as_str()),
        ])
        .send()
        .await
        .unwrap();
    let status = exchanged.status();
    let text = exchanged.text().await.unwrap();
    assert_eq!(status, 400, "{:.300}", text);
    assert!(
        text.contains("\"error\""),
        "not the server's answer: {:.300}",
        text
    );
}
