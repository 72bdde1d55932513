//! Scene directories written by `sonotrack simulate`: audio, array.json, truth.csv, meta.json and
//! the scene itself as scene.toml.

use std::path::Path;

use super::{SceneSpec, SimSource};
use crate::audio::wav::WavWriter;
use crate::error::{Error, IoContext, Result};

/// Write a scene directory: audio.wav (32-bit float, or audio_s16.wav), array.json, truth.csv,
/// meta.json and the scene spec as scene.toml.
pub fn write_scene(dir: &Path, spec: &SceneSpec, s16: bool) -> Result<()> {
    let wav_path = dir.join(if s16 { "audio_s16.wav" } else { "audio.wav" });
    check_wav_size(&wav_path, spec, s16)?;
    std::fs::create_dir_all(dir).at(dir)?;
    let mut sim = SimSource::new(spec.clone())?;
    let truth = sim.truth();
    let ch = spec.sensors_m.len();
    let fs = spec.sample_rate_hz;
    let mut w = WavWriter::create(&wav_path, ch, fs, s16)?;
    let mut buf = vec![0.0f32; ch * 8192];
    loop {
        let n = sim.generate(&mut buf);
        if n == 0 {
            break;
        }
        w.write(&buf[..n * ch])?;
    }
    w.finish()?;

    // What the tracker is told: the array with the scene's description errors, if any.
    let (told_sensors, told_c) = spec.told_array();
    let mut array = serde_json::json!({
        "sample_rate": fs,
        "speed_of_sound": told_c,
        "sensors": told_sensors,
        "description": spec.description,
    });
    if let (Some(lo), Some(hi), None) = (spec.bounds_min_m, spec.bounds_max_m, spec.array_turn) {
        array["search_bounds"] = serde_json::json!({"min": lo, "max": hi});
    }
    if let Some(n) = spec.plane_normal() {
        array["plane_normal"] = serde_json::json!(n);
    }
    if let Some(o) = &spec.origin {
        array["origin"] = serde_json::json!(o);
    }
    if let Some(h) = sim.spec().headings() {
        let path = dir.join("heading.csv");
        std::fs::write(&path, h.to_csv()).at(&path)?;
    }
    let array_path = dir.join("array.json");
    std::fs::write(
        &array_path,
        serde_json::to_string_pretty(&array).unwrap_or_default(),
    )
    .at(&array_path)?;

    let mut csv = String::from("t,target,x,y,z\n");
    for (t, i, p) in &truth {
        csv.push_str(&format!("{t:.3},{i},{:.4},{:.4},{:.4}\n", p[0], p[1], p[2]));
    }
    let truth_path = dir.join("truth.csv");
    std::fs::write(&truth_path, csv).at(&truth_path)?;

    let meta = serde_json::json!({
        "generator": format!("sonotrack {} simulate", env!("CARGO_PKG_VERSION")),
        "n_channels": ch,
        "sample_rate": fs,
        "duration_s": spec.duration_s,
        "n_targets": spec.sources.len(),
        "snr_db_target": spec.snr_db,
        "snr_definition": "per-channel broadband SNR: signal power in 1-s blocks / white sensor-noise power over the full 0..fs/2 band; the median over all blocks and channels meets the target",
        "propagation": if spec.room.is_some() {
            "shoebox room: direct path by exact retarded time (Doppler), 1/r spreading, Kaiser-sinc fractional delay; reflections by image sources (Eyring absorption) with a diffuse tail; truth t is emission time"
        } else {
            "free field, exact retarded time (Doppler), 1/r spreading, Kaiser-sinc fractional delay; truth t is emission time"
        },
        "true_sensors": spec.sensors_m,
        "true_speed_of_sound": spec.speed_of_sound_m_s,
        "clicks": sim.clicks(),
    });
    let meta_path = dir.join("meta.json");
    std::fs::write(
        &meta_path,
        serde_json::to_string_pretty(&meta).unwrap_or_default(),
    )
    .at(&meta_path)?;
    let spec_path = dir.join("scene.toml");
    std::fs::write(&spec_path, toml::to_string_pretty(spec).unwrap_or_default()).at(&spec_path)?;
    Ok(())
}

/// A RIFF WAV's sizes are 32-bit: refuse a scene whose audio would not fit before generating it.
fn check_wav_size(wav_path: &Path, spec: &SceneSpec, s16: bool) -> Result<()> {
    let bytes_per_sample = if s16 { 2.0 } else { 4.0 };
    let bytes = spec.duration_s
        * f64::from(spec.sample_rate_hz)
        * spec.sensors_m.len() as f64
        * bytes_per_sample;
    // The header's 44 bytes and hound's own check leave a little under 4 GiB for the data.
    let limit = f64::from(u32::MAX) - 1024.0;
    if bytes > limit {
        return Err(Error::Scene {
            path: wav_path.into(),
            problem: format!(
                "the audio would be {:.2} GB, more than a WAV file holds (4.29 GB)",
                bytes / 1e9
            ),
            fix: format!(
                "shorten duration_s, lower sample_rate_hz or use fewer sensors{}",
                if s16 {
                    ""
                } else {
                    ", or write 16-bit audio with --s16 (half the size)"
                }
            ),
        });
    }
    Ok(())
}
