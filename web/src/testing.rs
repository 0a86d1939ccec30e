//! Fixtures for the app's unit tests.

use crosstab_contract::app::Codebook;
use serde_json::json;

/// A small codebook as the backend serves it: one group with its base totals, a named
/// code whose label needs CSV quoting, a labelled variable and a partly labelled one.
#[allow(clippy::unwrap_used)]
pub fn codebook() -> Codebook {
    serde_json::from_value(json!({
        "code": "DEMO", "name": "Demo", "respondents": 10, "weightTotal": 1000.0,
        "audienceReportUnits": 1000, "unstableMaxResps": 60,
        "groups": [{"value": "N"}],
        "bases": [{"code": "ADULTS", "expr": "*", "respondents": 10, "weighted": 1000.0,
                   "groupTotals": {"N": {"respondents": 4, "weighted": 250.0}}}],
        "codes": [{"code": "F2554", "label": "Women, 25-54",
                   "expr": "GENDER = 2 AND AGE BETWEEN 25 AND 54"}],
        "variables": [
            {"name": "GENDER", "label": "Gender", "distinct": 2, "min": 1.0, "max": 2.0,
             "values": [{"value": 1.0, "label": "Male"}, {"value": 2.0, "label": "Female"}]},
            {"name": "P_COFFEE_01", "distinct": 2, "min": 0.0, "max": 1.0,
             "values": [{"value": 0.0}, {"value": 1.0, "label": "Drinks coffee"}]}
        ]
    }))
    .unwrap()
}
