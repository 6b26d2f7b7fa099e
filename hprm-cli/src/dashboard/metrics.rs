//! A [`Snapshot`] in the Prometheus (OpenMetrics) text format, through the
//! `prometheus-client` crate.
//!
//! Names and labels: every series carries `program`; a federate's also
//! `federate` and `host`, a store's `host` (every host's store of a program
//! with hosts, as the hosts' links report them; the RTI's families carry
//! no host: a program has one RTI, wherever it runs), a port's also `port`, a connection's
//! `connection` (`sender port -> receiver port`, counted by the receiving
//! `federate`), a reaction's `reaction`. Counters are what the processes count
//! from their start (messages in and out, losses by kind, the store's
//! evictions and refusals), so they only grow while a process lives; a
//! restarted federate or store starts again from 0, which Prometheus reads
//! as a counter reset. Every loss kind is exported for every federate, the
//! zero ones as zero, so a dashboard can alert on any of them.
//!
//! Latencies are histograms with the buckets the federates count in
//! (`hprm_node::figures::LATENCY_BOUNDS_NS`, 10 µs to 1 s), every message
//! counted, not sampled. Reactions are those a federate lists as its
//! busiest (`hprm_node::status::BUSIEST`), so a reaction's series may come
//! and go.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use hprm_node::figures::{HistogramCounts, LATENCY_BOUNDS_NS};
use hprm_node::loss::Loss;

use super::snapshot::Snapshot;

type Labels = Vec<(String, String)>;
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;
type IntGauges = Family<Labels, Gauge>;

/// A histogram a federate counted, encoded as it is.
#[derive(Debug, Default)]
struct Counted(std::sync::Mutex<HistogramCounts>);

impl Counted {
    fn set(&self, counts: &HistogramCounts) {
        counts.clone_into(&mut self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

impl TypedMetric for Counted {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Counted {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let c = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Per bucket, not cumulative (the encoder sums); f64::MAX is `+Inf`.
        let buckets: Vec<(f64, u64)> = LATENCY_BOUNDS_NS
            .iter()
            .map(|&b| b as f64 / 1e9)
            .chain(std::iter::once(f64::MAX))
            .enumerate()
            .map(|(i, le)| (le, c.counts.get(i).copied().unwrap_or(0)))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(c.sum_ns as f64 / 1e9, c.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The registry of one scrape, built from `snap`.
pub fn encode_snapshot(snap: &Snapshot) -> Registry {
    let mut reg = Registry::with_prefix("hprm");
    let up = IntGauges::default();
    let fed_up = IntGauges::default();
    let tag = Gauges::default();
    let lag = Gauges::default();
    let msgs_in = Counters::default();
    let msgs_out = Counters::default();
    let losses = Counters::default();
    let port_losses = Counters::default();
    let store_bytes = IntGauges::default();
    let store_capacity = IntGauges::default();
    let store_objects = IntGauges::default();
    let store_pinned = IntGauges::default();
    let store_pending = IntGauges::default();
    let store_clients = IntGauges::default();
    let store_evictions = Counters::default();
    let store_evicted_bytes = Counters::default();
    let store_expired = Counters::default();
    let store_refused = Counters::default();
    let store_over_quota = Counters::default();
    let store_spill_bytes = IntGauges::default();
    let store_spilled = Counters::default();
    let store_up = IntGauges::default();
    let reactions = Counters::default();
    let deadline_misses = Counters::default();
    let restarts = Counters::default();
    let reaction_runs = Counters::default();
    let reaction_seconds = Gauges::default();
    let reaction_max = Gauges::default();
    let conn_messages = Counters::default();
    let conn_bytes = Counters::default();
    let conn_latency = Family::<Labels, Counted>::default();
    let rti_up = IntGauges::default();
    let rti_readable = IntGauges::default();
    let rti_relayed = Counters::default();
    let rti_grants = Counters::default();
    let rti_grant_latency = Family::<Labels, Counted>::default();
    let rti_net = Gauges::default();
    let rti_ltc = Gauges::default();
    let rti_granted = Gauges::default();

    for p in &snap.programs {
        let prog = p.name.as_str();
        up.get_or_create(&labels(&[("program", prog)])).set(1);
        for f in &p.federates {
            let l = labels(&[("program", prog), ("federate", &f.name), ("host", &f.host)]);
            fed_up.get_or_create(&l).set(i64::from(f.alive && f.status.is_some()));
            restarts.get_or_create(&l).inc_by(u64::from(f.restarts));
            let Some(s) = &f.status else { continue };
            reactions.get_or_create(&l).inc_by(s.reactions);
            deadline_misses.get_or_create(&l).inc_by(s.deadline_misses);
            for r in &s.busiest {
                let l =
                    labels(&[("program", prog), ("federate", &f.name), ("host", &f.host), ("reaction", &r.reaction)]);
                reaction_runs.get_or_create(&l).inc_by(r.runs);
                reaction_seconds.get_or_create(&l).set(r.busy_ns as f64 / 1e9);
                reaction_max.get_or_create(&l).set(r.max_ns as f64 / 1e9);
            }
            for c in &s.connections {
                let name = format!("{} -> {}", c.from, c.to);
                let conn = [("program", prog), ("federate", &f.name), ("host", &f.host), ("connection", &name)];
                conn_messages.get_or_create(&labels(&conn)).inc_by(c.messages);
                for (path, bytes) in [("in_band", c.bytes_in_band), ("store", c.bytes_stored)] {
                    let mut l = labels(&conn);
                    l.push(("path".into(), path.into()));
                    conn_bytes.get_or_create(&l).inc_by(bytes);
                }
                conn_latency.get_or_create(&labels(&conn)).set(&c.latency);
            }
            tag.get_or_create(&l).set(s.tag_ns as f64 / 1e9);
            lag.get_or_create(&l).set(s.lag_ns as f64 / 1e9);
            msgs_in.get_or_create(&l).inc_by(s.messages_in);
            msgs_out.get_or_create(&l).inc_by(s.messages_out);
            for kind in Loss::ALL {
                let l = labels(&[("program", prog), ("federate", &f.name), ("host", &f.host), ("kind", kind.name())]);
                losses.get_or_create(&l).inc_by(s.losses.total(kind));
            }
            for (port, counts) in &s.losses.0 {
                for kind in Loss::ALL {
                    let l = labels(&[
                        ("program", prog),
                        ("federate", &f.name),
                        ("host", &f.host),
                        ("port", port),
                        ("kind", kind.name()),
                    ]);
                    port_losses.get_or_create(&l).inc_by(counts.get(kind));
                }
            }
        }
        // Up from its liveness, not from its figures: an RTI whose figures
        // this dashboard's user cannot read still runs. Where the RTI runs
        // on another host, its figures come in that host's reports.
        if p.rti.is_some() || p.rti_figures.is_some() {
            let l = labels(&[("program", prog)]);
            rti_up.get_or_create(&l).set(i64::from(p.rti_running));
            if p.rti_running {
                rti_readable.get_or_create(&l).set(i64::from(p.rti_error.is_none()));
            }
        }
        if let Some(rti) = &p.rti_figures {
            rti_relayed.get_or_create(&labels(&[("program", prog)])).inc_by(rti.figures.relayed);
            for f in &rti.figures.federates {
                let id = f.id.to_string();
                let name = rti.names.get(usize::from(f.id)).unwrap_or(&id);
                let l = labels(&[("program", prog), ("federate", name)]);
                rti_grants.get_or_create(&l).inc_by(f.grants);
                rti_grant_latency.get_or_create(&l).set(&f.grant_latency);
                for (family, tag) in [(&rti_net, f.net_ns), (&rti_ltc, f.ltc_ns), (&rti_granted, f.granted_ns)] {
                    if let Some(t) = tag {
                        family.get_or_create(&l).set(t as f64 / 1e9);
                    }
                }
            }
        }
        // This host's store and the other hosts' (as their links report them).
        for store in p.store.iter().chain(&p.other_stores) {
            let l = labels(&[("program", prog), ("host", &store.host)]);
            store_up.get_or_create(&l).set(i64::from(store.report.stats.is_some()));
            if let Some(s) = &store.report.stats {
                let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                store_bytes.get_or_create(&l).set(int(s.bytes_in_use));
                store_capacity.get_or_create(&l).set(int(s.capacity));
                store_objects.get_or_create(&l).set(int(s.objects));
                store_pinned.get_or_create(&l).set(int(s.objects_referenced));
                store_pending.get_or_create(&l).set(int(s.pending_deliveries));
                store_clients.get_or_create(&l).set(int(s.clients));
                store_evictions.get_or_create(&l).inc_by(s.evictions);
                store_evicted_bytes.get_or_create(&l).inc_by(s.evicted_bytes);
                store_expired.get_or_create(&l).inc_by(s.expired_deliveries);
                store_refused.get_or_create(&l).inc_by(s.creates_refused);
                store_over_quota.get_or_create(&l).inc_by(s.creates_over_quota);
                store_spill_bytes.get_or_create(&l).set(int(s.spill_bytes_in_use));
                store_spilled.get_or_create(&l).inc_by(s.objects_spilled);
            }
        }
    }

    reg.register("program_up", "A running program (its launcher is alive)", up);
    reg.register("federate_up", "A federate's process is alive and reporting", fed_up);
    reg.register("federate_tag_seconds", "The federate's current tag, as logical time since the start", tag);
    reg.register(
        "federate_lag_seconds",
        "Physical time minus the current tag: how far logical time lags behind (negative: ahead, in fast mode)",
        lag,
    );
    reg.register("federate_messages_received", "Tagged messages received", msgs_in);
    reg.register("federate_messages_sent", "Tagged messages sent (one per receiving federate)", msgs_out);
    reg.register("federate_reactions", "Reactions run", reactions);
    reg.register(
        "federate_deadline_misses",
        "Reactions started past their deadline (their handler ran)",
        deadline_misses,
    );
    reg.register("federate_restarts", "Times the launcher restarted the federate after a failure", restarts);
    reg.register("reaction_runs", "Runs of one of the federate's busiest reactions", reaction_runs);
    reg.register_with_unit(
        "reaction_busy",
        "Execution time of one of the federate's busiest reactions, all runs together (a counter, as a gauge: it is absent while the reaction is not among the busiest)",
        prometheus_client::registry::Unit::Seconds,
        reaction_seconds,
    );
    reg.register_with_unit(
        "reaction_longest_run",
        "The longest run of one of the federate's busiest reactions",
        prometheus_client::registry::Unit::Seconds,
        reaction_max,
    );
    reg.register(
        "connection_messages",
        "Tagged messages that arrived on a connection (counted by its receiving federate)",
        conn_messages,
    );
    reg.register_with_unit(
        "connection",
        "Bytes of the messages of a connection: in-band (on the socket) or through the store (objects they referenced)",
        prometheus_client::registry::Unit::Bytes,
        conn_bytes,
    );
    reg.register_with_unit(
        "connection_latency",
        "Latency of every message of a connection: from its send time (the sender's tag) to the start of its tag at the receiver, in physical time",
        prometheus_client::registry::Unit::Seconds,
        conn_latency,
    );
    reg.register(
        "rti_up",
        "The program's RTI runs (its process, here; its figures in its host's reports, elsewhere)",
        rti_up,
    );
    reg.register(
        "rti_figures_readable",
        "A running RTI's figures can be read by this dashboard (0: its figures file is not readable by this user, \
         the rti_* figures are missing; /api/programs' rti_error says why and what to do)",
        rti_readable,
    );
    reg.register("rti_relayed_messages", "Tagged messages the RTI relayed between federates", rti_relayed);
    reg.register("rti_grants", "Tag advance grants (TAG, PTAG) the RTI sent a federate", rti_grants);
    reg.register_with_unit(
        "rti_grant_latency",
        "How long a federate waited for each grant, from its first NET or LTC since the grant before",
        prometheus_client::registry::Unit::Seconds,
        rti_grant_latency,
    );
    reg.register("rti_net_seconds", "A federate's last NET, as logical time since the start", rti_net);
    reg.register(
        "rti_ltc_seconds",
        "A federate's last LTC (latest tag confirmed), as logical time since the start",
        rti_ltc,
    );
    reg.register(
        "rti_granted_seconds",
        "The last tag granted to a federate, as logical time since the start",
        rti_granted,
    );
    reg.register("federate_losses", "Messages lost or late, by kind (hprm_node::loss), all ports together", losses);
    reg.register("port_losses", "Messages lost or late, by input or output port and kind", port_losses);
    reg.register(
        "store_up",
        "A store of the program answered (another host's: as that host's last report says)",
        store_up,
    );
    reg.register("store_bytes_in_use", "Arena bytes held by objects", store_bytes);
    reg.register("store_capacity_bytes", "Arena bytes", store_capacity);
    reg.register("store_objects", "Objects in the store (created or sealed)", store_objects);
    reg.register("store_objects_referenced", "Objects some client holds", store_pinned);
    reg.register("store_pending_deliveries", "Deliveries announced and not yet settled", store_pending);
    reg.register("store_clients", "Connected clients", store_clients);
    reg.register("store_evictions", "Objects evicted to make room", store_evictions);
    reg.register("store_evicted_bytes", "Bytes evicted to make room", store_evicted_bytes);
    reg.register("store_expired_deliveries", "Deliveries given up on when their TTL ran out", store_expired);
    reg.register("store_creates_refused", "Creates refused for lack of room: values not sent", store_refused);
    reg.register("store_creates_over_quota", "Creates refused by the program's quota", store_over_quota);
    reg.register("store_spill_bytes_in_use", "Spill-file bytes held by objects (--spill-dir)", store_spill_bytes);
    reg.register("store_objects_spilled", "Objects placed in the spill file because the arena was full", store_spilled);
    reg
}

/// `GET /metrics`.
pub fn encode_text(snap: &Snapshot) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &encode_snapshot(snap));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::snapshot::{Federate, Program, RtiView, Store};
    use hprm_node::figures::ConnectionFigures;
    use hprm_node::loss::Losses;
    use hprm_node::status::{FederateStatus, StoreFigures, StoreReport};
    use hprm_rti::figures::{RtiFederate, RtiFigures};

    #[test]
    fn a_snapshot_becomes_openmetrics_with_every_loss_kind() {
        let mut losses = Losses::default();
        losses.count("sink.inp", Loss::Tardy, 3);
        let fed = |name: &str, losses: Losses| Federate {
            name: name.into(),
            host: "here".into(),
            pid: 7,
            alive: true,
            restarts: 1,
            status: Some(FederateStatus {
                federate: name.into(),
                pid: 7,
                start_ns: 0,
                tag_ns: 1_500_000_000,
                microstep: 0,
                lag_ns: 2_000_000,
                messages_in: 10,
                messages_out: 20,
                messages_in_per_s: 1.0,
                messages_out_per_s: 2.0,
                updated_ns: 0,
                losses,
                reactions: 30,
                connections: vec![ConnectionFigures {
                    from: "source.s.out".into(),
                    to: format!("{name}.s.inp"),
                    messages: 3,
                    bytes_in_band: 300,
                    bytes_stored: 7000,
                    latency: HistogramCounts { counts: vec![1, 0, 2], sum_ns: 50_000 },
                    ..ConnectionFigures::default()
                }],
                ..FederateStatus::default()
            }),
        };
        let store = |host: &str, bytes: u64| Store {
            host: host.into(),
            report: StoreReport {
                pid: 3,
                socket: "/run/store.sock".into(),
                stats: Some(StoreFigures { bytes_in_use: bytes, evictions: bytes / 100, ..StoreFigures::default() }),
                error: None,
            },
        };
        let snap = Snapshot {
            now_ns: 0,
            programs: vec![Program {
                name: "demo".into(),
                pid: 1,
                deployed: false,
                started_ns: 0,
                federates: vec![fed("source", Losses::default()), fed("sink", losses)],
                links: Vec::new(),
                store: Some(store("here", 100)),
                other_stores: vec![store("a", 200)],
                // The RTI runs on host a: its figures came in a's reports.
                rti: None,
                rti_figures: Some(RtiView {
                    figures: RtiFigures {
                        relayed: 9,
                        federates: vec![RtiFederate { id: 1, grants: 4, ..RtiFederate::default() }],
                        ..RtiFigures::default()
                    },
                    names: vec!["source".into(), "sink".into()],
                }),
                rti_host: Some("a".into()),
                rti_place: None,
                rti_running: true,
                rti_error: None,
            }],
        };
        let text = encode_text(&snap);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# TYPE hprm_federate_messages_sent counter"), "{text}");
        assert!(
            text.contains(r#"hprm_federate_messages_sent_total{program="demo",federate="source",host="here"} 20"#),
            "{text}"
        );
        assert!(
            text.contains(r#"hprm_federate_tag_seconds{program="demo",federate="sink",host="here"} 1.5"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"hprm_port_losses_total{program="demo",federate="sink",host="here",port="sink.inp",kind="tardy"} 3"#
            ),
            "{text}"
        );
        let conn = r#"program="demo",federate="sink",host="here",connection="source.s.out -> sink.s.inp""#;
        assert!(text.contains(&format!("hprm_connection_messages_total{{{conn}}} 3")), "{text}");
        assert!(text.contains(&format!(r#"hprm_connection_bytes_total{{{conn},path="store"}} 7000"#)), "{text}");
        assert!(text.contains("# TYPE hprm_connection_latency_seconds histogram"), "{text}");
        // Cumulative buckets, up to +Inf: every message counted once.
        assert!(
            text.contains(&format!(r#"hprm_connection_latency_seconds_bucket{{le="0.00001",{conn}}} 1"#)),
            "{text}"
        );
        assert!(
            text.contains(&format!(r#"hprm_connection_latency_seconds_bucket{{le="0.00005",{conn}}} 3"#)),
            "{text}"
        );
        assert!(text.contains(&format!(r#"hprm_connection_latency_seconds_bucket{{le="+Inf",{conn}}} 3"#)), "{text}");
        assert!(text.contains(&format!("hprm_connection_latency_seconds_count{{{conn}}} 3")), "{text}");
        assert!(
            text.contains(r#"hprm_federate_restarts_total{program="demo",federate="sink",host="here"} 1"#),
            "{text}"
        );
        // Every host's store, labelled with its host.
        for (host, bytes, evictions) in [("here", 100, 1), ("a", 200, 2)] {
            let l = format!(r#"program="demo",host="{host}""#);
            assert!(text.contains(&format!("hprm_store_up{{{l}}} 1")), "{text}");
            assert!(text.contains(&format!("hprm_store_bytes_in_use{{{l}}} {bytes}")), "{text}");
            assert!(text.contains(&format!("hprm_store_evictions_total{{{l}}} {evictions}")), "{text}");
        }
        assert!(text.contains(r#"hprm_rti_up{program="demo"} 1"#), "{text}");
        assert!(text.contains(r#"hprm_rti_relayed_messages_total{program="demo"} 9"#), "{text}");
        assert!(text.contains(r#"hprm_rti_grants_total{program="demo",federate="sink"} 4"#), "{text}");
        for kind in Loss::ALL {
            let zero = format!(
                r#"hprm_federate_losses_total{{program="demo",federate="source",host="here",kind="{}"}} 0"#,
                kind.name()
            );
            assert!(text.contains(&zero), "{zero} in {text}");
        }
    }

    /// Program `name` with an RTI on this host (`rti_running`, `rti_error`)
    /// and nothing else.
    fn with_rti_here(name: &str, rti_running: bool, rti_error: Option<&str>) -> Program {
        Program {
            name: name.into(),
            pid: 1,
            deployed: true,
            started_ns: 0,
            federates: Vec::new(),
            links: Vec::new(),
            store: None,
            other_stores: Vec::new(),
            rti: Some(hprm_node::status::RtiProcess { pid: 0, addr: "127.0.0.1:15045".into() }),
            rti_figures: None,
            rti_host: None,
            rti_place: None,
            rti_running,
            rti_error: rti_error.map(String::from),
        }
    }

    #[test]
    fn an_rti_whose_figures_cannot_be_read_is_up_and_says_its_figures_are_unreadable() {
        let why = "the RTI runs, but cannot read /run/hprm/robot/rti/rti.json: Permission denied (os error 13); ...";
        let snap = Snapshot {
            now_ns: 0,
            programs: vec![
                with_rti_here("robot", true, Some(why)),
                with_rti_here("quiet", true, None),
                with_rti_here("gone", false, None),
            ],
        };
        let text = encode_text(&snap);
        assert!(text.contains(r#"hprm_rti_up{program="robot"} 1"#), "up, though unreadable: {text}");
        assert!(text.contains(r#"hprm_rti_figures_readable{program="robot"} 0"#), "{text}");
        assert!(!text.contains(r#"hprm_rti_relayed_messages_total{program="robot"}"#), "no figures: {text}");
        // Running, its figures not written yet: nothing unreadable.
        assert!(text.contains(r#"hprm_rti_up{program="quiet"} 1"#), "{text}");
        assert!(text.contains(r#"hprm_rti_figures_readable{program="quiet"} 1"#), "{text}");
        // Stopped: down, and no readability to speak of.
        assert!(text.contains(r#"hprm_rti_up{program="gone"} 0"#), "{text}");
        assert!(!text.contains(r#"hprm_rti_figures_readable{program="gone"}"#), "{text}");
        assert!(text.contains("# TYPE hprm_rti_figures_readable gauge"), "{text}");
    }
}
