//! The `human-plus` command.

fn main() {
    println!("human-plus {}", env!("CARGO_PKG_VERSION"));
}
