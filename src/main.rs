use clap::Parser;
use std::process::ExitCode;
use workroom::{cli, output::BrokenPipe};

fn main() -> ExitCode {
    workroom::heap::tune();
    let mut words = std::env::args_os();
    if words.next().is_some_and(|argv0| cli::devcontainer::is_face(&argv0)) {
        // Run through a link named `devcontainer`: the reference CLI's command lines.
        workroom::logs::init();
        let words = words.map(|w| w.to_string_lossy().into_owned()).collect();
        return ExitCode::from(cli::devcontainer::main(words).clamp(0, 255) as u8);
    }
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
