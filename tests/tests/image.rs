//! The keeper's OCI image (`scripts/image`, built by buildah without a daemon), unpacked by
//! umoci and run by runc from its own root filesystem against the real validator: a verifier in
//! the image takes a seat, votes and is paid, then drains and exits on SIGTERM. The image is
//! checked for what it must not hold: a shell, root as its user, a private key.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, ensure, Context, Result};
use compute_market_cluster_tests::*;
use compute_market_keeper::chain::ChainExt;

/// `scripts/image`'s layout and reference (built now unless `COMPUTE_MARKET_IMAGE` names a
/// built `<layout>:<ref>`, as `scripts/test` does).
fn image() -> Result<String> {
    if let Ok(i) = std::env::var("COMPUTE_MARKET_IMAGE") {
        return Ok(i);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // the keeper the other tests run (an image build of its own would rebuild it with other
    // features, under the running tests)
    let out = Command::new(root.join("scripts/image"))
        .arg("--bin")
        .arg(keeper_bin())
        .current_dir(&root)
        .output()
        .context("running scripts/image")?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "scripts/image failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::to_string)
            .with_context(|| format!("scripts/image printed no {k}: {text}"))
    };
    Ok(format!(
        "{}:{}",
        field("IMAGE_LAYOUT=")?,
        field("IMAGE_REF=")?
    ))
}

/// `umoci unpack` of `image` into `dir/bundle`: (bundle, its runtime config).
fn unpack(image: &str, dir: &Path) -> Result<(PathBuf, serde_json::Value)> {
    let bundle = dir.join("bundle");
    let st = Command::new("umoci")
        .args(["unpack", "--image", image])
        .arg(&bundle)
        .stdout(Stdio::null())
        .status()
        .context("umoci (apt-get install umoci; scripts/setup does)")?;
    ensure!(st.success(), "umoci unpack {image} failed");
    let config = serde_json::from_slice(&std::fs::read(bundle.join("config.json"))?)?;
    Ok((bundle, config))
}

/// Files under `root` that hold what looks like a Solana keypair (a JSON array of 64 bytes):
/// an image must hold none.
fn keys_in(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let ty = e.file_type()?;
            if ty.is_dir() {
                stack.push(e.path());
            } else if ty.is_file() && e.metadata()?.len() < 4096 {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let key = serde_json::from_str::<Vec<u8>>(text.trim()).is_ok_and(|b| b.len() == 64);
                if key {
                    found.push(e.path());
                }
            }
        }
    }
    Ok(found)
}

/// What the image holds: the entrypoint and non-root user, no shell, no key, small.
#[test]
fn the_image_runs_as_a_non_root_user_with_no_shell_and_no_key() -> Result<()> {
    let image = image()?;
    let dir = tempfile::tempdir()?;
    let (bundle, config) = unpack(&image, dir.path())?;
    let rootfs = bundle.join("rootfs");
    assert_eq!(config["process"]["user"]["uid"], 10001, "{config}");
    assert_eq!(config["process"]["args"][0], "/keeper", "{config}");
    for shell in ["bin/sh", "bin/bash", "usr/bin/sh", "bin/busybox"] {
        assert!(!rootfs.join(shell).exists(), "{shell} in the image");
    }
    assert!(
        rootfs.join("etc/ssl/certs/ca-certificates.crt").is_file(),
        "CA roots"
    );
    assert_eq!(
        keys_in(&rootfs)?,
        Vec::<PathBuf>::new(),
        "no key in the image"
    );
    // writable by the image's user: its home (the volume) and /tmp, nothing else
    let writable = writable_by_user(&rootfs, &rootfs)?;
    assert_eq!(
        writable,
        vec!["/tmp".to_string(), "/var/lib/compute-market".to_string()],
        "what the image's user can write"
    );
    let size: u64 = walk_size(&rootfs)?;
    assert!(size < 80 << 20, "the image's files take {size} bytes");
    // the scan can fail: a key planted in a copy is found
    let planted = dir.path().join("planted");
    std::fs::create_dir_all(planted.join("keys"))?;
    let kp = solana_keypair::Keypair::new();
    std::fs::write(
        planted.join("keys/id.json"),
        serde_json::to_string(&kp.to_bytes().to_vec())?,
    )?;
    assert_eq!(keys_in(&planted)?, vec![planted.join("keys/id.json")]);
    println!(
        "image {image}: {:.1} MiB unpacked, user 10001, no shell, no key",
        size as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// The paths under `root` (as the image sees them) that user 10001 may write: owned by it, or
/// writable by all.
fn writable_by_user(root: &Path, dir: &Path) -> Result<Vec<String>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = vec![];
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let m = std::fs::symlink_metadata(e.path())?;
        if m.file_type().is_symlink() {
            continue;
        }
        if m.uid() == 10001 || m.mode() & 0o002 != 0 {
            let rel = e.path().strip_prefix(root)?.to_string_lossy().into_owned();
            out.push(format!("/{rel}"));
        } else if m.is_dir() {
            out.extend(writable_by_user(root, &e.path())?);
        }
    }
    Ok(out)
}

fn walk_size(p: &Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(p)? {
        let e = e?;
        let ty = e.file_type()?;
        if ty.is_dir() {
            n += walk_size(&e.path())?;
        } else if ty.is_file() {
            n += e.metadata()?.len();
        }
    }
    Ok(n)
}

/// A container run by runc from the unpacked bundle: stopped (`runc delete --force`) when
/// dropped.
struct Container {
    id: String,
    state: PathBuf,
    run: std::process::Child,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(&self.state)
            .args(["delete", "--force", &self.id])
            .stderr(Stdio::null())
            .status();
        let _ = self.run.kill();
        let _ = self.run.wait();
    }
}

#[test]
fn the_images_entrypoint_run_by_runc_verifies_votes_is_paid_and_drains_on_sigterm() -> Result<()> {
    let image = image()?;
    let v = Validator::start()?;
    let (client, provider, verifiers) = small_market(&v, "40,15,20,30")?;
    let chain = v.chain();
    let (bundle, mut config) = unpack(&image, v.dir.path())?;
    // the key from outside, read-only, owned by the image's user (a Kubernetes Secret volume);
    // the store on a writable volume (the PVC); the root filesystem read-only; /tmp a tmpfs
    let keys = v.dir.path().join("secret");
    let home = v.dir.path().join("pvc");
    std::fs::create_dir_all(&keys)?;
    std::fs::create_dir_all(&home)?;
    std::fs::copy(&verifiers[2], keys.join("keypair.json"))?;
    let chown = Command::new("chown")
        .args(["-R", "10001:10001"])
        .arg(&keys)
        .arg(&home)
        .status()?;
    ensure!(chown.success(), "chown");
    let port = free_port();
    let process = &mut config["process"];
    process["terminal"] = false.into();
    process["args"] = serde_json::json!([
        "/keeper",
        "-u",
        v.url,
        "-k",
        "/keys/keypair.json",
        "run",
        "--verifier",
        "--backend",
        "cpu",
        "--allow-loopback-urls",
        "--listen",
        format!("127.0.0.1:{port}"),
        "--poll-ms",
        "200",
        "--store",
        "/var/lib/compute-market/keeper.redb",
        "--drain-timeout-s",
        "60"
    ]);
    process["env"]
        .as_array_mut()
        .context("env")?
        .push("RUST_LOG=info".into());
    for caps in process["capabilities"]
        .as_object_mut()
        .context("capabilities")?
        .values_mut()
    {
        *caps = serde_json::json!([]);
    }
    config["root"]["readonly"] = true.into();
    // the validator is on the host's loopback: the host's network (a pod's is its own)
    let ns = config["linux"]["namespaces"]
        .as_array_mut()
        .context("namespaces")?;
    ns.retain(|n| n["type"] != "network");
    let mounts = config["mounts"].as_array_mut().context("mounts")?;
    mounts.push(serde_json::json!({"destination": "/keys", "type": "bind",
        "source": keys, "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]}));
    mounts.push(
        serde_json::json!({"destination": "/var/lib/compute-market", "type": "bind",
        "source": home, "options": ["rbind", "rw", "nosuid", "nodev"]}),
    );
    mounts.push(serde_json::json!({"destination": "/tmp", "type": "tmpfs",
        "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777", "size=64m"]}));
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&config)?,
    )?;
    let state = v.dir.path().join("runc");
    let id = format!("cm-verifier-{}", std::process::id());
    let log = std::fs::File::create(v.dir.path().join("image-v2.log"))?;
    let run = Command::new("runc")
        .arg("--root")
        .arg(&state)
        .args(["run", "--bundle"])
        .arg(&bundle)
        .arg(&id)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("runc (apt-get install runc; scripts/setup does)")?;
    let mut c = Container { id, state, run };
    let read_log =
        || std::fs::read_to_string(v.dir.path().join("image-v2.log")).unwrap_or_default();
    wait_for(60, "the containerized keeper to serve /readyz", || {
        if let Some(st) = c.run.try_wait()? {
            bail!("the container exited ({st}): {}", read_log());
        }
        Ok(
            reqwest::blocking::get(format!("http://127.0.0.1:{port}/readyz"))
                .ok()
                .filter(|r| r.status().is_success())
                .map(|_| ()),
        )
    })?;
    let _p = v.spawn_keeper("provider", &provider, &["--provider"])?;
    let _v0 = v.spawn_keeper("v0", &verifiers[0], &["--verifier"])?;
    let _v1 = v.spawn_keeper("v1", &verifiers[1], &["--verifier"])?;
    let _crank = v.spawn_keeper("crank", &v.admin, &["--crank"])?;
    let task = post_matmul(&v, &client, 1)?;
    wait_for(180, "the task to be closed", || {
        Ok(chain.task(&task)?.is_none().then_some(()))
    })
    .with_context(read_log)?;
    let n = chain.node(&node_of(&verifiers[2]))?.expect("v2 node");
    assert_eq!(
        (n.verifications, n.times_slashed, n.earned, n.bonded),
        (1, 0, 33_333, 0),
        "the verifier in the image voted and was paid: {}",
        read_log()
    );
    // SIGTERM through the runtime, as a kubelet sends it: it owes nothing, so it exits now
    let st = Command::new("runc")
        .arg("--root")
        .arg(&c.state)
        .args(["kill", &c.id, "TERM"])
        .status()?;
    ensure!(st.success(), "runc kill");
    let exited = wait_for(30, "the container to exit after SIGTERM", || {
        Ok(c.run.try_wait()?)
    })?;
    let log = read_log();
    assert!(exited.success(), "{exited}: {log}");
    assert!(log.contains("stopped cleanly"), "{log}");
    // what it wrote went to the volume, as the image's user
    use std::os::unix::fs::MetadataExt;
    let db = std::fs::metadata(home.join("keeper.redb"))?;
    assert_eq!(db.uid(), 10001, "the store is the image user's");
    Ok(())
}
