//! The configuration's tests: parsing, checks, includes and overrides.

use super::*;
use crate::gpu::BackendChoice;
use crate::output::SinkConfig;

const GOOD: &str = r#"
[array]
sensors_m = [[0,0,-6],[24,-3,-14],[6,21,-9],[-14,9,-20],[9,6,-28]]
speed_of_sound_m_s = 1500.0
[audio]
sample_rate_hz = 48000
"#;

#[test]
fn good_config_parses_with_defaults() {
    let c = Config::parse_str(GOOD, "t.toml").unwrap();
    assert_eq!(c.frame_samples(), 4096);
    assert_eq!(c.hop_samples(), 2048);
    assert_eq!(c.band_hz(), [0.0, 24_000.0]);
    assert_eq!(c.tracker.models.len(), 4);
    let t = c.transition_matrix();
    for row in &t {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
    assert!(c.explain().contains("5 sensors"));
}

#[test]
fn default_frame_tracks_sample_rate() {
    let mut c = Config::parse_str(GOOD, "t").unwrap();
    c.audio.sample_rate_hz = 16_000;
    assert_eq!(c.frame_samples(), 1024);
    c.audio.sample_rate_hz = 44_100;
    assert_eq!(c.frame_samples(), 4096);
}

#[test]
fn unknown_key_names_the_key() {
    let e = Config::parse_str(&format!("{GOOD}\n[gcc]\nframe = 4096\n"), "t.toml").unwrap_err();
    assert_eq!(e.key, "gcc.frame");
    assert!(e.problem.contains("unknown field"), "{e}");
    assert!(e.problem.contains("line"), "{e}");
}

#[test]
fn unknown_top_level_table() {
    let e = Config::parse_str(&format!("{GOOD}\n[gccc]\nx = 1\n"), "t.toml").unwrap_err();
    assert!(e.problem.contains("gccc"), "{e}");
}

#[test]
fn bad_enum_value() {
    let e =
        Config::parse_str(&format!("{GOOD}\n[gcc]\nwindow = \"kaiser\"\n"), "t.toml").unwrap_err();
    assert!(e.key.starts_with("gcc"), "{e}");
    assert!(e.problem.contains("kaiser"), "{e}");
}

#[test]
fn coplanar_array_is_refused_for_3d() {
    let text = r#"
[array]
sensors_m = [[0,0,0],[1,0,0],[0,1,0],[1,1,0]]
speed_of_sound_m_s = 343
[audio]
sample_rate_hz = 16000
"#;
    let e = Config::parse_str(text, "t.toml").unwrap_err();
    assert_eq!(e.key, "array.sensors_m");
    assert!(e.problem.contains("coplanar"), "{e}");
    assert!(e.fix.contains("direction"), "{e}");
    let ok = text.replace(
        "speed_of_sound_m_s = 343",
        "speed_of_sound_m_s = 343\nmode = \"direction\"",
    );
    Config::parse_str(&ok, "t.toml").unwrap();
}

/// `array.min_range_m`: direction mode only, a positive range or `inf`; it sets the largest
/// inverse range a newborn track's particles start with (the aperture by default).
#[test]
fn min_range_checks() {
    let base = "[array]\nsensors_m = [[0,0,0],[2,0,0],[1,1.732,0],[1,0.577,1.633]]\nspeed_of_sound_m_s = 1500\nmode = \"direction\"\n";
    let tail = "[audio]\nsample_rate_hz = 48000\n";
    let c = Config::parse_str(&format!("{base}{tail}"), "t.toml").unwrap();
    assert!(
        (c.direction_inv_range_max() - 0.5).abs() < 1e-3,
        "the aperture, 2 m"
    );
    let c = Config::parse_str(&format!("{base}min_range_m = 8\n{tail}"), "t.toml").unwrap();
    assert!((c.direction_inv_range_max() - 0.125).abs() < 1e-12);
    let c = Config::parse_str(&format!("{base}min_range_m = inf\n{tail}"), "t.toml").unwrap();
    assert_eq!(c.direction_inv_range_max(), 0.0);
    for bad in ["0", "-3", "nan"] {
        let e =
            Config::parse_str(&format!("{base}min_range_m = {bad}\n{tail}"), "t.toml").unwrap_err();
        assert_eq!(e.key, "array.min_range_m", "{bad}: {e}");
    }
    let three_d = base.replace("mode = \"direction\"\n", "");
    let e = Config::parse_str(&format!("{three_d}min_range_m = 8\n{tail}"), "t.toml").unwrap_err();
    assert_eq!(e.key, "array.min_range_m");
    assert!(e.fix.contains("direction"), "{e}");
    // A 10 cm microphone circle cannot resolve the curvature at its default nearest range
    // (1 m: 1.25 mm against half a sample, 3.6 mm): plane waves. At 0.2 m it can.
    let mics = "[array]\nsensors_m = [[0.05,0,0],[0,0.05,0],[-0.05,0,0],[0,-0.05,0]]\nspeed_of_sound_m_s = 343\nmode = \"direction\"\n";
    let c = Config::parse_str(&format!("{mics}{tail}"), "t.toml").unwrap();
    assert_eq!(c.direction_inv_range_max(), 0.0);
    assert!(c.explain().contains("plane waves"), "{}", c.explain());
    let c = Config::parse_str(&format!("{mics}min_range_m = 0.2\n{tail}"), "t.toml").unwrap();
    assert!((c.direction_inv_range_max() - 5.0).abs() < 1e-9);
}

#[test]
fn too_few_sensors() {
    let text = "[array]\nsensors_m = [[0,0,0],[1,0,0],[0,1,1]]\nspeed_of_sound_m_s = 343\n[audio]\nsample_rate_hz = 16000\n";
    let e = Config::parse_str(text, "t.toml").unwrap_err();
    assert!(e.problem.contains("at least 4"), "{e}");
}

#[test]
fn channel_map_checks() {
    let e = Config::parse_str(
        &GOOD.replace(
            "sample_rate_hz = 48000",
            "sample_rate_hz = 48000\nchannels = 8",
        ),
        "t",
    )
    .unwrap_err();
    assert_eq!(e.key, "audio.channel_map");
    Config::parse_str(
        &GOOD.replace(
            "sample_rate_hz = 48000",
            "sample_rate_hz = 48000\nchannels = 8\nchannel_map = [7,6,5,4,3]",
        ),
        "t",
    )
    .unwrap();
    let e = Config::parse_str(
        &GOOD.replace(
            "sample_rate_hz = 48000",
            "sample_rate_hz = 48000\nchannels = 8\nchannel_map = [7,6,5,4,8]",
        ),
        "t",
    )
    .unwrap_err();
    assert!(e.problem.contains("channel 8"), "{e}");
}

#[test]
fn input_mismatch_names_key_and_fix() {
    let c = Config::parse_str(GOOD, "t").unwrap();
    let e = c.check_input("x.wav", 4, 48_000).unwrap_err();
    assert_eq!(e.key, "audio.channels");
    let e = c.check_input("x.wav", 5, 44_100).unwrap_err();
    assert_eq!(e.key, "audio.sample_rate_hz");
    assert!(e.fix.contains("44100"));
}

#[test]
fn frame_too_short_for_array() {
    let e = Config::parse_str(&format!("{GOOD}\n[gcc]\nframe_samples = 1024\n"), "t").unwrap_err();
    assert_eq!(e.key, "gcc.frame_samples");
    assert!(e.fix.contains("or more"), "{e}");
}

#[test]
fn sinks_parse_and_reject_unknown_keys() {
    let c = Config::parse_str(
        &format!("{GOOD}\n[[output.sink]]\nkind = \"udp\"\naddress = \"127.0.0.1:5005\"\n[[output.sink]]\nkind = \"serial\"\nport = \"/dev/ttyUSB0\"\nformat = \"nmea\"\n"),
        "t",
    )
    .unwrap();
    assert_eq!(c.output.sinks.len(), 2);
    let e = Config::parse_str(
        &format!(
            "{GOOD}\n[[output.sink]]\nkind = \"udp\"\naddress = \"127.0.0.1:5005\"\nbaud = 9600\n"
        ),
        "t",
    )
    .unwrap_err();
    assert!(e.problem.contains("baud"), "{e}");
}

#[test]
fn overrides_apply_and_are_validated() {
    let c = Config::parse_str(GOOD, "t").unwrap();
    let d = c
        .with_overrides(&[
            "gcc.frame_samples=8192".into(),
            "tracker.backend=cpu".into(),
            "gcc.band_hz=[100.0, 9000.0]".into(),
        ])
        .unwrap();
    assert_eq!(d.frame_samples(), 8192);
    assert_eq!(d.tracker.backend, BackendChoice::Cpu);
    assert_eq!(d.band_hz(), [100.0, 9000.0]);
    let e = c.with_overrides(&["gcc.framesize=1".into()]).unwrap_err();
    assert!(e.problem.contains("framesize"), "{e}");
    assert!(c.with_overrides(&["nokey".into()]).is_err());
}

#[test]
fn includes_merge_under_the_file() {
    let dir = std::env::temp_dir().join(format!("sonotrack-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("board.toml"),
        "[tracker]\nparticles = 4096\nseed = 9\n[board]\nname = \"x\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.toml"),
        format!("include = [\"board.toml\"]\n{GOOD}\n[tracker]\nseed = 3\n"),
    )
    .unwrap();
    let c = Config::load(&dir.join("main.toml")).unwrap();
    assert_eq!(c.tracker.particles, 4096);
    assert_eq!(c.tracker.seed, 3);
    assert_eq!(c.board.unwrap().name, "x");
    std::fs::write(dir.join("loop.toml"), "include = [\"loop.toml\"]\n").unwrap();
    assert!(Config::load(&dir.join("loop.toml")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `[[output.sink]]` lists add up across includes (field-ready issue: a user's own output
/// silently dropped the board's): the included file's first, then the file's own; the same
/// kind and destination replaces the earlier one. Other lists replace.
#[test]
fn output_sinks_add_up_across_includes() {
    let dir = std::env::temp_dir().join(format!("sonotrack-sinks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("site.toml"),
        "[[output.sink]]\nkind = \"udp\"\naddress = \"10.0.0.5:5005\"\n\
         [[output.sink]]\nkind = \"serial\"\nport = \"/dev/ttyTHS1\"\n\
         [gcc]\nband_hz = [100.0, 5000.0]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.toml"),
        format!(
            "include = [\"site.toml\"]\n{GOOD}\n[gcc]\nband_hz = [200.0, 9000.0]\n\
             [[output.sink]]\nkind = \"jsonl\"\npath = \"-\"\n\
             [[output.sink]]\nkind = \"serial\"\nport = \"/dev/ttyTHS1\"\nbaud = 4800\n"
        ),
    )
    .unwrap();
    let c = Config::load(&dir.join("main.toml")).unwrap();
    let names: Vec<String> = c.output.sinks.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        ["udp:10.0.0.5:5005", "serial:/dev/ttyTHS1", "jsonl:-"]
    );
    assert!(matches!(
        c.output.sinks[1],
        SinkConfig::Serial { baud: 4800, .. }
    ));
    assert_eq!(c.band_hz(), [200.0, 9000.0], "other lists replace");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every shipped board file is hardware facts only: no tracker settings, no outputs.
#[test]
fn board_files_hold_hardware_facts_only() {
    let boards = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("boards");
    let mut n = 0;
    for e in std::fs::read_dir(&boards).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let t: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let keys: Vec<&String> = t.keys().collect();
        assert!(
            keys.iter().all(|k| *k == "board" || *k == "audio"),
            "{}: {keys:?}",
            path.display()
        );
        n += 1;
    }
    assert!(n >= 4);
}

/// Includes are bounded (reliability issue): a chain that includes each next file twice, a
/// device as an include, an empty path and a huge file are errors naming the file and the key,
/// never a minute of work or gigabytes read.
#[test]
fn includes_are_bounded() {
    let dir = std::env::temp_dir().join(format!("sonotrack-inc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..22 {
        std::fs::write(
            dir.join(format!("c{i}.toml")),
            format!("include = [\"c{0}.toml\", \"c{0}.toml\"]\n", i + 1),
        )
        .unwrap();
    }
    std::fs::write(dir.join("c22.toml"), GOOD).unwrap();
    let e = Config::load(&dir.join("c0.toml")).unwrap_err().to_string();
    assert!(e.contains("include") && e.contains("at most"), "{e}");
    std::fs::write(dir.join("zero.toml"), "include = [\"/dev/zero\"]\n").unwrap();
    let e = Config::load(&dir.join("zero.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("/dev/zero") && e.contains("regular file"), "{e}");
    std::fs::write(dir.join("empty.toml"), "include = [\"\"]\n").unwrap();
    let e = Config::load(&dir.join("empty.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty.toml") && e.contains("include"), "{e}");
    std::fs::write(dir.join("big.toml"), "#".repeat(2 << 20)).unwrap();
    let e = Config::load(&dir.join("big.toml")).unwrap_err().to_string();
    assert!(e.contains("larger than"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Particle counts are refused by the memory they need, with the key named; `check` states the
/// memory and the CPU's real-time share of what it accepts (reliability issue).
#[test]
fn particle_memory_is_stated_and_capped() {
    let c = Config::parse_str(GOOD, "t.toml").unwrap();
    let e = c
        .with_overrides(&["tracker.particles=67108864".into()])
        .unwrap_err();
    assert_eq!(e.key, "tracker.particles");
    let e = c
        .with_overrides(&[
            "tracker.particles=4194304".into(),
            "tracker.max_tracks=64".into(),
        ])
        .unwrap_err();
    assert!(e.problem.contains("GiB"), "{e}");
    let ok = c
        .with_overrides(&[
            "tracker.particles=4194304".into(),
            "tracker.max_tracks=2".into(),
        ])
        .unwrap();
    let text = ok.explain();
    assert!(
        text.contains("MiB") && text.contains("too slow for live audio"),
        "{text}"
    );
    assert!(!c.explain().contains("too slow"), "{}", c.explain());
}

/// A bad value inside an included file names that file and line; a transition entry outside
/// 0..1 is called what it is, and sensors far apart are not called "all at one point"
/// (reliability issue).
#[test]
fn errors_point_into_included_files() {
    let dir = std::env::temp_dir().join(format!("sonotrack-where-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("board.toml"), "[gcc]\n\npeaks_per_pair = \"x\"\n").unwrap();
    std::fs::write(
        dir.join("main.toml"),
        format!("include = [\"board.toml\"]\n{GOOD}"),
    )
    .unwrap();
    let e = Config::load(&dir.join("main.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gcc.peaks_per_pair") && e.contains("board.toml line 3"),
        "{e}"
    );
    std::fs::write(
        dir.join("board.toml"),
        "[[tracker.models]]\nname = \"a\"\nkind = \"cv\"\naccel_std_m_s2 = -1.0\n",
    )
    .unwrap();
    let e = Config::load(&dir.join("main.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("board.toml line 4"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    let c = Config::parse_str(GOOD, "t.toml").unwrap();
    let n = c.tracker.models.len();
    let mut row = vec!["0".to_string(); n];
    row[0] = "-0.5".into();
    row[1] = "1.5".into();
    let rows: Vec<String> = (0..n).map(|_| format!("[{}]", row.join(","))).collect();
    let e = c
        .with_overrides(&[format!("tracker.transition=[{}]", rows.join(","))])
        .unwrap_err();
    assert!(e.problem.contains("not a probability"), "{e}");
    let e = c
        .with_overrides(&["array.sensors_m=[[0,0,0],[1e200,0,0],[0,1,0],[0,0,1]]".into()])
        .unwrap_err();
    assert!(
        !e.problem.contains("one point") && e.problem.contains("from the origin"),
        "{e}"
    );
}

/// Error locations are exact (field-ready issue): a key of the second `[[output.sink]]` is
/// named with its index and its own line, a bad `--set` value names the argument, never a line
/// of the merged text or a Rust type.
#[test]
fn errors_name_the_key_its_line_and_the_set_argument() {
    let text = format!(
        "{GOOD}\n[[output.sink]]\nkind = \"udp\"\naddress = \"127.0.0.1:5005\"\n\n\
         [[output.sink]]\nkind = \"serial\"\nport = \"/dev/ttyS0\"\nbaudrate = 9600\n"
    );
    let e = Config::parse_str(&text, "c.toml").unwrap_err();
    let line = text
        .lines()
        .position(|l| l.starts_with("baudrate"))
        .unwrap()
        + 1;
    assert_eq!(e.key, "output.sink[1].baudrate", "{e}");
    assert!(e.problem.ends_with(&format!("(line {line})")), "{e}");
    let c = Config::parse_str(GOOD, "c.toml").unwrap();
    for (set, words) in [
        ("tracker.particles=abc", "whole number"),
        ("tracker.particles=-5", "whole number"),
        ("gcc.band_hz=[1,2", "list of 2 numbers"),
        ("tracker.particls=5", "did you mean `particles`"),
    ] {
        let e = c.with_overrides(&[set.into()]).unwrap_err();
        let all = format!("{e}");
        assert_eq!(e.file, format!("--set {set}"), "{all}");
        assert!(all.contains(words), "{all}");
        for rust in ["usize", "f64", "(line", "array of length"] {
            assert!(!all.contains(rust), "{all}");
        }
    }
}

/// Sensors on one line track in line mode whether the file asks for 3-D, directions or
/// nothing; the half-plane is `plane_normal × axis`, else towards the search volume, else
/// horizontal; `plane_normal` is refused along the axis and outside line mode.
#[test]
fn collinear_sensors_track_in_line_mode() {
    let line = "[array]\nsensors_m = [[0,0,1],[0.05,0,1],[0.1,0,1],[0.15,0,1]]\nspeed_of_sound_m_s = 343\n";
    let tail = "[audio]\nsample_rate_hz = 16000\n";
    for mode in [
        "",
        "mode = \"3d\"\n",
        "mode = \"direction\"\n",
        "mode = \"line\"\n",
    ] {
        let c = Config::parse_str(&format!("{line}{mode}{tail}"), "t.toml").unwrap();
        assert_eq!(c.array.mode, TrackMode::Line, "{mode}");
        let (axis, side) = c.line_axes().unwrap();
        assert!((axis - nalgebra::Vector3::x()).norm() < 1e-9, "{axis:?}");
        // Horizontal, perpendicular to the axis: z × x = y.
        assert!((side - nalgebra::Vector3::y()).norm() < 1e-9, "{side:?}");
        assert!(c.explain().contains("line array along"), "{}", c.explain());
    }
    // Towards the search volume's centre (above the line and behind it here).
    let c = Config::parse_str(
        &format!("{line}bounds_min_m = [-2, -3, 0]\nbounds_max_m = [2, -1, 3]\n{tail}"),
        "t.toml",
    )
    .unwrap();
    let (_, side) = c.line_axes().unwrap();
    let want = nalgebra::Vector3::new(0.0, -2.0, 0.5).normalize();
    assert!((side - want).norm() < 1e-9, "{side:?}");
    // A plane wins over the volume's direction, turned to face the volume.
    let c = Config::parse_str(
        &format!(
            "{line}plane_normal = [0, 0, 1]\nbounds_min_m = [-2, -3, 0]\nbounds_max_m = [2, -1, 3]\n{tail}"
        ),
        "t.toml",
    )
    .unwrap();
    let (_, side) = c.line_axes().unwrap();
    assert!((side + nalgebra::Vector3::y()).norm() < 1e-9, "{side:?}");
    assert!(c.filter_params().line.is_some_and(|l| l.plane));
    let e = Config::parse_str(&format!("{line}plane_normal = [1, 0, 0]\n{tail}"), "t.toml")
        .unwrap_err();
    assert_eq!(e.key, "array.plane_normal");
    let flat = "[array]\nsensors_m = [[0,0,0],[1,0,0],[0,1,0],[1,1,0]]\nspeed_of_sound_m_s = 343\nmode = \"direction\"\nplane_normal = [0, 0, 1]\n";
    let e = Config::parse_str(&format!("{flat}{tail}"), "t.toml").unwrap_err();
    assert_eq!(e.key, "array.plane_normal");
    // A line in line mode needs two sensors on a line; a flat array cannot be one.
    let e = Config::parse_str(
        &format!(
            "{}{tail}",
            flat.replace("plane_normal = [0, 0, 1]\n", "")
                .replace("direction", "line")
        ),
        "t.toml",
    )
    .unwrap_err();
    assert!(e.problem.contains("line mode"), "{e}");
}

/// `gcc.max_pairs`: at least one fewer than the sensors, at most every pair of 64; above it
/// the longest baselines are kept.
#[test]
fn max_pairs_checks() {
    let line = "[array]\nsensors_m = [[0,0,1],[0.05,0,1],[0.1,0,1],[0.15,0,1],[0.2,0,1]]\nspeed_of_sound_m_s = 343\n[audio]\nsample_rate_hz = 16000\n";
    let c = Config::parse_str(line, "t.toml").unwrap();
    assert_eq!(c.pairs().len(), 10);
    let c = Config::parse_str(&format!("{line}[gcc]\nmax_pairs = 6\n"), "t.toml").unwrap();
    let kept = c.pairs();
    assert_eq!(kept.len(), 6);
    assert_eq!(c.filter_params().pairs.len(), 6);
    assert_eq!(c.manager_settings().pairs(), kept.as_slice());
    for bad in ["3", "2017"] {
        let e =
            Config::parse_str(&format!("{line}[gcc]\nmax_pairs = {bad}\n"), "t.toml").unwrap_err();
        assert_eq!(e.key, "gcc.max_pairs", "{bad}: {e}");
    }
}

/// `gcc.crosstalk_window_s`: 0 (off) or 1-3600 s; `check` says which.
#[test]
fn crosstalk_window_checks() {
    let line = "[array]\nsensors_m = [[0,0,1],[0.05,0,1],[0.1,0,1],[0.15,0,1],[0.2,0,1]]\nspeed_of_sound_m_s = 343\n[audio]\nsample_rate_hz = 16000\n";
    let c = Config::parse_str(line, "t.toml").unwrap();
    assert_eq!(c.gcc.crosstalk_window_s, 10.0);
    assert!(
        c.explain().contains("crosstalk check over 10 s"),
        "{}",
        c.explain()
    );
    let off =
        Config::parse_str(&format!("{line}[gcc]\ncrosstalk_window_s = 0\n"), "t.toml").unwrap();
    assert!(off.explain().contains("crosstalk check off"));
    for bad in ["0.5", "-1", "4000", "nan"] {
        let e = Config::parse_str(
            &format!("{line}[gcc]\ncrosstalk_window_s = {bad}\n"),
            "t.toml",
        )
        .unwrap_err();
        assert_eq!(e.key, "gcc.crosstalk_window_s", "{bad}: {e}");
    }
}

/// `[array.heading_input]`: a source is needed, the UDP address must parse, the staleness be
/// positive, and a turning line array must know the plane its sources lie in; a good one makes
/// the filters keep each particle's side and the manager twin its tracks.
#[test]
fn heading_input_checks() {
    let line =
        "[array]\nsensors_m = [[0,0,-6],[0,2,-6],[0,4,-6],[0,6,-6]]\nspeed_of_sound_m_s = 1500\n";
    let tail = "[audio]\nsample_rate_hz = 8000\n";
    let with = |extra: &str, heading: &str| {
        Config::parse_str(
            &format!("{line}{extra}[array.heading_input]\n{heading}{tail}"),
            "t.toml",
        )
    };
    let plane = "plane_normal = [0, 0, 1]\n";
    for (extra, heading, key, words) in [
        (plane, "", "array.heading_input", "no heading source"),
        (
            plane,
            "udp_listen = \"port 10110\"\n",
            "array.heading_input.udp_listen",
            "not an address",
        ),
        (
            plane,
            "file = \"h.csv\"\nstale_s = 0\n",
            "array.heading_input.stale_s",
            "0 s",
        ),
        ("", "file = \"h.csv\"\n", "array.plane_normal", "plane"),
    ] {
        let e = with(extra, heading).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    }
    let c = with(plane, "udp_listen = \"0.0.0.0:10110\"\n").unwrap();
    assert!(c.turning());
    assert!(
        c.filter_params()
            .line
            .is_some_and(|l| l.keep_side && l.plane)
    );
    assert!(c.manager_settings().turning);
    assert!(
        c.explain().contains("turning line array"),
        "{}",
        c.explain()
    );
    // A fixed array keeps folding onto one side.
    let c = Config::parse_str(&format!("{line}{plane}{tail}"), "t.toml").unwrap();
    assert!(!c.turning() && c.filter_params().line.is_some_and(|l| !l.keep_side));
}

/// `kind = "mqtt"` outputs: the broker table and topic levels are checked, keys named.
#[test]
fn mqtt_sink_checks() {
    let sink = |extra: &str| {
        format!(
            "{GOOD}\n[[output.sink]]\nkind = \"mqtt\"\nsite = \"harbour\"\nnode = \"north\"\n{extra}\n"
        )
    };
    let c = Config::parse_str(&sink("broker = { address = \"127.0.0.1:1883\" }"), "t").unwrap();
    assert_eq!(c.output.sinks[0].name(), "mqtt:127.0.0.1:1883");
    let SinkConfig::Mqtt(m) = &c.output.sinks[0] else {
        panic!("an mqtt sink")
    };
    assert_eq!(m.topics().tracks, "sonotrack/harbour/north/tracks");
    assert_eq!((m.queue, m.broker.keep_alive_s), (10_000, 5.0));
    for (extra, key) in [
        (
            "broker = { address = \"nohost\" }",
            "output.sink[0].broker.address",
        ),
        (
            "broker = { address = \"h:1\", password = \"x\" }",
            "output.sink[0].broker.username",
        ),
        (
            "broker = { address = \"h:1\" }\nprefix = \"a/+\"",
            "output.sink[0].prefix",
        ),
        (
            "broker = { address = \"h:1\" }\nqueue = 0",
            "output.sink[0].queue",
        ),
    ] {
        let e = Config::parse_str(&sink(extra), "t").unwrap_err();
        assert_eq!(e.key, key, "{extra}: {e}");
    }
    let e = Config::parse_str(
        &sink("broker = { address = \"h:1\", pasword = \"x\" }"),
        "t",
    )
    .unwrap_err();
    assert!(e.to_string().contains("pasword"), "{e}");
    let e = Config::parse_str(
        &format!("{GOOD}\n[[output.sink]]\nkind = \"mqtt\"\nsite = \"a b\"\nnode = \"n\"\nbroker = {{ address = \"h:1\" }}\n"),
        "t",
    )
    .unwrap_err();
    assert_eq!(e.key, "output.sink[0].site", "{e}");
}

#[test]
fn tracker_filter_is_particle_or_imm() {
    let c = Config::parse_str(GOOD, "t").unwrap();
    assert_eq!(c.tracker.filter, crate::config::FilterKind::Particle);
    let c = Config::parse_str(&format!("{GOOD}[tracker]\nfilter = \"imm\"\n"), "t").unwrap();
    assert_eq!(c.tracker.filter, crate::config::FilterKind::Imm);
    assert!(c.explain().contains("IMM filter"), "{}", c.explain());
    let e = Config::parse_str(&format!("{GOOD}[tracker]\nfilter = \"kalman\"\n"), "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("filter") && e.contains("imm"), "{e}");
}

#[test]
fn tracker_association_is_gnn_or_mfa_with_three_to_five_lists() {
    use crate::config::Association;
    let c = Config::parse_str(GOOD, "t").unwrap();
    assert_eq!(c.tracker.association, Association::Gnn);
    assert_eq!(c.manager_settings().mfa_lists, None);
    let c = Config::parse_str(&format!("{GOOD}[tracker]\nassociation = \"mfa\"\n"), "t").unwrap();
    assert_eq!(c.tracker.association, Association::Mfa);
    assert_eq!(c.manager_settings().mfa_lists, Some(3));
    assert!(c.explain().contains("multi-frame"), "{}", c.explain());
    let e = Config::parse_str(
        &format!("{GOOD}[tracker]\nassociation = \"mfa\"\nmfa_lists = 6\n"),
        "t",
    )
    .unwrap_err();
    assert_eq!(e.key, "tracker.mfa_lists", "{e}");
    let e = Config::parse_str(
        &format!("{GOOD}[tracker]\nassociation = \"mfa\"\nmeasurement = \"auto\"\n"),
        "t",
    )
    .unwrap_err();
    assert_eq!(e.key, "tracker.association", "{e}");
    assert!(e.to_string().contains("peaks"), "{e}");
}

#[test]
fn curves_clutter_map_is_off_or_one_to_3600_s() {
    let c = Config::parse_str(GOOD, "t").unwrap();
    assert_eq!(c.tracker.curves.clutter_map_s, 0.0);
    let c = Config::parse_str(
        &format!("{GOOD}[tracker.curves]\nclutter_map_s = 60\n"),
        "t",
    )
    .unwrap();
    assert_eq!(c.tracker.curves.clutter_map_s, 60.0);
    for bad in ["0.5", "-1", "5000"] {
        let e = Config::parse_str(
            &format!("{GOOD}[tracker.curves]\nclutter_map_s = {bad}\n"),
            "t",
        )
        .unwrap_err();
        assert_eq!(e.key, "tracker.curves.clutter_map_s", "{e}");
    }
}

#[test]
fn curves_search_on_gpu_is_off_unless_asked_for() {
    let c = Config::parse_str(GOOD, "t").unwrap();
    assert!(!c.tracker.curves.search_on_gpu);
    let c = Config::parse_str(
        &format!("{GOOD}[tracker.curves]\nsearch_on_gpu = true\n"),
        "t",
    )
    .unwrap();
    assert!(c.tracker.curves.search_on_gpu);
    let e = Config::parse_str(&format!("{GOOD}[tracker.curves]\nsearch_on_gpu = 1\n"), "t")
        .unwrap_err();
    assert!(e.to_string().contains("search_on_gpu"), "{e}");
}

#[test]
fn curves_joint_template_is_off_unless_asked_for() {
    let c = Config::parse_str(GOOD, "t").unwrap();
    assert!(!c.tracker.curves.joint_template);
    let c = Config::parse_str(
        &format!("{GOOD}[tracker.curves]\njoint_template = true\n"),
        "t",
    )
    .unwrap();
    assert!(c.tracker.curves.joint_template);
    let e = Config::parse_str(
        &format!("{GOOD}[tracker.curves]\njoint_template = \"yes\"\n"),
        "t",
    )
    .unwrap_err();
    assert!(e.to_string().contains("joint_template"), "{e}");
}
