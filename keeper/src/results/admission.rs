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
//! * **A market's nodes ahead of strangers.** A request signed by a node's key (ed25519 over
//!   method, path and query and a recent unix time, in [`SIGNER`], [`TIME`] and [`SIGNATURE`])
//!   whose signer is in the admitted set ([`Signers`], filled from chain by the daemon)
//!   moves its connection out of the strangers' places into a pool of
//!   `ServerLimits::node_connections` of its own, where it is never evicted, and its
//!   transfers draw from `ServerLimits::node_transfers`, which strangers cannot take.
//!   Only a signer in the set costs a signature check, so strangers cannot make the server
//!   verify signatures by sending made-up keys.

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

/// The keys whose signed requests a server admits ahead of strangers: the market's nodes'
/// authorities. Shared: the daemon replaces its content as it reads the nodes from chain.
pub type Signers = Arc<RwLock<HashSet<Pubkey>>>;

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

/// Signatures a server has accepted within the skew window: each is accepted once, so one
/// collected on the wire (or by a server the node fetched from, for the same host) cannot
/// promote a second connection. Bounded: when full, nothing more is accepted until entries
/// age out (the requests are served as strangers').
#[derive(Default)]
pub struct Replays {
    seen: Mutex<HashMap<[u8; 64], u64>>,
}

/// Most signatures kept by [`Replays`] (a few MiB).
const REPLAYS_MAX: usize = 65_536;

impl Replays {
    /// Whether `sig`, signed at `time`, is new here (and now remembered); entries older than
    /// `skew` twice over are dropped first.
    pub fn fresh(&self, sig: &Signature, time: u64, skew: Duration) -> bool {
        let now = unix_now();
        let mut seen = self.seen.lock().expect("replays lock");
        let horizon = 2 * skew.as_secs();
        if seen.len() >= REPLAYS_MAX / 2 {
            seen.retain(|_, t| now.saturating_sub(*t) <= horizon);
        }
        if seen.len() >= REPLAYS_MAX {
            return false;
        }
        let key: [u8; 64] = sig.as_ref().try_into().expect("64 bytes");
        match seen.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(time);
                true
            }
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The admitted signer of a request, if it carries a valid signature by one: the signer is
/// in `admitted`, the request's `Host` is one of `own_hosts` (the names this server answers
/// to; none: any), the time within `skew` of now, the signature over [`request_message`]
/// checks, and `replays` has not seen it. Anything else — no headers, a key not admitted,
/// another server's name, a stale time, a bad or replayed signature — is a stranger's request
/// (never an error: a node with a skewed clock is still served, as a stranger).
#[allow(clippy::too_many_arguments)]
pub fn verify_request(
    headers: &axum::http::HeaderMap,
    method: &str,
    path_and_query: &str,
    admitted: &Signers,
    skew: Duration,
    own_hosts: &[String],
    replays: &Replays,
) -> Option<Pubkey> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let signer = Pubkey::from_str(text(SIGNER)?).ok()?;
    if !admitted.read().expect("signers lock").contains(&signer) {
        return None;
    }
    let host = text(axum::http::header::HOST.as_str())?.to_ascii_lowercase();
    if !own_hosts.is_empty() && !own_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        return None;
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
    (sig.verify(
        signer.as_ref(),
        &request_message(method, &host, path_and_query, time, nonce),
    ) && replays.fresh(&sig, time, skew))
    .then_some(signer)
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

    /// Moves connection `id` into `signer`'s node places (never evicted, outside the
    /// strangers' cap) when the node pool has room; whether it is there now.
    pub(crate) fn promote(&self, id: u64, signer: Pubkey) -> bool {
        let mut st = self.state.lock().expect("admission lock");
        let (nodes, mine) = (st.nodes, st.by_signer.get(&signer).copied().unwrap_or(0));
        let Some(held) = st.conns.get(&id) else {
            return false;
        };
        if held.node.is_some() {
            return true;
        }
        if nodes >= self.node_connections || mine >= self.per_peer {
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
        assert!(a.promote(node.conn.id, kp.pubkey()));
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
            assert!(a.promote(p.conn.id, Keypair::new().pubkey()));
        }
        assert_eq!(a.counts(), (0, 4));
        let fifth = a.admit(ip(30)).unwrap();
        assert!(!a.promote(fifth.conn.id, kp.pubkey()), "node_connections");
        assert_eq!(a.counts(), (1, 4));
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
        let check = |h: &axum::http::HeaderMap, method: &str, pq: &str, r: &Replays| {
            verify_request(h, method, pq, &admitted, skew, &me, r)
        };
        let r = Replays::default();
        assert_eq!(check(&sign(), "GET", pq, &r), None, "not admitted");
        admitted.write().unwrap().insert(kp.pubkey());
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
        // is refused by this server's names; under this server's name the signature fails
        let theirs = sign_request(&kp, "GET", "hostile.example:80", pq);
        assert_eq!(
            check(
                &headers("hostile.example:80", theirs.clone()),
                "GET",
                pq,
                &fresh()
            ),
            None
        );
        assert_eq!(
            check(&headers("keeper.example:9100", theirs), "GET", pq, &fresh()),
            None
        );
    }
}
