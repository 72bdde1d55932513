//! Several arrays hearing one scene (`[[other_array]]`): each array's own view of the scene (its
//! sensors, its noise, the sources in its frame, its place on the Earth), and the site directory
//! `sonotrack simulate` writes for them: one scene directory per array, each with a node
//! configuration publishing over MQTT, and a `fuse.toml` for the fusion service.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{FaultSpec, SceneSpec, write_scene};
use crate::error::{IoContext, Result};
use crate::math::geo::Origin;

/// The name of the scene's own array in a site directory and on the broker.
pub const FIRST_ARRAY: &str = "a";
/// Most arrays in one scene, its own included.
pub const MAX_ARRAYS: usize = 16;
/// The site name the written configurations use on the broker.
const SITE: &str = "sim";
/// The broker the written configurations meet at (a local Mosquitto's default listener).
const BROKER: &str = "127.0.0.1:1883";

/// `[[other_array]]`: another array in the same water, its frame the scene's moved by `at_m`
/// (not turned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtherArray {
    /// Its directory and node name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Where its frame's origin is in the scene's frame (m).
    pub at_m: [f64; 3],
    /// Its sensors in its own frame (default: the scene's layout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensors_m: Option<Vec<[f64; 3]>>,
    /// The seed of its sensor noise (default: drawn from the scene's seed and its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// A node name usable as a directory and an MQTT topic level.
fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name != "."
        && name != ".."
}

/// Why the scene's other arrays cannot be simulated (None: they can, or there are none).
pub fn other_arrays_problem(spec: &SceneSpec) -> Option<String> {
    if spec.other_arrays.is_empty() {
        return None;
    }
    if spec.origin.is_none() {
        return Some(
            "[[other_array]] needs [origin] (where the scene's frame is on the Earth), so that each array's node can be georeferenced".into(),
        );
    }
    if spec.room.is_some() || spec.array_turn.is_some() {
        return Some(
            "[[other_array]] is simulated in free field with fixed arrays: remove [room] and [array_turn]".into(),
        );
    }
    if spec.other_arrays.len() + 1 > MAX_ARRAYS {
        return Some(format!(
            "{} other arrays (at most {})",
            spec.other_arrays.len(),
            MAX_ARRAYS - 1
        ));
    }
    let mut names = vec![FIRST_ARRAY];
    for (i, o) in spec.other_arrays.iter().enumerate() {
        if !name_ok(&o.name) {
            return Some(format!(
                "other_array {i}: name {:?} must be 1-64 letters, digits, '-', '_' or '.'",
                o.name
            ));
        }
        if names.contains(&o.name.as_str()) {
            return Some(format!(
                "other_array {i}: the name {:?} is taken (the scene's own array is {FIRST_ARRAY:?})",
                o.name
            ));
        }
        names.push(&o.name);
        if o.at_m.iter().any(|v| !v.is_finite()) {
            return Some(format!("other_array {i}: at_m is not finite"));
        }
        let view = spec.heard_by(o);
        if let Err(p) = view.validate() {
            return Some(format!("other_array {i} ({}): {p}", o.name));
        }
    }
    None
}

impl SceneSpec {
    /// The scene as `other` hears it: its sensors and noise, the sources and search volume
    /// moved into its frame, its origin on the Earth; faults stay with the scene's own array.
    pub fn heard_by(&self, other: &OtherArray) -> SceneSpec {
        let back = other.at_m.map(|v| -v);
        let shift =
            |b: Option<[f64; 3]>| b.map(|b| [b[0] + back[0], b[1] + back[1], b[2] + back[2]]);
        let mut spec = self.clone();
        spec.description = format!("{} (array {})", self.description, other.name);
        if let Some(s) = &other.sensors_m {
            spec.sensors_m.clone_from(s);
        }
        spec.seed = other.seed.unwrap_or_else(|| {
            other.name.bytes().fold(self.seed ^ 0x000A_77A7, |h, b| {
                h.rotate_left(8) ^ u64::from(b)
            })
        });
        spec.faults = FaultSpec::default();
        spec.bounds_min_m = shift(self.bounds_min_m);
        spec.bounds_max_m = shift(self.bounds_max_m);
        for src in &mut spec.sources {
            src.path = src.path.shifted(back);
        }
        spec.origin = self.origin.map(|o| o.moved(other.at_m));
        spec.other_arrays = Vec::new();
        spec
    }
}

/// Write a site directory: `<dir>/<name>/` a scene directory and `node.toml` for each array
/// (the scene's own is [`FIRST_ARRAY`]), and `<dir>/fuse.toml`. Returns the arrays' names.
pub fn write_site(dir: &Path, spec: &SceneSpec, s16: bool) -> Result<Vec<String>> {
    let mut own = spec.clone();
    own.other_arrays = Vec::new();
    let mut views = vec![(FIRST_ARRAY.to_string(), own)];
    for o in &spec.other_arrays {
        views.push((o.name.clone(), spec.heard_by(o)));
    }
    for (name, view) in &views {
        let sub = dir.join(name);
        write_scene(&sub, view, s16)?;
        let path = sub.join("node.toml");
        std::fs::write(&path, node_toml(view, name, s16)).at(&path)?;
    }
    let path = dir.join("fuse.toml");
    std::fs::write(&path, fuse_toml(spec)).at(&path)?;
    Ok(views.into_iter().map(|(n, _)| n).collect())
}

/// An origin's keys, one per line (the body of an origin table).
fn origin_toml(o: &Origin) -> String {
    format!(
        "latitude_deg = {:?}\nlongitude_deg = {:?}\ndepth_m = {:?}\nheading_deg = {:?}\n",
        o.latitude_deg, o.longitude_deg, o.depth_m, o.heading_deg
    )
}

/// A node configuration for one array's scene directory: the array as the node is told it,
/// georeferenced, publishing to a local broker.
fn node_toml(view: &SceneSpec, name: &str, s16: bool) -> String {
    let (sensors, c) = view.told_array();
    let list = |v: &[f64; 3]| format!("[{:?}, {:?}, {:?}]", v[0], v[1], v[2]);
    let mut s = format!(
        "# Node {name:?} of a simulated site: sonotrack run --config {name}/node.toml --input {name}/{}\n\
         [array]\nsensors_m = [{}]\nspeed_of_sound_m_s = {c:?}\n",
        if s16 { "audio_s16.wav" } else { "audio.wav" },
        sensors.iter().map(list).collect::<Vec<_>>().join(", "),
    );
    if let (Some(lo), Some(hi)) = (view.bounds_min_m, view.bounds_max_m) {
        s.push_str(&format!(
            "bounds_min_m = {}\nbounds_max_m = {}\n",
            list(&lo),
            list(&hi)
        ));
    }
    if let Some(o) = &view.origin {
        s.push_str(&format!("\n[array.origin]\n{}", origin_toml(o)));
    }
    s.push_str(&format!(
        "\n[audio]\nsample_rate_hz = {}\n\n[[output.sink]]\nkind = \"mqtt\"\nsite = \"{SITE}\"\nnode = \"{name}\"\nbroker = {{ address = \"{BROKER}\" }}\n",
        view.sample_rate_hz
    ));
    s
}

/// The fusion service's configuration for the site: the scene's frame, the local broker, the
/// fused tracks to `fused.jsonl` in the working directory.
fn fuse_toml(spec: &SceneSpec) -> String {
    let mut s = format!(
        "# The fusion service of a simulated site: sonotrack fuse --config fuse.toml\n\
         site = \"{SITE}\"\nbroker = {{ address = \"{BROKER}\" }}\n"
    );
    if let Some(o) = &spec.origin {
        s.push_str(&format!("\n[origin]\n{}", origin_toml(o)));
    }
    s.push_str(
        "\n[fusion]\nsurvey_std_m = 0.0  # the simulated arrays are placed exactly\n\n[[output.sink]]\nkind = \"jsonl\"\npath = \"fused.jsonl\"\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> SceneSpec {
        let mut s = SceneSpec::preset("harbour").unwrap();
        s.origin = Some(Origin {
            latitude_deg: 53.5,
            longitude_deg: 9.9,
            depth_m: 0.0,
            heading_deg: 30.0,
        });
        s.other_arrays = vec![OtherArray {
            name: "north".into(),
            at_m: [40.0, -5.0, 0.0],
            sensors_m: None,
            seed: None,
        }];
        s
    }

    /// The other array hears each source where the scene has it, moved by where it sits; its
    /// origin is the scene's moved there, its noise its own.
    #[test]
    fn another_array_hears_the_scene_moved() {
        let s = site();
        assert_eq!(s.validate(), Ok(()));
        let b = s.heard_by(&s.other_arrays[0]);
        assert_ne!(b.seed, s.seed);
        assert!(b.other_arrays.is_empty());
        for t in [0.0, 5.0, 11.0] {
            let (p, q) = (s.sources[0].path.position(t), b.sources[0].path.position(t));
            for k in 0..3 {
                assert!((q[k] + s.other_arrays[0].at_m[k] - p[k]).abs() < 1e-9);
            }
        }
        let (o, ob) = (s.origin.unwrap(), b.origin.unwrap());
        let back = ob.local(&o.geodetic([0.0; 3]));
        for k in 0..2 {
            assert!(
                (back[k] + s.other_arrays[0].at_m[k]).abs() < 1e-3,
                "{back:?}"
            );
        }
        assert_eq!(ob.heading_deg, 30.0);
    }

    #[test]
    fn other_arrays_are_checked() {
        type Spoil = fn(&mut SceneSpec);
        let cases: [(Spoil, &str); 5] = [
            (|s| s.origin = None, "needs [origin]"),
            (|s| s.other_arrays[0].name = "a".into(), "is taken"),
            (|s| s.other_arrays[0].name = "x/y".into(), "must be 1-64"),
            (|s| s.other_arrays[0].at_m[1] = f64::NAN, "not finite"),
            (
                |s| s.other_arrays[0].sensors_m = Some(vec![[0.0; 3]]),
                "other_array 0 (north): 1 sensors",
            ),
        ];
        for (spoil, want) in cases {
            let mut s = site();
            spoil(&mut s);
            let e = s.validate().unwrap_err();
            assert!(e.contains(want), "{e} (wanted {want})");
        }
    }
}
