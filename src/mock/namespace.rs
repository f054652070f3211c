//! Tenants and namespaces: the parents of topics, as a real broker keeps them in its metadata
//! store.
//!
//! A topic belongs to the namespace in its name (`persistent://tenant/ns/t` → `tenant/ns`; the
//! old four-part form `tenant/cluster/ns/t` → `tenant/cluster/ns`). Namespaces are created
//! with their first topic (as on a permissive broker) or explicitly; a tenant exists once one
//! of its namespaces was created. Besides existing, a namespace can be:
//! - being deleted (PIP-139, forced deletion in progress): no producer or consumer may attach to
//!   any of its topics and no topic may be created in it;
//! - terminated (the "terminated namespace" of the PIP-139 discussion): no topic may be created
//!   in it, existing topics keep working. Termination outlives deletion: a terminated namespace
//!   that was deleted still refuses topic creation, until it is created again explicitly.
//!
//! A namespace's policies the mock models: message deduplication (off by default, as on a
//! broker with `brokerDeduplicationEnabled=false`), set with `MockBroker::set_deduplication`.

use std::collections::{BTreeMap, BTreeSet};

use super::admin_error::MockAdminError;

/// The namespace of canonical topic `topic` (`scheme://tenant/ns/local` → `tenant/ns`).
pub(crate) fn namespace_of(topic: &str) -> String {
    let rest = topic.split_once("://").map_or(topic, |(_, rest)| rest);
    let parts: Vec<&str> = rest.splitn(4, '/').collect();
    match parts.len() {
        4 => parts[..3].join("/"),
        3 => parts[..2].join("/"),
        _ => rest.rsplit_once('/').map_or("", |(ns, _)| ns).to_owned(),
    }
}

/// Checks an admin-given namespace name (`tenant/ns`, or `tenant/cluster/ns`) and returns it
/// without surrounding slashes.
pub(crate) fn parse_namespace(name: &str) -> Result<String, MockAdminError> {
    let name = name.trim_matches('/');
    let parts: Vec<&str> = name.split('/').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty() || p.contains(':')) {
        return Err(MockAdminError::InvalidName(name.to_owned()));
    }
    Ok(name.to_owned())
}

/// One namespace.
#[derive(Debug, Default, Clone, Copy)]
struct NamespaceInfo {
    /// A deletion is in progress.
    deleting: bool,
}

/// The tenants and namespaces.
#[derive(Debug, Default)]
pub(crate) struct Namespaces {
    map: BTreeMap<String, NamespaceInfo>,
    /// Terminated namespaces, existing or deleted.
    terminated: BTreeSet<String>,
    /// Namespaces with message deduplication on (a policy, kept by name like upstream's
    /// namespace policies; dropped with the namespace's deletion).
    deduplication: BTreeSet<String>,
    tenants: BTreeSet<String>,
}

impl Namespaces {
    /// Makes sure `ns` exists (a topic is being created in it).
    pub(crate) fn ensure(&mut self, ns: &str) {
        if !self.map.contains_key(ns) {
            self.insert(ns);
        }
    }

    fn insert(&mut self, ns: &str) {
        self.map.insert(ns.to_owned(), NamespaceInfo::default());
        if let Some((tenant, _)) = ns.split_once('/') {
            self.tenants.insert(tenant.to_owned());
        }
    }

    /// Creates `ns` explicitly (admin): fails if it exists; clears a termination left by a
    /// deleted namespace of that name.
    pub(crate) fn create(&mut self, ns: &str) -> Result<(), MockAdminError> {
        match self.map.get(ns) {
            Some(info) if info.deleting => Err(MockAdminError::NamespaceBeingDeleted(ns.into())),
            Some(_) => Err(MockAdminError::NamespaceExists(ns.into())),
            None => {
                self.terminated.remove(ns);
                self.insert(ns);
                Ok(())
            }
        }
    }

    /// Whether `ns` exists (also while being deleted).
    pub(crate) fn exists(&self, ns: &str) -> bool {
        self.map.contains_key(ns)
    }

    /// Whether a deletion of `ns` is in progress.
    pub(crate) fn is_deleting(&self, ns: &str) -> bool {
        self.map.get(ns).is_some_and(|info| info.deleting)
    }

    /// Whether `ns` is terminated (even if it was deleted since).
    pub(crate) fn is_terminated(&self, ns: &str) -> bool {
        self.terminated.contains(ns)
    }

    /// Terminates `ns`, which must exist.
    pub(crate) fn terminate(&mut self, ns: &str) -> Result<(), MockAdminError> {
        if !self.exists(ns) {
            return Err(MockAdminError::NamespaceNotFound(ns.into()));
        }
        self.terminated.insert(ns.to_owned());
        Ok(())
    }

    /// Marks `ns` as being deleted; fails if it does not exist or already is.
    pub(crate) fn start_deleting(&mut self, ns: &str) -> Result<(), MockAdminError> {
        match self.map.get_mut(ns) {
            None => Err(MockAdminError::NamespaceNotFound(ns.into())),
            Some(info) if info.deleting => Err(MockAdminError::NamespaceBeingDeleted(ns.into())),
            Some(info) => {
                info.deleting = true;
                Ok(())
            }
        }
    }

    /// Forgets `ns` (its deletion is complete); a termination stays, its policies go.
    pub(crate) fn remove(&mut self, ns: &str) {
        self.map.remove(ns);
        self.deduplication.remove(ns);
    }

    /// Turns message deduplication on or off for the topics of `ns`.
    pub(crate) fn set_deduplication(&mut self, ns: &str, on: bool) {
        if on {
            self.deduplication.insert(ns.to_owned());
        } else {
            self.deduplication.remove(ns);
        }
    }

    /// Whether message deduplication is on for the topics of `ns`.
    pub(crate) fn deduplication(&self, ns: &str) -> bool {
        self.deduplication.contains(ns)
    }

    /// Why a topic cannot be created in `ns` now, if it cannot.
    pub(crate) fn creation_refusal(&self, ns: &str) -> Option<String> {
        if self.is_deleting(ns) {
            Some("Namespace is being deleted".to_owned())
        } else if self.is_terminated(ns) {
            Some(format!(
                "Namespace {ns} is terminated: no topic can be created in it"
            ))
        } else {
            None
        }
    }

    /// The existing namespaces, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    /// The tenants, sorted.
    pub(crate) fn tenants(&self) -> Vec<String> {
        self.tenants.iter().cloned().collect()
    }
}

/// Completes a short topic name the way brokers and clients do: `t` →
/// `persistent://public/default/t`, `tenant/ns/t` → `persistent://tenant/ns/t`; full names are
/// kept as they are.
pub(crate) fn canonical_topic(topic: &str) -> String {
    if topic.contains("://") {
        topic.to_owned()
    } else if topic.contains('/') {
        format!("persistent://{topic}")
    } else {
        format!("persistent://public/default/{topic}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_of_topics() {
        assert_eq!(namespace_of("persistent://a/b/t"), "a/b");
        assert_eq!(namespace_of("non-persistent://a/b/t-partition-1"), "a/b");
        assert_eq!(namespace_of("persistent://a/c/b/t"), "a/c/b");
        assert_eq!(parse_namespace("/a/b/").unwrap(), "a/b");
        assert!(parse_namespace("a").is_err());
        assert!(parse_namespace("a//b").is_err());
        assert!(parse_namespace("persistent://a/b").is_err());
    }

    #[test]
    fn lifecycle_of_a_namespace() {
        let mut ns = Namespaces::default();
        ns.ensure("a/b");
        assert_eq!(
            (ns.names(), ns.tenants()),
            (vec!["a/b".into()], vec!["a".into()])
        );
        assert_eq!(
            ns.create("a/b"),
            Err(MockAdminError::NamespaceExists("a/b".into()))
        );
        assert!(ns.creation_refusal("a/b").is_none());
        ns.terminate("a/b").unwrap();
        assert!(ns.creation_refusal("a/b").unwrap().contains("terminated"));
        ns.start_deleting("a/b").unwrap();
        assert!(ns.start_deleting("a/b").is_err());
        assert_eq!(
            ns.creation_refusal("a/b").as_deref(),
            Some("Namespace is being deleted")
        );
        ns.remove("a/b");
        assert!(!ns.exists("a/b") && ns.is_terminated("a/b"));
        assert!(ns.terminate("a/b").is_err());
        ns.create("a/b").unwrap();
        assert!(!ns.is_terminated("a/b"));
    }
}
