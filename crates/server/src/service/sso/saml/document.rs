//! Reading untrusted SAML XML: within limits, without a DTD, and the document's shape
//! checked so that the element a signature covers is the one assertion there is.

use std::collections::HashSet;

use roxmltree::{Document, Node, ParsingOptions};

use super::SamlError;

/// SAML 2.0 assertions.
pub(super) const SAML: &str = "urn:oasis:names:tc:SAML:2.0:assertion";
/// SAML 2.0 protocol messages.
pub(super) const SAMLP: &str = "urn:oasis:names:tc:SAML:2.0:protocol";
/// SAML 2.0 metadata.
pub(super) const MD: &str = "urn:oasis:names:tc:SAML:2.0:metadata";
/// XML signatures.
pub(super) const DSIG: &str = "http://www.w3.org/2000/09/xmldsig#";

/// Elements (and texts, comments...) read at most.
const NODES_LIMIT: u32 = 10_000;
/// Elements nested at most (an assertion needs about ten).
const DEPTH_LIMIT: usize = 48;

/// The transforms and canonicalizations a signature may use: enveloped signature and
/// exclusive c14n, so that what is digested is the whole element as it stands.
const ACCEPTED_TRANSFORMS: &[&str] = &[
    "http://www.w3.org/2000/09/xmldsig#enveloped-signature",
    "http://www.w3.org/2001/10/xml-exc-c14n#",
    "http://www.w3.org/2001/10/xml-exc-c14n#WithComments",
];
const EXCLUSIVE_C14N: &str = "http://www.w3.org/2001/10/xml-exc-c14n#";

/// `bytes` as text, if within `limit`, UTF-8 and free of any document type declaration
/// (so neither reader here nor libxml2 ever expands an entity).
pub(super) fn read_text(bytes: &[u8], limit: usize) -> Result<&str, SamlError> {
    if bytes.len() > limit {
        return Err(SamlError::TooLarge {
            size: bytes.len(),
            limit,
        });
    }
    let text =
        std::str::from_utf8(bytes).map_err(|_| SamlError::Malformed("not UTF-8".to_owned()))?;
    if text.contains("<!DOCTYPE") || text.contains("<!ENTITY") {
        return Err(SamlError::Malformed(
            "a document type declaration".to_owned(),
        ));
    }
    Ok(text)
}

/// `text` parsed, within the node and depth limits.
pub(super) fn parse(text: &str) -> Result<Document<'_>, SamlError> {
    let options = ParsingOptions {
        allow_dtd: false,
        nodes_limit: NODES_LIMIT,
        ..ParsingOptions::default()
    };
    let document = Document::parse_with_options(text, options)
        .map_err(|error| SamlError::Malformed(error.to_string()))?;
    let mut stack = vec![(document.root_element(), 1)];
    while let Some((node, depth)) = stack.pop() {
        if depth > DEPTH_LIMIT {
            return Err(SamlError::Malformed(format!(
                "elements nested deeper than {DEPTH_LIMIT}"
            )));
        }
        stack.extend(
            node.children()
                .filter(Node::is_element)
                .map(|child| (child, depth + 1)),
        );
    }
    Ok(document)
}

/// Whether `node` is the element `name` of namespace `namespace`.
pub(super) fn is(node: &Node<'_, '_>, namespace: &str, name: &str) -> bool {
    node.is_element()
        && node.tag_name().name() == name
        && node.tag_name().namespace() == Some(namespace)
}

/// The child elements of `node` named `name` in `namespace`.
pub(super) fn children<'a, 'input: 'a>(
    node: Node<'a, 'input>,
    namespace: &'a str,
    name: &'a str,
) -> impl Iterator<Item = Node<'a, 'input>> + 'a {
    node.children()
        .filter(move |child| is(child, namespace, name))
}

/// The one child element of `node` named `name` in `namespace`, if exactly one.
pub(super) fn only_child<'a, 'input: 'a>(
    node: Node<'a, 'input>,
    namespace: &'a str,
    name: &'a str,
) -> Option<Node<'a, 'input>> {
    let mut found = children(node, namespace, name);
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// The text of an element of simple content: all its text children joined (so a comment
/// inside a NameID can never cut it short), `None` when it has child elements.
pub(super) fn simple_text(node: Node<'_, '_>) -> Option<String> {
    if node.children().any(|child| child.is_element()) {
        return None;
    }
    Some(
        node.children()
            .filter(Node::is_text)
            .filter_map(|child| child.text())
            .collect(),
    )
}

/// What the document is, once its shape passed the checks against signature wrapping.
#[derive(Debug)]
pub(super) struct Shape {
    /// The `ID` of the one assertion, which its own signature references.
    pub(super) assertion_id: String,
}

impl Shape {
    /// Checks that `text` is a bare assertion or a response carrying one as a direct child,
    /// that no other assertion hides anywhere, that IDs are unique, and that the assertion
    /// carries exactly one signature whose one reference is `#` + its own `ID` (a signed
    /// response's signature references the response the same way; no other signature).
    pub(super) fn of(text: &str) -> Result<Shape, SamlError> {
        let document = parse(text)?;
        let root = document.root_element();
        if !is(&root, SAML, "Assertion") && !is(&root, SAMLP, "Response") {
            return Err(SamlError::NotAnAssertion(format!(
                "the document is a {{{}}}{}",
                root.tag_name().namespace().unwrap_or(""),
                root.tag_name().name()
            )));
        }
        if document
            .descendants()
            .any(|node| is(&node, SAML, "EncryptedAssertion"))
        {
            return Err(SamlError::NotAnAssertion(
                "encrypted assertions are not accepted".to_owned(),
            ));
        }
        let assertions: Vec<Node<'_, '_>> = document
            .descendants()
            .filter(|node| is(node, SAML, "Assertion"))
            .collect();
        let assertion = match assertions.as_slice() {
            [] => {
                return Err(SamlError::NotAnAssertion(
                    "the response carries no assertion".to_owned(),
                ))
            }
            [one] => *one,
            more => {
                return Err(SamlError::Wrapped(format!(
                    "{} assertions in one document",
                    more.len()
                )))
            }
        };
        if assertion != root && assertion.parent_element() != Some(root) {
            return Err(SamlError::Wrapped(
                "the assertion is not a child of the response".to_owned(),
            ));
        }
        unique_ids(&document)?;
        let assertion_id = assertion
            .attribute("ID")
            .ok_or_else(|| SamlError::Invalid("the assertion has no ID".to_owned()))?;

        for signature in document
            .descendants()
            .filter(|node| is(node, DSIG, "Signature"))
        {
            let signed = signature.parent_element();
            if signed == Some(assertion) {
                continue;
            }
            if signed == Some(root) && root != assertion {
                check_reference(signature, root.attribute("ID"))?;
                continue;
            }
            return Err(SamlError::Wrapped(
                "a signature outside the assertion and the response".to_owned(),
            ));
        }
        let signature = {
            let mut own = children(assertion, DSIG, "Signature");
            match (own.next(), own.next()) {
                (None, _) => return Err(SamlError::Unsigned),
                (Some(one), None) => one,
                (Some(_), Some(_)) => {
                    return Err(SamlError::Wrapped(
                        "the assertion carries two signatures".to_owned(),
                    ))
                }
            }
        };
        check_reference(signature, Some(assertion_id))?;
        Ok(Shape {
            assertion_id: assertion_id.to_owned(),
        })
    }
}

/// No two elements share an id, so a reference resolves to one element only. Every
/// attribute a resolver might take for an id counts (`ID`, `Id`, `id`, `xml:id`).
fn unique_ids(document: &Document<'_>) -> Result<(), SamlError> {
    let mut seen = HashSet::new();
    let ids = document.descendants().flat_map(|node| {
        node.attributes()
            .filter(|attribute| attribute.name().eq_ignore_ascii_case("id"))
            .map(|attribute| attribute.value())
            .collect::<Vec<_>>()
    });
    for id in ids {
        if !seen.insert(id) {
            return Err(SamlError::Wrapped(format!("the ID {id:?} is used twice")));
        }
    }
    Ok(())
}

/// `signature` has exactly one reference, to `#` + `id` of the element it sits in, digested
/// after the enveloped-signature and exclusive c14n transforms only.
fn check_reference(signature: Node<'_, '_>, id: Option<&str>) -> Result<(), SamlError> {
    let signed_info = only_child(signature, DSIG, "SignedInfo")
        .ok_or_else(|| SamlError::BadSignature("no single SignedInfo".to_owned()))?;
    let canonicalization = only_child(signed_info, DSIG, "CanonicalizationMethod")
        .and_then(|method| method.attribute("Algorithm"));
    if !canonicalization.is_some_and(|algorithm| algorithm.starts_with(EXCLUSIVE_C14N)) {
        return Err(SamlError::BadSignature(format!(
            "canonicalization {canonicalization:?} is not exclusive c14n"
        )));
    }
    let reference = only_child(signed_info, DSIG, "Reference").ok_or_else(|| {
        SamlError::Wrapped("the signature does not have exactly one reference".to_owned())
    })?;
    let uri = reference.attribute("URI").unwrap_or("");
    match id {
        Some(id) if uri.strip_prefix('#') == Some(id) => {}
        _ => {
            return Err(SamlError::Wrapped(format!(
                "the signature references {uri:?}, not the element it is in ({id:?})"
            )))
        }
    }
    let transforms = only_child(reference, DSIG, "Transforms");
    for transform in transforms
        .into_iter()
        .flat_map(|transforms| transforms.children().filter(Node::is_element))
    {
        let algorithm = transform.attribute("Algorithm").unwrap_or("");
        if !is(&transform, DSIG, "Transform") || !ACCEPTED_TRANSFORMS.contains(&algorithm) {
            return Err(SamlError::BadSignature(format!(
                "the transform {algorithm:?} is not accepted"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_type_declaration_is_refused_before_parsing() {
        let laughs = r#"<?xml version="1.0"?><!DOCTYPE a [<!ENTITY l "lol"><!ENTITY l2 "&l;&l;&l;&l;">]><a>&l2;</a>"#;
        assert!(matches!(
            read_text(laughs.as_bytes(), 1024),
            Err(SamlError::Malformed(_))
        ));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!("{}{}", "<a>".repeat(5_000), "</a>".repeat(5_000));
        assert!(matches!(parse(&deep), Err(SamlError::Malformed(_))));
        let shallow = format!("{}{}", "<a>".repeat(40), "</a>".repeat(40));
        assert!(parse(&shallow).is_ok());
    }

    #[test]
    fn too_many_nodes_are_refused() {
        let wide = format!("<a>{}</a>", "<b/>".repeat(20_000));
        assert!(matches!(parse(&wide), Err(SamlError::Malformed(_))));
    }

    #[test]
    fn an_unsigned_assertion_has_no_shape_to_verify() {
        let unsigned = format!(
            r#"<saml:Assertion xmlns:saml="{SAML}" ID="_a" Version="2.0"><saml:Issuer>x</saml:Issuer></saml:Assertion>"#
        );
        assert!(matches!(Shape::of(&unsigned), Err(SamlError::Unsigned)));
    }

    #[test]
    fn an_id_used_twice_in_any_spelling_is_wrapping() {
        for twice in [r#"ID="_a""#, r#"xml:id="_a""#, r#"Id="_a""#] {
            let document = format!(
                r#"<saml:Assertion xmlns:saml="{SAML}" ID="_a" Version="2.0"><saml:Issuer {twice}>x</saml:Issuer></saml:Assertion>"#
            );
            assert!(
                matches!(Shape::of(&document), Err(SamlError::Wrapped(_))),
                "{twice}"
            );
        }
    }

    #[test]
    fn other_documents_are_not_assertions() {
        let request = format!(r#"<samlp:AuthnRequest xmlns:samlp="{SAMLP}" ID="_r"/>"#);
        assert!(matches!(
            Shape::of(&request),
            Err(SamlError::NotAnAssertion(_))
        ));
        let empty_response = format!(r#"<samlp:Response xmlns:samlp="{SAMLP}" ID="_r"/>"#);
        assert!(matches!(
            Shape::of(&empty_response),
            Err(SamlError::NotAnAssertion(_))
        ));
    }
}
