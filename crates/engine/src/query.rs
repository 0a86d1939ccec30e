//! Answering a crosstab request from a survey.

use crosstab_contract::{CrosstabResponse, CrosstabResult, Expr, Stability, ValidRequest};

use crate::bitset::{Bitset, Summer, Tally};
use crate::error::QueryError;
use crate::eval::{LeafKey, Plan, BLOCK_WORDS};
use crate::survey::Survey;

impl Survey {
    /// Answers a validated request as a whole-survey grant would see it. The caller has
    /// already picked this survey by `SurveyCode` and checked entitlements.
    pub fn crosstab(&self, request: &ValidRequest) -> Result<CrosstabResponse, QueryError> {
        // The group first: the contract answers 403 for it before 400 for the base.
        let group = match request.request.group_filter() {
            Some(value) => Some(
                self.group_set(value)
                    .ok_or_else(|| QueryError::UnknownGroup(value.to_owned()))?,
            ),
            None => None,
        };
        let base_code = &request.request.population_base_code;
        let base = self
            .base_set(base_code)
            .ok_or_else(|| QueryError::UnknownPopulationBase(base_code.clone()))?;
        let filter: std::borrow::Cow<'_, Bitset> = match group {
            Some(group) => {
                let mut both = base.clone();
                both.and_with(group);
                std::borrow::Cow::Owned(both)
            }
            None => std::borrow::Cow::Borrowed(base),
        };
        let mut unknown_names: Vec<String> = Vec::new();
        let results = request
            .targets
            .iter()
            .map(|target| {
                let unknown = self.unknown_names(target);
                if unknown.is_empty() {
                    self.result(self.tally(target, &filter))
                } else {
                    for name in unknown {
                        if !unknown_names.contains(&name) {
                            unknown_names.push(name);
                        }
                    }
                    CrosstabResult::UNKNOWN
                }
            })
            .collect();
        Ok(CrosstabResponse::new(
            results,
            self.audience_report_units(),
            &unknown_names,
        ))
    }

    /// Count and weight of the respondents in `filter` matching `target`, in one pass:
    /// block by block, the target's words are computed, ANDed with the filter and summed.
    pub fn tally(&self, target: &Expr, filter: &Bitset) -> Tally {
        let plan = match target {
            // Composite targets are kept whole too (within the same budget as leaves):
            // a repeated expression then costs what a named code does.
            Expr::Not(_) | Expr::And(_) | Expr::Or(_) => {
                let plan = self.plan(target);
                let key = LeafKey::Target(target.to_string());
                match self
                    .leaf_sets()
                    .get_or_insert(key, || self.materialize(&plan))
                {
                    Some(set) => Plan::Cached(set),
                    None => plan,
                }
            }
            _ => self.plan(target),
        };
        let weights = self.weights();
        let mut summer = Summer::default();
        let mut block = [0u64; BLOCK_WORDS];
        for (index, filter_block) in filter.words().chunks(BLOCK_WORDS).enumerate() {
            if filter_block.iter().all(|word| *word == 0) {
                continue;
            }
            let first = index * BLOCK_WORDS;
            let out = &mut block[..filter_block.len()];
            plan.fill(first, out);
            for (word, keep) in out.iter_mut().zip(filter_block) {
                *word &= keep;
            }
            summer.add(out, weights.get(first * 64..).unwrap_or(&[]));
        }
        summer.finish()
    }

    /// The wire figures for a tally.
    pub fn result(&self, tally: Tally) -> CrosstabResult {
        CrosstabResult {
            wgt_aud: tally.weight / f64::from(self.audience_report_units()),
            resps: tally.count,
            stbl: if tally.count <= self.unstable_max_resps() {
                Stability::Unstable
            } else {
                Stability::Stable
            },
        }
    }

    /// Weighted and unweighted totals of a population base.
    pub fn base_totals(&self, code: &str) -> Option<Tally> {
        self.base_set(code)
            .map(|set| set.tally(None, self.weights()))
    }
}
