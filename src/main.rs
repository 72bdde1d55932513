//! The `sonotrack` command line (see [`cli`]).

mod cli;

use std::process::ExitCode;

use clap::Parser;

use sonotrack::error::Error;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let level = if cli.quiet {
        log::LevelFilter::Warn
    } else if cli.verbose > 0 {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    // Logging is best effort: a second logger (tests) is not an error.
    let _ = simple_logger::SimpleLogger::new().with_level(level).init();
    cli::set_quiet(cli.quiet);
    // Run the command on a rayon worker: its parallel stages (GCC pairs, filter chunks,
    // resampling blocks) then start on a thread of the pool instead of handing each stage to
    // the pool and sleeping until it comes back: two thread wake-ups per stage, about 13 % of
    // a CPU replay's time.
    match rayon::scope(|_| cli::dispatch(cli.cmd)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                Error::Config(_) | Error::Usage(_) | Error::Scene { .. } | Error::Wav { .. } => {
                    ExitCode::from(2)
                }
                _ => ExitCode::from(1),
            }
        }
    }
}
