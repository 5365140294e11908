//! Region codes: where a node runs and where a client wants its task done.
//!
//! A code is `continent · 100 + zone` (zone 1..=99), `0` meaning "any / undeclared".
//! Continents: 1 North America, 2 South America, 3 Europe, 4 Africa, 5 Asia, 6 Oceania.
//! Providers use [`distance`] to rank open tasks: nearer first. The program stores the codes
//! and never enforces them (a client's preference is advisory).

/// "Any region" (tasks) or "undeclared" (nodes).
pub const ANY: u16 = 0;

/// The continent part of a code (0 for [`ANY`]).
pub const fn continent(code: u16) -> u16 {
    code / 100
}

/// How far a provider in `node` is from a task that asks for `task`, smaller is nearer:
/// 0 same region, 1 the task accepts any region, 2 same continent, 3 elsewhere (or the node
/// declared no region).
pub const fn distance(task: u16, node: u16) -> u8 {
    if task != ANY && task == node {
        0
    } else if task == ANY {
        1
    } else if node != ANY && continent(task) == continent(node) {
        2
    } else {
        3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearer_ranks_first() {
        assert_eq!(distance(301, 301), 0);
        assert_eq!(distance(ANY, 301), 1);
        assert_eq!(distance(302, 301), 2);
        assert_eq!(distance(101, 301), 3);
        assert_eq!(
            distance(301, ANY),
            3,
            "an undeclared node is never near a region"
        );
        assert_eq!(distance(ANY, ANY), 1);
    }
}
