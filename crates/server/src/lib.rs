//! The crosstab server: the `/v1` API of the service spec (API keys, survey entitlements,
//! a durable billing ledger, CORS), the researcher app's backend, and the `crosstab`
//! command line that administers it and answers queries offline.
//!
//! Layers point one way: [`http`] (routes, extractors, status codes) → [`service`]
//! (authentication, queries, billing, the app backend; no HTTP) → [`store`] (all SQL) and
//! the engine → the contract. [`keys`], [`grants`] and [`clock`] are plain values every
//! layer may use.

pub mod cli;
pub mod clock;
pub mod grants;
pub mod http;
pub mod keys;
mod logging;
mod report;
pub mod serve;
pub mod service;
pub mod store;
