//! Writes the tables of the service and action types r2r generates Rust
//! structs for (`$OUT_DIR/interfaces.rs`), from the same package list r2r's
//! own build reads (`r2r_common::get_wanted_messages`: the ROS 2 prefix,
//! narrowed by `IDL_PACKAGE_FILTER`). r2r 0.9 has no untyped service or
//! action server, so the bridge serves (and calls) each type through its
//! typed API: `services::support` and `actions::support` dispatch on these
//! tables by ROS name.

use std::fmt::Write;

fn main() {
    r2r_common::print_cargo_watches();
    let mut services = String::new();
    let mut actions = String::new();
    for m in r2r_common::get_wanted_messages() {
        let (name, path) =
            (format!("{}/{}/{}", m.module, m.prefix, m.name), format!("r2r::{}::{}::{}", m.module, m.prefix, m.name));
        match m.prefix.as_str() {
            "srv" => writeln!(services, "    {name:?} => {path}::Service,"),
            "action" => writeln!(actions, "    {name:?} => {path}::Action,"),
            _ => Ok(()),
        }
        .expect("writing to a String");
    }
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let text = format!("service_table! {{\n{services}}}\naction_table! {{\n{actions}}}\n");
    std::fs::write(out.join("interfaces.rs"), text).expect("cannot write $OUT_DIR/interfaces.rs");
}
