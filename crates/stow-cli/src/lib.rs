//! The pieces behind the `stow` binary that tests and tools use: the
//! layout pictures. The compile pipeline itself is the `stow-compile`
//! library.

pub mod picture;
