//! OAuth2 client credentials (filled in below).
