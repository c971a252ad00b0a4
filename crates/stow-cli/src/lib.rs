//! The pieces behind the `stow` binary that tests, tools and the Python
//! package use: the layout pictures and the object `stow inspect --json`
//! prints. The compile pipeline itself is the `stow-compile` library.

pub mod inspect;
pub mod picture;
