//! The `agent-sandbox-server` binary; everything lives in the library.

/// The static (musl) build's allocator: musl's own is slow under concurrency.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    agent_sandbox_server::cli::main()
}
