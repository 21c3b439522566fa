//! Which loop a session drives. Pure: it sees only owners and start times.
//!
//! The claim rule: a loop belongs to the session named in its `session_id`.
//! A loop armed with an empty `session_id` (older Claude Code did not export
//! the session to commands) is claimed by the first session that stops while
//! driving no other loop; the claim is written to the file under the
//! project lock, so the loop can never block a second session. A session
//! drives at most one loop: its own most recently armed one.

use crate::time::Timestamp;

/// What selection needs to know of one loop file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub owner: Option<&'a str>,
    pub started_at: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Drive the loop at this index; it is already ours.
    Owned(usize),
    /// Drive the loop at this index and write our session into it.
    Claim(usize),
    /// None of these loops is this session's business.
    None,
}

pub fn select(session: &str, loops: &[Candidate<'_>]) -> Selection {
    let newest = |pred: &dyn Fn(&Candidate<'_>) -> bool| {
        loops
            .iter()
            .enumerate()
            .filter(|(_, c)| pred(c))
            .max_by_key(|(i, c)| (c.started_at, std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
    };
    if let Some(i) = newest(&|c| c.owner == Some(session)) {
        return Selection::Owned(i);
    }
    // Oldest unowned first: it has waited longest for its session.
    let unowned = loops
        .iter()
        .enumerate()
        .filter(|(_, c)| c.owner.is_none())
        .min_by_key(|(i, c)| (c.started_at, *i))
        .map(|(i, _)| i);
    unowned.map_or(Selection::None, Selection::Claim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(owner: Option<&str>, t: i64) -> Candidate<'_> {
        Candidate {
            owner,
            started_at: Some(Timestamp(t)),
        }
    }

    #[test]
    fn own_loop_wins() {
        assert_eq!(
            select("a", &[c(None, 1), c(Some("a"), 2)]),
            Selection::Owned(1)
        );
    }

    #[test]
    fn foreign_loops_are_left_alone() {
        assert_eq!(select("b", &[c(Some("a"), 1)]), Selection::None);
        assert_eq!(select("b", &[]), Selection::None);
    }

    #[test]
    fn unowned_is_claimed_oldest_first() {
        assert_eq!(
            select("b", &[c(Some("a"), 0), c(None, 5), c(None, 3)]),
            Selection::Claim(2)
        );
    }

    #[test]
    fn newest_own_loop_is_driven() {
        assert_eq!(
            select("a", &[c(Some("a"), 1), c(Some("a"), 9), c(Some("a"), 3)]),
            Selection::Owned(1)
        );
    }
}
