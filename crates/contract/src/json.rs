//! Strict JSON reading for request bodies: any object (at any depth) that names a member
//! twice is refused. `serde_json` would keep the last value silently, while a proxy or a
//! WAF in front of the service may read the first: the two must never see different
//! requests.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a body is not strict JSON.
#[derive(Debug)]
pub enum StrictJsonError {
    /// Nothing but JSON's white space (if that): no value was sent.
    Empty {
        /// How many white-space bytes there are.
        blank: usize,
    },
    /// Not JSON at all (syntax, trailing characters, nesting over serde_json's limit).
    Syntax(serde_json::Error),
    /// An object names `name` twice; `top_level` when it is the body's own object.
    DuplicateMember {
        /// The repeated member name (unescaped).
        name: String,
        /// Whether the object is the body itself rather than a nested one.
        top_level: bool,
        /// 1-based line of the repetition.
        line: usize,
        /// 1-based column of the repetition.
        column: usize,
    },
}

impl StrictJsonError {
    /// The refusal's message for a body the client knows as `what` ("The request body"),
    /// and the member to point at: a repeated one of `members` in the body's own object.
    /// Any other repeated name is the client's own, and is echoed only in part.
    pub fn refusal(&self, what: &str, members: &[&'static str]) -> (String, Option<&'static str>) {
        match self {
            StrictJsonError::Empty { blank: 0 } => (format!("{what} is empty."), None),
            StrictJsonError::Empty { .. } => {
                (format!("{what} is empty: it holds only white space."), None)
            }
            StrictJsonError::Syntax(error) => (
                format!(
                    "{what} is not valid JSON (line {}, column {}).",
                    error.line(),
                    error.column()
                ),
                None,
            ),
            StrictJsonError::DuplicateMember {
                name,
                top_level,
                line,
                column,
            } => (
                format!(
                    "{what} names the member '{}' more than once (line {line}, column \
                     {column}).",
                    crate::expr::shorten(name)
                ),
                members
                    .iter()
                    .copied()
                    .find(|member| *top_level && *member == name),
            ),
        }
    }
}

/// Parses `body` as JSON, refusing duplicate member names at any depth.
pub fn from_slice_strict(body: &[u8]) -> Result<Value, StrictJsonError> {
    if body
        .iter()
        .all(|byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
    {
        return Err(StrictJsonError::Empty { blank: body.len() });
    }
    let duplicate = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_slice(body);
    let parsed = Unique {
        duplicate: &duplicate,
        depth: 0,
    }
    .deserialize(&mut reader)
    .and_then(|value| reader.end().map(|()| value));
    match parsed {
        Ok(value) => Ok(value),
        Err(error) => Err(match duplicate.into_inner() {
            Some((name, depth)) => StrictJsonError::DuplicateMember {
                name,
                top_level: depth == 0,
                line: error.line(),
                column: error.column(),
            },
            None => StrictJsonError::Syntax(error),
        }),
    }
}

/// Builds a `Value` like serde_json's own, but remembers and refuses a repeated member.
#[derive(Clone, Copy)]
struct Unique<'a> {
    /// The first repeated member met, with the depth of its object.
    duplicate: &'a RefCell<Option<(String, usize)>>,
    /// Nesting depth of the value being read (0: the body itself).
    depth: usize,
}

impl Unique<'_> {
    fn nested(self) -> Self {
        Unique {
            depth: self.depth + 1,
            ..self
        }
    }
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, reader: D) -> Result<Value, D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        // JSON text never holds NaN or infinities; serde_json maps them to null too.
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut array = Vec::with_capacity(items.size_hint().unwrap_or(0).min(64));
        while let Some(item) = items.next_element_seed(self.nested())? {
            array.push(item);
        }
        Ok(Value::Array(array))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(name) = members.next_key::<String>()? {
            if object.contains_key(&name) {
                let error = A::Error::custom(format_args!("duplicate member '{name}'"));
                *self.duplicate.borrow_mut() = Some((name, self.depth));
                return Err(error);
            }
            let value = members.next_value_seed(self.nested())?;
            object.insert(name, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn duplicate(text: &str) -> Option<(String, bool)> {
        match from_slice_strict(text.as_bytes()) {
            Err(StrictJsonError::DuplicateMember {
                name, top_level, ..
            }) => Some((name, top_level)),
            _ => None,
        }
    }

    #[test]
    fn reads_what_serde_json_reads_when_names_are_unique() {
        for text in [
            r#"{"a":1,"b":[true,null,-2,2.5e3,"x\u00e9"],"c":{"a":{"b":18446744073709551615}}}"#,
            "[]",
            "null",
            "\"text\"",
            "-0.0",
            r#"[{"a":1},{"a":2}]"#,
        ] {
            let ours = from_slice_strict(text.as_bytes()).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
        }
    }

    #[test]
    fn refuses_a_repeated_member_at_any_depth_even_when_escaped() {
        assert_eq!(
            duplicate(r#"{"SurveyCode":"A","SurveyCode":"B"}"#),
            Some(("SurveyCode".to_owned(), true))
        );
        // The same name spelled with an escape is the same member.
        assert_eq!(
            duplicate(r#"{"SurveyCode":"A","Survey\u0043ode":"B"}"#),
            Some(("SurveyCode".to_owned(), true))
        );
        assert_eq!(
            duplicate(r#"{"x":[1,{"deep":{"k":1,"k":2}}]}"#),
            Some(("k".to_owned(), false))
        );
        assert_eq!(duplicate(r#"{"a":{"b":1},"b":2}"#), None);
    }

    /// An empty body is said to be empty; one that is there and broken, where it broke.
    #[test]
    fn an_empty_body_is_said_to_be_empty() {
        let said = |text: &str| match from_slice_strict(text.as_bytes()) {
            Err(error) => error.refusal("The request body", &[]).0,
            Ok(value) => panic!("{text:?} read as {value}"),
        };
        assert_eq!(said(""), "The request body is empty.");
        assert_eq!(
            said(" \r\n\t"),
            "The request body is empty: it holds only white space."
        );
        // A form feed is no JSON white space: that body is there, and broken.
        assert_eq!(
            said("\x0c"),
            "The request body is not valid JSON (line 1, column 1)."
        );
        assert_eq!(
            said("{"),
            "The request body is not valid JSON (line 1, column 1)."
        );
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        assert!(matches!(
            from_slice_strict(b""),
            Err(StrictJsonError::Empty { blank: 0 })
        ));
        for text in ["{", r#"{"a":1}x"#, r#"{"a":1,"b""#] {
            assert!(
                matches!(
                    from_slice_strict(text.as_bytes()),
                    Err(StrictJsonError::Syntax(_))
                ),
                "{text}"
            );
        }
        // Deeper than serde_json's recursion limit is still refused, not a stack overflow.
        let deep = "[".repeat(100_000);
        assert!(matches!(
            from_slice_strict(deep.as_bytes()),
            Err(StrictJsonError::Syntax(_))
        ));
    }
}
