//! The API port's OpenAPI 3.1 document.
//!
//! The daemon serves the committed `docs/openapi.json`, embedded in the
//! binary: nothing is built at run time, and the schema derives and the
//! builder are not in the release binary (they were about 1 MB of it, see
//! docs/benchmarks.md). `generate` builds the document from the endpoint table
//! and the wire types' `JsonSchema` derives; it is compiled for tests and
//! with the `openapi` feature, and this module's tests fail when the
//! committed file is not what it builds (`docs/openapi.md`).

#[cfg(any(test, feature = "openapi"))]
pub mod generate;
#[cfg(any(test, feature = "openapi"))]
mod shapes;

/// The document served at `GET /openapi.json`: `docs/openapi.json`'s bytes.
pub fn document() -> &'static [u8] {
    include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"))
}

#[cfg(test)]
mod tests;
