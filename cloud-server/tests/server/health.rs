//! What operators and load balancers see: `/livez`, `/readyz`, `/metrics`, and a graceful
//! shutdown that answers the request in flight and tells clients to reconnect.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use awc::ws::{CloseCode, Frame, Message};
use cloud_server::Work;
use futures_util::{SinkExt, StreamExt};
use split_shared::protocol::{Reply, Request};

const CHELSEA: &[u8] = include_bytes!("../../../web/samples/chelsea.png");

/// `/metrics` parsed by an independent Prometheus text parser: sample name and labels
/// (`name{a="b"}`, labels sorted) to value.
async fn scrape(srv: &actix_test::TestServer) -> HashMap<String, f64> {
    let mut response = awc::Client::new().get(srv.url("/metrics")).send().await.unwrap();
    assert!(response.status().is_success());
    let content_type = response.headers().get("content-type").unwrap().to_str().unwrap();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let body = String::from_utf8(response.body().await.unwrap().to_vec()).unwrap();
    assert!(body.ends_with("# EOF\n"), "an OpenMetrics page ends with # EOF");
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the page parses");
    scrape
        .samples
        .into_iter()
        .map(|s| {
            let mut labels: Vec<String> =
                s.labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            labels.sort();
            let key = if labels.is_empty() {
                s.metric
            } else {
                format!("{}{{{}}}", s.metric, labels.join(","))
            };
            let value = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => {
                    f64::NAN
                }
            };
            (key, value)
        })
        .collect()
}

async fn status(srv: &actix_test::TestServer, method: &str, path: &str) -> (u16, String) {
    let client = awc::Client::new();
    let request =
        if method == "HEAD" { client.head(srv.url(path)) } else { client.get(srv.url(path)) };
    let mut response = request.send().await.unwrap();
    let body = response.body().await.unwrap();
    (response.status().as_u16(), String::from_utf8_lossy(&body).into_owned())
}

#[actix_web::test]
async fn health_routes_answer_get_and_head() {
    let (srv, _state) = common::server_and_state(&[]);
    for path in ["/livez", "/healthz", "/readyz", "/metrics"] {
        let (get, body) = status(&srv, "GET", path).await;
        assert_eq!(get, 200, "GET {path}: {body}");
        let (head, empty) = status(&srv, "HEAD", path).await;
        assert_eq!((head, empty.as_str()), (200, ""), "HEAD {path}");
    }
    assert_eq!(status(&srv, "GET", "/readyz").await.1, "ready");
}

/// The counters count what crossed the socket: one image, one feature frame that does not
/// decode, bytes both ways, one session, one forward pass.
#[actix_web::test]
async fn metrics_count_what_was_sent() {
    let (srv, _state) = common::server_and_state(&["--cache-entries", "16"]);
    let before = scrape(&srv).await;
    assert_eq!(before.get("split_sessions_total"), Some(&0.0), "{before:?}");
    let (_, mut ws) = awc::Client::new().ws(srv.url("/ws")).connect().await.unwrap();
    let image = Request::Image { id: 1, payload: CHELSEA.to_vec() }.to_bytes();
    let garbage = vec![0xde, 0xad, 0xbe, 0xef];
    let mut received = 0;
    for frame in [image.clone(), image.clone(), garbage.clone()] {
        ws.send(Message::Binary(frame.into())).await.unwrap();
        loop {
            match tokio::time::timeout(Duration::from_secs(60), ws.next()).await {
                Ok(Some(Ok(Frame::Binary(b)))) => {
                    received += b.len();
                    Reply::decode(&b).unwrap();
                    break;
                }
                Ok(Some(Ok(Frame::Ping(_) | Frame::Pong(_)))) => continue,
                other => panic!("expected a reply, got {other:?}"),
            }
        }
    }
    let after = scrape(&srv).await;
    let get = |k: &str| after.get(k).copied().unwrap_or_else(|| panic!("no {k} in {after:?}"));
    assert_eq!(get("split_requests_total{from=\"input\"}"), 2.0);
    assert_eq!(get("split_cache_hits_total"), 1.0, "the repeat came from the cache");
    assert_eq!(get("split_cache_misses_total"), 1.0);
    assert_eq!(get("split_refusals_total{reason=\"malformed\"}"), 1.0);
    assert_eq!(get("split_forward_passes_total{batch=\"1\"}"), 1.0);
    assert_eq!(get("split_sessions_total"), 1.0);
    assert_eq!(get("split_connections"), 1.0);
    assert_eq!(get("split_received_bytes_total"), (2 * image.len() + garbage.len()) as f64);
    assert_eq!(get("split_sent_bytes_total"), received as f64);
    assert_eq!(get("split_request_duration_seconds_count{from=\"input\"}"), 2.0);
    assert_eq!(get("split_draining"), 0.0);
}

/// `/readyz` says 503 while the queue is at `--ready-queue`, and ready again once it drains.
#[actix_web::test]
async fn readiness_flips_while_the_workers_are_saturated() {
    let (srv, state) = common::server_and_state(&[
        "--workers",
        "1",
        "--batch",
        "1",
        "--queue",
        "32",
        "--ready-queue",
        "4",
    ]);
    assert_eq!(status(&srv, "GET", "/readyz").await.0, 200);
    // Twelve whole images for one worker: a few hundred milliseconds of queue.
    let jobs: Vec<_> = (0..12)
        .map(|_| {
            let engine = state.engine().clone();
            actix_web::rt::spawn(async move { engine.submit(Work::Image(CHELSEA.to_vec())).await })
        })
        .collect();
    let mut saw_busy = None;
    for _ in 0..200 {
        let (code, body) = status(&srv, "GET", "/readyz").await;
        if code == 503 {
            saw_busy = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let body = saw_busy.expect("/readyz never said 503 while 12 requests waited for one worker");
    assert!(body.contains("queued"), "{body}");
    for job in jobs {
        job.await.unwrap().expect("every queued request is still answered");
    }
    assert_eq!(status(&srv, "GET", "/readyz").await, (200, "ready".to_string()));
}

/// SIGTERM: the request in flight is answered, then the session is closed with 1012 (service
/// restart: clients reconnect at once), and the process exits 0.
#[actix_web::test]
async fn sigterm_answers_in_flight_then_closes_with_restart() {
    let (mut server, url) = common::start(&["--rate-limit", "0", "--cache-entries", "0"]);
    let ws_url = format!("{}ws", url.replacen("http", "ws", 1));
    let (_, mut ws) = awc::Client::new().ws(ws_url.as_str()).connect().await.unwrap();
    // Two requests back to back: once the first is answered, the second is in the server's
    // hands (read while the first was computed) and in flight when the signal comes.
    for id in [7, 8] {
        let image = Request::Image { id, payload: CHELSEA.to_vec() }.to_bytes();
        ws.send(Message::Binary(image.into())).await.unwrap();
    }
    let mut answered = Vec::new();
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next()).await {
            Ok(Some(Ok(Frame::Binary(b)))) => {
                let Ok(Reply::Result { id, .. }) = Reply::decode(&b) else {
                    panic!("expected a result, got {:?}", Reply::decode(&b));
                };
                answered.push(id);
                if id == 7 {
                    let pid = server.0.id().to_string();
                    let killed =
                        std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
                    assert!(killed.success());
                }
            }
            Ok(Some(Ok(Frame::Close(reason)))) => break reason,
            Ok(Some(Ok(_))) => continue,
            other => panic!("expected the answers and a close frame, got {other:?}"),
        }
    };
    assert_eq!(answered, [7, 8], "the request in flight was answered before the close");
    let close = close.expect("a close reason");
    assert_eq!(close.code, CloseCode::Restart, "{close:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(exit) = server.0.try_wait().unwrap() {
            break exit;
        }
        assert!(std::time::Instant::now() < deadline, "the server did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");
}

/// One raw HTTP/1.1 request to `srv` with `host` as its `Host` header; the status code.
async fn status_for_host(srv: &actix_test::TestServer, path: &str, host: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(srv.addr()).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n") {
        head.push(tcp.read_u8().await.unwrap());
    }
    let line = String::from_utf8_lossy(&head);
    line.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

/// DNS rebinding: a page under another name that resolves to this server's address is
/// refused on every route (pages, API, the WebSocket) with 421; the loopback names are
/// served; probes answer whatever the name.
#[actix_web::test]
async fn requests_for_another_host_name_are_refused() {
    let (srv, _) = common::server_and_state(&[]);
    let port = srv.addr().port();
    let ours = format!("localhost:{port}");
    let theirs = format!("rebind.attacker.example:{port}");
    for path in [
        "/",
        "/index.html",
        "/api/info",
        "/weights/efficientnet-lite0.splw",
        "/calibration/efficientnet-lite0.splc",
    ] {
        assert_eq!(status_for_host(&srv, path, &theirs).await, 421, "{path} for another name");
    }
    assert_eq!(status_for_host(&srv, "/api/info", &ours).await, 200);
    assert_eq!(status_for_host(&srv, "/api/info", &format!("127.0.0.1:{port}")).await, 200);
    assert_eq!(status_for_host(&srv, "/readyz", &theirs).await, 200, "probes answer any name");
    assert_eq!(status_for_host(&srv, "/metrics", &theirs).await, 200, "and the metrics scraper");
    let mut tcp = tokio::net::TcpStream::connect(srv.addr()).await.unwrap();
    let head = common::upgrade(&mut tcp, &theirs).await.unwrap();
    assert!(head.starts_with(b"HTTP/1.1 421"), "{}", String::from_utf8_lossy(&head));
    let mut tcp = tokio::net::TcpStream::connect(srv.addr()).await.unwrap();
    let head = common::upgrade(&mut tcp, &ours).await.unwrap();
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    // An operator's list replaces the defaults.
    let (srv, _) = common::server_and_state(&["--allowed-hosts", "app.example.com"]);
    let port = srv.addr().port();
    assert_eq!(status_for_host(&srv, "/api/info", &format!("localhost:{port}")).await, 421);
    assert_eq!(status_for_host(&srv, "/api/info", "app.example.com").await, 200);
}

/// CORS for the origins `--allow-origin` lists, and only those: the package, the API and the
/// weights echo a listed `Origin`; another origin gets no `Access-Control-Allow-Origin`; every
/// answer varies with `Origin`. The site version is on the page's files and `/api/info`, the
/// same as `/api/info` names.
#[actix_web::test]
async fn cors_for_listed_origins_and_the_site_version() {
    let (srv, _) = common::server_and_state(&["--allow-origin", "https://app.example.com"]);
    let client = awc::Client::default();
    let info: serde_json::Value =
        client.get(srv.url("/api/info")).send().await.unwrap().json().limit(1 << 20).await.unwrap();
    let site = info["site"].as_str().expect("/api/info names the site version").to_owned();
    assert_eq!(site.len(), 16);
    let get = |path: &str, origin: Option<&str>| {
        let mut req = client.get(srv.url(path));
        if let Some(origin) = origin {
            req = req.insert_header(("Origin", origin.to_owned()));
        }
        req.send()
    };
    for path in ["/split-client.js", "/api/info", "/weights/shards/stem.splw"] {
        let listed = get(path, Some("https://app.example.com")).await.unwrap();
        assert_eq!(listed.status(), 200, "{path}");
        let allow = header(&listed, "access-control-allow-origin");
        assert_eq!(allow.as_deref(), Some("https://app.example.com"), "{path} for a listed origin");
        let vary: Vec<_> =
            listed.headers().get_all("vary").map(|v| v.to_str().unwrap().to_owned()).collect();
        assert!(vary.iter().any(|v| v.contains("Origin")), "{path} varies with Origin: {vary:?}");
        let other = get(path, Some("https://evil.example")).await.unwrap();
        assert!(
            header(&other, "access-control-allow-origin").is_none(),
            "{path}: another origin gets no CORS"
        );
    }
    for path in ["/split-client.js", "/sw.js", "/api/info"] {
        let res = get(path, None).await.unwrap();
        assert_eq!(header(&res, "split-site"), Some(site.clone()), "{path} names the site version");
    }
    // The page's files are revalidated on every load (a 304 while unchanged), so a page never
    // runs one build's client with another's module.
    for path in ["/", "/split-client.js", "/client/wasm.js", "/samples/chelsea.png"] {
        let res = get(path, None).await.unwrap();
        assert_eq!(header(&res, "cache-control").as_deref(), Some("no-cache"), "{path}");
    }
    let shard = get("/weights/shards/stem.splw", None).await.unwrap();
    assert!(
        header(&shard, "split-site").is_none(),
        "the weights are the client's to keep, not the site's"
    );
}

/// A response header's value as text.
fn header<B>(res: &awc::ClientResponse<B>, name: &str) -> Option<String> {
    res.headers().get(name).map(|v| v.to_str().unwrap().to_owned())
}
