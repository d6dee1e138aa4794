//! The `abx` companion command line; everything lives in the library.

fn main() -> std::process::ExitCode {
    agent_sandbox_server::abx::main()
}
