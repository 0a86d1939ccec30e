//! `crosstab`: the server and its administration command line.

// mimalloc: requests allocate many small, short-lived objects, some freed on another
// thread (bills, on the ledger's); with glibc's malloc ~17% of server CPU went to malloc/free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    crosstab_server::cli::run()
}
