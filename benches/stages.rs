//! `cargo bench`: the same stage timings as `sonotrack bench --quick`, on every backend that is
//! available (the full grids are `sonotrack bench`).

fn main() {
    let opts = sonotrack::bench::BenchOptions {
        backend: sonotrack::gpu::BackendChoice::Auto,
        gcc: true,
        pf: true,
        tbd: false,
        live: true,
        quick: true,
        budget_s: 0.5,
        replay: None,
        replay_particles: 0,
        channels: Vec::new(),
        frames: Vec::new(),
        pf_particles: Vec::new(),
        models: Vec::new(),
        live_rate_hz: 48_000,
    };
    match sonotrack::bench::run(&opts) {
        Ok(rows) => sonotrack::bench::print(&rows),
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}
