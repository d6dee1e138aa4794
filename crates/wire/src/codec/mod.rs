//! Encodings both sides of the wire need: the daemon's handlers and domain
//! modules, and the companion client and `abx`.
//!
//! A leaf: nothing here imports another module of this crate, so every
//! build configuration (the daemon, the client alone) compiles it.
//!
//! - [`base64`]: the standard base64 engine, tolerant as Python's decoder is.
//! - [`shlex`]: shell-style splitting and quoting of command lines, as
//!   Python's `shlex` does it, without a shell.
//! - [`utf8`]: a streaming UTF-8 decoder that never splits a character
//!   across chunks, with bounded memory.

pub mod base64;
pub mod shlex;
pub mod utf8;
