//! A minimal HTTP/1.1 client for the OAuth2 flow and the controlled cluster failover: one
//! request per connection (`Connection: close`), over TCP or the client's rustls stack for
//! `https://`. Enough for a token endpoint, a discovery document and a failover answer.
//!
//! Like upstream's `AsyncHttpClient` configuration in `FlowBase` / `TokenClient`: every request
//! is bounded (connect timeout, then a read timeout for the answer), and redirects are followed
//! (a few at most, never from `https` to `http`). A response ends where its `Content-Length` or
//! chunked encoding says, so a server that keeps the connection open is no problem.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use url::Url;

use crate::connection::tls::TlsConnector;

/// Bound on a response (discovery documents and token responses are small).
const MAX_RESPONSE: usize = 1024 * 1024;

/// Redirects followed per request at most.
const MAX_REDIRECTS: usize = 5;

/// The bounds on one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// TCP connect (name resolution included) and TLS handshake.
    pub(crate) connect: Duration,
    /// Sending the request and receiving the whole answer.
    pub(crate) read: Duration,
}

/// Why a request failed. Never holds the request body (it carries the client secret).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no connection to {addr} within {after:?}")]
    ConnectTimeout { addr: String, after: Duration },
    #[error("{source}")]
    Tls {
        #[source]
        source: crate::Error,
    },
    #[error("no complete answer within {after:?}")]
    ReadTimeout { after: Duration },
    #[error("I/O error: {source}")]
    Io {
        #[source]
        source: std::io::Error,
    },
    #[error("response larger than 1 MiB")]
    TooLarge,
    #[error("{0}")]
    Malformed(&'static str),
    #[error("{0}")]
    Url(String),
}

impl From<std::io::Error> for HttpError {
    fn from(source: std::io::Error) -> Self {
        HttpError::Io { source }
    }
}

/// An HTTP response: status, reason phrase, `Location` and body.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) reason: String,
    pub(crate) location: Option<String>,
    pub(crate) body: Vec<u8>,
}

/// `url` for messages and logs: a password in its user-info is replaced.
pub(crate) fn redact(url: &Url) -> String {
    if url.password().is_some() {
        let mut url = url.clone();
        if url.set_password(Some("redacted")).is_ok() {
            return url.to_string();
        }
        return format!("{}://<redacted>", url.scheme());
    }
    url.to_string()
}

/// Sends `method url` with `form` (form-encoded, if given) and reads the whole response,
/// following redirects. `tls` gives the connector for `https://` (asked only then). Returns
/// the URL that answered, and its answer.
pub(crate) async fn request(
    tls: &(dyn Fn() -> crate::Result<TlsConnector> + Sync),
    timeouts: Timeouts,
    method: &'static str,
    url: &Url,
    form: Option<&str>,
    headers: &[(String, String)],
) -> Result<(Url, Response), HttpError> {
    let (mut url, mut method, mut form, mut headers) = (url.clone(), method, form, headers);
    for _ in 0..=MAX_REDIRECTS {
        let r = once(tls, timeouts, method, &url, form, headers).await?;
        if !matches!(r.status, 301 | 302 | 303 | 307 | 308) {
            return Ok((url, r));
        }
        let Some(location) = &r.location else {
            return Ok((url, r));
        };
        let mut next = url.join(location).map_err(|e| {
            HttpError::Url(format!(
                "{} redirected to an invalid Location: {e}",
                redact(&url)
            ))
        })?;
        next.set_fragment(None);
        match (url.scheme(), next.scheme()) {
            ("https", "https") | ("http", "http" | "https") => {}
            (from, to) => {
                return Err(HttpError::Url(format!(
                    "{} redirected from {from} to {to}: refused",
                    redact(&url)
                )))
            }
        }
        // As user agents (and upstream's client) do: 303 and a POST redirected by 301/302
        // continue as a GET without the body; 307 and 308 repeat the request.
        if r.status == 303 || (matches!(r.status, 301 | 302) && method == "POST") {
            method = "GET";
            form = None;
        }
        // A request that still carries its body (the client credentials) is only repeated to
        // the same origin: a redirect must not hand the client secret to another host.
        if form.is_some() && next.origin() != url.origin() {
            return Err(HttpError::Url(format!(
                "{} redirected a request with credentials to another origin ({}): refused",
                redact(&url),
                redact(&next)
            )));
        }
        // Extra headers may carry credentials too: they go to the first origin only.
        if next.origin() != url.origin() {
            headers = &[];
        }
        tracing::debug!(
            from = %redact(&url),
            to = %redact(&next),
            status = r.status,
            "http: following a redirect"
        );
        url = next;
    }
    Err(HttpError::Url(format!(
        "more than {MAX_REDIRECTS} redirects, last to {}",
        redact(&url)
    )))
}

/// One request, no redirects.
async fn once(
    tls: &(dyn Fn() -> crate::Result<TlsConnector> + Sync),
    timeouts: Timeouts,
    method: &'static str,
    url: &Url,
    form: Option<&str>,
    headers: &[(String, String)],
) -> Result<Response, HttpError> {
    let name = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        None => return Err(HttpError::Url(format!("`{}` has no host", redact(url)))),
    };
    let host = url.host_str().unwrap_or_default();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| HttpError::Url(format!("`{}` has no port", redact(url))))?;
    let addr = format!("{host}:{port}");
    let mut path = url.path().to_owned();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    // RFC 9110 §7.2: the port goes with the host unless it is the scheme's default.
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n\
         User-Agent: {}\r\nConnection: close\r\n",
        crate::CLIENT_VERSION
    );
    for (name, value) in headers {
        // Checked when they were configured; a line break here would split the request.
        if [name, value].iter().any(|s| s.contains(['\r', '\n'])) {
            return Err(HttpError::Url("a header holds a line break".into()));
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = form.unwrap_or_default();
    if form.is_some() {
        head.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        other => {
            return Err(HttpError::Url(format!(
                "`{}`: unsupported scheme `{other}`",
                redact(url)
            )))
        }
    };
    // The connector first: a configuration error is not a connect timeout.
    let connector = if https {
        Some(tls().map_err(|source| HttpError::Tls { source })?)
    } else {
        None
    };
    let connect = async {
        let tcp = TcpStream::connect((name.as_str(), port))
            .await
            .map_err(|source| HttpError::Connect {
                addr: addr.clone(),
                source,
            })?;
        match &connector {
            None => Ok(Stream::Plain(tcp)),
            Some(c) => c
                .connect(tcp, &name, &addr)
                .await
                .map(|s| Stream::Tls(Box::new(s)))
                .map_err(|source| HttpError::Tls { source }),
        }
    };
    let stream = tokio::time::timeout(timeouts.connect, connect)
        .await
        .map_err(|_| HttpError::ConnectTimeout {
            addr: addr.clone(),
            after: timeouts.connect,
        })??;
    let exchange = async {
        match stream {
            Stream::Plain(s) => exchange(s, &head, body).await,
            Stream::Tls(s) => exchange(s, &head, body).await,
        }
    };
    tokio::time::timeout(timeouts.read, exchange)
        .await
        .map_err(|_| HttpError::ReadTimeout {
            after: timeouts.read,
        })?
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<crate::connection::tls::TlsStream>),
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    head: &str,
    body: &str,
) -> Result<Response, HttpError> {
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await?;
    let mut incoming = Incoming::default();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        if let Some(r) = incoming.poll(false)? {
            return Ok(r);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return incoming.poll(true)?.ok_or(HttpError::Malformed(
                "connection closed before the answer was complete",
            ));
        }
        incoming.raw.extend_from_slice(&chunk[..n]);
        if incoming.raw.len() > MAX_RESPONSE {
            return Err(HttpError::TooLarge);
        }
    }
}

/// The status line and the headers that matter, once the head is complete.
#[derive(Debug)]
struct Head {
    status: u16,
    reason: String,
    chunked: bool,
    length: Option<usize>,
    location: Option<String>,
    /// Where the body starts in the bytes received.
    body_at: usize,
}

/// A response as it arrives. Every byte is looked at a bounded number of times however it
/// is split into reads: the search for the end of the head goes on where it stopped, the head
/// is parsed once, and a chunked body is decoded chunk by chunk as each completes (a search
/// for a chunk-size line goes on where it stopped too).
#[derive(Debug, Default)]
struct Incoming {
    /// Everything received so far.
    raw: Vec<u8>,
    /// The head's end was looked for up to here.
    scanned: usize,
    head: Option<Head>,
    /// Chunked body: what is decoded so far, where the next chunk-size line starts, how far
    /// its end was looked for, and the chunk whose size was read (start, size) if its data is
    /// not all here yet.
    decoded: Vec<u8>,
    chunk_at: usize,
    line_scanned: usize,
    pending_chunk: Option<(usize, usize)>,
    /// Bytes looked at by the searches (the parser's work, for the tests).
    examined: usize,
}

impl Incoming {
    /// Where `needle` starts in `raw[from..]` (an absolute position); counts the bytes looked
    /// at.
    fn find(&mut self, from: usize, needle: &[u8]) -> Option<usize> {
        let hay = self.raw.get(from..).unwrap_or_default();
        let found = hay.windows(needle.len()).position(|w| w == needle);
        self.examined += found.map_or(hay.len(), |i| i + needle.len());
        found.map(|i| from + i)
    }

    /// The response, once complete; `None` while it is not (`eof`: nothing more will come).
    fn poll(&mut self, eof: bool) -> Result<Option<Response>, HttpError> {
        if self.head.is_none() {
            // The terminator may straddle the previous search's end.
            let Some(end) = self.find(self.scanned.saturating_sub(3), b"\r\n\r\n") else {
                self.scanned = self.raw.len();
                return if eof {
                    Err(HttpError::Malformed("incomplete HTTP response"))
                } else {
                    Ok(None)
                };
            };
            let head = parse_head(&self.raw[..end], end + 4)?;
            self.chunk_at = head.body_at;
            self.line_scanned = head.body_at;
            self.head = Some(head);
        }
        let Some(head) = self.head.as_ref() else {
            return Ok(None);
        };
        let rest = &self.raw[head.body_at..];
        let status = head.status;
        let body = if status == 204 || status == 304 || (100..200).contains(&status) {
            Some(Vec::new())
        } else if head.chunked {
            self.dechunk()?
        } else if let Some(n) = head.length {
            if n > MAX_RESPONSE {
                return Err(HttpError::TooLarge);
            }
            rest.get(..n).map(<[u8]>::to_vec)
        } else if eof {
            Some(rest.to_vec())
        } else {
            None
        };
        match body {
            Some(body) => {
                let Some(head) = self.head.take() else {
                    return Ok(None);
                };
                Ok(Some(Response {
                    status: head.status,
                    reason: head.reason,
                    location: head.location,
                    body,
                }))
            }
            None if eof => Err(HttpError::Malformed("HTTP body shorter than announced")),
            None => Ok(None),
        }
    }

    /// Decodes the chunks complete so far; the body once the last (size 0) chunk is here.
    fn dechunk(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        loop {
            if let Some((start, size)) = self.pending_chunk {
                if self.raw.len() < start + size + 2 {
                    return Ok(None);
                }
                self.decoded
                    .extend_from_slice(&self.raw[start..start + size]);
                self.chunk_at = start + size + 2;
                self.line_scanned = self.chunk_at;
                self.pending_chunk = None;
            }
            let from = self.line_scanned.saturating_sub(1).max(self.chunk_at);
            let Some(line_end) = self.find(from, b"\r\n") else {
                self.line_scanned = self.raw.len();
                return Ok(None);
            };
            let size_text = std::str::from_utf8(&self.raw[self.chunk_at..line_end])
                .map_err(|_| HttpError::Malformed("bad chunk size"))?;
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| HttpError::Malformed("bad chunk size"))?;
            if size == 0 {
                return Ok(Some(std::mem::take(&mut self.decoded)));
            }
            if size > MAX_RESPONSE {
                return Err(HttpError::TooLarge);
            }
            self.pending_chunk = Some((line_end + 2, size));
        }
    }
}

/// Parses a response head (without its blank line); the body starts at `body_at`.
fn parse_head(head: &[u8], body_at: usize) -> Result<Head, HttpError> {
    let head = std::str::from_utf8(head)
        .map_err(|_| HttpError::Malformed("HTTP headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let _version = parts.next();
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or(HttpError::Malformed("bad HTTP status line"))?;
    let reason = parts.next().unwrap_or_default().trim().to_owned();
    let mut chunked = false;
    let mut length = None;
    let mut location = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| HttpError::Malformed("bad Content-Length"))?,
            );
        } else if name.eq_ignore_ascii_case("location") {
            location = Some(value.to_owned());
        }
    }
    Ok(Head {
        status,
        reason,
        chunked,
        length,
        location,
        body_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `raw` received at once.
    fn parse(raw: &[u8], eof: bool) -> Result<Option<Response>, HttpError> {
        let mut incoming = Incoming {
            raw: raw.to_vec(),
            ..Incoming::default()
        };
        incoming.poll(eof)
    }

    /// `raw` received one byte per read: the response, and the parser's work.
    fn trickle(raw: &[u8]) -> (Response, usize) {
        let mut incoming = Incoming::default();
        for b in raw {
            incoming.raw.push(*b);
            if let Some(r) = incoming.poll(false).unwrap() {
                return (r, incoming.examined);
            }
        }
        panic!("never complete");
    }

    #[test]
    fn the_parsers_work_is_linear_however_the_answer_is_split() {
        // 200 KiB of headers, then a chunked body of 20,000 one-byte chunks, a byte per read:
        // a parser that searched from the start at each read would look at ~10^10 bytes.
        let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n".to_vec();
        for i in 0..4000 {
            raw.extend_from_slice(format!("X-Pad-{i:05}: {}\r\n", "p".repeat(36)).as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        for _ in 0..20_000 {
            raw.extend_from_slice(b"1\r\nz\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        let (r, examined) = trickle(&raw);
        assert_eq!(r.body.len(), 20_000);
        assert!(
            examined <= 4 * raw.len(),
            "looked at {examined} bytes for an answer of {}",
            raw.len()
        );
    }

    #[test]
    fn parses_plain_and_chunked_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", false)
            .unwrap()
            .unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"hi"[..]));
        let r = parse(b"HTTP/1.1 503 Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), &r.body[..]),
            (503, "Unavailable", &b"abcde"[..])
        );
    }

    #[test]
    fn incomplete_answers_wait_and_fail_only_at_eof() {
        let partial = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi";
        assert!(parse(partial, false).unwrap().is_none());
        assert!(parse(partial, true).is_err());
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab";
        assert!(parse(chunked, false).unwrap().is_none());
        assert!(parse(chunked, true).is_err());
        let unbounded = b"HTTP/1.1 200 OK\r\n\r\nhi";
        assert!(parse(unbounded, false).unwrap().is_none());
        assert_eq!(parse(unbounded, true).unwrap().unwrap().body, b"hi");
    }

    #[test]
    fn redact_hides_the_password() {
        let url = Url::parse("https://svc:hunter2@idp.example/issuer").unwrap();
        let shown = redact(&url);
        assert!(
            !shown.contains("hunter2") && shown.contains("idp.example"),
            "{shown}"
        );
    }
}
