//! One module per subcommand, each with an `Args` struct and `run`.

/// `writeln!` into a `String` (which cannot fail).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

pub mod compile;
pub mod frontend;
pub mod inspect;
pub mod plan;
pub mod planning;
pub mod run;
pub mod verify;

/// Prints `text` to stdout; a closed pipe (`stow inspect | head`) is not an error.
pub fn emit(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
