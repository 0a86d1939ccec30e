//! What a verified assertion says, read only from the content its signature covers, and the
//! rules of a bearer assertion for a token endpoint (RFC 7522 §3): issuer, audience,
//! validity window and bearer subject confirmation.

use std::collections::BTreeMap;

use roxmltree::Node;

use super::document::{self, children, is, only_child, simple_text, SAML, SAMLP};
use super::{SamlError, SamlIdp, VerifiedAssertion, BEARER, CLOCK_SKEW_SECONDS};

/// Who an assertion must be for: the audience it restricts itself to, and the token
/// endpoint its bearer confirmation names as `Recipient`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Expected<'a> {
    pub audience: &'a str,
    pub recipient: &'a str,
}

/// Reads the assertion `assertion_id` out of `signed` (what xmlsec verified: the assertion,
/// or a signed response around it) and checks it for `idp`, `expected` and `now`.
pub(super) fn read(
    signed: &str,
    assertion_id: &str,
    idp: &SamlIdp,
    expected: &Expected<'_>,
    now: i64,
) -> Result<VerifiedAssertion, SamlError> {
    let audience = expected.audience;
    let document = document::parse(signed)?;
    let root = document.root_element();
    let assertion = if is(&root, SAMLP, "Response") {
        only_child(root, SAML, "Assertion")
    } else {
        Some(root).filter(|root| is(root, SAML, "Assertion"))
    };
    let assertion = assertion
        .filter(|assertion| assertion.attribute("ID") == Some(assertion_id))
        .ok_or_else(|| {
            SamlError::Wrapped("what the signature covers is not the assertion".to_owned())
        })?;
    if assertion.attribute("Version") != Some("2.0") {
        return Err(SamlError::Invalid(
            "the assertion is not SAML 2.0".to_owned(),
        ));
    }

    let issuer = only_child(assertion, SAML, "Issuer")
        .and_then(simple_text)
        .unwrap_or_default();
    let issuer = issuer.trim();
    if issuer != idp.entity_id() {
        return Err(SamlError::WrongIssuer {
            expected: idp.entity_id().to_owned(),
            found: issuer.to_owned(),
        });
    }

    let conditions = only_child(assertion, SAML, "Conditions")
        .ok_or_else(|| SamlError::Invalid("the assertion has no single Conditions".to_owned()))?;
    // A condition not understood makes the assertion's validity indeterminate (SAML core
    // §2.5.1.1): refused. OneTimeUse holds anyway (the caller refuses replays).
    if let Some(unknown) = conditions.children().find(|child| {
        child.is_element()
            && !is(child, SAML, "AudienceRestriction")
            && !is(child, SAML, "OneTimeUse")
            && !is(child, SAML, "ProxyRestriction")
    }) {
        return Err(SamlError::Invalid(format!(
            "a condition not understood: {:?}",
            unknown.tag_name().name()
        )));
    }
    let window = Window::of(conditions)?;
    window.check("Conditions", now)?;
    let restrictions: Vec<_> = children(conditions, SAML, "AudienceRestriction").collect();
    // Each restriction must name us (SAML core §2.5.1.4); none at all is no restriction,
    // which RFC 7522 does not allow.
    let for_us = |restriction: &Node<'_, '_>| {
        children(*restriction, SAML, "Audience")
            .any(|name| simple_text(name).is_some_and(|name| name.trim() == audience))
    };
    if restrictions.is_empty() || !restrictions.iter().all(for_us) {
        return Err(SamlError::WrongAudience {
            expected: audience.to_owned(),
        });
    }

    let subject = only_child(assertion, SAML, "Subject").ok_or(SamlError::NoSubject)?;
    let name_id = only_child(subject, SAML, "NameID")
        .and_then(simple_text)
        .map(|name_id| name_id.trim().to_owned())
        .filter(|name_id| !name_id.is_empty())
        .ok_or(SamlError::NoSubject)?;
    let confirmed_until = bearer_confirmation(subject, expected.recipient, now)?;

    Ok(VerifiedAssertion {
        id: assertion_id.to_owned(),
        issuer: issuer.to_owned(),
        subject: name_id,
        not_on_or_after: window
            .not_on_or_after
            .map_or(confirmed_until, |until| until.min(confirmed_until)),
        attributes: attributes(assertion)?,
    })
}

/// A `NotBefore`/`NotOnOrAfter` pair (unix seconds), either optional.
#[derive(Debug, Clone, Copy)]
struct Window {
    not_before: Option<i64>,
    not_on_or_after: Option<i64>,
}

impl Window {
    fn of(element: Node<'_, '_>) -> Result<Window, SamlError> {
        Ok(Window {
            not_before: time(element, "NotBefore")?,
            not_on_or_after: time(element, "NotOnOrAfter")?,
        })
    }

    /// Whether `now` lies in the window, give or take the clock skew.
    fn check(self, what: &'static str, now: i64) -> Result<(), SamlError> {
        if let Some(not_before) = self.not_before.filter(|&at| now + CLOCK_SKEW_SECONDS < at) {
            return Err(SamlError::NotYetValid { not_before });
        }
        if let Some(not_on_or_after) = self
            .not_on_or_after
            .filter(|&at| now - CLOCK_SKEW_SECONDS >= at)
        {
            return Err(SamlError::Expired {
                what,
                not_on_or_after,
            });
        }
        Ok(())
    }
}

/// The attribute `name` of `element` as unix seconds (an `xs:dateTime`), if present.
fn time(element: Node<'_, '_>, name: &str) -> Result<Option<i64>, SamlError> {
    element
        .attribute(name)
        .map(|value| {
            chrono::DateTime::parse_from_rfc3339(value.trim())
                .map(|at| at.timestamp())
                .map_err(|_| SamlError::Invalid(format!("{name} {value:?} is not a dateTime")))
        })
        .transpose()
}

/// Until when a bearer `SubjectConfirmation` of `subject` holds: one whose data has a
/// `NotOnOrAfter` and names `recipient` (RFC 7522 requires both) and whose window contains
/// `now`. Without any bearer confirmation [`SamlError::NotBearer`]; with only unfit ones
/// the first one's error.
fn bearer_confirmation(subject: Node<'_, '_>, recipient: &str, now: i64) -> Result<i64, SamlError> {
    let mut first_error = None;
    for confirmation in children(subject, SAML, "SubjectConfirmation")
        .filter(|confirmation| confirmation.attribute("Method") == Some(BEARER))
    {
        let outcome = only_child(confirmation, SAML, "SubjectConfirmationData")
            .ok_or_else(|| SamlError::Invalid("a bearer confirmation without data".to_owned()))
            .and_then(|data| {
                let found = data.attribute("Recipient").map(str::trim);
                if found == Some(recipient) {
                    Ok(data)
                } else {
                    Err(SamlError::WrongRecipient {
                        expected: recipient.to_owned(),
                        found: found.map(str::to_owned),
                    })
                }
            })
            .and_then(Window::of)
            .and_then(|window| {
                let until = window.not_on_or_after.ok_or_else(|| {
                    SamlError::Invalid("a bearer confirmation without NotOnOrAfter".to_owned())
                })?;
                window.check("SubjectConfirmationData", now)?;
                Ok(until)
            });
        match outcome {
            Ok(until) => return Ok(until),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    Err(first_error.unwrap_or(SamlError::NotBearer))
}

/// The values of the assertion's attributes by name (attributes named twice are merged).
fn attributes(assertion: Node<'_, '_>) -> Result<BTreeMap<String, Vec<String>>, SamlError> {
    let mut attributes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for attribute in children(assertion, SAML, "AttributeStatement")
        .flat_map(|statement| children(statement, SAML, "Attribute"))
    {
        let name = attribute
            .attribute("Name")
            .ok_or_else(|| SamlError::Invalid("an Attribute without a Name".to_owned()))?;
        let values = children(attribute, SAML, "AttributeValue")
            .map(|value| {
                simple_text(value).ok_or_else(|| {
                    SamlError::Invalid(format!("the attribute {name:?} has a structured value"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        attributes
            .entry(name.to_owned())
            .or_default()
            .extend(values);
    }
    Ok(attributes)
}
