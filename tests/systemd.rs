//! The shipped unit passes `systemd-analyze verify` (skipped, with a message, where systemd is
//! not installed).

use std::process::Command;

#[test]
fn unit_file_verifies() {
    let have = Command::new("systemd-analyze").arg("--version").output();
    if !have.map(|o| o.status.success()).unwrap_or(false) {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = std::fs::read_to_string(root.join("systemd/sonotrack.service")).unwrap();
    // Verify checks that ExecStart's program exists: point it at the binary under test.
    let unit = unit.replace("/usr/bin/sonotrack", env!("CARGO_BIN_EXE_sonotrack"));
    let dir = std::env::temp_dir().join(format!("sonotrack-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sonotrack.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Nothing to complain about in our own unit (other units on the system may be noisy).
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("sonotrack.service"))
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
    for key in [
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "User=sonotrack",
        "SupplementaryGroups=audio dialout",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "DeviceAllow=char-alsa",
        "CacheDirectory=sonotrack",
        "LimitRTPRIO=",
        "LD_LIBRARY_PATH=",
    ] {
        assert!(
            std::fs::read_to_string(&path).unwrap().contains(key),
            "{key}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
