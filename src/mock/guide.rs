//! Guide placeholder.
