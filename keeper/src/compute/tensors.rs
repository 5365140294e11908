//! Reading safetensors files from strangers (PROTOCOL §5, Inputs): the framing checked before
//! anything parses it (a bounded header, no tensor named twice), then the tensors by name. Used
//! by every input format: the client's matrices, MLP and encoder models, batches.

use std::collections::HashMap;

use anyhow::{anyhow, bail, ensure, Context, Result};
use compute_market_protocol::manifest::MAX_SAFETENSORS_HEADER;
use safetensors::{Dtype, SafeTensors};

/// Where a model made by a `scripts/*-model` converter lives: `compute-market/models/<file>` in
/// the cache (`$XDG_CACHE_HOME`, else `~/.cache`), never in the clone.
pub fn cached_model(file: &str) -> std::path::PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| ".cache".into());
    cache.join("compute-market/models").join(file)
}

/// Reads the `what` integer model from `path`, checking its pinned SHA-256 (`sha256`, hex); the
/// errors name `script`, which makes it.
pub fn read_pinned(
    path: &std::path::Path,
    sha256: &str,
    what: &str,
    script: &str,
) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "reading the {what} integer model {} (make it with {script})",
            path.display()
        )
    })?;
    let got: String = compute_market_protocol::hash::hashv(&[&bytes])
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ensure!(
        got == sha256.trim(),
        "{} has SHA-256 {got}, not the pinned {} (make it again with {script})",
        path.display(),
        sha256.trim()
    );
    Ok(bytes)
}

/// Checks a safetensors file's framing before anything parses it: an 8-byte length, a header of
/// at most [`MAX_SAFETENSORS_HEADER`] bytes (a stranger's header is never larger), and no
/// tensor named twice (a JSON object may repeat a key; which one counts is not defined, so
/// such a file is refused).
pub fn check_framing(bytes: &[u8], what: &str) -> Result<()> {
    ensure!(
        bytes.len() >= 8,
        "{what}: not a safetensors file ({} bytes)",
        bytes.len()
    );
    let header = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    ensure!(
        header <= MAX_SAFETENSORS_HEADER && 8 + header <= bytes.len() as u64,
        "{what}: its safetensors header is {header} bytes (at most {MAX_SAFETENSORS_HEADER}, within the file)"
    );
    let json = &bytes[8..8 + header as usize];
    let keys: Keys = serde_json::from_slice(json)
        .map_err(|e| anyhow!("{what}: malformed safetensors header: {e}"))?;
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = keys.0.iter().find(|k| !seen.insert(k.as_str())) {
        bail!("{what}: the tensor {dup:?} is named twice");
    }
    Ok(())
}

/// The keys of a JSON object, in order, repeats kept.
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Keys, A::Error> {
                let mut keys = vec![];
                while let Some(k) = m.next_key::<String>()? {
                    m.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(k);
                }
                Ok(Keys(keys))
            }
        }
        d.deserialize_map(V)
    }
}

/// The tensors of a safetensors file by name: dtype, shape, bytes (borrowed from `bytes`).
/// The framing is checked first ([`check_framing`]): a bounded header, no name twice.
pub fn tensors<'a>(
    bytes: &'a [u8],
    what: &str,
) -> Result<HashMap<String, (Dtype, Vec<usize>, &'a [u8])>> {
    check_framing(bytes, what)?;
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| anyhow!("{what}: malformed safetensors: {e}"))?;
    Ok(st
        .tensors()
        .into_iter()
        .map(|(name, t)| (name, (t.dtype(), t.shape().to_vec(), t.data())))
        .collect())
}

/// Little-endian `i32`s of a tensor's bytes (a whole number of them: the dtype was checked).
pub fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

/// A model file's tensors by name, each taken once (what is left over is refused).
pub struct Tensors<'a>(pub HashMap<String, (Dtype, Vec<usize>, &'a [u8])>);

impl<'a> Tensors<'a> {
    /// The tensor `name` of `dtype`: its shape and bytes.
    pub fn take(&mut self, name: &str, dtype: Dtype) -> Result<(Vec<usize>, &'a [u8])> {
        let (d, shape, data) = self
            .0
            .remove(name)
            .ok_or_else(|| anyhow!("the model has no tensor {name:?}"))?;
        ensure!(
            d == dtype,
            "the model's {name} is {d:?}, it must be {dtype:?}"
        );
        Ok((shape, data))
    }

    /// An `I32` vector.
    pub fn vector(&mut self, name: &str) -> Result<Vec<i32>> {
        let (shape, data) = self.take(name, Dtype::I32)?;
        ensure!(
            shape.len() == 1,
            "the model's {name} has shape {shape:?}, it must be a vector"
        );
        Ok(i32s(data))
    }

    /// An `I32` [1].
    pub fn scalar(&mut self, name: &str) -> Result<i32> {
        let v = self.vector(name)?;
        ensure!(
            v.len() == 1,
            "the model's {name} holds {} values, it must hold 1",
            v.len()
        );
        Ok(v[0])
    }
}
