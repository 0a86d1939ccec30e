//! The whole process: `crosstab survey import`, `key create/revoke/list`, `serve`,
//! every status over real HTTP, SIGTERM, and the ledger on disk afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use crate::support::*;
use reqwest::header::CONTENT_TYPE;
use reqwest::StatusCode;
use serde_json::{json, Value};

const ORIGIN: &str = "http://app.test";

struct Client {
    http: reqwest::Client,
    url: String,
    oks: i64,
}

impl Client {
    async fn send(
        &mut self,
        key: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .post(&self.url)
            .header(CONTENT_TYPE, content_type)
            .header("origin", ORIGIN)
            .body(body);
        if let Some(key) = key {
            request = request.header("Service-Engine-Authorizer", key);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body: Value = response.json().await.unwrap();
        assert!(headers.contains_key("x-request-id"));
        assert_eq!(headers["access-control-allow-origin"], ORIGIN);
        if status == StatusCode::OK {
            self.oks += 1;
        } else {
            assert_eq!(body["ResultCode"], status.as_u16());
            assert_eq!(body["error"]["message"], body["ResultDescription"]);
        }
        (status, headers, body)
    }

    async fn query(&mut self, key: Option<&str>, body: Value) -> (StatusCode, Value) {
        let (status, _, body) = self
            .send(key, "application/json", body.to_string().into_bytes())
            .await;
        (status, body)
    }
}

fn req(survey: &str, group: Option<&str>, base: &str, targets: &[&str]) -> Value {
    let mut body =
        json!({"SurveyCode": survey, "PopulationBaseCode": base, "TargetCodes": targets});
    if let Some(group) = group {
        body["AuthorizationGroup"] = group.into();
    }
    body
}

fn result(wgt: f64, resps: u64, stbl: u8) -> Value {
    json!({"WgtAud": wgt, "Resps": resps, "Stbl": stbl})
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// `survey init -o FILE` writes the definition there, naming the SPSS file relative to
/// it, and never over a file; the definition imports as written.
#[test]
fn survey_init_writes_a_definition_beside_its_file() {
    let temp = tempfile::tempdir().unwrap();
    let sav = temp.path().join("spss/labelled.sav");
    std::fs::create_dir_all(sav.parent().unwrap()).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../engine/tests/fixtures/sav/labelled.sav"
        ),
        &sav,
    )
    .unwrap();
    let toml = temp.path().join("defs/survey.toml");
    std::fs::create_dir_all(toml.parent().unwrap()).unwrap();
    let data = temp.path().join("data");
    let init = [
        "survey",
        "init",
        sav.to_str().unwrap(),
        "--code",
        "FIX",
        "--id",
        "RESPID",
        "--weight",
        "WEIGHT",
        "-o",
        toml.to_str().unwrap(),
    ];
    let run = || std::process::Command::new(BIN).args(init).output().unwrap();
    let first = run();
    assert!(first.status.success(), "{first:?}");
    assert!(first.stdout.is_empty(), "nothing on stdout");
    let written = std::fs::read_to_string(&toml).unwrap();
    assert!(
        written.contains("respondents = \"../spss/labelled.sav\""),
        "{written}"
    );
    let again = run();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists: not overwritten"));
    assert_eq!(
        std::fs::read_to_string(&toml).unwrap(),
        written,
        "left as it was"
    );
    assert!(cli(&data, &["survey", "import", toml.to_str().unwrap()]).contains("FIX"));
}

/// The SQLite database `db migrate` makes is readable by its user alone (it holds key
/// and password hashes); a data dir that can't be one is named, and a command that only
/// reads surveys makes no data dir of a mistyped one.
#[test]
fn a_new_database_is_private_and_a_wrong_data_dir_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    migrate(&data, &[]);
    let mode = std::fs::metadata(data.join("crosstab.db"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let file = temp.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let output = cli_output(&file, &["db", "migrate"]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        said.contains(&format!("data dir {}: ", file.display())),
        "{said}"
    );
    let typo = temp.path().join("typo");
    for args in [
        &["survey", "list"][..],
        &["query", "--survey", "S", "--base", "ALL", "--target", "X"],
    ] {
        let output = cli_output(&typo, args);
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(said.contains("no data dir at"), "{args:?}: {said}");
        assert!(!typo.exists(), "{args:?} made the data dir");
    }
}

/// An account's grants change on their own, without a key: added, shown, taken away (a
/// running server applies each on the next request), and a removal naming a grant the
/// account lacks removes nothing; limits change one at a time, and are shown.
#[tokio::test]
async fn account_grants_and_limits_change_without_a_key() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let small = write_small_survey(&temp.path().join("small"), "SMALL");
    migrate(&data, &[]);
    cli(&data, &["survey", "import", small.to_str().unwrap()]);
    let key = create_key(&data, "east", &["--grant", "SMALL:E"]);
    let server = Server::start(&data, &["--allowed-origin", ORIGIN]);
    let mut c = Client {
        http: reqwest::Client::new(),
        url: server.url("/v1/crosstab"),
        oks: 0,
    };
    let west = req("SMALL", Some("W"), "ALL", &["WOMEN"]);
    let whole = req("SMALL", None, "ALL", &["WOMEN"]);
    assert_eq!(
        c.query(Some(&key), west.clone()).await.0,
        StatusCode::FORBIDDEN
    );
    let account = |args: &[&str]| {
        let mut all = vec!["account"];
        all.extend_from_slice(args);
        cli_output(&data, &all)
    };
    let shown = |output: Output| String::from_utf8(output.stdout).unwrap();
    let granted = account(&["grant", "--account", "east", "--grant", "SMALL:W"]);
    assert!(granted.status.success(), "{granted:?}");
    assert_eq!(c.query(Some(&key), west.clone()).await.0, StatusCode::OK);
    assert!(shown(account(&["show", "--account", "east"])).contains("grants\tSMALL:E,W\n"));

    // Refused whole: W and a group it lacks (W stays), and an account that is not there.
    for (refused, said) in [
        (
            &["revoke", "--account", "east", "--grant", "SMALL:W,N"][..],
            "account 'east' holds no grant SMALL:N: nothing removed",
        ),
        (
            &["revoke", "--account", "nobody", "--grant", "SMALL"],
            "no account named 'nobody'",
        ),
    ] {
        let output = account(refused);
        assert!(!output.status.success(), "{refused:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{refused:?}: {stderr}");
    }
    assert_eq!(c.query(Some(&key), west.clone()).await.0, StatusCode::OK);
    assert!(account(&["grant", "--account", "east", "--grant", "SMALL"])
        .status
        .success());
    assert_eq!(c.query(Some(&key), whole.clone()).await.0, StatusCode::OK);
    let output = account(&["revoke", "--account", "east", "--grant", "SMALL:E"]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("holds all of SMALL"));
    assert_eq!(c.query(Some(&key), whole.clone()).await.0, StatusCode::OK);

    // Taken away whole (its groups with it): the next request is refused.
    assert!(
        account(&["revoke", "--account", "east", "--grant", "SMALL"])
            .status
            .success()
    );
    for body in [whole, west] {
        assert_eq!(c.query(Some(&key), body).await.0, StatusCode::FORBIDDEN);
    }
    assert!(shown(account(&["show", "--account", "east"])).contains("grants\tnone\n"));

    // Limits: each flag changes its own limit; none shows them.
    let limits = |args: &[&str]| {
        let mut all = vec!["limits", "--account", "east"];
        all.extend_from_slice(args);
        let output = account(&all);
        assert!(output.status.success(), "{args:?}: {output:?}");
        shown(account(&["limits", "--account", "east"]))
    };
    assert_eq!(
        limits(&["--daily-quota", "3"]),
        "unlimited requests per second, 3 billed calls per day\n"
    );
    assert_eq!(
        limits(&["--per-second", "2"]),
        "2 requests per second, 3 billed calls per day\n"
    );
    assert_eq!(
        limits(&["--daily-quota", "unlimited"]),
        "2 requests per second, unlimited billed calls per day\n"
    );
    let zero = account(&["limits", "--account", "east", "--per-second", "0"]);
    assert!(String::from_utf8_lossy(&zero.stderr).contains("a rate of 0 would refuse every call"));
    server.stop();
}

#[tokio::test]
async fn whole_process_statuses_envelopes_headers_and_ledger() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let small = write_small_survey(&temp.path().join("small"), "SMALL");
    let other = write_small_survey(&temp.path().join("other"), "OTHER");
    let out = cli(&data, &["survey", "import", small.to_str().unwrap()]);
    assert!(
        out.contains("respondents:  6") && out.contains("weight total: 2100"),
        "{out}"
    );
    cli(&data, &["survey", "import", other.to_str().unwrap()]);
    let list = cli(&data, &["survey", "list"]);
    assert!(list.contains("SMALL") && list.contains("OTHER"), "{list}");
    // Every byte checked against the file's checksum; a damaged file is named, and the
    // command fails.
    let verified = cli(&data, &["survey", "verify"]);
    assert_eq!(verified, "OTHER\tintact\nSMALL\tintact\n");
    let file = data.join("surveys/OTHER.ctxs");
    let intact = std::fs::read(&file).unwrap();
    let mut damaged = intact.clone();
    let last = damaged.len() - 20;
    damaged[last] ^= 0x10;
    std::fs::write(&file, &damaged).unwrap();
    let refused = cli_output(&data, &["survey", "verify"]);
    assert!(!refused.status.success());
    assert_eq!(String::from_utf8_lossy(&refused.stdout), "SMALL\tintact\n");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("OTHER: corrupt compiled survey: its checksum does not match")
            && said.contains("damaged or unreadable surveys: OTHER"),
        "{said}"
    );
    assert_eq!(
        cli(&data, &["survey", "verify", "SMALL"]),
        "SMALL\tintact\n"
    );
    let path = cli_output(&data, &["survey", "verify", "../SMALL"]);
    assert!(!path.status.success());
    assert!(String::from_utf8_lossy(&path.stderr).contains("../SMALL: not a survey code"));
    std::fs::write(&file, &intact).unwrap();

    // An administrative command neither creates a database nor migrates one.
    let refused = cli_output(
        &data,
        &["key", "create", "--account", "acme", "--grant", "SMALL"],
    );
    assert!(!refused.status.success() && refused.stdout.is_empty());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("no database at") && said.contains("crosstab db migrate"),
        "{said}"
    );
    assert!(!data.join("crosstab.db").exists());
    migrate(&data, &[]);

    // A grant of a survey not here, or of a group it lacks, is kept but said (a typo, most
    // often); one of a survey that is here is not.
    let typo = cli_output(
        &data,
        &[
            "key",
            "create",
            "--account",
            "typo",
            "--grant",
            "SMALL:e",
            "--grant",
            "SMAL",
        ],
    );
    let said = String::from_utf8_lossy(&typo.stderr);
    assert!(typo.status.success(), "{said}");
    assert!(
        said.contains("survey 'SMALL' has no group 'e' (its groups: E, W)")
            && said.contains("no survey 'SMAL' is installed"),
        "{said}"
    );
    let fine = cli_output(
        &data,
        &["key", "create", "--account", "typo", "--grant", "SMALL:E"],
    );
    assert!(!String::from_utf8_lossy(&fine.stderr).contains("warning"));

    let whole = create_key(&data, "acme", &["--grant", "SMALL"]);
    let east = create_key(&data, "east", &["--grant", "SMALL:E", "--env", "test"]);
    let other_only = create_key(&data, "other", &["--grant", "OTHER"]);
    // The shortest lifetime (0s is refused: a key born expired is a mistake).
    let expired = create_key(&data, "acme", &["--grant", "SMALL", "--expires-in", "1s"]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let revoked = create_key(&data, "acme", &["--grant", "SMALL"]);
    // Given whole, a key is revoked by its id, and its secret is not echoed.
    let output = cli_output(&data, &["key", "revoke", &revoked]);
    assert!(output.status.success());
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!said.contains(key_secret(&revoked)), "{said}");
    // Its public part names it too; a second revocation changes nothing and says so.
    let public = format!("ctx_live_{}", key_id(&revoked));
    let output = cli_output(&data, &["key", "revoke", &public]);
    assert!(output.status.success());
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        said.contains("was revoked already: nothing changed"),
        "{said}"
    );
    // A key list of an account that does not exist is a mistake, not an empty list.
    let output = cli_output(&data, &["key", "list", "--account", "nosuch"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no account named 'nosuch'"));
    assert!(whole.starts_with("ctx_live_") && east.starts_with("ctx_test_"));
    let keys = cli(&data, &["key", "list"]);
    for key in [&whole, &east, &other_only, &expired, &revoked] {
        assert!(keys.contains(key_id(key)));
        assert!(!keys.contains(key_secret(key)), "key list shows a secret");
    }

    let server = Server::start(&data, &["--allowed-origin", ORIGIN]);
    let http = reqwest::Client::new();
    let mut c = Client {
        http: http.clone(),
        url: server.url("/v1/crosstab"),
        oks: 0,
    };

    // Docs and preflight: unauthenticated, unbilled.
    let docs = http.get(server.url("/v1/docs")).send().await.unwrap();
    assert_eq!(docs.status(), StatusCode::OK);
    assert!(docs.headers().contains_key("x-request-id"));
    let docs: Value = docs.json().await.unwrap();
    assert_eq!(docs["info"]["version"], crosstab_contract::CONTRACT_VERSION);
    let preflight = http
        .request(reqwest::Method::OPTIONS, server.url("/v1/crosstab"))
        .header("origin", ORIGIN)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), StatusCode::OK);
    assert_eq!(preflight.headers()["access-control-allow-origin"], ORIGIN);
    assert_eq!(
        preflight.headers()["access-control-allow-methods"],
        "POST, OPTIONS"
    );
    let allowed_headers = preflight.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        allowed_headers.contains("content-type")
            && allowed_headers.contains("service-engine-authorizer"),
        "{allowed_headers}"
    );
    assert!(preflight.headers()["access-control-max-age"]
        .to_str()
        .unwrap()
        .parse::<u64>()
        .is_ok());
    assert!(preflight.headers()["vary"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase()
        .contains("origin"));
    let denied = http
        .request(reqwest::Method::OPTIONS, server.url("/v1/crosstab"))
        .header("origin", "http://evil.test")
        .send()
        .await
        .unwrap();
    for header in [
        "access-control-allow-origin",
        "access-control-allow-methods",
        "access-control-allow-headers",
    ] {
        assert!(!denied.headers().contains_key(header), "{header}");
    }

    // 200s with hand-computed figures (units of 100).
    let (s, b) = c
        .query(Some(&whole), req("SMALL", None, "ALL", &["WOMEN"]))
        .await;
    assert_eq!(
        (s, &b["Results"]),
        (StatusCode::OK, &json!([result(10.0, 3, 0)]))
    );
    assert_eq!(b["AudienceReportUnits"], 100);
    assert_eq!(b["ResultDescription"], "");
    let (s, b) = c
        .query(
            Some(&whole),
            req("SMALL", Some("_ALL_"), "OVER35", &["WOMEN", "GENDER = 1"]),
        )
        .await;
    assert_eq!(
        (s, &b["Results"]),
        (
            StatusCode::OK,
            &json!([result(8.0, 2, 0), result(10.0, 2, 0)])
        )
    );
    let (s, b) = c
        .query(Some(&east), req("SMALL", Some("E"), "ALL", &["WOMEN"]))
        .await;
    assert_eq!(
        (s, &b["Results"]),
        (StatusCode::OK, &json!([result(5.0, 2, 0)]))
    );
    let (s, h, b) = c
        .send(
            Some(&east),
            "application/json",
            req("SMALL", Some("E"), "OVER35", &["AGE >= 40 AND GENDER = 2"])
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(
        (s, &b["Results"]),
        (StatusCode::OK, &json!([result(3.0, 1, 1)]))
    );
    let east_request_id = h["x-request-id"].to_str().unwrap().to_owned();
    let (s, b) = c
        .query(
            Some(&whole),
            req("SMALL", Some("W"), "ALL", &["NOPE", "WOMEN"]),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["ResultCode"], 1);
    assert_eq!(b["Results"], json!([result(0.0, 0, 1), result(5.0, 1, 1)]));
    assert!(b["ResultDescription"].as_str().unwrap().contains("NOPE"));
    let (s, _) = c
        .query(Some(&other_only), req("OTHER", None, "ALL", &["WOMEN"]))
        .await;
    assert_eq!(s, StatusCode::OK);

    // 401.
    let good = req("SMALL", None, "ALL", &["WOMEN"]);
    for key in [
        None,
        Some("ctx_live_nope"),
        Some(expired.as_str()),
        Some(revoked.as_str()),
    ] {
        let (s, b) = c.query(key, good.clone()).await;
        assert_eq!((s, code(&b)), (StatusCode::UNAUTHORIZED, "unauthorized"));
        assert!(b["error"].get("field").is_none());
    }
    // 415, 413, 400.
    let (s, _, b) = c
        .send(Some(&whole), "text/plain", good.to_string().into_bytes())
        .await;
    assert_eq!(
        (s, code(&b)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    let (s, _, b) = c
        .send(Some(&whole), "application/json", vec![b' '; 70_000])
        .await;
    assert_eq!(
        (s, code(&b)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let (s, _, b) = c
        .send(Some(&whole), "application/json", b"{not json".to_vec())
        .await;
    assert_eq!((s, code(&b)), (StatusCode::BAD_REQUEST, "invalid_request"));
    let (s, b) = c
        .query(Some(&whole), req("SMALL", None, "ALL", &["A", "B", "C"]))
        .await;
    assert_eq!(
        (s, code(&b)),
        (StatusCode::BAD_REQUEST, "invalid_target_codes")
    );
    assert_eq!(b["error"]["field"], "TargetCodes");
    // 403, identical for unknown and not granted.
    let mut forbidden = Vec::new();
    for (key, body) in [
        (&other_only, req("SMALL", None, "ALL", &["WOMEN"])),
        (&whole, req("NOSUCH", None, "ALL", &["WOMEN"])),
        (&east, req("SMALL", Some("W"), "ALL", &["WOMEN"])),
        (&east, req("SMALL", Some("_ALL_"), "ALL", &["WOMEN"])),
        (&east, req("SMALL", None, "ALL", &["WOMEN"])),
        (&whole, req("SMALL", Some("NORTH"), "ALL", &["WOMEN"])),
        (&whole, req("OTHER", None, "ALL", &["WOMEN"])),
    ] {
        let (s, b) = c.query(Some(key), body).await;
        assert_eq!((s, code(&b)), (StatusCode::FORBIDDEN, "forbidden_survey"));
        assert_eq!(b["error"]["field"], "SurveyCode");
        forbidden.push(b);
    }
    assert!(forbidden.windows(2).all(|w| w[0] == w[1]));
    // 400 base.
    let (s, b) = c
        .query(Some(&east), req("SMALL", Some("E"), "KIDS", &["WOMEN"]))
        .await;
    assert_eq!(
        (s, code(&b)),
        (StatusCode::BAD_REQUEST, "invalid_population_base")
    );
    assert_eq!(b["error"]["field"], "PopulationBaseCode");

    // Revocation by the CLI, another process, takes effect on the next request.
    let brief = create_key(&data, "acme", &["--grant", "SMALL"]);
    assert_eq!(c.query(Some(&brief), good.clone()).await.0, StatusCode::OK);
    cli(&data, &["key", "revoke", key_id(&brief)]);
    assert_eq!(
        c.query(Some(&brief), good.clone()).await.0,
        StatusCode::UNAUTHORIZED
    );

    // A re-import is picked up without a restart (the catalog refreshes every second).
    let csv = small.with_file_name("respondents.csv");
    let text = std::fs::read_to_string(&csv)
        .unwrap()
        .replace("r1,100,", "r1,1100,");
    std::fs::write(&csv, text).unwrap();
    cli(&data, &["survey", "import", small.to_str().unwrap()]);
    let mut seen_new = false;
    for _ in 0..50 {
        let (s, b) = c
            .query(Some(&whole), req("SMALL", None, "ALL", &["GENDER = 1"]))
            .await;
        assert_eq!(s, StatusCode::OK);
        let wgt = b["Results"][0]["WgtAud"].as_f64().unwrap();
        assert!(wgt == 11.0 || wgt == 21.0, "half of each? {wgt}");
        if wgt == 21.0 {
            seen_new = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(seen_new, "re-import not picked up");

    // Stop, then every 200 is a bill on disk, and nothing else is.
    server.stop();
    // A bill holds what was billed: the key, the survey, group, base, number of targets
    // and the request id of the 200 it paid for.
    let db = crosstab_server::store::Database::connect(&crosstab_server::store::default_url(&data))
        .await
        .unwrap();
    let row = sqlx::query(
        "SELECT a.name, l.key_id, l.survey, l.grp, l.base, l.targets, l.at \
         FROM ledger l JOIN accounts a ON a.id = l.account_id WHERE l.request_id = $1",
    )
    .bind(&east_request_id)
    .fetch_one(db.pool())
    .await
    .unwrap();
    use sqlx::Row;
    assert_eq!(row.get::<String, _>(0), "east");
    assert_eq!(row.get::<String, _>(1), key_id(&east));
    assert_eq!(row.get::<String, _>(2), "SMALL");
    assert_eq!(row.get::<Option<String>, _>(3).as_deref(), Some("E"));
    assert_eq!(row.get::<String, _>(4), "OVER35");
    assert_eq!(row.get::<i64, _>(5), 1);
    let age_ms = crosstab_server::clock::now_ms() - row.get::<i64, _>(6);
    assert!((0..600_000).contains(&age_ms), "billed {age_ms} ms ago");
    db.close().await;
    let usage: Value = serde_json::from_str(&cli(&data, &["usage", "--format", "json"])).unwrap();
    let calls: i64 = usage
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["calls"].as_i64().unwrap())
        .sum();
    assert_eq!(calls, c.oks, "bills = 200s");
    let east_calls: i64 = usage
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["account"] == "east")
        .map(|r| r["calls"].as_i64().unwrap())
        .sum();
    assert_eq!(east_calls, 2);
    // Test keys' traffic reads apart from live keys'.
    for row in usage.as_array().unwrap() {
        let env = if row["account"] == "east" {
            "test"
        } else {
            "live"
        };
        assert_eq!(row["env"], env, "{row}");
    }
    let csv = cli(
        &data,
        &[
            "usage",
            "--account",
            "other",
            "--format",
            "csv",
            "--since",
            "2000-01-01",
        ],
    );
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(csv
        .lines()
        .nth(1)
        .unwrap()
        .starts_with(&format!("other,{},live,,,,OTHER,1,", key_id(&other_only))));
    assert!(
        csv.starts_with("account,key_id,env,user,idp,subject,survey,calls,first,last\n"),
        "{csv}"
    );
    let table = cli(&data, &["usage"]);
    assert!(
        table.contains(&format!("total billed calls: {}", c.oks)),
        "{table}"
    );
    // A misspelt account is an error, not an empty bill.
    let misspelt = cli_output(&data, &["usage", "--account", "otehr"]);
    assert!(!misspelt.status.success());
    assert!(
        String::from_utf8_lossy(&misspelt.stderr).contains("no account named 'otehr'"),
        "{misspelt:?}"
    );

    // The offline query prints what the API answers for a whole-survey grant.
    let q = cli(
        &data,
        &[
            "query",
            "--survey",
            "SMALL",
            "--base",
            "OVER35",
            "--target",
            "WOMEN",
            "--target",
            "GENDER = 1",
        ],
    );
    let q: Value = serde_json::from_str(q.trim()).unwrap();
    assert_eq!(q["Results"], json!([result(8.0, 2, 0), result(10.0, 2, 0)]));
}

/// The log, written by the server's log thread: the start-up line (address, surveys,
/// allowed origins); one access line per request with its request id and status; every
/// line out by the time the process exits (the writer buffers, and its last line comes
/// just before the exit); more than the 1 MiB after which a log file is flushed to disk;
/// never a key or a body.
#[tokio::test]
async fn access_log_has_every_request_once_and_never_a_key_or_body() {
    const CLIENTS: usize = 16;
    const PER_CLIENT: usize = 400;
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let log = temp.path().join("server.log");
    let server = Server::start_logging_to(&data, &["--allowed-origin", ORIGIN], &log);
    let address = server.addr.to_string();

    let http = reqwest::Client::new();
    let clients = (0..CLIENTS).map(|client| {
        let (http, url, key) = (http.clone(), server.url("/v1/crosstab"), key.clone());
        tokio::spawn(async move {
            let mut seen = Vec::with_capacity(PER_CLIENT);
            for i in 0..PER_CLIENT {
                // Mostly billed calls; every 8th unauthenticated, every 8th invalid.
                let (key, body) = match (client + i) % 8 {
                    0 => (
                        "ctx_live_nope_nope".to_owned(),
                        req("SMALL", None, "ALL", &["WOMEN"]),
                    ),
                    1 => (key.clone(), json!({ "SurveyCode": "SMALL" })),
                    _ => (key.clone(), req("SMALL", None, "ALL", &["WOMEN"])),
                };
                let response = http
                    .post(&url)
                    .header(CONTENT_TYPE, "application/json")
                    .header("Service-Engine-Authorizer", key)
                    .body(body.to_string())
                    .send()
                    .await
                    .unwrap();
                let id = response.headers()["x-request-id"]
                    .to_str()
                    .unwrap()
                    .to_owned();
                seen.push((id, response.status().as_u16()));
            }
            seen
        })
    });
    let mut sent = std::collections::HashMap::new();
    for client in clients.collect::<Vec<_>>() {
        sent.extend(client.await.unwrap());
    }
    assert_eq!(sent.len(), CLIENTS * PER_CLIENT, "request ids are unique");
    // A retry answered again (a 200 billed nothing), and a token whose header carries a
    // line of its own (its refusal reason quotes it): the log says each as it is.
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
    let forged = format!(
        "Bearer {}.{}.c2ln",
        b64("{\"alg\":\"x\\nFORGED LINE \\u001b[31m\",\"kid\":\"k\"}"),
        b64("{}")
    );
    for (authorizer, idempotency) in [
        (key.as_str(), Some("log-retry")),
        (key.as_str(), Some("log-retry")),
        (forged.as_str(), None),
    ] {
        let mut request = http
            .post(server.url("/v1/crosstab"))
            .header(CONTENT_TYPE, "application/json")
            .header("Service-Engine-Authorizer", authorizer)
            .body(req("SMALL", None, "ALL", &["WOMEN"]).to_string());
        if let Some(idempotency) = idempotency {
            request = request.header("Idempotency-Key", idempotency);
        }
        let response = request.send().await.unwrap();
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        sent.insert(id, response.status().as_u16());
    }
    server.stop();

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.len() > 1 << 20, "log of {} bytes", text.len());
    let started = text
        .lines()
        .find(|line| line.contains("crosstab serving /v1"))
        .expect("a start-up line");
    for part in [address.as_str(), "SMALL", ORIGIN] {
        assert!(started.contains(part), "{part} missing from: {started}");
    }
    // The last line, logged just before the process exits, is out too.
    assert!(
        text.trim_end()
            .ends_with("stopped; every bill is committed"),
        "log ends: {}",
        &text[text.len().saturating_sub(300)..]
    );
    let field = |line: &str, name: &str| {
        line.split_whitespace()
            .find_map(|token| token.strip_prefix(name))
            .map(str::to_owned)
    };
    let mut logged = std::collections::HashMap::new();
    let mut billed = 0;
    for line in text
        .lines()
        .filter(|line| line.contains("crosstab::access"))
    {
        let id = field(line, "request_id=").expect(line);
        let status: u16 = field(line, "status=").expect(line).parse().unwrap();
        assert!(logged.insert(id, status).is_none(), "logged twice: {line}");
        // Who asked: the client's address, and the account of a key that was accepted.
        assert_eq!(
            field(line, "client=").as_deref(),
            Some("127.0.0.1"),
            "{line}"
        );
        if status == 200 {
            assert_ne!(field(line, "account=").as_deref(), Some("\"-\""), "{line}");
        }
        billed += field(line, "billed=").expect(line).parse::<u64>().unwrap();
    }
    assert_eq!(logged, sent, "one access line per request, with its status");
    let oks = sent.values().filter(|&&status| status == 200).count();
    let usage: Value = serde_json::from_str(&cli(&data, &["usage", "--format", "json"])).unwrap();
    assert_eq!(
        usage[0]["calls"].as_u64(),
        Some(billed),
        "bills = the access lines' billed"
    );
    assert_eq!(billed, oks as u64 - 1, "the retry's 200 billed nothing");
    // The token's line break stayed inside its refusal's line.
    assert!(text.contains("bearer token refused"), "not logged");
    assert!(
        !text.lines().any(|line| line.starts_with("FORGED")) && !text.contains('\u{1b}'),
        "a client wrote a line of its own"
    );
    let secret = key_secret(&key);
    assert!(!text.contains(secret), "the log shows a key");
    assert!(
        !text.contains("SurveyCode") && !text.contains("WOMEN"),
        "the log shows a body"
    );
}

/// Each line of a `--log-format json` log, read as the JSON object it must be.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect()
}

/// `--log-format json`: every line one JSON object, the access line's fields as values.
#[test]
fn json_logs_are_one_object_a_line() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let log = temp.path().join("server.log");
    let server = Server::start_logging_to(&data, &["--log-format", "json"], &log);
    let client = reqwest::blocking::Client::new();
    for authorizer in [key.as_str(), "ctx_live_nope_nope"] {
        client
            .post(server.url("/v1/crosstab"))
            .header("Service-Engine-Authorizer", authorizer)
            .json(&req("SMALL", None, "ALL", &["WOMEN"]))
            .send()
            .unwrap();
    }
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = json_lines(&text);
    let access: Vec<&Value> = lines
        .iter()
        .filter(|line| line["target"] == "crosstab::access")
        .collect();
    assert_eq!(access.len(), 2, "{text}");
    let fields = &access[0]["fields"];
    assert_eq!(fields["status"], 200, "{fields}");
    assert_eq!(fields["billed"], 1, "{fields}");
    assert_eq!(fields["path"], "/v1/crosstab", "{fields}");
    assert_eq!(fields["client"], "127.0.0.1", "{fields}");
    assert_ne!(fields["account"], "-", "{fields}");
    assert_eq!(access[1]["fields"]["status"], 401);
    assert_eq!(access[1]["fields"]["billed"], 0);
    // A command that fails says so as a JSON line too.
    let nowhere = temp.path().join("nowhere");
    let failed = cli_output(&nowhere, &["--log-format", "json", "key", "list"]);
    assert!(!failed.status.success());
    let said = String::from_utf8_lossy(&failed.stderr);
    let lines = json_lines(&said);
    let last = lines
        .last()
        .unwrap_or_else(|| panic!("nothing said: {said}"));
    assert_eq!(last["level"], "ERROR", "{said}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("no database at"),
        "{said}"
    );
}

/// An outage failing every request writes the 500s' cause at most once a second, each
/// line saying how many went unsaid since the last, while the access log has every one.
#[tokio::test]
async fn an_outage_writes_a_cause_line_a_second_not_one_a_request() {
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let log = temp.path().join("server.log");
    let server = Server::start_logging_to(&data, &["--log-format", "json"], &log);
    // The ledger's table gone: every billed call fails, 500, unbilled.
    let url = crosstab_server::store::default_url(&data);
    let db = crosstab_server::store::Database::connect(&url)
        .await
        .unwrap();
    let rename = |from: &str, to: &str| format!("ALTER TABLE {from} RENAME TO {to}");
    sqlx::query(&rename("ledger", "ledger_away"))
        .execute(db.pool())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let send = || async {
        http.post(server.url("/v1/crosstab"))
            .header("Service-Engine-Authorizer", key.as_str())
            .json(&req("SMALL", None, "ALL", &["WOMEN"]))
            .send()
            .await
            .unwrap()
            .status()
    };
    const BURST: usize = 30;
    for _ in 0..BURST {
        assert_eq!(send().await, StatusCode::INTERNAL_SERVER_ERROR);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(send().await, StatusCode::INTERNAL_SERVER_ERROR);
    sqlx::query(&rename("ledger_away", "ledger"))
        .execute(db.pool())
        .await
        .unwrap();
    db.close().await;
    server.stop();

    let text = std::fs::read_to_string(&log).unwrap();
    let lines = json_lines(&text);
    let failed = lines
        .iter()
        .filter(|line| line["target"] == "crosstab::access" && line["fields"]["status"] == 500)
        .count();
    assert_eq!(failed, BURST + 1, "every 500 has its access line");
    let causes: Vec<&Value> = lines
        .iter()
        .filter(|line| {
            line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("answered 500"))
        })
        .collect();
    // The first said at once; the rest of the burst (a second of it per line, at most)
    // with a later line, the last one after the pause: every 500 counted once.
    assert_eq!(causes[0]["fields"]["more"], 0, "{text}");
    assert!(
        causes.len() <= 3,
        "{} cause lines for {} 500s",
        causes.len(),
        BURST + 1
    );
    let counted: u64 = causes
        .iter()
        .map(|line| 1 + line["fields"]["more"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, BURST as u64 + 1, "{text}");
}

/// An app query's access line names its account and user and the calls it billed (a
/// table's several), as a key's names its account; a user name with a space and an `=`
/// is one quoted value, not a field of its own.
#[test]
fn app_requests_are_logged_with_their_account_user_and_bills() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());
    create_user(&data, "ann billed=999", "acme", "ann-password-1", &[]);
    let log = temp.path().join("server.log");
    let server = Server::start_logging_to(&data, &[], &log);
    let origin = format!("http://{}", server.addr);
    let client = reqwest::blocking::Client::new();
    let login = app_login(&client, &server, "ann billed=999", "ann-password-1");
    assert_eq!(login.status(), StatusCode::OK);
    let cookie = session_cookie(login.headers());
    let table = client
        .post(server.url("/app/api/table"))
        .header("origin", &origin)
        .header("cookie", &cookie)
        .json(&json!({"survey": "SMALL", "populationBase": "ALL",
                      "rows": [{"expression": "WOMEN"}], "columns": [{"expression": "*"}]}))
        .send()
        .unwrap();
    assert_eq!(table.status(), StatusCode::OK);
    let billed = table.json::<Value>().unwrap()["billedCalls"]
        .as_u64()
        .unwrap();
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|line| line.contains("crosstab::access") && line.contains("path=/app/api/table"))
        .unwrap_or_else(|| panic!("no access line:\n{text}"));
    for part in [
        "account=\"acme\"",
        "user=\"ann billed=999\"",
        &format!(" billed={billed} "),
        "client=127.0.0.1",
    ] {
        assert!(line.contains(part), "{part} missing from: {line}");
    }
    assert!(billed > 1, "{billed}");
}

/// `--cache-memory` bounds the whole process's resident memory: a budget smaller than what
/// the server holds besides its caches is measured (its resident memory read while it
/// runs) and said in the log, the caches held at their floor.
#[tokio::test]
async fn a_budget_the_process_outgrows_is_measured_and_said() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());
    let log = temp.path().join("server.log");
    let server = Server::start_logging_to(&data, &["--cache-memory", "1MiB"], &log);
    let said = "the process holds more than --cache-memory besides its caches";
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&log).unwrap();
        if text.contains(said) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    server.stop();
    let line = text
        .lines()
        .find(|line| line.contains(said))
        .unwrap_or_else(|| panic!("not said in 10 s:\n{text}"));
    // The caches' limit is the floor, an eighth of 1 MiB.
    assert!(line.contains("caches=131072"), "{line}");
}

/// Every environment variable the server reads is in `crosstab serve --help`, with the
/// defaults the code uses.
#[test]
fn serve_help_documents_every_environment_setting() {
    let help = std::process::Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    let mut sources = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    let mut read = std::collections::BTreeSet::new();
    while let Some(path) = sources.pop() {
        if path.is_dir() {
            sources.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (at, _) in text.match_indices("\"CROSSTAB_") {
                let name: String = text[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                    .collect();
                read.insert(name);
            }
        }
    }
    // CROSSTAB_TEST_* are the tests' own settings (a unit test's database), not the server's.
    read.retain(|name| !name.starts_with("CROSSTAB_TEST_"));
    assert!(read.len() >= 5, "{read:?}");
    for name in read {
        assert!(help.contains(&name), "serve --help says nothing of {name}");
    }
    let cache_default = format!(
        "[default: {}]",
        crosstab_server::service::cache::DEFAULT_ENTRIES
    );
    assert!(
        help.contains(&cache_default),
        "serve --help states another response cache default than the code's"
    );
    // Every flag may come from the environment too (a unit's or a container's), --demo
    // and --help aside.
    let mut flags = Vec::new();
    for line in help.lines() {
        let line = line.trim_start();
        if let Some(flag) = line
            .strip_prefix("-h, ")
            .or(Some(line))
            .filter(|l| l.starts_with("--"))
        {
            let name: String = flag.chars().take_while(|c| !c.is_whitespace()).collect();
            flags.push((name, String::new()));
        } else if let Some((_, text)) = flags.last_mut() {
            text.push_str(line);
        }
    }
    assert!(flags.len() >= 20, "{flags:?}");
    for (flag, text) in &flags {
        if flag != "--demo" && flag != "--help" {
            assert!(
                text.contains("[env: CROSSTAB_"),
                "{flag} has no variable: {text}"
            );
        }
    }
}

/// Settings from the environment are checked as their flags are, lists split at commas.
#[test]
fn serve_settings_from_the_environment_are_checked_like_flags() {
    let temp = tempfile::tempdir().unwrap();
    let refused = |name: &str, value: &str| {
        let output = std::process::Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(temp.path())
            .env(name, value)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{name}={value} was taken");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let said = refused("CROSSTAB_QUERY_DEADLINE", "0");
    assert!(said.contains("--query-deadline"), "{said}");
    let said = refused("CROSSTAB_MAX_CONNECTIONS", "none");
    assert!(said.contains("--max-connections"), "{said}");
    // The first value is good: the second is the one refused.
    let said = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(temp.path())
        .env("CROSSTAB_TRUST_PROXY_HEADER", "x-forwarded-for")
        .env("CROSSTAB_TRUSTED_PROXY", "127.0.0.1,10.0.0.0/99")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&said.stderr);
    assert!(
        !said.status.success() && text.contains("'10.0.0.0/99'"),
        "{text}"
    );
}

/// SIGINT under load: requests in flight get their answers, the server exits cleanly, and
/// the bills on disk are exactly the 200s the clients received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_under_load_finishes_in_flight_requests_and_every_bill_is_on_disk() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const CLIENTS: usize = 32;
    let temp = tempfile::tempdir().unwrap();
    let (data, key) = small_data_dir(temp.path());
    let server = Server::start(&data, &[]);
    let oks = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (url, key, oks) = (server.url("/v1/crosstab"), key.clone(), Arc::clone(&oks));
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let body = req(
                    "SMALL",
                    None,
                    "ALL",
                    &[if client % 2 == 0 {
                        "WOMEN"
                    } else {
                        "AGE >= 50"
                    }],
                );
                let mut other = Vec::new();
                // Until the server is gone: then the connection is refused or closed.
                while let Ok(response) = http
                    .post(&url)
                    .header(CONTENT_TYPE, "application/json")
                    .header("Service-Engine-Authorizer", &key)
                    .body(body.to_string())
                    .send()
                    .await
                {
                    match response.status() {
                        StatusCode::OK if response.json::<Value>().await.is_ok() => {
                            oks.fetch_add(1, Ordering::SeqCst);
                        }
                        status => other.push(status),
                    }
                }
                other
            })
        })
        .collect();
    while oks.load(Ordering::SeqCst) < 500 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let at_signal = oks.load(Ordering::SeqCst);
    tokio::task::spawn_blocking(move || server.stop_with("INT"))
        .await
        .unwrap();
    for client in clients {
        let other = client.await.unwrap();
        assert!(
            other.is_empty(),
            "only 200s, then a closed server: {other:?}"
        );
    }
    let oks = oks.load(Ordering::SeqCst);
    assert!(oks >= at_signal);
    let usage: Value = serde_json::from_str(&cli(&data, &["usage", "--format", "json"])).unwrap();
    assert_eq!(
        usage[0]["calls"].as_u64(),
        Some(oks as u64),
        "bills = 200s received"
    );
}

/// `serve --demo` on a fresh data dir is usable at once (and again on the next start);
/// `query --group --repeat`; `key list --account`; `--database` and
/// `CROSSTAB_DATABASE_URL` in place of the data dir's SQLite file.
#[tokio::test]
async fn demo_server_and_the_smaller_commands() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let http = reqwest::Client::new();
    let demo_body =
        json!({"SurveyCode": "DEMO", "PopulationBaseCode": "ADULTS", "TargetCodes": ["F2554"]});
    let mut keys: Vec<String> = Vec::new();
    for _start in 0..2 {
        let server = Server::start(&data, &["--demo"]);
        let key = server
            .banner
            .iter()
            .find_map(|line| line.strip_prefix("demo key: "))
            .expect("a demo key")
            .to_owned();
        assert!(server.banner.iter().any(|line| line == "demo user: demo"));
        let response = http
            .post(server.url("/v1/crosstab"))
            .header(CONTENT_TYPE, "application/json")
            .header("Service-Engine-Authorizer", &key)
            .body(demo_body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["ResultCode"], 0);
        assert!(body["Results"][0]["Resps"].as_u64().unwrap() > 0);
        // The key an earlier start printed opens nothing any more.
        for earlier in &keys {
            let refused = http
                .post(server.url("/v1/crosstab"))
                .header(CONTENT_TYPE, "application/json")
                .header("Service-Engine-Authorizer", earlier)
                .body(demo_body.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        }
        server.stop();
        keys.push(key);
    }
    assert_ne!(keys[0], keys[1], "each start shows a new key");
    let list = cli(&data, &["survey", "list"]);
    assert_eq!(list.matches("DEMO").count(), 1, "generated once: {list}");

    // query: a group filters, and --repeat reports timings on stderr, the answer once.
    let small = write_small_survey(&temp.path().join("small"), "SMALL");
    cli(&data, &["survey", "import", small.to_str().unwrap()]);
    let args = [
        "query", "--survey", "SMALL", "--base", "ALL", "--target", "WOMEN",
    ];
    let mut with_group = args.to_vec();
    with_group.extend(["--group", "E", "--repeat", "5"]);
    let output = cli_output(&data, &with_group);
    assert!(output.status.success());
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    // Group E: r1-r3; women r2 (200) and r3 (300) in units of 100.
    assert_eq!(answer["Results"], json!([result(5.0, 2, 0)]));
    let timings = String::from_utf8_lossy(&output.stderr);
    assert!(
        timings.contains("min") && timings.contains("median") && timings.contains('5'),
        "{timings}"
    );
    let all: Value = serde_json::from_str(&cli(&data, &args)).unwrap();
    assert_eq!(all["Results"], json!([result(10.0, 3, 0)]), "r2, r3, r5");
    // As the API: an unknown group (403) is found before an unknown base (400).
    let both_unknown = cli_output(
        &data,
        &[
            "query", "--survey", "SMALL", "--base", "NOPE", "--group", "NOPE", "--target", "WOMEN",
        ],
    );
    assert!(!both_unknown.status.success());
    let said = String::from_utf8_lossy(&both_unknown.stderr);
    assert!(said.contains("403"), "{said}");

    // key list --account shows that account's keys only.
    let east = create_key(&data, "east", &["--grant", "SMALL:E"]);
    let listed = cli(&data, &["key", "list", "--account", "east"]);
    assert!(listed.contains(key_id(&east)), "{listed}");
    assert!(!listed.contains(key_id(&keys[0])), "{listed}");
    // Another key for an account with grants needs none; a key that could query nothing
    // is refused, and neither account nor key is made.
    let east_again = create_key(&data, "east", &[]);
    assert!(cli(&data, &["key", "list", "--account", "east"]).contains(key_id(&east_again)));
    let refused = cli_output(&data, &["key", "create", "--account", "newco"]);
    assert!(!refused.status.success() && refused.stdout.is_empty());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--grant"), "{said}");
    assert!(!cli(&data, &["key", "list"]).contains("newco"));

    // Another database, by flag or environment: its keys are its own.
    let elsewhere = format!(
        "sqlite:{}?mode=rwc",
        temp.path().join("elsewhere.db").display()
    );
    // Not there: refused, and not created (even with `mode=rwc`), the command to
    // create it named.
    let missing = cli_output(&data, &["key", "list", "--database", elsewhere.as_str()]);
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success()
            && said.contains("no database at")
            && said.contains(&format!("db migrate --database '{elsewhere}'")),
        "{said}"
    );
    assert!(!temp.path().join("elsewhere.db").exists());
    // There, but never migrated: refused for that.
    std::fs::File::create(temp.path().join("elsewhere.db")).unwrap();
    let unmigrated = cli_output(&data, &["key", "list", "--database", elsewhere.as_str()]);
    let said = String::from_utf8_lossy(&unmigrated.stderr);
    assert!(
        !unmigrated.status.success() && said.contains("no crosstab schema yet"),
        "{said}"
    );
    migrate(&data, &["--database", elsewhere.as_str()]);
    let other = create_key(
        &data,
        "far",
        &["--grant", "SMALL", "--database", elsewhere.as_str()],
    );
    let by_flag = cli(&data, &["key", "list", "--database", elsewhere.as_str()]);
    assert!(
        by_flag.contains(key_id(&other)) && !by_flag.contains(key_id(&east)),
        "{by_flag}"
    );
    let by_env = std::process::Command::new(BIN)
        .args(["key", "list", "--data-dir"])
        .arg(&data)
        .env("CROSSTAB_DATABASE_URL", &elsewhere)
        .output()
        .unwrap();
    let by_env = String::from_utf8(by_env.stdout).unwrap();
    assert!(
        by_env.contains(key_id(&other)) && !by_env.contains(key_id(&east)),
        "{by_env}"
    );
    assert!(!cli(&data, &["key", "list"]).contains(key_id(&other)));
}

/// Runs `user create` at a terminal of the test's own (a pseudoterminal whose user side is
/// the command's controlling terminal), types each answer once its prompt is shown and the
/// terminal has stopped echoing, and returns all the terminal showed.
fn user_create_at_a_terminal(data: &std::path::Path, username: &str, answers: [&str; 2]) -> String {
    use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, unlockpt, OpenptFlags};
    use rustix::termios::{tcgetattr, LocalModes};
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let user_side = ioctl_tiocgptpeer(&master, OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    // `setsid --ctty` makes the terminal on stdin the command's controlling one, which
    // rpassword opens as /dev/tty.
    let mut child = std::process::Command::new("setsid")
        .args(["--ctty", BIN, "user", "create", "--username", username])
        .args(["--account", "acme", "--data-dir"])
        .arg(data)
        .env_remove("CROSSTAB_DATABASE_URL")
        .stdin(user_side.try_clone().unwrap())
        .stdout(user_side.try_clone().unwrap())
        .stderr(user_side)
        .spawn()
        .unwrap();
    let mut terminal = std::fs::File::from(master);
    let shown = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let shown = Arc::clone(&shown);
        let mut terminal = terminal.try_clone().unwrap();
        // Ends with EIO once the command has exited and nothing holds its side open.
        std::thread::spawn(move || {
            let mut buffer = [0; 256];
            while let Ok(n @ 1..) = terminal.read(&mut buffer) {
                shown.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        })
    };
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            let seen = String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
            assert!(Instant::now() < deadline, "no {what}; shown: {seen:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    for (prompt, answer) in ["password for", "the same again"].iter().zip(answers) {
        wait_for(prompt, &|| {
            String::from_utf8_lossy(&shown.lock().unwrap()).contains(prompt)
        });
        // rpassword shows its prompt before it turns echo off: typing earlier is echoed.
        wait_for("echo turned off", &|| {
            !tcgetattr(&terminal)
                .unwrap()
                .local_modes
                .contains(LocalModes::ECHO)
        });
        terminal
            .write_all(format!("{answer}\r").as_bytes())
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("user create did not finish");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(terminal);
    reader.join().unwrap();
    let shown = shown.lock().unwrap();
    String::from_utf8_lossy(&shown).into_owned()
}

#[tokio::test]
async fn user_passwords_are_read_unseen_at_a_terminal_and_from_a_pipe() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = small_data_dir(temp.path());

    let mut piped = std::process::Command::new(BIN)
        .args([
            "user",
            "create",
            "--username",
            "piped",
            "--account",
            "acme",
            "--data-dir",
        ])
        .arg(&data)
        .env_remove("CROSSTAB_DATABASE_URL")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = piped.stdin.take().unwrap();
        stdin.write_all(b"piped-password-1\n").unwrap();
    }
    let output = piped.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let shown = user_create_at_a_terminal(&data, "typed", ["typed-password-1", "typed-password-1"]);
    assert!(
        shown.contains("user 'typed' of account 'acme' is ready"),
        "{shown}"
    );
    assert!(!shown.contains("typed-password-1"), "echoed: {shown}");
    let shown =
        user_create_at_a_terminal(&data, "mistyped", ["typed-password-1", "typed-password-2"]);
    assert!(shown.contains("the two passwords differ"), "{shown}");

    let server = Server::start(&data, &[]);
    let http = reqwest::Client::new();
    let sign_in = |user: &'static str, password: &'static str| {
        http.post(server.url("/app/login"))
            .header("origin", server.url(""))
            .json(&json!({"username": user, "password": password}))
            .send()
    };
    assert_eq!(
        sign_in("piped", "piped-password-1").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        sign_in("typed", "typed-password-1").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        sign_in("mistyped", "typed-password-1")
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );
    server.stop();
}

/// A database the command can't use as it is says what to do about it: migrate one that
/// is behind, use the newer build for one ahead, create a SQLite file named by URL.
#[tokio::test]
async fn a_database_not_at_this_schema_is_refused_with_the_way_out() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    migrate(&data, &[]);
    let url = crosstab_server::store::default_url(&data);
    let db = crosstab_server::store::Database::connect(&url)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99999999, 'from a newer build', TRUE, x'00', 0)",
    )
    .execute(db.pool())
    .await
    .unwrap();
    db.close().await;
    let ahead = cli_output(&data, &["key", "list"]);
    let said = String::from_utf8_lossy(&ahead.stderr);
    assert!(!ahead.status.success());
    assert!(
        said.contains("newer than this crosstab") && said.contains("use the newer crosstab"),
        "{said}"
    );
    assert!(!said.contains("db migrate"), "migrating can't help: {said}");

    let missing = format!("sqlite:{}", temp.path().join("nowhere.db").display());
    let refused = cli_output(&data, &["key", "list", "--database", &missing]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("no database at") && said.contains("mode=rwc"),
        "{said}"
    );
    assert!(!temp.path().join("nowhere.db").exists());
}
