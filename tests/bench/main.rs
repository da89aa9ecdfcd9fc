//! The capacity-planning harness (`anthracite bench`) over real loopback sockets: the
//! harness as a library, and `anthracite bench` running it as a program of its own.

mod cli;
mod harness;
