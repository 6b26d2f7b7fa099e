#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| hprm_fuzz::link_wire(data));
