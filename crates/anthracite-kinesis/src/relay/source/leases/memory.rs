//! An in-memory lease table with DynamoDB's conditional-write semantics: the model the lease
//! algorithm is checked against, and a stand-in for embedders' simulations.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::lease::Lease;
use super::table::{Fence, LeaseTable, Outcome, TableError, TableFuture, Update};

/// Rows in a map behind a lock; every call is atomic, like one DynamoDB request.
#[derive(Debug, Default)]
pub struct MemTable {
    rows: Mutex<BTreeMap<String, Lease>>,
}

impl MemTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every row.
    pub fn rows(&self) -> Vec<Lease> {
        self.with(|rows| rows.values().cloned().collect())
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Lease>) -> T) -> T {
        // A poisoned lock means a panicking test thread; the map itself is still consistent
        // because every mutation below is a single assignment.
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut rows)
    }
}

fn ready<'a, T: Send + 'a>(v: T) -> TableFuture<'a, T> {
    Box::pin(std::future::ready(Ok::<T, TableError>(v)))
}

impl LeaseTable for MemTable {
    fn name(&self) -> &str {
        "memory"
    }

    fn ensure_table(&self) -> TableFuture<'_, ()> {
        ready(())
    }

    fn scan(&self) -> TableFuture<'_, Vec<Lease>> {
        ready(self.rows())
    }

    fn get<'a>(&'a self, key: &'a str) -> TableFuture<'a, Option<Lease>> {
        ready(self.with(|rows| rows.get(key).cloned()))
    }

    fn create<'a>(&'a self, lease: &'a Lease) -> TableFuture<'a, Outcome> {
        ready(self.with(|rows| {
            if rows.contains_key(&lease.key) {
                Outcome::Conflict
            } else {
                rows.insert(lease.key.clone(), lease.clone());
                Outcome::Written
            }
        }))
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        fence: &'a Fence,
        update: &'a Update,
    ) -> TableFuture<'a, Outcome> {
        ready(self.with(|rows| match rows.get_mut(key) {
            Some(row) if update.condition_holds(fence, row) => {
                update.apply(row);
                Outcome::Written
            }
            _ => Outcome::Conflict,
        }))
    }

    fn add_child<'a>(&'a self, key: &'a str, child: &'a str) -> TableFuture<'a, Outcome> {
        ready(self.with(|rows| match rows.get_mut(key) {
            Some(row) => {
                if !row.children.iter().any(|c| c == child) {
                    row.children.push(child.to_string());
                    row.children.sort();
                }
                Outcome::Written
            }
            None => Outcome::Conflict,
        }))
    }

    fn delete_ended<'a>(&'a self, key: &'a str) -> TableFuture<'a, Outcome> {
        ready(self.with(|rows| match rows.get(key) {
            Some(row) if row.ended() => {
                rows.remove(key);
                Outcome::Written
            }
            _ => Outcome::Conflict,
        }))
    }
}
