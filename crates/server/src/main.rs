//! `crosstab`: the server and its administration command line.

fn main() -> std::process::ExitCode {
    crosstab_server::cli::run()
}
