//! A hostile broker cannot crash the client, exhaust its memory, spin it or make it lose
//! messages silently. The broker is `broker.rs` (a bare TCP server scripted per test); it
//! installs a counting global allocator: the tests that assert on the heap run alone
//! (`hostile::serial()`), the others beside each other (`hostile::alongside()`), each taken
//! as the test's first statement and held until its runtime is gone. They need a process of
//! their own: tests of other binaries running beside them would count in the heap's peak.

#[path = "broker.rs"]
mod hostile;

mod budget;
mod client;
mod connection;
mod consumer;
mod pattern;
mod probes;
