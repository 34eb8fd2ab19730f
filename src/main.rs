//! `rktlet`: the daemon and its rkt-style commands (`rktlet::cli::command`).

fn main() -> std::process::ExitCode {
    rktlet::cli::command::main()
}
