//! The crosstab companion server: the `/v1` API of the service spec, with API keys,
//! survey entitlements, a durable billing ledger and CORS, plus the `crosstab` command
//! line that administers it (surveys, keys, usage) and answers queries offline.
//!
//! Request flow: [`observe`] (request id, access log, CORS origin) → [`api`] routes →
//! [`auth::Authenticator`] (key → account and [`grants::Grants`]) → contract validation
//! → the engine's [`Catalog`](crosstab_engine::store::Catalog) → [`ledger::Ledger`]
//! (group-committed bill) → response.

pub mod accounts;
pub mod api;
pub mod app;
pub mod auth;
pub mod cache;
pub mod cli;
pub mod cors;
pub mod db;
pub mod grants;
pub mod key_signal;
pub mod keys;
pub mod ledger;
pub mod logging;
pub mod observe;
pub mod serve;
pub mod usage;
pub mod webapp;
