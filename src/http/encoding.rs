//! Content negotiation of an answer's encoding (`Accept-Encoding`): envd's
//! file downloads and `GET /openapi.json` are sent gzip-encoded to a client
//! that takes it.

use axum::http::{header, HeaderMap};

/// Whether the client takes gzip, and whether it takes the unencoded
/// bytes, for this answer: `(gzip, identity)`, from `Accept-Encoding`
/// with its quality values (`gzip;q=0` refuses gzip, `identity;q=0` or
/// `*;q=0` without `identity` refuses the plain bytes).
pub fn accepted(headers: &HeaderMap) -> (bool, bool) {
    let Some(value) = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()) else {
        return (false, true);
    };
    let quality = |name: &str| -> Option<f64> {
        value.split(',').find_map(|part| {
            let mut pieces = part.split(';');
            let coding = pieces.next()?.trim();
            coding.eq_ignore_ascii_case(name).then(|| {
                pieces.find_map(|p| p.trim().strip_prefix("q=").and_then(|q| q.parse::<f64>().ok())).unwrap_or(1.0)
            })
        })
    };
    let (gzip, identity, any) = (quality("gzip"), quality("identity"), quality("*"));
    let identity_ok = identity.map_or(any.is_none_or(|q| q > 0.0), |q| q > 0.0);
    let gzip_q = gzip.or(any).unwrap_or(0.0);
    let gzip_ok = gzip_q > 0.0 && (!identity_ok || gzip_q >= identity.unwrap_or(gzip_q));
    (gzip_ok, identity_ok)
}
