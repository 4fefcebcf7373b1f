#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| residency_fuzz::placement_path(data));
