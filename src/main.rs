use std::process::ExitCode;

fn main() -> ExitCode {
    workroom::heap::tune();
    workroom::cli::main()
}
