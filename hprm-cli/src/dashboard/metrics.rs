//! A [`Snapshot`] in the Prometheus (OpenMetrics) text format, through the
//! `prometheus-client` crate.
//!
//! Names and labels: every series carries `program`; a federate's also
//! `federate`, a port's also `port`. Counters are what the processes count
//! from their start (messages in and out, losses by kind, the store's
//! evictions and refusals), so they only grow while a process lives; a
//! restarted federate or store starts again from 0, which Prometheus reads
//! as a counter reset. Every loss kind is exported for every federate, the
//! zero ones as zero, so a dashboard can alert on any of them.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use hprm_node::loss::Loss;

use super::snapshot::Snapshot;

type Labels = Vec<(String, String)>;
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;
type IntGauges = Family<Labels, Gauge>;

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
    let store_up = IntGauges::default();

    for p in &snap.programs {
        let prog = p.name.as_str();
        up.get_or_create(&labels(&[("program", prog)])).set(1);
        for f in &p.federates {
            let l = labels(&[("program", prog), ("federate", &f.name)]);
            fed_up.get_or_create(&l).set(i64::from(f.alive && f.status.is_some()));
            let Some(s) = &f.status else { continue };
            tag.get_or_create(&l).set(s.tag_ns as f64 / 1e9);
            lag.get_or_create(&l).set(s.lag_ns as f64 / 1e9);
            msgs_in.get_or_create(&l).inc_by(s.messages_in);
            msgs_out.get_or_create(&l).inc_by(s.messages_out);
            for kind in Loss::ALL {
                let l = labels(&[("program", prog), ("federate", &f.name), ("kind", kind.name())]);
                losses.get_or_create(&l).inc_by(s.losses.total(kind));
            }
            for (port, counts) in &s.losses.0 {
                for kind in Loss::ALL {
                    let l = labels(&[("program", prog), ("federate", &f.name), ("port", port), ("kind", kind.name())]);
                    port_losses.get_or_create(&l).inc_by(counts.get(kind));
                }
            }
        }
        if let Some(store) = &p.store {
            let l = labels(&[("program", prog)]);
            store_up.get_or_create(&l).set(i64::from(store.stats.is_some()));
            if let Some(s) = &store.stats {
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
    reg.register("federate_losses", "Messages lost or late, by kind (hprm_node::loss), all ports together", losses);
    reg.register("port_losses", "Messages lost or late, by input or output port and kind", port_losses);
    reg.register("store_up", "The program's store answered", store_up);
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
    use crate::dashboard::snapshot::{Federate, Program};
    use hprm_node::loss::Losses;
    use hprm_node::status::FederateStatus;

    #[test]
    fn a_snapshot_becomes_openmetrics_with_every_loss_kind() {
        let mut losses = Losses::default();
        losses.count("sink.inp", Loss::Tardy, 3);
        let fed = |name: &str, losses: Losses| Federate {
            name: name.into(),
            pid: 7,
            alive: true,
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
            }),
        };
        let snap = Snapshot {
            now_ns: 0,
            programs: vec![Program {
                name: "demo".into(),
                pid: 1,
                started_ns: 0,
                federates: vec![fed("source", Losses::default()), fed("sink", losses)],
                links: Vec::new(),
                store: None,
                rti: None,
            }],
        };
        let text = encode_text(&snap);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# TYPE hprm_federate_messages_sent counter"), "{text}");
        assert!(text.contains(r#"hprm_federate_messages_sent_total{program="demo",federate="source"} 20"#), "{text}");
        assert!(text.contains(r#"hprm_federate_tag_seconds{program="demo",federate="sink"} 1.5"#), "{text}");
        assert!(
            text.contains(r#"hprm_port_losses_total{program="demo",federate="sink",port="sink.inp",kind="tardy"} 3"#),
            "{text}"
        );
        for kind in Loss::ALL {
            let zero =
                format!(r#"hprm_federate_losses_total{{program="demo",federate="source",kind="{}"}} 0"#, kind.name());
            assert!(text.contains(&zero), "{zero} in {text}");
        }
    }
}
