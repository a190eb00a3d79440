//! `GET /`: a small web page built into the binary (plain HTML, CSS and
//! JavaScript from `web/`, no build step): a chat with streamed answers and
//! image upload, and pictures of where the model sits, the memory ledgers
//! and the recent rounds, drawn from `/v1/ats/state`.

use std::sync::Arc;

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HeaderName};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::routes::App;

/// One embedded file: its bytes and content type.
struct Asset {
    body: &'static str,
    content_type: &'static str,
}

const INDEX: Asset = Asset {
    body: include_str!("web/index.html"),
    content_type: "text/html; charset=utf-8",
};
const SCRIPT: Asset = Asset {
    body: include_str!("web/app.js"),
    content_type: "text/javascript; charset=utf-8",
};
const VIEWS: Asset = Asset {
    body: include_str!("web/views.js"),
    content_type: "text/javascript; charset=utf-8",
};
const STYLE: Asset = Asset {
    body: include_str!("web/style.css"),
    content_type: "text/css; charset=utf-8",
};

/// Only this origin's scripts and styles run on the page; images may be
/// the data URLs of uploads. A text the model writes is inserted as text,
/// never as markup, and this keeps it so should that ever change.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The page's routes, merged into the server's router.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/", get(|| async { serve(&INDEX) }))
        .route("/web/app.js", get(|| async { serve(&SCRIPT) }))
        .route("/web/views.js", get(|| async { serve(&VIEWS) }))
        .route("/web/style.css", get(|| async { serve(&STYLE) }))
}

fn serve(a: &Asset) -> Response {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(a.content_type)),
            // the files change with the binary: a browser asks again
            // rather than run a page older than the server
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
            (
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            ),
        ],
        a.body,
    )
        .into_response()
}
