//! The `outflow` binary; everything is in the library, see [`outflow_cli::commands`].

fn main() -> std::process::ExitCode {
    outflow_cli::commands::main()
}
