//! Who gets a connection to the keeper's server, and who keeps it (issue 29: a fixed cap per
//! address fell to 130 addresses holding 32 idle connections each).
//!
//! * **Fair shares that shrink with load.** A peer (an IPv4 address, an IPv6 /64) may hold
//!   `ServerLimits::connections_per_peer` connections while the server is at most half full;
//!   past that its allowance falls linearly to `ServerLimits::connections_per_peer_min` as
//!   the server fills, so a few hundred addresses cannot take every place.
//! * **Eviction instead of refusal when full.** A new connection from a peer holding fewer
//!   connections than the peer holding the most closes an idle connection of that peer (no
//!   request in flight, no transfer streaming) rather than being dropped: whoever holds more
//!   than their share pays for the newcomer.
//! * **A market's staked nodes ahead of strangers.** A request signed by a node's key
//!   (ed25519 over method, the server's host, path and query, a recent unix time and a nonce,
//!   in [`SIGNER`], [`TIME`], [`NONCE`] and [`SIGNATURE`]) whose signer is in the admitted
//!   set ([`Signers`]: the market's nodes holding at least the floor of stake, read from
//!   chain by the daemon, or the keys `keeper serve --admit` is given) moves its connection
//!   out of the strangers' places into a pool of `ServerLimits::node_connections` of its
//!   own, where it is never evicted, and its transfers draw from
//!   `ServerLimits::node_transfers`, which strangers cannot take.
//!   Only a signer in the set costs a signature check, so strangers cannot make the server
//!   verify signatures by sending made-up keys.
//! * **Shares by stake.** Each admitted signer holds at most its share of the node
//!   connections, of the node transfers and of the replay memory ([`Replays`]): a least share
//!   each ([`Admitted::share`]) and the rest in proportion to its stake. A signer over
//!   its share is served as a stranger; nothing it does takes another signer's places or
//!   evicts another signer's remembered signatures.
//! * **Bound to this server.** A signature names the host it was made for; a server accepts
//!   only its own names (`ServerLimits::own_hosts`), and answers an admitted signer's request
//!   signed for another host `403` ([`Verdict::OtherHost`]): a signature harvested by another
//!   server is never a node's here.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    net::IpAddr,
    str::FromStr,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
        Arc, Mutex, OnceLock, RwLock,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anchor_lang::prelude::Pubkey;
use solana_keypair::Keypair;
use solana_signature::Signature;
use solana_signer::Signer;

/// The header naming the signer of a request (its public key, base58).
pub const SIGNER: &str = "x-cm-signer";
/// The header carrying the unix time (seconds) the request was signed at.
pub const TIME: &str = "x-cm-time";
/// The header carrying the ed25519 signature (base58) over [`request_message`].
pub const SIGNATURE: &str = "x-cm-signature";
/// The header carrying a random nonce (hex), so that no two requests carry one signature.
pub const NONCE: &str = "x-cm-nonce";
/// The header of a `403` refusing an admitted node's signature made for another host
/// ([`Verdict::OtherHost`]): a node asking that server under a name it does not know asks
/// again unsigned, as a stranger.
pub const REFUSED: &str = "x-cm-refused";

/// The keys whose signed requests a server admits ahead of strangers, each with its stake
/// (token base units; its weight): the market's staked nodes' authorities. Shared: the daemon
/// replaces its content as it reads the nodes from chain.
pub type Signers = Arc<RwLock<Admitted>>;

/// The admitted signers and their stakes ([`Signers`]), with the total that shares are cut
/// from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admitted {
    stakes: HashMap<Pubkey, u64>,
    total: u128,
}

impl Admitted {
    /// A set of `(signer, stake)`; a signer named twice keeps its last stake, a zero stake
    /// admits nothing.
    pub fn new(stakes: impl IntoIterator<Item = (Pubkey, u64)>) -> Self {
        let mut a = Admitted::default();
        a.extend(stakes);
        a
    }

    /// Admits `signer` with `stake` (a zero stake removes it: a signer without stake is a
    /// stranger).
    pub fn insert(&mut self, signer: Pubkey, stake: u64) {
        self.remove(&signer);
        if stake > 0 {
            self.stakes.insert(signer, stake);
            self.total += u128::from(stake);
        }
    }

    /// Admits each of `stakes` ([`Admitted::insert`]).
    pub fn extend(&mut self, stakes: impl IntoIterator<Item = (Pubkey, u64)>) {
        for (k, w) in stakes {
            self.insert(k, w);
        }
    }

    /// No longer admits `signer`.
    pub fn remove(&mut self, signer: &Pubkey) {
        if let Some(w) = self.stakes.remove(signer) {
            self.total -= u128::from(w);
        }
    }

    /// `signer`'s stake, if it is admitted.
    pub fn stake(&self, signer: &Pubkey) -> Option<u64> {
        self.stakes.get(signer).copied()
    }

    /// Every admitted signer with its stake.
    pub fn iter(&self) -> impl Iterator<Item = (&Pubkey, u64)> {
        self.stakes.iter().map(|(k, w)| (k, *w))
    }

    /// Whether `signer` is admitted.
    pub fn contains(&self, signer: &Pubkey) -> bool {
        self.stakes.contains_key(signer)
    }

    /// How many signers are admitted.
    pub fn len(&self) -> usize {
        self.stakes.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.stakes.is_empty()
    }

    /// `signer`'s share of a pool of `pool` places: `least` each (less when the pool cannot
    /// give every signer that many: then an equal part of it), and what is left in proportion
    /// to stake. The shares of all signers add up to at most `pool`, so however the others
    /// use theirs, a signer's share is there for it. 0 for a signer not admitted.
    pub fn share(&self, signer: &Pubkey, pool: usize, least: usize) -> usize {
        let Some(&stake) = self.stakes.get(signer) else {
            return 0;
        };
        let n = self.stakes.len();
        let each = least.min(pool / n);
        let rest = (pool - each * n) as u128;
        each + (rest * u128::from(stake) / self.total.max(1)) as usize
    }
}

/// What a signature covers: a domain tag (so no other message signed by a node's key can be
/// replayed as a request), the method, the server's host as the request names it (`Host`:
/// a signature collected by one server cannot be replayed to another), the path with its
/// query, the time and a nonce (a server accepts each signature once, [`Replays`]).
pub fn request_message(
    method: &str,
    host: &str,
    path_and_query: &str,
    unix_time: u64,
    nonce: &str,
) -> Vec<u8> {
    format!(
        "compute-market request v2\n{method}\n{}\n{path_and_query}\n{unix_time}\n{nonce}",
        host.to_ascii_lowercase()
    )
    .into_bytes()
}

/// The four headers signing a `method` request to `host` (`host[:port]`, as its `Host`
/// header will say) for `path_and_query` by `kp` now.
pub fn sign_request(
    kp: &Keypair,
    method: &str,
    host: &str,
    path_and_query: &str,
) -> [(&'static str, String); 4] {
    let now = unix_now();
    // unique per request of this process: its start in nanoseconds and a counter (a nonce
    // need not be secret, only never repeated under one key and time)
    static COUNT: AtomicU64 = AtomicU64::new(0);
    static START: OnceLock<u128> = OnceLock::new();
    let start = START.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    });
    let nonce = format!("{start:x}.{:x}", COUNT.fetch_add(1, Relaxed));
    let sig = kp.sign_message(&request_message(method, host, path_and_query, now, &nonce));
    [
        (SIGNER, kp.pubkey().to_string()),
        (TIME, now.to_string()),
        (NONCE, nonce),
        (SIGNATURE, sig.to_string()),
    ]
}

/// Signatures a server has accepted within the skew window, per signer: each is accepted
/// once, so one collected on the wire cannot promote a second connection. Bounded per signer:
/// a signer holds at most its share of [`REPLAYS_MAX`] ([`Admitted::share`], at least
/// [`REPLAYS_LEAST`] while the memory allows), and a signer at its share has its further
/// requests served as a stranger's until its own entries age out. One signer's volume never
/// evicts another's entries nor keeps another's signatures out.
#[derive(Default)]
pub struct Replays {
    state: Mutex<ReplayState>,
}

#[derive(Default)]
struct ReplayState {
    by_signer: HashMap<Pubkey, Seen>,
    /// Entries held, all signers together.
    len: usize,
    /// When every signer's expired entries were last dropped (unix seconds).
    swept: u64,
}

/// One signer's accepted signatures: each with the unix time it may be forgotten at, in the
/// order accepted (forgotten from the front: a signer signing ahead of the clock keeps its own
/// entries longer, no one else's).
#[derive(Default)]
struct Seen {
    sigs: HashSet<[u8; 64]>,
    order: std::collections::VecDeque<(u64, [u8; 64])>,
}

impl Seen {
    /// Forgets the entries whose time has come; how many.
    fn expire(&mut self, now: u64) -> usize {
        let mut n = 0;
        while let Some((at, _)) = self.order.front() {
            if *at > now {
                break;
            }
            let (_, sig) = self.order.pop_front().expect("a front");
            self.sigs.remove(&sig);
            n += 1;
        }
        n
    }
}

/// Most signatures kept by [`Replays`], all signers together (a few MiB): the pool that
/// signers' shares are cut from.
pub const REPLAYS_MAX: usize = 65_536;

/// The least share of [`REPLAYS_MAX`] each admitted signer holds, whatever its stake (while
/// the memory allows as many for every signer): a verifier opens a few connections a minute,
/// each checked once.
pub const REPLAYS_LEAST: usize = 256;

/// What [`Replays::fresh`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fresh {
    /// New here; now remembered.
    New,
    /// Accepted before.
    Replayed,
    /// Its signer holds its whole share: not remembered (so not accepted).
    OverShare,
}

impl Replays {
    /// Whether `sig` by `signer`, signed at `time`, is new here and within `share` entries of
    /// the signer's own; then remembered until `time + skew` has passed (after which the time
    /// check refuses it anyway). A signer's entries are forgotten in the order it made them.
    pub fn fresh(
        &self,
        signer: &Pubkey,
        sig: &Signature,
        time: u64,
        skew: Duration,
        share: usize,
    ) -> Fresh {
        let now = unix_now();
        let mut st = self.state.lock().expect("replays lock");
        // signers that went quiet (or left the admitted set) give their memory back
        if now != st.swept {
            st.swept = now;
            let mut dropped = 0;
            st.by_signer.retain(|_, seen| {
                dropped += seen.expire(now);
                !seen.order.is_empty()
            });
            st.len -= dropped;
        }
        let key: [u8; 64] = sig.as_ref().try_into().expect("64 bytes");
        let seen = st.by_signer.entry(*signer).or_default();
        let dropped = seen.expire(now);
        let verdict = if seen.sigs.contains(&key) {
            Fresh::Replayed
        } else if seen.order.len() >= share {
            Fresh::OverShare
        } else {
            seen.sigs.insert(key);
            seen.order
                .push_back((time.saturating_add(skew.as_secs()) + 1, key));
            Fresh::New
        };
        let empty = seen.order.is_empty();
        if empty {
            st.by_signer.remove(signer);
        }
        st.len = st.len - dropped + usize::from(verdict == Fresh::New);
        verdict
    }

    /// Signatures remembered now, all signers together.
    pub fn len(&self) -> usize {
        self.state.lock().expect("replays lock").len
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Signatures of `signer` remembered now.
    pub fn held_by(&self, signer: &Pubkey) -> usize {
        let st = self.state.lock().expect("replays lock");
        st.by_signer.get(signer).map_or(0, |s| s.order.len())
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a request's signature makes of it ([`verify_request`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A stranger's request: no signature, a key not admitted, a stale time, a bad or
    /// replayed signature, or a signer holding its whole share of the replay memory (never
    /// an error: a node with a skewed clock is still served, as a stranger).
    Stranger,
    /// An admitted signer's, with a valid fresh signature for this server.
    Node(Pubkey),
    /// An admitted signer's request naming a host (this one) that is not one of this
    /// server's names: a signature made for another server, replayed here, or a server
    /// reached under a name it was not told ([`verify_request`]); refused with `403`.
    OtherHost(String),
}

/// What a request's signature makes of it: a node's ([`Verdict::Node`]) when the signer is
/// in `admitted`, the request's `Host` is one of `own_hosts` (the names this server answers
/// to; none: any), the time within `skew` of now, the signature over [`request_message`]
/// checks, and `replays` has not seen it and holds less than the signer's share of it.
/// An admitted signer naming another host is [`Verdict::OtherHost`] (checked before the
/// signature: a request naming another server costs no signature check); anything else is a
/// stranger's.
#[allow(clippy::too_many_arguments)]
pub fn verify_request(
    headers: &axum::http::HeaderMap,
    method: &str,
    path_and_query: &str,
    admitted: &Signers,
    skew: Duration,
    own_hosts: &[String],
    replays: &Replays,
) -> Verdict {
    verify(
        headers,
        method,
        path_and_query,
        admitted,
        skew,
        own_hosts,
        replays,
    )
    .unwrap_or(Verdict::Stranger)
}

fn verify(
    headers: &axum::http::HeaderMap,
    method: &str,
    path_and_query: &str,
    admitted: &Signers,
    skew: Duration,
    own_hosts: &[String],
    replays: &Replays,
) -> Option<Verdict> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let signer = Pubkey::from_str(text(SIGNER)?).ok()?;
    if !admitted.read().expect("signers lock").contains(&signer) {
        return None;
    }
    let host = text(axum::http::header::HOST.as_str())?.to_ascii_lowercase();
    if !own_hosts.is_empty() && !own_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        return Some(Verdict::OtherHost(host));
    }
    let time: u64 = text(TIME)?.parse().ok()?;
    if unix_now().abs_diff(time) > skew.as_secs() {
        return None;
    }
    let nonce = text(NONCE)?;
    if nonce.len() > 64 {
        return None;
    }
    let sig = Signature::from_str(text(SIGNATURE)?).ok()?;
    if !sig.verify(
        signer.as_ref(),
        &request_message(method, &host, path_and_query, time, nonce),
    ) {
        return None;
    }
    // the share is read after the check: a signer dropped meanwhile has none
    let share = admitted
        .read()
        .expect("signers lock")
        .share(&signer, REPLAYS_MAX, REPLAYS_LEAST);
    (replays.fresh(&signer, &sig, time, skew, share) == Fresh::New).then_some(Verdict::Node(signer))
}

/// How far a connection's requests and transfers have moved: the body streams count every
/// byte they hand to hyper (the rate watchdog reads it), and a connection with no request in
/// flight and no transfer streaming is idle (it may be evicted for a newcomer).
#[derive(Default)]
pub(crate) struct Progress {
    pub(crate) bytes: AtomicU64,
    /// Transfers streaming now.
    pub(crate) active: AtomicUsize,
    /// Requests being answered now (until their response head is ready).
    pub(crate) requests: AtomicUsize,
}

impl Progress {
    pub(crate) fn touch(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Relaxed);
    }

    fn idle(&self) -> bool {
        self.requests.load(Relaxed) == 0 && self.active.load(Relaxed) == 0
    }
}

/// One connection as its service sees it: its place, its progress, and the admitted signer
/// its requests proved (set once).
pub(crate) struct Conn {
    pub(crate) id: u64,
    pub(crate) progress: Arc<Progress>,
    pub(crate) signer: OnceLock<Pubkey>,
    /// Notified when the connection is evicted: its task closes it.
    pub(crate) close: tokio::sync::Notify,
}

struct Held {
    key: IpAddr,
    conn: Arc<Conn>,
    /// The signer whose node pool holds it (`None`: a stranger's place).
    node: Option<Pubkey>,
}

#[derive(Default)]
struct State {
    next: u64,
    conns: HashMap<u64, Held>,
    /// Strangers' connections by peer, oldest first.
    by_peer: HashMap<IpAddr, BTreeSet<u64>>,
    strangers: usize,
    by_signer: HashMap<Pubkey, usize>,
    nodes: usize,
}

/// Why a connection was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its peer holds its allowance at this load.
    PeerShare(usize),
    /// The server is full and no peer holding more has an idle connection to give up.
    Full,
}

/// The connection table ([`module docs`](self)).
pub(crate) struct Admission {
    max: usize,
    per_peer: usize,
    per_peer_min: usize,
    node_connections: usize,
    state: Mutex<State>,
    /// Connections evicted for a newcomer so far.
    pub(crate) evicted: AtomicU64,
}

/// A connection's place: given back when the connection ends (or taken by an eviction).
pub(crate) struct Place {
    admission: Arc<Admission>,
    pub(crate) conn: Arc<Conn>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.admission.release(self.conn.id);
    }
}

/// A peer's key: its IPv4 address, or its IPv6 /64 (one host usually holds a whole /64).
pub(crate) fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 1))
            }
        },
        v4 => v4,
    }
}

impl Admission {
    /// Admission for at most `max` strangers' connections, `per_peer` each while the server
    /// is at most half full and `per_peer_min` at the cap, and `node_connections` of admitted
    /// nodes (the server's `ServerLimits` fields of those names; passed as numbers so that
    /// this module does not import the server that uses it).
    pub(crate) fn new(
        max: usize,
        per_peer: usize,
        per_peer_min: usize,
        node_connections: usize,
    ) -> Self {
        Admission {
            max: max.max(1),
            per_peer: per_peer.max(1),
            per_peer_min: per_peer_min.clamp(1, per_peer.max(1)),
            node_connections,
            state: Default::default(),
            evicted: AtomicU64::new(0),
        }
    }

    /// The connections one peer may hold while strangers hold `strangers`: the full share up
    /// to half the cap, then falling linearly to the floor at the cap.
    pub(crate) fn allowance(&self, strangers: usize) -> usize {
        let half = self.max / 2;
        if strangers <= half {
            return self.per_peer;
        }
        let left = self.max.saturating_sub(strangers);
        (self.per_peer * left / (self.max - half).max(1)).clamp(self.per_peer_min, self.per_peer)
    }

    /// A place for a new connection from `ip`, evicting an idle connection of the peer
    /// holding the most when the server is full and that peer holds more than this one.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Place, Refused> {
        let key = peer_key(ip);
        let mut st = self.state.lock().expect("admission lock");
        let mine = st.by_peer.get(&key).map_or(0, BTreeSet::len);
        let allowed = self.allowance(st.strangers);
        if mine >= allowed {
            return Err(Refused::PeerShare(allowed));
        }
        if st.strangers >= self.max {
            let victim = Self::victim(&st, mine).ok_or(Refused::Full)?;
            let held = Self::remove(&mut st, victim).expect("a victim is held");
            held.conn.close.notify_one();
            self.evicted.fetch_add(1, Relaxed);
        }
        st.next += 1;
        let id = st.next;
        let conn = Arc::new(Conn {
            id,
            progress: Default::default(),
            signer: OnceLock::new(),
            close: tokio::sync::Notify::new(),
        });
        st.by_peer.entry(key).or_default().insert(id);
        st.strangers += 1;
        st.conns.insert(
            id,
            Held {
                key,
                conn: conn.clone(),
                node: None,
            },
        );
        Ok(Place {
            admission: self.clone(),
            conn,
        })
    }

    /// An idle stranger's connection of a peer holding more than `mine` (the newcomer's), from
    /// the peer holding the most first (its oldest idle one).
    fn victim(st: &State, mine: usize) -> Option<u64> {
        let mut peers: Vec<(usize, &BTreeSet<u64>)> = st
            .by_peer
            .values()
            .map(|ids| (ids.len(), ids))
            .filter(|(n, _)| *n > mine)
            .collect();
        peers.sort_unstable_by_key(|(n, _)| std::cmp::Reverse(*n));
        peers.into_iter().find_map(|(_, ids)| {
            ids.iter()
                .copied()
                .find(|id| st.conns[id].conn.progress.idle())
        })
    }

    fn remove(st: &mut State, id: u64) -> Option<Held> {
        let held = st.conns.remove(&id)?;
        match held.node {
            None => {
                st.strangers -= 1;
                if let Some(ids) = st.by_peer.get_mut(&held.key) {
                    ids.remove(&id);
                    if ids.is_empty() {
                        st.by_peer.remove(&held.key);
                    }
                }
            }
            Some(signer) => {
                st.nodes -= 1;
                if let Some(n) = st.by_signer.get_mut(&signer) {
                    *n -= 1;
                    if *n == 0 {
                        st.by_signer.remove(&signer);
                    }
                }
            }
        }
        Some(held)
    }

    fn release(&self, id: u64) {
        Self::remove(&mut self.state.lock().expect("admission lock"), id);
    }

    /// `signer`'s share of the node connections: its share by stake of the pool
    /// ([`Admitted::share`], a place at least), and never more than a peer's full allowance.
    pub(crate) fn node_share(&self, admitted: &Admitted, signer: &Pubkey) -> usize {
        admitted
            .share(signer, self.node_connections, 1)
            .min(self.per_peer)
    }

    /// Moves connection `id` into `signer`'s node places (never evicted, outside the
    /// strangers' cap) when the node pool has room and the signer holds less than `share`
    /// of it ([`Admission::node_share`]); whether it is there now.
    pub(crate) fn promote(&self, id: u64, signer: Pubkey, share: usize) -> bool {
        let mut st = self.state.lock().expect("admission lock");
        let (nodes, mine) = (st.nodes, st.by_signer.get(&signer).copied().unwrap_or(0));
        let Some(held) = st.conns.get(&id) else {
            return false;
        };
        if held.node.is_some() {
            return true;
        }
        if nodes >= self.node_connections || mine >= share {
            return false;
        }
        let key = held.key;
        let held = st.conns.get_mut(&id).expect("held");
        held.node = Some(signer);
        st.strangers -= 1;
        if let Some(ids) = st.by_peer.get_mut(&key) {
            ids.remove(&id);
            if ids.is_empty() {
                st.by_peer.remove(&key);
            }
        }
        st.nodes += 1;
        *st.by_signer.entry(signer).or_default() += 1;
        true
    }

    /// `(strangers' connections, nodes' connections)` open now.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let st = self.state.lock().expect("admission lock");
        (st.strangers, st.nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::results::ServerLimits;

    fn from_limits(l: &ServerLimits) -> Admission {
        Admission::new(
            l.max_connections,
            l.connections_per_peer,
            l.connections_per_peer_min,
            l.node_connections,
        )
    }

    fn limits(max: usize, per_peer: usize, min: usize) -> ServerLimits {
        ServerLimits {
            max_connections: max,
            connections_per_peer: per_peer,
            connections_per_peer_min: min,
            node_connections: 4,
            ..ServerLimits::default()
        }
    }

    fn ip(i: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x7f00_0000 + i))
    }

    #[test]
    fn shares_shrink_with_load_and_a_full_server_evicts_the_largest_idle_holder() {
        let a = Arc::new(from_limits(&limits(16, 8, 2)));
        assert_eq!(a.allowance(0), 8);
        assert_eq!(a.allowance(8), 8);
        assert_eq!(a.allowance(12), 4);
        assert_eq!(a.allowance(15), 2);
        assert_eq!(a.allowance(16), 2);
        // one peer takes its full share while the server is half empty, then is capped
        let mut held: Vec<Place> = (0..8).map(|_| a.admit(ip(1)).unwrap()).collect();
        assert_eq!(a.admit(ip(1)).err(), Some(Refused::PeerShare(8)));
        // three more peers: allowances shrink as the server fills (4, 2, 2)
        for p in 2..=4 {
            while let Ok(place) = a.admit(ip(p)) {
                held.push(place);
            }
        }
        assert_eq!(a.counts().0, 16, "full");
        let held_by = |p| a.state.lock().unwrap().by_peer[&ip(p)].len();
        assert_eq!(
            [held_by(1), held_by(2), held_by(3), held_by(4)],
            [8, 4, 2, 2]
        );
        assert_eq!(a.evicted.load(Relaxed), 0);
        // a newcomer holding nothing evicts an idle connection of the largest holder (peer 1)
        let first = held[0].conn.clone();
        // peer 1's oldest connection is busy: its next one goes instead
        first.progress.requests.fetch_add(1, Relaxed);
        let newcomer = a.admit(ip(9)).unwrap();
        assert_eq!(a.counts().0, 16);
        assert_eq!(a.evicted.load(Relaxed), 1);
        let st = a.state.lock().unwrap();
        assert_eq!(st.by_peer[&ip(1)].len(), 7, "peer 1 gave one up");
        assert!(st.conns.contains_key(&first.id), "not the busy one");
        assert!(
            !st.conns.contains_key(&held[1].conn.id),
            "its oldest idle one"
        );
        drop(st);
        // an evicted place given back later frees nothing twice
        held.remove(1);
        assert_eq!(a.counts().0, 16);
        // when every larger holder is busy, the newcomer is refused
        for p in &held {
            p.conn.progress.requests.fetch_add(1, Relaxed);
        }
        newcomer.conn.progress.requests.fetch_add(1, Relaxed);
        assert_eq!(a.admit(ip(10)).err(), Some(Refused::Full));
    }

    #[test]
    fn a_nodes_connection_leaves_the_strangers_places_and_is_never_evicted() {
        let a = Arc::new(from_limits(&limits(4, 4, 1)));
        let kp = Keypair::new();
        let node = a.admit(ip(1)).unwrap();
        assert!(a.promote(node.conn.id, kp.pubkey(), 4));
        assert_eq!(a.counts(), (0, 1));
        // strangers fill the strangers' places; a newcomer evicts one of them, never the node
        let strangers: Vec<Place> = (2..6).map(|p| a.admit(ip(p)).unwrap()).collect();
        let other = a.admit(ip(9)).unwrap();
        assert_eq!(a.counts(), (4, 1));
        assert_eq!(a.evicted.load(Relaxed), 1);
        assert!(a.state.lock().unwrap().conns.contains_key(&node.conn.id));
        drop(strangers);
        drop(node);
        assert_eq!(a.counts(), (1, 0));
        // the node pool is bounded too: past it a signed connection stays a stranger's
        let mut many: Vec<Place> = (0..3).map(|p| a.admit(ip(20 + p)).unwrap()).collect();
        many.push(other);
        for p in &many {
            assert!(a.promote(p.conn.id, Keypair::new().pubkey(), 4));
        }
        assert_eq!(a.counts(), (0, 4));
        let fifth = a.admit(ip(30)).unwrap();
        assert!(
            !a.promote(fifth.conn.id, kp.pubkey(), 4),
            "node_connections"
        );
        assert_eq!(a.counts(), (1, 4));
        // and a signer holding its share stays a stranger however much room the pool has
        drop(many);
        let (x, y) = (a.admit(ip(40)).unwrap(), a.admit(ip(41)).unwrap());
        assert!(a.promote(x.conn.id, kp.pubkey(), 1));
        assert!(!a.promote(y.conn.id, kp.pubkey(), 1), "its share");
        assert_eq!(a.counts(), (2, 1));
    }

    #[test]
    fn shares_follow_stake_with_a_least_share_each_and_never_add_past_the_pool() {
        let (big, small, gone) = (Keypair::new(), Keypair::new(), Keypair::new());
        let mut s = Admitted::new([(big.pubkey(), 900), (small.pubkey(), 100)]);
        // a place each, the other 62 by stake: 1 + 55, 1 + 6
        assert_eq!(s.share(&big.pubkey(), 64, 1), 56);
        assert_eq!(s.share(&small.pubkey(), 64, 1), 7);
        assert_eq!(s.share(&gone.pubkey(), 64, 1), 0, "not admitted");
        // a zero stake is no admission; a new stake replaces the old
        s.insert(gone.pubkey(), 0);
        assert!(!s.contains(&gone.pubkey()));
        s.insert(small.pubkey(), 900);
        assert_eq!(s.share(&small.pubkey(), 64, 1), 32);
        // more signers than places: no least share, stake alone
        let many = Admitted::new((1..=100u64).map(|i| (Keypair::new().pubkey(), i)));
        let total: usize = many.iter().map(|(k, _)| many.share(k, 64, 1)).sum();
        assert!(total <= 64, "{total}");
        // the replay memory: every signer holds its least share, the shares fit the memory
        let total: usize = many
            .iter()
            .map(|(k, _)| many.share(k, REPLAYS_MAX, REPLAYS_LEAST))
            .sum();
        assert!(total <= REPLAYS_MAX, "{total}");
        assert!(many
            .iter()
            .all(|(k, _)| many.share(k, REPLAYS_MAX, REPLAYS_LEAST) >= REPLAYS_LEAST));
    }

    #[test]
    fn a_signer_fills_only_its_own_share_of_the_replay_memory() {
        let (flood, honest) = (Keypair::new(), Keypair::new());
        let r = Replays::default();
        let skew = Duration::from_secs(60);
        let now = unix_now();
        let sig = |kp: &Keypair, i: u32| kp.sign_message(&i.to_le_bytes());
        for i in 0..100 {
            assert_eq!(
                r.fresh(&flood.pubkey(), &sig(&flood, i), now, skew, 100),
                Fresh::New
            );
        }
        // at its share: refused, nothing of its own or anyone's forgotten
        assert_eq!(
            r.fresh(&flood.pubkey(), &sig(&flood, 100), now, skew, 100),
            Fresh::OverShare
        );
        assert_eq!(r.held_by(&flood.pubkey()), 100);
        assert_eq!(
            r.fresh(&flood.pubkey(), &sig(&flood, 7), now, skew, 100),
            Fresh::Replayed
        );
        // another signer's signatures go in, and are still refused a second time
        assert_eq!(
            r.fresh(&honest.pubkey(), &sig(&honest, 1), now, skew, 1),
            Fresh::New
        );
        assert_eq!(
            r.fresh(&honest.pubkey(), &sig(&honest, 1), now, skew, 1),
            Fresh::Replayed
        );
        assert_eq!(r.len(), 101);
        // entries whose time can no longer pass the check are forgotten (signed 61 s ago)
        let r = Replays::default();
        assert_eq!(
            r.fresh(&flood.pubkey(), &sig(&flood, 1), now - 61, skew, 1),
            Fresh::New
        );
        assert_eq!(
            r.fresh(&flood.pubkey(), &sig(&flood, 2), now, skew, 1),
            Fresh::New,
            "the expired entry gave its place"
        );
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn only_a_fresh_signature_by_an_admitted_key_for_this_server_is_a_nodes() {
        let kp = Keypair::new();
        let admitted: Signers = Default::default();
        let headers = |host: &str, h: [(&'static str, String); 4]| {
            let mut m = axum::http::HeaderMap::new();
            m.insert(axum::http::header::HOST, host.parse().unwrap());
            for (k, v) in h {
                m.insert(k, v.parse().unwrap());
            }
            m
        };
        let skew = Duration::from_secs(60);
        let me = vec!["keeper.example:9100".to_string()];
        let pq = "/r/ab/tiles?i=1,2";
        let sign = || {
            headers(
                "keeper.example:9100",
                sign_request(&kp, "GET", "keeper.example:9100", pq),
            )
        };
        let check =
            |h: &axum::http::HeaderMap, method: &str, pq: &str, r: &Replays| match verify_request(
                h, method, pq, &admitted, skew, &me, r,
            ) {
                Verdict::Node(k) => Some(k),
                Verdict::Stranger => None,
                Verdict::OtherHost(h) => panic!("refused as signed for {h}"),
            };
        let r = Replays::default();
        assert_eq!(check(&sign(), "GET", pq, &r), None, "not admitted");
        admitted.write().unwrap().insert(kp.pubkey(), 1);
        let signed = sign();
        assert_eq!(check(&signed, "GET", pq, &r), Some(kp.pubkey()));
        // the same signature again: a replay
        assert_eq!(check(&signed, "GET", pq, &r), None, "accepted once");
        // another path, another method, a stale time, another key's signature
        let fresh = Replays::default;
        assert_eq!(check(&sign(), "GET", "/r/ab/tiles?i=1,3", &fresh()), None);
        assert_eq!(check(&sign(), "PUT", pq, &fresh()), None);
        let mut stale = sign();
        let t: u64 = stale[TIME].to_str().unwrap().parse().unwrap();
        stale.insert(TIME, (t - 120).to_string().parse().unwrap());
        assert_eq!(check(&stale, "GET", pq, &fresh()), None);
        let mut forged = headers(
            "keeper.example:9100",
            sign_request(&Keypair::new(), "GET", "keeper.example:9100", pq),
        );
        forged.insert(SIGNER, kp.pubkey().to_string().parse().unwrap());
        assert_eq!(check(&forged, "GET", pq, &fresh()), None);
        // signed for another server (collected there), replayed here: under its own name it
        // is refused (403) by this server's names; under this server's name the signature
        // fails
        let theirs = sign_request(&kp, "GET", "hostile.example:80", pq);
        assert_eq!(
            verify_request(
                &headers("hostile.example:80", theirs.clone()),
                "GET",
                pq,
                &admitted,
                skew,
                &me,
                &fresh()
            ),
            Verdict::OtherHost("hostile.example:80".into())
        );
        // a key not admitted naming another host is only a stranger (no answer for it)
        let other = Keypair::new();
        assert_eq!(
            verify_request(
                &headers(
                    "hostile.example:80",
                    sign_request(&other, "GET", "hostile.example:80", pq)
                ),
                "GET",
                pq,
                &admitted,
                skew,
                &me,
                &fresh()
            ),
            Verdict::Stranger
        );
        assert_eq!(
            check(&headers("keeper.example:9100", theirs), "GET", pq, &fresh()),
            None
        );
    }
}
