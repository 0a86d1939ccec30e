//! Renders the OpenAPI document at build time, with the contract crate's own function, so
//! the WASM builds embed the exact `/v1/docs` JSON without carrying the generator: the
//! validator-only build stays small.

use std::error::Error;
use std::path::Path;

fn main() -> Result<(), Box<dyn Error>> {
    let out_dir = std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?;
    std::fs::write(
        Path::new(&out_dir).join("openapi.json"),
        crosstab_contract::openapi::document_json(),
    )?;
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}
