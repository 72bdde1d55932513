//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A scene from `../shared/scenes`, or None (with a message) when the directory is not there.
pub fn shared_scene(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/scenes")
        .join(name);
    if p.join("array.json").exists() {
        Some(p)
    } else {
        eprintln!(
            "skipped: {} is not present (the shared scenes live beside the checkout)",
            p.display()
        );
        None
    }
}

/// A fresh temporary directory for one test.
pub fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sonotrack-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temporary directory");
    d
}
