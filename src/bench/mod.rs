//! The capacity-planning harness behind `anthracite bench`. (Stub: implemented by the bench work.)
