//! `hprm dashboard`: a live view of the programs running on this host,
//! launched or deployed under systemd (found as `hprm ps` finds them), in
//! a browser and for Prometheus.
//!
//! It only reads what programs already publish (their runtime directories,
//! `hprm_node::status`, as `hprm ps` does) and asks each program's store
//! for its figures, so opening it changes nothing in a program: no message
//! is sent per event, and a program that runs without a dashboard pays
//! nothing for one.
//!
//! - [`mod@snapshot`]: what is read, once per request: programs, federates,
//!   their graph, each store's figures.
//! - [`metrics`]: a snapshot in the Prometheus text format (`GET /metrics`).
//! - `page.html`: the page (`GET /`), embedded; it follows `GET /events`
//!   (server-sent events, a snapshot as JSON every second) and draws the
//!   graph itself, so nothing but this binary is needed at run time. The
//!   loss kinds it shows are put in when it is served ([`page`]), from
//!   `hprm_node::loss`, their one list.
//!
//! Read-only by construction: every route is a GET of a view; nothing in
//! the page can send a command. It listens on localhost unless told
//! otherwise.

mod metrics;
mod snapshot;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use snapshot::Reader;

use crate::ps::Places;

#[derive(Args, Debug)]
pub struct DashboardArgs {
    /// Where to listen; port 0 picks a free one (the address is printed).
    /// Anything but localhost exposes the programs' figures to the network.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: SocketAddr,
    /// Where to find programs (as `hprm ps`): launched and deployed.
    #[command(flatten)]
    pub places: Places,
}

const PAGE: &str = include_str!("page.html");

/// Where [`PAGE`] takes the loss kinds, as JSON.
const LOSS_KINDS_SLOT: &str = "@LOSS_KINDS@";

/// The page as served: [`PAGE`] with every loss kind of
/// [`hprm_node::loss::Loss::ALL`], in its order, as `{"name", "lost"}`
/// (`lost`: false for a kind that counts a message delivered late, as
/// `LossCounts::lost` tells), so that a kind added to the runtime shows on
/// the page without touching it.
fn page() -> String {
    use hprm_node::loss::{Loss, LossCounts, Losses};
    let kinds: Vec<serde_json::Value> = Loss::ALL
        .iter()
        .map(|&kind| {
            let mut one = Losses::default();
            one.count("port", kind, 1);
            let lost = one.0.values().map(LossCounts::lost).sum::<u64>() == 1;
            serde_json::json!({ "name": kind.name(), "lost": lost })
        })
        .collect();
    PAGE.replace(LOSS_KINDS_SLOT, &serde_json::Value::from(kinds).to_string())
}

/// How often `/events` sends a snapshot.
const EVENT_PERIOD: Duration = Duration::from_secs(1);

pub fn run(args: &DashboardArgs) -> anyhow::Result<i32> {
    let server = bind(args.listen, &args.places)?;
    serve_forever(&server, args.places.clone());
    Ok(0)
}

/// Starts a dashboard on a thread of its own (`hprm launch --dashboard`):
/// it lives as long as the process.
pub fn start(listen: SocketAddr) -> anyhow::Result<()> {
    let places = Places::default();
    let server = bind(listen, &places)?;
    std::thread::Builder::new().name("hprm-dashboard".into()).spawn(move || serve_forever(&server, places))?;
    Ok(())
}

/// Listens, and says where (port 0 picks one).
fn bind(listen: SocketAddr, places: &Places) -> anyhow::Result<tiny_http::Server> {
    let server = tiny_http::Server::http(listen).map_err(|e| anyhow::anyhow!("{e}")).with_context(|| {
        format!("cannot listen on {listen}; is another dashboard running there? (--listen ADDR:PORT)")
    })?;
    let addr = server.server_addr().to_ip().context("the server has no IP address")?;
    println!(
        "hprm dashboard: http://{addr}/ (metrics: http://{addr}/metrics), reading {} and {}",
        places.runtime_base().display(),
        places.deployed.display()
    );
    if !addr.ip().is_loopback() {
        eprintln!("note: listening on {addr}, not localhost: anyone who can reach it can read the programs' figures");
    }
    Ok(server)
}

/// One reader for every request, so that each store is asked over one
/// connection kept open, not one opened per request.
type SharedReader = Arc<Mutex<Reader>>;

fn snapshot(reader: &SharedReader) -> snapshot::Snapshot {
    // A request thread that panicked mid-read left nothing half-written
    // that matters: the next read starts afresh.
    reader.lock().unwrap_or_else(std::sync::PoisonError::into_inner).read()
}

fn serve_forever(server: &tiny_http::Server, places: Places) {
    let reader: SharedReader = Arc::new(Mutex::new(Reader::new(places)));
    for request in server.incoming_requests() {
        let reader = reader.clone();
        // One thread per request: `/events` holds its connection open.
        std::thread::spawn(move || serve(request, &reader));
    }
}

fn serve(request: tiny_http::Request, reader: &SharedReader) {
    let header = |v: &str| tiny_http::Header::from_bytes(&b"Content-Type"[..], v.as_bytes()).ok();
    let respond = |request: tiny_http::Request, code: u16, content_type: &str, body: String| {
        let mut r = tiny_http::Response::from_string(body).with_status_code(code);
        if let Some(h) = header(content_type) {
            r.add_header(h);
        }
        // The client may have gone; nothing to do about it.
        let _ = request.respond(r);
    };
    if *request.method() != tiny_http::Method::Get {
        return respond(request, 405, "text/plain", "the dashboard is read-only: GET only\n".into());
    }
    let path = request.url().split('?').next().unwrap_or("/").to_owned();
    match path.as_str() {
        "/" => respond(request, 200, "text/html; charset=utf-8", page()),
        "/metrics" => respond(
            request,
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics::encode_text(&snapshot(reader)),
        ),
        "/api/programs" => {
            let body = serde_json::to_string(&snapshot(reader)).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
            respond(request, 200, "application/json", body)
        }
        "/events" => events(request, reader),
        _ => respond(request, 404, "text/plain", format!("no page {path}; try / or /metrics\n")),
    }
}

/// `/events`: a snapshot every [`EVENT_PERIOD`] until the browser goes (a
/// write fails). Written on the raw connection, each event flushed at once:
/// a chunked response body would wait for a full chunk.
fn events(request: tiny_http::Request, reader: &SharedReader) {
    let mut out = request.into_writer();
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
    if out.write_all(head.as_bytes()).and_then(|()| out.flush()).is_err() {
        return;
    }
    loop {
        let Ok(json) = serde_json::to_string(&snapshot(reader)) else { return };
        if out.write_all(format!("data: {json}\n\n").as_bytes()).and_then(|()| out.flush()).is_err() {
            return;
        }
        std::thread::sleep(EVENT_PERIOD);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::loss::Loss;

    /// The loss kinds the served page holds, as it reads them.
    fn kinds_in(page: &str) -> Vec<(String, bool)> {
        let open = r#"<script id="loss-kinds" type="application/json">"#;
        let start = page.find(open).expect("the page has its loss kinds' element") + open.len();
        let end = start + page[start..].find("</script>").expect("the element ends");
        let kinds: Vec<serde_json::Value> = serde_json::from_str(&page[start..end]).expect("the kinds are JSON");
        kinds
            .iter()
            .map(|k| (k["name"].as_str().expect("a name").to_string(), k["lost"].as_bool().expect("lost or late")))
            .collect()
    }

    #[test]
    fn the_page_gets_every_loss_kind_of_the_runtime_and_has_no_list_of_its_own() {
        let served = page();
        assert!(!served.contains(LOSS_KINDS_SLOT), "the slot is filled");
        let want: Vec<(String, bool)> = Loss::ALL.iter().map(|k| (k.name().to_string(), *k != Loss::Tardy)).collect();
        assert_eq!(kinds_in(&served), want);
        // The page names no kind itself: a list there would be a second one.
        for kind in Loss::ALL {
            assert!(!PAGE.contains(&format!("\"{}\"", kind.name())), "page.html names {kind} itself");
        }
    }
}
