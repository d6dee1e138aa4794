//! The `agent-sandbox-server` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    agent_sandbox_server::cli::main()
}
