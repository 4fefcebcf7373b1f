#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| residency_fuzz::linear_allocator(data));
