//! The request bodies of the JSON API, read borrowing from the bytes received, and the
//! 400/413 answers for bodies that do not read.

use std::borrow::Cow;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::json::error;
use crate::engine::{self, Descriptor, Invalid};
use crate::rules;

/// One check, as JSON.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckBody<'a> {
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(borrow)]
    rules: Option<Vec<Cow<'a, str>>>,
    #[serde(borrow)]
    domain: Option<Cow<'a, str>>,
    #[serde(borrow)]
    descriptors: Option<Vec<DescriptorBody<'a>>>,
    cost: Option<u64>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DescriptorBody<'a> {
    #[serde(borrow)]
    entries: Vec<EntryBody<'a>>,
    #[serde(borrow)]
    limit: Option<LimitBody<'a>>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EntryBody<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow)]
    value: Cow<'a, str>,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitBody<'a> {
    requests_per_unit: u64,
    #[serde(borrow)]
    unit: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchBody<'a> {
    #[serde(borrow)]
    pub(super) requests: Vec<CheckBody<'a>>,
}

impl Descriptor for DescriptorBody<'_> {
    fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        self.entries.iter().map(|e| (&*e.key, &*e.value))
    }

    fn limit(&self) -> Result<Option<(u64, Duration)>, String> {
        let Some(l) = &self.limit else {
            return Ok(None);
        };
        let window = rules::unit_window(&l.unit).ok_or_else(|| {
            format!(
                "unknown unit {:?}: use second, minute, hour, day, month or year",
                l.unit
            )
        })?;
        Ok(Some((l.requests_per_unit, window)))
    }
}

impl<'a> CheckBody<'a> {
    /// The engine's request; field names in errors are this body's.
    #[inline]
    pub(super) fn request(
        &'a self,
    ) -> Result<(engine::Request<'a, DescriptorBody<'a>>, u64), Invalid> {
        let cost = self.cost.unwrap_or(1);
        let request = match (&self.key, &self.descriptors) {
            (Some(_), Some(_)) => {
                return Err(Invalid::new(
                    "key",
                    "give either key or domain and descriptors, not both",
                ));
            }
            (None, None) => {
                return Err(Invalid::new(
                    "key",
                    "missing: give key, or domain and descriptors",
                ));
            }
            (Some(key), None) => {
                if self.domain.is_some() {
                    return Err(Invalid::new(
                        "domain",
                        "goes with descriptors, not with key",
                    ));
                }
                engine::Request::Key {
                    key,
                    rules: self
                        .rules
                        .as_ref()
                        .map(|r| r.iter().map(|n| &**n).collect()),
                }
            }
            (None, Some(descriptors)) => {
                if self.rules.is_some() {
                    return Err(Invalid::new(
                        "rules",
                        "goes with key; descriptors find their rules",
                    ));
                }
                let Some(domain) = &self.domain else {
                    return Err(Invalid::new("domain", "missing: descriptors need a domain"));
                };
                // Units first, as the body's own fields: the engine reads them again.
                for (i, d) in descriptors.iter().enumerate() {
                    if let Err(message) = d.limit() {
                        return Err(Invalid::new(
                            format!("descriptors[{i}].limit.unit"),
                            message,
                        ));
                    }
                }
                engine::Request::Descriptors {
                    domain,
                    descriptors: Cow::Borrowed(descriptors),
                }
            }
        };
        Ok((request, cost))
    }
}
/// The body, refused with 413 beyond the limit, as JSON.
#[allow(clippy::result_large_err)]
pub(super) async fn body(req: Request) -> Result<Bytes, Response> {
    Bytes::from_request(req, &()).await.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the body is larger than the server accepts (--max-body)".to_owned()
        } else {
            rejection.body_text()
        };
        error(status, "", &message)
    })
}

/// A JSON body, or a 400 naming the field at fault.
#[allow(clippy::result_large_err)] // the error is the response, built once
pub(super) fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Response> {
    // The plain parse first; the path-tracking one only to explain a failure.
    serde_json::from_slice(bytes).map_err(|_| {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Ok(_) => error(StatusCode::BAD_REQUEST, "", "not valid JSON"),
            Err(e) => {
                let path = e.path().to_string();
                // "." is the root, "?" a place serde could not name (the end of the input).
                let field = if path == "." || path == "?" {
                    String::new()
                } else {
                    path
                };
                error(StatusCode::BAD_REQUEST, &field, &e.inner().to_string())
            }
        }
    })
}
