//! Which held seats a renewal lost.
//!
//! A renewal asks for the seats held when it starts; claims and give-backs
//! go on meanwhile. Only a seat that was asked for, was not renewed, and is
//! still held under the epoch it was asked with is lost: a seat claimed
//! while the renewal ran was never asked for (the next renewal covers it),
//! and a seat being handed back is settled by its give-back.

use std::collections::{BTreeMap, BTreeSet};

use crewlet_store::Fence;

/// The seats lost by a renewal that asked for `asked` (handle → epoch held
/// then) and renewed `renewed`, given what is held and being released now.
pub(crate) fn lost_seats(
    asked: &BTreeMap<String, i64>,
    renewed: &BTreeSet<String>,
    held_now: &BTreeMap<String, Fence>,
    releasing: &BTreeSet<String>,
) -> Vec<String> {
    asked
        .iter()
        .filter(|(h, _)| !renewed.contains(*h) && !releasing.contains(*h))
        .filter(|(h, epoch)| held_now.get(*h).is_some_and(|f| f.epoch == **epoch))
        .map(|(h, _)| h.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(handle: &str, epoch: i64) -> (String, Fence) {
        (
            handle.to_owned(),
            Fence {
                resource: format!("seat:{handle}"),
                owner: "n1:abcd1234".to_owned(),
                epoch,
            },
        )
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_a_seat_asked_for_and_not_renewed_is_lost() {
        let asked: BTreeMap<String, i64> = [("a".to_owned(), 1), ("b".to_owned(), 1)].into();
        let held: BTreeMap<String, Fence> = [fence("a", 1), fence("b", 1)].into();
        assert_eq!(
            lost_seats(&asked, &set(&["a"]), &held, &set(&[])),
            ["b"],
            "b was asked for and not renewed"
        );
        assert!(lost_seats(&asked, &set(&["a", "b"]), &held, &set(&[])).is_empty());
    }

    #[test]
    fn a_seat_claimed_while_the_renewal_ran_is_not_lost() {
        let asked: BTreeMap<String, i64> = [("a".to_owned(), 1)].into();
        // `c` was claimed after the renewal read what is held.
        let held: BTreeMap<String, Fence> = [fence("a", 1), fence("c", 4)].into();
        assert!(lost_seats(&asked, &set(&["a"]), &held, &set(&[])).is_empty());
    }

    #[test]
    fn a_seat_being_handed_back_or_held_anew_is_not_lost() {
        let asked: BTreeMap<String, i64> = [("a".to_owned(), 1), ("b".to_owned(), 1)].into();
        // `a` is being handed back (its release may land first); `b` was
        // released and claimed again under a new epoch meanwhile.
        let held: BTreeMap<String, Fence> = [fence("a", 1), fence("b", 2)].into();
        assert!(lost_seats(&asked, &set(&[]), &held, &set(&["a"])).is_empty());
        // Gone from what is held: nothing left to detach.
        let none: BTreeMap<String, Fence> = BTreeMap::new();
        assert!(lost_seats(&asked, &set(&[]), &none, &set(&[])).is_empty());
    }
}
