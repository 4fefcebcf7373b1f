#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| residency_fuzz::profile_json(data));
