//! A result gathered from every keeper that serves it (PROTOCOL §8.12, Sources of a result):
//! the provider's result URL first, then the others given (the seated verifiers' keepers,
//! which keep what they checked), in that order, until every tile asked for is held. Tiles may
//! come from different sources; each is checked against the root on chain before it counts —
//! a whole result (`/all`) must hash to it, a tile served with a proof (`/tiles`) must prove
//! against it — and a source that serves a tile that does not is skipped, never trusted for
//! more. When the sources together do not serve it all, the error says which tiles are
//! missing and what each source answered.

use std::{collections::BTreeMap, time::Instant};

use compute_market_protocol::{hash::Digest, job::JobSpec};

use super::{hex, parse_mem_uri, reserve::proves, FetchError, ResultStore};
use crate::verify::{commit, ProvenTile};

/// Tiles asked of a source per `/tiles` request (what a server answers at most).
pub const PER_REQUEST: usize = compute_market::constants::MAX_SAMPLES as usize;

/// What was gathered, and from where.
#[derive(Clone, Debug)]
pub struct Gathered<T> {
    /// The tiles.
    pub tiles: T,
    /// Each source that served tiles, and how many of them counted.
    pub served: Vec<(String, u32)>,
    /// What each source that served none (or a wrong one) answered.
    pub failed: Vec<String>,
}

impl<T> Gathered<T> {
    /// The sources that served, as one line (`<source> (<n> tiles), …`).
    pub fn served_by(&self) -> String {
        self.served
            .iter()
            .map(|(s, n)| format!("{s} ({n} tiles)"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The result URL of `root` at a keeper's base URL `endpoint` (`<endpoint>/r/<root>`).
pub fn result_url(endpoint: &str, root: &Digest) -> String {
    format!("{}/r/{}", endpoint.trim_end_matches('/'), hex(root))
}

/// The sources of a result, in the order they are asked: `first` (the provider's result URL),
/// then each of `others`, each once (an empty one left out).
pub fn ordered(first: &str, others: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for s in std::iter::once(first.to_string()).chain(others) {
        if !s.is_empty() && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

type Tiles = BTreeMap<u32, (Vec<u8>, Option<Vec<Digest>>)>;

impl ResultStore {
    /// Those of tiles `indices` of `job`'s result at `uri` that it holds, with proofs, in the
    /// order asked (a verifier's keeper may hold only its sample; PROTOCOL §8.12).
    pub fn fetch_held(
        &self,
        uri: &str,
        job: &JobSpec,
        indices: &[u32],
        deadline: Option<Instant>,
    ) -> Result<Vec<ProvenTile>, FetchError> {
        if Self::is_http(uri) {
            let d = self.deadline(super::wire::proven_len(job, indices.len()), deadline);
            return self.http()?.fetch_held(uri, job, indices, d);
        }
        let root = parse_mem_uri(uri)?;
        if let Some(e) = self.served(&root) {
            return e
                .proven(indices)
                .map_err(|e| FetchError::Invalid(format!("{e:#}")));
        }
        match self.reserve.sampled(&root) {
            Some(s) => Ok(s.held(indices)),
            None => Err(FetchError::Invalid(format!(
                "result URL {uri:?} is unreachable: nothing served under that root"
            ))),
        }
    }

    /// Every tile of `job`'s result under `root`, gathered from `sources` (result URLs, the
    /// provider's first): a source asked first for the whole result, then for the tiles still
    /// missing; each checked against `root`.
    pub fn gather_all(
        &self,
        sources: &[String],
        job: &JobSpec,
        root: &Digest,
        deadline: Option<Instant>,
    ) -> Result<Gathered<Vec<Vec<u8>>>, FetchError> {
        let all: Vec<u32> = (0..job.tile_count()).collect();
        let (tiles, served, failed) = self.gather_map(sources, job, root, &all, true, deadline)?;
        Ok(Gathered {
            tiles: tiles.into_values().map(|(t, _)| t).collect(),
            served,
            failed,
        })
    }

    /// Tiles `indices` (distinct) of `job`'s result under `root`, with their proofs, in that
    /// order, gathered from `sources` (the provider's first).
    pub fn gather(
        &self,
        sources: &[String],
        job: &JobSpec,
        root: &Digest,
        indices: &[u32],
        deadline: Option<Instant>,
    ) -> Result<Gathered<Vec<ProvenTile>>, FetchError> {
        let (mut tiles, served, failed) =
            self.gather_map(sources, job, root, indices, false, deadline)?;
        let tiles = indices
            .iter()
            .map(|i| {
                let (tile, proof) = tiles.remove(i).expect("gathered");
                ProvenTile {
                    index: *i,
                    tile,
                    proof: proof.expect("asked with proofs"),
                }
            })
            .collect();
        Ok(Gathered {
            tiles,
            served,
            failed,
        })
    }

    fn gather_map(
        &self,
        sources: &[String],
        job: &JobSpec,
        root: &Digest,
        want: &[u32],
        whole_first: bool,
        deadline: Option<Instant>,
    ) -> Result<(Tiles, Vec<(String, u32)>, Vec<String>), FetchError> {
        let count = job.tile_count();
        if let Some(bad) = want.iter().find(|&&i| i >= count) {
            return Err(FetchError::Invalid(format!(
                "tile {bad} is out of range: the result has {count} tiles"
            )));
        }
        let mut got = Tiles::new();
        let (mut served, mut failed, mut tried) = (vec![], vec![], vec![]);
        for src in sources {
            let missing: Vec<u32> = want
                .iter()
                .copied()
                .filter(|i| !got.contains_key(i))
                .collect();
            if missing.is_empty() {
                break;
            }
            let mut why: Option<String> = None;
            if whole_first && missing.len() == count as usize {
                match self.fetch_all_by(src, job, deadline) {
                    Ok(tiles) if commit(&tiles).root() == *root => {
                        got.extend(
                            tiles
                                .into_iter()
                                .enumerate()
                                .map(|(i, t)| (i as u32, (t, None))),
                        );
                        tracing::info!(source = %src, tiles = count, "fetched the whole result; it hashes to the root on chain");
                        served.push((src.clone(), count));
                        tried.push(format!("{src}: served all {count} tiles"));
                        continue;
                    }
                    Ok(_) => {
                        let m = format!(
                            "{src}: served a result that does not hash to the root on chain (skipped)"
                        );
                        tracing::warn!(source = %src, "a source served a result that does not hash to the root on chain: skipped");
                        tried.push(m.clone());
                        failed.push(m);
                        continue;
                    }
                    Err(e) if e.is_transient() => {
                        tracing::info!(source = %src, error = %e, "a source did not serve the result");
                        tried.push(format!("{src}: {e}"));
                        failed.push(format!("{src}: {e}"));
                        continue;
                    }
                    // it may hold some tiles (a verifier that kept its sample): asked for them
                    Err(e) => why = Some(e.to_string()),
                }
            }
            let mut from_here = 0u32;
            let mut wrong = 0usize;
            for chunk in missing.chunks(PER_REQUEST) {
                match self.fetch_held(src, job, chunk, deadline) {
                    Ok(tiles) => {
                        for t in tiles {
                            if proves(job, root, &t) {
                                from_here += 1;
                                got.insert(t.index, (t.tile, Some(t.proof)));
                            } else {
                                wrong += 1;
                            }
                        }
                        if wrong > 0 {
                            break;
                        }
                    }
                    Err(e) => {
                        why = Some(e.to_string());
                        break;
                    }
                }
            }
            if from_here > 0 {
                tracing::info!(source = %src, tiles = from_here, "fetched tiles; each proves against the root on chain");
                served.push((src.clone(), from_here));
            }
            let outcome = if wrong > 0 {
                tracing::warn!(source = %src, wrong, "a source served tiles that do not prove against the root on chain: skipped");
                Some(format!(
                    "{src}: served {wrong} tiles that do not prove against the root on chain (skipped; nothing more asked of it)"
                ))
            } else if from_here == 0 {
                Some(format!(
                    "{src}: {}",
                    why.unwrap_or_else(|| format!(
                        "holds none of the {} tiles still missing",
                        missing.len()
                    ))
                ))
            } else {
                None
            };
            match outcome {
                Some(m) => {
                    tried.push(m.clone());
                    failed.push(m);
                }
                None => tried.push(format!("{src}: served {from_here} tiles")),
            }
        }
        let missing: Vec<u32> = want
            .iter()
            .copied()
            .filter(|i| !got.contains_key(i))
            .collect();
        if !missing.is_empty() {
            let shown: Vec<String> = missing.iter().take(8).map(u32::to_string).collect();
            let more = if missing.len() > 8 { ", …" } else { "" };
            return Err(FetchError::Unavailable(format!(
                "no source served {} of the {} tiles asked for (tiles {}{more}) of the result under root {}; sources tried: {}",
                missing.len(),
                want.len(),
                shown.join(", "),
                hex(root),
                if tried.is_empty() {
                    "none".to_string()
                } else {
                    tried.join("; ")
                }
            )));
        }
        Ok((got, served, failed))
    }
}
