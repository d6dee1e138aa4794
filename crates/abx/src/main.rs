//! The `abx` companion command line; everything lives in the library.

fn main() -> std::process::ExitCode {
    abx::main()
}
