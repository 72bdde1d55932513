//! Scene directories: `audio*.wav` + `array.json` + optional `truth.csv` (and `meta.json`), the
//! layout `sonotrack simulate` writes and `sonotrack replay DIR` reads without a config file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::analysis::truth::Truth;
use crate::config::Config;
use crate::error::{Error, IoContext, Result};

#[derive(Debug, Clone, Deserialize)]
struct ArrayJson {
    sample_rate: u32,
    speed_of_sound: f64,
    sensors: Vec<[f64; 3]>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    search_bounds: Option<Bounds>,
    /// "3d" or "direction"; when absent, direction for a flat or linear array (whose 3-D
    /// positions are ambiguous), else 3-D.
    #[serde(default)]
    mode: Option<crate::track::TrackMode>,
    /// A line array: the normal of the plane its sources lie in (`array.plane_normal`).
    #[serde(default)]
    plane_normal: Option<[f64; 3]>,
    /// Where the array frame is on the Earth (`array.origin`).
    #[serde(default)]
    origin: Option<crate::math::geo::Origin>,
}

/// The keys array.json may have (top level, and inside `search_bounds`).
const ARRAY_KEYS: [&str; 8] = [
    "sample_rate",
    "speed_of_sound",
    "sensors",
    "description",
    "search_bounds",
    "mode",
    "plane_normal",
    "origin",
];
const BOUNDS_KEYS: [&str; 2] = ["min", "max"];

/// A key of array.json that is a near miss of a known one (`search_bound`), which would
/// otherwise drop what it was meant to set without a word. Keys far from every known one are
/// other tools' metadata: logged, not refused.
fn misspelt_array_key(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let check = |obj: &serde_json::Map<String, serde_json::Value>, known: &[&str], at: &str| {
        for k in obj.keys().filter(|k| !known.contains(&k.as_str())) {
            // One edit away (two for long keys): a slip, not another tool's key such as "name".
            let slack = if k.len() >= 8 { 2 } else { 1 };
            if let Some(near) = known
                .iter()
                .find(|n| strsim::levenshtein(&k.to_lowercase(), n) <= slack)
            {
                return Some(format!(
                    "unknown key `{at}{k}` (did you mean `{at}{near}`?)"
                ));
            }
            log::warn!("array.json: key `{at}{k}` is not one sonotrack reads; ignored");
        }
        None
    };
    let top = v.as_object()?;
    check(top, &ARRAY_KEYS, "").or_else(|| {
        top.get("search_bounds")
            .and_then(|b| b.as_object())
            .and_then(|b| check(b, &BOUNDS_KEYS, "search_bounds."))
    })
}

#[derive(Debug, Clone, Deserialize)]
struct Bounds {
    min: [f64; 3],
    max: [f64; 3],
}

/// The configuration an array.json describes (its text; `path` names it in errors): the
/// sensors, sample rate and speed of sound, the search volume and the mode, validated, with
/// defaults for everything else.
pub fn config_from_array_json(text: &str, path: &Path) -> Result<Config> {
    let err = |problem: String, fix: &str| Error::Scene {
        path: path.into(),
        problem,
        fix: fix.into(),
    };
    if let Some(problem) = misspelt_array_key(text) {
        return Err(err(
            problem,
            "array.json keys are sample_rate, speed_of_sound, sensors, description, search_bounds {min, max}, mode, plane_normal and origin {latitude_deg, longitude_deg, depth_m, heading_deg}",
        ));
    }
    let a: ArrayJson = serde_json::from_str(text).map_err(|e| {
        err(
            format!("array.json: {e}"),
            "array.json needs sample_rate, speed_of_sound and sensors [[x,y,z], ...]; it may add search_bounds {min, max} and mode (\"3d\" or \"direction\")",
        )
    })?;
    let mut config = Config::for_array(a.sensors, a.speed_of_sound, a.sample_rate);
    config.array.description = a.description;
    if let Some(b) = a.search_bounds {
        config.array.bounds_min_m = Some(b.min);
        config.array.bounds_max_m = Some(b.max);
    }
    config.array.mode = match a.mode {
        Some(m) => m,
        None if config.geometry().span() != crate::dsp::geometry::Span::Volume => {
            log::info!(
                "{}: the sensors are not spread in 3-D, so this scene tracks directions (set \"mode\": \"3d\" in array.json to be told why not)",
                path.display()
            );
            crate::track::TrackMode::Direction
        }
        None => crate::track::TrackMode::ThreeD,
    };
    config.array.plane_normal = a.plane_normal;
    config.array.origin = a.origin;
    config.settle_mode(&path.display().to_string());
    config
        .validate(&path.display().to_string())
        .map_err(|e| Error::Config(in_array_json_words(e)))?;
    Ok(config)
}

/// The configuration's keys as array.json names them (an error about `array.sensors_m` is about
/// what the file calls `sensors`).
const ARRAY_JSON_KEYS: [(&str, &str); 7] = [
    ("array.sensors_m", "sensors"),
    ("array.speed_of_sound_m_s", "speed_of_sound"),
    ("audio.sample_rate_hz", "sample_rate"),
    ("array.bounds_min_m", "search_bounds.min"),
    ("array.bounds_max_m", "search_bounds.max"),
    ("array.mode", "mode"),
    ("array.origin", "origin"),
];

/// A validation error of the configuration built from array.json, in array.json's words.
fn in_array_json_words(mut e: crate::error::ConfigError) -> crate::error::ConfigError {
    for (toml_key, json_key) in ARRAY_JSON_KEYS {
        if e.key == toml_key {
            e.key = json_key.to_string();
        }
        let short = toml_key.rsplit('.').next().unwrap_or(toml_key);
        let json_short = json_key;
        e.problem = e
            .problem
            .replace(toml_key, json_short)
            .replace(short, json_short);
        e.fix = e
            .fix
            .replace(toml_key, json_short)
            .replace(short, json_short);
    }
    e
}

/// A scene directory, resolved.
#[derive(Debug, Clone)]
pub struct Scene {
    pub dir: PathBuf,
    pub audio: PathBuf,
    pub config: Config,
    pub truth: Option<Truth>,
}

impl Scene {
    /// Read a scene directory. The configuration gets the array, rate and search volume from
    /// array.json and defaults for everything else; `overrides` (a TOML file) may change any
    /// key, e.g. `[tracker] particles = 65536`.
    pub fn open(dir: &Path) -> Result<Self> {
        let err = |problem: String, fix: &str| Error::Scene {
            path: dir.into(),
            problem,
            fix: fix.into(),
        };
        if !dir.is_dir() {
            return Err(err(
                "is not a directory".into(),
                "give a scene directory or a .wav file with --config",
            ));
        }
        let mut wavs: Vec<PathBuf> = std::fs::read_dir(dir)
            .at(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with("audio") && name.to_ascii_lowercase().ends_with(".wav")
            })
            .collect();
        wavs.sort();
        // Prefer the full-precision file when both audio.wav and audio_s16.wav are there.
        let audio = wavs
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n == "audio.wav"))
            .or_else(|| wavs.first())
            .cloned()
            .ok_or_else(|| {
                err(
                    "holds no audio*.wav file".into(),
                    "put the recording in the directory as audio.wav",
                )
            })?;
        let array_path = dir.join("array.json");
        let text = std::fs::read_to_string(&array_path).map_err(|e| {
            err(
                format!("cannot read array.json: {e}"),
                "add array.json with sample_rate, speed_of_sound and sensors (metres, channel order)",
            )
        })?;
        let mut config = config_from_array_json(&text, &array_path)?;
        // A turning array's heading, frame by frame.
        let heading_path = dir.join("heading.csv");
        if heading_path.exists() {
            config.array.heading_input = Some(crate::config::HeadingInput::from_file(heading_path));
            config
                .validate(&array_path.display().to_string())
                .map_err(|e| Error::Config(in_array_json_words(e)))?;
        }
        let truth_path = dir.join("truth.csv");
        let truth = if truth_path.exists() {
            Some(Truth::load(&truth_path)?)
        } else {
            None
        };
        Ok(Self {
            dir: dir.into(),
            audio,
            config,
            truth,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_scenes_open() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/scenes");
        if !root.exists() {
            eprintln!("skipped: ../shared/scenes is not beside the checkout");
            return;
        }
        let s = Scene::open(&root.join("pier_five")).unwrap();
        assert_eq!(s.config.array.sensors_m.len(), 5);
        assert_eq!(s.config.audio.sample_rate_hz, 48_000);
        assert!(s.truth.unwrap().at(0, 10.0).is_some());
    }

    #[test]
    fn missing_pieces_are_named() {
        let d = std::env::temp_dir().join(format!("sonotrack-scene-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let e = Scene::open(&d).unwrap_err().to_string();
        assert!(e.contains("no audio*.wav"), "{e}");
        std::fs::write(d.join("audio.wav"), b"x").unwrap();
        let e = Scene::open(&d).unwrap_err().to_string();
        assert!(e.contains("array.json"), "{e}");
        // A flat array tracks directions unless array.json asks for 3-D, which it cannot do.
        let flat = "{\"sample_rate\": 16000, \"speed_of_sound\": 343, \"sensors\": [[0,0,0],[1,0,0],[0,1,0],[1,1,0]]";
        std::fs::write(d.join("array.json"), format!("{flat}}}")).unwrap();
        let s = Scene::open(&d).unwrap();
        assert_eq!(s.config.array.mode, crate::track::TrackMode::Direction);
        // A misspelt key is refused with the key it was meant to be; another tool's metadata
        // is not (reliability issue).
        for (bad, meant) in [
            (
                "\"search_bound\": {\"min\": [0,0,0], \"max\": [1,1,1]}",
                "search_bounds",
            ),
            (
                "\"search_bounds\": {\"mn\": [0,0,0], \"max\": [1,1,1]}",
                "search_bounds.min",
            ),
            ("\"Mode\": \"3d\"", "mode"),
        ] {
            std::fs::write(d.join("array.json"), format!("{flat}, {bad}}}")).unwrap();
            let e = Scene::open(&d).unwrap_err().to_string();
            assert!(e.contains(&format!("`{meant}`")), "{e}");
        }
        std::fs::write(d.join("array.json"), format!("{flat}, \"name\": \"x\"}}")).unwrap();
        assert!(Scene::open(&d).is_ok());
        std::fs::write(d.join("array.json"), format!("{flat}, \"mode\": \"3d\"}}")).unwrap();
        let e = Scene::open(&d).unwrap_err().to_string();
        assert!(e.contains("coplanar"), "{e}");
        // Errors name array.json's keys, not the configuration's (field-ready issue).
        assert!(e.contains("`sensors`") && !e.contains("sensors_m"), "{e}");
        let slow = flat.replace("343", "5");
        std::fs::write(d.join("array.json"), format!("{slow}}}")).unwrap();
        let e = Scene::open(&d).unwrap_err().to_string();
        assert!(e.contains("`speed_of_sound`") && !e.contains("_m_s"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
