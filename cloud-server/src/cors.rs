//! CORS for the pages of other origins the operator allowed (`--allow-origin`, the list that
//! also lets them open `/ws`): an app on its own site may then load the client's package (the
//! scripts, the wasm builds), `/api/info` and the model's files from this server. Everything the
//! client loads is a CORS-mode request (module imports, `fetch`), so
//! `Access-Control-Allow-Origin` is all a page needs, cross-origin isolated or not; no request
//! of the client's needs a preflight. Another origin's page gets nothing it could not read
//! before: a response without the header is opaque to it.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue, ORIGIN, VARY};
use actix_web::middleware::Next;
use actix_web::web;

use crate::state::AppState;

/// Whether `origin` is on the operator's list (`*`: any).
pub fn listed(allowed: &[String], origin: &str) -> bool {
    allowed.iter().any(|a| a == "*" || a == origin)
}

/// The middleware: a listed `Origin` is echoed in `Access-Control-Allow-Origin`, and every
/// answer says it varies with `Origin` (a cache must not give one origin's answer to another).
pub async fn allow_listed_origins(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let origin = req.headers().get(ORIGIN).cloned();
    let allowed = req.app_data::<web::Data<AppState>>().is_some_and(|state| {
        origin
            .as_ref()
            .and_then(|o| o.to_str().ok())
            .is_some_and(|o| listed(&state.allow_origins, o))
    });
    let mut res = next.call(req).await?;
    let headers = res.headers_mut();
    if let (true, Some(origin)) = (allowed, origin) {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    headers.append(VARY, HeaderValue::from_static("Origin"));
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_origins() {
        let list = vec!["https://app.example.com".to_string()];
        assert!(listed(&list, "https://app.example.com"));
        assert!(!listed(&list, "https://app.example.com.evil.test"));
        assert!(!listed(&list, "http://app.example.com"), "another scheme is another origin");
        assert!(!listed(&[], "https://app.example.com"), "none by default");
        assert!(listed(&["*".to_string()], "https://anything.test"));
    }
}
