//! SAML 2.0 assertions signed by a real IdP library (npm `samlify`, `tests/saml/idp.mjs`)
//! checked by `verify_assertion`: the valid ones accepted, every attack and lapse refused
//! for its own reason.
//!
//! For end-to-end tests (the token endpoint): [`idp_assertions`] runs the IdP with
//! [`IdpParams`] and gives its metadata and its assertions by case name (`valid`,
//! `valid_response`, `valid_response_both_signed`, `comment_in_name_id`, `unsigned`,
//! `response_signed_only`, `tampered`, `wrapped_*`, `resigned`, `sha1`,
//! `hmac_with_certificate`, `expired`, `confirmation_expired`, `not_yet_valid`,
//! `wrong_audience`, `wrong_recipient`, `wrong_issuer`, `unknown_condition`, `not_bearer`, `no_name_id`).
//! Needs node and `npm ci` in `tests/saml` (scripts/setup); fails without.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crosstab_server::service::sso::saml::{
    verify_assertion, SamlError, SamlIdp, CLOCK_SKEW_SECONDS, MAX_ASSERTION_BYTES,
};

/// What the test IdP is asked to sign.
#[derive(Debug, Clone)]
pub struct IdpParams<'a> {
    /// The IdP's entity id (the assertions' `Issuer`).
    pub entity_id: &'a str,
    /// The audience the assertions name (the service's public URL).
    pub audience: &'a str,
    /// The subject's NameID.
    pub subject: &'a str,
    /// The value of the `account` attribute.
    pub account: &'a str,
    /// The issue instant (unix seconds); validity windows are relative to it.
    pub now: i64,
    /// How long the valid assertions hold (seconds).
    pub lifetime: i64,
    /// Other accounts to sign a valid assertion for with the same key
    /// (`valid_for_<account>`).
    pub other_accounts: &'a [&'a str],
}

/// What the test IdP printed.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct IdpOutput {
    /// The IdP's entity id.
    pub entity_id: String,
    /// Its metadata (EntityDescriptor with the signing certificate).
    pub metadata: String,
    /// The certificate (PEM) of the key the `resigned` case was signed with.
    pub attacker_cert: String,
    /// Assertion documents by case name.
    pub assertions: BTreeMap<String, String>,
}

/// Runs `tests/saml/idp.mjs` (a fresh IdP key each run) and returns what it signed.
pub fn idp_assertions(params: &IdpParams<'_>) -> IdpOutput {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/saml");
    assert!(
        dir.join("node_modules/samlify").is_dir(),
        "tests/saml/node_modules is missing: run scripts/setup (npm ci in tests/saml)"
    );
    let arguments = serde_json::json!({
        "entity_id": params.entity_id,
        "audience": params.audience,
        "subject": params.subject,
        "account": params.account,
        "now": params.now,
        "lifetime": params.lifetime,
        "other_accounts": params.other_accounts,
    });
    let output = Command::new("node")
        .arg("idp.mjs")
        .arg(arguments.to_string())
        .current_dir(&dir)
        .output()
        .expect("node runs (Node.js 20+ is required for the SAML tests)");
    assert!(
        output.status.success(),
        "idp.mjs failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("idp.mjs prints JSON")
}

const ENTITY_ID: &str = "https://idp.crosstab.test/saml";
const AUDIENCE: &str = "https://crosstab.test";
/// The token endpoint the IdP's bearer confirmations name (RFC 7522).
const RECIPIENT: &str = "https://crosstab.test/v1/oauth/token";
const LIFETIME: i64 = 300;

/// One IdP run shared by this module's tests, at the time it ran.
fn signed() -> &'static (IdpOutput, i64) {
    static SIGNED: OnceLock<(IdpOutput, i64)> = OnceLock::new();
    SIGNED.get_or_init(|| {
        let now = chrono::Utc::now().timestamp();
        let output = idp_assertions(&IdpParams {
            entity_id: ENTITY_ID,
            audience: AUDIENCE,
            subject: "ada@example.org",
            account: "acme",
            now,
            lifetime: LIFETIME,
            other_accounts: &[],
        });
        (output, now)
    })
}

fn idp() -> SamlIdp {
    SamlIdp::from_metadata(&signed().0.metadata).expect("samlify's metadata reads")
}

fn case(name: &str) -> &'static [u8] {
    signed().0.assertions[name].as_bytes()
}

fn verify(name: &str) -> Result<crosstab_server::service::sso::saml::VerifiedAssertion, SamlError> {
    verify_assertion(case(name), &idp(), AUDIENCE, RECIPIENT, signed().1)
}

#[test]
fn the_metadata_names_the_idp() {
    let idp = idp();
    assert_eq!(idp.entity_id(), ENTITY_ID);
    assert_eq!(signed().0.entity_id, ENTITY_ID);
    let again = SamlIdp::from_stored(&idp.to_stored()).expect("stored metadata reads");
    assert_eq!(again.entity_id(), ENTITY_ID);
    assert!(verify_assertion(case("valid"), &again, AUDIENCE, RECIPIENT, signed().1).is_ok());
}

#[test]
fn a_signed_assertion_is_accepted_with_what_it_says() {
    let (output, now) = signed();
    let verified = verify("valid").expect("the valid assertion verifies");
    assert_eq!(verified.issuer, ENTITY_ID);
    assert_eq!(verified.subject, "ada@example.org");
    assert!(
        output.assertions["valid"].contains(&format!("ID=\"{}\"", verified.id)),
        "the id is the assertion's"
    );
    assert_eq!(verified.not_on_or_after, now + LIFETIME);
    assert_eq!(verified.attributes["account"], vec!["acme".to_owned()]);
    assert_eq!(
        verified.attributes["groups"],
        vec!["analysts".to_owned(), "staff".to_owned()]
    );
    assert_eq!(verified.attributes.len(), 2);
}

#[test]
fn a_login_response_carrying_a_signed_assertion_is_accepted() {
    let verified = verify_assertion(
        case("valid_response"),
        &idp(),
        AUDIENCE,
        RECIPIENT,
        chrono::Utc::now().timestamp(),
    )
    .expect("samlify's login response verifies");
    assert_eq!(verified.subject, "ada@example.org");
    assert_eq!(verified.issuer, ENTITY_ID);
    assert!(verified.attributes.is_empty());
    // Signed twice (the response too): what is read is inside the response's signature.
    let both = verify_assertion(
        case("valid_response_both_signed"),
        &idp(),
        AUDIENCE,
        RECIPIENT,
        chrono::Utc::now().timestamp(),
    )
    .expect("a response signed as well as its assertion verifies");
    assert_eq!(both.subject, "ada@example.org");
}

#[test]
fn a_comment_cannot_shorten_the_subject() {
    // The IdP signed `ada@example.org.evil.test`; a comment after `ada@example.org` leaves
    // the signature valid (c14n drops comments) and must not make that the subject.
    let verified = verify("comment_in_name_id").expect("the signature still holds");
    assert_eq!(verified.subject, "ada@example.org.evil.test");
}

#[test]
fn attacks_are_refused() {
    assert!(matches!(verify("unsigned"), Err(SamlError::Unsigned)));
    // RFC 7522: the assertion itself must be signed; a signed response around it is not that.
    assert!(matches!(
        verify_assertion(
            case("response_signed_only"),
            &idp(),
            AUDIENCE,
            RECIPIENT,
            chrono::Utc::now().timestamp()
        ),
        Err(SamlError::Unsigned)
    ));
    // Algorithms not accepted: RSA-SHA1, and HMAC keyed by the public certificate.
    assert!(matches!(verify("sha1"), Err(SamlError::BadSignature(_))));
    assert!(matches!(
        verify("hmac_with_certificate"),
        Err(SamlError::BadSignature(_))
    ));
    assert!(matches!(
        verify("tampered"),
        Err(SamlError::BadSignature(_))
    ));
    assert!(matches!(
        verify("resigned"),
        Err(SamlError::BadSignature(_))
    ));
    for wrapped in [
        "wrapped_advice",
        "wrapped_same_id",
        "wrapped_moved_signature",
        "wrapped_response",
    ] {
        let outcome = verify(wrapped);
        assert!(
            matches!(outcome, Err(SamlError::Wrapped(_))),
            "{wrapped}: {outcome:?}"
        );
    }
}

#[test]
fn a_valid_assertion_checked_with_another_certificate_is_refused() {
    let (output, _) = signed();
    let pem_body = |pem: &str| -> String {
        pem.lines()
            .filter(|line| !line.starts_with("-----"))
            .collect()
    };
    let idp_cert = SamlIdp::from_metadata(&output.metadata).expect("metadata");
    let certificate_start = output
        .metadata
        .find("<ds:X509Certificate>")
        .expect("a cert")
        + 20;
    let certificate_end = output
        .metadata
        .find("</ds:X509Certificate>")
        .expect("a cert");
    let other = format!(
        "{}{}{}",
        &output.metadata[..certificate_start],
        pem_body(&output.attacker_cert),
        &output.metadata[certificate_end..]
    );
    let other = SamlIdp::from_metadata(&other).expect("metadata with the other certificate");
    assert_eq!(other.entity_id(), idp_cert.entity_id());
    assert!(matches!(
        verify_assertion(case("valid"), &other, AUDIENCE, RECIPIENT, signed().1),
        Err(SamlError::BadSignature(_))
    ));
    // ... and the attacker's own assertion verifies with the attacker's certificate, so
    // the refusal above is the certificate's doing.
    assert!(matches!(
        verify_assertion(case("resigned"), &other, AUDIENCE, RECIPIENT, signed().1),
        Ok(verified) if verified.subject == "mallory@evil.test"
    ));
}

#[test]
fn lapsed_and_misdirected_assertions_are_refused() {
    let outcome = |name| verify(name);
    assert!(matches!(
        outcome("expired"),
        Err(SamlError::Expired {
            what: "Conditions",
            ..
        })
    ));
    assert!(matches!(
        outcome("confirmation_expired"),
        Err(SamlError::Expired {
            what: "SubjectConfirmationData",
            ..
        })
    ));
    assert!(matches!(
        outcome("not_yet_valid"),
        Err(SamlError::NotYetValid { .. })
    ));
    assert!(matches!(
        outcome("wrong_audience"),
        Err(SamlError::WrongAudience { .. })
    ));
    assert!(matches!(
        outcome("wrong_issuer"),
        Err(SamlError::WrongIssuer { found, .. }) if found == "https://other-idp.test/saml"
    ));
    assert!(matches!(
        outcome("wrong_recipient"),
        Err(SamlError::WrongRecipient { found: Some(found), .. }) if found.ends_with("/acs")
    ));
    assert!(matches!(outcome("not_bearer"), Err(SamlError::NotBearer)));
    assert!(matches!(
        outcome("unknown_condition"),
        Err(SamlError::Invalid(message)) if message.contains("Condition")
    ));
    assert!(matches!(outcome("no_name_id"), Err(SamlError::NoSubject)));
    assert!(matches!(
        verify_assertion(
            case("valid"),
            &idp(),
            "https://elsewhere.test",
            RECIPIENT,
            signed().1
        ),
        Err(SamlError::WrongAudience { .. })
    ));
}

#[test]
fn the_window_allows_a_minute_of_clock_skew_and_no_more() {
    let (_, now) = *signed();
    let idp = idp();
    let at = |time| verify_assertion(case("valid"), &idp, AUDIENCE, RECIPIENT, time);
    // NotOnOrAfter is now + LIFETIME, NotBefore now - 5.
    assert!(at(now + LIFETIME + CLOCK_SKEW_SECONDS - 1).is_ok());
    assert!(matches!(
        at(now + LIFETIME + CLOCK_SKEW_SECONDS),
        Err(SamlError::Expired { .. })
    ));
    assert!(at(now - 5 - CLOCK_SKEW_SECONDS).is_ok());
    assert!(matches!(
        at(now - 5 - CLOCK_SKEW_SECONDS - 1),
        Err(SamlError::NotYetValid { .. })
    ));
}

#[test]
fn hostile_documents_are_refused_unread() {
    let idp = idp();
    let laughs = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;"><!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]><saml:Assertion xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion">&lol3;</saml:Assertion>"#;
    assert!(matches!(
        verify_assertion(laughs.as_bytes(), &idp, AUDIENCE, RECIPIENT, 0),
        Err(SamlError::Malformed(_))
    ));
    let deep = format!("{}{}", "<a>".repeat(20_000), "</a>".repeat(20_000));
    assert!(matches!(
        verify_assertion(deep.as_bytes(), &idp, AUDIENCE, RECIPIENT, 0),
        Err(SamlError::Malformed(_))
    ));
    let huge = format!(
        "<saml:Assertion xmlns:saml=\"urn:oasis:names:tc:SAML:2.0:assertion\">{}</saml:Assertion>",
        "x".repeat(MAX_ASSERTION_BYTES)
    );
    assert!(matches!(
        verify_assertion(huge.as_bytes(), &idp, AUDIENCE, RECIPIENT, 0),
        Err(SamlError::TooLarge { .. })
    ));
    assert!(matches!(
        verify_assertion(b"\xff\xfe<a/>", &idp, AUDIENCE, RECIPIENT, 0),
        Err(SamlError::Malformed(_))
    ));
    assert!(matches!(
        verify_assertion(b"<a", &idp, AUDIENCE, RECIPIENT, 0),
        Err(SamlError::Malformed(_))
    ));
}

#[test]
fn metadata_that_names_no_usable_idp_is_refused() {
    let metadata = &signed().0.metadata;
    let without_key = {
        let start = metadata.find("<KeyDescriptor").expect("a key descriptor");
        let end = metadata.find("</KeyDescriptor>").expect("a key descriptor") + 16;
        format!("{}{}", &metadata[..start], &metadata[end..])
    };
    assert!(matches!(
        SamlIdp::from_metadata(&without_key),
        Err(SamlError::Metadata(_))
    ));
    let encryption_only = metadata.replace(r#"use="signing""#, r#"use="encryption""#);
    assert!(matches!(
        SamlIdp::from_metadata(&encryption_only),
        Err(SamlError::Metadata(_))
    ));
    assert!(matches!(
        SamlIdp::from_metadata(&metadata.replace("IDPSSODescriptor", "SPSSODescriptor")),
        Err(SamlError::Metadata(_))
    ));
    assert!(matches!(
        SamlIdp::from_metadata("not xml"),
        Err(SamlError::Malformed(_))
    ));
}

#[test]
fn verifications_on_many_threads_agree() {
    // The server verifies on its worker threads at once; libxmlsec1 is shared by them.
    let (_, now) = *signed();
    let idp = idp();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..25)
                        .map(|round| {
                            let name = if round % 2 == 0 { "valid" } else { "tampered" };
                            verify_assertion(case(name), &idp, AUDIENCE, RECIPIENT, now).is_ok()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for worker in workers {
            let outcomes = worker.join().expect("a verifying thread");
            let expected: Vec<bool> = (0..25).map(|round| round % 2 == 0).collect();
            assert_eq!(outcomes, expected);
        }
    });
}
