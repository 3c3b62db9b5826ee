//! OpenAI-style errors: every refusal is `{"error": {"message", "type", "param", "code"}}` with
//! the status OpenAI would answer, so clients raise their usual exception with a message that
//! names what to change.

use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::api::{ErrorBody, ErrorDetail};

/// An error answer: its status and body.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body's `error` object.
    pub detail: ErrorDetail,
}

impl ApiError {
    /// 400 `invalid_request_error`, naming the parameter at fault (when one is).
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, detail: ErrorDetail { message: message.into(), kind: "invalid_request_error", param: param.map(str::to_string), code: None } }
    }

    /// 400 for a parameter this server understands but does not implement: refused rather than
    /// ignored, so that a client never gets an answer it did not ask for.
    pub fn unsupported(param: &str, why: &str) -> Self {
        let mut e = Self::invalid(format!("`{param}` is not supported by this server: {why}"), Some(param));
        e.detail.code = Some("unsupported_parameter");
        e
    }

    /// The body could not be read as JSON: axum's status (413 past the body limit, 415 without
    /// a JSON content type, 400 for malformed JSON) with its message.
    pub fn from_rejection(e: JsonRejection) -> Self {
        let status = e.status();
        let code = (status == StatusCode::PAYLOAD_TOO_LARGE).then_some("request_too_large");
        let message = match code {
            Some(_) => format!("the request body is larger than this server's limit of {} bytes", super::api::BODY_LIMIT),
            None => e.body_text(),
        };
        Self { status, detail: ErrorDetail { message, kind: "invalid_request_error", param: None, code } }
    }

    /// 500: the generation failed on the server.
    pub fn server(message: String) -> Self {
        Self { status: StatusCode::INTERNAL_SERVER_ERROR, detail: ErrorDetail { message, kind: "server_error", param: None, code: None } }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.detail })).into_response()
    }
}

/// The name of a JSON value's type, for messages.
pub fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
