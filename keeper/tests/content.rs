//! The content store over HTTP: uploads checked against their names and bounded, downloads
//! hashed, a client's inputs fetched, checked and held — each bad input refused by name.

use std::sync::Arc;

use compute_market_keeper::{
    clientdata,
    metrics::Metrics,
    results::{self, FetchPolicy, ResultStore},
};
use compute_market_protocol::hash::hashv;

fn loopback() -> FetchPolicy {
    FetchPolicy {
        allow_loopback: true,
        ..FetchPolicy::default()
    }
}

/// A store served on a free loopback port: (store, server, base URL).
fn served() -> (Arc<ResultStore>, results::HttpServer, String) {
    let store = Arc::new(ResultStore::default().with_policy(loopback()));
    let server =
        results::serve(store.clone(), Arc::new(Metrics::default()), "127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.addr);
    (store, server, url)
}

#[test]
fn objects_go_up_and_come_back_checked() {
    let (_store, _server, url) = served();
    let client = results::client::Client::new(&loopback()).unwrap();
    client.put_content(&url, b"hello".to_vec()).unwrap();
    let h = hashv(&[b"hello"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    assert_eq!(
        client.fetch_content(&url, &h, 100, deadline).unwrap(),
        b"hello"
    );
    // a body that does not hash to its name is refused, and so is a fetch past its bound
    let other = ResultStore::default().with_policy(loopback());
    let e = other
        .fetch_content(&[url.clone()], &h, 3, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("at most 3") || e.contains("more than the 3"),
        "{e}"
    );
    let raw = reqwest::blocking::Client::new()
        .put(format!("{url}/c/{}", results::hex(&[1; 32])))
        .body("not that")
        .send()
        .unwrap();
    assert_eq!(raw.status(), 400);
    assert!(raw.text().unwrap().contains("does not hash to its name"));
}

#[test]
fn a_clients_inputs_are_fetched_checked_and_held() {
    let (_store, _server, url) = served();
    let dir = tempfile::tempdir().unwrap();
    let (m, k, n) = (3usize, 70usize, 5usize);
    let a: Vec<u32> = (0..(m * k) as u32).collect();
    let b: Vec<u32> = (0..(k * n) as u32).map(|x| x * 3).collect();
    let pa = dir.path().join("A.safetensors");
    let pb = dir.path().join("B.safetensors");
    std::fs::write(&pa, clientdata::tensor_file("A", m, k, &a).unwrap()).unwrap();
    std::fs::write(&pb, clientdata::tensor_file("B", k, n, &b).unwrap()).unwrap();
    let prepared = clientdata::prepare_inputs(&[pa.clone(), pb.clone()]).unwrap();
    assert_eq!(prepared.job.dims, [m as u32, k as u32, n as u32]);
    clientdata::upload(&url, &prepared, &loopback()).unwrap();
    let verifier = ResultStore::default().with_policy(loopback());
    let (fetched, found) = verifier
        .ensure_inputs(&prepared.job, &[url.clone()], None)
        .unwrap();
    assert_eq!((fetched, found), (3, 0), "the manifest and two parts");
    let held = compute_market_keeper::compute::inputs::matrices(&prepared.job).unwrap();
    assert_eq!(held.a.data, a);
    assert_eq!(held.b.data, b);

    // bad inputs, refused by name before anything is posted
    let mut bad = a.clone();
    bad[5] = u32::MAX;
    std::fs::write(&pa, clientdata::tensor_file("A", m, k, &bad).unwrap()).unwrap();
    let e = clientdata::prepare_inputs(&[pa.clone(), pb.clone()])
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("element 5"), "{e:#}");
    std::fs::write(
        &pa,
        clientdata::tensor_file("A", m, k + 1, &vec![0; m * (k + 1)]).unwrap(),
    )
    .unwrap();
    let e = clientdata::prepare_inputs(&[pa.clone(), pb.clone()])
        .err()
        .unwrap();
    assert!(
        format!("{e:#}").contains("A's columns must equal B's rows"),
        "{e:#}"
    );
    std::fs::write(&pa, b"not safetensors at all").unwrap();
    let e = clientdata::prepare_inputs(&[pa, pb]).err().unwrap();
    assert!(format!("{e:#}").contains("safetensors"), "{e:#}");
}
