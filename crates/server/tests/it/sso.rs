//! Single sign-on against a real OpenID provider (npm `oidc-provider`, started from
//! `tests/oidc/provider.mjs` on a loopback port): its client-credentials access tokens and
//! ID tokens are accepted and billed to the mapped account with the provider and subject
//! in the ledger; forged, misaddressed, expired and algorithm-confused tokens are the same
//! 401 as a bad key and bill nothing; a rotated provider key is fetched without a restart;
//! the token endpoint exchanges a provider's JWT for this server's own token.
//! Needs node and `npm ci` in `tests/oidc` (scripts/setup); fails without.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

use axum::body::Body;
use axum::http::Request;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use crosstab_server::store::identity_providers::{self, AccountRule, IdentityProvider, IdpKind};
use crosstab_server::store::{signing_keys, usage};
use serde_json::{json, Value};

use super::common::{code, postgres_url, request, Fixture};
use super::support::{cli, cli_output, Server};
use crosstab_server::service::sso::jwks;

/// The audience the provider's access tokens are minted for (a resource indicator).
const API: &str = "https://crosstab.test/api";
/// A crosstab the account `acme` may make (the whole of VEC).
fn query() -> Value {
    request("VEC", None, "ALL", &["WOMEN"])
}

/// `tests/oidc/provider.mjs`, running until dropped.
pub struct Provider {
    child: Child,
    /// Held open: the provider stops when it closes.
    _stdin: ChildStdin,
    pub issuer: String,
    http: reqwest::Client,
}

impl Provider {
    pub fn start() -> Provider {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/oidc");
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "tests/oidc/node_modules is missing: run scripts/setup (npm ci in tests/oidc)"
        );
        let mut child = Command::new("node")
            .arg("provider.mjs")
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs (Node.js 20+ is required for the SSO tests)");
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        // Keep reading what it prints later, so it never writes to a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let started: Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("provider.mjs printed {line:?}"));
        Provider {
            child,
            _stdin: stdin,
            issuer: started["issuer"].as_str().unwrap().to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// A client-credentials access token (a JWT for `resource`).
    pub async fn access_token(&self, client: &str, resource: &str) -> String {
        let answer: Value = self
            .http
            .post(format!("{}/token", self.issuer))
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", client),
                ("client_secret", &format!("{client}-secret")),
                ("resource", resource),
                ("scope", "crosstab"),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {answer}"))
            .to_owned()
    }

    /// An ID token for `sub`, issued to the client `webapp` (its `aud`).
    pub async fn id_token(&self, sub: &str) -> String {
        let answer = self
            .test_route("id-token", json!({"sub": sub, "client_id": "webapp"}))
            .await;
        answer["id_token"].as_str().unwrap().to_owned()
    }

    /// `claims` signed with the provider's own key of `header.alg`.
    pub async fn sign(&self, header: Value, claims: Value) -> String {
        let answer = self
            .test_route("sign", json!({"header": header, "claims": claims}))
            .await;
        answer["token"].as_str().unwrap().to_owned()
    }

    async fn test_route(&self, route: &str, body: Value) -> Value {
        self.http
            .post(format!("{}/test/{route}", self.issuer))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// New keys; the provider's key set then holds only them.
    pub async fn rotate(&self) {
        self.test_route("rotate", json!({})).await;
    }

    /// The provider's current keys' ids.
    pub async fn kids(&self) -> Vec<String> {
        let set: Value = self
            .http
            .get(format!("{}/jwks", self.issuer))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        set["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn oidc(name: &str, issuer: &str, audience: &str, account: AccountRule) -> IdentityProvider {
    IdentityProvider {
        name: name.to_owned(),
        kind: IdpKind::Oidc,
        issuer: issuer.to_owned(),
        audience: Some(audience.to_owned()),
        account,
        clients: Vec::new(),
        scope: None,
        metadata: None,
        created_at: 0,
    }
}

/// The fixture (its clock at the real time), with the provider trusted as `corp` for
/// access tokens to [`API`] (account `acme`) and as `corp-id` for ID tokens of `webapp`.
async fn trusting(provider: &Provider) -> Fixture {
    let fx = Fixture::new().await;
    let acme = || AccountRule::Fixed("acme".to_owned());
    for idp in [
        oidc("corp", &provider.issuer, API, acme()),
        oidc("corp-id", &provider.issuer, "webapp", acme()),
    ] {
        assert!(identity_providers::add(&fx.db, &idp).await.unwrap());
    }
    fx.services.sso.prepare().await.unwrap();
    fx
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Bills of the ledger by (idp, subject) of `account`.
async fn token_bills(fx: &Fixture, account: &str) -> Vec<(String, String, i64)> {
    usage::report(&fx.db, Some(account), 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|row| Some((row.idp?, row.subject?, row.calls)))
        .collect()
}

/// `token` with one character of its signature changed.
fn tampered(token: &str) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let last = bytes.len() - 3;
    bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

fn unsigned_part(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

#[tokio::test]
async fn access_and_id_tokens_of_a_real_provider_are_accepted_and_billed_to_the_mapped_account() {
    let provider = Provider::start();
    let fx = trusting(&provider).await;

    let access = provider.access_token("backend", API).await;
    let (response, body) = fx.post(Some(&bearer(&access)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    assert_eq!(body["ResultCode"], 0);
    // The same token again: from the cache, billed again.
    let (response, _) = fx.post(Some(&bearer(&access)), &query()).await;
    assert_eq!(response.status(), 200);

    let id_token = provider.id_token("alice").await;
    let (response, body) = fx.post(Some(&format!("bearer {id_token}")), &query()).await;
    assert_eq!(response.status(), 200, "{body}");

    // The provider's ES256 and EdDSA keys verify too.
    let now = fx.now() / 1000;
    for alg in ["ES256", "EdDSA"] {
        let claims = json!({"iss": provider.issuer, "aud": [API, "other"], "sub": alg, "exp": now + 60, "nbf": now});
        let token = provider.sign(json!({"alg": alg}), claims).await;
        let (response, body) = fx.post(Some(&bearer(&token)), &query()).await;
        assert_eq!(response.status(), 200, "{alg}: {body}");
    }

    assert_eq!(fx.bills().await, 5);
    assert_eq!(
        token_bills(&fx, "acme").await,
        [
            ("corp".to_owned(), "ES256".to_owned(), 1),
            ("corp".to_owned(), "EdDSA".to_owned(), 1),
            ("corp".to_owned(), "backend".to_owned(), 2),
            ("corp-id".to_owned(), "alice".to_owned(), 1),
        ]
    );
    // The account's usage page names the identity providers whose tokens made the calls.
    let account_id: i64 = sqlx::query_scalar("SELECT id FROM accounts WHERE name = 'acme'")
        .fetch_one(fx.db.pool())
        .await
        .unwrap();
    let mut daily: Vec<(Option<String>, i64)> = usage::daily(&fx.db, account_id, 0, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.user.is_none())
        .map(|row| (row.idp, row.calls))
        .collect();
    daily.sort();
    assert_eq!(
        daily,
        [
            (Some("corp".to_owned()), 4),
            (Some("corp-id".to_owned()), 1)
        ]
    );
}

#[tokio::test]
async fn forged_misaddressed_expired_and_algorithm_confused_tokens_are_401_and_bill_nothing() {
    let provider = Provider::start();
    let fx = trusting(&provider).await;
    let now = fx.now() / 1000;
    let claims =
        |iss: &str, aud: &str| json!({"iss": iss, "aud": aud, "sub": "mallory", "exp": now + 300});
    let rsa_kid = provider
        .kids()
        .await
        .into_iter()
        .find(|kid| kid.starts_with("rs256"))
        .unwrap();
    let ec_kid = provider
        .kids()
        .await
        .into_iter()
        .find(|kid| kid.starts_with("es256"))
        .unwrap();

    let good = provider.access_token("backend", API).await;
    let header = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
    let good_claims = good.split('.').nth(1).unwrap().to_owned();
    let hs256: Value = provider
        .test_route(
            "hs256-public",
            json!({"claims": claims(&provider.issuer, API)}),
        )
        .await;
    let cases: Vec<(&str, String)> = vec![
        ("tampered signature", tampered(&good)),
        (
            "claims of another token under this signature",
            format!(
                "{}.{}.{}",
                good.split('.').next().unwrap(),
                unsigned_part(&claims(&provider.issuer, API)),
                good.split('.').nth(2).unwrap()
            ),
        ),
        ("wrong audience", provider.access_token("backend", "https://elsewhere.test").await),
        (
            "wrong issuer",
            provider
                .sign(json!({"alg": "RS256"}), claims("http://127.0.0.1:1/evil", API))
                .await,
        ),
        (
            "alg none",
            format!(
                "{}.{}.",
                header(&json!({"alg": "none", "kid": rsa_kid})),
                good_claims
            ),
        ),
        ("HS256 keyed with the RSA public key", hs256["token"].as_str().unwrap().to_owned()),
        (
            "RS256 signature under the EC key's id",
            provider
                .sign(json!({"alg": "RS256", "kid": ec_kid}), claims(&provider.issuer, API))
                .await,
        ),
        (
            "unknown key id",
            provider
                .sign(json!({"alg": "RS256", "kid": "no-such-key"}), claims(&provider.issuer, API))
                .await,
        ),
        (
            "expired beyond the leeway",
            provider
                .sign(
                    json!({"alg": "ES256"}),
                    json!({"iss": provider.issuer, "aud": API, "sub": "m", "exp": now - 61}),
                )
                .await,
        ),
        (
            "not yet valid",
            provider
                .sign(
                    json!({"alg": "ES256"}),
                    json!({"iss": provider.issuer, "aud": API, "sub": "m", "exp": now + 600, "nbf": now + 120}),
                )
                .await,
        ),
        (
            "no subject",
            provider
                .sign(json!({"alg": "ES256"}), json!({"iss": provider.issuer, "aud": API, "exp": now + 60}))
                .await,
        ),
        ("not a JWT", "not.a.jwt".to_owned()),
        ("no token", String::new()),
    ];
    let fetches = fx.services.sso.key_sets().fetches();
    for (case, token) in &cases {
        let (response, body) = fx.post(Some(&bearer(token)), &query()).await;
        assert_eq!(response.status(), 401, "{case}: {body}");
        assert_eq!(code(&body), "unauthorized", "{case}");
        assert_eq!(
            body["error"]["message"],
            json!(crosstab_contract::ApiError::Unauthorized.to_string()),
            "{case}"
        );
    }
    // The keys were fetched at start (within 10 s): the unknown key id fetched nothing.
    assert_eq!(fx.services.sso.key_sets().fetches(), fetches);
    // 10 s later it makes one fetch, and a flood of them no more.
    fx.clock.advance(10_001);
    for _ in 0..5 {
        let (response, _) = fx.post(Some(&bearer(&cases[7].1)), &query()).await;
        assert_eq!(response.status(), 401);
    }
    assert_eq!(fx.services.sso.key_sets().fetches(), fetches + 1);

    // A token that held is refused once the clock passes its expiry and the leeway
    // (even from the cache of verified tokens).
    let (response, _) = fx.post(Some(&bearer(&good)), &query()).await;
    assert_eq!(response.status(), 200);
    // From the token's own expiry: the provider stamped it some time after the fixture's
    // clock stopped.
    let expires_ms = claims_of(&good)["exp"].as_i64().unwrap() * 1000;
    fx.clock.advance(expires_ms + 61_000 - fx.now());
    let (response, body) = fx.post(Some(&bearer(&good)), &query()).await;
    assert_eq!(response.status(), 401, "{body}");
    assert_eq!(fx.bills().await, 1);
}

/// A provider told which OAuth clients it accepts (`sso add-oidc --client`) and which
/// scope its tokens need (`--scope`) refuses other clients' tokens, and tokens without
/// the scope, though they name its audience: on `/v1` and at the token endpoint alike.
#[tokio::test]
async fn a_provider_accepts_only_the_clients_and_the_scope_it_was_told() {
    let provider = Provider::start();
    let fx = Fixture::new().await;
    let mut idp = oidc(
        "corp",
        &provider.issuer,
        API,
        AccountRule::Fixed("acme".to_owned()),
    );
    idp.clients = vec!["backend".to_owned()];
    idp.scope = Some("crosstab".to_owned());
    assert!(identity_providers::add(&fx.db, &idp).await.unwrap());
    fx.services.sso.prepare().await.unwrap();
    assert_eq!(identity_providers::list(&fx.db).await.unwrap(), [idp]);

    // The provider's own access tokens: backend's are taken, stranger's are not.
    let backend = provider.access_token("backend", API).await;
    let (response, body) = fx.post(Some(&bearer(&backend)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    let stranger = provider.access_token("stranger", API).await;
    let (response, _) = fx.post(Some(&bearer(&stranger)), &query()).await;
    assert_eq!(response.status(), 401);
    let (response, body) = exchange(&fx, JWT_BEARER, &stranger).await;
    assert_eq!(response.status(), 400, "{body}");
    assert_eq!(body["error"], "invalid_grant", "{body}");
    let (response, body) = exchange(&fx, JWT_BEARER, &backend).await;
    assert_eq!(response.status(), 200, "{body}");

    // Tokens of the provider's key, claim by claim.
    let now = fx.now() / 1000;
    let signed = |extra: Value| {
        let mut claims =
            json!({"iss": provider.issuer, "aud": API, "sub": "svc", "exp": now + 600});
        claims
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        provider.sign(json!({"alg": "ES256"}), claims)
    };
    for (case, extra, status) in [
        (
            "client_id, scope among others",
            json!({"client_id": "backend", "scope": "read crosstab"}),
            200,
        ),
        (
            "azp, scp as a list",
            json!({"azp": "backend", "scp": ["crosstab"]}),
            200,
        ),
        (
            "scp as a string",
            json!({"client_id": "backend", "scp": "crosstab"}),
            200,
        ),
        (
            "another client",
            json!({"client_id": "other", "scope": "crosstab"}),
            401,
        ),
        ("no client", json!({"scope": "crosstab"}), 401),
        (
            "one client of two not accepted",
            json!({"azp": "other", "client_id": "backend", "scope": "crosstab"}),
            401,
        ),
        (
            "a client that is not a string",
            json!({"client_id": ["backend"], "scope": "crosstab"}),
            401,
        ),
        ("no scope", json!({"client_id": "backend"}), 401),
        (
            "a longer scope",
            json!({"client_id": "backend", "scope": "crosstab:read"}),
            401,
        ),
        (
            "the scope in another claim",
            json!({"client_id": "backend", "scopes": "crosstab"}),
            401,
        ),
    ] {
        let token = signed(extra).await;
        let (response, body) = fx.post(Some(&bearer(&token)), &query()).await;
        assert_eq!(response.status(), status, "{case}: {body}");
    }

    // A token naming two audiences is taken by the provider of either whose clients
    // and scope it meets: here another provider of the same issuer, without limits (its
    // name sorts first; the limited provider still comes first for its own clients).
    let open = oidc(
        "alpha",
        &provider.issuer,
        "other-api",
        AccountRule::Fixed("acme".to_owned()),
    );
    assert!(identity_providers::add(&fx.db, &open).await.unwrap());
    fx.services.sso.prepare().await.unwrap();
    let both = |client: &str, sub: &str| {
        signed(
            json!({"aud": [API, "other-api"], "client_id": client, "scope": "crosstab", "sub": sub}),
        )
    };
    let other = both("other", "via-alpha").await;
    let (response, body) = fx.post(Some(&bearer(&other)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    let backend = both("backend", "via-corp").await;
    let (response, body) = fx.post(Some(&bearer(&backend)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    let limited = signed(json!({"aud": [API], "client_id": "other"})).await;
    assert_eq!(
        fx.post(Some(&bearer(&limited)), &query()).await.0.status(),
        401
    );
    let bills = token_bills(&fx, "acme").await;
    for (idp, sub) in [("alpha", "via-alpha"), ("corp", "via-corp")] {
        assert!(
            bills
                .iter()
                .any(|(i, s, calls)| i == idp && s == sub && *calls == 1),
            "{idp} {sub}: {bills:?}"
        );
    }
}

#[tokio::test]
async fn a_rotated_provider_key_is_fetched_without_a_restart() {
    let provider = Provider::start();
    let fx = trusting(&provider).await;
    let before = provider.access_token("backend", API).await;
    let (response, _) = fx.post(Some(&bearer(&before)), &query()).await;
    assert_eq!(response.status(), 200);

    provider.rotate().await;
    let after = provider.access_token("backend", API).await;
    let fetches = fx.services.sso.key_sets().fetches();
    // The keys were fetched at start, within the last 10 s: no fetch yet.
    let (response, _) = fx.post(Some(&bearer(&after)), &query()).await;
    assert_eq!(response.status(), 401);
    assert_eq!(fx.services.sso.key_sets().fetches(), fetches);
    fx.clock.advance(10_001);
    let (response, body) = fx.post(Some(&bearer(&after)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    assert_eq!(fx.services.sso.key_sets().fetches(), fetches + 1);
    assert_eq!(fx.bills().await, 2);
}

/// A key the provider withdrew stops verifying once the set held is older than its
/// maximum age, though no token named an unknown key.
#[tokio::test]
async fn a_withdrawn_provider_key_stops_verifying_within_the_key_sets_maximum_age() {
    let provider = Provider::start();
    let fx = trusting(&provider).await;
    let old = provider.access_token("backend", API).await;
    provider.rotate().await;
    let fetches = fx.services.sso.key_sets().fetches();
    // Within the age the held set answers (and then the token's cached principal),
    // without a fetch.
    let (response, _) = fx.post(Some(&bearer(&old)), &query()).await;
    assert_eq!(response.status(), 200);
    fx.clock.advance(jwks::KEYS_MAX_AGE_MS - 1_000);
    let (response, _) = fx.post(Some(&bearer(&old)), &query()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(fx.services.sso.key_sets().fetches(), fetches);
    // Past it, the set is fetched again beside the request (served by the set held):
    // then the old key is gone (the token still in time).
    fx.clock.advance(1_001);
    let (response, _) = fx.post(Some(&bearer(&old)), &query()).await;
    assert_eq!(response.status(), 200, "answered by the set held meanwhile");
    // Once the set is fetched again, the old key is gone: the token is refused (its
    // principal, verified with a set that was due, was held only until the next time a
    // fetch may be tried).
    let started = std::time::Instant::now();
    let mut waits = 0;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        fx.clock.advance(jwks::REFETCH_AFTER_MS + 1);
        waits += 1;
        let (response, _) = fx.post(Some(&bearer(&old)), &query()).await;
        if response.status() == 401 {
            break;
        }
        assert_eq!(response.status(), 200);
        // Within the token's leeway (60 s past its expiry).
        assert!(
            waits < 5 && started.elapsed() < std::time::Duration::from_secs(10),
            "still accepted"
        );
    }
    assert!(fx.services.sso.key_sets().fetches() > fetches);
    let fetched = fx.services.sso.key_sets().fetches();
    let new = provider.access_token("backend", API).await;
    let (response, body) = fx.post(Some(&bearer(&new)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    assert_eq!(
        fx.services.sso.key_sets().fetches(),
        fetched,
        "the new key came with the set fetched again"
    );
}

/// A token whose key can't be had because the provider is down may well be good: the
/// caller gets a 500 to retry, not a 401 telling it to fetch another credential.
#[tokio::test]
async fn a_provider_whose_keys_cannot_be_fetched_is_a_fault_not_a_refusal() {
    let provider = Provider::start();
    let fx = trusting(&provider).await;
    provider.rotate().await;
    let after = provider.access_token("backend", API).await;
    drop(provider);
    fx.clock.advance(10_001);
    let (response, body) = fx.post(Some(&bearer(&after)), &query()).await;
    assert_eq!(response.status(), 500, "{body}");
    assert_eq!(code(&body), "internal_error");
    // Within the next 10 s nothing is fetched, and the answer is the same.
    let fetches = fx.services.sso.key_sets().fetches();
    let (response, _) = fx.post(Some(&bearer(&after)), &query()).await;
    assert_eq!(response.status(), 500);
    assert_eq!(fx.services.sso.key_sets().fetches(), fetches);
    assert_eq!(fx.bills().await, 0);
}

#[tokio::test]
async fn an_account_claim_names_only_an_allowed_account_that_exists() {
    let provider = Provider::start();
    let fx = Fixture::new().await;
    // Trusted to name "nosuch" and a tenant of its own, not acme.
    let by_claim = AccountRule::Named {
        by: "crosstab_account".to_owned(),
        allowed: vec!["nosuch".to_owned(), "theirs".to_owned()],
    };
    assert!(
        identity_providers::add(&fx.db, &oidc("corp", &provider.issuer, API, by_claim))
            .await
            .unwrap()
    );
    fx.services.sso.prepare().await.unwrap();

    // A token naming acme, an account that exists but the provider was not trusted with:
    // refused as a bearer and at the token endpoint.
    let acme = provider.access_token("backend", API).await;
    let (response, _) = fx.post(Some(&bearer(&acme)), &query()).await;
    assert_eq!(response.status(), 401);
    let (response, body) = exchange(&fx, JWT_BEARER, &acme).await;
    assert_eq!(response.status(), 400);
    assert_eq!(body, json!({"error": "invalid_grant"}));
    // Allowed, it works from the next request; denied again, it stops.
    use identity_providers::AllowedChange;
    assert_eq!(
        identity_providers::allow_account(&fx.db, "corp", "acme")
            .await
            .unwrap(),
        AllowedChange::Changed
    );
    let (response, body) = fx.post(Some(&bearer(&acme)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    // A token of this server got for it meanwhile stops with the provider's.
    let (response, body) = exchange(&fx, JWT_BEARER, &acme).await;
    assert_eq!(response.status(), 200, "{body}");
    let own = body["access_token"].as_str().unwrap().to_owned();
    let (response, _) = fx.post(Some(&bearer(&own)), &query()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        identity_providers::deny_account(&fx.db, "corp", "acme")
            .await
            .unwrap(),
        AllowedChange::Changed
    );
    let (response, _) = fx.post(Some(&bearer(&acme)), &query()).await;
    assert_eq!(response.status(), 401);
    let (response, _) = fx.post(Some(&bearer(&own)), &query()).await;
    assert_eq!(
        response.status(),
        401,
        "this server's token, its account denied"
    );
    assert_eq!(
        identity_providers::allow_account(&fx.db, "nope", "acme")
            .await
            .unwrap(),
        AllowedChange::NoSuchProvider
    );
    identity_providers::allow_account(&fx.db, "corp", "acme")
        .await
        .unwrap();
    // Allowed, but no such account: refused, and never created.
    let stranger = provider.access_token("stranger", API).await;
    let (response, _) = fx.post(Some(&bearer(&stranger)), &query()).await;
    assert_eq!(response.status(), 401);
    let (response, body) = exchange(&fx, JWT_BEARER, &stranger).await;
    assert_eq!(response.status(), 400);
    assert_eq!(body, json!({"error": "invalid_grant"}));
    assert_eq!(fx.bills().await, 2);
    assert!(
        crosstab_server::store::accounts::account_id(&fx.db, "nosuch")
            .await
            .unwrap()
            .is_none()
    );
}

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const SAML2_BEARER: &str = "urn:ietf:params:oauth:grant-type:saml2-bearer";

fn form(params: &[(&str, &str)]) -> String {
    params
        .iter()
        .map(|(name, value)| {
            format!(
                "{}={}",
                name,
                form_urlencoded::byte_serialize(value.as_bytes()).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

async fn token_request(
    fx: &Fixture,
    content_type: &str,
    body: String,
) -> (axum::http::Response<()>, Value) {
    fx.send(
        Request::post("/v1/oauth/token")
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap(),
    )
    .await
}

pub async fn exchange(
    fx: &Fixture,
    grant_type: &str,
    assertion: &str,
) -> (axum::http::Response<()>, Value) {
    token_request(
        fx,
        "application/x-www-form-urlencoded",
        form(&[("grant_type", grant_type), ("assertion", assertion)]),
    )
    .await
}

/// [`exchange`] of a SAML assertion document, base64url-encoded as RFC 7522 has it.
async fn exchange_saml(fx: &Fixture, xml: &str) -> (axum::http::Response<()>, Value) {
    exchange(fx, SAML2_BEARER, &URL_SAFE_NO_PAD.encode(xml)).await
}

#[tokio::test]
async fn a_providers_jwt_is_exchanged_for_a_token_of_this_server_that_is_billed_like_it() {
    let provider = Provider::start();
    let fx = trusting(&provider).await;
    let assertion = provider.access_token("backend", API).await;

    let (response, body) = exchange(&fx, JWT_BEARER, &assertion).await;
    assert_eq!(response.status(), 200, "{body}");
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert_eq!(body["token_type"], "Bearer");
    // Never past the assertion's own expiry (300 s).
    let token = body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(claims_of(&token)["exp"], claims_of(&assertion)["exp"]);
    let expires_in = body["expires_in"].as_i64().unwrap();
    // The provider stamped the assertion some time after the fixture's clock stopped.
    let left = claims_of(&assertion)["exp"].as_i64().unwrap() - fx.now() / 1000;
    assert!(
        expires_in >= 290 && (left - 1..=left + 1).contains(&expires_in),
        "{body}"
    );
    let (response, body) = fx.post(Some(&bearer(&token)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    assert_eq!(
        token_bills(&fx, "acme").await,
        [("corp".to_owned(), "backend".to_owned(), 1)]
    );

    // A longer-lived assertion gets an hour at most.
    let now = fx.now() / 1000;
    let long = provider
        .sign(
            json!({"alg": "EdDSA"}),
            json!({"iss": provider.issuer, "aud": API, "sub": "batch", "exp": now + 86_400}),
        )
        .await;
    let (_, body) = exchange(&fx, JWT_BEARER, &long).await;
    assert_eq!(body["expires_in"], 3600, "{body}");

    // Rotating this server's key: the old token still works, new ones use the new key.
    let old_kid = kid_of(&token);
    let key = crosstab_server::service::sso::signing::generate(fx.now(), None).unwrap();
    signing_keys::rotate(&fx.db, &key).await.unwrap();
    let (response, _) = fx.post(Some(&bearer(&token)), &query()).await;
    assert_eq!(response.status(), 200);
    let (_, body) = exchange(&fx, JWT_BEARER, &assertion).await;
    let renewed = body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(kid_of(&renewed), key.kid);
    assert_ne!(key.kid, old_kid);
    let (response, _) = fx.post(Some(&bearer(&renewed)), &query()).await;
    assert_eq!(response.status(), 200);
    // The retired key signed nothing after its retirement: a token it signed "now" (its
    // private key taken from a backup) is refused.
    let retired = signing_keys::all(&fx.db)
        .await
        .unwrap()
        .into_iter()
        .find(|stored| stored.kid == old_kid)
        .unwrap();
    let mut as_retired = retired.clone();
    as_retired.retired_at = None;
    let old_keys =
        crosstab_server::service::sso::signing::OwnKeys::from_stored(&[as_retired], None).unwrap();
    fx.clock.advance(300_000);
    let mut late = claims_of(&token);
    let retired_s = retired.retired_at.unwrap() / 1000;
    // Issued well after the retirement, yet not in the future.
    late["iat"] = json!(retired_s + 200);
    late["exp"] = json!(retired_s + 800);
    let forged = old_keys.sign(&late).unwrap().unwrap();
    let (response, _) = fx.post(Some(&bearer(&forged)), &query()).await;
    assert_eq!(
        response.status(),
        401,
        "signed by the retired key after it was retired"
    );

    // Signed with this server's own key but not as it issues tokens (a key taken from a
    // backup): a lifetime over an hour, an account its provider does not bill, a subject
    // with a control character. Each is refused; the claims unchanged are not.
    let own = crosstab_server::service::sso::signing::OwnKeys::from_stored(
        std::slice::from_ref(&key),
        None,
    )
    .unwrap();
    let issued = claims_of(&renewed);
    let later = issued["iat"].as_i64().unwrap() + 7200;
    for (claim, value) in [
        ("exp", json!(later)),
        ("acct", json!("north")),
        ("sub", json!("a\u{0}b")),
    ] {
        let mut forged = issued.clone();
        forged[claim] = value;
        let token = own.sign(&forged).unwrap().unwrap();
        let (response, _) = fx.post(Some(&bearer(&token)), &query()).await;
        assert_eq!(response.status(), 401, "{claim}");
    }
    let resigned = own.sign(&issued).unwrap().unwrap();
    let (response, _) = fx.post(Some(&bearer(&resigned)), &query()).await;
    assert_eq!(response.status(), 200);

    // Its own token is no assertion; a forged one of its issuer is refused.
    let (_, body) = exchange(&fx, JWT_BEARER, &renewed).await;
    assert_eq!(body["error"], "invalid_grant");
    let (response, _) = fx.post(Some(&bearer(&tampered(&renewed))), &query()).await;
    assert_eq!(response.status(), 401);

    // Once the provider is removed, the tokens it vouched for stop working.
    assert!(identity_providers::remove(&fx.db, "corp").await.unwrap());
    let (response, _) = fx.post(Some(&bearer(&renewed)), &query()).await;
    assert_eq!(response.status(), 401);
    // Exchanges billed nothing: only the four crosstabs.
    assert_eq!(fx.bills().await, 4);
}

fn claims_of(token: &str) -> Value {
    serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap()
}

fn kid_of(token: &str) -> String {
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    header["kid"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_token_endpoint_answers_rfc_6749_errors() {
    let provider = Provider::start();
    let fx = trusting(&provider).await;
    let assertion = provider.access_token("backend", API).await;
    let form_type = "application/x-www-form-urlencoded";
    let cases: Vec<(&str, &str, String, &str)> = vec![
        (
            "no grant_type",
            form_type,
            form(&[("assertion", &assertion)]),
            "invalid_request",
        ),
        (
            "no assertion",
            form_type,
            form(&[("grant_type", JWT_BEARER)]),
            "invalid_request",
        ),
        (
            "a repeated parameter",
            form_type,
            form(&[
                ("grant_type", JWT_BEARER),
                ("assertion", &assertion),
                ("assertion", &assertion),
            ]),
            "invalid_request",
        ),
        (
            "JSON instead of a form",
            "application/json",
            json!({"grant_type": JWT_BEARER, "assertion": assertion}).to_string(),
            "invalid_request",
        ),
        (
            "another grant type, without an assertion",
            form_type,
            form(&[("grant_type", "password")]),
            "unsupported_grant_type",
        ),
        (
            "another grant type",
            form_type,
            form(&[
                ("grant_type", "client_credentials"),
                ("assertion", &assertion),
            ]),
            "unsupported_grant_type",
        ),
        (
            "a forged JWT",
            form_type,
            form(&[
                ("grant_type", JWT_BEARER),
                ("assertion", &tampered(&assertion)),
            ]),
            "invalid_grant",
        ),
        (
            "a SAML assertion that is not base64url",
            form_type,
            form(&[("grant_type", SAML2_BEARER), ("assertion", "<Assertion/>")]),
            "invalid_request",
        ),
        (
            "a SAML assertion no configured IdP signed",
            form_type,
            form(&[
                ("grant_type", SAML2_BEARER),
                ("assertion", &URL_SAFE_NO_PAD.encode("<Assertion/>")),
            ]),
            "invalid_grant",
        ),
    ];
    for (case, content_type, body, error) in cases {
        let (response, answer) = token_request(&fx, content_type, body).await;
        assert_eq!(response.status(), 400, "{case}: {answer}");
        assert_eq!(answer["error"], error, "{case}: {answer}");
        assert_eq!(response.headers()["cache-control"], "no-store", "{case}");
        if error == "invalid_grant" {
            // Why is logged, never told.
            assert_eq!(answer, json!({"error": "invalid_grant"}), "{case}");
        }
    }
    let preflight = fx
        .send(
            Request::options("/v1/oauth/token")
                .header("origin", super::common::ORIGIN)
                .header("access-control-request-method", "POST")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .0;
    assert_eq!(preflight.status(), 200);
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        super::common::ORIGIN
    );
    assert_eq!(fx.bills().await, 0);
}

/// `POST /v1/crosstab` on a running `server` with `Bearer token`: SMALL's women.
fn bearer_query(
    client: &reqwest::blocking::Client,
    server: &Server,
    token: &str,
) -> reqwest::blocking::Response {
    client
        .post(server.url("/v1/crosstab"))
        .header("Service-Engine-Authorizer", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(
            json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]})
                .to_string(),
        )
        .send()
        .unwrap()
}

/// A running `server`'s own token for a provider's JWT `assertion`.
fn exchanged_token(client: &reqwest::blocking::Client, server: &Server, assertion: &str) -> String {
    let exchanged: Value = client
        .post(server.url("/v1/oauth/token"))
        .form(&[("grant_type", JWT_BEARER), ("assertion", assertion)])
        .send()
        .unwrap()
        .json()
        .unwrap();
    exchanged["access_token"].as_str().unwrap().to_owned()
}

/// With `--token-key-secret-file`, this server's token-signing keys are stored sealed: a
/// key made before is sealed at start, new ones (at start, by `sso rotate-key`) are made
/// sealed, tokens signed before and after verify, and a server or a rotation without the
/// secret, or with another, is refused with the reason rather than signing with a key no
/// other server can open.
#[test]
fn token_signing_keys_are_sealed_with_the_secret_every_server_is_given() {
    use base64::engine::general_purpose::STANDARD;
    use crosstab_server::service::sso::sealing;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider = Provider::start();
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = super::support::small_data_dir(temp.path());
    let public_url = "https://crosstab.example.com";
    let secret = temp.path().join("token-key.secret");
    write_secret(&secret, &format!("{}\n", STANDARD.encode([7u8; 32])));
    let other = temp.path().join("other.secret");
    write_secret(&other, &STANDARD.encode([8u8; 32]));
    let (secret, other) = (secret.to_str().unwrap(), other.to_str().unwrap());
    let stored = || {
        rt.block_on(async {
            let db = crosstab_server::store::Database::connect(
                &crosstab_server::store::default_url(&data),
            )
            .await
            .unwrap();
            let keys = signing_keys::all(&db).await.unwrap();
            db.close().await;
            keys
        })
    };
    cli(
        &data,
        &[
            "sso",
            "add-oidc",
            "--name",
            "corp",
            "--issuer",
            &provider.issuer,
            "--account",
            "acme",
        ],
    );
    let client = reqwest::blocking::Client::new();
    let own_token = |server: &Server| -> String {
        let assertion = rt.block_on(provider.access_token("backend", public_url));
        exchanged_token(&client, server, &assertion)
    };
    let call = |server: &Server, token: &str| bearer_query(&client, server, token).status();
    // A serve that must not start: its exit status and what it said.
    let refused = |extra: &[&str]| {
        let serve = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--public-url",
            public_url,
        ];
        let out = cli_output(&data, &[&serve[..], extra].concat());
        assert!(!out.status.success(), "{extra:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    // Without a secret, as before: the first key is stored unsealed.
    let server = Server::start(&data, &["--public-url", public_url]);
    let before = own_token(&server);
    assert_eq!(call(&server, &before), 200);
    server.stop();
    let first = stored();
    assert_eq!(first.len(), 1);
    assert!(!sealing::is_sealed(&first[0].private_key));

    // Given a secret, the stored key is sealed at start, and keeps signing.
    let server = Server::start(
        &data,
        &[
            "--public-url",
            public_url,
            "--token-key-secret-file",
            secret,
        ],
    );
    let sealed = stored();
    assert_eq!(sealed[0].kid, first[0].kid);
    assert!(
        sealing::is_sealed(&sealed[0].private_key),
        "{:?}",
        sealed[0].private_key
    );
    assert!(!sealed[0].private_key.contains(&first[0].private_key));
    assert_eq!(
        call(&server, &before),
        200,
        "a token signed before sealing holds"
    );
    let after = own_token(&server);
    assert_eq!(call(&server, &after), 200);
    server.stop();

    // Without the secret, or with another, no server starts, and none rotates.
    for (extra, why) in [
        (vec![], "is sealed: start with the secret"),
        (vec!["--token-key-secret-file", other], "does not open"),
    ] {
        let said = refused(&extra);
        assert!(
            said.contains(why) && said.contains(&first[0].kid),
            "{extra:?}: {said}"
        );
        let rotation = cli_output(&data, &[&["sso", "rotate-key"][..], &extra].concat());
        let said = String::from_utf8_lossy(&rotation.stderr);
        assert!(
            !rotation.status.success() && said.contains(why),
            "{extra:?}: {said}"
        );
    }
    assert_eq!(stored().len(), 1, "nothing was rotated");

    // A rotation with the secret makes the new key sealed; both tokens hold.
    cli(
        &data,
        &["sso", "rotate-key", "--token-key-secret-file", secret],
    );
    let rotated = stored();
    assert_eq!(rotated.len(), 2);
    assert!(rotated
        .iter()
        .all(|key| sealing::is_sealed(&key.private_key)));
    let server = Server::start(
        &data,
        &[
            "--public-url",
            public_url,
            "--token-key-secret-file",
            secret,
        ],
    );
    assert_eq!(call(&server, &after), 200);
    let renewed = own_token(&server);
    assert_eq!(kid_of(&renewed), rotated[0].kid);
    assert_eq!(call(&server, &renewed), 200);
    server.stop();

    // A secret file that is not 32 bytes of base64 is refused.
    let short = temp.path().join("short.secret");
    write_secret(&short, &STANDARD.encode([7u8; 16]));
    let said = refused(&["--token-key-secret-file", short.to_str().unwrap()]);
    assert!(said.contains("not 32 bytes"), "{said}");

    // So is one others may read, by `serve` and `sso rotate-key` alike, before its key is
    // read: the right secret, made readable by every user.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let said = refused(&["--token-key-secret-file", secret]);
    assert!(said.contains("every user of this machine"), "{said}");
    assert!(said.contains("chmod 600"), "{said}");
    let out = cli_output(
        &data,
        &["sso", "rotate-key", "--token-key-secret-file", secret],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("every user of this machine"));
    assert_eq!(stored().len(), rotated.len(), "nothing rotated");
}

/// A secret file as an operator makes one: readable by its owner alone.
fn write_secret(path: &std::path::Path, text: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// On PostgreSQL too: a server with a secret seals the key a server without one made, a
/// second one with the same secret finds nothing left to seal, and the sealed key signs.
#[tokio::test]
async fn signing_keys_are_sealed_on_postgres_too() {
    use base64::engine::general_purpose::STANDARD;
    use crosstab_server::clock::SystemClock;
    use crosstab_server::service::sso::sealing::{self, KeySecret};
    use crosstab_server::service::sso::{signing::OwnKeys, Sso};
    let Some(url) = postgres_url() else {
        return;
    };
    let url = super::common::database_of_its_own(&url).await;
    let db = crosstab_server::store::Database::connect(&url)
        .await
        .unwrap();
    let secret = || Some(KeySecret::from_base64(&STANDARD.encode([5u8; 32])).unwrap());
    let sso = |secret| Sso::new(db.clone(), std::sync::Arc::new(SystemClock), API, secret);
    sso(None).prepare().await.unwrap();
    let made = signing_keys::all(&db).await.unwrap();
    assert!(made.len() == 1 && !sealing::is_sealed(&made[0].private_key));
    sso(secret()).prepare().await.unwrap();
    sso(secret()).prepare().await.unwrap();
    let sealed = signing_keys::all(&db).await.unwrap();
    assert_eq!(sealed.len(), 1);
    assert_eq!(sealed[0].kid, made[0].kid);
    assert!(sealing::is_sealed(&sealed[0].private_key));
    assert!(OwnKeys::from_stored(&sealed, secret().as_ref())
        .unwrap()
        .can_sign());
    assert!(
        sso(None).prepare().await.is_err(),
        "the secret is needed now"
    );
    db.close().await;
}

/// Running, a server given the secret seals a key stored unsealed since it started (by a
/// server or a rotation without the secret) before it signs with it; one without the
/// secret goes on verifying every token (its providers' and its own) though it can sign
/// none once the key is sealed.
#[tokio::test]
async fn keys_stored_unsealed_while_serving_are_sealed_and_a_server_without_the_secret_verifies() {
    use base64::engine::general_purpose::STANDARD;
    use crosstab_server::clock::SystemClock;
    use crosstab_server::service::sso::sealing::{self, KeySecret};
    use crosstab_server::service::sso::{signing, Sso, TokenError};
    let dir = tempfile::tempdir().unwrap();
    let db =
        crosstab_server::store::Database::connect(&crosstab_server::store::default_url(dir.path()))
            .await
            .unwrap();
    let secret = KeySecret::from_base64(&STANDARD.encode([6u8; 32])).unwrap();
    let sso = |secret| Sso::new(db.clone(), std::sync::Arc::new(SystemClock), API, secret);
    let (with, without) = (sso(Some(secret.clone())), sso(None));
    let all_sealed = || async {
        let keys = signing_keys::all(&db).await.unwrap();
        keys.iter().all(|key| sealing::is_sealed(&key.private_key))
    };
    // The first key is made sealed.
    with.prepare().await.unwrap();
    assert!(all_sealed().await);
    assert!(without.prepare().await.is_err(), "refused at start");
    // A key rotated in unsealed is sealed on the next load of the keys.
    let rotated = signing::generate(crosstab_server::clock::now_ms(), None).unwrap();
    signing_keys::rotate(&db, &rotated).await.unwrap();
    assert!(!all_sealed().await);
    with.changed();
    let malformed = |result: Result<_, TokenError>| matches!(result, Err(TokenError::Malformed(_)));
    assert!(malformed(with.verify_bearer("not-a-jwt").await));
    assert!(all_sealed().await);
    // The server without it loads the keys and checks tokens: not a store fault.
    without.changed();
    assert!(malformed(without.verify_bearer("not-a-jwt").await));
    db.close().await;
}

#[test]
fn the_cli_configures_providers_that_a_running_server_follows() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider = Provider::start();
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = super::support::small_data_dir(temp.path());
    let public_url = "https://crosstab.example.com";
    let server = Server::start(&data, &["--public-url", public_url]);

    // An account that does not exist is refused; so is a second provider of that name.
    let refused = cli_output(
        &data,
        &[
            "sso",
            "add-oidc",
            "--name",
            "corp",
            "--issuer",
            &provider.issuer,
            "--account",
            "nobody",
        ],
    );
    assert!(!refused.status.success());
    let added = cli_output(
        &data,
        &[
            "sso",
            "add-oidc",
            "--name",
            "corp",
            "--issuer",
            &provider.issuer,
            "--account",
            "acme",
            "--client",
            "backend",
            "--client",
            "backend",
            "--scope",
            "crosstab",
        ],
    );
    let said = String::from_utf8_lossy(&added.stderr);
    assert!(added.status.success(), "{said}");
    assert!(said.contains("3 signing keys found"), "{said}");
    let again = cli_output(
        &data,
        &[
            "sso",
            "add-oidc",
            "--name",
            "corp",
            "--issuer",
            &provider.issuer,
            "--account-claim",
            "a",
            "--allow-account",
            "acme",
        ],
    );
    assert!(!again.status.success());
    let spaced = cli_output(
        &data,
        &[
            "sso",
            "add-oidc",
            "--name",
            "corp2",
            "--issuer",
            &provider.issuer,
            "--audience",
            "other",
            "--account",
            "acme",
            "--scope",
            "read write",
        ],
    );
    assert!(!spaced.status.success());
    assert!(String::from_utf8_lossy(&spaced.stderr).contains("one scope"));
    let list = cli(&data, &["sso", "list"]);
    assert!(
        list.contains(&format!(
            "corp\toidc\t{}\t(public URL)\tacme\tbackend\tcrosstab\n",
            provider.issuer
        )),
        "{list}"
    );

    // Tokens for the public URL (the default audience) work on the running server.
    let token = rt.block_on(provider.access_token("backend", public_url));
    let client = reqwest::blocking::Client::new();
    let call = |token: &str| bearer_query(&client, &server, token);
    let response = call(&token);
    assert_eq!(response.status(), 200, "{}", response.text().unwrap());
    let own = exchanged_token(&client, &server, &token);
    assert_eq!(call(&own).status(), 200);
    cli(&data, &["sso", "rotate-key"]);
    assert_eq!(call(&own).status(), 200, "tokens of a retired key hold");

    let usage: Value = serde_json::from_str(&cli(&data, &["usage", "--format", "json"])).unwrap();
    let rows = usage.as_array().unwrap();
    let by_token: Vec<&Value> = rows.iter().filter(|r| r["idp"] == "corp").collect();
    assert_eq!(by_token.len(), 1, "{usage}");
    assert_eq!(by_token[0]["subject"], "backend");
    assert_eq!(by_token[0]["account"], "acme");
    assert_eq!(by_token[0]["calls"], 3);

    cli(&data, &["sso", "remove", "corp"]);
    assert_eq!(call(&token).status(), 401, "removed on the next request");
    assert_eq!(call(&own).status(), 401);
    assert!(!cli_output(&data, &["sso", "remove", "corp"])
        .status
        .success());
    server.stop();
}

#[tokio::test]
async fn a_saml_assertion_is_exchanged_once_for_a_token_that_is_billed_to_its_account() {
    use super::saml::{idp_assertions, IdpParams};
    use crosstab_server::service::sso::saml::SamlIdp;

    let fx = Fixture::new().await;
    // The audience: this server's public URL (no --audience given).
    let public_url = fx.services.sso.public_url().to_owned();
    let now = fx.now() / 1000;
    let signed_by = |entity_id: &str, account: &str| {
        idp_assertions(&IdpParams {
            entity_id,
            audience: &public_url,
            subject: "ada@example.org",
            account,
            now,
            lifetime: 300,
            other_accounts: &[],
        })
    };
    // One IdP key signs for acme and the other accounts the test names.
    let idp_run = idp_assertions(&IdpParams {
        entity_id: "https://idp.corp.test/saml",
        audience: &public_url,
        subject: "ada@example.org",
        account: "acme",
        now,
        lifetime: 300,
        other_accounts: &["nosuch", "north", "later"],
    });
    // Why the exchange of `case` is refused (as the log has it).
    let refusal = |case: &'static str| {
        let assertion = URL_SAFE_NO_PAD.encode(&idp_run.assertions[case]);
        let sso = std::sync::Arc::clone(&fx.services.sso);
        async move {
            match sso.exchange(SAML2_BEARER, &assertion).await {
                Err(crosstab_server::service::sso::exchange::GrantError::InvalidGrant(why)) => why,
                other => panic!("{case}: {other:?}"),
            }
        }
    };
    let known = SamlIdp::from_metadata(&idp_run.metadata).unwrap();
    let mut idp = IdentityProvider {
        name: "corp-saml".to_owned(),
        kind: IdpKind::Saml,
        issuer: known.entity_id().to_owned(),
        audience: None,
        account: AccountRule::Named {
            by: "account".to_owned(),
            allowed: vec!["acme".to_owned(), "nosuch".to_owned()],
        },
        clients: Vec::new(),
        scope: None,
        metadata: Some(known.to_stored()),
        created_at: 0,
    };
    assert!(identity_providers::add(&fx.db, &idp).await.unwrap());
    fx.services.sso.prepare().await.unwrap();
    let encoded = |case: &str| URL_SAFE_NO_PAD.encode(&idp_run.assertions[case]);

    // An assertion naming an account that does not exist yet is refused, and not used
    // up: once the account exists, it is exchanged.
    let early = &idp_run.assertions["valid_for_later"];
    if let AccountRule::Named { allowed, .. } = &mut idp.account {
        allowed.push("later".to_owned());
    }
    assert!(identity_providers::remove(&fx.db, "corp-saml")
        .await
        .unwrap());
    assert!(identity_providers::add(&fx.db, &idp).await.unwrap());
    assert!(refusal("valid_for_later").await.contains("does not exist"));
    crate::common::key(
        &fx.db,
        "later",
        &["VEC"],
        crosstab_server::keys::KeyEnv::Test,
        None,
    )
    .await;
    let (response, body) = exchange_saml(&fx, early).await;
    assert_eq!(response.status(), 200, "{body}");
    // Exchanged once, it stays used when its provider is added again under another name.
    assert!(identity_providers::remove(&fx.db, "corp-saml")
        .await
        .unwrap());
    idp.name = "corp-saml-again".to_owned();
    assert!(identity_providers::add(&fx.db, &idp).await.unwrap());
    let (response, _) = exchange_saml(&fx, early).await;
    assert_eq!(
        response.status(),
        400,
        "a replay under the provider's new name"
    );
    assert!(refusal("valid_for_later")
        .await
        .contains("exchanged before"));
    assert!(identity_providers::remove(&fx.db, "corp-saml-again")
        .await
        .unwrap());
    idp.name = "corp-saml".to_owned();
    assert!(identity_providers::add(&fx.db, &idp).await.unwrap());

    let (response, body) = exchange(&fx, SAML2_BEARER, &encoded("valid")).await;
    assert_eq!(response.status(), 200, "{body}");
    let token = body["access_token"].as_str().unwrap().to_owned();
    // Never past the assertion's NotOnOrAfter.
    assert_eq!(claims_of(&token)["exp"], now + 300);
    let (response, body) = fx.post(Some(&bearer(&token)), &query()).await;
    assert_eq!(response.status(), 200, "{body}");
    assert_eq!(
        token_bills(&fx, "acme").await,
        [("corp-saml".to_owned(), "ada@example.org".to_owned(), 1)]
    );

    // The same assertion again, and every attack or lapse: invalid_grant, nothing told.
    for case in [
        "valid",
        "unsigned",
        "tampered",
        "wrapped_advice",
        "wrapped_same_id",
        "resigned",
        "expired",
        "wrong_audience",
        "wrong_issuer",
        "not_bearer",
    ] {
        let (response, body) = exchange(&fx, SAML2_BEARER, &encoded(case)).await;
        assert_eq!(response.status(), 400, "{case}: {body}");
        assert_eq!(body, json!({"error": "invalid_grant"}), "{case}");
    }
    // Padded base64url is taken too (RFC 7522 says unpadded; some clients pad).
    let padded =
        base64::engine::general_purpose::URL_SAFE.encode(&idp_run.assertions["valid_response"]);
    let (response, body) = exchange(&fx, SAML2_BEARER, &padded).await;
    assert_eq!(response.status(), 400, "{body}");
    assert_eq!(
        body["error"], "invalid_grant",
        "the response has no account attribute"
    );

    // An attribute naming no account: refused, and no account is made.
    let (response, body) = exchange_saml(&fx, &idp_run.assertions["valid_for_nosuch"]).await;
    assert_eq!(response.status(), 400, "{body}");
    assert!(refusal("valid_for_nosuch").await.contains("does not exist"));
    assert_eq!(fx.bills().await, 1);
    // One naming an account that exists but the provider was not trusted with: refused.
    let (response, body) = exchange_saml(&fx, &idp_run.assertions["valid_for_north"]).await;
    assert_eq!(response.status(), 400, "{body}");
    assert_eq!(body, json!({"error": "invalid_grant"}));
    assert!(refusal("valid_for_north")
        .await
        .contains("may not name account"));
    // A subject with a control character can't be recorded with a bill: refused.
    assert!(refusal("control_in_name_id")
        .await
        .contains("control character"));

    // Stored metadata this server can't use (damaged in the database): the assertion may
    // be that provider's, so it is a fault to report (500), not an invalid_grant.
    sqlx::query("UPDATE identity_providers SET metadata = 'damaged' WHERE name = 'corp-saml'")
        .execute(fx.db.pool())
        .await
        .unwrap();
    fx.services.sso.changed();
    let (response, body) = exchange_saml(&fx, &idp_run.assertions["valid_for_nosuch"]).await;
    assert_eq!(response.status(), 500, "{body}");
    // An assertion claiming another issuer can't be that provider's: refused as usual.
    let other = signed_by("https://other.corp.test/saml", "acme");
    let (response, body) = exchange_saml(&fx, &other.assertions["valid"]).await;
    assert_eq!(response.status(), 400, "{body}");
    assert_eq!(body, json!({"error": "invalid_grant"}));
    assert_eq!(fx.bills().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sso_on_postgres() {
    let Some(url) = postgres_url() else {
        return;
    };
    let provider = Provider::start();
    let fx = Fixture::on(&url, tempfile::tempdir().unwrap(), &[]).await;
    let _listening = fx.services.follow_changes(None).expect("PostgreSQL pushes");
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let account = format!("sso-{unique}");
    super::common::key(
        &fx.db,
        &account,
        &["VEC"],
        crosstab_server::keys::KeyEnv::Live,
        None,
    )
    .await;
    let audience = format!("https://crosstab.test/{unique}");
    let name = format!("corp-{unique}");
    let mut idp = oidc(
        &name,
        &provider.issuer,
        &audience,
        AccountRule::Fixed(account.clone()),
    );
    idp.clients = vec!["backend".to_owned(), "other".to_owned()];
    idp.scope = Some("crosstab".to_owned());
    assert!(identity_providers::add(&fx.db, &idp).await.unwrap());
    assert!(
        !identity_providers::add(&fx.db, &idp).await.unwrap(),
        "same name"
    );
    let stored = identity_providers::list(&fx.db).await.unwrap();
    assert!(stored.contains(&idp), "{stored:?}");
    fx.services.sso.prepare().await.unwrap();

    let assertion = provider.access_token("backend", &audience).await;
    let mut status = 0;
    // The provider's addition reaches this server by NOTIFY.
    for _ in 0..100 {
        status = fx
            .post(Some(&bearer(&assertion)), &query())
            .await
            .0
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(status, 200);
    let (response, body) = exchange(&fx, JWT_BEARER, &assertion).await;
    assert_eq!(response.status(), 200, "{body}");
    let own = body["access_token"].as_str().unwrap();
    assert_eq!(fx.post(Some(&bearer(own)), &query()).await.0.status(), 200);
    assert_eq!(
        token_bills(&fx, &account).await,
        [(name.clone(), "backend".to_owned(), 2)]
    );
    // Assertion ids are kept once.
    let id = format!("_{unique}");
    let later = fx.now() + 60_000;
    assert!(
        crosstab_server::store::saml_replay::first_use(&fx.db, &name, &id, later)
            .await
            .unwrap()
    );
    assert!(
        !crosstab_server::store::saml_replay::first_use(&fx.db, &name, &id, later)
            .await
            .unwrap()
    );
    assert!(identity_providers::remove(&fx.db, &name).await.unwrap());
    let clients: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM identity_provider_clients WHERE idp = $1")
            .bind(&name)
            .fetch_one(fx.db.pool())
            .await
            .unwrap();
    assert_eq!(clients, 0, "removed with its provider");
}

#[test]
fn the_cli_trusts_a_saml_idp_by_its_metadata_and_a_running_server_exchanges_its_assertions() {
    use super::saml::{idp_assertions, IdpParams};

    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = super::support::small_data_dir(temp.path());
    let public_url = "https://crosstab.example.com";
    let server = Server::start(
        &data,
        &["--public-url", public_url, "--failed-auth-per-minute", "3"],
    );
    let params = IdpParams {
        entity_id: "https://idp.corp.test/saml",
        audience: public_url,
        subject: "ada@example.org",
        account: "acme",
        now: chrono::Utc::now().timestamp(),
        lifetime: 300,
        other_accounts: &[],
    };
    let signed = idp_assertions(&params);
    let metadata = temp.path().join("idp.xml");
    std::fs::write(&metadata, &signed.metadata).unwrap();
    let not_metadata = temp.path().join("not.xml");
    std::fs::write(&not_metadata, "<html/>").unwrap();
    let add = |file: &std::path::Path| {
        cli_output(
            &data,
            &[
                "sso",
                "add-saml",
                "--name",
                "corp-saml",
                "--metadata",
                file.to_str().unwrap(),
                "--account-attribute",
                "account",
                "--allow-account",
                "acme",
            ],
        )
    };
    assert!(!add(&not_metadata).status.success(), "not metadata");
    let added = add(&metadata);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let list = cli(&data, &["sso", "list"]);
    assert!(
        list.contains(
            "corp-saml\tsaml\thttps://idp.corp.test/saml\t(public URL)\tnamed by account: acme"
        ),
        "{list}"
    );
    // The accounts it may name change by command, and a fixed-account provider has none.
    cli(
        &data,
        &["sso", "allow-account", "--name", "corp-saml", "north"],
    );
    let list = cli(&data, &["sso", "list"]);
    assert!(list.contains("named by account: acme, north"), "{list}");
    cli(
        &data,
        &["sso", "deny-account", "--name", "corp-saml", "north"],
    );
    let list = cli(&data, &["sso", "list"]);
    assert!(list.contains("named by account: acme\t"), "{list}");
    let refused = cli_output(&data, &["sso", "allow-account", "--name", "nope", "north"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no identity provider named 'nope'"));

    let client = reqwest::blocking::Client::new();
    let assertion = URL_SAFE_NO_PAD.encode(&signed.assertions["valid"]);
    let exchange = || {
        client
            .post(server.url("/v1/oauth/token"))
            .form(&[("grant_type", SAML2_BEARER), ("assertion", &assertion)])
            .send()
            .unwrap()
    };
    let first = exchange();
    assert_eq!(first.status(), 200);
    let token = first.json::<Value>().unwrap()["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(exchange().status(), 400, "a replay");
    let answer = client
        .post(server.url("/v1/crosstab"))
        .header("Service-Engine-Authorizer", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(
            json!({"SurveyCode": "SMALL", "PopulationBaseCode": "ALL", "TargetCodes": ["WOMEN"]})
                .to_string(),
        )
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200);
    let usage = cli(&data, &["usage", "--format", "csv"]);
    assert!(
        usage.contains("acme,,,,corp-saml,ada@example.org,SMALL,1,"),
        "{usage}"
    );
    // Past its address's pace (the replay and three made-up JWTs), a SAML assertion waits
    // before it is even parsed: a good one too.
    for _ in 0..3 {
        client
            .post(server.url("/v1/oauth/token"))
            .form(&[("grant_type", JWT_BEARER), ("assertion", "not.a.jwt")])
            .send()
            .unwrap();
    }
    let fresh = URL_SAFE_NO_PAD.encode(&idp_assertions(&params).assertions["valid"]);
    let paced = client
        .post(server.url("/v1/oauth/token"))
        .form(&[("grant_type", SAML2_BEARER), ("assertion", &fresh)])
        .send()
        .unwrap();
    assert_eq!(paced.status(), 429);
    assert!(paced.headers().contains_key("retry-after"));
    server.stop();
}

#[test]
fn refused_exchanges_are_paced_per_address_like_bad_keys() {
    let temp = tempfile::tempdir().unwrap();
    let (data, _key) = super::support::small_data_dir(temp.path());
    let server = Server::start(&data, &["--failed-auth-per-minute", "3"]);
    let client = reqwest::blocking::Client::new();
    let statuses: Vec<u16> = (0..6)
        .map(|_| {
            client
                .post(server.url("/v1/oauth/token"))
                .form(&[("grant_type", JWT_BEARER), ("assertion", "not.a.jwt")])
                .send()
                .unwrap()
                .status()
                .as_u16()
        })
        .collect();
    assert_eq!(statuses[0], 400, "{statuses:?}");
    assert_eq!(*statuses.last().unwrap(), 429, "{statuses:?}");
    // The same pace as bad keys: a bad key from this address is now 429 too.
    let bad_key = client
        .post(server.url("/v1/crosstab"))
        .header("Service-Engine-Authorizer", "Bearer not.a.jwt")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(bad_key.status(), 429);
    assert!(bad_key.headers().contains_key("retry-after"));
    server.stop();
}
