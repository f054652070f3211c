//! The topics a consumer receives from: one topic's unit (its partitions, its retry topic),
//! the registry of every partition task, and a pattern consumer's topic discovery.

mod listing;
pub(crate) mod pattern;
pub(crate) mod registry;
pub(crate) mod topic;
