//! Any bytes as a config file: a config or one error line naming the file, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = readyprism::config::Config::parse(text, "fuzz.yaml") {
            let line = e.to_string();
            assert!(!line.contains('\n'), "{line:?}");
            assert!(line.starts_with("fuzz.yaml"), "{line:?}");
        }
    }
});
