//! The server's integration tests, one binary: in-process through the router (`router`,
//! `cache`, `webapp`), the ledger on its own (`ledger`), the real binary
//! (`process`, `concurrency`), and PostgreSQL when `CROSSTAB_TEST_POSTGRES_URL` is set
//! (`postgres`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

mod cache;
mod cluster;
mod concurrency;
mod hostile;
mod idempotency;
mod ledger;
mod postgres;
mod process;
mod router;
mod saml;
mod sso;
mod webapp;
