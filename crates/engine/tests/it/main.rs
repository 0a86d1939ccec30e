//! The engine's integration tests, one binary: the demo generator, import (CSV, SPSS,
//! Parquet), the property tests against a naive evaluator, tables with their statistics,
//! and the shared vectors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod demo;
mod import;
mod properties;
mod sav;
mod table;
mod vectors;
