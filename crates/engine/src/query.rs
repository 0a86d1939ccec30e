//! Answering a crosstab request from a survey.

use crosstab_contract::{CrosstabResponse, CrosstabResult, Expr, Stability, ValidRequest};

use crate::bitset::{Bitset, Tally};
use crate::cache::SetKey;
use crate::error::QueryError;
use crate::eval::{plan, Plan, BLOCK_WORDS};
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
        let mut unknown_names: Vec<String> = Vec::new();
        let results = request
            .targets
            .iter()
            .map(|target| {
                let unknown = self.unknown_names(target);
                if unknown.is_empty() {
                    self.result(self.tally_within(target, base, group))
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

    /// Count and weight of the respondents in `filter` matching `target`.
    pub fn tally(&self, target: &Expr, filter: &Bitset) -> Tally {
        self.tally_within(target, filter, None)
    }

    /// Count and weight of the respondents in `base` (and `group`) matching `target`, in
    /// one pass: block by block, the filter's words are ANDed first (a block nobody is
    /// left in is skipped), then the target's words are computed, ANDed in and summed.
    fn tally_within(&self, target: &Expr, base: &Bitset, group: Option<&Bitset>) -> Tally {
        let plan = match target {
            // Composite targets are kept whole too, on their second sight (within the
            // same budget as leaves): a repeated expression then costs what a named code
            // does, while a one-off one costs no set.
            Expr::Not(_) | Expr::And(_) | Expr::Or(_) => {
                let plan = plan(self, target);
                let key = SetKey::Target(target.to_string());
                match self
                    .set_cache()
                    .get_or_admit(key, || plan.materialize(self.respondents()))
                {
                    Some(set) => Plan::Cached(set),
                    None => plan,
                }
            }
            _ => plan(self, target),
        };
        let mut sum = self.weight_source().summer();
        let mut filter = [0u64; BLOCK_WORDS];
        let mut block = [0u64; BLOCK_WORDS];
        let groups = group.map(|g| g.words().chunks(BLOCK_WORDS));
        let mut groups = groups.into_iter().flatten();
        for (index, base_block) in base.words().chunks(BLOCK_WORDS).enumerate() {
            let filter = &mut filter[..base_block.len()];
            filter.copy_from_slice(base_block);
            if let Some(group_block) = groups.next() {
                for (word, keep) in filter.iter_mut().zip(group_block) {
                    *word &= keep;
                }
            } else if group.is_some() {
                filter.fill(0);
            }
            if filter.iter().all(|word| *word == 0) {
                continue;
            }
            let out = &mut block[..filter.len()];
            plan.fill(index * BLOCK_WORDS, out);
            for (word, keep) in out.iter_mut().zip(filter.iter()) {
                *word &= keep;
            }
            sum.add(index, out);
        }
        sum.finish()
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
        self.base_set(code).map(|set| self.tally(&Expr::All, set))
    }
}
