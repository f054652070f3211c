//! A minimal HTTP/1.1 client for the OAuth2 flow: one request per connection
//! (`Connection: close`), over TCP or the client's rustls stack for `https://`. Enough for a
//! token endpoint and a discovery document; nothing else uses it.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use url::Url;

use crate::connection::tls::TlsConnector;

/// Bound on a response (discovery documents and token responses are small).
const MAX_RESPONSE: usize = 1024 * 1024;

/// An HTTP response: status and body.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// Sends `method url` with `body` (form-encoded if given) and reads the whole response.
pub(crate) async fn request(
    tls: &TlsConnector,
    method: &str,
    url: &Url,
    form: Option<&str>,
) -> Result<Response, String> {
    let host = url
        .host_str()
        .ok_or_else(|| format!("`{url}` has no host"))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| format!("`{url}` has no port"))?;
    let addr = format!("{host}:{port}");
    let tcp = TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let mut path = url.path().to_owned();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n\
         User-Agent: {}\r\nConnection: close\r\n",
        crate::CLIENT_VERSION
    );
    let body = form.unwrap_or_default();
    if form.is_some() {
        head.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let raw = match url.scheme() {
        "http" => exchange(tcp, &head, body).await,
        "https" => {
            let stream = tls
                .connect(tcp, host, &addr)
                .await
                .map_err(|e| e.to_string())?;
            exchange(stream, &head, body).await
        }
        other => return Err(format!("`{url}`: unsupported scheme `{other}`")),
    }
    .map_err(|e| format!("{method} {url}: {e}"))?;
    parse(&raw).map_err(|e| format!("{method} {url}: {e}"))
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    head: &str,
    body: &str,
) -> std::io::Result<Vec<u8>> {
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await?;
    let mut raw = Vec::new();
    let mut limited = (&mut stream).take(MAX_RESPONSE as u64 + 1);
    limited.read_to_end(&mut raw).await?;
    if raw.len() > MAX_RESPONSE {
        return Err(std::io::Error::other("response larger than 1 MiB"));
    }
    Ok(raw)
}

fn parse(raw: &[u8]) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("incomplete HTTP response")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "HTTP headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad HTTP status line `{status_line}`"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
            chunked = true;
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        }
    }
    let rest = &raw[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        match length {
            Some(n) if n <= rest.len() => rest[..n].to_vec(),
            Some(_) => return Err("HTTP body shorter than its Content-Length".into()),
            None => rest.to_vec(),
        }
    };
    Ok(Response { status, body })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("bad chunked encoding")?;
        let size_text = std::str::from_utf8(&data[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi").unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"hi"[..]));
        let r = parse(b"HTTP/1.1 503 Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!((r.status, &r.body[..]), (503, &b"abcde"[..]));
    }
}
