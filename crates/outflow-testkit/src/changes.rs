//! Generated change data, the same for every sink's change-data tests and the upsert
//! benchmark: reproducible from a seed, with the state the changes leave, which a test
//! compares with what a reader reads back.

use std::collections::BTreeMap;

/// One change to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// The key.
    pub key: u64,
    /// `c` (a key not held), `u` or `d` (a key held), as Debezium writes them.
    pub op: &'static str,
    /// The change's index in the stream, the row's value (a delete's too).
    pub value: u64,
    /// The value the key held before the change, if any (Debezium's `before`).
    pub before: Option<u64>,
}

/// `count` changes over `keys` keys, from `seed`: a create of a key not held, else an
/// update three times in four and a delete once; with the state they leave (each key held
/// and the value of its last change).
pub fn change_stream(seed: u64, keys: u64, count: u64) -> (Vec<Change>, BTreeMap<u64, u64>) {
    let mut state = BTreeMap::new();
    let mut seed = seed;
    // A linear congruential generator (Knuth's MMIX constants): enough to spread keys and
    // operations, and the same on every machine.
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    let changes = (0..count)
        .map(|value| {
            let key = next() % keys;
            let before = state.get(&key).copied();
            let op = match (before, next() % 4) {
                (None, _) => "c",
                (Some(_), 0) => "d",
                (Some(_), _) => "u",
            };
            if op == "d" {
                state.remove(&key);
            } else {
                state.insert(key, value);
            }
            Change {
                key,
                op,
                value,
                before,
            }
        })
        .collect();
    (changes, state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_what_the_changes_leave_and_a_seed_repeats() {
        let (changes, state) = change_stream(7, 50, 2_000);
        let mut applied = BTreeMap::new();
        for c in &changes {
            assert_eq!(applied.get(&c.key).copied(), c.before, "{c:?}");
            match c.op {
                "d" => applied.remove(&c.key),
                _ => applied.insert(c.key, c.value),
            };
        }
        assert_eq!(applied, state);
        assert!(changes.iter().any(|c| c.op == "d") && changes.iter().any(|c| c.op == "u"));
        assert_eq!(change_stream(7, 50, 2_000).0, changes);
    }
}
