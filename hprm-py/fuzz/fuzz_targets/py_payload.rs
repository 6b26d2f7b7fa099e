//! The Python extension's payload reader (`_native::codec::decode`, what
//! `Codec.decode` runs) on any bytes, in an embedded interpreter with
//! numpy (PYTHONPATH: run.sh points it at a venv's site-packages). No store
//! is connected: a reference to a store object must be refused with an
//! error. Any Python exception is an answer; a panic, a crash or a hang is
//! a finding.
#![no_main]

use std::ffi::CString;
use std::sync::OnceLock;
use std::time::Duration;

use hprm_node::payload::{Decoder, StoreLink};
use pyo3::prelude::*;

fn decoder() -> &'static Decoder {
    static DECODER: OnceLock<Decoder> = OnceLock::new();
    DECODER.get_or_init(|| {
        Python::with_gil(|py| {
            let sandbox = CString::new(include_str!("../sandbox.py")).expect("no NUL in sandbox.py");
            py.run(&sandbox, None, None).expect("sandbox.py runs");
            // hprm._torch and hprm._arrow, which the reader imports, from
            // the source tree, without hprm/__init__.py (which would load
            // an installed extension module beside this one).
            let package = concat!(env!("CARGO_MANIFEST_DIR"), "/../python/hprm");
            let init = format!(
                "import sys, types\nhprm = types.ModuleType('hprm')\nhprm.__path__ = [{package:?}]\nsys.modules['hprm'] = hprm\nimport numpy\n"
            );
            py.run(&CString::new(init).expect("no NUL"), None, None).expect("numpy imports (set PYTHONPATH)");
        });
        Decoder::new(StoreLink::none(), Duration::ZERO)
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let decoder = decoder();
    Python::with_gil(|py| {
        // `copy` changes only how store objects are read, and none is
        // connected.
        if let Ok(value) = _native::codec::decode(py, data, decoder, false) {
            // What a receiver does first with a value: look at it.
            let _ = value.bind(py).repr();
        }
    });
});
