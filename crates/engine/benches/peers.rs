//! Cold queries against DuckDB and Polars: the data, the queries and crosstab's figures.
//!
//! `scripts/bench-engine-peers` runs this, then `scripts/bench_engine_peers.py` times the
//! same queries in DuckDB and Polars on the same data and checks every figure. Alone:
//! `cargo bench -p crosstab-engine --bench peers -- [--sizes 50000,5000000]
//! [--instances 12] [--out DIR]`.
//!
//! Each size gets a deterministic survey (10 integer variables, 10 flags, lognormal
//! weights with two decimals), compiled once and cached with its raw columns under
//! `$CARGO_TARGET_DIR/crosstab-bench/peers/` for the Python side. Every query is a target
//! none of whose comparisons an earlier query on the same open of the survey used (its
//! matching values differ), so the survey's caches never hold its sets: the cold case.
//! Each cold figure is the median over `--instances` such targets on each of five fresh
//! opens of the survey. Warm figures repeat one query until its sets are cached, and are
//! labelled so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crosstab_contract::{validate_value, CmpOp, CrosstabResponse, Expr, ValidRequest};
use crosstab_engine::bitset::sum_all;
use crosstab_engine::{import, Survey};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

/// An integer variable: name, smallest and largest value, share of missing answers.
struct Var {
    name: &'static str,
    lo: i32,
    hi: i32,
    missing: f64,
}

const VARS: [Var; 10] = [
    var("AGE", 18, 90, 0.0),
    var("INCOME", 1, 12, 0.05),
    var("HHSIZE", 1, 8, 0.0),
    var("EDUC", 1, 7, 0.01),
    var("MARITAL", 1, 6, 0.02),
    var("GENDER", 1, 2, 0.0),
    var("REGION", 1, 9, 0.0),
    var("KIDS", 0, 5, 0.0),
    var("EMPLOY", 1, 8, 0.03),
    var("SCORE", 0, 200, 0.03),
];
const FLAGS: usize = 10;

const fn var(name: &'static str, lo: i32, hi: i32, missing: f64) -> Var {
    Var {
        name,
        lo,
        hi,
        missing,
    }
}

fn find(name: &str) -> &'static Var {
    VARS.iter().find(|v| v.name == name).unwrap()
}

/// Every column of the survey: `None` = missing.
struct Data {
    weights: Vec<f64>,
    columns: Vec<(String, Vec<Option<i16>>)>,
}

fn generate(n: usize) -> Data {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5EED_0000 + n as u64);
    // Lognormal with two decimals, as survey weights usually are: mean about 60.
    let weights = (0..n)
        .map(|_| {
            let normal: f64 = (0..12).map(|_| rng.gen::<f64>()).sum::<f64>() - 6.0;
            ((50.0 * (0.6 * normal).exp() * 100.0).round() / 100.0).max(0.01)
        })
        .collect();
    let mut columns = Vec::new();
    for var in &VARS {
        let values = (0..n)
            .map(|_| {
                if rng.gen::<f64>() < var.missing {
                    None
                } else {
                    Some(rng.gen_range(var.lo..=var.hi) as i16)
                }
            })
            .collect();
        columns.push((var.name.to_owned(), values));
    }
    for flag in 1..=FLAGS {
        let share = 0.05 + 0.09 * flag as f64;
        let values = (0..n)
            .map(|_| {
                if rng.gen::<f64>() < 0.02 {
                    None
                } else {
                    Some(i16::from(rng.gen::<f64>() < share))
                }
            })
            .collect();
        columns.push((format!("F{flag:02}"), values));
    }
    Data { weights, columns }
}

const DEFINITION: &str = r#"code = "PEERS"
name = "Cold-query benchmark survey"
respondents = "respondents.csv"
id_column = "ID"
weight_column = "W"
audience_report_units = 1

[[population_bases]]
code = "ADULTS"
expr = "*"

[[population_bases]]
code = "WOMEN"
expr = "GENDER = 2"
"#;

/// The compiled survey and the raw columns for the Python side, made once per size.
fn prepare(dir: &Path, n: usize) -> PathBuf {
    // Named for the file layout (weight planes, two-bit columns), so a file compiled
    // before is not reused.
    let survey_path = dir.join(format!("peers-{n}-two-bits.ctxs"));
    let data_dir = dir.join(format!("data-{n}"));
    if survey_path.exists() && data_dir.join("done").exists() {
        return survey_path;
    }
    eprintln!("generating the {n}-respondent survey (once)...");
    let data = generate(n);
    let mut csv = String::with_capacity(n * 64);
    csv.push_str("ID,W");
    for (name, _) in &data.columns {
        csv.push(',');
        csv.push_str(name);
    }
    csv.push('\n');
    for row in 0..n {
        let _ = write!(csv, "r{row},{}", data.weights[row]);
        for (_, values) in &data.columns {
            match values[row] {
                Some(v) => {
                    let _ = write!(csv, ",{v}");
                }
                None => csv.push(','),
            }
        }
        csv.push('\n');
    }
    let bytes = import::compile(DEFINITION, "survey.toml", csv.as_bytes(), "r.csv").unwrap();
    drop(csv);
    std::fs::create_dir_all(&data_dir).unwrap();
    let raw: Vec<u8> = data.weights.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(data_dir.join("W.f64"), raw).unwrap();
    let mut names = Vec::new();
    for (name, values) in &data.columns {
        // -1 marks a missing answer (every value is >= 0).
        let raw: Vec<u8> = values
            .iter()
            .flat_map(|v| v.unwrap_or(-1).to_le_bytes())
            .collect();
        std::fs::write(data_dir.join(format!("{name}.i16")), raw).unwrap();
        names.push(name.clone());
    }
    std::fs::write(
        data_dir.join("columns.json"),
        serde_json::to_vec(&json!({"respondents": n, "columns": names})).unwrap(),
    )
    .unwrap();
    let temp = survey_path.with_extension("tmp");
    std::fs::write(&temp, bytes).unwrap();
    std::fs::rename(&temp, &survey_path).unwrap();
    std::fs::write(data_dir.join("done"), b"").unwrap();
    survey_path
}

/// Makes leaves whose matching values no earlier leaf of the run had.
struct Leaves {
    rng: ChaCha8Rng,
    seen: HashSet<(String, Vec<i32>)>,
}

#[derive(Clone, Copy)]
enum Kind {
    Ge,
    Gt,
    Lt,
    Le,
    Cmp,
    Eq,
    Ne,
    In,
    Between,
    Any,
}

impl Leaves {
    fn new(seed: u64) -> Leaves {
        Leaves {
            rng: ChaCha8Rng::seed_from_u64(seed),
            seen: HashSet::new(),
        }
    }

    fn leaf(&mut self, name: &str, kind: Kind) -> String {
        let var = find(name);
        for attempt in 0..10_000 {
            // A small domain runs out of fresh leaves of one kind (EDUC has six `>`
            // leaves): then another comparison will do, then any kind.
            let kind = match (attempt, kind) {
                (0..2_000, kind) => kind,
                (2_000..4_000, Kind::Ge | Kind::Gt | Kind::Lt | Kind::Le) => Kind::Cmp,
                _ => Kind::Any,
            };
            let kind = match kind {
                Kind::Any => [Kind::Cmp, Kind::Eq, Kind::Ne, Kind::In, Kind::Between]
                    [self.rng.gen_range(0..5)],
                other => other,
            };
            let mut pick = || self.rng.gen_range(var.lo..=var.hi);
            let (text, holds): (String, Box<dyn Fn(i32) -> bool>) = match kind {
                Kind::Ge => {
                    let c = pick();
                    (format!("{} >= {c}", var.name), Box::new(move |v| v >= c))
                }
                Kind::Gt => {
                    let c = pick();
                    (format!("{} > {c}", var.name), Box::new(move |v| v > c))
                }
                Kind::Lt => {
                    let c = pick();
                    (format!("{} < {c}", var.name), Box::new(move |v| v < c))
                }
                Kind::Le => {
                    let c = pick();
                    (format!("{} <= {c}", var.name), Box::new(move |v| v <= c))
                }
                Kind::Cmp => {
                    let ops = [
                        (CmpOp::Lt, "<"),
                        (CmpOp::Le, "<="),
                        (CmpOp::Gt, ">"),
                        (CmpOp::Ge, ">="),
                    ];
                    let (op, sym) = ops[pick().unsigned_abs() as usize % 4];
                    let c = pick();
                    (
                        format!("{} {sym} {c}", var.name),
                        Box::new(move |v| op.holds(f64::from(v), f64::from(c))),
                    )
                }
                Kind::Eq => {
                    let c = pick();
                    (format!("{} = {c}", var.name), Box::new(move |v| v == c))
                }
                Kind::Ne => {
                    let c = pick();
                    (format!("{} != {c}", var.name), Box::new(move |v| v != c))
                }
                Kind::In => {
                    let mut list: Vec<i32> =
                        (0..2 + pick().unsigned_abs() % 2).map(|_| pick()).collect();
                    list.sort_unstable();
                    list.dedup();
                    let text = list
                        .iter()
                        .map(i32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ");
                    (
                        format!("{} IN ({text})", var.name),
                        Box::new(move |v| list.contains(&v)),
                    )
                }
                Kind::Between => {
                    let (a, b) = (pick(), pick());
                    let (a, b) = (a.min(b), a.max(b));
                    (
                        format!("{} BETWEEN {a} AND {b}", var.name),
                        Box::new(move |v| a <= v && v <= b),
                    )
                }
                Kind::Any => unreachable!(),
            };
            let matching: Vec<i32> = (var.lo..=var.hi).filter(|v| holds(*v)).collect();
            let size = matching.len();
            if size == 0 || size == (var.hi - var.lo + 1) as usize {
                continue;
            }
            if self.seen.insert((var.name.to_owned(), matching)) {
                return text;
            }
        }
        panic!("no fresh leaf left for {name}");
    }
}

/// A query shape: label, base, and how to make a fresh target of it.
struct Shape {
    label: &'static str,
    base: &'static str,
    make: fn(&mut Leaves) -> String,
}

const SHAPES: [Shape; 8] = [
    Shape {
        label: "AGE >= a",
        base: "ADULTS",
        make: |l| l.leaf("AGE", Kind::Ge),
    },
    Shape {
        label: "AGE BETWEEN a AND b",
        base: "ADULTS",
        make: |l| l.leaf("AGE", Kind::Between),
    },
    Shape {
        label: "AGE <= a AND INCOME != b",
        base: "ADULTS",
        make: |l| {
            format!(
                "{} AND {}",
                l.leaf("AGE", Kind::Le),
                l.leaf("INCOME", Kind::Ne)
            )
        },
    },
    Shape {
        label: "HHSIZE IN (a, b) OR EDUC > c",
        base: "ADULTS",
        make: |l| {
            format!(
                "{} OR {}",
                l.leaf("HHSIZE", Kind::In),
                l.leaf("EDUC", Kind::Gt)
            )
        },
    },
    Shape {
        label: "base women, NOT AGE < a AND MARITAL != b",
        base: "WOMEN",
        make: |l| {
            format!(
                "NOT {} AND {}",
                l.leaf("AGE", Kind::Lt),
                l.leaf("MARITAL", Kind::Ne)
            )
        },
    },
    Shape {
        label: "4 clauses, IN, NOT",
        base: "ADULTS",
        make: |l| {
            format!(
                "({} AND {}) OR ({} AND NOT {})",
                l.leaf("AGE", Kind::Between),
                l.leaf("SCORE", Kind::Cmp),
                l.leaf("INCOME", Kind::In),
                l.leaf("KIDS", Kind::Any)
            )
        },
    },
    Shape {
        label: "6 clauses, IN, NOT",
        base: "ADULTS",
        make: |l| {
            format!(
                "({} AND {}) OR ({} AND {} AND NOT {}) OR {}",
                l.leaf("AGE", Kind::Cmp),
                l.leaf("SCORE", Kind::Cmp),
                l.leaf("EDUC", Kind::Any),
                l.leaf("INCOME", Kind::Any),
                l.leaf("REGION", Kind::Any),
                l.leaf("SCORE", Kind::Between)
            )
        },
    },
    Shape {
        label: "8 clauses, IN, NOT",
        base: "WOMEN",
        make: |l| {
            format!(
                "({} OR {}) AND NOT ({} OR {}) AND ({} OR {}) AND {} AND {}",
                l.leaf("AGE", Kind::Between),
                l.leaf("SCORE", Kind::Cmp),
                l.leaf("INCOME", Kind::In),
                l.leaf("KIDS", Kind::Any),
                l.leaf("HHSIZE", Kind::Any),
                l.leaf("EDUC", Kind::Any),
                l.leaf("MARITAL", Kind::Any),
                l.leaf("REGION", Kind::Any)
            )
        },
    },
];

/// The expression as a tree the Python side turns into SQL and Polars expressions.
fn ast(expr: &Expr) -> Value {
    let op = |op: &CmpOp| match op {
        CmpOp::Eq => "=",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    };
    match expr {
        Expr::All => json!({"all": true}),
        Expr::Code(name) => panic!("no named codes in this bench: {name}"),
        Expr::Compare { var, op: o, value } => json!({"cmp": [var, op(o), value]}),
        Expr::In { var, values } => json!({"in": [var, values]}),
        Expr::Between { var, low, high } => json!({"between": [var, low, high]}),
        Expr::Not(inner) => json!({"not": ast(inner)}),
        Expr::And(items) => json!({"and": items.iter().map(ast).collect::<Vec<_>>()}),
        Expr::Or(items) => json!({"or": items.iter().map(ast).collect::<Vec<_>>()}),
    }
}

/// Each target's figures as the timed answer gave them, with its expression tree for the
/// peers to run: the figures the peers check are the ones the bench timed.
fn figures(response: &CrosstabResponse, targets: &[String]) -> Vec<Value> {
    // Units of 1: `WgtAud` is the weighted sum itself, not divided.
    assert_eq!(response.audience_report_units, 1);
    assert_eq!(response.results.len(), targets.len());
    targets
        .iter()
        .zip(&response.results)
        .map(|(target, result)| {
            json!({
                "target": target, "ast": ast(&Expr::parse(target).unwrap()),
                "count": result.resps, "weight": result.wgt_aud,
            })
        })
        .collect()
}

fn request(base: &str, targets: &[String]) -> ValidRequest {
    validate_value(
        &json!({"SurveyCode": "PEERS", "PopulationBaseCode": base, "TargetCodes": targets}),
    )
    .unwrap()
}

/// Median of `f` over enough runs to fill about `budget` (at least 5).
fn median(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 5 || (start.elapsed() < budget && times.len() < 100_000) {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

/// How long each warm figure is measured: `CROSSTAB_BENCH_WARM_MS`, default 300 (0 for
/// profiling the cold queries alone).
fn warm_budget() -> Duration {
    let ms = std::env::var("CROSSTAB_BENCH_WARM_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    Duration::from_millis(ms)
}

/// The median and quartiles of `values` (nearest rank).
fn quartiles(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.25), at(0.75))
}

/// Fresh opens of the survey the cold figures are measured on.
const COLD_OPENS: u64 = 5;

/// Makes `survey` as warm as a server's: its bases and every column's pages, each column
/// once through the engine with leaves no query uses afterwards; the targets stay cold.
fn warm_up(survey: &Survey, leaves: &mut Leaves) {
    for base in ["ADULTS", "WOMEN"] {
        black_box(survey.base_totals(base));
    }
    let last = survey.respondents() - 1;
    for column in survey
        .variable_names()
        .map(str::to_owned)
        .collect::<Vec<_>>()
    {
        black_box(survey.value(&column, last));
    }
    for var in &VARS {
        let warmup = request("ADULTS", &[leaves.leaf(var.name, Kind::Any)]);
        black_box(survey.crosstab(&warmup).unwrap());
    }
}

fn median_of(values: &[f64]) -> f64 {
    quartiles(values).0
}

fn run_size(dir: &Path, n: usize, instances: usize) -> Value {
    let path = prepare(dir, n);
    let survey = Survey::open(&path).unwrap();
    let weights = survey.weights();
    let read_us = median(Duration::from_secs(1), || {
        black_box(sum_all(black_box(weights)));
    })
    .as_secs_f64()
        * 1e6;
    println!("\n{n} respondents; one read of the weight column: {read_us:.1} µs");
    // Cold: every shape's never-seen targets, then the two-target requests, back to back
    // on each of several fresh opens of the survey, warmed as a server's would be. This
    // host stalls a request now and then (100-400 µs), most after a spell of other work
    // (a warm figure's loop), so one open's dozen requests give a median that swings.
    let mut cold = vec![Vec::new(); SHAPES.len()];
    let mut queries = vec![Vec::new(); SHAPES.len()];
    let (mut two, mut two_queries) = (Vec::new(), Vec::new());
    for open in 0..COLD_OPENS {
        let survey = Survey::open(&path).unwrap();
        let mut leaves = Leaves::new(42 + open);
        warm_up(&survey, &mut leaves);
        for (shape, (cold, queries)) in SHAPES.iter().zip(cold.iter_mut().zip(&mut queries)) {
            for _ in 0..instances {
                let target = (shape.make)(&mut leaves);
                let req = request(shape.base, std::slice::from_ref(&target));
                let start = Instant::now();
                let response = black_box(survey.crosstab(&req).unwrap());
                let us = start.elapsed().as_secs_f64() * 1e6;
                cold.push(us);
                let mut figures = figures(&response, std::slice::from_ref(&target)).remove(0);
                figures["cold_us"] = json!(us);
                queries.push(figures);
            }
        }
        for _ in 0..instances {
            let targets = [(SHAPES[2].make)(&mut leaves), (SHAPES[3].make)(&mut leaves)];
            let req = request("ADULTS", &targets);
            let start = Instant::now();
            let response = black_box(survey.crosstab(&req).unwrap());
            two.push(start.elapsed().as_secs_f64() * 1e6);
            two_queries.push(figures(&response, &targets));
        }
    }
    let mut shapes = Vec::new();
    for ((shape, cold), queries) in SHAPES.iter().zip(&cold).zip(queries) {
        // Warm: one of its targets repeated until its sets are cached.
        let warm_target = queries[0]["target"].as_str().unwrap().to_owned();
        let warm_req = request(shape.base, &[warm_target]);
        let warm_us = median(warm_budget(), || {
            black_box(survey.crosstab(&warm_req).unwrap());
        })
        .as_secs_f64()
            * 1e6;
        let (cold_us, low, high) = quartiles(cold);
        println!(
            "  {:<44} cold {:>9.1} µs (quartiles {low:.1}-{high:.1}; {:.2}x the weight read)   warm {:>9.1} µs",
            shape.label,
            cold_us,
            cold_us / read_us,
            warm_us
        );
        shapes.push(json!({
            "label": shape.label, "base": shape.base, "queries": queries,
            "cold_us": cold_us, "cold_quartiles_us": [low, high], "warm_us": warm_us,
        }));
    }
    let (two_us, low, high) = quartiles(&two);
    println!(
        "  two fresh targets in one request (shapes 3 and 4): cold {two_us:.1} µs (quartiles {low:.1}-{high:.1})"
    );
    println!(
        "  (cold: medians of {} never-seen targets per shape, {instances} on each of {COLD_OPENS} fresh opens)",
        instances * COLD_OPENS as usize
    );
    json!({
        "respondents": n,
        "data_dir": dir.join(format!("data-{n}")),
        "weight_read_us": read_us,
        "two_targets_cold_us": two_us,
        "two_targets_quartiles_us": [low, high],
        "two_targets": two_queries,
        "shapes": shapes,
    })
}

/// `--cold-requests FILE --compiled PATH`: the native side of `scripts/bench-npm-cold.mjs`.
/// Loads the compiled survey from bytes (as the npm package does), rehearses the list on
/// another survey, answers the warm-up requests, then each request once (never-seen
/// targets: cold), and prints one JSON line:
/// median µs of validation plus crosstab and of crosstab alone, and every response.
/// With `--serve`, it answers the list once on a fresh survey for each line it reads
/// and prints that pass's medians (`us`, `engineUs`) on a line of their own, until its
/// input ends: so another process can take turns with it pass by pass.
///
/// With `--passes N`, it also answers the list on `N` more fresh surveys in the same
/// process and adds each pass's median of validation plus crosstab (`passesUs`, the
/// figure Node's is compared with) and of crosstab alone (`passesEngineUs`): the native
/// figures once the process has settled, as Node's is after its settling passes.
fn cold_requests(requests: &Path, compiled: &Path, passes: usize, serve: bool) {
    let bytes = std::fs::read(compiled).unwrap();
    let input: Value = serde_json::from_slice(&std::fs::read(requests).unwrap()).unwrap();
    let warmup = input["warmup"].as_array().unwrap();
    let list = input["requests"].as_array().unwrap();
    // As in Node: the whole list once on a survey of its own, then a fresh one.
    let rehearsal = Survey::from_bytes(&bytes).unwrap();
    for request in warmup.iter().chain(list) {
        black_box(
            rehearsal
                .crosstab(&validate_value(request).unwrap())
                .unwrap(),
        );
    }
    drop(rehearsal);
    if serve {
        for line in std::io::stdin().lines() {
            if line.is_err() {
                break;
            }
            let (whole, engine, _) = fresh_pass(&bytes, warmup, list);
            // Stdout flushes at each line.
            println!(
                "{}",
                json!({"us": median_of(&whole), "engineUs": median_of(&engine)})
            );
        }
        return;
    }
    let (whole, engine, responses) = fresh_pass(&bytes, warmup, list);
    let (mut settled, mut settled_engine) = (Vec::new(), Vec::new());
    for _ in 0..passes {
        let (whole, engine, _) = fresh_pass(&bytes, warmup, list);
        settled.push(median_of(&whole));
        settled_engine.push(median_of(&engine));
    }
    println!(
        "{}",
        json!({
            "validateAndEngineUs": median_of(&whole),
            "engineUs": median_of(&engine),
            "responses": responses,
            "passesUs": settled,
            "passesEngineUs": settled_engine,
        })
    );
}

/// The list answered once on a fresh survey from `bytes`, after the warm-up requests:
/// each request's µs of validation plus crosstab and of crosstab alone, and its answer.
fn fresh_pass(bytes: &[u8], warmup: &[Value], list: &[Value]) -> (Vec<f64>, Vec<f64>, Vec<Value>) {
    let survey = Survey::from_bytes(bytes).unwrap();
    for request in warmup {
        black_box(survey.crosstab(&validate_value(request).unwrap()).unwrap());
    }
    let (mut whole, mut engine, mut responses) = (Vec::new(), Vec::new(), Vec::new());
    for request in list {
        let start = Instant::now();
        let valid = validate_value(black_box(request)).unwrap();
        let validated = start.elapsed();
        let response = black_box(survey.crosstab(&valid).unwrap());
        let total = start.elapsed();
        whole.push(total.as_secs_f64() * 1e6);
        engine.push((total - validated).as_secs_f64() * 1e6);
        responses.push(serde_json::to_value(&response).unwrap());
    }
    (whole, engine, responses)
}

fn main() {
    let mut sizes = vec![50_000usize, 5_000_000];
    let mut instances = 12usize;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let mut out = target.join("crosstab-bench").join("peers");
    let (mut requests, mut compiled, mut passes, mut serve) = (None, None, 0usize, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--cold-requests" => requests = args.next().map(PathBuf::from),
            "--compiled" => compiled = args.next().map(PathBuf::from),
            "--passes" => passes = args.next().unwrap().parse().unwrap(),
            "--serve" => serve = true,
            "--sizes" => {
                sizes = args
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect()
            }
            "--instances" => instances = args.next().unwrap().parse().unwrap(),
            "--out" => out = PathBuf::from(args.next().unwrap()),
            _ => {} // `--bench` and criterion's flags
        }
    }
    if let (Some(requests), Some(compiled)) = (requests, compiled) {
        return cold_requests(&requests, &compiled, passes, serve);
    }
    std::fs::create_dir_all(&out).unwrap();
    println!(
        "== crosstab cold queries (medians over {} never-seen targets per shape) ==",
        instances * COLD_OPENS as usize
    );
    let results: Vec<Value> = sizes
        .iter()
        .map(|n| run_size(&out, *n, instances))
        .collect();
    let file = out.join("crosstab-results.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&results).unwrap()).unwrap();
    println!("\nfigures for the peers' check: {}", file.display());
}
