//! Basic authentication (method `basic`, data `user:password`), as the Java, C++ and Go
//! clients send it (upstream `AuthenticationBasic`).

use std::fmt;

use bytes::Bytes;
use futures::future::BoxFuture;

use super::{AuthError, AuthenticationProvider};

/// User and password, sent as `user:password` with method `basic`. `Debug` hides the password.
#[derive(Clone)]
pub struct BasicAuth {
    user: String,
    password: String,
}

impl BasicAuth {
    /// Basic authentication with `user` and `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        BasicAuth {
            user: user.into(),
            password: password.into(),
        }
    }
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl AuthenticationProvider for BasicAuth {
    fn method_name(&self) -> &str {
        "basic"
    }

    fn auth_data(&self) -> BoxFuture<'_, Result<Bytes, AuthError>> {
        let data = Bytes::from(format!("{}:{}", self.user, self.password));
        Box::pin(async move { Ok(data) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sends_user_colon_password_and_hides_it() {
        let auth = BasicAuth::new("alice", "pa55word");
        assert_eq!(auth.method_name(), "basic");
        assert_eq!(&auth.auth_data().await.unwrap()[..], b"alice:pa55word");
        let debug = format!("{auth:?}");
        assert!(
            debug.contains("alice") && !debug.contains("pa55word"),
            "{debug}"
        );
    }
}
