use clap::Parser;
use std::process::ExitCode;
use workroom::{cli, output::BrokenPipe};

fn main() -> ExitCode {
    workroom::heap::tune();
    let args = cli::Args::parse();
    workroom::logs::init();
    match cli::run(args) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) if e.is::<BrokenPipe>() => ExitCode::SUCCESS,
        Err(e) => {
            // The whole chain on one line: each cause adds what the one before lacks.
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("workroom: {}", chain.join(": "));
            ExitCode::from(2)
        }
    }
}
