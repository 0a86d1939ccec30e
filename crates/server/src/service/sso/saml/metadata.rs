//! A trusted identity provider, as its SAML 2.0 metadata describes it: the entity id and
//! the certificates it signs with.

use base64::Engine as _;
use openssl::x509::X509;

use super::document::{self, children, is, DSIG, MD};
use super::SamlError;

/// The protocol an identity provider must support.
const SAML2: &str = "urn:oasis:names:tc:SAML:2.0:protocol";

/// The largest metadata document read (aggregates of many IdPs are not accepted anyway).
const MAX_METADATA_BYTES: usize = 1024 * 1024;

/// A trusted SAML identity provider: its entity id and signing certificates.
#[derive(Debug, Clone)]
pub struct SamlIdp {
    entity_id: String,
    /// DER X.509 certificates of `KeyDescriptor`s for signing (or for any use).
    certificates: Vec<Vec<u8>>,
    /// The metadata as given, which is what is stored.
    metadata: String,
}

impl SamlIdp {
    /// The identity provider described by `xml`: an `EntityDescriptor` with an
    /// `IDPSSODescriptor` whose `KeyDescriptor`s (`use="signing"` or no `use`) carry X.509
    /// certificates.
    pub fn from_metadata(xml: &str) -> Result<SamlIdp, SamlError> {
        let text = document::read_text(xml.as_bytes(), MAX_METADATA_BYTES)?;
        let parsed = document::parse(text)?;
        let root = parsed.root_element();
        if !is(&root, MD, "EntityDescriptor") {
            return Err(SamlError::Metadata(format!(
                "the root element is {:?}, not an md:EntityDescriptor",
                root.tag_name().name()
            )));
        }
        let entity_id = root
            .attribute("entityID")
            .filter(|id| !id.trim().is_empty())
            .ok_or_else(|| SamlError::Metadata("the entity has no entityID".to_owned()))?;
        let descriptors: Vec<_> = children(root, MD, "IDPSSODescriptor")
            .filter(|descriptor| {
                descriptor
                    .attribute("protocolSupportEnumeration")
                    .is_some_and(|protocols| protocols.split_ascii_whitespace().any(|p| p == SAML2))
            })
            .collect();
        if descriptors.is_empty() {
            return Err(SamlError::Metadata(
                "the entity is not a SAML 2.0 identity provider (no IDPSSODescriptor for the \
                 SAML 2.0 protocol)"
                    .to_owned(),
            ));
        }
        let mut certificates = Vec::new();
        for key in descriptors
            .iter()
            .flat_map(|descriptor| children(*descriptor, MD, "KeyDescriptor"))
            .filter(|key| matches!(key.attribute("use"), None | Some("signing")))
        {
            for certificate in key
                .descendants()
                .filter(|node| is(node, DSIG, "X509Certificate"))
            {
                certificates.push(certificate_der(certificate.text().unwrap_or(""))?);
            }
        }
        if certificates.is_empty() {
            return Err(SamlError::Metadata(
                "no signing certificate (KeyDescriptor/KeyInfo/X509Data/X509Certificate)"
                    .to_owned(),
            ));
        }
        Ok(SamlIdp {
            entity_id: entity_id.to_owned(),
            certificates,
            metadata: xml.to_owned(),
        })
    }

    /// The identity provider's entity id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// What the database keeps (the metadata document).
    pub fn to_stored(&self) -> String {
        self.metadata.clone()
    }

    /// The identity provider from what [`SamlIdp::to_stored`] gave.
    pub fn from_stored(stored: &str) -> Result<SamlIdp, SamlError> {
        SamlIdp::from_metadata(stored)
    }

    /// The certificates (DER) a signature may verify with.
    pub(super) fn signing_certificates(&self) -> &[Vec<u8>] {
        &self.certificates
    }
}

/// The DER of a base64 `X509Certificate`, checked to be a certificate.
fn certificate_der(base64: &str) -> Result<Vec<u8>, SamlError> {
    let compact: String = base64.split_ascii_whitespace().collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|error| SamlError::Metadata(format!("a certificate is not base64: {error}")))?;
    X509::from_der(&der)
        .map_err(|error| SamlError::Metadata(format!("a certificate does not parse: {error}")))?;
    Ok(der)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A self-signed test certificate (made for these tests with openssl; its key was thrown
    /// away, so nothing can be signed with it).
    const CERTIFICATE: &str = "MIIBjjCCATWgAwIBAgIUec57U1WVt/YGl/xJDf+YpLjKzEYwCgYIKoZIzj0EAwIwHTEbMBkGA1UEAwwSY3Jvc3N0YWIgdW5pdCB0ZXN0MB4XDTI2MTEyMzEzMzYwMloXDTM2MTEyMDEzMzYwMlowHTEbMBkGA1UEAwwSY3Jvc3N0YWIgdW5pdCB0ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE+f1fKuIqPa8hHww60JWAivHIlVLojaCZsQw/iqZbIozG2OfUt9dgBUjfOXTpAGXXQL0j52rsOvJKh34hrqT1PKNTMFEwHQYDVR0OBBYEFDHlTllEXIokBDcCy3989LJWl+dyMB8GA1UdIwQYMBaAFDHlTllEXIokBDcCy3989LJWl+dyMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgGGHEQNqy4S9rCY3hWvtw/JCnPAG4u093vJOTsA/oETECIG9ZuDr3U9ndDoybMjjlV7sGuPcbZDhDryyN2UVXC/gq";

    fn metadata(key_descriptor: &str) -> String {
        format!(
            r#"<?xml version="1.0"?>
<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" xmlns:ds="http://www.w3.org/2000/09/xmldsig#" entityID="https://idp.example/saml">
  <md:IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">
    {key_descriptor}
    <md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST" Location="https://idp.example/sso"/>
  </md:IDPSSODescriptor>
</md:EntityDescriptor>"#
        )
    }

    fn key(use_: &str, certificate: &str) -> String {
        format!(
            r#"<md:KeyDescriptor {use_}><ds:KeyInfo><ds:X509Data><ds:X509Certificate>
{certificate}
</ds:X509Certificate></ds:X509Data></ds:KeyInfo></md:KeyDescriptor>"#
        )
    }

    /// An identity provider with the test certificate.
    pub(in super::super) fn idp() -> SamlIdp {
        match SamlIdp::from_metadata(&metadata(&key(r#"use="signing""#, CERTIFICATE))) {
            Ok(idp) => idp,
            Err(error) => panic!("test metadata: {error}"),
        }
    }

    #[test]
    fn metadata_gives_the_entity_id_and_the_signing_certificate() {
        let idp = idp();
        assert_eq!(idp.entity_id(), "https://idp.example/saml");
        assert_eq!(idp.signing_certificates().len(), 1);
        let stored = idp.to_stored();
        let again = SamlIdp::from_stored(&stored).map_err(|error| error.to_string());
        assert_eq!(
            again.map(|idp| (idp.entity_id, idp.certificates)),
            Ok((idp.entity_id.clone(), idp.certificates.clone()))
        );
    }

    #[test]
    fn a_key_without_use_signs_and_an_encryption_key_does_not() {
        let any_use = SamlIdp::from_metadata(&metadata(&key("", CERTIFICATE)));
        assert_eq!(any_use.map(|idp| idp.certificates.len()).ok(), Some(1));
        let encryption =
            SamlIdp::from_metadata(&metadata(&key(r#"use="encryption""#, CERTIFICATE)));
        assert!(matches!(encryption, Err(SamlError::Metadata(_))));
    }

    #[test]
    fn unusable_metadata_is_refused() {
        let not_a_certificate = metadata(&key(r#"use="signing""#, "bm90IGEgY2VydGlmaWNhdGU="));
        let not_base64 = metadata(&key(r#"use="signing""#, "***"));
        let sp = metadata("").replace("IDPSSODescriptor", "SPSSODescriptor");
        let saml1 = metadata(&key("", CERTIFICATE)).replace(
            "urn:oasis:names:tc:SAML:2.0:protocol",
            "urn:oasis:names:tc:SAML:1.1:protocol",
        );
        let no_entity_id =
            metadata(&key("", CERTIFICATE)).replace(r#"entityID="https://idp.example/saml""#, "");
        for bad in [not_a_certificate, not_base64, sp, saml1, no_entity_id] {
            assert!(
                matches!(SamlIdp::from_metadata(&bad), Err(SamlError::Metadata(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            SamlIdp::from_metadata("<md:EntityDescriptor"),
            Err(SamlError::Malformed(_))
        ));
        assert!(matches!(
            SamlIdp::from_metadata(
                "<EntitiesDescriptor xmlns=\"urn:oasis:names:tc:SAML:2.0:metadata\"/>"
            ),
            Err(SamlError::Metadata(_))
        ));
    }
}
