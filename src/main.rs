fn main() {
    println!("workroom {} (daemon {} bytes)", env!("CARGO_PKG_VERSION"), workroom::EMBEDDED_DAEMON.len());
}
