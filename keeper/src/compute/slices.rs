//! The slice strings of a job's parsed inputs (PROTOCOL §8.7, `compute_market_protocol::slices`):
//! what a version-2 manifest names beside each part's SHA-256, so that the program can prove
//! the slices one element is recomputed from. Clients name them when they post; providers and
//! verifiers check them when they fetch (a manifest whose slices are not its parts' is refused,
//! and no provider claims a task whose result it could not defend).
//!
//! Matrices are hashed as they are laid out, a row or a column at a time, without building the
//! padded string (A and B may be 256 MiB each).

use compute_market_protocol::{
    infer::Mlp,
    manifest::{Manifest, Role, Slices},
    merkle::CHUNK_LEN,
    slices::{build, matrix_stride},
};

use super::{matrix::Matrix, mlp::Batch};

/// A's slices (row-major, rows padded to the stride) or B's (by columns): `by_columns` for B.
pub fn of_matrix(m: &Matrix, by_columns: bool) -> Slices {
    let (lines, len) = if by_columns {
        (m.cols, m.rows)
    } else {
        (m.rows, m.cols)
    };
    let stride = matrix_stride(len as u32) as usize;
    let mut h = blake3::Hasher::new();
    let mut line = vec![0u8; stride];
    for i in 0..lines {
        line.iter_mut().for_each(|b| *b = 0);
        for j in 0..len {
            let v = if by_columns {
                m.data[j * m.cols + i]
            } else {
                m.data[i * m.cols + j]
            };
            line[4 * j..4 * j + 4].copy_from_slice(&v.to_le_bytes());
        }
        h.update(&line);
    }
    debug_assert_eq!(stride % CHUNK_LEN, 0);
    Slices {
        len: (lines * stride) as u64,
        root: *h.finalize().as_bytes(),
    }
}

/// An `Mlp` model's slices.
pub fn of_model(m: &Mlp) -> Slices {
    build::slices_of(&build::model(m))
}

/// An `Mlp` batch's slices.
pub fn of_batch(b: &Batch) -> Slices {
    build::slices_of(&build::batch(&b.x))
}

/// An `Encoder` model's slices (laid out for the replay of one step: PROTOCOL §8.7).
pub fn of_encoder(e: &compute_market_protocol::encoder::Encoder) -> Slices {
    build::slices_of(&compute_market_protocol::slices::encoder::build::model(e))
}

/// An `Encoder` job's texts by their token ids, at the job's token limit.
pub fn of_ids(ids: &[Vec<u32>], limit: u32) -> Slices {
    build::slices_of(&compute_market_protocol::slices::encoder::build::ids(
        ids, limit,
    ))
}

/// A decoder's slices with its end-of-turn token (laid out for the replay of one step of a
/// token's trace: PROTOCOL §8.13).
pub fn of_decoder(d: &compute_market_protocol::decoder::Decoder, eos: u32) -> Slices {
    build::slices_of(&compute_market_protocol::slices::decoder::build::model(
        d, eos,
    ))
}

/// A `Generate` job's prompts by their token ids at the job's prompt limit, then its sampling
/// rule.
pub fn of_prompts(
    ids: &[Vec<u32>],
    limit: u32,
    sampling: &compute_market_protocol::decoder::Sampling,
) -> Slices {
    build::slices_of(&compute_market_protocol::slices::decoder::build::prompts(
        ids, limit, sampling,
    ))
}

/// Refuses a manifest whose part `role` names slices other than `have` (a version-1
/// manifest names none: nothing to check).
pub fn check(manifest: &Manifest, role: Role, have: Slices) -> anyhow::Result<()> {
    check_with(manifest, role, || have)
}

/// [`check`], computing the part's slices only when the manifest names some.
pub fn check_with(
    manifest: &Manifest,
    role: Role,
    have: impl FnOnce() -> Slices,
) -> anyhow::Result<()> {
    if let Some(named) = manifest.part(role).and_then(|p| p.slices) {
        let have = have();
        anyhow::ensure!(
            named == have,
            "the manifest names slices of part {} ({} bytes, BLAKE3 {}) that are not its content's ({} bytes, BLAKE3 {}): the program could not referee this job (PROTOCOL §8.7)",
            role.name(),
            named.len,
            blake3::Hash::from(named.root).to_hex(),
            have.len,
            blake3::Hash::from(have.root).to_hex()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_hashed_a_line_at_a_time_is_its_slice_string() {
        let (r, c) = (5usize, 300usize);
        let data: Vec<u32> = (0..(r * c) as u64)
            .map(|i| (i * 2_654_435_761 % 2_147_483_647) as u32)
            .collect();
        let m = Matrix {
            rows: r,
            cols: c,
            data: data.clone(),
        };
        let rows = build::matrix_rows(&data, r as u32, c as u32);
        let cols = build::matrix_columns(&data, r as u32, c as u32);
        assert_eq!(of_matrix(&m, false), build::slices_of(&rows));
        assert_eq!(of_matrix(&m, true), build::slices_of(&cols));
        assert_ne!(of_matrix(&m, false), of_matrix(&m, true));
    }

    #[test]
    fn a_manifest_naming_other_slices_is_refused_by_part() {
        use compute_market_protocol::manifest::Part;
        let m = Matrix {
            rows: 2,
            cols: 3,
            data: vec![1, 2, 3, 4, 5, 6],
        };
        let (a, b) = (of_matrix(&m, false), of_matrix(&m, true));
        let manifest = |sa, sb| {
            Manifest::new(vec![
                Part::new(Role::A, b"a").with_slices(sa),
                Part::new(Role::B, b"b").with_slices(sb),
            ])
        };
        let good = manifest(a, b);
        check(&good, Role::A, a).unwrap();
        check(&good, Role::B, b).unwrap();
        // B named by rows (A's layout): refused, naming the part
        let bad = manifest(a, a);
        let e = check(&bad, Role::B, b).unwrap_err().to_string();
        assert!(
            e.contains("slices of part B") && e.contains("PROTOCOL §8.7"),
            "{e}"
        );
        // a version-1 manifest names none: nothing to check
        let v1 = Manifest::new(vec![Part::new(Role::A, b"a"), Part::new(Role::B, b"b")]);
        check(&v1, Role::B, b).unwrap();
    }
}
