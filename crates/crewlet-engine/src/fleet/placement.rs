//! Which seats this node should claim or give back, given the live nodes
//! and the seat leases: a pure function, run at every heartbeat.
//!
//! Seats are grouped by their role's `placement` (no placement: one group
//! every seat node may run). In each group a node's fair share is
//! `ceil(group size / eligible live nodes)`: it claims free seats up to its
//! share (seats it held last first, for warm restarts) and hands back what
//! it holds beyond it, so a fleet that grows spreads out and one that
//! shrinks fills in. A seat no live node may run is reported, never
//! widened onto a node its placement excludes.

use std::collections::{BTreeMap, BTreeSet};

use crewlet_config::later::Placement;

/// A live node as its presence lease describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub id: String,
    pub labels: BTreeMap<String, String>,
    /// The node runs seats.
    pub seats: bool,
}

/// A seat to place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatSpec {
    pub handle: String,
    pub placement: Option<Placement>,
}

/// A seat lease as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatLeaseView {
    /// The stable node id of the holder (or of the last one).
    pub node: String,
    pub live: bool,
}

/// What to do this heartbeat.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementPlan {
    pub claim: Vec<String>,
    pub release: Vec<String>,
    /// Seats no live node may run.
    pub unplaceable: Vec<String>,
}

/// Whether `node` may run a seat with `placement`.
pub fn eligible(node: &NodeView, placement: Option<&Placement>) -> bool {
    if !node.seats {
        return false;
    }
    let Some(p) = placement else {
        return true;
    };
    (p.node.is_empty() || p.node == node.id)
        && p.labels
            .iter()
            .all(|(k, v)| node.labels.get(k).is_some_and(|have| have == v))
}

fn group_key(p: Option<&Placement>) -> String {
    match p {
        None => String::new(),
        Some(p) => {
            let labels: BTreeMap<&String, &String> = p.labels.iter().collect();
            format!("{}|{labels:?}", p.node)
        }
    }
}

/// The plan of node `me` (one of `nodes` when it is live) for `seats`,
/// given the seat leases by handle and what it holds.
pub fn plan(
    me: &NodeView,
    nodes: &[NodeView],
    seats: &[SeatSpec],
    leases: &BTreeMap<String, SeatLeaseView>,
    held: &BTreeSet<String>,
    draining: bool,
) -> PlacementPlan {
    let mut out = PlacementPlan::default();
    let known: BTreeSet<&str> = seats.iter().map(|s| s.handle.as_str()).collect();
    // Seats the company no longer has.
    out.release
        .extend(held.iter().filter(|h| !known.contains(h.as_str())).cloned());
    let mut groups: BTreeMap<String, Vec<&SeatSpec>> = BTreeMap::new();
    for s in seats {
        groups
            .entry(group_key(s.placement.as_ref()))
            .or_default()
            .push(s);
    }
    // `me` counts even before its presence is visible to itself.
    let mut live: Vec<&NodeView> = nodes.iter().filter(|n| n.id != me.id).collect();
    live.push(me);
    for members in groups.values() {
        let placement = members[0].placement.as_ref();
        let eligible_nodes = live.iter().filter(|n| eligible(n, placement)).count();
        if eligible_nodes == 0 {
            out.unplaceable
                .extend(members.iter().map(|s| s.handle.clone()));
            continue;
        }
        let mine: Vec<&str> = members
            .iter()
            .filter(|s| held.contains(&s.handle))
            .map(|s| s.handle.as_str())
            .collect();
        if draining || !eligible(me, placement) {
            out.release.extend(mine.iter().map(|h| (*h).to_owned()));
            continue;
        }
        let share = members.len().div_ceil(eligible_nodes);
        // While a peer holds less than the even floor, hold no more than
        // the floor (so 10 seats on 3 nodes end 4/3/3, not 4/4/2).
        let floor = members.len() / eligible_nodes;
        let group: BTreeSet<&str> = members.iter().map(|s| s.handle.as_str()).collect();
        let poorest_peer = live
            .iter()
            .filter(|n| n.id != me.id && eligible(n, placement))
            .map(|n| {
                leases
                    .iter()
                    .filter(|(h, l)| l.live && l.node == n.id && group.contains(h.as_str()))
                    .count()
            })
            .min();
        let cap = match poorest_peer {
            Some(p) if p < floor && mine.len() > floor => floor,
            _ => share,
        };
        if mine.len() > cap {
            // Hand back the seats that were last someone else's first.
            let mut extra: Vec<&str> = mine.clone();
            extra.sort_by_key(|h| {
                (
                    leases.get(*h).is_some_and(|l| l.node == me.id),
                    h.to_string(),
                )
            });
            out.release
                .extend(extra.iter().take(mine.len() - cap).map(|h| (*h).to_owned()));
            continue;
        }
        let room = share - mine.len();
        let mut free: Vec<&SeatSpec> = members
            .iter()
            .copied()
            .filter(|s| !held.contains(&s.handle))
            .filter(|s| leases.get(&s.handle).is_none_or(|l| !l.live))
            .collect();
        // Seats this node held last come back to it first.
        free.sort_by_key(|s| {
            (
                leases.get(&s.handle).is_none_or(|l| l.node != me.id),
                s.handle.clone(),
            )
        });
        out.claim
            .extend(free.iter().take(room).map(|s| s.handle.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, labels: &[(&str, &str)]) -> NodeView {
        NodeView {
            id: id.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            seats: true,
        }
    }

    fn seats(n: usize) -> Vec<SeatSpec> {
        (0..n)
            .map(|i| SeatSpec {
                handle: format!("s{i:02}"),
                placement: None,
            })
            .collect()
    }

    fn held_by(leases: &BTreeMap<String, SeatLeaseView>, id: &str) -> BTreeSet<String> {
        leases
            .iter()
            .filter(|(_, l)| l.live && l.node == id)
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// Runs every node's plan in turn until nothing changes; returns the
    /// leases.
    fn converge(
        nodes: &[NodeView],
        seats: &[SeatSpec],
        mut leases: BTreeMap<String, SeatLeaseView>,
    ) -> BTreeMap<String, SeatLeaseView> {
        for _ in 0..20 {
            let mut changed = false;
            for me in nodes {
                let held = held_by(&leases, &me.id);
                let p = plan(me, nodes, seats, &leases, &held, false);
                for h in p.release {
                    leases.insert(
                        h,
                        SeatLeaseView {
                            node: me.id.clone(),
                            live: false,
                        },
                    );
                    changed = true;
                }
                for h in p.claim {
                    leases.insert(
                        h,
                        SeatLeaseView {
                            node: me.id.clone(),
                            live: true,
                        },
                    );
                    changed = true;
                }
            }
            if !changed {
                return leases;
            }
        }
        panic!("placement did not converge")
    }

    fn counts(leases: &BTreeMap<String, SeatLeaseView>) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for l in leases.values().filter(|l| l.live) {
            *out.entry(l.node.clone()).or_insert(0) += 1;
        }
        out
    }

    #[test]
    fn seats_spread_evenly_and_every_seat_has_one_node() {
        let nodes = [node("a", &[]), node("b", &[]), node("c", &[])];
        let leases = converge(&nodes, &seats(10), BTreeMap::new());
        assert_eq!(leases.values().filter(|l| l.live).count(), 10);
        let c = counts(&leases);
        assert!(c.values().all(|n| (3..=4).contains(n)), "{c:?}");
    }

    #[test]
    fn a_node_alone_takes_all_and_gives_back_when_peers_join() {
        let alone = [node("a", &[])];
        let leases = converge(&alone, &seats(9), BTreeMap::new());
        assert_eq!(counts(&leases)["a"], 9);
        let three = [node("a", &[]), node("b", &[]), node("c", &[])];
        let leases = converge(&three, &seats(9), leases);
        assert_eq!(
            counts(&leases).values().copied().collect::<Vec<_>>(),
            vec![3, 3, 3]
        );
    }

    #[test]
    fn a_dead_nodes_seats_are_taken_by_the_survivors() {
        let three = [node("a", &[]), node("b", &[]), node("c", &[])];
        let mut leases = converge(&three, &seats(9), BTreeMap::new());
        for l in leases.values_mut().filter(|l| l.node == "c") {
            l.live = false;
        }
        let two = [node("a", &[]), node("b", &[])];
        let leases = converge(&two, &seats(9), leases);
        assert_eq!(leases.values().filter(|l| l.live).count(), 9);
        assert!(!counts(&leases).contains_key("c"));
    }

    #[test]
    fn placement_pins_seats_and_shares_are_per_group() {
        let mut all = seats(1);
        for i in 0..9 {
            all.push(SeatSpec {
                handle: format!("eu{i}"),
                placement: Some(Placement {
                    node: String::new(),
                    labels: [("zone".to_owned(), "eu".to_owned())].into_iter().collect(),
                }),
            });
        }
        let nodes = [
            node("a", &[]),
            node("b", &[]),
            node("eu-1", &[("zone", "eu")]),
        ];
        let leases = converge(&nodes, &all, BTreeMap::new());
        let c = counts(&leases);
        // Every eu seat on the one eu node; the free seat anywhere.
        assert!(c["eu-1"] >= 9, "{c:?}");
        assert!(
            leases
                .iter()
                .filter(|(h, _)| h.starts_with("eu"))
                .all(|(_, l)| l.live && l.node == "eu-1")
        );
        // No eu node alive: the eu seats are unplaceable, not widened.
        let p = plan(
            &nodes[0],
            &nodes[..2],
            &all,
            &BTreeMap::new(),
            &BTreeSet::new(),
            false,
        );
        assert_eq!(p.unplaceable.len(), 9);
        assert!(p.claim.iter().all(|h| !h.starts_with("eu")));
    }

    #[test]
    fn a_draining_node_gives_everything_back_and_claims_nothing() {
        let me = node("a", &[]);
        let held: BTreeSet<String> = ["s00".to_owned(), "s01".to_owned()].into();
        let p = plan(
            &me,
            std::slice::from_ref(&me),
            &seats(4),
            &BTreeMap::new(),
            &held,
            true,
        );
        assert!(p.claim.is_empty());
        assert_eq!(p.release, vec!["s00".to_owned(), "s01".to_owned()]);
    }

    #[test]
    fn a_node_that_runs_no_seats_claims_none_and_is_not_counted() {
        let mut ingress = node("api", &[]);
        ingress.seats = false;
        let nodes = [node("a", &[]), ingress.clone()];
        let p = plan(
            &nodes[0],
            &nodes,
            &seats(4),
            &BTreeMap::new(),
            &BTreeSet::new(),
            false,
        );
        assert_eq!(p.claim.len(), 4);
        let p = plan(
            &ingress,
            &nodes,
            &seats(4),
            &BTreeMap::new(),
            &BTreeSet::new(),
            false,
        );
        assert!(p.claim.is_empty());
    }
}
