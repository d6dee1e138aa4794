#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| agent_sandbox_server::fuzz::range(data));
