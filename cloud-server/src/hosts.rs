//! Which `Host` names this server answers to: a defence against DNS rebinding, where a page
//! on another site makes its own name resolve to 127.0.0.1 and then reads a server on the
//! visitor's machine as if it were same-origin (the `Origin` check of `/ws` cannot see it:
//! the origin *is* the attacker's name). Browsers always send the name they resolved, so a
//! request whose `Host` is not one of ours is refused before any route sees it.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

use crate::state::AppState;

/// Names a server on a loopback address answers to by default.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Routes an orchestrator or a metrics scraper reaches by the pod's address, whatever the
/// allowed names: they reveal nothing of any client (`ok`, `ready` or why not, counters).
const PROBES: [&str; 4] = ["/livez", "/healthz", "/readyz", "/metrics"];

/// The host names requests may carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedHosts {
    /// Any name (`--allowed-hosts '*'`: behind a proxy that checks names itself).
    Any,
    /// These names, lower case, without ports; `.example.com` also allows its subdomains.
    Names(Vec<String>),
}

impl AllowedHosts {
    /// From `--allowed-hosts` and the address the server listens on: the flag's names when
    /// given; otherwise the loopback names, plus the listening address itself when it is a
    /// specific one. Listening on every interface (`0.0.0.0`, `::`) without the flag is an
    /// error: only the operator knows the names clients will use.
    pub fn from_config(flag: &[String], listen: &str) -> Result<Self, String> {
        if flag.iter().any(|h| h.trim() == "*") {
            return Ok(Self::Any);
        }
        let mut names: Vec<String> =
            flag.iter().map(|h| h.trim().to_ascii_lowercase()).filter(|h| !h.is_empty()).collect();
        if names.is_empty() {
            let unspecified = listen
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_unspecified());
            if unspecified {
                return Err(format!(
                    "listening on every interface ({listen}): name the hosts clients reach this \
                     server by with --allowed-hosts (app.example.com,10.0.0.5), or '*' behind a \
                     proxy that checks them"
                ));
            }
            names.extend(LOOPBACK_NAMES.map(String::from));
            let own = if listen.contains(':') && !listen.starts_with('[') {
                format!("[{listen}]") // an IPv6 address, as a Host header writes it
            } else {
                listen.to_ascii_lowercase()
            };
            if !names.contains(&own) {
                names.push(own);
            }
        }
        Ok(Self::Names(names))
    }

    /// Whether a request with this `Host` header value (port included or not) is ours.
    pub fn allows(&self, host: &str) -> bool {
        let names = match self {
            Self::Any => return true,
            Self::Names(names) => names,
        };
        let host = host.trim().to_ascii_lowercase();
        // Drop the port: after the bracket of an IPv6 literal, else after the one colon.
        let name = match host.strip_prefix('[') {
            Some(rest) => {
                rest.split_once(']').map_or(host.as_str(), |(ip, _)| &host[..ip.len() + 2])
            }
            None => host.split(':').next().unwrap_or_default(),
        };
        let name = name.trim_end_matches('.');
        !name.is_empty()
            && names.iter().any(|n| match n.strip_prefix('.') {
                Some(domain) => name == domain || name.ends_with(n.as_str()),
                None => name == n,
            })
    }
}

/// The middleware: 421 Misdirected Request for a `Host` this server does not answer to.
pub async fn check_host(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let allowed = req.app_data::<web::Data<AppState>>().map(|s| s.allowed_hosts.clone());
    if let Some(allowed) = allowed
        && !PROBES.contains(&req.path())
    {
        let host = req.connection_info().host().to_owned();
        if !allowed.allows(&host) {
            let response = HttpResponse::MisdirectedRequest()
                .content_type("text/plain; charset=utf-8")
                .body(format!(
                    "this server does not answer to the host {host:?}; the operator can allow it \
                     with --allowed-hosts"
                ));
            return Ok(req.into_response(response));
        }
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(flag: &[&str], listen: &str) -> AllowedHosts {
        let flag: Vec<String> = flag.iter().map(|s| s.to_string()).collect();
        AllowedHosts::from_config(&flag, listen).unwrap()
    }

    #[test]
    fn loopback_names_by_default() {
        let a = names(&[], "127.0.0.1");
        for ok in [
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "LOCALHOST",
            "localhost.",
            "127.0.0.1",
        ] {
            assert!(a.allows(ok), "{ok}");
        }
        for bad in [
            "attacker.example:8080",
            "127.0.0.1.attacker.example",
            "",
            ":8080",
            "localhost.evil",
            "[::2]:80",
        ] {
            assert!(!a.allows(bad), "{bad}");
        }
    }

    #[test]
    fn a_specific_listening_address_is_allowed_too() {
        let a = names(&[], "10.200.1.1");
        assert!(a.allows("10.200.1.1:8080"));
        assert!(!a.allows("10.200.1.2:8080"));
        let v6 = names(&[], "fd00::1");
        assert!(v6.allows("[fd00::1]:8080"));
    }

    #[test]
    fn every_interface_needs_the_flag() {
        let err = AllowedHosts::from_config(&[], "0.0.0.0").unwrap_err();
        assert!(err.contains("--allowed-hosts"), "{err}");
        assert!(AllowedHosts::from_config(&[], "::").is_err());
        assert_eq!(names(&["*"], "0.0.0.0"), AllowedHosts::Any);
    }

    #[test]
    fn listed_names_and_subdomains() {
        let a = names(&["App.Example.com", ".corp.example"], "0.0.0.0");
        assert!(a.allows("app.example.com"));
        assert!(a.allows("app.example.com:443"));
        assert!(a.allows("corp.example"));
        assert!(a.allows("cam.corp.example:8443"));
        assert!(!a.allows("localhost"), "the flag replaces the defaults");
        assert!(!a.allows("evilcorp.example"));
        assert!(!a.allows("example.com"));
    }
}
