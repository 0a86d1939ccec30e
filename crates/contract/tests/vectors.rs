//! Every shared vector through the contract's validation of its body (the request's JSON
//! text): the validation errors must produce exactly the expected envelope; every other
//! vector must validate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crosstab_contract::{validate_body, vectors};

#[test]
fn validation_matches_every_vector() {
    let mut failures = Vec::new();
    for (_, vector) in vectors::load() {
        let outcome = validate_body(vector.body_text().as_bytes());
        match (vector.is_validation_error(), outcome) {
            (true, Err(error)) => {
                let actual = serde_json::to_value(error.envelope()).unwrap();
                if vector.expect.status != error.status()
                    || !vectors::matches(&vector.expect.body, &actual)
                {
                    failures.push(format!("{}: got {} {actual}", vector.name, error.status()));
                }
            }
            (true, Ok(_)) => failures.push(format!("{}: validated but should not", vector.name)),
            (false, Err(error)) => failures.push(format!("{}: rejected: {error}", vector.name)),
            (false, Ok(valid)) => {
                // Valid requests round-trip through the wire type unchanged in meaning:
                // written out, they validate to the same request.
                let text = serde_json::to_string(&valid.request).unwrap();
                assert!(!text.contains("null"), "{}", vector.name);
                let again = validate_body(text.as_bytes())
                    .unwrap_or_else(|e| panic!("{}: written out, refused: {e}", vector.name));
                assert_eq!(again, valid, "{}", vector.name);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing vectors:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
