//! The Python package against a real validator with keepers as processes: the wheel
//! `scripts/python-package` builds, installed into a fresh venv, runs its pytest suite
//! (`python/tests/test_market.py`) and the README's Python quick start as printed; and a Ray
//! Data pipeline on a three-node Ray cluster embeds a thousand texts through the market, each
//! vector equal to `keeper compute`'s.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};
use compute_market_cluster_tests::*;
use compute_market_keeper::chain::ChainExt;

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The wheel `scripts/python-package` built (`$COMPUTE_MARKET_WHEEL`, else the one under the
/// target directory).
fn wheel() -> Result<PathBuf> {
    if let Some(w) = std::env::var_os("COMPUTE_MARKET_WHEEL") {
        return Ok(w.into());
    }
    let dir = target_dir().join("wheels");
    std::fs::read_dir(&dir)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("compute_market-") && n.ends_with(".whl"))
        })
        .with_context(|| {
            format!(
                "no wheel under {}: build it with scripts/python-package",
                dir.display()
            )
        })
}

/// The tools venv (maturin, pytest, numpy, Ray) `scripts/python-package --venv` keeps.
fn tools() -> Result<PathBuf> {
    let out = Command::new(root().join("scripts/python-package"))
        .arg("--venv")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "scripts/python-package --venv: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// Runs `cmd` to success, its output in the error otherwise; its stdout.
fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| what.to_string())?;
    anyhow::ensure!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A market with a provider, three verifiers and a cranker running, and a content store.
struct Running {
    client: PathBuf,
    store: String,
    _procs: Vec<Proc>,
}

fn running(v: &Validator, windows: &str) -> Result<Running> {
    let (client, provider, verifiers) = small_market(v, windows)?;
    let (store_proc, store) = spawn_serve(v, "client-store")?;
    let mut procs = vec![
        store_proc,
        v.spawn_keeper("provider", &provider, &["--provider"])?,
    ];
    procs.extend(verifiers_and_crank(v, &verifiers)?);
    Ok(Running {
        client,
        store,
        _procs: procs,
    })
}

/// The README's Python quick start: the first ```python block after the "Python" heading.
fn readme_quick_start() -> Result<String> {
    let readme = std::fs::read_to_string(root().join("README.md"))?;
    let from = readme
        .find("### From Python")
        .context("the README has a \"### From Python\" section")?;
    let rest = &readme[from..];
    let start = rest.find("```python\n").context("a python block")? + "```python\n".len();
    let end = rest[start..].find("```").context("the block's end")?;
    Ok(rest[start..start + end].to_string())
}

/// The wheel installed into a fresh venv (numpy and pytest from PyPI beside it) passes its
/// pytest suite against the cluster: every job kind posted from numpy arrays and lists, each
/// verified result equal to the local computation's, the async forms, bad input refused with
/// nothing paid, `help(compute_market.Market)` a reference. Then the README's quick start runs
/// as printed (only the cluster's addresses and the keypair's path put in).
#[test]
fn the_wheel_installed_fresh_posts_every_kind_from_python_and_gets_verified_results() -> Result<()>
{
    let wheel = wheel()?;
    let v = Validator::start()?;
    let r = running(&v, "60,30,30,30")?;
    let venv = v.dir.path().join("venv");
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    )?;
    run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .arg(&wheel)
            .arg("pytest"),
        "pip install the wheel",
    )?;
    let env = |c: &mut Command| {
        c.env("CM_RPC", &v.url)
            .env("CM_KEYPAIR", &r.client)
            .env("CM_STORE", &r.store)
            .env("CM_MARKET", "1")
            // the installed package, never the source tree's
            .current_dir(v.dir.path());
    };
    let mut pytest = Command::new(venv.join("bin/python"));
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"])
        .arg(root().join("python/tests/test_market.py"))
        .arg(root().join("python/tests/test_ray_retries.py"));
    env(&mut pytest);
    let out = pytest.output()?;
    println!("{}", String::from_utf8_lossy(&out.stdout));
    anyhow::ensure!(
        out.status.success(),
        "pytest failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        log_tails(&v, &["provider", "v0", "crank"])
    );
    // the README's quick start, as printed: its addresses and key are `scripts/app ~/cm`'s
    let printed_script = readme_quick_start()?;
    for literal in [
        "http://127.0.0.1:18899",
        "http://127.0.0.1:19299",
        "~/cm/client.json",
    ] {
        anyhow::ensure!(
            printed_script.contains(literal),
            "the quick start names {literal}: {printed_script}"
        );
    }
    let script = printed_script
        .replace("http://127.0.0.1:18899", &v.url)
        .replace("http://127.0.0.1:19299", &r.store)
        .replace("~/cm/client.json", r.client.to_str().context("path")?);
    let mut quick = Command::new(venv.join("bin/python"));
    quick.args(["-c", &script]);
    env(&mut quick);
    let printed = run(&mut quick, "the README's Python quick start")?;
    println!("the README's quick start printed:\n{printed}");
    anyhow::ensure!(
        printed.contains("Accepted") && printed.contains("(2, 384)"),
        "the quick start shows a verified result: {printed}"
    );
    Ok(())
}

/// `n` distinct English texts: the MiniLM held-out sentences and variants of them.
fn thousand_texts(n: usize) -> Result<Vec<String>> {
    let (texts, _) = compute_market_keeper::compute::encoder::minilm_heldout()?;
    let base: Vec<String> = std::str::from_utf8(&texts)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let forms = ["{}", "In short: {}", "{} Indeed.", "Reportedly, {}"];
    let all: Vec<String> = forms
        .iter()
        .flat_map(|f| base.iter().map(move |t| f.replace("{}", t)))
        .take(n)
        .collect();
    anyhow::ensure!(all.len() == n, "{} texts, not {n}", all.len());
    Ok(all)
}

/// A Ray Data pipeline (`MarketEmbedder` in an actor pool of six) on a three-node Ray cluster —
/// a head and two worker nodes, each its own raylet process — embeds 1 000 texts through the
/// market in tasks of 50: every vector equals `keeper compute`'s over the same texts, tasks
/// were in flight side by side, and the figures (tasks in flight, tasks/s) are printed. Then
/// the market behind a Ray Serve deployment on the same cluster answers a POST of four texts
/// with the same vectors, and a bad one with 400 and the problem named.
#[test]
fn a_ray_data_pipeline_on_three_ray_nodes_embeds_a_thousand_texts_through_the_market() -> Result<()>
{
    let tools = tools_with_wheel()?;
    let v = Validator::start()?;
    let r = running(&v, "90,60,45,45")?;
    let texts = thousand_texts(1000)?;
    let path = v.dir.path().join("texts.txt");
    std::fs::write(&path, texts.join("\n") + "\n")?;
    let (npy, stats) = (
        v.dir.path().join("embeddings.npy"),
        v.dir.path().join("stats.json"),
    );
    let printed = run(
        Command::new(tools.join("bin/python"))
            .arg(root().join("python/tests/ray_embed.py"))
            .args([&v.url, r.client.to_str().context("path")?, &r.store])
            .args([&path, &npy, &stats])
            .arg(free_port().to_string())
            .current_dir(v.dir.path())
            .env("RAY_USAGE_STATS_ENABLED", "0"),
        "the Ray Data pipeline",
    )
    .map_err(|e| e.context(log_tails(&v, &["provider", "v0", "crank"])))?;
    println!("Ray Data through the market: {}", printed.trim());
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats)?)?;
    assert_eq!(s["texts"], 1000);
    assert_eq!(s["ray_nodes"], 3, "a head and two worker nodes");
    assert!(s["tasks"].as_u64() >= Some(20), "tasks of 50 texts: {s}");
    assert!(
        s["most_in_flight"].as_u64() >= Some(2),
        "tasks in flight side by side: {s}"
    );
    // the Ray Serve endpoint: the same vectors for four of the texts, and a bad request named
    let serve = &s["serve"];
    assert_eq!(
        (
            &serve["status"],
            &serve["same_vectors"],
            &serve["bad_status"]
        ),
        (&200.into(), &true.into(), &400.into()),
        "{serve}"
    );
    assert!(
        serve["bad_error"]
            .as_str()
            .is_some_and(|e| e.contains("text 1 is empty")),
        "{serve}"
    );
    // every vector equals `keeper compute`'s over the same texts
    let model = compute_market_keeper::compute::encoder::minilm_path();
    let local = v.dir.path().join("local.safetensors");
    let kp = &r.client;
    v.keeper(
        kp,
        &[
            "compute",
            "--backend",
            "cpu",
            "--model",
            model.to_str().context("path")?,
            "--texts",
            path.to_str().context("path")?,
            "-o",
            local.to_str().context("path")?,
        ],
    )?;
    let bytes = std::fs::read(&local)?;
    let st = safetensors::SafeTensors::deserialize(&bytes)?;
    let want = st.tensor("embedding")?;
    assert_eq!(want.shape(), &[1000, 384]);
    let got = npy_i16(&npy)?;
    assert_eq!(got.len(), 1000 * 384);
    let want: Vec<i16> = want
        .data()
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let differ = (0..1000)
        .filter(|&i| got[i * 384..(i + 1) * 384] != want[i * 384..(i + 1) * 384])
        .count();
    assert_eq!(differ, 0, "every vector equals keeper compute's");
    Ok(())
}

/// The int16 data of a `.npy` file numpy's `save` wrote (version 1 header, C order).
fn npy_i16(path: &Path) -> Result<Vec<i16>> {
    let b = std::fs::read(path)?;
    anyhow::ensure!(b.starts_with(b"\x93NUMPY"), "not a .npy file");
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + header_len])?;
    anyhow::ensure!(
        header.contains("'<i2'") && header.contains("'fortran_order': False"),
        "an int16 C-order array: {header}"
    );
    Ok(b[10 + header_len..]
        .chunks_exact(2)
        .map(|x| i16::from_le_bytes([x[0], x[1]]))
        .collect())
}

/// The tools venv with the wheel just built installed into it.
fn tools_with_wheel() -> Result<PathBuf> {
    let (wheel, tools) = (wheel()?, tools()?);
    run(
        Command::new(tools.join("bin/pip"))
            .args([
                "install",
                "-q",
                "--disable-pip-version-check",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(&wheel),
        "pip install the wheel into the tools venv",
    )?;
    Ok(tools)
}

/// Stops the Ray provider with SIGTERM (it shuts its Ray cluster down), then any Ray process
/// left behind.
struct RayProvider {
    proc: Proc,
    tools: PathBuf,
}

impl Drop for RayProvider {
    fn drop(&mut self) {
        let pid = self.proc.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..60 {
            if matches!(self.proc.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let _ = Command::new(self.tools.join("bin/ray"))
            .args(["stop", "--force"])
            .output();
    }
}

/// A provider whose tiles fan out over a three-node Ray cluster (one key, one stake) has two
/// MiniLM tasks Accepted by three CPU verifiers: the worker node holding chunks of the first
/// task is killed while they are out, Ray runs them elsewhere and the task is still Accepted in
/// its window; a node that joins afterwards (as the autoscaler adds one) computes chunks of the
/// second task, the provider never restarted.
#[test]
fn a_provider_on_a_ray_cluster_loses_a_worker_node_mid_task_and_is_still_accepted() -> Result<()> {
    let tools = tools_with_wheel()?;
    let v = Validator::start()?;
    let (client, provider, verifiers) = small_market(&v, "120,90,45,45")?;
    let (_store_proc, store) = spawn_serve(&v, "client-store")?;
    // the verifiers and the cranker, running until the end
    let _keepers = verifiers_and_crank(&v, &verifiers)?;
    let stats = v.dir.path().join("ray-provider.json");
    let log = std::fs::File::create(v.dir.path().join("ray-provider.log"))?;
    let listen = format!("127.0.0.1:{}", free_port());
    let child = Command::new(tools.join("bin/python"))
        .arg(root().join("python/tests/ray_provider.py"))
        .args([&v.url, provider.to_str().context("path")?])
        .arg(v.dir.path().join("ray-provider.redb"))
        .arg(&listen)
        .arg(&stats)
        .current_dir(v.dir.path())
        .env("RAY_USAGE_STATS_ENABLED", "0")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let _ray = RayProvider {
        proc: Proc {
            child,
            name: "ray-provider".into(),
        },
        tools: tools.clone(),
    };
    let read = || -> Result<Option<serde_json::Value>> {
        Ok(std::fs::read(&stats)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok()))
    };
    wait_for(180, "the Ray provider to start", || {
        Ok(read()?.filter(|s| s["ready"] == true).map(|_| ()))
    })
    .map_err(|e| e.context(log_tails(&v, &["ray-provider"])))?;
    let (texts, _) = compute_market_keeper::compute::encoder::minilm_heldout()?;
    let lines: Vec<&str> = std::str::from_utf8(&texts)?.lines().collect();
    let model = compute_market_keeper::compute::encoder::minilm_path();
    let chain = v.chain();
    // task `id` on 60 held-out texts of its own (the same job twice would be served from the
    // provider's store, not computed)
    let accepted = |id: &str| -> Result<()> {
        let n: usize = id.parse()?;
        let path = v.dir.path().join(format!("sentences-{id}.txt"));
        std::fs::write(&path, lines[(n - 1) * 60..n * 60].join("\n") + "\n")?;
        let out = v.keeper(
            &client,
            &[
                "task",
                "post",
                "--id",
                id,
                "--model",
                model.to_str().context("path")?,
                "--texts",
                path.to_str().context("path")?,
                "--store",
                &store,
                "--reward",
                "1000000",
                "--anyway",
            ],
        )?;
        let task: anchor_lang::prelude::Pubkey = out["posted"]["task"]
            .as_str()
            .context("task address")?
            .parse()?;
        wait_for(240, "the task to close", || {
            Ok(chain.task(&task)?.is_none().then_some(()))
        })
        .map_err(|e| e.context(log_tails(&v, &["ray-provider", "v0", "crank"])))?;
        let status = v.keeper(&client, &["task", "status", &task.to_string()])?;
        anyhow::ensure!(
            status["status"] == "Accepted",
            "task {id}: {status}\n{}",
            log_tails(&v, &["ray-provider", "v0"])
        );
        Ok(())
    };
    accepted("1")?;
    let s = read()?.context("the provider's figures")?;
    let killed = s["killed"].as_str().context("a node killed")?.to_string();
    // the market's tasks (the keeper's speed checks at start are synthetic jobs)
    let encoders = |s: &serde_json::Value| -> Vec<serde_json::Value> {
        s["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["kind"] == "Encoder")
            .cloned()
            .collect()
    };
    // the nodes a task's chunks were pinned to, or ran on
    let nodes = |t: &serde_json::Value, field: &str| -> Result<Vec<String>> {
        Ok(t[field]
            .as_array()
            .with_context(|| format!("{field} of {t}"))?
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect())
    };
    let t0 = &encoders(&s)[0];
    assert!(
        nodes(t0, "pinned")?.contains(&killed),
        "chunks were out on the killed node: {t0}"
    );
    assert!(
        !nodes(t0, "ran")?.contains(&killed),
        "every chunk of the killed node ran again elsewhere: {t0}"
    );
    // the node that joined is picked up by the next task, without a restart
    let added = wait_for(60, "a node to join", || {
        Ok(read()?.and_then(|s| {
            s["added"]
                .as_str()
                .filter(|a| *a != "pending")
                .map(str::to_string)
        }))
    })?;
    accepted("2")?;
    let s = read()?.context("the provider's figures")?;
    println!(
        "the Ray provider: killed {}, added {}; its market tasks' chunks: {}",
        s["killed"],
        s["added"],
        serde_json::Value::Array(encoders(&s))
    );
    let t1 = &encoders(&s)[1];
    assert!(
        nodes(t1, "ran")?.contains(&added),
        "the joined node computed chunks of the second task: {t1}"
    );
    let node = chain
        .node(&node_of(&provider))?
        .context("the provider's node")?;
    assert_eq!(
        (node.tasks_completed, node.times_slashed),
        (2, 0),
        "one stake, both tasks paid"
    );
    Ok(())
}
