//! The Helm chart (`deploy/helm/compute-market`) rendered and validated offline by
//! `scripts/chart-check`: no helm binary, cluster or validator. Every values file under
//! `deploy/helm/values/` renders to objects that pass kubernetes-validate's strict schemas (or
//! the CRD schemas under `deploy/crds/`) and the chart's lint rules; every file under
//! `deploy/helm/values/broken/` (and `broken/rendered/`, rendered objects with a field set
//! wrong) is refused.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `*.yaml` files directly under `dir`, as paths relative to the root (as the script
/// prints them).
fn yaml_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = vec![];
    for entry in std::fs::read_dir(root().join(dir)).with_context(|| dir.display().to_string())? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            out.push(dir.join(name).to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// The table row of `file`: the line that starts with it.
fn row<'a>(table: &'a str, file: &str) -> Option<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(file))
}

#[test]
fn chart_renders_and_validates_offline() -> Result<()> {
    let out = Command::new(root().join("scripts/chart-check"))
        .current_dir(root())
        .output()
        .context("running scripts/chart-check")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    anyhow::ensure!(
        out.status.success(),
        "scripts/chart-check failed ({}):\n{stdout}\n{stderr}",
        out.status
    );

    let good = yaml_files(Path::new("deploy/helm/values"))?;
    let broken = yaml_files(Path::new("deploy/helm/values/broken"))?;
    let mutated = yaml_files(Path::new("deploy/helm/values/broken/rendered"))?;
    for (kind, files, want) in [
        ("values file", &good, 3),
        ("broken values file", &broken, 3),
        ("mutated object", &mutated, 1),
    ] {
        anyhow::ensure!(
            files.len() >= want,
            "{} {kind}s, want at least {want}",
            files.len()
        );
    }
    for name in [
        "cpu-verifiers.yaml",
        "gpu-providers.yaml",
        "autoscaled.yaml",
    ] {
        let file = format!("deploy/helm/values/{name}");
        anyhow::ensure!(good.contains(&file), "{file} is missing");
    }
    for name in [
        "negative-replicas.yaml",
        "unknown-field.yaml",
        "gpu-string.yaml",
    ] {
        let file = format!("deploy/helm/values/broken/{name}");
        anyhow::ensure!(broken.contains(&file), "{file} is missing");
    }

    for file in &good {
        let line = row(&stdout, file).with_context(|| format!("no row for {file}:\n{stdout}"))?;
        let cols: Vec<&str> = line.split_whitespace().collect();
        let objects: usize = cols
            .get(1)
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("no object count in {line:?}"))?;
        anyhow::ensure!(objects > 0, "{file} rendered no object: {line}");
        anyhow::ensure!(cols.get(2) == Some(&"ok"), "{file} not ok: {line}");
    }
    for file in broken.iter().chain(&mutated) {
        let line = row(&stdout, file).with_context(|| format!("no row for {file}:\n{stdout}"))?;
        anyhow::ensure!(line.contains("refused: "), "{file} was not refused: {line}");
    }
    // the refusals name what was wrong
    for (file, needle) in [
        ("negative-replicas.yaml", "providers.replicas"),
        ("unknown-field.yaml", "replicsa"),
        ("gpu-string.yaml", "providers.gpus"),
        ("rendered/replicas-string.yaml", "kubernetes-validate"),
        (
            "rendered/container-unknown-field.yaml",
            "'gpu' was unexpected",
        ),
    ] {
        let file = format!("deploy/helm/values/broken/{file}");
        let line = row(&stdout, &file).with_context(|| format!("no row for {file}"))?;
        anyhow::ensure!(line.contains(needle), "{file}: {needle:?} not in {line:?}");
    }
    Ok(())
}
