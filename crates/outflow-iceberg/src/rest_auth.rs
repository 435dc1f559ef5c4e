//! How Outflow's own calls to a REST catalog (its configuration, the commits) authenticate,
//! from the catalog properties Iceberg's REST clients read:
//!
//! - `token`: a bearer token, sent as is.
//! - `credential`: OAuth2 client credentials, `client_id:client_secret` (or a secret
//!   alone), exchanged for a token at the token endpoint: `oauth2-server-uri`, or the
//!   catalog's own `/v1/oauth/tokens`; `scope` (default `catalog`) is asked for. The token is
//!   kept and asked for again shortly before the `expires_in` the server gave; a request the
//!   catalog refuses with 401 renews it once (see [`RestAuth::renew`]).
//!
//! iceberg-rust's catalog client reads the same properties for its own calls (loading
//! tables, namespaces); this is the half Outflow sends itself. Neither the secret nor a
//! token ever shows in `Debug` output or errors.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use outflow_core::{Error, ErrorKind, Result};
use tokio::sync::Mutex;

/// The catalog property with OAuth2 client credentials.
pub const REST_CREDENTIAL: &str = "credential";
/// The catalog property with a bearer token.
pub const REST_TOKEN: &str = "token";
/// The catalog property naming the OAuth2 token endpoint.
pub const REST_OAUTH2_SERVER_URI: &str = "oauth2-server-uri";
/// The catalog property with the OAuth2 scope to ask for.
pub const REST_SCOPE: &str = "scope";
const DEFAULT_SCOPE: &str = "catalog";

/// How requests are authenticated.
pub(crate) enum RestAuth {
    None,
    Bearer(String),
    ClientCredentials(Box<ClientCredentials>),
}

pub(crate) struct ClientCredentials {
    client_id: Option<String>,
    client_secret: String,
    token_url: url::Url,
    scope: String,
    current: Mutex<Option<Token>>,
}

#[derive(Clone)]
struct Token {
    value: String,
    /// When to ask for a new one (`None`: the server gave no lifetime).
    renew_at: Option<Instant>,
}

impl fmt::Debug for RestAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestAuth::None => f.write_str("None"),
            RestAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            RestAuth::ClientCredentials(c) => f
                .debug_struct("ClientCredentials")
                .field("client_id", &c.client_id)
                .field("token_url", &c.token_url.as_str())
                .field("scope", &c.scope)
                .finish_non_exhaustive(),
        }
    }
}

/// When a token that lives `expires_in` should be renewed: a tenth of its life early, and at
/// least 10 s early, so no request goes out with a token about to lapse.
pub(crate) fn renew_after(expires_in: Duration) -> Duration {
    let margin = (expires_in / 10).max(Duration::from_secs(10));
    expires_in.saturating_sub(margin)
}

impl RestAuth {
    /// Reads the authentication of the catalog at `uri` from its `properties`. A `token`
    /// wins over a `credential`, as it does in Iceberg's clients.
    pub(crate) fn from_properties(uri: &str, properties: &BTreeMap<String, String>) -> Result<RestAuth> {
        if let Some(token) = properties.get(REST_TOKEN) {
            return Ok(RestAuth::Bearer(token.clone()));
        }
        let Some(credential) = properties.get(REST_CREDENTIAL) else {
            return Ok(RestAuth::None);
        };
        let (client_id, client_secret) = match credential.split_once(':') {
            Some((id, secret)) => (Some(id.to_string()), secret.to_string()),
            None => (None, credential.clone()),
        };
        if client_secret.is_empty() {
            return Err(Error::invalid_config(
                "catalog.properties.credential",
                "holds no client secret (`client_id:client_secret`)",
            ));
        }
        let token_url = match properties.get(REST_OAUTH2_SERVER_URI) {
            Some(given) => url::Url::parse(given).map_err(|e| {
                Error::invalid_config(
                    "catalog.properties.oauth2-server-uri",
                    format!("{given:?} is not a URL: {e}"),
                )
            })?,
            None => {
                let mut url = url::Url::parse(uri).map_err(|e| {
                    Error::invalid_config("catalog.uri", format!("{uri:?} is not a URL: {e}"))
                })?;
                url.path_segments_mut()
                    .map_err(|_| {
                        Error::invalid_config("catalog.uri", format!("{uri:?} cannot be a base URL"))
                    })?
                    .pop_if_empty()
                    .extend(["v1", "oauth", "tokens"]);
                url
            }
        };
        Ok(RestAuth::ClientCredentials(Box::new(ClientCredentials {
            client_id,
            client_secret,
            token_url,
            scope: properties
                .get(REST_SCOPE)
                .cloned()
                .unwrap_or_else(|| DEFAULT_SCOPE.to_string()),
            current: Mutex::new(None),
        })))
    }

    /// The `Authorization` header's value for the next request, asking for a token first
    /// when there is none or it is due for renewal; each call to the token endpoint is
    /// bounded by `limit`.
    pub(crate) async fn header(&self, http: &reqwest::Client, limit: Duration) -> Result<Option<String>> {
        match self {
            RestAuth::None => Ok(None),
            RestAuth::Bearer(token) => Ok(Some(format!("Bearer {token}"))),
            RestAuth::ClientCredentials(c) => {
                let mut current = c.current.lock().await;
                let due = current
                    .as_ref()
                    .is_none_or(|t| t.renew_at.is_some_and(|at| Instant::now() >= at));
                if due {
                    *current = Some(c.fetch(http, limit).await?);
                }
                Ok(current.as_ref().map(|t| format!("Bearer {}", t.value)))
            }
        }
    }

    /// Forgets the token after the catalog refused it (401), so the next
    /// [`RestAuth::header`] asks for a new one. Returns whether renewing can help: false
    /// for a fixed bearer token or none.
    pub(crate) async fn renew(&self) -> bool {
        match self {
            RestAuth::ClientCredentials(c) => {
                *c.current.lock().await = None;
                true
            }
            _ => false,
        }
    }
}

impl ClientCredentials {
    async fn fetch(&self, http: &reqwest::Client, limit: Duration) -> Result<Token> {
        let what = format!("asking {} for an OAuth2 token", self.token_url);
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_secret", self.client_secret.as_str()),
            ("scope", self.scope.as_str()),
        ];
        if let Some(id) = &self.client_id {
            form.push(("client_id", id.as_str()));
        }
        let failed = |kind: ErrorKind, why: String| {
            Error::new(kind, format!("{what}: {why}")).with_context("endpoint", self.token_url.to_string())
        };
        let response = http
            .post(self.token_url.clone())
            .timeout(limit)
            .form(&form)
            .send()
            .await
            .map_err(|e| failed(ErrorKind::Transient, transport_reason(&e, limit)))?;
        let status = response.status().as_u16();
        let body = response
            .text()
            .await
            .map_err(|e| failed(ErrorKind::Transient, transport_reason(&e, limit)))?;
        if !(200..300).contains(&status) {
            // The server's error says which credential it refused; the body never holds the
            // secret, which went in the request.
            let kind = match status {
                408 | 429 | 500..=599 => ErrorKind::Transient,
                _ => ErrorKind::InvalidConfig,
            };
            let detail: String = body.chars().take(300).collect();
            return Err(failed(kind, format!("HTTP {status}: {detail}")));
        }
        let answer: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| failed(ErrorKind::Internal, format!("the answer is not JSON: {e}")))?;
        let value = answer["access_token"]
            .as_str()
            .ok_or_else(|| failed(ErrorKind::Internal, "the answer holds no access_token".into()))?;
        let renew_at = answer["expires_in"]
            .as_u64()
            .map(|secs| Instant::now() + renew_after(Duration::from_secs(secs)));
        Ok(Token {
            value: value.to_string(),
            renew_at,
        })
    }
}

/// What each request of Outflow's own to a REST catalog carries: the catalog's custom
/// headers (`header.NAME` properties) and its authentication.
#[derive(Debug)]
pub(crate) struct RestRequests {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) auth: RestAuth,
}

impl RestRequests {
    /// Sends the request `build` makes, with the headers and authentication; a 401 renews an
    /// OAuth2 token once and sends again (a request the catalog refused to authenticate was
    /// not applied, so sending it again is safe, commits included). The outer error is the
    /// token endpoint's, the inner one the request's transport.
    pub(crate) async fn send(
        &self,
        http: &reqwest::Client,
        limit: Duration,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<std::result::Result<reqwest::Response, reqwest::Error>> {
        let mut renewed = false;
        loop {
            let mut request = build();
            for (k, v) in &self.headers {
                request = request.header(k, v);
            }
            if let Some(value) = self.auth.header(http, limit).await? {
                request = request.header(reqwest::header::AUTHORIZATION, value);
            }
            let response = request.send().await;
            let refused = matches!(&response, Ok(r) if r.status() == reqwest::StatusCode::UNAUTHORIZED);
            if refused && !renewed && self.auth.renew().await {
                renewed = true;
                continue;
            }
            return Ok(response);
        }
    }
}

fn transport_reason(e: &reqwest::Error, limit: Duration) -> String {
    if e.is_timeout() {
        format!("no answer within {} ms", limit.as_millis())
    } else {
        // The URL is the token endpoint's; the secret went in the body, which errors never show.
        format!("the connection failed ({e})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// An in-process stand-in for a token endpoint and a catalog (this tests the renewal
    /// logic; the real exchange runs against Iceberg's REST fixture in tests/it): the
    /// endpoint issues `t1`, `t2`... living `expires_in` seconds, and the catalog takes
    /// only `accepted`, answering 401 otherwise. Returns its URL and the tokens issued.
    async fn stand_in(
        expires_in: u64,
        accepted: &'static str,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let issued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = issued.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                    let (status, body) = if request.starts_with("post /v1/oauth/tokens") {
                        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                        (
                            200,
                            format!(
                                r#"{{"access_token":"t{n}","token_type":"bearer","expires_in":{expires_in}}}"#
                            ),
                        )
                    } else if request.contains(&format!("authorization: bearer {accepted}\r\n")) {
                        (200, "{}".to_string())
                    } else {
                        (
                            401,
                            r#"{"error":{"message":"expired","type":"NotAuthorizedException","code":401}}"#
                                .to_string(),
                        )
                    };
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                });
            }
        });
        (url, issued)
    }

    fn requests_to(url: &str) -> RestRequests {
        RestRequests {
            headers: vec![],
            auth: RestAuth::from_properties(url, &props(&[("credential", "app:secret")])).unwrap(),
        }
    }

    #[tokio::test]
    async fn a_refused_token_is_renewed_once_and_the_request_sent_again() {
        use std::sync::atomic::Ordering;
        let (url, issued) = stand_in(3600, "t2").await;
        let requests = requests_to(&url);
        let http = reqwest::Client::new();
        let limit = Duration::from_secs(5);
        let get = || http.get(format!("{url}/v1/config"));
        // t1 is refused: renewed to t2, sent again, accepted.
        let response = requests.send(&http, limit, get).await.unwrap().unwrap();
        assert_eq!(
            (response.status().as_u16(), issued.load(Ordering::SeqCst)),
            (200, 2)
        );
        // t2 is kept while it lives.
        let response = requests.send(&http, limit, get).await.unwrap().unwrap();
        assert_eq!(
            (response.status().as_u16(), issued.load(Ordering::SeqCst)),
            (200, 2)
        );

        // Refused again after renewing: the 401 is the answer, no third try.
        let (url, issued) = stand_in(3600, "never").await;
        let requests = requests_to(&url);
        let response = requests
            .send(&http, limit, || http.get(format!("{url}/v1/config")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (response.status().as_u16(), issued.load(Ordering::SeqCst)),
            (401, 2)
        );
    }

    #[tokio::test]
    async fn a_token_about_to_lapse_is_asked_for_again_before_the_request() {
        use std::sync::atomic::Ordering;
        // Tokens living 5 s are due at once (renewed at least 10 s early).
        let (url, issued) = stand_in(5, "t3").await;
        let requests = requests_to(&url);
        let http = reqwest::Client::new();
        let limit = Duration::from_secs(5);
        for expected in [Some("Bearer t1"), Some("Bearer t2"), Some("Bearer t3")] {
            assert_eq!(
                requests.auth.header(&http, limit).await.unwrap().as_deref(),
                expected
            );
        }
        assert_eq!(issued.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn tokens_are_renewed_before_they_lapse() {
        assert_eq!(renew_after(Duration::from_secs(3600)), Duration::from_secs(3240));
        assert_eq!(renew_after(Duration::from_secs(60)), Duration::from_secs(50));
        assert_eq!(renew_after(Duration::from_secs(5)), Duration::ZERO);
    }

    #[test]
    fn credentials_and_endpoints_come_from_the_properties() {
        let auth =
            RestAuth::from_properties("http://h:8181/api/", &props(&[("credential", "app:s3cr3t")])).unwrap();
        let RestAuth::ClientCredentials(c) = &auth else {
            panic!("{auth:?}")
        };
        assert_eq!(c.token_url.as_str(), "http://h:8181/api/v1/oauth/tokens");
        assert_eq!(
            (c.client_id.as_deref(), c.scope.as_str()),
            (Some("app"), "catalog")
        );
        assert!(!format!("{auth:?}").contains("s3cr3t"), "{auth:?}");

        let auth = RestAuth::from_properties(
            "http://h:8181",
            &props(&[
                ("credential", "only-secret"),
                ("oauth2-server-uri", "https://idp/token"),
                ("scope", "PRINCIPAL_ROLE:ALL"),
            ]),
        )
        .unwrap();
        let RestAuth::ClientCredentials(c) = &auth else {
            panic!("{auth:?}")
        };
        assert_eq!(
            (c.client_id.as_deref(), c.token_url.as_str(), c.scope.as_str()),
            (None, "https://idp/token", "PRINCIPAL_ROLE:ALL")
        );

        let auth = RestAuth::from_properties("http://h", &props(&[("token", "t0k"), ("credential", "a:b")]))
            .unwrap();
        assert!(matches!(auth, RestAuth::Bearer(_)) && !format!("{auth:?}").contains("t0k"));
        let err = RestAuth::from_properties("http://h", &props(&[("credential", "app:")])).unwrap_err();
        assert!(err.to_string().contains("no client secret"), "{err}");
        let err = RestAuth::from_properties(
            "http://h",
            &props(&[("credential", "a:b"), ("oauth2-server-uri", "not a url")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("oauth2-server-uri"), "{err}");
    }
}
