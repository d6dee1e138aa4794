//! The one credential parser of every port: `Authorization: Bearer`,
//! `X-Access-Token` (a configured token or envd's access token), the PTY
//! WebSocket's `?token=`, and envd's signed `/files` URLs; and the user an
//! envd request asks to act as. The policy engine then says who the caller
//! is; failed attempts count against the peer address ([`abx_domain::policy::throttle`]).

use std::net::IpAddr;
use std::sync::Arc;

use abx_wire::api::Fault;
use abx_wire::endpoints::{Endpoint, Port, SignedOp};
use axum::http::{header, HeaderMap, Uri};

use abx_domain::policy::{Credentials, Denial, Identity, PolicyEngine, SignedRequest};

/// Who the caller is, and the user it acts as (envd only).
pub(super) struct Caller {
    /// The identity its credentials prove.
    pub identity: Arc<Identity>,
    /// The account it asks to act as: envd's `Authorization: Basic` user,
    /// `/files`' `username`, or the user a signed URL names.
    pub user: Option<String>,
}

/// The credential headers of a request.
pub(crate) fn from_headers(headers: &HeaderMap) -> Credentials<'_> {
    let values = |name| headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
    Credentials { authorization: values(header::AUTHORIZATION.as_str()), access_tokens: values("x-access-token") }
}

/// The query parameters a credential may travel in.
#[derive(Default)]
struct QueryCredentials {
    token: Option<String>,
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    expiration: Option<String>,
}

impl QueryCredentials {
    fn parse(uri: &Uri) -> Self {
        let mut found = QueryCredentials::default();
        for (key, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
            let slot = match key.as_ref() {
                "token" => &mut found.token,
                "path" => &mut found.path,
                "username" => &mut found.username,
                "signature" => &mut found.signature,
                "signature_expiration" => &mut found.expiration,
                _ => continue,
            };
            *slot = Some(value.into_owned());
        }
        found
    }
}

/// Authenticates a request for `endpoint`, from `peer`.
///
/// # Errors
/// `ambiguous_credentials` (400), `unauthorized` or a signature's refusal
/// (401), `auth_throttled` (429) while the peer is held back.
pub(super) fn authenticate(
    engine: &PolicyEngine,
    endpoint: &Endpoint,
    headers: &HeaderMap,
    uri: &Uri,
    peer: Option<IpAddr>,
) -> Result<Caller, Denial> {
    let query = if endpoint.query_token || endpoint.signed.is_some() {
        QueryCredentials::parse(uri)
    } else {
        QueryCredentials::default()
    };
    let mut credentials = from_headers(headers);
    if endpoint.query_token && credentials.authorization.is_empty() && credentials.access_tokens.is_empty() {
        credentials.access_tokens.extend(query.token.as_deref());
    }
    let presented = credentials.presented()?;
    // On an open server (no token at all) a signature proves nothing more than no credentials do.
    let open = !engine.authenticator().has_tokens() && !engine.access_token_set();
    let signed = endpoint.signed.filter(|_| presented.is_empty() && query.signature.is_some() && !open);
    if let (Some(peer), true) = (peer, !presented.is_empty() || signed.is_some()) {
        engine.throttle.check(peer)?;
    }
    let failed = |denial: Denial| {
        if let (Some(peer), 401) = (peer, denial.status()) {
            engine.throttle.failed(peer);
        }
        denial
    };
    if let Some(op) = signed {
        let identity = verify(engine, &query, op).map_err(failed)?;
        // The signature covers the user: no header may name another one.
        return Ok(Caller { identity, user: query.username.filter(|u| !u.is_empty()) });
    }
    let identity =
        engine.authenticate_presented(presented).map_err(|d| if presented.is_empty() { d } else { failed(d) })?;
    if endpoint.port == Port::Envd && identity.id == "anonymous" && engine.access_token_set() {
        // Once `/init` set an access token, the envd plane wants it (or another token).
        return Err(Denial::Unauthorized);
    }
    let user = match endpoint.port {
        Port::Envd => query.username.filter(|u| !u.is_empty()).or_else(|| basic_user(headers)),
        _ => None,
    };
    Ok(Caller { identity, user })
}

fn verify(engine: &PolicyEngine, query: &QueryCredentials, op: SignedOp) -> Result<Arc<Identity>, Denial> {
    let invalid = |message: &str| Denial::new(Fault::InvalidSignature, message);
    let expiration = match query.expiration.as_deref() {
        None => None,
        Some(text) => Some(text.trim().parse::<i64>().map_err(|_| invalid("invalid signature expiration"))?),
    };
    let request = SignedRequest {
        path: query.path.as_deref().unwrap_or(""),
        op,
        username: query.username.as_deref().unwrap_or(""),
        signature: query.signature.as_deref().unwrap_or(""),
        expiration,
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    engine.verify_signed(&request, i64::try_from(now).unwrap_or(i64::MAX))
}

/// The user named by `Authorization: Basic`.
pub(crate) fn basic_user(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(abx_domain::envd::access::basic_user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use abx_domain::policy::signed::signature;
    use abx_domain::policy::PolicyInputs;
    use abx_wire::endpoints::find;
    use axum::http::HeaderValue;

    fn engine(token: Option<&str>) -> PolicyEngine {
        let inputs = PolicyInputs { server_token: token.map(str::to_string), ..PolicyInputs::default() };
        PolicyEngine::new(inputs).expect("engine")
    }

    fn call(engine: &PolicyEngine, id: &str, headers: &[(&'static str, &str)], uri: &str) -> Result<Caller, Denial> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(*name, HeaderValue::from_str(value).expect("value"));
        }
        let endpoint = find(id).expect("endpoint");
        authenticate(engine, endpoint, &map, &uri.parse().expect("uri"), Some(IpAddr::from([10, 9, 8, 7])))
    }

    #[test]
    fn the_pty_port_takes_a_query_token_and_headers_win() {
        let e = engine(Some("t"));
        assert!(call(&e, "pty_connect", &[], "/pty?session_id=x&token=t").is_ok());
        assert!(call(&e, "files_stat", &[], "/files/stat?token=t").is_err(), "only where the table says");
        let header_wins = call(&e, "pty_connect", &[("authorization", "Bearer nope")], "/pty?token=t");
        assert_eq!(header_wins.map(|_| ()), Err(Denial::Unauthorized));
    }

    #[test]
    fn a_signed_url_acts_as_its_signer_for_the_user_it_names() {
        let e = engine(Some("t"));
        let sig = signature("a.txt", SignedOp::Read, "nobody", "t", None);
        let uri = format!("/files?path=a.txt&username=nobody&signature={sig}");
        let caller = call(&e, "envd_files_read", &[("authorization", "Basic cm9vdDo=")], &uri).expect("signed");
        assert_eq!((caller.identity.id.as_str(), caller.user.as_deref()), ("server", Some("nobody")));
        assert!(call(&e, "envd_files_write", &[], &uri).is_err(), "a read signature does not write");
        let other_user = uri.replace("nobody", "root");
        assert!(call(&e, "envd_files_read", &[], &other_user).is_err());
        let basic = call(&e, "envd_stat", &[("x-access-token", "t"), ("authorization", "Basic cm9vdDo=")], "/");
        assert_eq!(basic.expect("token").user.as_deref(), Some("root"));
    }

    #[test]
    fn the_access_token_closes_the_open_envd_plane_only() {
        let e = engine(None);
        assert!(call(&e, "envd_stat", &[], "/").is_ok());
        e.set_access_token("init", &Identity::new("anonymous", ["*"]));
        assert_eq!(call(&e, "envd_stat", &[], "/").map(|_| ()), Err(Denial::Unauthorized));
        assert_eq!(
            call(&e, "envd_stat", &[("x-access-token", "init")], "/").map(|c| c.identity.id.clone()),
            Ok("envd".into())
        );
        assert!(call(&e, "files_stat", &[], "/").is_ok(), "the API port stays as configured");
    }

    #[test]
    fn repeated_failures_from_one_address_are_held_back() {
        let e = engine(Some("t"));
        let mut statuses = Vec::new();
        for _ in 0..40 {
            statuses.push(
                call(&e, "files_stat", &[("authorization", "Bearer guess")], "/")
                    .map(|_| 0)
                    .unwrap_or_else(|d| d.status()),
            );
        }
        assert_eq!(statuses.iter().filter(|s| **s == 401).count(), 30);
        assert_eq!(statuses.last(), Some(&429));
        assert_eq!(
            call(&e, "files_stat", &[], "/").map(|_| ()).map_err(|d| d.status()),
            Err(401),
            "no credentials: not held back"
        );
    }
}
