//! What a target is called on screen: a codebook entry shows its label with its code
//! (`Women 25-54 · F2554`, `Coffee brand 01: Yes · P_COFFEE_01 = 1`); a typed expression
//! the codebook has no name for shows as typed.

use crosstab_contract::app::{Codebook, ValueEntry, VariableEntry};

/// Separates a label from its code.
pub const SEPARATOR: &str = " · ";

/// A target with the codebook's name for it, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// The target code or expression, as sent.
    pub target: String,
    /// The codebook's label for it.
    pub label: Option<String>,
}

impl Labelled {
    /// `target` with the label `codebook` gives it.
    pub fn of(codebook: Option<&Codebook>, target: &str) -> Labelled {
        Labelled {
            target: target.to_owned(),
            label: codebook.and_then(|book| label_of(book, target)),
        }
    }

    /// `Label · CODE`, or the target alone.
    pub fn display(&self) -> String {
        match &self.label {
            Some(label) => format!("{label}{SEPARATOR}{}", self.target),
            None => self.target.clone(),
        }
    }
}

/// The label of a variable's value: `Variable label: value label`, each falling back to
/// the name or the number.
pub fn value_label(variable: &VariableEntry, value: &ValueEntry) -> String {
    format!(
        "{}: {}",
        variable.label.as_deref().unwrap_or(&variable.name),
        value
            .label
            .clone()
            .unwrap_or_else(|| value.value.to_string())
    )
}

/// The target a value of a variable selects: `NAME = value`.
pub fn value_target(variable: &VariableEntry, value: &ValueEntry) -> String {
    format!("{} = {}", variable.name, value.value)
}

/// The codebook's label for `target`: a named code's label, or, for `NAME = value` of a
/// labelled value, the value's label. Other expressions have none.
fn label_of(codebook: &Codebook, target: &str) -> Option<String> {
    let target = target.trim();
    if let Some(code) = codebook.codes.iter().find(|c| c.code == target) {
        return code.label.clone();
    }
    let (name, value) = target.split_once('=')?;
    let (name, value) = (name.trim(), value.trim().parse::<f64>().ok()?);
    let variable = codebook.variables.iter().find(|v| v.name == name)?;
    let entry = variable.values.iter().find(|v| v.value == value)?;
    // A value without a label of its own, of a variable without one, names nothing.
    (entry.label.is_some() || variable.label.is_some()).then(|| value_label(variable, entry))
}

/// `n` of `noun`s in words: "1 row", "2 rows".
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::codebook;

    fn shown(target: &str) -> String {
        Labelled::of(Some(&codebook()), target).display()
    }

    #[test]
    fn codebook_entries_show_label_and_code() {
        assert_eq!(shown("F2554"), "Women, 25-54 · F2554");
        assert_eq!(shown("GENDER = 2"), "Gender: Female · GENDER = 2");
        // Spacing as typed does not matter, but the target is kept as sent.
        assert_eq!(shown("GENDER=1"), "Gender: Male · GENDER=1");
        // An unlabelled variable is named by its name.
        assert_eq!(
            shown("P_COFFEE_01 = 1"),
            "P_COFFEE_01: Drinks coffee · P_COFFEE_01 = 1"
        );
    }

    #[test]
    fn expressions_show_as_typed() {
        assert_eq!(shown("GENDER = 2 AND AGE > 30"), "GENDER = 2 AND AGE > 30");
        assert_eq!(shown("GENDER = 3"), "GENDER = 3");
        // Neither the value nor its variable is labelled: nothing to add.
        assert_eq!(shown("P_COFFEE_01 = 0"), "P_COFFEE_01 = 0");
        assert_eq!(Labelled::of(None, "F2554").display(), "F2554");
    }
}
