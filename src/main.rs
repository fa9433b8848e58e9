//! The `runner` binary: parse the command line, run it, map the outcome to an exit code.
//! All the work lives in the library (`runner::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    runner::cli::main()
}
