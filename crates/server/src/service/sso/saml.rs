//! SAML 2.0 bearer assertions (RFC 7522): an identity provider known by its metadata, and
//! the checks an assertion must pass before the token endpoint trusts what it says.
//!
//! The order matters: the document is read with limits and no DTD ([`document`]), its shape
//! is checked against signature wrapping (one assertion, signed by a reference to its own
//! unique ID), libxmlsec1 verifies the signature with the IdP's certificates (exclusive
//! canonicalization), and everything returned is read from what xmlsec says it digested,
//! never from the document as sent ([`statement`]).

mod document;
mod metadata;
mod statement;

use std::collections::BTreeMap;

use samael::crypto::{
    AllowedSignatureAlgorithm, CertificateDer, CryptoProvider, ReduceMode, XmlSec,
};

pub use metadata::SamlIdp;

/// The largest assertion document read (an IdP's assertion is a few KiB).
pub const MAX_ASSERTION_BYTES: usize = 256 * 1024;

/// How far the clocks of the IdP and this server may differ.
pub const CLOCK_SKEW_SECONDS: i64 = 60;

/// The only subject confirmation a bearer assertion may carry.
pub const BEARER: &str = "urn:oasis:names:tc:SAML:2.0:cm:bearer";

/// The `Issuer` the document's assertion claims, unverified (read within the limits of
/// every read here): only to tell which configured provider it may be from.
pub fn claimed_issuer(xml: &[u8]) -> Option<String> {
    let text = document::read_text(xml, MAX_ASSERTION_BYTES).ok()?;
    let parsed = document::parse(text).ok()?;
    let assertion = parsed
        .descendants()
        .find(|node| document::is(node, document::SAML, "Assertion"))?;
    let issuer = document::only_child(assertion, document::SAML, "Issuer")
        .and_then(document::simple_text)?;
    Some(issuer.trim().to_owned())
}

/// The signature algorithms accepted (with their digests); SHA-1 and anything weaker are not.
const ALLOWED_ALGORITHMS: &[AllowedSignatureAlgorithm] = &[
    AllowedSignatureAlgorithm::RsaSha256,
    AllowedSignatureAlgorithm::RsaSha384,
    AllowedSignatureAlgorithm::RsaSha512,
    AllowedSignatureAlgorithm::EcdsaSha256,
    AllowedSignatureAlgorithm::EcdsaSha384,
    AllowedSignatureAlgorithm::EcdsaSha512,
];

/// What a verified assertion says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedAssertion {
    /// The assertion's `ID` (for the caller's replay check).
    pub id: String,
    /// The identity provider's entity id (`Issuer`).
    pub issuer: String,
    /// The subject's `NameID`.
    pub subject: String,
    /// When the assertion stops being valid (unix seconds): the earliest of the conditions'
    /// and the bearer confirmation's `NotOnOrAfter`.
    pub not_on_or_after: i64,
    /// The attribute statements' values by attribute name.
    pub attributes: BTreeMap<String, Vec<String>>,
}

/// Why metadata or an assertion was refused (for the log; clients see only `invalid_grant`).
#[derive(Debug, thiserror::Error)]
pub enum SamlError {
    /// The document is larger than [`MAX_ASSERTION_BYTES`] (or the metadata limit).
    #[error("the document has {size} bytes, more than the {limit} read")]
    TooLarge {
        /// The document's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not well-formed XML, not UTF-8, a DTD, or past the depth or node limits.
    #[error("not acceptable XML: {0}")]
    Malformed(String),
    /// The metadata names no identity provider or no signing certificate usable here.
    #[error("unusable IdP metadata: {0}")]
    Metadata(String),
    /// The document is neither a SAML assertion nor a response carrying one.
    #[error("not a SAML 2.0 assertion: {0}")]
    NotAnAssertion(String),
    /// The assertion carries no signature of its own.
    #[error("the assertion is not signed")]
    Unsigned,
    /// The document's shape lets what is signed differ from what would be read.
    #[error("signature wrapping: {0}")]
    Wrapped(String),
    /// The signature does not verify with the IdP's certificates (tampered, signed by
    /// another key, or with an algorithm not accepted).
    #[error("the signature does not verify with the IdP's certificate: {0}")]
    BadSignature(String),
    /// The assertion was issued by someone else.
    #[error("issued by {found:?}, not the IdP {expected:?}")]
    WrongIssuer {
        /// The IdP's entity id.
        expected: String,
        /// The assertion's `Issuer`.
        found: String,
    },
    /// The assertion is not meant for this service.
    #[error("the audience restriction does not name {expected:?}")]
    WrongAudience {
        /// This service's audience.
        expected: String,
    },
    /// The assertion's `NotBefore` is still ahead.
    #[error("not valid before {not_before} (unix s)")]
    NotYetValid {
        /// The `NotBefore` (unix seconds).
        not_before: i64,
    },
    /// The assertion's (or its bearer confirmation's) `NotOnOrAfter` has passed.
    #[error("{what} expired at {not_on_or_after} (unix s)")]
    Expired {
        /// `Conditions` or `SubjectConfirmationData`.
        what: &'static str,
        /// The `NotOnOrAfter` (unix seconds).
        not_on_or_after: i64,
    },
    /// No subject confirmation by the bearer method.
    #[error("no bearer subject confirmation")]
    NotBearer,
    /// The bearer confirmation names another recipient than this token endpoint (RFC
    /// 7522 section 3: an assertion is for the endpoint it names, and only for it).
    #[error(
        "the bearer confirmation's Recipient is {found:?}, not this token endpoint {expected}"
    )]
    WrongRecipient {
        /// The token endpoint's URL.
        expected: String,
        /// The `Recipient` the confirmation names, if any.
        found: Option<String>,
    },
    /// The subject has no `NameID`.
    #[error("the subject has no NameID")]
    NoSubject,
    /// An element or attribute a bearer assertion must have is missing or unreadable.
    #[error("{0}")]
    Invalid(String),
}

/// Checks a SAML assertion from `idp` for `audience`, presented to the token endpoint at
/// `recipient` (its URL, which the bearer confirmation must name), at `now_unix`, and
/// returns what it says.
///
/// `assertion_xml` is a bare `<saml:Assertion>` or a `<samlp:Response>` carrying exactly
/// one; the assertion itself must be signed. Replay (the same `id` twice) is the caller's
/// check.
pub fn verify_assertion(
    assertion_xml: &[u8],
    idp: &SamlIdp,
    audience: &str,
    recipient: &str,
    now_unix: i64,
) -> Result<VerifiedAssertion, SamlError> {
    let text = document::read_text(assertion_xml, MAX_ASSERTION_BYTES)?;
    let shape = document::Shape::of(text)?;
    let signed = verified_content(text, idp)?;
    let expected = statement::Expected {
        audience,
        recipient,
    };
    statement::read(&signed, &shape.assertion_id, idp, &expected, now_unix)
}

/// What libxmlsec1 digested for the document's signatures, once each of them verified with
/// one of the IdP's certificates (exclusive c14n of the signed element, minus its signature).
fn verified_content(text: &str, idp: &SamlIdp) -> Result<String, SamlError> {
    let certificates: Vec<CertificateDer> = idp
        .signing_certificates()
        .iter()
        .map(|der| CertificateDer::from(der.clone()))
        .collect();
    XmlSec::reduce_xml_to_signed_with_allowed_algorithms(
        text,
        &certificates,
        ReduceMode::PreDigest,
        Some(ALLOWED_ALGORITHMS),
    )
    .map_err(|error| SamlError::BadSignature(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_past_the_limit_is_refused_before_it_is_read() {
        let idp = metadata::tests::idp();
        let huge = vec![b' '; MAX_ASSERTION_BYTES + 1];
        assert!(matches!(
            verify_assertion(
                &huge,
                &idp,
                "https://crosstab.test",
                "https://crosstab.test/v1/oauth/token",
                0
            ),
            Err(SamlError::TooLarge { .. })
        ));
    }
}
