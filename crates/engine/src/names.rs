//! The rules for names and codes, shared by the import (which checks a definition's and
//! a file's) and the loader (which checks a compiled survey's own).

/// Whether `text` is a valid survey, base or group code.
pub fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text.chars().count() <= crosstab_contract::limits::MAX_IDENTIFIER_CHARS
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `text` cut to 40 characters (with `…`), for error messages about any input.
pub(crate) fn shorten(text: &str) -> String {
    if text.chars().count() <= 40 {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(40).collect::<String>())
    }
}

/// Whether `text` can name a variable or a named code in expressions.
pub fn is_expr_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && !["AND", "OR", "NOT", "IN", "BETWEEN"].contains(&text.to_ascii_uppercase().as_str())
}
