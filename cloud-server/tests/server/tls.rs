//! The real binary behind TLS: a certificate made at test time, a `wss://` round trip with a
//! client that trusts only it, and the refusal to serve clear text beyond loopback, or every
//! interface without the host names clients use.

use crate::common;

use std::process::Command;
use std::sync::Arc;

use awc::ws::{Frame, Message};
use common::start;
use futures_util::{SinkExt, StreamExt};
use split_shared::protocol::{Reply, Request};

const CHELSEA: &[u8] = include_bytes!("../../../web/samples/chelsea.png");

fn client_trusting(cert: &rcgen::CertifiedKey) -> awc::Client {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    awc::Client::builder().connector(awc::Connector::new().rustls_0_23(Arc::new(config))).finish()
}

#[actix_web::test]
async fn wss_round_trip_with_a_self_signed_certificate() {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("split-tls-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.cert.pem()).unwrap();
    std::fs::write(&k, cert.key_pair.serialize_pem()).unwrap();
    let (_server, url) =
        start(&["--tls-cert", c.to_str().unwrap(), "--tls-key", k.to_str().unwrap()]);
    assert!(url.starts_with("https://"), "{url}");

    let client = client_trusting(&cert);
    let health = client.get(format!("{url}healthz")).send().await.expect("https request");
    assert!(health.status().is_success());
    let wss = format!("{}ws", url.replacen("https://", "wss://", 1));
    let (_, mut ws) = client.ws(wss.as_str()).connect().await.expect("wss handshake");
    ws.send(Message::Binary(Request::Image { id: 8, payload: CHELSEA.to_vec() }.to_bytes().into()))
        .await
        .unwrap();
    let reply = loop {
        match ws.next().await.expect("open").expect("frame") {
            Frame::Binary(b) => break Reply::decode(&b).unwrap(),
            Frame::Ping(_) | Frame::Pong(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    };
    match reply {
        Reply::Result { id: 8, top, .. } => assert!((281..=285).contains(&top[0].class)),
        other => panic!("expected a result, got {other:?}"),
    }

    // Clear text to the TLS port gets no answer; a client that does not trust the certificate
    // does not connect.
    let plain = awc::Client::new().get(url.replacen("https://", "http://", 1)).send().await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    assert!(awc::Client::new().get(format!("{url}healthz")).send().await.is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn clear_text_beyond_loopback_is_refused_unless_asked() {
    let out = Command::new(env!("CARGO_BIN_EXE_cloud-server"))
        .args(["--host", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without TLS") && stderr.contains("--allow-plaintext"), "{stderr}");
    // Every interface and no host names: the server cannot know which names are its own.
    let out = Command::new(env!("CARGO_BIN_EXE_cloud-server"))
        .args(["--host", "0.0.0.0", "--port", "0", "--allow-plaintext"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allowed-hosts"), "{stderr}");
    let (_server, url) =
        start(&["--host", "0.0.0.0", "--allow-plaintext", "--allowed-hosts", "localhost"]);
    assert!(url.starts_with("http://"), "{url}");
}
