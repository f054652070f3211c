//! The mock's proxy mode, as upstream's `ProxyConnection` and `BrokerProxyValidator` behave.
//!
//! A mock broker that answers lookups as a proxy ([`MockBroker::proxy_lookups_to`]) also acts
//! as one: a CONNECT that names a target broker in `proxy_to_broker_url` is checked the way
//! `BrokerProxyValidator.resolveAndCheckTargetAddress` checks it (split at the last `:`, the
//! port a number, the host resolvable), then the proxy opens its own connection to the
//! target, sends it the client's CONNECT (without `proxy_to_broker_url`), answers the client
//! with the target's CONNECTED and relays every frame both ways (upstream
//! `DirectProxyHandler`). What the client sends is still recorded by the proxy.
//!
//! Refusals, as upstream `ProxyConnection.handleConnect` answers them (an ERROR with request id
//! -1, then the connection closed):
//! - no `:` at all, a port that is not a number or out of range: the split throws inside
//!   `handleConnect`'s `try`, answered `AuthenticationError "Failed to authenticate"`;
//! - a host that does not resolve (e.g. `pulsar://host:6650` splits into host `pulsar://host`):
//!   `ServiceNotReady "Target broker cannot be validated."`.
//!
//! Not modelled: the proxy's allow-lists (`brokerProxyAllowedHostNames`, `...IPAddresses`,
//! `...TargetPorts`, whose default only allows ports 6650 and 6651: the mock brokers listen on
//! random ports), `checkActiveBrokers`, and the proxy's own authentication.
//!
//! [`MockBroker::proxy_lookups_to`]: super::MockBroker::proxy_lookups_to

use std::net::IpAddr;

use super::wire;
use crate::error::ServerError;

/// Where a proxied connection goes, once the target passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    /// The host as the client wrote it, brackets of an IPv6 literal removed.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The CONNECT to send to the target (the client's, without `proxy_to_broker_url`).
    pub(crate) connect: wire::BaseCommand,
}

/// `BrokerProxyValidator.resolveAndCheckTargetAddress`'s checks, without the allow-lists.
pub(crate) fn check_target(
    host_and_port: &str,
) -> Result<(String, u16), (ServerError, &'static str)> {
    // `lastIndexOf(':')` then `substring` and `Integer.parseInt`: what throws there is caught
    // by `handleConnect`'s `try` as a failed authentication.
    let thrown = (ServerError::AuthenticationError, "Failed to authenticate");
    let Some(at) = host_and_port.rfind(':') else {
        return Err(thrown);
    };
    let (host, port) = (&host_and_port[..at], &host_and_port[at + 1..]);
    let port: u16 = match port.parse::<i64>() {
        Ok(p) => u16::try_from(p).map_err(|_| thrown)?,
        Err(_) => return Err(thrown),
    };
    // The resolver takes a host name or an IP literal (an IPv6 one with or without brackets).
    let unbracketed = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let resolvable = unbracketed.parse::<IpAddr>().is_ok() || is_host_name(unbracketed);
    if !resolvable {
        return Err((
            ServerError::ServiceNotReady,
            "Target broker cannot be validated.",
        ));
    }
    Ok((unbracketed.to_owned(), port))
}

/// A DNS name: dot-separated labels of letters, digits and `-`.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_is_accepted_and_a_url_is_not() {
        assert_eq!(
            check_target("127.0.0.1:6650"),
            Ok(("127.0.0.1".into(), 6650))
        );
        assert_eq!(
            check_target("broker-1.internal:6651"),
            Ok(("broker-1.internal".into(), 6651))
        );
        // IPv6: the last `:` is the port's, brackets or not.
        assert_eq!(check_target("[::1]:6650"), Ok(("::1".into(), 6650)));
        assert_eq!(check_target("::1:6650"), Ok(("::1".into(), 6650)));
        // The form this client sent before: splits into host `pulsar://127.0.0.1`.
        assert_eq!(
            check_target("pulsar://127.0.0.1:6650"),
            Err((
                ServerError::ServiceNotReady,
                "Target broker cannot be validated."
            ))
        );
        for thrown in [
            "broker",
            "broker:",
            "broker:x",
            "broker:70000",
            "pulsar://broker",
        ] {
            // `pulsar://broker` splits at the scheme's `:` into port `//broker`.
            assert_eq!(
                check_target(thrown).unwrap_err().0,
                ServerError::AuthenticationError,
                "{thrown}"
            );
        }
    }
}
