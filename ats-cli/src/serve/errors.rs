//! OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}`
//! with the HTTP status that says whose fault it is.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// A short machine-readable code.
    pub code: Option<&'static str>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about the request as a whole.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// A 400 about one field.
    pub fn bad_param(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            ..ApiError::bad_request(message)
        }
    }

    /// A 400 for a feature this server does not offer.
    pub fn unsupported(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("unsupported_parameter"),
            ..ApiError::bad_param(param, message)
        }
    }

    /// 503: the queue is full; the client may retry later.
    pub fn overloaded(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            param: None,
            code: Some("queue_full"),
        }
    }

    /// 500: the server failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// Any status (404, 405, 413).
    pub fn status(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// OpenAI's error type for the status.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::SERVICE_UNAVAILABLE => "server_overloaded",
            StatusCode::NOT_FOUND => "not_found_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body (also sent as a server-sent event when a stream fails).
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(Body {
            error: Inner {
                message: &self.message,
                kind: self.kind(),
                param: self.param.as_deref(),
                code: self.code,
            },
        })
        .unwrap_or_default()
    }
}

/// Seconds a client told to come back later (503) should wait.
const RETRY_AFTER_SECS: &str = "1";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.json())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_openai_shape() {
        let e = ApiError::bad_param("messages", "messages must not be empty");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            e.json(),
            serde_json::json!({"error": {"message": "messages must not be empty",
                "type": "invalid_request_error", "param": "messages", "code": null}})
        );
        let o = ApiError::overloaded("full");
        assert_eq!(o.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(o.json()["error"]["code"], "queue_full");
    }
}
