//! Lists kept in the browser's local storage, read entry by entry: an entry this build
//! cannot read (written by a later one, or damaged) is kept as it was, not dropped with
//! every other entry of its list at the next write.

use std::cell::RefCell;

use gloo_storage::{LocalStorage, Storage};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

thread_local! {
    /// Whose lists are read and written: the signed-in user's (`account/username`), or
    /// nobody's (the page used without signing in).
    static OWNER: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Makes the lists from now on those of `owner` (`None`: signed out). Each user of a
/// shared browser sees only their own history and saved tables.
pub fn set_owner(owner: Option<String>) {
    OWNER.with(|slot| *slot.borrow_mut() = owner);
}

/// The storage key of the list `key` for the current owner (`@` alone: nobody signed in),
/// to read and write that owner's list later even if someone else has signed in by then.
pub fn owned(key: &str) -> String {
    OWNER.with(|slot| format!("{key}@{}", slot.borrow().as_deref().unwrap_or("")))
}

/// Deletes the lists `keys` kept before lists had owners: whose they were is not known,
/// so no user may be shown them.
pub fn forget_unowned(keys: &[&str]) {
    for key in keys {
        LocalStorage::delete(key);
    }
}

/// The one list that is a cache, not a record: answers kept to show again (see `saved`).
/// When storage is full, every owner's copy of it gives way to the list being written.
pub const ANSWERS: &str = "crosstab.table-answers";

/// Deletes every owner's kept answers; whether there were any.
fn drop_answers() -> bool {
    let storage = LocalStorage::raw();
    let prefix = format!("{ANSWERS}@");
    let keys: Vec<String> = (0..storage.length().unwrap_or(0))
        .filter_map(|at| storage.key(at).ok().flatten())
        .filter(|key| key.starts_with(&prefix))
        .collect();
    for key in &keys {
        let _ = storage.remove_item(key);
    }
    !keys.is_empty()
}

/// Deletes the current owner's list `key`.
pub fn delete(key: &str) {
    LocalStorage::delete(owned(key));
}

/// A stored list: the entries read, and those kept unread.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredList<T> {
    /// The entries this build reads, in their stored order.
    pub entries: Vec<T>,
    /// The others, written back as they were (after the entries).
    unread: Vec<Value>,
}

impl<T: Serialize + DeserializeOwned> StoredList<T> {
    /// A list of `entries` alone (writing it drops any kept unread).
    pub fn of(entries: Vec<T>) -> StoredList<T> {
        StoredList {
            entries,
            unread: Vec::new(),
        }
    }

    /// The list stored under `key`; empty when there is none, or it is no list at all.
    pub fn load(key: &str) -> StoredList<T> {
        StoredList::load_at(&owned(key))
    }

    /// Writes the list under `key`.
    pub fn store(&self, key: &str) -> Result<(), String> {
        self.store_at(&owned(key))
    }

    /// The list under `storage_key`, an [`owned`] key.
    pub fn load_at(storage_key: &str) -> StoredList<T> {
        StoredList::from_value(LocalStorage::get(storage_key).unwrap_or(Value::Null))
    }

    /// Writes the list under `storage_key`, an [`owned`] key; when storage is full, kept
    /// answers give way to any other list.
    pub fn store_at(&self, storage_key: &str) -> Result<(), String> {
        let value = self.to_value();
        match LocalStorage::set(storage_key, &value) {
            Err(_) if !storage_key.starts_with(ANSWERS) && drop_answers() => {
                LocalStorage::set(storage_key, &value)
            }
            written => written,
        }
        .map_err(|error| error.to_string())
    }

    /// The list of a stored JSON value.
    pub fn from_value(value: Value) -> StoredList<T> {
        let mut list = StoredList {
            entries: Vec::new(),
            unread: Vec::new(),
        };
        let Value::Array(items) = value else {
            return list;
        };
        for item in items {
            match serde_json::from_value(item.clone()) {
                Ok(entry) => list.entries.push(entry),
                Err(_) => list.unread.push(item),
            }
        }
        list
    }

    /// The JSON value to store: the entries, then the unread ones as they were.
    pub fn to_value(&self) -> Value {
        let entries = self
            .entries
            .iter()
            .filter_map(|entry| serde_json::to_value(entry).ok());
        Value::Array(entries.chain(self.unread.iter().cloned()).collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Entry {
        name: String,
    }

    #[test]
    fn an_unreadable_entry_is_kept_and_the_others_read() {
        let stored = json!([{"name": "a"}, {"name": 7, "future": true}, {"name": "b"}]);
        let mut list: StoredList<Entry> = StoredList::from_value(stored);
        assert_eq!(
            list.entries,
            [Entry { name: "a".into() }, Entry { name: "b".into() }]
        );
        list.entries.retain(|e| e.name != "a");
        assert_eq!(
            list.to_value(),
            json!([{"name": "b"}, {"name": 7, "future": true}])
        );
        let none: StoredList<Entry> = StoredList::from_value(json!({"not": "a list"}));
        assert!(none.entries.is_empty());
        assert_eq!(none.to_value(), json!([]));
    }
}
