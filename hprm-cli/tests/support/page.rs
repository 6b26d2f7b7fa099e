//! What a dashboard page does with an `/events` delta (`page.html`'s
//! `apply`, the form `hprm-cli/src/dashboard/delta.rs` describes), in Rust,
//! for the tests that check a stream of deltas adds up to a whole read:
//! `dashboard::delta`'s unit tests and `tests/inspect.rs` share this file.

/// What a page does with an `/events` delta (`page.html`'s `apply`, the
/// form `hprm-cli/src/dashboard/delta.rs` describes): `state` is the read
/// it is based on; its timelines become the runs the delta brings.
pub fn apply(state: &mut serde_json::Value, delta: &serde_json::Value) {
    use serde_json::Value;
    fn assign(to: &mut Value, from: &Value, skip: &str) {
        for (k, v) in from.as_object().expect("an object") {
            if k != skip {
                to[k] = v.clone();
            }
        }
    }
    // A delta's row as a whole read lists a run.
    fn run(row: &Value) -> Value {
        let n = |i: usize| row[i].as_i64().expect("a number");
        serde_json::json!({"reaction": n(0), "tag_ns": n(1), "microstep": n(2), "start_ns": n(3), "end_ns": n(3) + n(4)})
    }
    let before = state["programs"].as_array().cloned().unwrap_or_default();
    let mut programs = Vec::new();
    for dp in delta["programs"].as_array().expect("programs") {
        let p = before.iter().find(|p| p["name"] == dp["name"] && p["pid"] == dp["pid"]);
        let mut p = p.cloned().unwrap_or_else(|| serde_json::json!({"federates": []}));
        assign(&mut p, dp, "federates");
        let federates_before = p["federates"].as_array().cloned().unwrap_or_default();
        let mut federates = Vec::new();
        for df in dp["federates"].as_array().expect("federates") {
            let f = federates_before.iter().find(|f| f["name"] == df["name"]);
            let mut f = f.cloned().unwrap_or_else(|| serde_json::json!({"status": null}));
            assign(&mut f, df, "status");
            match df.get("status") {
                Some(s @ Value::Object(_)) if f["status"].is_object() => assign(&mut f["status"], s, "runs"),
                Some(s) => f["status"] = s.clone(),
                None => {}
            }
            if let Some(status) = f["status"].as_object_mut() {
                status.remove("runs");
                let rows = df["status"]["runs"].as_array().map(|rows| rows.iter().map(run).collect());
                status.insert("timeline".into(), Value::Array(rows.unwrap_or_default()));
            }
            federates.push(f);
        }
        p["federates"] = Value::Array(federates);
        programs.push(p);
    }
    state["programs"] = Value::Array(programs);
    for k in ["now_ns", "seq"] {
        if let Some(v) = delta.get(k) {
            state[k] = v.clone();
        }
    }
}
