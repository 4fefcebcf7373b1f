#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| residency_fuzz::rvt_reader(data));
