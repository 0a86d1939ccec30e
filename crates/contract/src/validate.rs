//! The one validation function the server and the WASM validator share.

use std::borrow::Cow;

use serde_json::Value;

use crate::error::ApiError;
use crate::expr::Expr;
use crate::json::{from_slice_strict, StrictJsonError};
use crate::limits::{
    MAX_IDENTIFIER_CHARS, MAX_TARGET_CODES, MAX_TARGET_CODE_CHARS, MIN_TARGET_CODES,
};
use crate::wire::CrosstabRequest;

/// A request that passed validation, with its target expressions parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRequest {
    /// The request as received (unknown members dropped).
    pub request: CrosstabRequest,
    /// `TargetCodes`, parsed, in request order.
    pub targets: Vec<Expr>,
}

const IDENTIFIER_HINT: &str = "Use 1 to 64 characters from A-Z, a-z, 0-9, '_', '.' and '-'.";
const OBJECT_HINT: &str = "Send a JSON object with SurveyCode, PopulationBaseCode, TargetCodes and optionally AuthorizationGroup.";

/// Validates a raw request body: at most `MAX_BODY_BYTES` bytes (else 413) that must be a
/// UTF-8 JSON object naming no member twice at any depth.
pub fn validate_body(body: &[u8]) -> Result<ValidRequest, ApiError> {
    // The server reads no more than this, so a longer body is 413 whatever it holds.
    if body.len() > crate::limits::MAX_BODY_BYTES {
        return Err(ApiError::PayloadTooLarge);
    }
    match read_members(body) {
        Some(members) => check_request(members),
        None => read_tree(body),
    }
}

/// Reads a body that holds the request's members and nothing else straight into them,
/// without a JSON `Value` tree; `None` for any other body (an unknown member too, which
/// could repeat a name inside it), left to [`read_tree`]. Either way the same rules
/// ([`check_request`]) then judge the members.
fn read_members(body: &[u8]) -> Option<Request<'static>> {
    /// Derived structs refuse a repeated member themselves.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Members {
        #[serde(rename = "SurveyCode")]
        survey_code: Option<String>,
        #[serde(rename = "AuthorizationGroup")]
        authorization_group: Option<String>,
        #[serde(rename = "PopulationBaseCode")]
        population_base_code: Option<String>,
        #[serde(rename = "TargetCodes")]
        target_codes: Option<Vec<String>>,
    }
    // A derived struct also reads a JSON array of its fields in order. (A form feed is
    // taken for a blank here, but JSON has none, so such a body fails below.)
    if body.iter().find(|byte| !byte.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let members: Members = serde_json::from_slice(body).ok()?;
    let text =
        |text: Option<String>| text.map_or(Member::Missing, |text| Member::Text(text.into()));
    Some(Request {
        survey: text(members.survey_code),
        group: text(members.authorization_group),
        base: text(members.population_base_code),
        targets: members
            .target_codes
            .map_or(Member::Missing, |codes| Member::Items(Items::Texts(codes))),
    })
}

/// Reads any body as a JSON `Value` (refusing a member named twice at any depth) and
/// validates that.
fn read_tree(body: &[u8]) -> Result<ValidRequest, ApiError> {
    let value = from_slice_strict(body).map_err(|error| {
        let (message, field) = error.refusal("The request body", &REQUEST_MEMBERS);
        let hint = match error {
            StrictJsonError::Empty { .. } | StrictJsonError::Syntax(_) => OBJECT_HINT,
            StrictJsonError::DuplicateMember { .. } => "Send each member of a JSON object once.",
        };
        ApiError::InvalidRequest {
            field: field.map(str::to_owned),
            message,
            hint: Some(hint.to_owned()),
        }
    })?;
    validate_value(&value)
}

/// The members of a `CrosstabRequest`.
const REQUEST_MEMBERS: [&str; 4] = [
    "SurveyCode",
    "PopulationBaseCode",
    "AuthorizationGroup",
    "TargetCodes",
];

/// Validates any JSON value as a `CrosstabRequest`. The first rule broken, in the order
/// of the spec's field table, decides the error.
pub fn validate_value(value: &Value) -> Result<ValidRequest, ApiError> {
    let Value::Object(object) = value else {
        return Err(ApiError::InvalidRequest {
            field: None,
            message: format!(
                "The request body must be a JSON object, not {}.",
                kind_of(value)
            ),
            hint: Some(OBJECT_HINT.to_owned()),
        });
    };
    let member = |field: &str| Member::of(object.get(field));
    check_request(Request {
        survey: member("SurveyCode"),
        group: member("AuthorizationGroup"),
        base: member("PopulationBaseCode"),
        targets: member("TargetCodes"),
    })
}

/// The request's members, however the body was read.
struct Request<'a> {
    survey: Member<'a>,
    group: Member<'a>,
    base: Member<'a>,
    targets: Member<'a>,
}

/// One member as the rules see it.
enum Member<'a> {
    /// Absent, or `null`.
    Missing,
    /// A string: borrowed from a `Value` tree, or owned when read straight from the body.
    Text(Cow<'a, str>),
    /// An array.
    Items(Items<'a>),
    /// Any other JSON value, by its kind as a message says it ("a number", ...).
    Other(&'static str),
}

/// An array member's items.
enum Items<'a> {
    /// Read into a `Value` tree: each may be of any kind.
    Values(&'a [Value]),
    /// Read straight from the body: strings only.
    Texts(Vec<String>),
}

impl<'a> Member<'a> {
    fn of(value: Option<&'a Value>) -> Self {
        match value {
            None | Some(Value::Null) => Member::Missing,
            Some(Value::String(text)) => Member::Text(Cow::Borrowed(text)),
            Some(Value::Array(items)) => Member::Items(Items::Values(items)),
            Some(other) => Member::Other(kind_of(other)),
        }
    }

    /// The member's kind in a message ("a string", "an array", ...).
    fn kind(&self) -> &'static str {
        match self {
            Member::Missing => "null",
            Member::Text(_) => "a string",
            Member::Items(_) => "an array",
            Member::Other(kind) => kind,
        }
    }
}

/// The rules, member by member in the order of the spec's field table: the first broken
/// decides the error.
fn check_request(request: Request<'_>) -> Result<ValidRequest, ApiError> {
    let survey_code = identifier("SurveyCode", request.survey, false)?;
    let authorization_group = match request.group {
        Member::Missing => None,
        group => Some(identifier("AuthorizationGroup", group, true)?),
    };
    let population_base_code = identifier("PopulationBaseCode", request.base, false)?;
    let (target_codes, targets) = target_codes(request.targets)?;
    Ok(ValidRequest {
        request: CrosstabRequest {
            survey_code,
            authorization_group,
            population_base_code,
            target_codes,
        },
        targets,
    })
}

/// How a JSON value's type reads in a message: "a string", "an array", "null", ...
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn missing(field: &str) -> ApiError {
    ApiError::invalid(
        field,
        format!("{field} is required."),
        Some(OBJECT_HINT.to_owned()),
    )
}

/// Checks an identifier member: survey code, population base code or group.
fn identifier(field: &str, member: Member<'_>, is_group: bool) -> Result<String, ApiError> {
    let text = match member {
        Member::Missing => return Err(missing(field)),
        Member::Text(text) => text,
        other => {
            return Err(ApiError::invalid(
                field,
                format!("{field} must be a string, not {}.", other.kind()),
                Some(IDENTIFIER_HINT.to_owned()),
            ))
        }
    };
    check_identifier(field, &text, is_group)
        .map_err(|refusal| ApiError::invalid(field, refusal.message, Some(refusal.hint)))?;
    Ok(text.into_owned())
}

/// Why a member was refused: the error's message and hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub message: String,
    pub hint: String,
}

/// Checks the text of an identifier (survey code, population base code or group) named
/// `field` in messages: 1 to 64 characters from `A-Za-z0-9_.-`.
pub(crate) fn check_identifier(field: &str, text: &str, is_group: bool) -> Result<(), Refusal> {
    let refusal = |message: String| Refusal {
        message,
        hint: if is_group {
            format!("{IDENTIFIER_HINT} Use '_ALL_' or omit {field} to include every group.")
        } else {
            IDENTIFIER_HINT.to_owned()
        },
    };
    if text.is_empty() {
        return Err(refusal(format!("{field} must not be empty.")));
    }
    // Count characters, but stop early: a 10 MB string must not cost 10 MB of work twice.
    if text.chars().nth(MAX_IDENTIFIER_CHARS).is_some() {
        return Err(refusal(format!(
            "{field} is longer than {MAX_IDENTIFIER_CHARS} characters."
        )));
    }
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        let shown = if bad.is_control() {
            format!("U+{:04X}", u32::from(bad))
        } else {
            format!("'{bad}'")
        };
        return Err(refusal(format!(
            "{field} contains the character {shown}, which is not allowed."
        )));
    }
    Ok(())
}

/// Parses one target expression, `name` (such as `TargetCodes[0]`) naming it in messages:
/// not blank, at most [`MAX_TARGET_CODE_CHARS`] characters, and in the grammar. The name
/// is written out only for a refusal.
pub(crate) fn parse_target(name: &dyn std::fmt::Display, code: &str) -> Result<Expr, Refusal> {
    if code.trim().is_empty() {
        return Err(Refusal {
            message: format!("{name} is empty."),
            hint: "Give a named code such as 'F2554' or an expression such as 'GENDER = 2'."
                .to_owned(),
        });
    }
    if code.chars().nth(MAX_TARGET_CODE_CHARS).is_some() {
        return Err(Refusal {
            message: format!("{name} is longer than {MAX_TARGET_CODE_CHARS} characters."),
            hint: format!("Keep each target code to at most {MAX_TARGET_CODE_CHARS} characters; define long expressions as named codes in the survey."),
        });
    }
    Expr::parse(code).map_err(|error| Refusal {
        message: format!("{name} is not a valid target expression: {error}."),
        hint: format!(
            "At character {}: expected {}. Targets look like 'F2554', 'GENDER = 2' or '(GENDER = 2 AND AGE BETWEEN 25 AND 54) OR NOT SMOKER = 1'.",
            error.position, error.expected
        ),
    })
}

fn invalid_targets(message: String, hint: String) -> ApiError {
    ApiError::InvalidTargetCodes { message, hint }
}

fn target_codes(member: Member<'_>) -> Result<(Vec<String>, Vec<Expr>), ApiError> {
    const FIELD: &str = "TargetCodes";
    let items = match member {
        Member::Missing => return Err(missing(FIELD)),
        Member::Items(items) => items,
        other => {
            return Err(ApiError::invalid(
                FIELD,
                format!("{FIELD} must be an array of strings, not {}.", other.kind()),
                Some("Send TargetCodes as an array of 1 or 2 strings.".to_owned()),
            ))
        }
    };
    let count = match &items {
        Items::Values(values) => values.len(),
        Items::Texts(texts) => texts.len(),
    };
    if !(MIN_TARGET_CODES..=MAX_TARGET_CODES).contains(&count) {
        return Err(invalid_targets(
            format!(
                "TargetCodes must have {MIN_TARGET_CODES} or {MAX_TARGET_CODES} entries, not {count}."
            ),
            "Send one or two target codes per request; split larger queries into several requests."
                .to_owned(),
        ));
    }
    let codes = match items {
        Items::Texts(texts) => texts,
        Items::Values(values) => values
            .iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::String(code) => Ok(code.clone()),
                other => Err(ApiError::invalid(
                    FIELD,
                    format!(
                        "TargetCodes[{index}] must be a string, not {}.",
                        kind_of(other)
                    ),
                    Some("Send each target code as a string.".to_owned()),
                )),
            })
            .collect::<Result<_, _>>()?,
    };
    let targets = codes
        .iter()
        .enumerate()
        .map(|(index, code)| {
            parse_target(&format_args!("TargetCodes[{index}]"), code)
                .map_err(|refusal| invalid_targets(refusal.message, refusal.hint))
        })
        .collect::<Result<_, _>>()?;
    Ok((codes, targets))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_member_is_invalid_request_naming_it() {
        let body = br#"{"SurveyCode":"VEC","PopulationBaseCode":"ALL","TargetCodes":["WOMEN"],"SurveyCode":"OTHER"}"#;
        let error = validate_body(body).unwrap_err();
        assert_eq!(error.code(), "invalid_request");
        assert_eq!(error.status(), 400);
        let detail = error.envelope().error.unwrap();
        assert_eq!(detail.field.as_deref(), Some("SurveyCode"));
        assert!(
            detail.message.contains("'SurveyCode' more than once"),
            "{}",
            detail.message
        );
        // In an unknown nested member too: what a proxy reads must be what we read.
        let nested = br#"{"SurveyCode":"VEC","PopulationBaseCode":"ALL","TargetCodes":["WOMEN"],"Extra":{"a":1,"a":2}}"#;
        let detail = validate_body(nested).unwrap_err().envelope().error.unwrap();
        assert_eq!(detail.field, None);
        assert!(detail.message.contains("'a'"), "{}", detail.message);
    }

    /// Bodies of the request's members alone are read without a `Value` tree: escapes, a
    /// null group, members in any order, whitespace around them.
    #[test]
    fn bodies_of_members_alone_skip_the_value_tree() {
        let bodies: [&[u8]; 4] = [
            br#"{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["F2554"]}"#,
            br#" { "TargetCodes" : ["GENDER\u0020= 2", "AGE BETWEEN 18 AND 34"], "AuthorizationGroup": null, "PopulationBaseCode": "ADULTS", "SurveyCode": "DEMO" } "#,
            br#"{"Survey\u0043ode":"DEMO","AuthorizationGroup":"_ALL_","PopulationBaseCode":"ADULTS","TargetCodes":["F2554","NOT F2554"]}"#,
            b"\n\t{\"SurveyCode\":\"DEMO\",\"PopulationBaseCode\":\"ADULTS\",\"TargetCodes\":[\"F2554\"]}\r\n",
        ];
        for body in bodies {
            let fast = check_request(read_members(body).unwrap()).unwrap();
            assert_eq!(fast, read_tree(body).unwrap());
            assert_eq!(fast.request.survey_code, "DEMO");
        }
        // Read without the tree and refused by the rules, as the tree's reading refuses.
        let refused: [&[u8]; 2] = [
            br#"{"SurveyCode":"DEMO","PopulationBaseCode":"","TargetCodes":["F2554"]}"#,
            br#"{"SurveyCode":"DEMO","PopulationBaseCode":"DEMO","TargetCodes":[]}"#,
        ];
        for body in refused {
            let fast = check_request(read_members(body).unwrap());
            assert!(fast.is_err());
            assert_eq!(fast, read_tree(body));
        }
    }

    /// Any other body goes through the tree: the array form (which a derived struct would
    /// read), an unknown member (which could repeat a name inside it), a wrong type.
    #[test]
    fn other_bodies_are_read_into_the_tree() {
        let bodies: [&[u8]; 3] = [
            br#"["DEMO",null,"ADULTS",["F2554"]]"#,
            br#"{"SurveyCode":"DEMO","PopulationBaseCode":"DEMO","TargetCodes":["F2554"],"Extra":{"a":1,"a":2}}"#,
            br#"{"SurveyCode":1,"PopulationBaseCode":"DEMO","TargetCodes":["F2554"]}"#,
        ];
        for body in bodies {
            assert!(read_members(body).is_none());
            let answer = validate_body(body);
            assert!(answer.is_err());
            assert_eq!(answer, read_tree(body));
        }
    }

    mod the_two_readings_agree {
        use super::*;
        use proptest::prelude::*;
        use proptest::test_runner::TestRunner;

        fn key() -> impl Strategy<Value = String> {
            prop::sample::select(vec![
                "SurveyCode",
                "PopulationBaseCode",
                "TargetCodes",
                "AuthorizationGroup",
                r"Survey\u0043ode",
                "surveycode",
                "Extra",
            ])
            .prop_map(str::to_owned)
        }

        fn text() -> impl Strategy<Value = String> {
            prop::sample::select(vec![
                "DEMO",
                "ADULTS",
                "_ALL_",
                "a.b-c",
                "",
                "bad code",
                "\u{e9}",
                "F2554",
                "GENDER = 2",
                "AGE BETWEEN 18 AND",
                "   ",
                r"\u0047ENDER = 1",
                r"\ud800",
                "NOT (AGE < 30 OR INCOME >= 4.5) AND F2554",
            ])
            .prop_map(|text| format!("\"{text}\""))
            .boxed()
            .prop_union(
                // Longer than an identifier or a target code may be.
                prop::sample::select(vec![65_usize, 2000])
                    .prop_map(|n| format!("\"{}\"", "A".repeat(n)))
                    .boxed(),
            )
        }

        fn value() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                4 => text(),
                1 => Just("null".to_owned()),
                1 => Just("1".to_owned()),
                1 => Just("true".to_owned()),
                1 => Just(r#"{"a":1,"a":2}"#.to_owned()),
            ];
            prop_oneof![
                3 => leaf.clone(),
                2 => prop::collection::vec(leaf, 0..4).prop_map(|items| format!("[{}]", items.join(","))),
            ]
        }

        fn member() -> impl Strategy<Value = (String, String)> {
            (key(), value())
        }

        /// Mostly objects of request members, some repeated or unknown; some arrays, some
        /// with something after the object, some cut short.
        fn body() -> impl Strategy<Value = String> {
            let members = prop::collection::vec(member(), 0..6);
            (members, 0..8_u8).prop_map(|(members, shape)| {
                let joined = members
                    .iter()
                    .map(|(key, value)| format!("\"{key}\":{value}"))
                    .collect::<Vec<_>>()
                    .join(",");
                match shape {
                    // The values alone, in an array: a struct's other reading in serde.
                    0 => format!(
                        "[{}]",
                        members
                            .into_iter()
                            .map(|(_, value)| value)
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    1 => format!("{{{joined}}} x"),
                    2 => format!("{{{joined}"),
                    3 => format!(" \u{c}{{{joined}}}"),
                    _ => format!("{{{joined}}}"),
                }
            })
        }

        /// Blanks JSON allows between tokens.
        fn gap() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["", "", " ", "\n\t ", "\r\n"])
        }

        /// A request likely to be valid, for the fast path to be taken often: as an
        /// object, or as the array of its values (which a derived struct would read).
        fn request() -> impl Strategy<Value = String> {
            let group = prop_oneof![
                Just(String::new()),
                Just(r#""AuthorizationGroup":null,"#.to_owned()),
                text().prop_map(|group| format!(r#""AuthorizationGroup":{group},"#)),
            ];
            let targets = || prop::collection::vec(text(), 0..4).prop_map(|codes| codes.join(","));
            let extra = prop_oneof![
                4 => Just(""),
                1 => Just(r#","Extra":{"a":1,"a":2}"#),
                1 => Just(r#","Extra":1"#),
            ];
            let object = (group, text(), targets(), extra, gap(), gap()).prop_map(
                |(group, base, targets, extra, outer, inner)| {
                    format!(
                        r#"{outer}{{{group}"SurveyCode"{inner}:{inner}"DEMO",{inner}"PopulationBaseCode":{base}{inner},"TargetCodes":[{targets}]{extra}}}{outer}"#
                    )
                },
            );
            let array = (text(), targets())
                .prop_map(|(base, targets)| format!(r#"["DEMO",null,{base},[{targets}]]"#));
            prop_oneof![4 => object, 1 => array]
        }

        /// Any body, now and then with one byte made invalid UTF-8. (All stay under
        /// `MAX_BODY_BYTES`, which only `validate_body` checks.)
        fn bytes() -> impl Strategy<Value = Vec<u8>> {
            (
                prop_oneof![body(), request()],
                prop::option::weighted(0.1, any::<usize>()),
            )
                .prop_map(|(body, spoilt)| {
                    let mut bytes = body.into_bytes();
                    if let Some(at) = spoilt.filter(|_| !bytes.is_empty()) {
                        let at = at % bytes.len();
                        bytes[at] = 0xFF;
                    }
                    bytes
                })
        }

        /// `validate_body` answers every body as the `Value` reading alone would, and
        /// takes the way round the tree often enough for that to mean something.
        #[test]
        fn on_any_body() {
            let cases = 4000;
            // As `proptest!` would: a failing case is kept beside this file and tried first.
            let mut runner = TestRunner::new(ProptestConfig {
                source_file: Some(file!()),
                ..ProptestConfig::with_cases(cases)
            });
            let without_tree = std::cell::Cell::new(0_u32);
            runner
                .run(&bytes(), |body| {
                    if read_members(&body).is_some() {
                        without_tree.set(without_tree.get() + 1);
                    }
                    prop_assert_eq!(validate_body(&body), read_tree(&body));
                    Ok(())
                })
                .unwrap();
            assert!(
                without_tree.get() > cases / 10,
                "only {} of {cases} bodies were read without the tree",
                without_tree.get()
            );
        }
    }
}
