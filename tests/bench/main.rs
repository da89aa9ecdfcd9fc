//! The capacity-planning harness (`anthracite bench`) over real loopback sockets.

mod harness;
