//! Answering a crosstab request from a survey.

use crosstab_contract::{CrosstabResponse, CrosstabResult, Expr, Stability, Unknown, ValidRequest};

use crate::bitset::{Bitset, Tally};
use crate::cache::SetKey;
use crate::error::QueryError;
use crate::eval::{plan, Plan, Write, BLOCK_WORDS};
use crate::survey::Survey;
use crate::weights::{add_blocks, BlockSum};

impl Survey {
    /// Answers a validated request as a whole-survey grant would see it. The caller has
    /// already picked this survey by `SurveyCode` and checked entitlements.
    pub fn crosstab(&self, request: &ValidRequest) -> Result<CrosstabResponse, QueryError> {
        self.crosstab_until(request, &|| false)
    }

    /// [`Survey::crosstab`], given up ([`QueryError::GaveUp`]) once `give_up` says so, as it
    /// is asked before each block of respondents: a query whose caller was told its
    /// deadline passed (one that waited its turn on a busy server, say) takes no core.
    pub fn crosstab_until(
        &self,
        request: &ValidRequest,
        give_up: &dyn Fn() -> bool,
    ) -> Result<CrosstabResponse, QueryError> {
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
        let mut unknown_names: Vec<Unknown> = Vec::new();
        let mut known = Vec::with_capacity(request.targets.len());
        for target in &request.targets {
            let unknown = self.unknown_names(target);
            known.push(unknown.is_empty());
            for name in unknown {
                if !unknown_names.contains(&name) {
                    unknown_names.push(name);
                }
            }
        }
        let plans: Vec<Plan<'_>> = request
            .targets
            .iter()
            .zip(&known)
            .filter(|(_, known)| **known)
            .map(|(target, _)| self.target_plan(target))
            .collect();
        // Every known target in the same pass: each block of the filter and of the
        // weights is read once for all of them.
        let mut tallies = self
            .tally_plans(&plans, base, group, give_up)
            .ok_or(QueryError::GaveUp)?
            .into_iter();
        let results = known
            .iter()
            .map(|known| match known.then(|| tallies.next()).flatten() {
                Some(tally) => self.result(tally),
                None => CrosstabResult::UNKNOWN,
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
        let plans = [self.target_plan(target)];
        // Never given up: `None` is not among the answers.
        let tallies = self.tally_plans(&plans, filter, None, &|| false);
        tallies
            .and_then(|mut tallies| tallies.pop())
            .unwrap_or(Tally {
                count: 0,
                weight: 0.0,
            })
    }

    /// A target's plan. Composite targets are kept whole too, on their second sight
    /// (within the same budget as leaves): a repeated expression then costs what a named
    /// code does, while a one-off one costs no set.
    pub(crate) fn target_plan(&self, target: &Expr) -> Plan<'_> {
        match target {
            Expr::Not(_) | Expr::And(_) | Expr::Or(_) => {
                let plan = plan(self, target);
                let key = SetKey::target(target);
                match self
                    .set_cache()
                    .get_or_admit(key, || plan.materialize(self.respondents()))
                {
                    Some(set) => Plan::Cached(set),
                    None => plan,
                }
            }
            _ => plan(self, target),
        }
    }

    /// Count and weight of the respondents in `base` (and `group`) matching each plan, in
    /// one pass: block by block, the filter's words are ANDed first (a block nobody is
    /// left in is skipped), then each target's words are computed and ANDed in, and all
    /// are summed together. `None` once `give_up`, asked before each block, says so.
    fn tally_plans(
        &self,
        plans: &[Plan<'_>],
        base: &Bitset,
        group: Option<&Bitset>,
        give_up: &dyn Fn() -> bool,
    ) -> Option<Vec<Tally>> {
        let source = self.weight_source();
        let mut sums: Vec<BlockSum<'_>> = plans.iter().map(|_| source.summer()).collect();
        let mut blocks = vec![[0u64; BLOCK_WORDS]; plans.len()];
        let finished = for_each_filter_block(base, group, give_up, |index, filter| {
            for (plan, block) in plans.iter().zip(blocks.iter_mut()) {
                fill_within(plan, index, filter, &mut block[..filter.len()]);
            }
            add_blocks(&mut sums, index, &blocks, filter.len());
        });
        finished.then(|| sums.into_iter().map(BlockSum::finish).collect())
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

/// Calls `each(index, filter)` with block `index` of `base ∧ group`, block by block in
/// order, skipping the blocks nobody is left in; stops once `give_up`, asked before each
/// block `each` would be called with, says so. Whether it went through every block.
pub(crate) fn for_each_filter_block(
    base: &Bitset,
    group: Option<&Bitset>,
    give_up: &dyn Fn() -> bool,
    mut each: impl FnMut(usize, &[u64]),
) -> bool {
    let mut filter = [0u64; BLOCK_WORDS];
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
        if give_up() {
            return false;
        }
        each(index, filter);
    }
    true
}

/// Fills `out` with block `index` of `plan`'s respondents within `filter`.
pub(crate) fn fill_within(plan: &Plan<'_>, index: usize, filter: &[u64], out: &mut [u64]) {
    out.copy_from_slice(filter);
    plan.write(index * BLOCK_WORDS, out, Write::And);
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use crosstab_contract::validate_body;

    use crate::demo::{self, DemoConfig};
    use crate::error::QueryError;
    use crate::Survey;

    #[test]
    fn a_query_is_given_up_before_the_block_its_caller_no_longer_wants() {
        let config = DemoConfig {
            respondents: 40_000,
            flags: 2,
            seed: 5,
        };
        let survey = Survey::from_bytes(&demo::compile(&config).unwrap()).unwrap();
        let request = validate_body(
            br#"{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["GENDER = 1 AND AGE >= 30","F2554"]}"#,
        )
        .unwrap();
        let whole = survey.crosstab(&request).unwrap();
        assert_eq!(survey.crosstab_until(&request, &|| false).unwrap(), whole);
        // Asked before each of the three blocks: given up at the second.
        let asked = Cell::new(0);
        let given_up = survey.crosstab_until(&request, &|| {
            asked.set(asked.get() + 1);
            asked.get() > 1
        });
        assert_eq!(given_up, Err(QueryError::GaveUp));
        assert_eq!(asked.get(), 2, "no block asked after it gave up");
        assert_eq!(
            survey.crosstab_until(&request, &|| true),
            Err(QueryError::GaveUp)
        );
    }
}
