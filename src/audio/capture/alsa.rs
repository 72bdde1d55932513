//! Live capture through cpal on ALSA (cargo feature `capture`; [`super::stub`] stands in when the
//! feature is off).
//!
//! The device is opened by its ALSA name (`hw:1,0`, `plughw:CARD=X,DEV=0`, `default`, or a PCM
//! defined in an asoundrc) with the configured channel count, rate, sample format and a fixed
//! period. The callback (see `callback.rs`) only converts samples into the lock-free ring; the
//! worker reads them through [`AudioSource`], where over-runs and ring overflows arrive as gaps.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};

use super::{CaptureSettings, RT_PRIORITY};
use crate::audio::callback::CallbackState;
use crate::audio::ring::{Consumer, Pop, RingStats, ring};
use crate::audio::{AudioSource, ReadResult, SampleFormat};
use crate::error::{Error, Result};

pub struct CaptureSource {
    consumer: Consumer,
    stats: Arc<RingStats>,
    _stream: cpal::Stream,
    channels: usize,
    rate: u32,
    name: String,
    /// The real-time priority outcome has been logged.
    reported_rt: bool,
}

fn device_error(name: &str, problem: String) -> Error {
    Error::Audio {
        device: name.into(),
        problem,
        fix: "check the name with `sonotrack devices` (ALSA names such as hw:1,0, plughw:CARD=X,DEV=0 or default), that the device is not busy, and that the user is in the `audio` group".into(),
    }
}

/// Capture devices: (ALSA name, description).
pub fn list_devices() -> Vec<(String, String)> {
    let host = cpal::default_host();
    let Ok(devs) = host.input_devices() else {
        return Vec::new();
    };
    devs.filter_map(|d| {
        let id = d.id().ok()?;
        let desc = d
            .description()
            .map(|x| x.name().to_string())
            .unwrap_or_default();
        Some((id.id().to_string(), desc))
    })
    .collect()
}

/// Supported capture configurations of a device, as text lines.
pub fn describe_device(name: &str) -> Vec<String> {
    let host = cpal::default_host();
    let id = cpal::DeviceId::new(cpal::HostId::Alsa, name);
    let Some(dev) = host.device_by_id(&id) else {
        return vec!["not found".into()];
    };
    match dev.supported_input_configs() {
        Ok(cfgs) => {
            // One line per sample format: channel and rate ranges.
            let mut by_format: std::collections::BTreeMap<String, (u16, u16, u32, u32)> =
                std::collections::BTreeMap::new();
            for c in cfgs {
                let e = by_format
                    .entry(format!("{:?}", c.sample_format()))
                    .or_insert((u16::MAX, 0, u32::MAX, 0));
                e.0 = e.0.min(c.channels());
                e.1 = e.1.max(c.channels());
                e.2 = e.2.min(c.min_sample_rate());
                e.3 = e.3.max(c.max_sample_rate());
            }
            by_format
                .iter()
                .filter(|(f, _)| matches!(f.as_str(), "I16" | "I32" | "F32"))
                .map(|(f, (c0, c1, r0, r1))| format!("{f}: {c0}-{c1} channels, {r0}-{r1} Hz"))
                .collect()
        }
        Err(e) => vec![format!("cannot query: {e}")],
    }
}

impl CaptureSource {
    /// Open and start the configured device.
    pub fn open(cfg: &CaptureSettings) -> Result<Self> {
        let name = cfg.device.clone();
        let host = cpal::default_host();
        let id = cpal::DeviceId::new(cpal::HostId::Alsa, &name);
        let dev = host.device_by_id(&id).ok_or_else(|| {
            let known: Vec<String> = list_devices().into_iter().map(|d| d.0).collect();
            device_error(
                &name,
                format!(
                    "no such capture device (known: {})",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?;
        let channels = cfg.channels;
        let rate = cfg.sample_rate_hz;
        let period = cfg.period_frames;
        let stream_cfg = cpal::StreamConfig {
            channels: channels as u16,
            sample_rate: rate,
            buffer_size: cpal::BufferSize::Fixed(period),
        };
        let ring_frames = ((cfg.ring_seconds * f64::from(rate)) as usize).max(4 * period as usize);
        let (producer, consumer, stats) = ring(ring_frames, channels);
        let mut state = CallbackState::new(
            producer,
            channels,
            f64::from(rate),
            period,
            Some(RT_PRIORITY),
        );
        let err_stats = stats.clone();
        // The error callback runs on the audio thread too: atomics only.
        let on_error = move |e: cpal::Error| {
            if e.kind() == cpal::ErrorKind::Xrun {
                err_stats.xruns.fetch_add(1, Ordering::Relaxed);
            } else {
                err_stats.device_error.store(true, Ordering::Relaxed);
            }
        };
        let built = match cfg.sample_format {
            SampleFormat::I16 => dev.build_input_stream::<i16, _, _>(
                stream_cfg,
                move |data, info| state.on_data(data, capture_ns(info)),
                on_error,
                None,
            ),
            SampleFormat::I32 => dev.build_input_stream::<i32, _, _>(
                stream_cfg,
                move |data, info| state.on_data(data, capture_ns(info)),
                on_error,
                None,
            ),
            SampleFormat::F32 => dev.build_input_stream::<f32, _, _>(
                stream_cfg,
                move |data, info| state.on_data(data, capture_ns(info)),
                on_error,
                None,
            ),
        };
        let stream = built.map_err(|e| {
            device_error(
                &name,
                format!(
                    "cannot capture {channels} channels at {rate} Hz as {:?} with {period}-frame periods: {e} (supported: {})",
                    cfg.sample_format,
                    describe_device(&name).join("; ")
                ),
            )
        })?;
        stream
            .play()
            .map_err(|e| device_error(&name, format!("cannot start: {e}")))?;
        log::info!(
            "capturing from {name}: {channels} ch at {rate} Hz, {:?}, {period}-frame periods, ring {ring_frames} frames",
            cfg.sample_format
        );
        Ok(Self {
            consumer,
            stats,
            _stream: stream,
            channels,
            rate,
            name,
            reported_rt: false,
        })
    }
}

fn capture_ns(info: &cpal::InputCallbackInfo) -> Option<u128> {
    Some(info.timestamp().capture.as_nanos())
}

impl AudioSource for CaptureSource {
    fn describe(&self) -> String {
        format!("ALSA device {}", self.name)
    }

    fn sample_rate_hz(&self) -> u32 {
        self.rate
    }

    fn channels(&self) -> usize {
        self.channels
    }

    fn total_frames(&self) -> Option<u64> {
        None
    }

    fn read(&mut self, out: &mut [f32]) -> Result<ReadResult> {
        if !self.reported_rt {
            match self.stats.rt_priority.load(Ordering::Relaxed) {
                1 => {
                    log::info!("audio thread: real-time priority {RT_PRIORITY} (SCHED_FIFO)");
                    self.reported_rt = true;
                }
                2 => {
                    log::warn!(
                        "audio thread: real-time priority refused ({}); running at normal priority. Allow it with LimitRTPRIO= in the unit or an rtprio limit in /etc/security/limits.d",
                        std::io::Error::from_raw_os_error(
                            self.stats.rt_errno.load(Ordering::Relaxed) as i32
                        )
                    );
                    self.reported_rt = true;
                }
                _ => {}
            }
        }
        if self.stats.device_error.load(Ordering::Relaxed) {
            return Err(device_error(
                &self.name,
                "the device reported an error (unplugged, or the stream broke)".into(),
            ));
        }
        Ok(match self.consumer.pop(out) {
            Pop::Samples(n) => ReadResult::Samples(n / self.channels),
            Pop::Gap(g) => ReadResult::Gap(g),
            Pop::Empty => ReadResult::Idle,
        })
    }

    fn is_live(&self) -> bool {
        true
    }
}
