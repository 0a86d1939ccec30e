//! Survey grants: which surveys, and which authorization groups of them, an account may
//! query.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;

/// The stored group value that grants a whole survey.
pub const WHOLE_SURVEY: &str = "*";

/// One grant as written on the command line: `SURVEY` or `SURVEY:GROUP[,GROUP...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantSpec {
    /// The survey code.
    pub survey: String,
    /// The granted groups; empty for the whole survey.
    pub groups: Vec<String>,
}

/// A grant that can't be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid grant '{0}': use SURVEY or SURVEY:GROUP[,GROUP...] with names of A-Z, a-z, 0-9, '_', '.', '-'")]
pub struct GrantParseError(String);

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl FromStr for GrantSpec {
    type Err = GrantParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || GrantParseError(text.to_owned());
        let (survey, groups) = match text.split_once(':') {
            Some((survey, groups)) => (
                survey,
                groups.split(',').map(str::to_owned).collect::<Vec<_>>(),
            ),
            None => (text, Vec::new()),
        };
        // `_ALL_` is not a group: it means the whole survey, which a plain SURVEY grants.
        if !is_name(survey)
            || groups
                .iter()
                .any(|g| !is_name(g) || g == crosstab_contract::ALL_GROUPS)
        {
            return Err(error());
        }
        Ok(GrantSpec {
            survey: survey.to_owned(),
            groups,
        })
    }
}

impl fmt::Display for GrantSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.survey)?;
        if !self.groups.is_empty() {
            write!(f, ":{}", self.groups.join(","))?;
        }
        Ok(())
    }
}

/// What an account may query of one survey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SurveyGrant {
    /// Every group, and the unfiltered survey.
    Whole,
    /// Only these groups, each on its own.
    Groups(BTreeSet<String>),
}

/// All of an account's grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants(HashMap<String, SurveyGrant>);

impl Grants {
    /// Builds the grants from stored `(survey, group)` rows (`*` = whole survey).
    pub fn from_rows<I: IntoIterator<Item = (String, String)>>(rows: I) -> Grants {
        let mut grants: HashMap<String, SurveyGrant> = HashMap::new();
        for (survey, group) in rows {
            if group == WHOLE_SURVEY {
                grants.insert(survey, SurveyGrant::Whole);
                continue;
            }
            match grants
                .entry(survey)
                .or_insert_with(|| SurveyGrant::Groups(BTreeSet::new()))
            {
                SurveyGrant::Whole => {}
                SurveyGrant::Groups(groups) => {
                    groups.insert(group);
                }
            }
        }
        Grants(grants)
    }

    /// Whether the account may query `survey` filtered to `group` (`None`: every group,
    /// which needs a whole-survey grant).
    pub fn permits(&self, survey: &str, group: Option<&str>) -> bool {
        match (self.0.get(survey), group) {
            (Some(SurveyGrant::Whole), _) => true,
            (Some(SurveyGrant::Groups(groups)), Some(group)) => groups.contains(group),
            _ => false,
        }
    }

    /// The grant for one survey.
    pub fn survey(&self, survey: &str) -> Option<&SurveyGrant> {
        self.0.get(survey)
    }

    /// Every grant as the command line writes it, by survey code.
    pub fn specs(&self) -> Vec<GrantSpec> {
        let mut specs: Vec<GrantSpec> = self
            .0
            .iter()
            .map(|(survey, grant)| GrantSpec {
                survey: survey.clone(),
                groups: match grant {
                    SurveyGrant::Whole => Vec::new(),
                    SurveyGrant::Groups(groups) => groups.iter().cloned().collect(),
                },
            })
            .collect();
        specs.sort_by(|a, b| a.survey.cmp(&b.survey));
        specs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pairs: &[(&str, &str)]) -> Grants {
        Grants::from_rows(
            pairs
                .iter()
                .map(|(s, g)| ((*s).to_owned(), (*g).to_owned())),
        )
    }

    #[test]
    fn whole_grants_every_group_and_groups_only_themselves() {
        let grants = rows(&[("A", "*"), ("B", "N"), ("B", "S"), ("C", "X"), ("C", "*")]);
        assert!(grants.permits("A", None));
        assert!(grants.permits("A", Some("N")));
        assert!(grants.permits("B", Some("N")));
        assert!(grants.permits("B", Some("S")));
        assert!(!grants.permits("B", Some("E")));
        assert!(!grants.permits("B", None));
        assert!(grants.permits("C", None));
        assert!(!grants.permits("D", None));
        assert!(!grants.permits("D", Some("N")));
    }

    #[test]
    fn grant_specs_parse() {
        let whole: GrantSpec = "DEMO".parse().unwrap_or_else(|_| unreachable!());
        assert!(whole.groups.is_empty());
        let some: Result<GrantSpec, _> = "DEMO:1,2".parse();
        assert_eq!(
            some.map(|g| g.groups),
            Ok(vec!["1".to_owned(), "2".to_owned()])
        );
        for bad in [
            "",
            ":1",
            "DEMO:",
            "DEMO:1,",
            "DE MO",
            "DEMO:_ALL_",
            "DEMO:a:b",
        ] {
            assert!(bad.parse::<GrantSpec>().is_err(), "{bad}");
        }
    }
}
