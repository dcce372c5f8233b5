fn main() {
    eprintln!("workroomd {}: no subcommand yet", workroomd::VERSION);
    std::process::exit(2);
}
