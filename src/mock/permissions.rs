//! Authorization: the role of each connection and a per-namespace permission table, as a
//! broker with authorization enabled keeps them (simplified), and the broker setting PIP-124
//! depends on (`allowAutoSubscriptionCreation`).
//!
//! - The role of a connection is its CONNECT `auth_data` read as UTF-8 (with
//!   `auth_method_name = "token"` the token itself is the role), or [`ANONYMOUS`] without
//!   auth data.
//! - A namespace on which no permission was ever granted is open: every role may produce and
//!   consume (like a broker without authorization). Once any permission is granted on it, only
//!   the granted actions are allowed: a PRODUCER without [`MockAction::Produce`] and a
//!   SUBSCRIBE without [`MockAction::Consume`] are refused with ERROR AuthorizationError.
//!   Revoking every role keeps the namespace closed.
//! - PIP-124: a producer that creates its topic also creates its `initial_subscription_name`
//!   subscription only if the broker allows auto subscription creation and the producer's role
//!   may consume on the namespace; otherwise the topic is created without it (no error).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::admin_error::MockAdminError;
use super::conns::{Conns, ANONYMOUS};
use super::namespace::canonical_topic;
use super::namespace::{namespace_of, parse_namespace};
use super::reply::{error, Step};
use super::wire;
use super::{lock, ConnectionId, MockBroker};
use crate::error::ServerError;

/// What a role may do on a namespace (see [`MockBroker::grant_permission`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MockAction {
    /// Create producers on the namespace's topics.
    Produce,
    /// Subscribe to the namespace's topics (and get a producer's PIP-124 initial subscription
    /// created).
    Consume,
}

/// The permissions granted, per namespace (`tenant/ns`) and role.
#[derive(Debug, Default)]
pub(crate) struct Permissions {
    grants: HashMap<String, BTreeMap<String, BTreeSet<MockAction>>>,
}

impl Permissions {
    /// Whether `role` may do `action` on namespace `ns`.
    pub(crate) fn allows(&self, ns: &str, role: &str, action: MockAction) -> bool {
        match self.grants.get(ns) {
            None => true,
            Some(roles) => roles.get(role).is_some_and(|a| a.contains(&action)),
        }
    }

    /// Sets the actions of `role` on `ns` (replacing what it had).
    pub(crate) fn grant(&mut self, ns: &str, role: &str, actions: &[MockAction]) {
        self.grants
            .entry(ns.to_owned())
            .or_default()
            .insert(role.to_owned(), actions.iter().copied().collect());
    }

    /// Removes every action of `role` on `ns`; whether it had any entry.
    pub(crate) fn revoke(&mut self, ns: &str, role: &str) -> bool {
        self.grants
            .get_mut(ns)
            .is_some_and(|roles| roles.remove(role).is_some())
    }

    /// The grants of `ns`, by role (sorted); `None` while the namespace is open.
    pub(crate) fn of(&self, ns: &str) -> Option<Vec<(String, Vec<MockAction>)>> {
        self.grants.get(ns).map(|roles| {
            roles
                .iter()
                .map(|(role, actions)| (role.clone(), actions.iter().copied().collect()))
                .collect()
        })
    }

    /// Forgets the policies of `ns` (deleted).
    pub(crate) fn remove_namespace(&mut self, ns: &str) {
        self.grants.remove(ns);
    }
}

/// The role a CONNECT authenticates as.
pub(crate) fn role_of(connect: &wire::CommandConnect) -> String {
    match connect.auth_data.as_deref() {
        Some(data) if !data.is_empty() => String::from_utf8_lossy(data).into_owned(),
        _ => ANONYMOUS.to_owned(),
    }
}

/// The role of connection `conn` ([`ANONYMOUS`] if unknown or not authenticated).
pub(crate) fn role(conns: &Conns, conn: ConnectionId) -> &str {
    conns.get(conn).map_or(ANONYMOUS, |c| c.role.as_str())
}

/// Whether connection `conn` may do `action` on `topic` (any form).
pub(crate) fn may(
    conns: &Conns,
    permissions: &Permissions,
    conn: ConnectionId,
    topic: &str,
    action: MockAction,
) -> bool {
    let ns = namespace_of(&canonical_topic(topic));
    permissions.allows(&ns, role(conns, conn), action)
}

/// The ERROR AuthorizationError answer to request `request_id` if connection `conn` may not do
/// `action` on `topic`.
pub(crate) fn refusal(
    conns: &Conns,
    permissions: &Permissions,
    conn: ConnectionId,
    topic: &str,
    action: MockAction,
    request_id: u64,
) -> Option<Step> {
    if may(conns, permissions, conn, topic, action) {
        return None;
    }
    let verb = match action {
        MockAction::Produce => "produce on",
        MockAction::Consume => "consume from",
    };
    let message = format!(
        "Client with role '{}' is not authorized to {verb} {}",
        role(conns, conn),
        canonical_topic(topic)
    );
    Some(Step::Reply(error(
        request_id,
        ServerError::AuthorizationError,
        &message,
    )))
}

impl MockBroker {
    /// Grants `role` the `actions` on namespace `namespace` (`tenant/ns`), replacing what it
    /// had there. From the first grant on a namespace, only granted roles may produce / consume
    /// on its topics (see the `permissions` module); before, everyone may. The table is part of
    /// the cluster's metadata (shared by the brokers of a cluster) and applies to producers and
    /// consumers created from now on. Fails with [`MockAdminError::InvalidName`].
    pub fn grant_permission(
        &self,
        namespace: &str,
        role: &str,
        actions: &[MockAction],
    ) -> Result<(), MockAdminError> {
        let ns = parse_namespace(namespace)?;
        lock(&self.shared().state)
            .permissions
            .grant(&ns, role, actions);
        Ok(())
    }

    /// Revokes every permission of `role` on namespace `namespace`. The namespace stays
    /// restricted (to the roles still granted, maybe none). Fails with
    /// [`MockAdminError::InvalidName`].
    pub fn revoke_permissions(&self, namespace: &str, role: &str) -> Result<(), MockAdminError> {
        let ns = parse_namespace(namespace)?;
        lock(&self.shared().state).permissions.revoke(&ns, role);
        Ok(())
    }

    /// The permissions granted on namespace `namespace`, by role (sorted); `None` while none
    /// was ever granted (everyone may do everything).
    pub fn permissions(&self, namespace: &str) -> Option<Vec<(String, Vec<MockAction>)>> {
        let ns = parse_namespace(namespace).ok()?;
        lock(&self.shared().state).permissions.of(&ns)
    }

    /// The role connection `conn` authenticated as (its CONNECT auth data as UTF-8, or
    /// `"anonymous"`); `None` if the connection is gone.
    pub fn connection_role(&self, conn: ConnectionId) -> Option<String> {
        lock(&self.shared().state)
            .conns
            .get(conn)
            .map(|c| c.role.clone())
    }

    /// Sets the broker setting `allowAutoSubscriptionCreation` (initially
    /// [`MockBrokerConfig::allow_auto_subscription_creation`](super::MockBrokerConfig)). While
    /// off, a producer creating its topic does not create its PIP-124 initial subscription.
    pub fn set_allow_auto_subscription_creation(&self, allow: bool) {
        let url = self.service_url();
        lock(&self.shared().state)
            .settings_mut(&url, self.config())
            .allow_auto_subscription_creation = allow;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_until_the_first_grant() {
        let mut p = Permissions::default();
        assert!(p.allows("a/b", "anyone", MockAction::Produce));
        p.grant("a/b", "alice", &[MockAction::Produce]);
        assert!(p.allows("a/b", "alice", MockAction::Produce));
        assert!(!p.allows("a/b", "alice", MockAction::Consume));
        assert!(!p.allows("a/b", "bob", MockAction::Produce));
        assert!(p.allows("a/c", "bob", MockAction::Consume));
        assert!(p.revoke("a/b", "alice"));
        assert!(!p.allows("a/b", "alice", MockAction::Produce));
        assert_eq!(p.of("a/b"), Some(vec![]));
        p.remove_namespace("a/b");
        assert!(p.allows("a/b", "bob", MockAction::Produce));
    }

    #[test]
    fn roles_come_from_the_auth_data() {
        let mut c = wire::CommandConnect::default();
        assert_eq!(role_of(&c), ANONYMOUS);
        c.auth_method_name = Some("token".into());
        c.auth_data = Some(b"alice-token".to_vec().into());
        assert_eq!(role_of(&c), "alice-token");
    }
}
