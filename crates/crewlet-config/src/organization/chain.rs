//! A seat's manager chain as a shared list: every seat's chain is its
//! manager's link, and a link holds the manager's handle and the manager's
//! own chain. A 10 000-seat management line is 10 000 links, not the 50
//! million handles separate lists would copy.

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// Handles of a seat's managers, the nearest first. Cloning is cheap (one
/// reference count); read it with [`iter`](ManagerChain::iter) or copy it
/// out with [`to_vec`](ManagerChain::to_vec).
#[derive(Clone, Default)]
pub struct ManagerChain(Option<Arc<Link>>);

struct Link {
    handle: String,
    /// Links from this one to the top, this one included.
    len: usize,
    up: ManagerChain,
}

impl ManagerChain {
    /// The chain of a seat whose manager is `handle`, whose own chain is `up`.
    pub(crate) fn under(handle: String, up: ManagerChain) -> Self {
        let len = up.len() + 1;
        Self(Some(Arc::new(Link { handle, len, up })))
    }

    /// How many managers are above the seat.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |l| l.len)
    }

    /// True for a seat nobody manages.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The nearest manager (the seat's own `manager`).
    pub fn first(&self) -> Option<&str> {
        self.0.as_deref().map(|l| l.handle.as_str())
    }

    /// The top of the chain.
    pub fn last(&self) -> Option<&str> {
        self.iter().last()
    }

    /// Handles from the nearest manager up.
    pub fn iter(&self) -> ManagerChainIter<'_> {
        ManagerChainIter(self.0.as_deref())
    }

    pub fn contains(&self, handle: &str) -> bool {
        self.iter().any(|h| h == handle)
    }

    /// The handles as a list of their own.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

/// The handles of a [`ManagerChain`], nearest first.
#[derive(Clone)]
pub struct ManagerChainIter<'a>(Option<&'a Link>);

impl<'a> Iterator for ManagerChainIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let link = self.0?;
        self.0 = link.up.0.as_deref();
        Some(&link.handle)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.map_or(0, |l| l.len);
        (n, Some(n))
    }
}

impl ExactSizeIterator for ManagerChainIter<'_> {}

impl<'a> IntoIterator for &'a ManagerChain {
    type Item = &'a str;
    type IntoIter = ManagerChainIter<'a>;

    fn into_iter(self) -> ManagerChainIter<'a> {
        self.iter()
    }
}

impl Drop for ManagerChain {
    // Dropping the links one by one: the default drop would recurse once per
    // link and overflow the stack on a long chain.
    fn drop(&mut self) {
        let mut next = self.0.take();
        while let Some(link) = next {
            next = Arc::into_inner(link).and_then(|mut l| l.up.0.take());
        }
    }
}

impl PartialEq for ManagerChain {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ManagerChain {}

impl<S: AsRef<str>> PartialEq<[S]> for ManagerChain {
    fn eq(&self, other: &[S]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().map(AsRef::as_ref))
    }
}

impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for ManagerChain {
    fn eq(&self, other: &[S; N]) -> bool {
        *self == other[..]
    }
}

impl<S: AsRef<str>> PartialEq<Vec<S>> for ManagerChain {
    fn eq(&self, other: &Vec<S>) -> bool {
        *self == other[..]
    }
}

impl fmt::Debug for ManagerChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A list of handles, as the copied lists were.
impl Serialize for ManagerChain {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize) -> Vec<ManagerChain> {
        let mut chains = vec![ManagerChain::default()];
        for i in 0..n {
            let up = chains[i].clone();
            chains.push(ManagerChain::under(format!("s{i}"), up));
        }
        chains
    }

    #[test]
    fn chains_share_their_tails() {
        let chains = line(3);
        assert!(chains[0].is_empty());
        assert_eq!(chains[3], ["s2", "s1", "s0"]);
        assert_eq!(chains[3].len(), 3);
        assert_eq!(chains[3].first(), Some("s2"));
        assert_eq!(chains[3].last(), Some("s0"));
        assert!(chains[3].contains("s1"));
        assert_eq!(chains[2].to_vec(), ["s1", "s0"]);
        assert_eq!(format!("{:?}", chains[1]), r#"["s0"]"#);
        assert_eq!(
            serde_json::to_string(&chains[2]).ok().as_deref(),
            Some(r#"["s1","s0"]"#)
        );
        assert_ne!(chains[2], chains[3]);
    }

    #[test]
    fn a_long_chain_drops_without_recursing() {
        let mut chains = line(200_000);
        let last = chains.pop().unwrap_or_default();
        drop(chains);
        assert_eq!(last.len(), 200_000);
        drop(last);
    }
}
