//! The API port's OpenAPI 3.1 document.
//!
//! The daemon serves the committed `docs/openapi.json`, embedded in the
//! binary gzip-compressed by `build.rs` (18 KB instead of 253 KB):
//! a client that accepts gzip gets those bytes, any other the document
//! inflated once. Nothing is built at run time, and the schema derives and the
//! builder are not in the release binary (they were about 1 MB of it, see
//! docs/benchmarks.md). `generate` builds the document from the endpoint table
//! and the wire types' `JsonSchema` derives; it is compiled for tests and
//! with the `openapi` feature, and this module's tests fail when the
//! committed file is not what it builds (`docs/openapi.md`).

#[cfg(any(test, feature = "openapi"))]
pub mod generate;
#[cfg(any(test, feature = "openapi"))]
mod shapes;

use std::io::Read;
use std::sync::OnceLock;

/// `docs/openapi.json` gzip-compressed, as embedded.
pub fn document_gzip() -> &'static [u8] {
    include_bytes!(concat!(env!("OUT_DIR"), "/openapi.json.gz"))
}

/// The document served at `GET /openapi.json`: `docs/openapi.json`'s bytes,
/// inflated from [`document_gzip`] on the first call.
pub fn document() -> &'static [u8] {
    static PLAIN: OnceLock<Vec<u8>> = OnceLock::new();
    PLAIN.get_or_init(|| {
        let mut plain = Vec::new();
        // The embedded bytes are build.rs's gzip of the document: inflating them cannot fail.
        let inflated = flate2::read::GzDecoder::new(document_gzip()).read_to_end(&mut plain);
        debug_assert!(inflated.is_ok(), "embedded openapi.json.gz: {inflated:?}");
        plain
    })
}

#[cfg(test)]
mod tests;
