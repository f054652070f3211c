//! Token authentication (method `token`), like upstream `AuthenticationToken`: a static token,
//! a supplier asked each time, or a file read again each time (so a rotated token is used by
//! the next connection and the next auth challenge).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use super::{AuthError, AuthenticationProvider};

type Supplier = Arc<dyn Fn() -> BoxFuture<'static, Result<String, AuthError>> + Send + Sync>;

#[derive(Clone)]
enum Source {
    Static(String),
    Supplier(Supplier),
    File(PathBuf),
}

/// Token authentication. `Debug` never shows the token.
#[derive(Clone)]
pub struct TokenAuth {
    source: Source,
}

impl TokenAuth {
    /// A fixed token.
    pub fn new(token: impl Into<String>) -> Self {
        TokenAuth {
            source: Source::Static(token.into()),
        }
    }

    /// A token read from `path` each time credentials are needed (surrounding whitespace
    /// trimmed, like upstream).
    pub fn from_file(path: impl Into<PathBuf>) -> Self {
        TokenAuth {
            source: Source::File(path.into()),
        }
    }

    /// A token returned by `supplier`, called each time credentials are needed.
    pub fn from_fn<F>(supplier: F) -> Self
    where
        F: Fn() -> Result<String, AuthError> + Send + Sync + 'static,
    {
        let supplier = Arc::new(supplier);
        Self::from_async_fn(move || {
            let supplier = supplier.clone();
            async move { supplier() }
        })
    }

    /// A token returned by the future `supplier` makes, called each time credentials are
    /// needed.
    pub fn from_async_fn<F, Fut>(supplier: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<String, AuthError>> + Send + 'static,
    {
        TokenAuth {
            source: Source::Supplier(Arc::new(move || Box::pin(supplier()))),
        }
    }

    /// Parses the Java client's parameter string: `file:PATH` (also `file:///abs/path`) reads
    /// the token from a file each time, `token:VALUE` or a bare value is the token itself.
    pub fn from_param(param: &str) -> Self {
        if let Some(path) = param.strip_prefix("file://") {
            Self::from_file(path)
        } else if let Some(path) = param.strip_prefix("file:") {
            Self::from_file(path)
        } else {
            Self::new(param.strip_prefix("token:").unwrap_or(param))
        }
    }
}

impl fmt::Debug for TokenAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Static(_) => "static <redacted>".to_owned(),
            Source::Supplier(_) => "supplier".to_owned(),
            Source::File(p) => format!("file {}", p.display()),
        };
        f.debug_struct("TokenAuth")
            .field("source", &source)
            .finish()
    }
}

impl AuthenticationProvider for TokenAuth {
    fn method_name(&self) -> &str {
        "token"
    }

    fn auth_data(&self) -> BoxFuture<'_, Result<Bytes, AuthError>> {
        Box::pin(async move {
            let token = match &self.source {
                Source::Static(t) => t.clone(),
                Source::Supplier(s) => s().await?,
                Source::File(path) => tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?
                    .trim()
                    .to_owned(),
            };
            if token.is_empty() {
                return Err("the token is empty".into());
            }
            Ok(Bytes::from(token))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn static_supplier_and_file_tokens() {
        assert_eq!(
            &TokenAuth::new("abc").auth_data().await.unwrap()[..],
            b"abc"
        );
        assert_eq!(
            &TokenAuth::from_param("token:xyz")
                .auth_data()
                .await
                .unwrap()[..],
            b"xyz"
        );

        let n = Arc::new(AtomicU32::new(0));
        let counter = n.clone();
        let auth =
            TokenAuth::from_fn(move || Ok(format!("t{}", counter.fetch_add(1, Ordering::SeqCst))));
        assert_eq!(&auth.auth_data().await.unwrap()[..], b"t0");
        assert_eq!(&auth.auth_data().await.unwrap()[..], b"t1");

        let dir = std::env::temp_dir().join(format!("token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let auth = TokenAuth::from_param(&format!("file:{}", path.display()));
        assert_eq!(&auth.auth_data().await.unwrap()[..], b"first");
        std::fs::write(&path, "second").unwrap();
        assert_eq!(&auth.auth_data().await.unwrap()[..], b"second");
        std::fs::remove_file(&path).unwrap();
        let err = auth.auth_data().await.unwrap_err().to_string();
        assert!(err.contains("cannot read the token file"), "{err}");
    }

    #[test]
    fn debug_hides_the_token() {
        let debug = format!("{:?}", TokenAuth::new("s3cret-token"));
        assert!(!debug.contains("s3cret"), "{debug}");
    }
}
