//! Which URLs may be registered as webhook endpoints, with the reference's
//! refusals (400 `invalid_request`, `param: url`): an `https` URL (`http`
//! too under `agents_webhook_allow_http`) with a host, no credentials, no
//! query string or fragment, and, unless `agents_allow_private_urls`, not a
//! private, loopback or link-local host. Addresses are decided by the
//! policy's URL guard ([`UrlPolicy`]); the reference also refuses the
//! names `localhost`, `*.localhost`, `*.local` and `*.internal`.

use crate::agents::error::AgentError;
use crate::policy::guards::UrlPolicy;

/// Admits `url` as an endpoint's URL.
///
/// # Errors
/// 400 naming the problem.
pub fn check_url(url: &str, allow_http: bool, allow_private: bool) -> Result<(), AgentError> {
    let refuse = |what: &str| Err(AgentError::invalid(format!("url: {what}"), "url"));
    if url.is_empty() {
        return refuse("expected a URL string");
    }
    let schemes = if allow_http { "http or https" } else { "https" };
    let parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(url::ParseError::InvalidPort) => return refuse("invalid port"),
        Err(_) => return refuse(&format!("must be an {schemes} URL")),
    };
    let scheme_ok = parsed.scheme() == "https" || (allow_http && parsed.scheme() == "http");
    if !scheme_ok || parsed.host_str().is_none_or(str::is_empty) {
        return refuse(&format!("must be an {schemes} URL"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return refuse("must not contain credentials");
    }
    if parsed.query().is_some_and(|q| !q.is_empty()) || parsed.fragment().is_some_and(|f| !f.is_empty()) {
        return refuse("must not contain a query string or fragment");
    }
    if !allow_private && private_host(&parsed) {
        return refuse("private and loopback hosts are not allowed");
    }
    Ok(())
}

/// Whether the URL's host is written as a private address or a local name.
fn private_host(url: &url::Url) -> bool {
    if let Some(url::Host::Domain(name)) = url.host() {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if [".local", ".internal"].iter().any(|suffix| name.ends_with(suffix)) {
            return true;
        }
    }
    UrlPolicy::default().check(url.as_str()).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(url: &str, allow_http: bool, allow_private: bool) -> String {
        check_url(url, allow_http, allow_private).expect_err(url).to_string()
    }

    #[test]
    fn urls_are_refused_with_the_reference_messages() {
        assert!(check_url("https://hooks.example.com/x", false, false).is_ok());
        assert!(check_url("https://hooks.example.com/x?", false, false).is_ok(), "an empty query is none");
        assert_eq!(refusal("", false, false), "url: expected a URL string");
        assert_eq!(refusal("http://hooks.example.com/", false, false), "url: must be an https URL");
        assert_eq!(refusal("ftp://hooks.example.com/", true, false), "url: must be an http or https URL");
        assert_eq!(refusal("https://", false, false), "url: must be an https URL");
        assert_eq!(refusal("https://u:p@hooks.example.com/", false, false), "url: must not contain credentials");
        assert_eq!(
            refusal("https://h.example.com/?a=1", false, false),
            "url: must not contain a query string or fragment"
        );
        assert_eq!(
            refusal("https://h.example.com/#f", false, false),
            "url: must not contain a query string or fragment"
        );
        assert_eq!(refusal("https://h.example.com:99999/", false, false), "url: invalid port");
        for url in [
            "https://127.0.0.1/",
            "https://localhost/",
            "https://a.internal/",
            "https://printer.local/",
            "https://[::1]/",
            "https://10.0.0.1/",
        ] {
            assert_eq!(refusal(url, false, false), "url: private and loopback hosts are not allowed", "{url}");
            assert!(check_url(url, false, true).is_ok(), "{url} with private URLs allowed");
        }
        assert!(check_url("http://127.0.0.1:8080/hook", true, true).is_ok());
    }
}
