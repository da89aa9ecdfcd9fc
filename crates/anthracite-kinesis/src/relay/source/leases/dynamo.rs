//! [`LeaseTable`] on DynamoDB: conditional `PutItem` / `UpdateItem` / `DeleteItem`, strongly
//! consistent `GetItem` and paged `Scan`.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus,
};

use super::lease::{Checkpoint, Lease, attr, sentinel};
use super::table::{Fence, LeaseTable, Outcome, TableError, TableFuture, Update};
use crate::relay::error_text;

/// How long `ensure_table` waits for a new table to become active.
const ACTIVE_WAIT: Duration = Duration::from_secs(120);

/// A lease table in DynamoDB.
#[derive(Clone, Debug)]
pub struct DynamoDbTable {
    client: Client,
    table: String,
}

type Item = HashMap<String, AttributeValue>;

impl DynamoDbTable {
    /// The table `table` through `client`.
    pub fn new(client: Client, table: &str) -> Self {
        Self {
            client,
            table: table.to_string(),
        }
    }

    fn service<E: std::error::Error + 'static>(
        &self,
        operation: &'static str,
        e: &E,
    ) -> TableError {
        TableError::Service {
            table: self.table.clone(),
            operation,
            message: error_text(e),
        }
    }

    fn key(key: &str) -> Item {
        HashMap::from([(attr::LEASE_KEY.to_string(), s(key))])
    }

    async fn describe(&self) -> Result<Option<TableStatus>, TableError> {
        match self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
        {
            Ok(out) => Ok(Some(
                out.table()
                    .and_then(|t| t.table_status().cloned())
                    .unwrap_or(TableStatus::Creating),
            )),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.service("DescribeTable", &e)),
        }
    }

    async fn create_table(&self) -> Result<(), TableError> {
        let built = (
            AttributeDefinition::builder()
                .attribute_name(attr::LEASE_KEY)
                .attribute_type(ScalarAttributeType::S)
                .build(),
            KeySchemaElement::builder()
                .attribute_name(attr::LEASE_KEY)
                .key_type(KeyType::Hash)
                .build(),
        );
        let (Ok(definition), Ok(key)) = built else {
            return Err(TableError::Service {
                table: self.table.clone(),
                operation: "CreateTable",
                message: "could not build the key schema".into(),
            });
        };
        let r = self
            .client
            .create_table()
            .table_name(&self.table)
            .attribute_definitions(definition)
            .key_schema(key)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match r {
            Ok(_) => {
                tracing::info!(table = %self.table, "created the lease table (on-demand billing)");
                Ok(())
            }
            // Another worker created it first.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_in_use_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(self.service("CreateTable", &e)),
        }
    }

    /// Maps a conditional write's result: a failed condition is an [`Outcome`], not an error.
    fn outcome<O, E>(
        &self,
        operation: &'static str,
        r: Result<O, SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>>,
        conflict: impl Fn(&E) -> bool,
    ) -> Result<Outcome, TableError>
    where
        E: std::error::Error + 'static,
    {
        match r {
            Ok(_) => Ok(Outcome::Written),
            Err(e) if e.as_service_error().is_some_and(&conflict) => Ok(Outcome::Conflict),
            Err(e) => Err(self.service(operation, &e)),
        }
    }

    fn parse(&self, item: &Item) -> Result<Lease, TableError> {
        parse_item(item).map_err(|(key, message)| TableError::Malformed {
            table: self.table.clone(),
            key,
            message,
        })
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A lease as a DynamoDB item (KCL 2.x attributes).
pub(super) fn to_item(lease: &Lease) -> HashMap<String, AttributeValue> {
    let (cp, sub) = lease.checkpoint.to_attrs();
    let mut item = HashMap::from([
        (attr::LEASE_KEY.to_string(), s(&lease.key)),
        (attr::LEASE_COUNTER.to_string(), n(lease.counter)),
        (attr::CHECKPOINT.to_string(), s(cp)),
        (attr::CHECKPOINT_SUB_SEQUENCE.to_string(), n(sub)),
        (attr::OWNER_SWITCHES.to_string(), n(lease.owner_switches)),
    ]);
    if let Some(o) = &lease.owner {
        item.insert(attr::LEASE_OWNER.to_string(), s(o));
    }
    // DynamoDB has no empty sets: an absent attribute means none.
    if !lease.parents.is_empty() {
        item.insert(
            attr::PARENT_SHARD_IDS.to_string(),
            AttributeValue::Ss(lease.parents.clone()),
        );
    }
    if !lease.children.is_empty() {
        item.insert(
            attr::CHILD_SHARD_IDS.to_string(),
            AttributeValue::Ss(lease.children.clone()),
        );
    }
    if let Some((start, end)) = &lease.hash_range {
        item.insert(attr::STARTING_HASH_KEY.to_string(), s(start));
        item.insert(attr::ENDING_HASH_KEY.to_string(), s(end));
    }
    if let Some(w) = &lease.handoff {
        item.insert(attr::HANDOFF_TO.to_string(), s(w));
    }
    item
}

/// A DynamoDB item as a lease; `Err((leaseKey, message))` when it is not one.
pub(super) fn parse_item(
    item: &HashMap<String, AttributeValue>,
) -> Result<Lease, (String, String)> {
    let key = match item.get(attr::LEASE_KEY) {
        Some(AttributeValue::S(k)) => k.clone(),
        _ => return Err((String::new(), format!("no string {}", attr::LEASE_KEY))),
    };
    let bad = |m: String| (key.clone(), m);
    let string = |name: &str| -> Result<Option<String>, (String, String)> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
            Some(_) => Err(bad(format!("{name} is not a string"))),
        }
    };
    let number = |name: &str| -> Result<Option<u64>, (String, String)> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| bad(format!("{name} = {v} is not a non-negative integer"))),
            Some(_) => Err(bad(format!("{name} is not a number"))),
        }
    };
    let set = |name: &str| -> Result<Vec<String>, (String, String)> {
        let mut v = match item.get(name) {
            None => Vec::new(),
            Some(AttributeValue::Ss(v)) => v.clone(),
            // KCL writes sets; accept a list too (hand-edited rows).
            Some(AttributeValue::L(l)) => l
                .iter()
                .map(|x| match x {
                    AttributeValue::S(s) => Ok(s.clone()),
                    _ => Err(bad(format!("{name} holds a non-string"))),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad(format!("{name} is not a string set"))),
        };
        v.sort();
        Ok(v)
    };
    let counter =
        number(attr::LEASE_COUNTER)?.ok_or_else(|| bad(format!("no {}", attr::LEASE_COUNTER)))?;
    let cp = string(attr::CHECKPOINT)?.unwrap_or_else(|| sentinel::TRIM_HORIZON.to_string());
    let sub = number(attr::CHECKPOINT_SUB_SEQUENCE)?.unwrap_or(0);
    let checkpoint =
        Checkpoint::from_attrs(&cp, sub).map_err(|e| bad(format!("{}: {e}", attr::CHECKPOINT)))?;
    let hash_range = match (
        string(attr::STARTING_HASH_KEY)?,
        string(attr::ENDING_HASH_KEY)?,
    ) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    };
    Ok(Lease {
        owner: string(attr::LEASE_OWNER)?,
        counter,
        checkpoint,
        owner_switches: number(attr::OWNER_SWITCHES)?.unwrap_or(0),
        parents: set(attr::PARENT_SHARD_IDS)?,
        children: set(attr::CHILD_SHARD_IDS)?,
        hash_range,
        handoff: string(attr::HANDOFF_TO)?,
        key,
    })
}

/// Expression placeholders. None is a prefix of another, so a substring test finds uses.
const N_COUNTER: &str = "#lc";
const N_OWNER: &str = "#lo";
const N_CHECKPOINT: &str = "#cp";
const N_SUB: &str = "#cs";
const N_SWITCHES: &str = "#sw";
const N_HANDOFF: &str = "#ho";
const V_FENCE_COUNTER: &str = ":fc";
const V_FENCE_OWNER: &str = ":fo";
const V_NEW_OWNER: &str = ":nw";
const V_NEXT: &str = ":nx";
const V_CHECKPOINT: &str = ":cpv";
const V_SUB: &str = ":csv";
const V_ZERO: &str = ":zero";
const V_ONE: &str = ":one";
const V_SHARD_END: &str = ":end";
const V_HANDOFF: &str = ":ho";

/// The condition and update expressions of a fenced update, with only the names and values
/// they use (DynamoDB rejects unused ones).
pub(crate) struct Expressions {
    pub condition: String,
    pub update: String,
    pub names: HashMap<String, String>,
    pub values: HashMap<String, AttributeValue>,
}

pub(crate) fn expressions(fence: &Fence, update: &Update) -> Expressions {
    let mut condition = match &fence.owner {
        Some(_) => format!("{N_COUNTER} = {V_FENCE_COUNTER} AND {N_OWNER} = {V_FENCE_OWNER}"),
        None => format!("{N_COUNTER} = {V_FENCE_COUNTER} AND attribute_not_exists({N_OWNER})"),
    };
    if update.requires_unmarked() {
        condition.push_str(&format!(" AND attribute_not_exists({N_HANDOFF})"));
    }
    let update_expr = match update {
        Update::Take { worker } => {
            let switch = fence.owner.as_deref().is_some_and(|o| o != worker);
            if switch {
                format!(
                    "SET {N_OWNER} = {V_NEW_OWNER}, {N_COUNTER} = {V_NEXT}, {N_SWITCHES} = if_not_exists({N_SWITCHES}, {V_ZERO}) + {V_ONE} REMOVE {N_HANDOFF}"
                )
            } else {
                format!("SET {N_OWNER} = {V_NEW_OWNER}, {N_COUNTER} = {V_NEXT} REMOVE {N_HANDOFF}")
            }
        }
        Update::Renew => format!("SET {N_COUNTER} = {V_NEXT}"),
        Update::Checkpoint(_) => format!(
            "SET {N_CHECKPOINT} = {V_CHECKPOINT}, {N_SUB} = {V_SUB}, {N_SWITCHES} = {V_ZERO}"
        ),
        Update::End => format!(
            "SET {N_CHECKPOINT} = {V_SHARD_END}, {N_SUB} = {V_ZERO}, {N_SWITCHES} = {V_ZERO}, {N_COUNTER} = {V_NEXT} REMOVE {N_OWNER}, {N_HANDOFF}"
        ),
        Update::Release => format!("SET {N_COUNTER} = {V_NEXT} REMOVE {N_OWNER}, {N_HANDOFF}"),
        Update::Mark { .. } => format!("SET {N_HANDOFF} = {V_HANDOFF}"),
        Update::Transfer { .. } => format!(
            "SET {N_OWNER} = {V_NEW_OWNER}, {N_COUNTER} = {V_NEXT}, {N_SWITCHES} = if_not_exists({N_SWITCHES}, {V_ZERO}) + {V_ONE}"
        ),
    };
    let all_names = [
        (N_COUNTER, attr::LEASE_COUNTER),
        (N_OWNER, attr::LEASE_OWNER),
        (N_CHECKPOINT, attr::CHECKPOINT),
        (N_SUB, attr::CHECKPOINT_SUB_SEQUENCE),
        (N_SWITCHES, attr::OWNER_SWITCHES),
        (N_HANDOFF, attr::HANDOFF_TO),
    ];
    let mut all_values = vec![
        (V_FENCE_COUNTER, n(fence.counter)),
        (V_NEXT, n(fence.counter.saturating_add(1))),
        (V_ZERO, n(0)),
        (V_ONE, n(1)),
        (V_SHARD_END, s(sentinel::SHARD_END)),
    ];
    if let Some(o) = &fence.owner {
        all_values.push((V_FENCE_OWNER, s(o)));
    }
    if let Update::Take { worker } | Update::Transfer { to: worker } = update {
        all_values.push((V_NEW_OWNER, s(worker)));
    }
    if let Update::Mark { worker } = update {
        all_values.push((V_HANDOFF, s(worker)));
    }
    if let Update::Checkpoint(cp) = update {
        let (c, sub) = cp.to_attrs();
        all_values.push((V_CHECKPOINT, s(c)));
        all_values.push((V_SUB, n(sub)));
    }
    let used = |p: &str| condition.contains(p) || update_expr.contains(p);
    let names = all_names
        .into_iter()
        .filter(|(p, _)| used(p))
        .map(|(p, a)| (p.to_string(), a.to_string()))
        .collect();
    let values = all_values
        .into_iter()
        .filter(|(p, _)| used(p))
        .map(|(p, v)| (p.to_string(), v))
        .collect();
    Expressions {
        condition,
        update: update_expr,
        names,
        values,
    }
}

impl LeaseTable for DynamoDbTable {
    fn name(&self) -> &str {
        &self.table
    }

    fn ensure_table(&self) -> TableFuture<'_, ()> {
        Box::pin(async move {
            if self.describe().await?.is_none() {
                self.create_table().await?;
            }
            let end = tokio::time::Instant::now() + ACTIVE_WAIT;
            loop {
                match self.describe().await? {
                    Some(TableStatus::Active) => return Ok(()),
                    _ if tokio::time::Instant::now() > end => {
                        return Err(TableError::Service {
                            table: self.table.clone(),
                            operation: "DescribeTable",
                            message: format!("not ACTIVE after {ACTIVE_WAIT:?}"),
                        });
                    }
                    _ => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        })
    }

    fn scan(&self) -> TableFuture<'_, Vec<Lease>> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut start: Option<Item> = None;
            loop {
                let resp = self
                    .client
                    .scan()
                    .table_name(&self.table)
                    .consistent_read(true)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| self.service("Scan", &e))?;
                for item in resp.items() {
                    out.push(self.parse(item)?);
                }
                match resp.last_evaluated_key() {
                    Some(k) if !k.is_empty() => start = Some(k.clone()),
                    _ => return Ok(out),
                }
            }
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> TableFuture<'a, Option<Lease>> {
        Box::pin(async move {
            let resp = self
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(Self::key(key)))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| self.service("GetItem", &e))?;
            resp.item().map(|i| self.parse(i)).transpose()
        })
    }

    fn create<'a>(&'a self, lease: &'a Lease) -> TableFuture<'a, Outcome> {
        Box::pin(async move {
            let r = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(to_item(lease)))
                .condition_expression("attribute_not_exists(#lk)")
                .expression_attribute_names("#lk", attr::LEASE_KEY)
                .send()
                .await;
            self.outcome("PutItem", r, |e| e.is_conditional_check_failed_exception())
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a str,
        fence: &'a Fence,
        update: &'a Update,
    ) -> TableFuture<'a, Outcome> {
        Box::pin(async move {
            let x = expressions(fence, update);
            let r = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(Self::key(key)))
                .condition_expression(x.condition)
                .update_expression(x.update)
                .set_expression_attribute_names(Some(x.names))
                .set_expression_attribute_values(Some(x.values))
                .send()
                .await;
            self.outcome("UpdateItem", r, |e| {
                e.is_conditional_check_failed_exception()
            })
        })
    }

    fn add_child<'a>(&'a self, key: &'a str, child: &'a str) -> TableFuture<'a, Outcome> {
        Box::pin(async move {
            let r = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(Self::key(key)))
                .condition_expression("attribute_exists(#lk)")
                .update_expression("ADD #ch :c")
                .expression_attribute_names("#lk", attr::LEASE_KEY)
                .expression_attribute_names("#ch", attr::CHILD_SHARD_IDS)
                .expression_attribute_values(":c", AttributeValue::Ss(vec![child.to_string()]))
                .send()
                .await;
            self.outcome("UpdateItem", r, |e| {
                e.is_conditional_check_failed_exception()
            })
        })
    }

    fn delete_ended<'a>(&'a self, key: &'a str) -> TableFuture<'a, Outcome> {
        Box::pin(async move {
            let r = self
                .client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(Self::key(key)))
                .condition_expression("#cp = :end")
                .expression_attribute_names("#cp", attr::CHECKPOINT)
                .expression_attribute_values(":end", s(sentinel::SHARD_END))
                .send()
                .await;
            self.outcome("DeleteItem", r, |e| {
                e.is_conditional_check_failed_exception()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::source::checkpoint::{Position, SequenceNumber};

    #[test]
    fn items_round_trip_with_kcl_attribute_names() {
        let lease = Lease {
            key: "shardId-000000000001".into(),
            owner: Some("host-1".into()),
            counter: 7,
            checkpoint: Checkpoint::At(Position {
                sequence: SequenceNumber::new(
                    "49590338271490256608559692538361571095921575989136588802",
                )
                .unwrap_or_else(|e| panic!("{e}")),
                sub_sequence: 3,
            }),
            owner_switches: 2,
            parents: vec!["shardId-000000000000".into()],
            children: vec![],
            hash_range: Some(("0".into(), "170141183460469231731687303715884105727".into())),
            handoff: Some("host-2".into()),
        };
        let item = to_item(&lease);
        for name in [
            "leaseKey",
            "leaseOwner",
            "leaseCounter",
            "checkpoint",
            "checkpointSubSequenceNumber",
            "ownerSwitchesSinceCheckpoint",
            "parentShardId",
            "startingHashKey",
            "endingHashKey",
            "handoffTo",
        ] {
            assert!(item.contains_key(name), "{name} missing from {item:?}");
        }
        assert!(!item.contains_key("childShardIds"), "no empty sets");
        assert_eq!(parse_item(&item), Ok(lease));
    }

    #[test]
    fn expressions_name_only_what_they_use() {
        let fence = Fence {
            counter: 4,
            owner: None,
        };
        let x = expressions(&fence, &Update::Take { worker: "w".into() });
        assert!(x.condition.contains("attribute_not_exists(#lo)"));
        assert!(!x.update.contains("#sw"), "no owner switch from nobody");
        assert_eq!(x.values.len(), 3, "{:?}", x.values.keys());
        let fence = Fence {
            counter: 4,
            owner: Some("old".into()),
        };
        let x = expressions(&fence, &Update::Take { worker: "w".into() });
        assert!(x.update.contains("#sw"));
        let x = expressions(&fence, &Update::Checkpoint(Checkpoint::TrimHorizon));
        assert!(!x.update.contains("#lc"), "a checkpoint keeps the counter");
        assert!(!x.values.contains_key(":nx"));
        let x = expressions(&fence, &Update::End);
        assert!(x.update.contains("REMOVE #lo, #ho"));
        assert!(x.values.contains_key(":end"));
        let x = expressions(&fence, &Update::Renew);
        assert!(x.condition.contains("attribute_not_exists(#ho)"));
        let x = expressions(&fence, &Update::Mark { worker: "w".into() });
        assert!(x.condition.contains("attribute_not_exists(#ho)"));
        assert!(!x.update.contains("#lc"), "a mark keeps the counter");
        assert_eq!(x.values[":ho"], AttributeValue::S("w".into()));
        let x = expressions(&fence, &Update::Checkpoint(Checkpoint::TrimHorizon));
        assert!(
            !x.condition.contains("#ho"),
            "a checkpoint is allowed during a handoff"
        );
    }
}
