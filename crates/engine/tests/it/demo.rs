//! The demo survey generator is deterministic and realistic enough to query.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crosstab_contract::{validate_value, Stability};
use crosstab_engine::demo::{self, DemoConfig};
use crosstab_engine::Survey;
use serde_json::json;

fn small(seed: u64) -> DemoConfig {
    DemoConfig {
        respondents: 3_000,
        flags: 40,
        seed,
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let a = demo::compile(&small(7)).unwrap();
    assert_eq!(a, demo::compile(&small(7)).unwrap());
    assert_ne!(a, demo::compile(&small(8)).unwrap());
}

#[test]
fn csv_route_and_direct_route_agree() {
    let config = small(11);
    let direct = demo::compile(&config).unwrap();
    let via_csv = crosstab_engine::import::compile(
        &demo::definition(&config),
        "survey.toml",
        demo::csv(&config).as_bytes(),
        "respondents.csv",
    )
    .unwrap();
    assert_eq!(direct, via_csv);
}

#[test]
fn default_demo_has_the_promised_shape() {
    let config = DemoConfig::default();
    assert_eq!(config.respondents, 50_000);
    let survey = Survey::from_bytes(&demo::compile(&config).unwrap()).unwrap();
    assert_eq!(survey.code(), "DEMO");
    assert_eq!(survey.respondents(), 50_000);
    assert_eq!(
        survey.group_names().collect::<Vec<_>>(),
        vec!["1", "2", "3", "4"]
    );
    assert!(survey.variable_names().count() >= 300);
    assert_eq!(survey.base_codes().count(), 6);
    assert_eq!(survey.code_names().count(), 12);
    let total = survey.base_totals("ADULTS").unwrap().weight;
    assert!((total - demo::POPULATION).abs() < 1e6, "{total}");
    let men = survey.base_totals("MEN").unwrap().weight;
    let women = survey.base_totals("WOMEN").unwrap().weight;
    assert!((men + women - total).abs() < 1.0);
    assert!(men > 0.4 * total && women > 0.4 * total);

    let request = validate_value(&json!({
        "SurveyCode": "DEMO", "PopulationBaseCode": "ADULTS", "AuthorizationGroup": "1",
        "TargetCodes": ["F2554", "AFFLUENT_F2554 AND SMOKERS AND REGION = 1"]
    }))
    .unwrap();
    let response = survey.crosstab(&request).unwrap();
    assert_eq!(response.result_code, 0);
    let [broad, narrow] = [response.results[0], response.results[1]];
    assert!(
        broad.resps > 1000 && broad.stbl == Stability::Stable,
        "{broad:?}"
    );
    assert!(narrow.resps < broad.resps);
    // Product flags correlate with demographics: not every flag has the same rate.
    let codebook = survey.codebook();
    let flags: Vec<_> = codebook
        .variables
        .iter()
        .filter(|v| v.name.starts_with("P_"))
        .collect();
    assert!(flags.len() >= 150);
    assert!(flags
        .iter()
        .all(|f| f.label.as_deref().is_some_and(|l| l.contains("brand"))));
}
